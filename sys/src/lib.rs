//! agent-sandbox's process mechanics, on libc alone: the system calls about scheduling and
//! memory that the launcher's processes (the jail's init, the cleanup waiter, the network
//! supervisor, the terminal relay) make alike. Each `unsafe` of that kind is here, once,
//! with its test.

pub mod memory;
pub mod sched;
