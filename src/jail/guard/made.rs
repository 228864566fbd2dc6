//! Whether the jail made a symlink where something outside follows it (the trees and state
//! entries `LinkPlan::covers`): a symlink, a second name of one, or one renamed onto a name
//! there, as the guard carried each out, or a directory arriving there from a place not
//! covered (which may hold links the guard never saw made).
//!
//! The launcher's exit check (`jail::links::sweep`) walks the trees for links made or moved
//! during the session (their ctime) that lead where they may not. After a session that made
//! none, with no other session of the user running meanwhile (`jail::running`), the walk
//! would find none but those the user made outside the jail: so it is left out then (on a
//! network filesystem a walk of a project is a round trip per directory). Another session
//! running is why "this one made none" is not enough: what this one does without making a
//! link (a directory renamed onto a name a link passes through, a symlink removed) can change
//! the way of a link the other made meanwhile, harmless as it was made (outside looks at the
//! skip, F1 and F2); and looking only at the links made would not be either: one made by
//! another session can come to lead elsewhere through a link this one made.

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
