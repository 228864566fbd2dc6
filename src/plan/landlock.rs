//! The Landlock backend's plan: the mount list as path rules, the session directory that
//! stands in for the userns jail's private trees, how the session ends.

use super::*;

/// The host's temp trees every user shares; the userns jail gets private tmpfs instead.
pub(super) const SHARED_TMP: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// The Landlock backend cannot build a new root, so the same mount list becomes path rules.
/// The scratch tmpfs of the userns jail have no rule: the host's shared `/tmp`, `/var/tmp`
/// and `/dev/shm` stay denied (unless the policy binds one itself), and the session's own
/// directory stands in for them, for `/run/agent-sandbox` and for PID 1.
pub(super) fn landlock_plan(
    mounts: &[MountSpec],
    net: &NetPlan,
    session: SessionDir,
    facts: &HostFacts,
    req: &RunRequest,
    host_terminals: bool,
    around: &StoresAround<'_>,
) -> LandlockPlan {
    let (mut ro, mut rw) = (vec![], vec![]);
    for m in mounts {
        match m {
            // What the userns jail has under /run/agent-sandbox is in the session directory.
            m if m.target().starts_with(crate::stub::STUB_DIR) => {}
            MountSpec::Bind { source, rw: true, .. } | MountSpec::Device { source, .. } => rw.push(source.clone()),
            MountSpec::Bind { source, rw: false, .. } => ro.push(source.clone()),
            MountSpec::TreeBind { source, .. } if tree_rw(mounts, source) => rw.push(source.clone()),
            MountSpec::TreeBind { source, .. } => ro.push(source.clone()),
            MountSpec::File { target, .. } | MountSpec::Copy { source: target, .. } => ro.push(target.clone()),
            MountSpec::Proc { target } => ro.push(target.clone()),
            // The host's devpts holds the user's other terminals (another ssh or tmux
            // session, where a password may be typed): only the session's own, unless the
            // policy opens it all (`process.host_terminals`), which new terminals need (the
            // kernel checks their slave's path even through TIOCGPTPEER).
            MountSpec::Devpts { target } if host_terminals => {
                rw.push(target.clone());
                rw.push("/dev/ptmx".into());
            }
            MountSpec::Devpts { .. } => rw.extend(facts.terminals.iter().cloned()),
            _ => {}
        }
    }
    // No read-only rule grants a hidden path itself, or anything in one, whatever asked for it
    // (a protection's read-only bind of a config the plan left out for its credentials:
    // outside review of issue 32, R4). Writable rules may: the launcher's own directories for
    // the session (the agents' session homes) are in the hidden state directory, and so are
    // the paths below.
    ro.retain(|p| !in_a_store(p, around));
    // The stubs are links to the stub binary: it must be readable where it is.
    ro.push(facts.stub_exe.clone());
    ro.push(session.bin.clone());
    if !session.files.is_empty() {
        ro.push(session.path.join("run"));
    }
    rw.push(session.tmp.clone());
    let mut rw = split_around_stores(rw, around);
    // One rule per path (the binary is bound under many names in the userns jail).
    for list in [&mut ro, &mut rw] {
        let mut seen = std::collections::BTreeSet::new();
        list.retain(|p| seen.insert(p.clone()));
    }
    let denied_shared =
        SHARED_TMP.iter().map(PathBuf::from).filter(|t| !ro.iter().chain(&rw).any(|r| r == t)).collect();
    LandlockPlan {
        read_only: ro,
        read_write: rw,
        denied_shared,
        deny_tcp_connect: crate::netrules::floor::floor_ports().collect(),
        deny_all_tcp: net.jail == JailNet::Loopback,
        session,
        sweep: if facts.landlock_abi >= 6 { Sweep::ScopedKill } else { Sweep::ProcWalk },
        slurm_fd: req.chaperon_channel.then_some(SLURM_FD),
    }
}

