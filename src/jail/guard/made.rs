//! Whether the jail made a symlink where something outside follows it (the trees and state
//! entries `LinkPlan::covers`): a symlink, a second name of one, or one renamed onto a name
//! there, as the guard carried each out, or a directory arriving there from a place not
//! covered (which may hold links the guard never saw made).
//!
//! A session that made none changed no link's way: the links there are the ones it found
//! (but those it removed), and a directory's move to another directory is judged with every
//! link below it as it moves (`emulate::moved_dir`). So the launcher's exit check
//! (`jail::links::sweep`) walks the trees only after a session that made one: on a network
//! filesystem a walk of a project is a round trip per directory. It does not look only at the
//! links made: one made by another session at the same time can come to lead elsewhere
//! through a link this one made (outside look at the list of links, F1), which only a walk
//! finds.

use std::sync::atomic::{AtomicBool, Ordering};

static MADE: AtomicBool = AtomicBool::new(false);

/// A symlink (or a second name of one), or a directory from where the guard does not look.
pub fn link() {
    MADE.store(true, Ordering::SeqCst);
}

/// Whether none was made. The caller holds the guard's gate for good: no call the guard
/// carries out after this goes uncounted.
pub(super) fn none() -> bool {
    !MADE.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for the process-wide flag (tests run on threads of one process).
    #[test]
    fn a_link_made_is_remembered() {
        MADE.store(false, Ordering::SeqCst);
        assert!(none());
        link();
        assert!(!none());
        MADE.store(false, Ordering::SeqCst);
    }
}
