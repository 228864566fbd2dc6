//! agent-sandbox's process mechanics, on libc alone: the system calls about scheduling and
//! memory, descriptors, process descriptors and starting programs that the launcher's
//! processes (the jail's init, the cleanup waiter, the network supervisor, the terminal
//! relay), the chaperon and the stub make alike, and threads on stacks of their own. Each
//! `unsafe` of that kind is here, once, with its test.

pub mod fd;
pub mod file;
pub mod memory;
pub mod pidfd;
pub mod process;
pub mod sched;
pub mod signal;
pub mod socket_path;
pub mod spawn;
pub mod thread;
