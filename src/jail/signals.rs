//! The signals the launcher and the jail's PID 1 take through a signalfd and pass on to the
//! command, and the terminals the launcher found: what the launch, PID 1 and the command's
//! start share, below all three (they import each other otherwise).

use nix::sys::signal::{SigSet, Signal};

/// Signals PID 1 passes on to the command.
pub const FORWARDED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGWINCH,
    Signal::SIGCONT,
    Signal::SIGTSTP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The signals the launcher and the jail's PID 1 handle through a signalfd.
pub fn served_signals() -> SigSet {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    for s in FORWARDED {
        mask.add(*s);
    }
    mask
}

/// Which of stdin/stdout/stderr the launcher found to be terminals (pty mode replaces those).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtyFds(pub [bool; 3]);

impl TtyFds {
    pub fn any(&self) -> bool {
        self.0.iter().any(|b| *b)
    }
}
