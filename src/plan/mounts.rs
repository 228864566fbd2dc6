//! The mount list, stage by stage: /dev, the home in each of its modes, the stub
//! directory and the real programs it covers, the protected paths in the project.

use super::*;

pub(super) fn dev_mounts(b: &mut Builder<'_>, policy: &Policy, fs: &dyn HostFs) {
    b.push(MountSpec::Tmpfs { target: "/dev".into(), mode: 0o755 });
    for d in ["null", "zero", "full", "random", "urandom", "tty"] {
        let p = PathBuf::from(format!("/dev/{d}"));
        b.push(MountSpec::Device { source: p.clone(), target: p });
    }
    b.push(MountSpec::Devpts { target: "/dev/pts".into() });
    b.push(MountSpec::Symlink { target: "/dev/ptmx".into(), link: "pts/ptmx".into() });
    b.push(MountSpec::Tmpfs { target: "/dev/shm".into(), mode: 0o1777 });
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("core", "/proc/kcore"),
    ] {
        if name != "core" {
            b.push(MountSpec::Symlink { target: format!("/dev/{name}").into(), link: to.into() });
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for g in &policy.devices {
        for p in fs::expand_glob(fs, Path::new(&g.value)) {
            let denied = policy.deny_devices.iter().any(|d| crate::glob::glob_match(&d.value, &p.to_string_lossy()));
            // The host's /dev/pts must never be bound in: it would hand out other terminals.
            let host_pts = p.starts_with("/dev/pts");
            if !denied
                && !host_pts
                && p.starts_with("/dev")
                && fs.kind(&p) == Some(Kind::Char)
                && seen.insert(p.clone())
            {
                b.push(MountSpec::Device { source: p.clone(), target: p });
            }
        }
    }
    b.push(MountSpec::ReadOnly { target: "/dev".into() });
}

pub(super) fn home_config_dir(facts: &HostFacts, home: &Path) -> Option<PathBuf> {
    let base = facts
        .env_var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".config"));
    Some(base.join("agent-sandbox"))
}

pub(super) fn home_mounts(
    b: &mut Builder<'_>,
    policy: &Policy,
    facts: &HostFacts,
    home: &Path,
    git: &super::hiding::GitView,
    writable: &mut Vec<PathBuf>,
    warnings: &mut Vec<String>,
) {
    if facts.home != facts.home_canonical {
        // `$HOME` is reached through a symlink on the host (e.g. /home -> /gpfs/home): keep
        // the name the user and the password database use working inside.
        b.push(MountSpec::Symlink { target: facts.home.clone(), link: home.to_path_buf() });
    }
    // Homes often live on NFS, GPFS or Lustre, where an overlay's lower layer is not
    // dependable: every tree under the home is rebuilt entry by entry.
    let overlay = std::mem::replace(&mut b.overlay, false);
    home_trees(b, policy, home, git, writable, warnings);
    b.overlay = overlay;
}

/// What a home entry that exists binds: itself, or, for a symbolic link, what it leads to,
/// checked here. The jail of an earlier session may have made the link (`--rw ~/.config`
/// lets it write `~/.config/opencode`): a profile's entry, the agent's own, must be a real
/// file or directory; any other link must not lead into a hidden path or to your home or one
/// of its parents. The mount then binds the checked target, not the link.
fn entry_source(
    b: &Builder<'_>,
    e: &crate::policy::merge::Sourced<String>,
    p: &Path,
    kind: Kind,
    home: &Path,
    warnings: &mut Vec<String>,
) -> Option<(PathBuf, Kind)> {
    if kind != Kind::Symlink {
        // Bound from where it really is: a link on the way (`~/.local -> /scratch/u/local`
        // under `--rw ~/.local/state`) would be resolved again inside the jail's staging root.
        return Some((fs::real_parents(b.fs, p), kind));
    }
    let shown = format!("~/{}", p.strip_prefix(home).unwrap_or(p).display());
    if matches!(e.source, crate::policy::merge::Source::Profile(_)) {
        warnings.push(format!(
            "{shown} is a symbolic link: not bound (an agent's own entry must be a real file or directory; \
             a jail of an earlier session could have made the link)"
        ));
        return None;
    }
    let Some(target) = b.fs.canonicalize(p) else {
        warnings.push(format!("{shown} is a symbolic link that leads nowhere: not bound"));
        return None;
    };
    if b.hidden.covers(&target) || home.starts_with(&target) {
        warnings.push(format!(
            "{shown} is a symbolic link to {}, a hidden path or your home itself: not bound",
            target.display()
        ));
        return None;
    }
    let kind = b.fs.kind(&target)?;
    Some((target, kind))
}

