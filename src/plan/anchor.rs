//! What the plan checked, held until it is used (outside review of the state directory, F1
//! and F5). The plan checks paths by name (not hidden, not a link, which entries get a
//! rule); the jail binds them, the Landlock backend opens them for its rules, the launcher
//! makes placeholders below the project, all later. A jail of another session that may
//! write the directory holding one of those paths could swap it for a link (to the state
//! directory) in between. So every such path is used only as its anchor says: opened where
//! it really was when the plan looked, with no symlink followed on the way (`jail::anchor`),
//! and refused unless that is still the device and inode the plan's look found there.

use super::*;
use std::path::Component;

/// One checked path: where it really was when the plan looked, and which inode was there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Anchor {
    /// The path as the plan names it (a bind's source, a rule's path).
    #[serde(with = "os_path")]
    pub path: PathBuf,
    /// Where it really was: absolute, plain names only, no symlink on the way when the plan
    /// looked; opened so when used.
    #[serde(with = "os_path")]
    pub real: PathBuf,
    pub dev: u64,
    pub ino: u64,
}

impl Anchor {
    /// The anchor of `path` from what the plan saw of it (`fs` caches every answer of the
    /// plan, so this is the plan's look, not a new one); None where it saw nothing there, or
    /// the view keeps no identities.
    pub fn of(fs: &dyn HostFs, path: &Path) -> Option<Anchor> {
        let kind = fs.kind(path)?;
        let (real, (dev, ino)) = if kind == Kind::Symlink || fs::through_link(fs, path) {
            // A link the plan knew of (a site's `/scratch -> /lustre`): what it led to then.
            // A path reached through one has the identity `kind` found through it: where the
            // link leads now must be that inode, or the two looks differed.
            let real = fs.canonicalize(path)?;
            let id = if kind == Kind::Symlink { fs.identity(&real)? } else { fs.identity(path)? };
            (real, id)
        } else {
            (path.to_path_buf(), fs.identity(path)?)
        };
        plain(&real).then(|| Anchor { path: path.to_path_buf(), real, dev, ino })
    }
}