/// The credential stores hidden in this plan, which Landlock cannot cover inside a writable
/// tree as the userns jail does (a rule only ever grants).
pub(super) struct StoresAround<'a> {
    pub stores: &'a [PathBuf],
    /// The hidden paths: no read-only rule grants one, or anything in one.
    pub never: &'a [PathBuf],
    pub project: &'a Path,
    pub fs: &'a dyn HostFs,
}

/// Whether `p` (where it really is) is a hidden store or inside one.
fn in_a_store(p: &Path, a: &StoresAround<'_>) -> bool {
    let real = fs::real_path(a.fs, p);
    a.never.iter().any(|s| fs::under(&real, s))
}

/// Each writable tree with a present store below it becomes one rule per entry around the
/// store (recursively along the way to it), so the store is in no rule: EACCES inside. The
/// price: nothing new can be made directly in the directories on that way (`~/.cache` when
/// `~/.cache/huggingface/token` exists), only in their other entries. Not the project, whose
/// top level must stay writable (a store inside it stays readable: docs/security-model.md).
///
/// A rule holds the inode its path leads to: a tree is split where it really is (`/scratch/u`
/// a link to `/lustre/u` around `/lustre/u/x`), and so are the hidden paths (`a.stores`).
fn split_around_stores(rw: Vec<PathBuf>, a: &StoresAround<'_>) -> Vec<PathBuf> {
    let mut out = vec![];
    for r in rw {
        if r == a.project {
            out.push(r);
            continue;
        }
        let real = fs::real_path(a.fs, &r);
        let inside: Vec<&PathBuf> =
            a.stores.iter().filter(|s| **s != real && fs::under(s, &real) && a.fs.kind(s).is_some()).collect();
        if inside.is_empty() || a.fs.kind(&real) != Some(Kind::Dir) {
            out.push(r);
        } else {
            rules_around(&real, &inside, a.fs, &mut out);
        }
    }
    out
}

fn rules_around(dir: &Path, stores: &[&PathBuf], fs: &dyn HostFs, out: &mut Vec<PathBuf>) {
    for name in fs.read_dir(dir).iter() {
        let p = dir.join(name);
        if stores.iter().any(|s| **s == p) {
            continue;
        }
        match fs.kind(&p) {
            // A rule on a link would grant what it leads to; the tree's one rule did not.
            Some(Kind::Symlink) | None => {}
            Some(Kind::Dir) if stores.iter().any(|s| fs::under(s, &p)) => rules_around(&p, stores, fs, out),
            Some(_) => out.push(p),
        }
    }
}

/// The Landlock session's own directory (see `SessionDir`).
pub(super) fn landlock_session(facts: &HostFacts, req: &RunRequest, mail_block: bool) -> SessionDir {
    let base = match &facts.runtime_dir {
        Some(r) => r.join("agent-sandbox/landlock"),
        None => facts.state_dir().join("landlock"),
    };
    let session: String = req.session.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(64).collect();
    // The base may be in a home shared by every node: the host and PID namespace are part of
    // the name, so that only a launcher here judges whether its pid is alive.
    let path = base.join(format!("{}-{}-{session}", facts.host_id, facts.pid));
    let mail: &[&str] = if mail_block { crate::stub::mail::MAILERS } else { &[] };
    let files = req
        .extra_files
        .iter()
        .map(|(target, contents)| {
            let name = target.strip_prefix(crate::stub::STUB_DIR).unwrap_or(target);
            (path.join("run").join(name.file_name().unwrap_or(name.as_os_str())), contents.clone())
        })
        .collect();
    SessionDir {
        tmp: path.join("tmp"),
        bin: path.join("bin"),
        exe: facts.stub_exe.clone(),
        stubs: mail.iter().chain(crate::stub::slurm::SLURM_STUBS).map(|s| s.to_string()).collect(),
        files,
        base,
        path,
        host: facts.host_id.clone(),
    }
}

/// Whether the rebuilt tree holding `p` is writable (its `SealTree` says so).
pub(super) fn tree_rw(mounts: &[MountSpec], p: &Path) -> bool {
    mounts.iter().any(|m| matches!(m, MountSpec::SealTree { target, rw: true } if fs::under(p, target)))
}