/// Why a home entry reached through a link among its directories (`~/data/up/.ssh` with
/// `~/data/up -> ..`: a jail that could write `~/data` may have made it) is not bound: where
/// it really is, it is a hidden path or lies in one, or it is the home or a parent of it.
/// The name as written would pass; what it leads to is what the jail would see.
fn linked_entry(b: &Builder<'_>, p: &Path, home: &Path) -> Option<String> {
    let real = fs::real_parents(b.fs, p);
    if real == p {
        return None;
    }
    let bad = b.hidden.covers(&real) || home.starts_with(&real);
    bad.then(|| format!("is {} through a symbolic link, a hidden path or your home itself", real.display()))
}

pub(super) fn home_trees(
    b: &mut Builder<'_>,
    policy: &Policy,
    home: &Path,
    git: &super::hiding::GitView,
    writable: &mut Vec<PathBuf>,
    warnings: &mut Vec<String>,
) {
    match policy.home_access.value {
        HomeAccess::Read | HomeAccess::Write => {
            let rw = policy.home_access.value == HomeAccess::Write;
            b.bind_tree(home, rw);
            if rw {
                writable.push(home.to_path_buf());
            } else {
                agent_entries_in_read_only_home(b, policy, home, writable, warnings);
            }
        }
        HomeAccess::Tmpwrite | HomeAccess::Restricted => {
            b.push(MountSpec::Tmpfs { target: home.to_path_buf(), mode: 0o700 });
            listed_entries(b, &policy.home_read, false, "home.read", home, writable, warnings);
            listed_entries(b, &policy.home_write, true, "home.write", home, writable, warnings);
            for s in &policy.home_seed {
                seed(b, s, home, git, warnings);
            }
        }
    }
}

/// A read-only home still lets the agent write its own listed entries (~/.codex).
fn agent_entries_in_read_only_home(
    b: &mut Builder<'_>,
    policy: &Policy,
    home: &Path,
    writable: &mut Vec<PathBuf>,
    warnings: &mut Vec<String>,
) {
    for e in &policy.home_write {
        let Some(rel) = home_entry(&e.value) else { continue };
        let p = home.join(rel);
        if b.hidden.covers(&p) {
            continue;
        }
        if let Some(why) = linked_entry(b, &p, home) {
            warnings.push(format!("home.write: `{}` {why}; not bound", e.value));
            continue;
        }
        let found = match b.fs.kind(&p) {
            None => b.agent_entry(e, &p).map(|k| (p.clone(), k)),
            Some(k) => entry_source(b, e, &p, k, home, warnings),
        };
        if let Some((source, kind)) = found {
            let dir = kind == Kind::Dir;
            b.push(MountSpec::Bind { source, target: p.clone(), rw: true, dir });
            writable.push(p);
        }
    }
}

/// The entries of `home.read` or `home.write` (`rw`) bound over the session's empty home.
fn listed_entries(
    b: &mut Builder<'_>,
    list: &crate::policy::merge::List,
    rw: bool,
    key: &str,
    home: &Path,
    writable: &mut Vec<PathBuf>,
    warnings: &mut Vec<String>,
) {
    for e in list {
        let Some(rel) = home_entry(&e.value) else {
            warnings.push(format!("{key}: `{}` is not a plain path relative to ~; ignored", e.value));
            continue;
        };
        let p = home.join(rel);
        if b.hidden.covers(&p) {
            warnings.push(format!("{key}: `{}` is hidden by policy; not bound", e.value));
            continue;
        }
        if let Some(why) = linked_entry(b, &p, home) {
            warnings.push(format!("{key}: `{}` {why}; not bound", e.value));
            continue;
        }
        let found = match b.fs.kind(&p) {
            Some(k) => entry_source(b, e, &p, k, home, warnings),
            None if rw => b.agent_entry(e, &p).map(|k| (p.clone(), k)),
            None => None,
        };
        let Some((source, kind)) = found else { continue };
        if rw {
            let dir = kind == Kind::Dir;
            b.push(MountSpec::Bind { source, target: p.clone(), rw: true, dir });
            writable.push(p);
        } else {
            b.bind_tree(&p, false);
        }
    }
}