/// Absolute and made of plain names only (what a component walk opens one by one).
pub fn plain(p: &Path) -> bool {
    p.is_absolute() && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// The host paths of `m` the jail reads (binds, overlays, copies from), none for the
/// launcher's own files under `/run/agent-sandbox` (`stub`) and a device node (the host's
/// `/dev`, which no user writes): every one of them must be anchored, or made by the
/// launcher and anchored then (`jail::placeholders`), or the jail refuses it.
pub fn host_sources(m: &MountSpec) -> Option<&Path> {
    match m {
        MountSpec::Bind { target, .. } if target.starts_with(crate::stub::STUB_DIR) => None,
        MountSpec::Bind { source, .. }
        | MountSpec::TreeBind { source, .. }
        | MountSpec::Overlay { source, .. }
        | MountSpec::Copy { source, .. }
        | MountSpec::Layer { source, .. } => Some(source),
        _ => None,
    }
}

/// The host file a session copy is bound over (a seed's, a config without its credentials):
/// the jail binds the copy only onto the inode the plan found there.
pub fn covered_file(m: &MountSpec) -> Option<&Path> {
    match m {
        MountSpec::Copy { target, .. } | MountSpec::Stripped { target, .. } => Some(target),
        _ => None,
    }
}

/// The anchors of every path the jail will use that the plan checked: under userns every
/// host source of its mounts (`host_sources`) and file its copies cover (`covered_file`),
/// under Landlock the paths of its rules (not the session directory's, made after the plan).
/// A path the plan saw nothing at gets its anchor when the launcher makes it
/// (`jail::placeholders`), or none, and the jail then refuses it. A path that led into the state directory by a link the plan did not see as
/// such (it changed between the plan's looks) stops the launch.
pub fn stamp(plan: &Plan, fs: &dyn HostFs, state_dir: &Path) -> Result<Vec<Anchor>, PlanError> {
    let mut paths: Vec<&Path> = vec![];
    match &plan.landlock {
        None => {
            paths.extend(plan.mounts.iter().filter_map(host_sources));
            paths.extend(plan.mounts.iter().filter_map(covered_file));
        }
        Some(ll) => {
            for p in ll.read_only.iter().chain(&ll.read_write) {
                if !p.starts_with(&ll.session.path) && *p != ll.session.exe {
                    paths.push(p);
                }
            }
        }
    }
    // Their identities asked side by side (each an `lstat`, a round trip on NFS, where the
    // listing answered the kind).
    fs.prefetch_identities(&paths.iter().map(|p| p.to_path_buf()).collect::<Vec<_>>());
    let mut anchors: Vec<Anchor> = Vec::with_capacity(paths.len());
    for p in paths {
        if anchors.iter().any(|a| a.path == p) {
            continue;
        }
        let Some(a) = Anchor::of(fs, p) else { continue };
        if a.real != a.path && fs::under(&a.real, state_dir) {
            return Err(PlanError::Moved { path: a.path, now: a.real });
        }
        anchors.push(a);
    }
    Ok(anchors)
}

/// Where the launcher makes each of the agent's missing home entries (`home_dirs`,
/// `home_files`): where it really is as the plan saw its parents (`~/.local/state/x` is
/// `/scratch/u/local/state/x` with `~/.local -> /scratch/u/local`), made with no link on the
/// way from `/` and anchored then. One that leads into the state directory stops the launch.
pub fn home_entries(plan: &Plan, fs: &dyn HostFs, state_dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>, PlanError> {
    let mut out = vec![];
    for p in plan.home_dirs.iter().chain(&plan.home_files).chain(plan.home_texts.iter().map(|(p, _)| p)) {
        let real = fs::real_parents(fs, &fs::normalized(p));
        if fs::under(&real, state_dir) || !plain(&real) {
            return Err(PlanError::Moved { path: p.clone(), now: real });
        }
        out.push((p.clone(), real));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::RealFs;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("asb-anchor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::canonicalize(&d).unwrap()
    }

    /// A plain path is anchored where it is, with the inode the plan's look found; one
    /// through a link where the link led; a link the plan saw as such, at its target.
    #[test]
    fn an_anchor_is_where_the_plans_look_found_the_path() {
        use std::os::unix::fs::MetadataExt;
        let d = scratch("of");
        std::fs::create_dir_all(d.join("real/sub")).unwrap();
        std::os::unix::fs::symlink("real", d.join("link")).unwrap();
        let fs = RealFs::default();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let a = Anchor::of(&fs, &d.join("real/sub")).unwrap();
        assert_eq!((a.real.as_path(), a.ino), (d.join("real/sub").as_path(), ino(&d.join("real/sub"))));
        let a = Anchor::of(&fs, &d.join("link/sub")).unwrap();
        assert_eq!((a.real.as_path(), a.ino), (d.join("real/sub").as_path(), ino(&d.join("real/sub"))));
        let a = Anchor::of(&fs, &d.join("link")).unwrap();
        assert_eq!((a.real.as_path(), a.ino), (d.join("real").as_path(), ino(&d.join("real"))));
        assert!(Anchor::of(&fs, &d.join("missing")).is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// What the plan saw is kept: a directory swapped for a link after the plan's look is
    /// still anchored at the directory's inode (the jail then refuses the link).
    #[test]
    fn an_anchor_is_the_plans_look_not_a_later_one() {
        use std::os::unix::fs::MetadataExt;
        let d = scratch("later");
        std::fs::create_dir_all(d.join("data")).unwrap();
        std::fs::create_dir_all(d.join("state")).unwrap();
        let fs = RealFs::default();
        let seen = std::fs::metadata(d.join("data")).unwrap().ino();
        assert_eq!(fs.kind(&d.join("data")), Some(Kind::Dir));
        std::fs::rename(d.join("data"), d.join("data.old")).unwrap();
        std::os::unix::fs::symlink("state", d.join("data")).unwrap();
        let a = Anchor::of(&fs, &d.join("data")).unwrap();
        assert_eq!((a.real.as_path(), a.ino), (d.join("data").as_path(), seen));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn only_plain_absolute_paths_are_walked() {
        assert!(plain(Path::new("/a/b")));
        for p in ["a/b", "/a/../b", "../b"] {
            assert!(!plain(Path::new(p)), "{p}");
        }
    }
}
