//! Builds the ordered mount list of the jail's filesystem from policy paths and host facts.
//! The read side is an allow-list on a fresh tmpfs root; hidden paths inside an allowed
//! tree are left out of a rebuilt copy of that tree (ENOENT), never covered (which would
//! show an empty directory). Executing the list is `jail::mounts`'s job.

use crate::host::{HostFs, Kind};
use serde::{Deserialize, Serialize};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One step of building the jail's root. Targets are paths inside the jail; sources are host paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MountSpec {
    /// A fresh tmpfs (a rebuilt directory, `$HOME`, `/tmp`, `/dev`...).
    Tmpfs {
        #[serde(with = "super::os_path")]
        target: PathBuf,
        mode: u32,
    },
    /// A recursive bind of a host file or directory; read-only unless `rw`.
    Bind {
        #[serde(with = "super::os_path")]
        source: PathBuf,
        #[serde(with = "super::os_path")]
        target: PathBuf,
        rw: bool,
        dir: bool,
    },
    /// A read-only overlay of a host tree with hidden paths removed (whiteouts) and
    /// synthesized files added: one mount instead of one bind per entry of the tree.
    Overlay {
        #[serde(with = "super::os_path")]
        target: PathBuf,
        #[serde(with = "super::os_path")]
        source: PathBuf,
        #[serde(with = "super::os_path::vec")]
        whiteouts: Vec<PathBuf>,
        files: Vec<OverlayFile>,
    },
    /// A bind inside a rebuilt tree; its attributes come from the tree's `SealTree`.
    TreeBind {
        #[serde(with = "super::os_path")]
        source: PathBuf,
        #[serde(with = "super::os_path")]
        target: PathBuf,
        dir: bool,
    },
    /// The stub (bound read-only at `stub::STUB_EXE` earlier in the list) bound again over a
    /// real Slurm command or mailer of the host, which stays there as a file.
    Stub {
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    /// A bind of a host device node.
    Device {
        #[serde(with = "super::os_path")]
        source: PathBuf,
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    Symlink {
        #[serde(with = "super::os_path")]
        target: PathBuf,
        #[serde(with = "super::os_path")]
        link: PathBuf,
    },
    /// A file whose contents the plan synthesizes (passwd, group, nsswitch.conf...).
    File {
        #[serde(with = "super::os_path")]
        target: PathBuf,
        contents: String,
        mode: u32,
    },
    /// The agent's instruction file as the jail sees it (read once every other mount is in
    /// place, symlinks resolved inside the jail's root) with `notice` appended, bound
    /// read-only over it: the host's file is never changed.
    Instructions {
        #[serde(with = "super::os_path")]
        target: PathBuf,
        notice: String,
    },
    /// A writable copy for the session of the file at `target` as the jail sees it (read once
    /// every other mount is in place), bound over it: what the jail writes there is dropped at
    /// exit, and the host's file never changes (an agent's settings it rewrites itself).
    SessionCopy {
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    /// The agent's own directory for the session: a writable overlay of the host directory at
    /// `target` whose changes land in a layer of the session's own, dropped at exit (new
    /// names, rewritten settings, deleted files: none reaches the host). The entries that
    /// persist (`agent.state`) are bound from the host on top of it.
    Layer {
        #[serde(with = "super::os_path")]
        source: PathBuf,
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    /// A writable per-session copy of a host file (seeded home entries).
    Copy {
        #[serde(with = "super::os_path")]
        source: PathBuf,
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    /// One of the user's git configs without the entries that hand out a credential
    /// (`plan::gitstrip`): a writable session copy where it is the seeded `~/.gitconfig`
    /// (`seed`, in the home's tmpfs), else bound read-only over the file.
    Stripped {
        #[serde(with = "super::os_path")]
        target: PathBuf,
        contents: String,
        seed: bool,
    },
    Proc {
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    Devpts {
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    /// Covers an existing path inside a writable tree with an empty read-only dir or file.
    /// One gone by the time the jail is built (removed outside meanwhile) is left uncovered,
    /// as if the plan had not seen it, but a store the launcher makes when missing (`made`,
    /// `catalogue::Made`): that one is made again, empty, and covered, or a login outside
    /// during the session would show inside.
    Mask {
        #[serde(with = "super::os_path")]
        target: PathBuf,
        dir: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        made: bool,
    },
    /// Binds a directory onto itself so it cannot be renamed or removed during the session.
    Pin {
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    /// Makes one tmpfs read-only once it has been filled (that mount only).
    ReadOnly {
        #[serde(with = "super::os_path")]
        target: PathBuf,
    },
    /// Sets nosuid, nodev (and read-only unless `rw`) on a rebuilt tree and every mount in it.
    SealTree {
        #[serde(with = "super::os_path")]
        target: PathBuf,
        rw: bool,
    },
}

/// A file placed in an overlay's top layer (absolute path inside the jail).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayFile {
    #[serde(with = "super::os_path")]
    pub path: PathBuf,
    pub contents: String,
    pub mode: u32,
}

impl MountSpec {
    pub fn target(&self) -> &Path {
        match self {
            MountSpec::Tmpfs { target, .. }
            | MountSpec::Bind { target, .. }
            | MountSpec::TreeBind { target, .. }
            | MountSpec::Overlay { target, .. }
            | MountSpec::Stub { target }
            | MountSpec::Device { target, .. }
            | MountSpec::Symlink { target, .. }
            | MountSpec::File { target, .. }
            | MountSpec::Instructions { target, .. }
            | MountSpec::Copy { target, .. }
            | MountSpec::SessionCopy { target }
            | MountSpec::Layer { target, .. }
            | MountSpec::Stripped { target, .. }
            | MountSpec::Proc { target }
            | MountSpec::Devpts { target }
            | MountSpec::Mask { target, .. }
            | MountSpec::Pin { target }
            | MountSpec::ReadOnly { target }
            | MountSpec::SealTree { target, .. } => target,
        }
    }
}

/// Added to the jail's `/etc/tmux.conf` when the session starts inside tmux: a tmux in the
/// jail (the agent's, or yours) gets C-a as its prefix, so C-b still reaches the outer one.
/// Your own `~/.tmux.conf`, read after it, may choose otherwise.
pub const NESTED_TMUX: &str =
    "\n# agent-sandbox: this tmux runs inside your tmux session; C-a is its prefix, C-b the outer one's.\n\
set -g prefix C-a\nunbind-key C-b\nbind-key C-a send-prefix\n";

/// The set of paths that must not exist inside the jail.
#[derive(Debug, Clone, Default)]
pub struct Hidden {
    /// Hidden whether they exist now or not (`filesystem.hide`, the state directory).
    pub paths: Vec<PathBuf>,
    /// The credential catalogue's stores (`plan::catalogue`): hidden where they exist; one
    /// that does not costs no rebuild of the tree around it (a catalogue has many paths, and
    /// a user has few of them). Kept sorted by bytes: `covers` looks up each ancestor of a
    /// path, `any_below` one range, instead of comparing every store (it runs for every
    /// entry of every rebuilt tree).
    stores: Vec<PathBuf>,
    /// No ancestor shorter than the shortest store can be one (`/`, `/usr`: asked often).
    shortest_store: usize,
    /// Of `paths`, those a launch never leaves visible (the state directory, the floor's
    /// `filesystem.hide`), each with how it was named: where one lies inside a tree the jail
    /// may write and the backend cannot hide it there (Landlock), the plan fails.
    pub must_hide: Vec<(PathBuf, String)>,
}

/// `p` is `base` or lies below it. Byte-wise on normalized absolute paths: it runs for
/// every entry of every rebuilt tree, and `Path::starts_with` walks components.
pub fn under(p: &Path, base: &Path) -> bool {
    let (p, b) = (p.as_os_str().as_encoded_bytes(), base.as_os_str().as_encoded_bytes());
    let b = if b.len() > 1 { b.strip_suffix(b"/").unwrap_or(b) } else { b };
    p.starts_with(b) && (p.len() == b.len() || b == b"/" || p[b.len()] == b'/')
}

fn bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_encoded_bytes()
}

/// `p`, then each directory above it up to `/`, as bytes: `Path::ancestors` parses
/// components, and a plan asks this of every path it checks against the stores.
pub fn byte_ancestors(p: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut next = Some(p);
    std::iter::from_fn(move || {
        let cur = next?;
        next = match cur.iter().rposition(|b| *b == b'/') {
            Some(0) if cur.len() > 1 => Some(&cur[..1]),
            Some(0) | None => None,
            Some(i) => Some(&cur[..i]),
        };
        Some(cur)
    })
}

impl Hidden {
    pub fn stores(&self) -> &[PathBuf] {
        &self.stores
    }

    pub fn add_stores(&mut self, more: impl IntoIterator<Item = PathBuf>) {
        self.stores.extend(more);
        self.stores.sort_by(|a, b| bytes(a).cmp(bytes(b)));
        self.stores.dedup();
        self.shortest_store = self.stores.iter().map(|s| bytes(s).len()).min().unwrap_or(usize::MAX);
    }

    fn is_store(&self, p: &[u8]) -> bool {
        self.stores.binary_search_by(|s| bytes(s).cmp(p)).is_ok()
    }

    /// The stores strictly below `p` (one range of the sorted list).
    pub fn stores_below<'a>(&'a self, p: &Path) -> impl Iterator<Item = &'a PathBuf> {
        let mut prefix = bytes(p).to_vec();
        if prefix.last() != Some(&b'/') {
            prefix.push(b'/');
        }
        let start = self.stores.partition_point(|s| bytes(s) < prefix.as_slice());
        self.stores[start..].iter().take_while(move |s| bytes(s).starts_with(&prefix))
    }

    /// `p` is hidden itself or lies under a hidden path.
    pub fn covers(&self, p: &Path) -> bool {
        self.paths.iter().any(|h| under(p, h))
            || byte_ancestors(bytes(p)).take_while(|a| a.len() >= self.shortest_store).any(|a| self.is_store(a))
    }
    /// Some hidden path lies strictly below `p`: one of `paths`, or a store that exists.
    pub fn any_below(&self, p: &Path, fs: &dyn HostFs) -> bool {
        self.paths.iter().any(|h| h != p && under(h, p)) || self.stores_below(p).any(|h| fs.kind(h).is_some())
    }
    /// Every hidden path, the stores after the others.
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.paths.iter().chain(&self.stores)
    }
}

/// Accumulates the mount list in order.
pub struct Builder<'a> {
    pub fs: &'a dyn HostFs,
    pub hidden: &'a Hidden,
    /// Hide with a read-only overlay (whiteouts) instead of rebuilding trees entry by entry.
    pub overlay: bool,
    /// Host mount points: a mount below an overlaid tree is not seen through the overlay.
    pub mountpoints: &'a [PathBuf],
    pub mounts: Vec<MountSpec>,
    /// Files the plan writes instead of binding (passwd, group...), by host path.
    pub overrides: Vec<MountSpec>,
    /// Missing directories and JSON files of the agent's own in the home, made by the launcher.
    pub home_dirs: Vec<PathBuf>,
    pub home_files: Vec<PathBuf>,
    /// The agents' state entries that are directories, bound (or granted) writable: a link
    /// made there must lead inside its entry (`jail::links`).
    pub state_dirs: Vec<PathBuf>,
    /// Files the launcher makes in the home before the session with this text, if missing
    /// (Gemini CLI's mark of its project's entry).
    pub home_texts: Vec<(PathBuf, String)>,
}

impl<'a> Builder<'a> {
    pub fn new(fs: &'a dyn HostFs, hidden: &'a Hidden) -> Self {
        Builder {
            fs,
            hidden,
            overlay: false,
            mountpoints: &[],
            mounts: vec![],
            overrides: vec![],
            home_dirs: vec![],
            home_files: vec![],
            state_dirs: vec![],
            home_texts: vec![],
        }
    }

    /// A profile's home entry that does not exist yet and that the launcher makes, so what
    /// the agent writes there persists (the agent would make it on its first run, in the
    /// session's throwaway home): a directory when written so (`.codex/`), a JSON file holding
    /// `{}` (`.claude.json`, which its agent reads before it writes). Recorded; its kind.
    pub fn agent_entry(&mut self, e: &crate::policy::merge::Sourced<String>, p: &Path) -> Option<Kind> {
        if !matches!(e.source, crate::policy::merge::Source::Profile(_)) {
            return None;
        }
        let (list, kind) = if e.value.ends_with('/') {
            (&mut self.home_dirs, Kind::Dir)
        } else if e.value.ends_with(".json") {
            (&mut self.home_files, Kind::File)
        } else {
            return None;
        };
        if !list.iter().any(|d| d == p) {
            list.push(p.to_path_buf());
        }
        Some(kind)
    }

    /// Whether a host mount lies below `src`. Such a tree cannot be an overlay's lower layer
    /// in a user namespace: the kernel will not clone a path with locked submounts
    /// ("overlayfs: failed to clone lowerpath", EINVAL). Containers bind files over
    /// /etc/resolv.conf and /etc/hosts, `ip netns exec` binds /etc/netns/NAME/*: such a tree
    /// is rebuilt entry by entry, and each bind shows the mounted file.
    fn has_submounts(&self, src: &Path) -> bool {
        self.mountpoints.iter().any(|m| m.as_path() != src && under(m, src))
    }

    /// A read-only tree with hidden paths below it and no host mount below it: one overlay
    /// mount, with whiteouts for the hidden paths and the synthesized files in its top layer.
    fn overlay_tree(&mut self, src: &Path) {
        let mut whiteouts: Vec<PathBuf> = self
            .hidden
            .all()
            .filter(|h| h.as_path() != src && under(h, src) && self.fs.kind(h).is_some())
            .cloned()
            .collect();
        // One whiteout per hidden subtree: a path listed twice, or below another hidden
        // path, needs none of its own (and could not get one: its parent is a whiteout).
        whiteouts.sort();
        whiteouts.dedup();
        let mut kept: Vec<PathBuf> = vec![];
        for w in whiteouts {
            if !kept.iter().any(|k| under(&w, k)) {
                kept.push(w);
            }
        }
        let whiteouts = kept;
        let mut files = vec![];
        self.overrides.retain(|o| match o {
            MountSpec::File { target, contents, mode } if under(target, src) => {
                files.push(OverlayFile { path: target.clone(), contents: contents.clone(), mode: *mode });
                false
            }
            _ => true,
        });
        self.mounts.push(MountSpec::Overlay { target: src.to_path_buf(), source: src.to_path_buf(), whiteouts, files });
    }

    pub fn push(&mut self, m: MountSpec) {
        self.mounts.push(m);
    }

    /// Binds `src` at the same path, leaving out hidden paths below it (the tree is rebuilt
    /// on a tmpfs along the way to each hidden path) and substituting overrides.
    ///
    /// The tree is compared with the hidden paths as one spelling (`/scratch//u/.` is
    /// `/scratch/u`), and where it really is: below a link (`~/sc/local` with `~/sc ->
    /// /scratch/u`) it is bound at its real place, where the hidden paths are listed too
    /// (`Base::decide`), and where a bind target is not resolved again inside the jail.
    pub fn bind_tree(&mut self, src: &Path, rw: bool) {
        let src = real_parents(self.fs, &normalized(src));
        self.bind_tree_inner(&src, rw, false);
    }

    fn bind_tree_inner(&mut self, src: &Path, rw: bool, in_tree: bool) {
        if self.hidden.covers(src) {
            return;
        }
        let key = src.as_os_str();
        if let Some(o) = self.overrides.iter().find(|o| o.target().as_os_str() == key) {
            self.mounts.push(o.clone());
            return;
        }
        let Some(kind) = self.fs.kind(src) else {
            return;
        };
        let target = src.to_path_buf();
        match kind {
            Kind::Symlink => {
                if let Some(link) = self.fs.read_link(src) {
                    self.mounts.push(MountSpec::Symlink { target, link });
                }
            }
            Kind::Dir
                if self.overlay
                    && !rw
                    && !in_tree
                    && self.hidden.any_below(src, self.fs)
                    && !self.has_submounts(src) =>
            {
                self.overlay_tree(src)
            }
            Kind::Dir if self.hidden.any_below(src, self.fs) => {
                self.mounts.push(MountSpec::Tmpfs { target: target.clone(), mode: 0o755 });
                for name in self.fs.read_dir(src).iter() {
                    self.bind_tree_inner(&src.join(name), rw, true);
                }
                if !in_tree {
                    self.mounts.push(MountSpec::SealTree { target, rw });
                }
            }
            _ if in_tree => {
                self.mounts.push(MountSpec::TreeBind { source: src.to_path_buf(), target, dir: kind == Kind::Dir })
            }
            _ => self.mounts.push(MountSpec::Bind { source: src.to_path_buf(), target, rw, dir: kind == Kind::Dir }),
        }
    }

    /// Overrides not placed inside a rebuilt tree are bound over the host file afterwards.
    pub fn place_remaining_overrides(&mut self) {
        let missing: Vec<MountSpec> = self
            .overrides
            .iter()
            .filter(|o| !self.mounts.contains(o))
            .filter(|o| self.fs.kind(o.target()).is_some())
            .cloned()
            .collect();
        self.mounts.extend(missing);
    }
}

/// `p` in one spelling: `//`, `/./` and a trailing `/` dropped (`..` is refused where a
/// path is taken in). Every comparison with a hidden path is byte-wise, on this form.
pub fn normalized(p: &Path) -> PathBuf {
    p.components().collect()
}

/// `p` with every directory above it resolved (`real_path` of its parent), its last
/// component as it is: a link there is its caller's to judge (a replicated link shows
/// nothing; a home entry that is a link is checked where it leads).
pub fn real_parents(fs: &dyn HostFs, p: &Path) -> PathBuf {
    match (p.parent(), p.file_name()) {
        (Some(d), Some(n)) if through_link(fs, p) => real_path(fs, d).join(n),
        _ => p.to_path_buf(),
    }
}

/// Where `p` really is on the host, as a jail that sees the real tree finds it: its longest
/// part that exists with every symlink resolved, then the rest as written. A hidden path
/// whose parent is a link (`~/.local -> /scratch/u/local`) is hidden there too.
pub fn real_path(fs: &dyn HostFs, p: &Path) -> PathBuf {
    let mut rest: Vec<&std::ffi::OsStr> = vec![];
    let mut existing = p;
    loop {
        if fs.kind(existing).is_some() {
            if let Some(c) = fs.canonicalize(existing) {
                return rest.iter().rev().fold(c, |acc, n| acc.join(n));
            }
        }
        match (existing.file_name(), existing.parent()) {
            (Some(n), Some(parent)) => {
                rest.push(n);
                existing = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// The other places the host shows the existing path `p` (absolute, no link on its way):
/// the same directory of the same file system mounted again elsewhere (a bind-mount alias,
/// `/lustre/scratch` of `/scratch`, an automounter's bind). A hidden path is hidden there too
/// (outside review of the anchors, N5): a tree granted by the alias's name would show it.
pub fn mount_aliases(mounts: &[crate::host::Mount], p: &Path) -> Vec<PathBuf> {
    // The mount `p` is seen through: the last one whose point holds it (a later mount on the
    // same or a deeper point hides what was there).
    let Some(m) = mounts.iter().rev().filter(|m| under(p, &m.point)).max_by_key(|m| bytes(&m.point).len()) else {
        return vec![];
    };
    let Ok(rel) = p.strip_prefix(&m.point) else { return vec![] };
    let in_fs = m.root.join(rel);
    let mut out: Vec<PathBuf> = vec![];
    for o in mounts.iter().filter(|o| o.dev == m.dev && o.point != m.point) {
        let alias = match in_fs.strip_prefix(&o.root) {
            // The mount shows the whole directory holding `p`: `p` is at its place there.
            Ok(rest) if under(&in_fs, &o.root) => normalized(&o.point.join(rest)),
            // The mount shows a part of `p` (a bind of the state directory's `sessions/`
            // elsewhere; second outside review of the anchors, S3): all of it is hidden.
            _ if under(&o.root, &in_fs) => normalized(&o.point),
            _ => continue,
        };
        if alias != p && !out.contains(&alias) {
            out.push(alias);
        }
    }
    out
}

/// Where `p` really is, if that is elsewhere: it exists, and it or a directory above it is
/// a link. A path with no link on its way is looked up once (`kind`, cached), no more.
pub fn real_if_linked(fs: &dyn HostFs, p: &Path) -> Option<PathBuf> {
    let kind = fs.kind(p)?;
    if kind != Kind::Symlink && !through_link(fs, p) {
        return None;
    }
    Some(real_path(fs, p)).filter(|r| r != p)
}

/// Whether a directory above `p` (not `/`) is a symbolic link.
pub fn through_link(fs: &dyn HostFs, p: &Path) -> bool {
    byte_ancestors(bytes(p))
        .skip(1)
        .filter(|a| a.len() > 1)
        .any(|a| fs.kind(Path::new(std::ffi::OsStr::from_bytes(a))) == Some(Kind::Symlink))
}

/// Expands `*` and `?` in the LAST component of an absolute path against the host.
pub fn expand_glob(fs: &dyn HostFs, p: &Path) -> Vec<PathBuf> {
    let s = p.to_string_lossy();
    if !crate::glob::has_glob(&s) {
        return vec![p.to_path_buf()];
    }
    let (Some(parent), Some(pat)) = (p.parent(), p.file_name().map(|n| n.to_string_lossy().to_string())) else {
        return vec![];
    };
    if crate::glob::has_glob(&parent.to_string_lossy()) {
        return vec![];
    }
    fs.read_dir(parent)
        .iter()
        .filter(|n| n.to_str().is_some_and(|n| crate::glob::glob_match(&pat, n)))
        .map(|n| parent.join(n))
        .collect()
}

/// `/etc/passwd` inside: the system accounts and the user, so the site's directory of
/// users cannot be enumerated but `id`, `ls -l` and `whoami` still work.
pub fn synth_passwd(host: &str, uid: u32, user_line: &str) -> String {
    let mut out = String::new();
    for line in host.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 7 {
            continue;
        }
        let Ok(id) = f[2].parse::<u32>() else {
            continue;
        };
        if (id < 1000 || id == 65534) && id != uid {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(user_line);
    out.push('\n');
    out
}

/// `/etc/group` inside: system groups with member lists reduced to the user, the user's group,
/// and the supplementary groups the jail maps (`mapped`, with the user as their member).
pub fn synth_group(host: &str, user: &str, gid: u32, group_name: &str, mapped: &[(u32, String)]) -> String {
    let mut out = String::new();
    let mut have_own = false;
    for line in host.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 4 {
            continue;
        }
        let Ok(id) = f[2].parse::<u32>() else {
            continue;
        };
        if id == gid {
            have_own = true;
        } else if id >= 1000 && id != 65534 {
            continue;
        }
        let members: Vec<&str> = f[3].split(',').filter(|m| *m == user).collect();
        out.push_str(&format!("{}:x:{}:{}\n", f[0], id, members.join(",")));
    }
    if !have_own {
        out.push_str(&format!("{group_name}:x:{gid}:\n"));
    }
    for (id, name) in mapped.iter().filter(|(id, _)| *id >= 1000 && *id != 65534 && *id != gid) {
        out.push_str(&format!("{name}:x:{id}:{user}\n"));
    }
    out
}

pub const NSSWITCH: &str = "# written by agent-sandbox: the site's directory services are not reachable inside\n\
passwd: files\ngroup: files\nshadow: files\ngshadow: files\nhosts: files dns\nnetworks: files\n\
protocols: files\nservices: files\nethers: files\nrpc: files\nnetgroup: files\nautomount: files\n";

#[cfg(test)]
mod tests {

    /// A path of a file system mounted twice (a bind-mount alias) is found at the other
    /// mount; one of a mount of another directory of it, or of another file system, is not.
    #[test]
    fn a_hidden_path_is_found_at_each_mount_that_shows_it() {
        let m = |dev: &str, root: &str, point: &str| crate::host::Mount {
            dev: dev.into(),
            root: root.into(),
            point: point.into(),
        };
        let mounts = [
            m("8:1", "/", "/"),
            m("8:2", "/", "/scratch"),
            m("8:2", "/", "/lustre/scratch"),
            m("8:2", "/u", "/mnt/u"),
            m("8:2", "/v", "/mnt/v"),
            m("8:2", "/u/local/state/agent-sandbox/sessions", "/mnt/sessions"),
            m("8:3", "/", "/other"),
        ];
        let aliases = mount_aliases(&mounts, Path::new("/scratch/u/local/state/agent-sandbox"));
        assert_eq!(
            aliases,
            [
                PathBuf::from("/lustre/scratch/u/local/state/agent-sandbox"),
                PathBuf::from("/mnt/u/local/state/agent-sandbox"),
                PathBuf::from("/mnt/sessions"),
            ]
        );
        assert!(mount_aliases(&mounts, Path::new("/home/u/.ssh")).is_empty());
    }

    use super::*;
    use crate::host::FakeFs;

    #[test]
    fn hidden_child_rebuilds_the_parent_and_leaves_the_child_out() {
        let fs = FakeFs::default().file("/etc/hosts").dir("/etc/munge").file("/etc/munge/munge.key").dir("/etc/ssl");
        let hidden = Hidden { paths: vec!["/etc/munge".into()], ..Hidden::default() };
        let mut b = Builder::new(&fs, &hidden);
        b.bind_tree(Path::new("/etc"), false);
        let targets: Vec<String> = b.mounts.iter().map(|m| format!("{m:?}")).collect();
        assert!(matches!(&b.mounts[0], MountSpec::Tmpfs { target, .. } if target == Path::new("/etc")));
        assert!(targets.iter().any(|t| t.contains("/etc/hosts")));
        assert!(targets.iter().any(|t| t.contains("/etc/ssl")));
        assert!(!targets.iter().any(|t| t.contains("munge")), "{targets:?}");
        assert!(matches!(b.mounts.last(), Some(MountSpec::SealTree { rw: false, .. })));
    }

    #[test]
    fn with_overlay_a_hidden_child_becomes_a_whiteout_and_overrides_go_in_the_layer() {
        let fs = FakeFs::default().file("/etc/hosts").file("/etc/passwd").dir("/etc/munge").dir("/etc/ssl");
        let hidden = Hidden { paths: vec!["/etc/munge".into(), "/etc/not-here".into()], ..Hidden::default() };
        let mounts = vec![PathBuf::from("/etc"), PathBuf::from("/proc")];
        let mut b = Builder::new(&fs, &hidden);
        b.overlay = true;
        b.mountpoints = &mounts;
        b.overrides.push(MountSpec::File { target: "/etc/passwd".into(), contents: "x".into(), mode: 0o644 });
        b.bind_tree(Path::new("/etc"), false);
        match &b.mounts[0] {
            MountSpec::Overlay { target, whiteouts, files, .. } => {
                assert_eq!(target, Path::new("/etc"));
                assert_eq!(whiteouts, &vec![PathBuf::from("/etc/munge")], "missing paths need no whiteout");
                assert_eq!(files[0].path, PathBuf::from("/etc/passwd"));
            }
            m => panic!("expected an overlay, got {m:?}"),
        }
        assert!(b.overrides.is_empty(), "the override was consumed by the layer");
        assert_eq!(b.mounts.len(), 1);
    }

    #[test]
    fn a_tree_with_a_host_mount_below_it_is_rebuilt_not_overlaid() {
        // A container's /etc/resolv.conf bind (or `ip netns exec`'s): the kernel refuses such
        // a tree as an overlay's lower layer in a user namespace.
        let fs = FakeFs::default().file("/etc/hosts").file("/etc/resolv.conf").dir("/etc/munge").dir("/etc/ssl");
        let hidden = Hidden { paths: vec!["/etc/munge".into()], ..Hidden::default() };
        let mounts = vec![PathBuf::from("/etc/resolv.conf")];
        let mut b = Builder::new(&fs, &hidden);
        b.overlay = true;
        b.mountpoints = &mounts;
        b.bind_tree(Path::new("/etc"), false);
        assert!(
            matches!(&b.mounts[0], MountSpec::Tmpfs { target, .. } if target == Path::new("/etc")),
            "{:?}",
            b.mounts
        );
        assert!(b
            .mounts
            .iter()
            .any(|m| matches!(m, MountSpec::TreeBind { source, .. } if source == Path::new("/etc/resolv.conf"))));
        assert!(!b.mounts.iter().any(|m| format!("{m:?}").contains("munge")));
    }

    #[test]
    fn nested_and_repeated_hidden_paths_get_one_whiteout() {
        let fs = FakeFs::default().file("/etc/a/b/c").dir("/etc/x");
        let hidden = Hidden { paths: vec!["/etc/a/b/c".into(), "/etc/a".into(), "/etc/a".into()], ..Hidden::default() };
        let mut b = Builder::new(&fs, &hidden);
        b.overlay = true;
        b.bind_tree(Path::new("/etc"), false);
        match &b.mounts[0] {
            MountSpec::Overlay { whiteouts, .. } => assert_eq!(whiteouts, &vec![PathBuf::from("/etc/a")]),
            m => panic!("expected an overlay, got {m:?}"),
        }
    }

    #[test]
    fn byte_ancestors_are_the_paths_ancestors() {
        for p in ["/", "/a", "/a/b/c", "/home/u/.cache/huggingface/token"] {
            let ours: Vec<&[u8]> = byte_ancestors(p.as_bytes()).collect();
            let std: Vec<&[u8]> = Path::new(p).ancestors().map(|a| a.as_os_str().as_encoded_bytes()).collect();
            assert_eq!(ours, std, "{p}");
        }
    }

    #[test]
    fn stores_are_found_by_ancestor_and_by_range_and_only_present_ones_rebuild() {
        let mut h = Hidden::default();
        h.add_stores(
            ["/home/u/.npmrc", "/home/u/.cargo/credentials", "/home/u/.cargo/credentials.toml", "/home/u/.cargo-x/y"]
                .map(PathBuf::from),
        );
        assert!(h.covers(Path::new("/home/u/.cargo/credentials.toml")));
        assert!(h.covers(Path::new("/home/u/.npmrc/inside")));
        assert!(!h.covers(Path::new("/home/u/.cargo")) && !h.covers(Path::new("/home/u/.npmrc2")));
        let below: Vec<&PathBuf> = h.stores_below(Path::new("/home/u/.cargo")).collect();
        assert_eq!(below, vec![Path::new("/home/u/.cargo/credentials"), Path::new("/home/u/.cargo/credentials.toml")]);
        assert_eq!(h.stores_below(Path::new("/")).count(), 4);
        let fs = FakeFs::default().file("/home/u/.cargo/credentials.toml");
        assert!(h.any_below(Path::new("/home/u/.cargo"), &fs));
        assert!(!h.any_below(Path::new("/home/u/.cargo-x"), &fs), "missing: no rebuild");
    }

    #[test]
    fn tree_without_hidden_paths_is_one_bind() {
        let fs = FakeFs::default().dir("/usr/bin");
        let hidden = Hidden { paths: vec!["/etc/munge".into()], ..Hidden::default() };
        let mut b = Builder::new(&fs, &hidden);
        b.bind_tree(Path::new("/usr"), false);
        assert_eq!(
            b.mounts,
            vec![MountSpec::Bind { source: "/usr".into(), target: "/usr".into(), rw: false, dir: true }]
        );
    }

    #[test]
    fn symlinked_top_dirs_are_replicated_not_followed() {
        let fs = FakeFs::default().symlink("/bin", "usr/bin");
        let hidden = Hidden::default();
        let mut b = Builder::new(&fs, &hidden);
        b.bind_tree(Path::new("/bin"), false);
        assert_eq!(b.mounts, vec![MountSpec::Symlink { target: "/bin".into(), link: "usr/bin".into() }]);
    }

    #[test]
    fn glob_expands_last_component() {
        let fs = FakeFs::default()
            .file("/etc/ssh/ssh_host_rsa_key")
            .file("/etc/ssh/ssh_host_rsa_key.pub")
            .file("/etc/ssh/sshd_config");
        let got = expand_glob(&fs, Path::new("/etc/ssh/ssh_host_*_key"));
        assert_eq!(got, vec![PathBuf::from("/etc/ssh/ssh_host_rsa_key")]);
    }

    #[test]
    fn passwd_keeps_system_accounts_and_the_user_only() {
        let host = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\nbob:x:1001:1001::/home/bob:/bin/sh\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n";
        let out = synth_passwd(host, 1001, "bob:x:1001:1001::/home/bob:/bin/sh");
        assert!(out.contains("root:x:0:0"));
        assert!(out.contains("nobody"));
        assert!(out.contains("bob:x:1001"));
        assert!(!out.contains("alice"), "{out}");
    }

    #[test]
    fn group_strips_other_members() {
        let host = "sudo:x:27:alice,bob\nalice:x:1000:\nbob:x:1001:\n";
        let out = synth_group(host, "bob", 1001, "bob", &[]);
        assert!(out.contains("sudo:x:27:bob\n"), "{out}");
        assert!(!out.contains("alice"), "{out}");
        assert!(out.contains("bob:x:1001:"));
    }
}