/// One `home.seed` entry copied into the session's home, when it is a regular file reached
/// through no link.
fn seed(
    b: &mut Builder<'_>,
    s: &crate::policy::merge::Sourced<String>,
    home: &Path,
    git: &super::hiding::GitView,
    warnings: &mut Vec<String>,
) {
    let Some(rel) = home_entry(&s.value) else { return };
    let p = home.join(&rel);
    if b.hidden.covers(&p) {
        return;
    }
    // Not followed, neither the seed itself nor a directory on its way below the
    // home (fifth and sixth outside looks at the anchors, V2, N1): a link that a
    // session could have changed (one hop in a tree a jail writes, as a
    // dotfiles repository worked on as a project) would hand the next session
    // a copy of any file of that name the user can read, shown to no jail.
    let linked = std::iter::successors(Some(rel.as_path()), |r| r.parent())
        .filter(|r| !r.as_os_str().is_empty())
        .any(|r| b.fs.kind(&home.join(r)) == Some(Kind::Symlink));
    if linked {
        warnings.push(format!(
            "home.seed: `{}` is reached through a symbolic link: not copied in (a seed is copied \
             only from a regular file with no link on its way below your home, which no session \
             could re-point); name where it really is in home.read to show it read-only",
            s.value
        ));
        return;
    }
    // Where it really is, the same (the home's own path may lead elsewhere).
    if b.fs.kind(&p) != Some(Kind::File) || b.hidden.covers(&fs::real_path(b.fs, &p)) {
        return;
    }
    // A git config the credentials were taken out of is seeded as that text.
    match git.stripped.iter().find(|(g, _)| *g == p) {
        Some((_, text)) => b.push(MountSpec::Stripped { target: p, contents: text.clone(), seed: true }),
        None => b.push(MountSpec::Copy { source: p.clone(), target: p }),
    }
}

/// Whether `m` shows a copy in place of the file at `p` (a stripped config, a seed).
fn is_copy_over(m: &MountSpec, p: &Path) -> bool {
    matches!(m, MountSpec::Stripped { .. } | MountSpec::Copy { .. }) && m.target() == p
}

/// Binds each ancestor directory between `root` (exclusive) and `p` (exclusive) onto itself,
/// so that renaming or removing an ancestor (to swap in a fresh, writable copy) fails with EBUSY.
pub(super) fn pin_ancestors(b: &mut Builder<'_>, root: &Path, p: &Path) {
    let mut chain: Vec<PathBuf> =
        p.ancestors().skip(1).take_while(|a| *a != root && a.starts_with(root)).map(Path::to_path_buf).collect();
    chain.reverse();
    for a in chain {
        let pin = MountSpec::Pin { target: a };
        if !b.mounts.contains(&pin) {
            b.push(pin);
        }
    }
}

/// Protected entries the git guard keeps when it is on (`jail/guard/rules.rs`).
const GUARD_KEEPS: [&str; 2] = [".git/config", ".git/hooks"];

