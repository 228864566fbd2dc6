//! A server started on demand behind a descriptor the launcher watches: the session's Slurm
//! chaperon, started when the first Slurm command knocks on its door (most sessions never
//! do), started again if it ends while the session goes on, and given up on after too many
//! ends, with the door closed so that every later stub fails at once instead of waiting.

use nix::poll::PollFlags;
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// How many starts within `WINDOW` before the launcher gives up: a chaperon that cannot
/// start, or dies at every call, must not be restarted in a loop.
const MAX_STARTS: usize = 5;
const WINDOW: Duration = Duration::from_secs(60);
/// The exit status of a server that closed its door for the session (the chaperon, after
/// its channel was flooded with garbage): it is not started again.
pub const CLOSED_FOR_GOOD: i32 = 3;

pub struct Lazy<'a> {
    /// The launcher's copy of the door; None once given up (closed: stubs fail at once).
    door: Option<OwnedFd>,
    /// Starts the server on the door; its pid, or None if it could not be started.
    start: &'a mut dyn FnMut(BorrowedFd<'_>) -> Option<Pid>,
    /// The Landlock backend's command inherits this descriptor (its end of the chaperon's
    /// channel) at the plan's `slurm_fd`; the launcher closes its own copy once it has forked.
    pub inherit: Option<OwnedFd>,
    running: Option<Pid>,
    starts: Vec<Instant>,
}

impl<'a> Lazy<'a> {
    pub fn new(
        door: OwnedFd,
        start: &'a mut dyn FnMut(BorrowedFd<'_>) -> Option<Pid>,
        inherit: Option<OwnedFd>,
    ) -> Lazy<'a> {
        Lazy { door: Some(door), start, inherit, running: None, starts: vec![] }
    }

    /// The descriptor to watch now: the door, while nothing serves it.
    pub fn watched(&self) -> Option<BorrowedFd<'_>> {
        self.door.as_ref().filter(|_| self.running.is_none()).map(|d| d.as_fd())
    }

    /// The watched door became ready (`revents`): a knock starts the server; a door whose
    /// other side hung up with nothing queued (the Landlock channel after the session's last
    /// process) is closed.
    pub fn ready(&mut self, revents: PollFlags) {
        if self.running.is_some() {
            return;
        }
        if !revents.contains(PollFlags::POLLIN) {
            self.door = None;
            return;
        }
        let Some(door) = &self.door else { return };
        self.starts.retain(|t| t.elapsed() < WINDOW);
        if self.starts.len() >= MAX_STARTS {
            eprintln!(
                "agent-sandbox: the Slurm chaperon ended {MAX_STARTS} times within a minute; Slurm is unavailable \
                 for the rest of this session (the audit log has its calls; `agent-sandbox doctor` checks Slurm)"
            );
            self.door = None;
            return;
        }
        self.starts.push(Instant::now());
        self.running = (self.start)(door.as_fd());
        if self.running.is_none() {
            self.door = None;
        }
    }

    /// A child of the launcher ended: if it was the server, the door is watched again, so
    /// the next knock starts a new one (a stub already waiting is the knock).
    pub fn ended(&mut self, pid: Pid) {
        self.ended_with(pid, None);
    }

    /// `ended`, knowing the exit status: a server that closed its door for good is not
    /// started again (the door is closed: every later stub fails at once).
    pub fn ended_with(&mut self, pid: Pid, status: Option<i32>) {
        if self.running == Some(pid) {
            if status == Some(CLOSED_FOR_GOOD) {
                eprintln!(
                    "agent-sandbox: the Slurm channel was flooded with garbage from inside the jail; Slurm is \
                     unavailable for the rest of this session (see the audit log)"
                );
                self.door = None;
            }
            self.running = None;
        }
    }

    /// The server's pid while it runs, for a wait loop that reaps by pid.
    pub fn running(&self) -> Option<Pid> {
        self.running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn door() -> OwnedFd {
        let (a, _b) = nix::unistd::pipe().unwrap();
        a
    }

    #[test]
    fn a_server_that_ends_is_started_again_on_the_next_knock_and_given_up_on_after_five() {
        let mut started = 0;
        let mut start = |_: BorrowedFd<'_>| {
            started += 1;
            Some(Pid::from_raw(100 + started))
        };
        let mut lazy = Lazy::new(door(), &mut start, None);
        for n in 1..=5 {
            assert!(lazy.watched().is_some(), "the door is watched before start {n}");
            lazy.ready(PollFlags::POLLIN);
            assert!(lazy.watched().is_none(), "a running server serves the door itself");
            lazy.ended(Pid::from_raw(1));
            assert!(lazy.watched().is_none(), "another child's end changes nothing");
            lazy.ended(lazy.running().unwrap());
        }
        lazy.ready(PollFlags::POLLIN);
        assert!(lazy.watched().is_none() && lazy.running().is_none(), "closed after five starts in a minute");
        drop(lazy);
        assert_eq!(started, 5);
    }

    #[test]
    fn a_server_that_cannot_start_or_a_hung_up_door_closes_the_door() {
        let mut start = |_: BorrowedFd<'_>| None;
        let mut lazy = Lazy::new(door(), &mut start, None);
        lazy.ready(PollFlags::POLLIN);
        assert!(lazy.watched().is_none());
        let mut start = |_: BorrowedFd<'_>| Some(Pid::from_raw(7));
        let mut lazy = Lazy::new(door(), &mut start, None);
        lazy.ready(PollFlags::POLLHUP);
        assert!(lazy.watched().is_none() && lazy.running().is_none());
    }
}
