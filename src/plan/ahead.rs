//! The plan's view of the host, read ahead: while the launcher loads the policy and readies
//! the state directory (round trips to the home's server, one after another), a thread of its
//! own reads what every plan asks of the project and the home: their listings, the project's
//! repository and direnv files, the walk for nested ones. On a network filesystem these are
//! some fifty round trips; side by side with the policy's, they no longer add up (issue 35).
//!
//! The view is the plan's only if it is still true: it is dropped when the project it read is
//! not the one the launch checked, or when a session's record of its placeholders changed
//! while it was read (one that ended, or the locks' taking, removed names the listings may
//! still show). The plan then reads afresh, as it did before.

use crate::host::{RealFs, Who};
use std::path::{Path, PathBuf};

/// Directories of the home listed too: see `read`.
pub const LISTED_DEEPER: [&str; 3] = [".local", ".local/share", ".local/state"];

/// A read-ahead under way (`start`), or none.
pub struct ReadAhead(Option<agent_sandbox_sys::thread::Thread<Option<Read>>>);

/// What a read-ahead read: the project (where it really is), the view, and the files watched
/// while it read, as they were before (`Watch`).
struct Read {
    project: PathBuf,
    fs: RealFs,
    watched: Vec<(PathBuf, Stamp)>,
}

/// The files whose change since the view was read makes it out of date, for a project (its
/// session lock and the home's, whose records name the placeholders sessions made: another
/// session's end removes them while the view is read, outside look at stop 47, F2).
pub type Watch = Box<dyn Fn(&Path) -> Vec<PathBuf> + Send>;

/// A file's size, change time and inode; None when it is not there.
type Stamp = Option<(u64, i64, i64, u64)>;

fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// Unchanged: as it was, or made since and empty (a project's first session makes its lock
/// file, with nothing recorded in it).
fn unchanged(before: &Stamp, now: &Stamp) -> bool {
    before == now || (before.is_none() && now.is_some_and(|s| s.0 == 0))
}

impl ReadAhead {
    /// No view read ahead (a job's task, a dry run): the plan reads its own.
    pub fn none() -> ReadAhead {
        ReadAhead(None)
    }

    /// Starts reading, for a launch of `who` in the project `asked` (as the user named it),
    /// as soon as the user's home is known: the rest of the host's facts are gathered
    /// meanwhile. `xdg_config`: `XDG_CONFIG_HOME` as the environment gives it. A thread that
    /// cannot start reads nothing.
    pub fn start(who: &Who, xdg_config: Option<&str>, asked: &Path, watch: Watch) -> ReadAhead {
        ReadAhead::start_in(&who.home, &who.home_canonical, xdg_config, asked, watch)
    }

    /// `start` for the home named `home` and really at `home_canonical` (a job's task, whose
    /// facts are gathered before its project is known).
    pub fn start_in(
        home: &Path,
        home_canonical: &Path,
        xdg_config: Option<&str>,
        asked: &Path,
        watch: Watch,
    ) -> ReadAhead {
        let home = Home {
            named: home.to_path_buf(),
            canonical: home_canonical.to_path_buf(),
            xdg_config: super::xdg_config_of(xdg_config),
        };
        let asked = asked.to_path_buf();
        // On a stack of its own, unmapped once joined (glibc would keep it through the session).
        let spawned = agent_sandbox_sys::thread::spawn("plan-ahead", 256 << 10, move || read(&home, &asked, &watch));
        ReadAhead(spawned.ok())
    }

    /// The view read ahead, if it read the project the launch checked: `project`, where it
    /// really is, the directory `id` (its device and inode as the launch's check found it: a
    /// decoy shown at the path while the view was read is not taken for it, outside look at
    /// stop 47, F3). Waits for it to be done.
    pub fn view_of(self, project: &Path, id: Option<(u64, u64)>) -> Option<RealFs> {
        use crate::host::HostFs;
        let Read { project: read, fs, watched } = self.0?.join().ok()??;
        let same_project = read == project && id.is_some() && fs.identity(project) == id;
        // The sessions' records unchanged since: no placeholder came or went meanwhile.
        let still = watched.iter().all(|(p, before)| unchanged(before, &stamp(p)));
        (same_project && still).then_some(fs)
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
fn read(home: &Home, asked: &Path, watch: &Watch) -> Option<Read> {
    let fs = RealFs::default();
    crate::timing::mark("ahead-started");
    let project = super::project_basics(&home.canonical, &fs, asked).ok()?;
    // Before anything is listed: a change from here on is seen by `view_of`. Side by side:
    // each is a walk of the state directory's path, a round trip a name on NFS.
    let paths = watch(&project);
    let watched: Vec<(PathBuf, Stamp)> =
        paths.iter().cloned().zip(crate::host::side_by_side(&paths, |p| stamp(p))).collect();
    crate::timing::mark("ahead-stamped");
    // The launch's listings of the home (`launch::planned`), and where the plan asks a dozen
    // names two levels into it (tools' data and state directories: `~/.local/share/uv`,
    // `~/.local/state/nvim`), most absent: on a copy of the view, beside the project's chain.
    let mut dirs = vec![home.canonical.clone(), home.named.clone()];
    dirs.extend([".config"].iter().chain(&LISTED_DEEPER).map(|d| home.canonical.join(d)));
    let homes = fs.clone();
    let list_home = move || {
        homes.list_side_by_side(&dirs);
        homes
    };
    // The project's chain: its listing, then its repository and the walk for nested ones side
    // by side (each a chain of round trips), the walk on a copy whose answers are taken back.
    let (named, xdg, inside) = (&home.named, home.xdg_config.as_deref(), project.as_path());
    let project_chain = || {
        // Read now, not only named: the copy below must hold it, or each would list it again.
        fs.list_side_by_side(std::slice::from_ref(&project));
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
    };
    let (listed, ()) = crate::host::together(list_home, project_chain);
    fs.absorb(listed);
    crate::timing::mark("ahead-read");
    Some(Read { project, fs, watched })
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
        let fs = ReadAhead::start(&who, None, &project, Box::new(|_| vec![]))
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
        assert!(ReadAhead::start(&who, None, &project, Box::new(|_| vec![])).view_of(&other, id(&other)).is_none());
        // The project read, but another directory than the one the launch checked there.
        assert!(ReadAhead::start(&who, None, &project, Box::new(|_| vec![])).view_of(&project, id(&other)).is_none());
        // A project the launch refuses (the home itself) is not read.
        assert!(ReadAhead::start(&who, None, &home, Box::new(|_| vec![])).view_of(&home, id(&home)).is_none());
        assert!(ReadAhead::none().view_of(&project, id(&project)).is_none());
        // A watched file that changed while the view was read (a session's record of its
        // placeholders, emptied by its end): no view. One made since, empty: the view holds.
        let record = home.join("record");
        std::fs::write(&record, b"f\t/p/.envrc\n").expect("write");
        let watched = record.clone();
        let ahead = ReadAhead::start(&who, None, &project, Box::new(move |_| vec![watched.clone()]));
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::write(&record, b"").expect("write");
        assert!(ahead.view_of(&project, id(&project)).is_none());
        let fresh = home.join("fresh");
        let watched = fresh.clone();
        let ahead = ReadAhead::start(&who, None, &project, Box::new(move |_| vec![watched.clone()]));
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::write(&fresh, b"").expect("write");
        assert!(ahead.view_of(&project, id(&project)).is_some());
    }
}
