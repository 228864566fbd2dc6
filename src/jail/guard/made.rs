//! The symlinks the jail made where something outside follows them (the trees and state
//! entries `LinkPlan::covers`), as the guard carried out each call: where each came to be,
//! and where a directory's move took it. Once the session has ended, the launcher's exit
//! check (`jail::links::sweep`) looks at these paths only instead of walking every tree the
//! jail wrote: on a network filesystem a walk of a project is a round trip per directory (a
//! researcher's project: thousands), the list a few per link made.
//!
//! A superset is harmless (the check looks at what is there, made since the session began);
//! a link left out is not: the list says it is incomplete, and the launcher walks, whenever
//! it cannot follow (more than `MAX_RECORDED` paths, a directory arriving from a place not
//! covered).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Paths kept at most; past them the list is incomplete (the launcher walks).
pub const MAX_RECORDED: usize = 50_000;

struct Made {
    paths: BTreeSet<PathBuf>,
    complete: bool,
}

static MADE: Mutex<Made> = Mutex::new(Made { paths: BTreeSet::new(), complete: true });

fn made() -> std::sync::MutexGuard<'static, Made> {
    MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Made {
    fn add(&mut self, p: PathBuf) {
        // A path past PATH_MAX cannot be looked at by name, nor sent whole.
        if self.paths.len() >= MAX_RECORDED || p.as_os_str().len() >= libc::PATH_MAX as usize {
            self.complete = false;
        } else {
            self.paths.insert(p);
        }
    }
}

/// A symlink (or a second name of one) at `p`.
pub fn link(p: PathBuf) {
    made().add(p);
}

/// A directory moved from `from` to `to` (and, in an exchange, `to` to `from`): the links
/// recorded below it are where it went now, and may still be where they were (the move
/// could fail): both are kept.
pub fn moved(from: &Path, to: &Path, exchange: bool) {
    let mut m = made();
    let add = |m: &mut Made, a: &Path, b: &Path| {
        // Below `a`, in the set's order: `a` itself, then everything under it, then what
        // sorts after (a sibling whose name extends `a`'s sorts after its whole subtree).
        let below: Vec<PathBuf> = m
            .paths
            .range(a.to_path_buf()..)
            .take_while(|p| p.starts_with(a))
            .filter_map(|p| p.strip_prefix(a).ok().map(|rest| b.join(rest)))
            .collect();
        below.into_iter().for_each(|p| m.add(p));
    };
    add(&mut m, from, to);
    if exchange {
        add(&mut m, to, from);
    }
}

/// A directory that came from a place the list does not cover: what it holds was not
/// recorded.
pub fn unrecorded() {
    made().complete = false;
}

/// The paths recorded, or None if the list is incomplete. The caller holds the guard's gate
/// for good: no call the guard carries out after this goes unrecorded.
pub(super) fn take() -> Option<Vec<PathBuf>> {
    let mut m = made();
    let paths = std::mem::take(&mut m.paths);
    m.complete.then(|| paths.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for the process-wide list (tests run on threads of one process).
    #[test]
    fn links_are_recorded_where_they_are_made_and_where_their_directories_move() {
        link("/p/a/l".into());
        link("/p/a/b/k".into());
        link("/p/a-sibling/s".into());
        link("/p/ab".into());
        moved(Path::new("/p/a"), Path::new("/p/z/a2"), false);
        moved(Path::new("/p/x"), Path::new("/p/y"), true);
        let got = take().expect("complete");
        let want: Vec<PathBuf> = ["/p/a-sibling/s", "/p/a/b/k", "/p/a/l", "/p/ab", "/p/z/a2/b/k", "/p/z/a2/l"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        let mut want_sorted = want.clone();
        want_sorted.sort();
        assert_eq!(got_sorted, want_sorted);
        // An exchange maps both ways.
        link("/p/e1/l".into());
        link("/p/e2/m".into());
        moved(Path::new("/p/e1"), Path::new("/p/e2"), true);
        let mut got = take().expect("complete");
        got.sort();
        let want: Vec<PathBuf> = ["/p/e1/l", "/p/e1/m", "/p/e2/l", "/p/e2/m"].iter().map(PathBuf::from).collect();
        assert_eq!(got, want);
        // Past the bound, or after a directory from an uncovered place: incomplete.
        unrecorded();
        assert_eq!(take(), None);
        made().complete = true;
        for i in 0..=MAX_RECORDED {
            link(PathBuf::from(format!("/p/n{i}")));
        }
        assert_eq!(take(), None, "past MAX_RECORDED the list must say it is incomplete");
        made().complete = true;
    }
}
