//! The destination rules every network mode shares, and the jail's network layout: the
//! port and address floors, the matcher of allow/block rules (names, wildcards, CIDRs,
//! ports), the jail's addresses and proxy ports, the jail's resolv.conf. Pure: the plan
//! decides with it, the supervisor (`net/`) enforces with it; it knows neither.

pub mod addr;
pub mod floor;
pub mod matcher;
pub mod resolv;
