//! The plan's view of the host, read ahead: while the launcher loads the policy and readies
//! the state directory (round trips to the home's server, one after another), a thread of its
//! own reads what every plan asks of the project and the home: their listings, the project's
//! repository and direnv files, the walk for nested ones. On a network filesystem these are
//! some fifty round trips; side by side with the policy's, they no longer add up (issue 35).
//!
//! The view is the plan's only if it is still true: it is dropped when the project it read is
//! not the one the launch checked, or when taking the session locks removed an earlier
//! session's placeholders (names the listings may still show). The plan then reads afresh, as
//! it did before.

use crate::host::{HostFacts, RealFs};
use std::path::{Path, PathBuf};

/// Directories of the home listed too: see `read`.
pub const LISTED_DEEPER: [&str; 3] = [".local", ".local/share", ".local/state"];

/// A read-ahead under way (`start`), or none.
pub struct ReadAhead(Option<std::thread::JoinHandle<Option<(PathBuf, RealFs)>>>);

impl ReadAhead {
    /// No view read ahead (a job's task, a dry run): the plan reads its own.
    pub fn none() -> ReadAhead {
        ReadAhead(None)
    }

    /// Starts reading, for a launch in the project `asked` (as the user named it). A thread
    /// that cannot start reads nothing.
    pub fn start(facts: &HostFacts, asked: &Path) -> ReadAhead {
        let facts = facts.clone();
        let asked = asked.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("plan-ahead".into())
            .stack_size(256 << 10)
            .spawn(move || read(&facts, &asked));
        ReadAhead(spawned.ok())
    }

    /// The view read ahead, if it read the project the launch checked (`project`, where it
    /// really is); waits for it to be done.
    pub fn view_of(self, project: &Path) -> Option<RealFs> {
        let (read, fs) = self.0?.join().ok()??;
        (read == project).then_some(fs)
    }
}

/// What the plan will ask first, asked now: the project checked as the launch checks it (a
/// project the launch refuses is not read), the listings the plan answers names from, and
/// what programs outside run from the project's repositories.
fn read(facts: &HostFacts, asked: &Path) -> Option<(PathBuf, RealFs)> {
    let fs = RealFs::default();
    let project = super::check_project_basics(facts, &fs, asked).ok()?;
    // The launch's listings (`launch::planned`), and where the plan asks a dozen names two
    // levels into the home (tools' data and state directories: `~/.local/share/uv`,
    // `~/.local/state/nvim`), most absent.
    let mut dirs = vec![facts.home_canonical.clone(), facts.home.clone(), project.clone()];
    dirs.extend([".config"].iter().chain(&LISTED_DEEPER).map(|d| facts.home_canonical.join(d)));
    fs.list_side_by_side(&dirs);
    // The project's repository and the walk for nested ones, side by side (each a chain of
    // round trips), the walk on a copy of the view, whose answers are taken back.
    let xdg = super::xdg_config(facts);
    let (home, xdg, inside) = (&facts.home, xdg.as_deref(), project.as_path());
    let side = fs.clone();
    let walk = move || {
        let (nested, _) = super::runs_outside::nested_dirs(&side, inside);
        for d in nested {
            super::runs_outside_of(&side, home, xdg, &d, inside);
        }
        side
    };
    let (walked, _) = crate::host::together(walk, || super::runs_outside_of(&fs, home, xdg, inside, inside));
    fs.absorb(walked);
    Some((project, fs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostFs;

    fn facts_for(home: &Path) -> HostFacts {
        let mut f = HostFacts::gather().expect("facts");
        f.home = home.to_path_buf();
        f.home_canonical = home.to_path_buf();
        f
    }

    #[test]
    fn the_view_is_the_plans_only_for_the_project_it_read() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = t.path().canonicalize().expect("canonical");
        let project = home.join("work");
        std::fs::create_dir_all(project.join("sub/.git")).expect("mkdir");
        std::fs::write(project.join("a.txt"), b"x").expect("write");
        let facts = facts_for(&home);
        let fs = ReadAhead::start(&facts, &project).view_of(&project).expect("the view of the project read");
        // What was read is answered from the view: a file made since is not in it, in the
        // project or in the directory the walk for nested repositories listed (on a thread of
        // its own, its answers taken back).
        std::fs::write(project.join("b.txt"), b"y").expect("write");
        std::fs::write(project.join("sub/c.txt"), b"z").expect("write");
        let names =
            |d: &Path| -> Vec<String> { fs.read_dir(d).iter().map(|n| n.to_string_lossy().into_owned()).collect() };
        assert_eq!(names(&project), ["a.txt", "sub"]);
        assert_eq!(names(&project.join("sub")), [".git"]);
        // Another project than the one read: no view.
        let other = home.join("other");
        std::fs::create_dir(&other).expect("mkdir");
        assert!(ReadAhead::start(&facts, &project).view_of(&other).is_none());
        // A project the launch refuses (the home itself) is not read.
        assert!(ReadAhead::start(&facts, &home).view_of(&home).is_none());
        assert!(ReadAhead::none().view_of(&project).is_none());
    }
}
