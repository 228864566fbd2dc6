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

use crate::host::{RealFs, Who};
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

    /// Starts reading, for a launch of `who` in the project `asked` (as the user named it),
    /// as soon as the user's home is known: the rest of the host's facts are gathered
    /// meanwhile. `xdg_config`: `XDG_CONFIG_HOME` as the environment gives it. A thread that
    /// cannot start reads nothing.
    pub fn start(who: &Who, xdg_config: Option<&str>, asked: &Path) -> ReadAhead {
        ReadAhead::start_in(&who.home, &who.home_canonical, xdg_config, asked)
    }

    /// `start` for the home named `home` and really at `home_canonical` (a job's task, whose
    /// facts are gathered before its project is known).
    pub fn start_in(home: &Path, home_canonical: &Path, xdg_config: Option<&str>, asked: &Path) -> ReadAhead {
        let home = Home {
            named: home.to_path_buf(),
            canonical: home_canonical.to_path_buf(),
            xdg_config: super::xdg_config_of(xdg_config),
        };
        let asked = asked.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("plan-ahead".into())
            .stack_size(256 << 10)
            .spawn(move || read(&home, &asked));
        ReadAhead(spawned.ok())
    }

    /// The view read ahead, if it read the project the launch checked: `project`, where it
    /// really is, the directory `id` (its device and inode as the launch's check found it: a
    /// decoy shown at the path while the view was read is not taken for it, outside look at
    /// stop 47, F3). Waits for it to be done.
    pub fn view_of(self, project: &Path, id: Option<(u64, u64)>) -> Option<RealFs> {
        use crate::host::HostFs;
        let (read, fs) = self.0?.join().ok()??;
        (read == project && id.is_some() && fs.identity(project) == id).then_some(fs)
    }
}

/// The home as the plan names it (`HostFacts::home`, `home_canonical`) and git's config
/// directory in it.
struct Home {
    named: PathBuf,
    canonical: PathBuf,
    xdg_config: Option<PathBuf>,
}

/// What the plan will ask first, asked now: the project checked as the launch checks it (a
/// project the launch refuses is not read), the listings the plan answers names from, and
/// what programs outside run from the project's repositories.
fn read(home: &Home, asked: &Path) -> Option<(PathBuf, RealFs)> {
    let fs = RealFs::default();
    let project = super::project_basics(&home.canonical, &fs, asked).ok()?;
    // The launch's listings (`launch::planned`), and where the plan asks a dozen names two
    // levels into the home (tools' data and state directories: `~/.local/share/uv`,
    // `~/.local/state/nvim`), most absent.
    let mut dirs = vec![home.canonical.clone(), home.named.clone(), project.clone()];
    dirs.extend([".config"].iter().chain(&LISTED_DEEPER).map(|d| home.canonical.join(d)));
    fs.list_side_by_side(&dirs);
    // The project's repository and the walk for nested ones, side by side (each a chain of
    // round trips), the walk on a copy of the view, whose answers are taken back.
    let (named, xdg, inside) = (&home.named, home.xdg_config.as_deref(), project.as_path());
    let side = fs.clone();
    let walk = move || {
        let (nested, _) = super::runs_outside::nested_dirs(&side, inside);
        for d in nested {
            super::runs_outside_of(&side, named, xdg, &d, inside);
        }
        side
    };
    let (walked, _) = crate::host::together(walk, || super::runs_outside_of(&fs, named, xdg, inside, inside));
    fs.absorb(walked);
    Some((project, fs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostFs;

    fn who_for(home: &Path) -> Who {
        let mut w = Who::gather().expect("who");
        w.home = home.to_path_buf();
        w.home_canonical = home.to_path_buf();
        w
    }

    #[test]
    fn the_view_is_the_plans_only_for_the_project_it_read() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = t.path().canonicalize().expect("canonical");
        let project = home.join("work");
        std::fs::create_dir_all(project.join("sub/.git")).expect("mkdir");
        std::fs::write(project.join("a.txt"), b"x").expect("write");
        let who = who_for(&home);
        let id = |p: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(p).ok().map(|m| (m.dev(), m.ino()))
        };
        let fs = ReadAhead::start(&who, None, &project)
            .view_of(&project, id(&project))
            .expect("the view of the project read");
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
        assert!(ReadAhead::start(&who, None, &project).view_of(&other, id(&other)).is_none());
        // The project read, but another directory than the one the launch checked there.
        assert!(ReadAhead::start(&who, None, &project).view_of(&project, id(&other)).is_none());
        // A project the launch refuses (the home itself) is not read.
        assert!(ReadAhead::start(&who, None, &home).view_of(&home, id(&home)).is_none());
        assert!(ReadAhead::none().view_of(&project, id(&project)).is_none());
    }
}