pub(super) fn protect(
    b: &mut Builder<'_>,
    fs: &dyn HostFs,
    policy: &Policy,
    project: &Path,
    guard_keeps_git: bool,
    placeholders: &mut Vec<Placeholder>,
) -> Result<(), PlanError> {
    for entry in &policy.protected {
        if guard_keeps_git && GUARD_KEEPS.contains(&entry.value.trim_end_matches('/')) {
            continue;
        }
        let want_dir = entry.value.ends_with('/');
        let Some(rel) = home_entry(entry.value.trim_end_matches('/')) else {
            return Err(entry_err(
                "filesystem.protected",
                &entry.value,
                "must be a relative path inside the project without `..`",
            ));
        };
        let full = project.join(&rel);
        let globbed = crate::glob::has_glob(&full.to_string_lossy());
        let matches: Vec<PathBuf> = fs::expand_glob(fs, &full).into_iter().filter(|m| fs.kind(m).is_some()).collect();
        if matches.is_empty() && !globbed {
            // Missing: create the first missing component as an empty placeholder and make it
            // read-only, so the name cannot be created writable during the session.
            let mut first_missing = project.to_path_buf();
            for c in rel.components() {
                first_missing.push(c);
                if fs.kind(&first_missing).is_none() {
                    break;
                }
            }
            if fs.kind(&first_missing).is_some() {
                continue;
            }
            // With the git guard on, a name it refuses to have made, renamed onto or written
            // (an agent's settings, a hook manager's config: `runs_outside_name`) needs no
            // placeholder, as `.git` needs none: nothing can be made there in the session. On
            // a network filesystem each placeholder is five round trips (made, bound, removed).
            let guards = |rel: &Path| super::outside_names::runs_outside_name(rel).is_some();
            if guard_keeps_git && first_missing.strip_prefix(project).is_ok_and(guards) {
                continue;
            }
            let dir = want_dir || first_missing != full;
            let ph = Placeholder { path: first_missing.clone(), dir, json: false };
            if !placeholders.contains(&ph) {
                pin_ancestors(b, project, &first_missing);
                placeholders.push(ph);
                b.push(MountSpec::Bind { source: first_missing.clone(), target: first_missing, rw: false, dir });
            }
            continue;
        }
        for m in matches {
            match fs.kind(&m) {
                Some(Kind::Symlink) => return Err(PlanError::ProtectedSymlink { path: m }),
                Some(k) => {
                    let bind = MountSpec::Bind { source: m.clone(), target: m.clone(), rw: false, dir: k == Kind::Dir };
                    // Two patterns may name one path (`lefthook.yml`, `lefthook*.y*ml`).
                    if placeholders.iter().any(|ph| m.starts_with(&ph.path)) || b.mounts.contains(&bind) {
                        continue;
                    }
                    pin_ancestors(b, project, &m);
                    b.push(bind);
                }
                None => {}
            }
        }
    }
    Ok(())
}

/// A path found at plan time that a program outside runs or loads (`runs_outside`: the
/// repository's `core.hooksPath`, what the `.envrc` loads), protected as the list's entries
/// are where a writable tree holds it: bound read-only, or, missing in the project, a
/// read-only placeholder. One inside a `.git` with the guard on is the guard's, and one below
/// a path protected already needs nothing more.
pub(super) fn protect_found(
    b: &mut Builder<'_>,
    fs: &dyn HostFs,
    writable: &[PathBuf],
    project: &Path,
    guard_keeps_git: bool,
    found: &[(PathBuf, bool)],
    placeholders: &mut Vec<Placeholder>,
) -> Result<(), PlanError> {
    for (p, want_dir) in found {
        let Some(tree) = writable.iter().filter(|w| p.starts_with(w) && p != *w).max_by_key(|w| w.as_os_str().len())
        else {
            continue;
        };
        let in_git = p.strip_prefix(tree).is_ok_and(|r| r.components().any(|c| c.as_os_str() == ".git"));
        // The guard keeps a git directory's `hooks` and `config`; anything else in it (a
        // `core.hooksPath` of `.git/my-hooks`, an included `.git/extra.inc`) is bound here.
        let guards = p.file_name().is_some_and(|n| n == "hooks" || n == "config" || n == "config.worktree");
        if guard_keeps_git && in_git && guards {
            continue;
        }
        let covered = b.mounts.iter().any(|m| {
            matches!(m, MountSpec::Bind { target, rw: false, .. }
                if p.starts_with(target) && target.starts_with(tree) && target != tree)
        }) || placeholders.iter().any(|ph| p.starts_with(&ph.path));
        if covered {
            continue;
        }
        match fs.kind(p) {
            Some(Kind::Symlink) => return Err(PlanError::ProtectedSymlink { path: p.clone() }),
            Some(k) => {
                pin_ancestors(b, tree, p);
                b.push(MountSpec::Bind { source: p.clone(), target: p.clone(), rw: false, dir: k == Kind::Dir });
                // A copy shown over the file (a config without its credentials: one the global
                // git config includes) goes on top again: bound before, it was covered by this
                // bind of the file itself (outside review of issue 32, R4).
                if let Some(i) = b.mounts.iter().position(|m| is_copy_over(m, p)) {
                    let copy = b.mounts.remove(i);
                    b.push(copy);
                }
            }
            None if tree == project => {
                let mut first_missing = project.to_path_buf();
                for c in p.strip_prefix(project).unwrap_or(p).components() {
                    first_missing.push(c);
                    match fs.kind(&first_missing) {
                        None => break,
                        Some(Kind::Symlink) => return Err(PlanError::ProtectedSymlink { path: first_missing }),
                        Some(_) => {}
                    }
                }
                let dir = *want_dir || &first_missing != p;
                pin_ancestors(b, project, &first_missing);
                placeholders.push(Placeholder { path: first_missing.clone(), dir, json: false });
                b.push(MountSpec::Bind { source: first_missing.clone(), target: first_missing, rw: false, dir });
            }
            None => {}
        }
    }
    Ok(())
}

