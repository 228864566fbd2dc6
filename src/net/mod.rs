//! Supervisor-side networking. For now only the tables every mode shares (the port floor);
//! the userspace stack, proxies and DNS arrive with the network work.

pub mod floor;
pub mod matcher;
pub mod peek;
