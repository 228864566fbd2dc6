//! Supervisor-side networking: the destination matcher and floors every mode shares, the
//! userspace stack behind `tun0` (`filtered`), the jail's resolver, and the supervisor loop.

pub mod addr;
pub mod dns;
pub mod floor;
pub mod matcher;
pub mod packet;
pub mod peek;
pub mod proxy;
pub mod stack;
pub mod supervisor;
pub mod udp;
