//! Whether a session ran alone: no other session of the user (of any project, any backend,
//! a job's on a node sharing the state directory) ran at any time during it. The exit check
//! of links may leave its walk out only then (`links::sweep`): a link another session makes
//! at the same time, harmless as it is made, can come to lead into a hidden path through what
//! this one does without making a link (a directory renamed onto a name the link passes
//! through, a symlink removed: outside look at the walk's skip, F1 and F2).
//!
//! Every session holds `<state>/sessions/running` shared from before its command starts to
//! its end, and adds a byte to it as it starts. One that could take it exclusively as it
//! started, and can again at its end, with no byte added since its own, ran alone. A session
//! that started alone empties it first, so it stays small.

use agent_sandbox_sys::file::flock;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A session's hold on the running file.
pub struct Running {
    file: File,
    /// The file's size once this session's byte was added, if it started alone.
    alone_at: Option<u64>,
}

impl Running {
    /// Joins the sessions running. None if the file cannot be used: then the session is not
    /// known to have run alone (and another cannot see this one: it walks, as every session
    /// that cannot tell does).
    pub fn join(state_dir: &Path) -> Option<Running> {
        let dir = state_dir.join("sessions");
        agent_sandbox_sys::file::make_dir(&dir, 0o700).ok()?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join("running"))
            .ok()?;
        let alone = flock(&file, libc::LOCK_EX | libc::LOCK_NB).is_ok();
        if alone {
            file.set_len(0).ok()?;
        }
        std::io::Write::write_all(&mut &file, b".").ok()?;
        // Alone, the file holds this byte only (no `stat` to learn it: a round trip on NFS);
        // the size is not looked at otherwise.
        let size = 1;
        // Shared from here to the end (the change is not atomic: a session that takes it
        // exclusively in between empties the file, and this one sees its size moved).
        if flock(&file, libc::LOCK_SH).is_err() {
            return None;
        }
        Some(Running { file, alone_at: alone.then_some(size) })
    }

    /// Whether no other session ran at any time since `join`: none was running then, none
    /// is now, and none started in between.
    pub fn ran_alone(&self) -> bool {
        let Some(size) = self.alone_at else { return false };
        let same = self.file.metadata().is_ok_and(|m| m.len() == size);
        same && flock(&self.file, libc::LOCK_EX | libc::LOCK_NB).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a process of its own: a child another test forks meanwhile holds the file's lock
    /// too, as another session would.
    #[test]
    fn a_session_ran_alone_only_if_no_other_ran_at_any_time_during_it() {
        let status = crate::jail::test_fork::in_child(|| {
            sessions_one_after_another_and_together();
            0
        });
        assert!(matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)), "{status:?} (its panic above)");
    }

    fn sessions_one_after_another_and_together() {
        let d = tempfile::tempdir().expect("tempdir");
        let state = d.path();
        let a = Running::join(state).expect("join");
        assert!(a.ran_alone(), "nobody else");
        drop(a);
        // Another running at the start.
        let b = Running::join(state).expect("join");
        let c = Running::join(state).expect("join");
        drop(b);
        assert!(!c.ran_alone(), "b was running when c started");
        drop(c);
        // Another running at the end.
        let e = Running::join(state).expect("join");
        let f = Running::join(state).expect("join");
        assert!(!e.ran_alone(), "f is running");
        drop(f);
        drop(e);
        // Another that started and ended in between.
        let g = Running::join(state).expect("join");
        drop(Running::join(state).expect("join"));
        assert!(!g.ran_alone(), "one ran in between");
        drop(g);
        let h = Running::join(state).expect("join");
        assert!(h.ran_alone());
        assert!(std::fs::metadata(state.join("sessions/running")).expect("running").len() <= 1, "emptied");
    }
}