/// The jail's stub directory: the agent-sandbox binary, the chaperon's socket and, first on
/// PATH, a link to it under every Slurm command's (and mailer's) name; read-only once filled.
pub(super) fn stub_dir(b: &mut Builder<'_>, facts: &HostFacts, mail_block: bool, req: &RunRequest) {
    use crate::stub::{STUB_BIN_DIR, STUB_DIR, STUB_EXE};
    b.push(MountSpec::Tmpfs { target: STUB_DIR.into(), mode: 0o755 });
    b.push(MountSpec::Bind { source: facts.stub_exe.clone(), target: STUB_EXE.into(), rw: false, dir: false });
    // One bind of a directory of links the launcher keeps in the state dir, instead of one
    // symlink call per name at every start (`stub::ensure_links`).
    b.push(MountSpec::Bind {
        source: crate::stub::links_dir(&facts.state_dir(), mail_block),
        target: STUB_BIN_DIR.into(),
        rw: false,
        dir: true,
    });
    if let Some(sock) = &req.chaperon_socket {
        let target = crate::stub::slurm::SOCKET.into();
        b.push(MountSpec::Bind { source: sock.clone(), target, rw: false, dir: false });
    }
    for (target, contents) in &req.extra_files {
        b.push(MountSpec::File { target: target.clone(), contents: contents.clone(), mode: 0o555 });
    }
    b.push(MountSpec::ReadOnly { target: STUB_DIR.into() });
}

/// Every real Slurm command (and mailer, when mail is blocked) the jail could run by absolute
/// path gets the stub bound over it (over the file a symlink leads to, when that file is
/// inside a tree the jail sees).
pub(super) fn cover_stubbed(
    b: &mut Builder<'_>,
    fs: &dyn HostFs,
    policy: &Policy,
    facts: &HostFacts,
    home: &Path,
    mail: bool,
) {
    // The read trees as `bind_tree` binds them (one spelling, where they really are), and as
    // named: `--ro /opt//slurm/bin` shows the real `sbatch` as much as `--ro /opt/slurm/bin`.
    let visible: Vec<PathBuf> = policy
        .fs_read
        .iter()
        .map(|r| fs::normalized(Path::new(&r.value)))
        .filter(|p| p.is_absolute())
        .flat_map(|p| [fs::real_parents(fs, &p), p])
        .collect();
    let mut covered: Vec<PathBuf> = vec![];
    for p in &facts.mailers {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !mail && !crate::stub::slurm::SLURM_STUBS.contains(&name) {
            continue;
        }
        let Some(kind) = fs.kind(p) else { continue };
        let real = if kind == Kind::Symlink { fs.canonicalize(p) } else { Some(p.clone()) };
        let Some(real) = real else { continue };
        // A symlinked mailer's target is covered only if it is a mailer (or Slurm command)
        // itself: msmtp-mta's `newaliases -> /bin/true` must not make `true` the stub. The
        // name stays covered on PATH; by its absolute path it runs what it links to.
        let target_name = real.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let stubbed_name =
            |n: &str| crate::stub::mail::MAILERS.contains(&n) || crate::stub::slurm::SLURM_STUBS.contains(&n);
        if kind == Kind::Symlink && !stubbed_name(target_name) {
            continue;
        }
        let seen = visible.iter().any(|v| fs::under(&real, v) || fs::under(p, v));
        if !seen || real.starts_with(home) || b.hidden.covers(&real) || covered.contains(&real) {
            continue;
        }
        if fs.kind(&real) == Some(Kind::File) {
            b.push(MountSpec::Stub { target: real.clone() });
            covered.push(real);
        }
    }
}
