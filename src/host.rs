//! Host facts: who the user is, what the kernel offers, and a read-only view of the host
//! filesystem. The plan is a pure function of these; tests give it a fake `HostFs`.

pub mod configs;

pub use configs::{GitConfigFile, UserConfigs};
#[cfg(test)]
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Char,
    Other,
}

/// What the plan may ask of the host filesystem. `kind` does not follow the last symlink.
pub trait HostFs {
    fn kind(&self, p: &Path) -> Option<Kind>;
    /// Sorted entry names, shared: the same directories (/dev above all) are asked for often.
    fn read_dir(&self, p: &Path) -> std::sync::Arc<[OsString]>;
    fn read_link(&self, p: &Path) -> Option<PathBuf>;
    fn canonicalize(&self, p: &Path) -> Option<PathBuf>;
    /// Up to `max` bytes of a regular file (links followed; a FIFO or device is not opened
    /// for reading). For config files the plan reads: a repository's, an `.envrc`.
    fn read_small(&self, p: &Path, max: u64) -> Option<Vec<u8>>;
    /// The device and inode `p` named when the plan asked its `kind` (the last symlink not
    /// followed; None for a link or nothing): what a bind or rule made later must still find
    /// there (`plan::anchor`). None where the view keeps no identities (a test's).
    fn identity(&self, _p: &Path) -> Option<(u64, u64)> {
        None
    }
    /// Asks for these directories' listings (`read_dir`, and their entries' kinds) side by
    /// side, before the questions about them come one by one: a network filesystem answers
    /// requests in parallel, so a walk's round trips overlap instead of adding up. A view
    /// that gains nothing from it (a test's) ignores it.
    fn prefetch_dirs(&self, _dirs: &[PathBuf]) {}
    /// The same for `kind` questions (names most often absent: `.git`, `.envrc`).
    fn prefetch_kinds(&self, _paths: &[PathBuf]) {}
    /// The same for `identity` questions (the plan's bind sources, anchored).
    fn prefetch_identities(&self, _paths: &[PathBuf]) {}
    /// Reads these files (`read_small` of `max`) and lists these directories, side by side:
    /// a repository's configs and its hooks directory, each a chain of round trips on NFS.
    fn prefetch_files_and_dirs(&self, _files: &[PathBuf], _max: u64, _dirs: &[PathBuf]) {}
    /// Answers the questions about names in `dir` from one listing of it, as `RealFs::list`
    /// (a repository's `.git`: `commondir`, `config.worktree`, `hooks`, most absent).
    fn answer_from_listing(&self, _dir: &Path) {}
}

/// Requests a walk keeps in flight at once (`HostFs::prefetch_dirs`): NFS's client sends
/// this many side by side without trouble (its slot table holds 64 and more).
const SIDE_BY_SIDE: usize = 8;

/// Whether `side_by_side` and `together` use threads (`overlap_where`).
static OVERLAP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Decides whether the launch overlaps its file work on threads: not where every tree of
/// `trees` (the home, the project) is on a local block device, whose answers come from memory
/// in microseconds: there each thread costs more than it saves (its start, and a wake-up
/// across cores on every hand-over: 1 ms of a 12 ms local start, paired launches, stop 49).
/// A filesystem without a device of its own (major 0: NFS, Lustre, GPFS, CephFS, FUSE, but
/// also btrfs, tmpfs, overlay) keeps the threads, as does one that cannot be looked at. The
/// look asks no server (`AT_STATX_DONT_SYNC`).
pub fn overlap_where(trees: &[&Path]) {
    let on_block_device = |p: &Path| agent_sandbox_sys::file::known_at(p).is_ok_and(|k| libc::major(k.dev) != 0);
    let local = trees.iter().all(|t| on_block_device(t));
    OVERLAP.store(!local, std::sync::atomic::Ordering::Relaxed);
}

fn overlapping() -> bool {
    OVERLAP.load(std::sync::atomic::Ordering::Relaxed)
}

/// `work(item)` for every item, on up to `SIDE_BY_SIDE` threads that end before it returns
/// (one after another here where the trees are local: `overlap_where`); the answers in the
/// items' order.
pub(crate) fn side_by_side<T: Sync, R: Send + Default + Clone>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    // One item: nothing to overlap, no thread.
    if let [one] = items {
        return vec![work(one)];
    }
    if !overlapping() {
        return items.iter().map(work).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let out = std::sync::Mutex::new(vec![R::default(); items.len()]);
    // On stacks of their own, unmapped when they end: glibc would keep each for a thread to
    // come, with the pages it touched, through the session (tests/many). Small: the work's
    // buffers are on the heap.
    agent_sandbox_sys::thread::scope(|s| {
        for _ in 0..SIDE_BY_SIDE.min(items.len()) {
            let spawned = s.spawn(64 << 10, || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = work(item);
                out.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[i] = r;
            });
            if spawned.is_err() {
                break;
            }
        }
    });
    // Items no thread took (none could start): done here.
    let mut out = out.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    for i in next.load(std::sync::atomic::Ordering::Relaxed)..items.len() {
        out[i] = work(&items[i]);
    }
    out
}

/// `a` on a thread of its own while `b` runs here, and both answers: two chains of round
/// trips to a network filesystem that overlap instead of adding up. `a` runs here after `b`
/// where no thread can start, or the trees are local (`overlap_where`); a panic in `a` goes
/// on here.
pub fn together<A: Send, B>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B) -> (A, B) {
    if !overlapping() {
        let b = b();
        return (a(), b);
    }
    // Kept here, not moved into the thread: a thread that cannot start leaves it to run here.
    let cell = std::sync::Mutex::new(Some(a));
    let take = || cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    agent_sandbox_sys::thread::scope(|s| {
        let spawned = s.spawn(256 << 10, || take().map(|a| a()));
        let b = b();
        let ran = match spawned {
            Ok(t) => t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(_) => None,
        };
        match (ran, take()) {
            (Some(a), _) => (a, b),
            (None, Some(a)) => (a(), b),
            (None, None) => unreachable!("the thread took `a`, and so returned its answer"),
        }
    })
}

/// One directory's entries and their kinds (`d_type`), as `RealFs::read_dir` keeps them.
fn entries_of(p: &Path) -> Vec<(OsString, Option<Kind>)> {
    std::fs::read_dir(p)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (e.file_name(), e.file_type().ok().map(kind_of)))
        .collect()
}

/// The host filesystem, with `kind`, `read_dir` and `canonicalize` answers cached for one plan
/// (the same directories, /dev above all, are asked about several times; and what a check
/// saw is what the anchors of the plan's paths are made of, not a later look).
///
/// Under a listed directory (the home and the project: `RealFs::listing`), the plan's many
/// questions about names there (dotfiles, credential files, protected names, placeholders:
/// some sixty, most absent) are answered from one reading of the directory: on a network
/// filesystem each `lstat` is a round trip to the server (a lookup, not cached when the name
/// is absent), the listing a few. A name the listing lacks is absent, and so is everything
/// below it; a direct entry's kind is the listing's (`d_type`); deeper paths under a present
/// name are asked of the host. A directory too big to list cheaply is not listed.
#[derive(Default, Clone)]
pub struct RealFs {
    kinds: std::cell::RefCell<std::collections::HashMap<PathBuf, Option<Kind>>>,
    ids: std::cell::RefCell<std::collections::HashMap<PathBuf, (u64, u64)>>,
    dirs: std::cell::RefCell<std::collections::HashMap<PathBuf, std::sync::Arc<[OsString]>>>,
    canon: std::cell::RefCell<std::collections::HashMap<PathBuf, Option<PathBuf>>>,
    listed: std::cell::RefCell<Vec<(PathBuf, Option<Listing>)>>,
    /// `read_small`'s answers: a config several parts of the plan read (the repository's, the
    /// user's `.gitconfig`) is read once, and they all see the same text.
    read: std::cell::RefCell<SmallReads>,
}

/// `read_small`'s answers by path and size asked.
type SmallReads = std::collections::HashMap<(PathBuf, u64), Option<Vec<u8>>>;

/// One directory's entries and their kinds (`None`: the listing did not say).
type Listing = std::sync::Arc<std::collections::HashMap<OsString, Option<Kind>>>;

/// Past this many entries a directory is not listed: reading it would cost more round trips
/// than the names the plan asks about (a few hundred entries fit one `getdents` of NFS).
const MAX_LISTED: usize = 2048;

fn kind_of(ft: std::fs::FileType) -> Kind {
    if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_char_device() {
        Kind::Char
    } else {
        Kind::Other
    }
}

impl RealFs {
    /// A view whose questions about names under `dirs` are answered from one listing of
    /// each (read at the first question); more can be added with `list`.
    pub fn listing(dirs: &[&Path]) -> RealFs {
        let fs = RealFs::default();
        for d in dirs {
            fs.list(d);
        }
        fs
    }

    /// Answers questions about names under `dir` from one listing of it.
    pub fn list(&self, dir: &Path) {
        let mut l = self.listed.borrow_mut();
        if dir.is_absolute() && !l.iter().any(|(d, _)| d == dir) {
            l.push((dir.to_path_buf(), None));
        }
    }

    /// The directory `p` is there now: the launch made it (and what is on its way) since this
    /// view was read (`plan::ahead`: the state directory, made on a user's first session while
    /// the view was read). A listing above it that lacks the next name on the way has it now;
    /// what the view knew of `p` and each directory on its way is asked again.
    pub fn made_since(&self, p: &Path) {
        for (dir, listing) in self.listed.borrow_mut().iter_mut() {
            let Some(m) = listing.as_mut().filter(|m| !m.is_empty()) else { continue };
            let Some(first) = p.strip_prefix(&*dir).ok().and_then(|rest| rest.components().next()) else { continue };
            if !m.contains_key(first.as_os_str()) {
                std::sync::Arc::make_mut(m).insert(first.as_os_str().to_owned(), Some(Kind::Dir));
            }
        }
        for a in p.ancestors() {
            self.kinds.borrow_mut().remove(a);
            self.ids.borrow_mut().remove(a);
            self.canon.borrow_mut().remove(a);
            self.dirs.borrow_mut().remove(a);
        }
    }

    /// Takes what `other` (a copy of this view that asked other questions) learned.
    pub fn absorb(&self, other: RealFs) {
        fn into<K: Eq + std::hash::Hash, V>(
            mine: &std::cell::RefCell<std::collections::HashMap<K, V>>,
            theirs: std::collections::HashMap<K, V>,
        ) {
            let mut m = mine.borrow_mut();
            for (k, v) in theirs {
                m.entry(k).or_insert(v);
            }
        }
        into(&self.kinds, other.kinds.into_inner());
        into(&self.ids, other.ids.into_inner());
        into(&self.dirs, other.dirs.into_inner());
        into(&self.canon, other.canon.into_inner());
        into(&self.read, other.read.into_inner());
        let mut listed = self.listed.borrow_mut();
        for (d, l) in other.listed.into_inner() {
            match listed.iter_mut().find(|(x, _)| *x == d) {
                Some(slot) if slot.1.is_none() => slot.1 = l,
                Some(_) => {}
                None => listed.push((d, l)),
            }
        }
    }

    /// `list` for each of `dirs`, their listings read now, side by side (a round trip or
    /// three each on a network filesystem, which answers them in parallel).
    pub fn list_side_by_side(&self, dirs: &[PathBuf]) {
        for d in dirs {
            self.list(d);
        }
        let todo: Vec<PathBuf> = self
            .listed
            .borrow()
            .iter()
            .filter(|(d, l)| l.is_none() && dirs.contains(d))
            .map(|(d, _)| d.clone())
            .collect();
        let read = side_by_side(&todo, |d| Some(read_listing(d).unwrap_or_default()));
        let mut l = self.listed.borrow_mut();
        for (d, listing) in todo.iter().zip(read) {
            if let Some(slot) = l.iter_mut().find(|(x, _)| x == d) {
                slot.1 = listing;
            }
        }
    }

    /// The listing of the listed directory `p` is in, and `p`'s path below it.
    /// The innermost that could be listed: a listed directory that is missing or too big
    /// leaves the questions to the one above it (`~/.config` absent: the home's listing says
    /// so for everything below it).
    fn listed_under<'p>(&self, p: &'p Path) -> Option<(Listing, std::path::Components<'p>)> {
        let mut l = self.listed.borrow_mut();
        let mut under: Vec<&mut (PathBuf, Option<Listing>)> =
            l.iter_mut().filter(|(d, _)| p.starts_with(d) && p != d.as_path()).collect();
        under.sort_by_key(|(d, _)| std::cmp::Reverse(d.as_os_str().len()));
        for (dir, cached) in under {
            if cached.is_none() {
                *cached = Some(read_listing(dir).unwrap_or_default());
            }
            if let Some(listing) = cached.clone().filter(|m| !m.is_empty()) {
                let rest = p.strip_prefix(&*dir).ok()?.components();
                return Some((listing, rest));
            }
        }
        None
    }

    /// The listing of `p` itself, when it is a listed directory that could be listed.
    fn own_listing(&self, p: &Path) -> Option<Listing> {
        let mut l = self.listed.borrow_mut();
        let (dir, cached) = l.iter_mut().find(|(d, _)| d == p)?;
        if cached.is_none() {
            *cached = Some(read_listing(dir).unwrap_or_default());
        }
        cached.clone().filter(|m| !m.is_empty())
    }

    /// `Some(answer)` when the listing decides `kind(p)`.
    fn kind_from_listing(&self, p: &Path) -> Option<Option<Kind>> {
        let (listing, mut rest) = self.listed_under(p)?;
        let first = rest.next()?;
        match listing.get(first.as_os_str()) {
            None => Some(None),
            Some(k) if rest.next().is_none() => k.map(Some),
            Some(_) => None,
        }
    }
}

impl RealFs {
    /// A directory's listing, kept for `read_dir`; each entry's kind for `kind` (`d_type`;
    /// std asks `lstat` where the filesystem leaves it unknown): a caller that lists a
    /// directory and then asks the kind of each entry (the walk for nested repositories)
    /// makes no round trip per entry.
    fn remember_dir(&self, p: &Path, entries: Vec<(OsString, Option<Kind>)>) -> std::sync::Arc<[OsString]> {
        let mut names = Vec::with_capacity(entries.len());
        {
            let mut kinds = self.kinds.borrow_mut();
            for (name, kind) in entries {
                if let Some(k) = kind {
                    kinds.entry(p.join(&name)).or_insert(Some(k));
                }
                names.push(name);
            }
        }
        names.sort();
        let v: std::sync::Arc<[OsString]> = names.into();
        self.dirs.borrow_mut().insert(p.to_path_buf(), v.clone());
        v
    }
}

/// The entries of `dir` with their kinds, or `None` when it cannot be read or is too big to
/// be worth it (the caller then asks name by name). An empty map stands for "not listed".
fn read_listing(dir: &Path) -> Option<Listing> {
    let mut m = std::collections::HashMap::new();
    for e in std::fs::read_dir(dir).ok()? {
        let e = e.ok()?;
        if m.len() >= MAX_LISTED {
            return None;
        }
        m.insert(e.file_name(), e.file_type().ok().map(kind_of));
    }
    // "." stands in for an empty directory, which is listed too.
    m.insert(OsString::from("."), Some(Kind::Dir));
    Some(std::sync::Arc::new(m))
}

impl HostFs for RealFs {
    fn kind(&self, p: &Path) -> Option<Kind> {
        if let Some(k) = self.kinds.borrow().get(p) {
            return *k;
        }
        let k = match self.kind_from_listing(p) {
            Some(k) => k,
            None => std::fs::symlink_metadata(p).ok().map(|m| {
                if !m.file_type().is_symlink() {
                    use std::os::unix::fs::MetadataExt;
                    self.ids.borrow_mut().insert(p.to_path_buf(), (m.dev(), m.ino()));
                }
                kind_of(m.file_type())
            }),
        };
        self.kinds.borrow_mut().insert(p.to_path_buf(), k);
        k
    }
    fn read_dir(&self, p: &Path) -> std::sync::Arc<[OsString]> {
        if let Some(v) = self.dirs.borrow().get(p) {
            return v.clone();
        }
        // A listed directory's own listing serves (not read a second time).
        if let Some(l) = self.own_listing(p) {
            let entries = l.iter().filter(|(n, _)| n.as_os_str() != ".").map(|(n, k)| (n.clone(), *k)).collect();
            return self.remember_dir(p, entries);
        }
        // A directory the listing says is not there has no entries (no open to learn it).
        let absent = matches!(self.kind_from_listing(p), Some(None));
        let entries = if absent { vec![] } else { entries_of(p) };
        self.remember_dir(p, entries)
    }
    fn prefetch_dirs(&self, dirs: &[PathBuf]) {
        let todo: Vec<&PathBuf> = dirs
            .iter()
            .filter(|d| !self.dirs.borrow().contains_key(*d) && !matches!(self.kind_from_listing(d), Some(None)))
            .collect();
        if todo.len() < 2 {
            return;
        }
        for (d, entries) in todo.iter().zip(side_by_side(&todo, |d| entries_of(d))) {
            self.remember_dir(d, entries);
        }
    }
    fn prefetch_kinds(&self, paths: &[PathBuf]) {
        let todo: Vec<&PathBuf> = paths
            .iter()
            .filter(|p| !self.kinds.borrow().contains_key(*p) && self.kind_from_listing(p).is_none())
            .collect();
        if todo.len() < 2 {
            return;
        }
        let stats = side_by_side(&todo, |p| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(p).ok().map(|m| (kind_of(m.file_type()), m.dev(), m.ino()))
        });
        for (p, st) in todo.iter().zip(stats) {
            if let Some((k, dev, ino)) = st {
                if k != Kind::Symlink {
                    self.ids.borrow_mut().insert(p.to_path_buf(), (dev, ino));
                }
            }
            self.kinds.borrow_mut().insert(p.to_path_buf(), st.map(|s| s.0));
        }
    }
    fn read_link(&self, p: &Path) -> Option<PathBuf> {
        std::fs::read_link(p).ok()
    }
    fn canonicalize(&self, p: &Path) -> Option<PathBuf> {
        if let Some(c) = self.canon.borrow().get(p) {
            return c.clone();
        }
        let c = std::fs::canonicalize(p).ok();
        self.canon.borrow_mut().insert(p.to_path_buf(), c.clone());
        c
    }
    fn identity(&self, p: &Path) -> Option<(u64, u64)> {
        if !self.kinds.borrow().contains_key(p) {
            self.kind(p);
        }
        if let Some(id) = self.ids.borrow().get(p).copied() {
            return Some(id);
        }
        // A kind the listing answered (no `lstat` then) gets its identity from one now. What
        // is there must still be what the listing said: another kind (a link swapped in since)
        // gets an identity no inode has, so the jail refuses the path instead of using it
        // unanchored.
        let listed = (*self.kinds.borrow().get(p)?)?;
        if listed == Kind::Symlink {
            return None;
        }
        let id = identity_as_listed(p, listed);
        self.ids.borrow_mut().insert(p.to_path_buf(), id);
        Some(id)
    }
    fn answer_from_listing(&self, dir: &Path) {
        self.list(dir);
    }
    fn prefetch_files_and_dirs(&self, files: &[PathBuf], max: u64, dirs: &[PathBuf]) {
        #[derive(Clone, Default)]
        enum Got {
            #[default]
            Nothing,
            Read(Option<Vec<u8>>),
            Listed(Vec<(OsString, Option<Kind>)>),
        }
        let reads = files.iter().filter(|p| {
            !self.read.borrow().contains_key(&(p.to_path_buf(), max))
                && !matches!(self.kind_from_listing(p), Some(None))
        });
        let lists = dirs.iter().filter(|d| {
            !self.dirs.borrow().contains_key(*d)
                && self.own_listing(d).is_none()
                && !matches!(self.kind_from_listing(d), Some(None))
        });
        let todo: Vec<(&PathBuf, bool)> = reads.map(|p| (p, true)).chain(lists.map(|d| (d, false))).collect();
        if todo.len() < 2 {
            return;
        }
        let got = side_by_side(&todo, |(p, read)| match read {
            true => Got::Read(read_small_file(p, max)),
            false => Got::Listed(entries_of(p)),
        });
        for ((p, _), g) in todo.iter().zip(got) {
            match g {
                Got::Read(data) => {
                    self.read.borrow_mut().insert((p.to_path_buf(), max), data);
                }
                Got::Listed(entries) => {
                    self.remember_dir(p, entries);
                }
                Got::Nothing => {}
            }
        }
    }
    fn prefetch_identities(&self, paths: &[PathBuf]) {
        for p in paths {
            if !self.kinds.borrow().contains_key(p) {
                self.kind(p);
            }
        }
        let todo: Vec<(PathBuf, Kind)> = paths
            .iter()
            .filter(|p| !self.ids.borrow().contains_key(*p))
            .filter_map(|p| match self.kinds.borrow().get(p) {
                Some(Some(k)) if *k != Kind::Symlink => Some((p.clone(), *k)),
                _ => None,
            })
            .collect();
        if todo.len() < 2 {
            return;
        }
        let ids = side_by_side(&todo, |(p, k)| identity_as_listed(p, *k));
        let mut known = self.ids.borrow_mut();
        for ((p, _), id) in todo.into_iter().zip(ids) {
            known.entry(p).or_insert(id);
        }
    }
    fn read_small(&self, p: &Path, max: u64) -> Option<Vec<u8>> {
        let key = (p.to_path_buf(), max);
        if let Some(data) = self.read.borrow().get(&key) {
            return data.clone();
        }
        // A file the listing says is not there is not opened (a lookup at the server each).
        let absent = matches!(self.kind_from_listing(p), Some(None));
        let data = if absent { None } else { read_small_file(p, max) };
        self.read.borrow_mut().insert(key, data.clone());
        data
    }
}

/// The device and inode at `p` if what is there is still of the kind a listing said; else
/// one no inode has, so that the jail refuses the path instead of using it unanchored.
fn identity_as_listed(p: &Path, listed: Kind) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(p) {
        Ok(m) if kind_of(m.file_type()) == listed => (m.dev(), m.ino()),
        _ => (u64::MAX, u64::MAX),
    }
}

/// Up to `max` bytes of the regular file at `p` (see `HostFs::read_small`).
fn read_small_file(p: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: a FIFO the jail of an earlier session planted must not hold the launch.
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(p).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut data = vec![];
    f.take(max).read_to_end(&mut data).ok()?;
    Some(data)
}

/// An in-memory filesystem for plan tests.
#[cfg(test)]
#[derive(Default, Clone)]
pub struct FakeFs {
    pub entries: BTreeMap<PathBuf, (Kind, Option<PathBuf>)>,
    pub contents: BTreeMap<PathBuf, Vec<u8>>,
}

#[cfg(test)]
impl FakeFs {
    pub fn dir(mut self, p: &str) -> Self {
        self.add(p, Kind::Dir, None);
        self
    }
    pub fn file(mut self, p: &str) -> Self {
        self.add(p, Kind::File, None);
        self
    }
    /// A file with its text.
    pub fn content(mut self, p: &str, text: &str) -> Self {
        self.add(p, Kind::File, None);
        self.contents.insert(PathBuf::from(p), text.as_bytes().to_vec());
        self
    }
    pub fn char_device(mut self, p: &str) -> Self {
        self.add(p, Kind::Char, None);
        self
    }
    pub fn symlink(mut self, p: &str, to: &str) -> Self {
        self.add(p, Kind::Symlink, Some(PathBuf::from(to)));
        self
    }
    fn add(&mut self, p: &str, k: Kind, link: Option<PathBuf>) {
        let path = PathBuf::from(p);
        for a in path.ancestors().skip(1) {
            self.entries.entry(a.to_path_buf()).or_insert((Kind::Dir, None));
        }
        self.entries.insert(path, (k, link));
    }
}

#[cfg(test)]
impl FakeFs {
    /// `p` with a directory above it that is a link to an absolute path followed, as the
    /// kernel does (`~/.local -> /scratch/u/local` holds `~/.local/share`).
    fn through_links(&self, p: &Path) -> Option<PathBuf> {
        for a in p.ancestors().skip(1) {
            if let Some((Kind::Symlink, Some(t))) = self.entries.get(a) {
                let rest = p.strip_prefix(a).ok()?;
                let q = if t.is_absolute() { t.join(rest) } else { return None };
                return Some(self.through_links(&q).unwrap_or(q));
            }
        }
        None
    }
}

#[cfg(test)]
impl HostFs for FakeFs {
    fn kind(&self, p: &Path) -> Option<Kind> {
        match self.entries.get(p) {
            Some(e) => Some(e.0),
            None => self.entries.get(&self.through_links(p)?).map(|e| e.0),
        }
    }
    fn read_dir(&self, p: &Path) -> std::sync::Arc<[OsString]> {
        self.entries
            .keys()
            .filter(|k| k.parent() == Some(p) && k.as_path() != p)
            .filter_map(|k| k.file_name().map(|n| n.to_os_string()))
            .collect()
    }
    fn read_link(&self, p: &Path) -> Option<PathBuf> {
        self.entries.get(p).and_then(|e| e.1.clone())
    }
    fn canonicalize(&self, p: &Path) -> Option<PathBuf> {
        // Fake paths are already canonical unless they are symlinks to absolute targets, or
        // lie below one.
        if let Some(q) = (!self.entries.contains_key(p)).then(|| self.through_links(p)).flatten() {
            return self.canonicalize(&q);
        }
        match self.entries.get(p)? {
            (Kind::Symlink, Some(t)) if t.is_absolute() => Some(t.clone()),
            _ => Some(p.to_path_buf()),
        }
    }
    fn read_small(&self, p: &Path, max: u64) -> Option<Vec<u8>> {
        let data = self.contents.get(p)?;
        Some(data[..data.len().min(max as usize)].to_vec())
    }
}

/// Whether unprivileged user namespaces can be created, and if not, why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UsernsSupport {
    pub available: bool,
    pub why_not: Option<String>,
}

/// The calling user and their home, as the password database gives them: the first of the
/// facts (`HostFacts::gather_for`), all that a look ahead at the home needs (`plan::ahead`).
pub struct Who {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    /// `$HOME` as the password database gives it, and where it really is.
    pub home: PathBuf,
    pub home_canonical: PathBuf,
    pub shell: PathBuf,
    etc_passwd: String,
}

impl Who {
    pub fn gather() -> Result<Who, HostError> {
        let uid = nix::unistd::getuid();
        let gid = nix::unistd::getgid();
        let etc_passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        // The local files answer for local users without a round of NSS (its own reads of
        // nsswitch.conf, passwd and group); directory users (LDAP, SSSD) go through NSS.
        let (name, home, shell) = match passwd_entry(&etc_passwd, uid.as_raw()) {
            Some(e) => e,
            None => {
                let pw = nix::unistd::User::from_uid(uid).ok().flatten().ok_or(HostError::NoUser(uid.as_raw()))?;
                (pw.name, pw.dir, pw.shell)
            }
        };
        let home_canonical = std::fs::canonicalize(&home).unwrap_or_else(|_| home.clone());
        Ok(Who { uid: uid.as_raw(), gid: gid.as_raw(), name, home, home_canonical, shell, etc_passwd })
    }
}

/// Facts about the host and the calling user that the plan depends on.
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub group: String,
    /// `$HOME` as the password database gives it (not the environment).
    pub home: PathBuf,
    pub home_canonical: PathBuf,
    /// The user's agent-sandbox state directory where it really is (`state_dir()`).
    pub state_dir: PathBuf,
    pub shell: PathBuf,
    pub exe: PathBuf,
    /// What the jail runs under Slurm's and the mailers' names: `agent-sandbox-stub` next to
    /// the launcher where it is installed (a small binary: each Slurm call starts it), else
    /// the launcher itself, which dispatches by name the same way.
    pub stub_exe: PathBuf,
    pub env: Vec<(String, String)>,
    pub etc_passwd: String,
    pub etc_group: String,
    pub etc_hosts: String,
    /// The host's `/etc/tmux.conf` (empty if none), read only when the launcher runs inside a
    /// tmux session (`TMUX` set): the jail's tmux then gets its own prefix.
    pub etc_tmux_conf: Option<String>,
    pub userns: UsernsSupport,
    pub landlock_abi: u32,
    /// Overlayfs can be mounted inside a user namespace (Linux 5.11+).
    pub overlay_in_userns: bool,
    /// seccomp user notification can put a descriptor into the caller's table as the answer
    /// (`SECCOMP_ADDFD_FLAG_SEND`, Linux 5.14): what the git guard needs.
    pub guard_kernel: bool,
    /// Every mount point of the host, from /proc/self/mountinfo.
    pub mountpoints: Vec<PathBuf>,
    /// Every mount of the host: which file system, which of its directories, where
    /// (`plan::fs::mount_aliases`: a hidden path is hidden at each place it is shown).
    pub mounts: Vec<Mount>,
    /// Mail programs present on the host at the paths the mail-block stub covers.
    pub mailers: Vec<PathBuf>,
    /// /etc/resolv.conf as the launcher sees it (the filtered mode's upstreams and search list).
    pub resolv_conf: String,
    /// Why this user cannot open /dev/net/tun (None: it can).
    pub tun_unusable: Option<String>,
    /// The launcher's own pid (names per-launcher directories a later start can tell dead).
    pub pid: u32,
    /// `$XDG_RUNTIME_DIR` when it is a private directory of this user (0700, owned), else None.
    pub runtime_dir: Option<PathBuf>,
    /// This host and PID namespace, as a file-name part: a directory named by a pid is only
    /// judged where that pid means the same process (a home is shared by every node).
    pub host_id: String,
    /// The terminals (under /dev/pts) the launcher's stdin, stdout or stderr are: the session's
    /// own, the only ones the Landlock backend opens to the command.
    pub terminals: Vec<PathBuf>,
    /// The user's supplementary groups (the primary included if the kernel lists it).
    pub groups: Vec<u32>,
    /// `/etc/subgid` and the setuid `newgidmap`, read only when the user has a supplementary
    /// group (what maps them into the jail: `plan::groups`).
    pub etc_subgid: String,
    pub newgidmap: Option<PathBuf>,
    /// The user's git and ssh configs, for the paths they name and the global git config's
    /// session copy without its credentials (`plan::catalogue`, `plan::gitstrip`).
    pub user_configs: UserConfigs,
}

/// Every address of every interface of the host (a floor: the jail must not reach the
/// host's own services through them). None when they cannot be read (no descriptor left):
/// the floor then keeps what it knew, or refuses every address if it knew nothing.
pub fn own_addresses() -> Option<Vec<std::net::IpAddr>> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    let mut out: Vec<std::net::IpAddr> = addrs
        .filter_map(|a| a.address)
        .filter_map(|s| {
            if let Some(v4) = s.as_sockaddr_in() {
                Some(std::net::IpAddr::V4(v4.ip()))
            } else {
                s.as_sockaddr_in6().map(|v6| std::net::IpAddr::V6(v6.ip()))
            }
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    // Loopback at least, on any host: none read is a failure too.
    (!out.is_empty()).then_some(out)
}

/// Can this user open /dev/net/tun for reading and writing? (The jail's init opens it with
/// the user's own uid, mapped: the node's permission bits decide.)
pub fn tun_unusable() -> Option<String> {
    use nix::unistd::{access, AccessFlags};
    match access("/dev/net/tun", AccessFlags::R_OK | AccessFlags::W_OK) {
        Ok(()) => None,
        Err(nix::Error::ENOENT) => Some("/dev/net/tun does not exist (the tun module is not loaded)".into()),
        Err(nix::Error::EACCES) => {
            Some("/dev/net/tun is not open to users here (mode 0600; distributions ship 0666: `chmod 0666 /dev/net/tun`, or a udev rule)".into())
        }
        Err(e) => Some(format!("/dev/net/tun: {e}")),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot find uid {0} in the password database")]
    NoUser(u32),
    #[error("cannot locate the agent-sandbox executable: {0}")]
    Exe(std::io::Error),
}

impl HostFacts {
    pub fn gather() -> Result<HostFacts, HostError> {
        HostFacts::gather_for(Who::gather()?)
    }

    /// The facts of the user `who` names.
    pub fn gather_for(who: Who) -> Result<HostFacts, HostError> {
        let Who { uid, gid, name, home: dir, home_canonical, shell, etc_passwd } = who;
        let (uid, gid) = (nix::unistd::Uid::from_raw(uid), nix::unistd::Gid::from_raw(gid));
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let etc_group = read("/etc/group");
        let group = group_name(&etc_group, gid.as_raw())
            .or_else(|| nix::unistd::Group::from_gid(gid).ok().flatten().map(|g| g.name))
            .unwrap_or_else(|| gid.to_string());
        let exe = std::fs::read_link("/proc/self/exe").or_else(|_| std::env::current_exe()).map_err(HostError::Exe)?;
        let stub_exe =
            Some(exe.with_file_name("agent-sandbox-stub")).filter(|s| s.is_file()).unwrap_or_else(|| exe.clone());
        let env: Vec<(String, String)> =
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
        let etc_tmux_conf = env.iter().any(|(k, _)| k == "TMUX").then(|| read("/etc/tmux.conf"));
        let groups: Vec<u32> = nix::unistd::getgroups().unwrap_or_default().into_iter().map(|g| g.as_raw()).collect();
        let others = groups.iter().any(|g| *g != gid.as_raw());
        let (etc_subgid, newgidmap) = match others {
            true => (read("/etc/subgid"), find_newgidmap()),
            false => (String::new(), None),
        };
        crate::timing::mark("facts-local");
        // The state directory and the user's configs side by side (round trips each on a
        // home on NFS).
        let state = || {
            let state_dir = real_location(&state_dir_as_named(&env, &dir));
            let stripped = configs::read_stripped_record(&state_dir);
            (state_dir, stripped)
        };
        let ((state_dir, stripped), mut user_configs) =
            together(state, || UserConfigs::gather(&home_canonical, &dir, &env));
        user_configs.stripped_before = stripped;
        Ok(HostFacts {
            uid: uid.as_raw(),
            gid: gid.as_raw(),
            user: name,
            group,
            home: dir,
            home_canonical,
            state_dir,
            shell,
            exe,
            stub_exe,
            env,
            etc_passwd,
            etc_group,
            etc_hosts: read("/etc/hosts"),
            etc_tmux_conf,
            resolv_conf: read("/etc/resolv.conf"),
            tun_unusable: tun_unusable(),
            userns: userns_support(),
            landlock_abi: landlock_abi(),
            overlay_in_userns: kernel_at_least(5, 11),
            guard_kernel: kernel_at_least(5, 14),
            mountpoints: mountpoints(),
            mounts: mounts(),
            mailers: vec![],
            pid: std::process::id(),
            runtime_dir: private_runtime_dir(uid.as_raw()),
            host_id: host_id(),
            terminals: own_terminals(),
            groups,
            etc_subgid,
            newgidmap,
            user_configs,
        })
    }

    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The user's agent-sandbox state directory (session locks, the audit log, job
    /// directories): hidden inside every jail, wherever `XDG_STATE_HOME` puts it. Its real
    /// path, every symlink on the way resolved on this host when the facts were gathered
    /// (`~/.local -> /scratch/u/local` is common on small homes): the plan hides it where
    /// it really is, and every bind from it names no link.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone()
    }

    /// Where the session's sockets are (the door to its chaperon, the control socket
    /// `agent-sandbox allow` reaches, and its token): `$XDG_RUNTIME_DIR/agent-sandbox/sessions`
    /// where the user has a private runtime directory (memory, on this node: on a home on
    /// NFS, each socket made, changed and removed is a round trip to the server, issue 35),
    /// else `sessions/` in the state directory. Hidden inside every jail either way.
    pub fn sockets_dir(&self) -> PathBuf {
        // Not one in the home (a site's `XDG_RUNTIME_DIR=~/.run`), which a jail granted the
        // home's write could replace on the way with a link (outside look at stop 47).
        let in_home = |r: &Path| r.starts_with(&self.home) || r.starts_with(&self.home_canonical);
        match &self.runtime_dir {
            Some(r) if !in_home(r) => r.join("agent-sandbox/sessions"),
            _ => self.state_dir.join("sessions"),
        }
    }

    /// Every place a session of this user may have its sockets: this environment's, the
    /// login's runtime directory, and the state directory's (a session started without
    /// `XDG_RUNTIME_DIR`, from `su` or cron).
    pub fn sockets_dirs(&self) -> Vec<PathBuf> {
        let mut all = vec![self.sockets_dir()];
        // Where a login's runtime directory is when this shell has no `XDG_RUNTIME_DIR` (su).
        let login = PathBuf::from(format!("/run/user/{}/agent-sandbox/sessions", self.uid));
        for d in [login, self.state_dir.join("sessions")] {
            if !all.contains(&d) {
                all.push(d);
            }
        }
        all
    }

    /// A job's node side takes its state directory from the job's own directory (see
    /// `launch::job`): the one the login node resolved, not what this node's environment says.
    pub fn use_state_dir(&mut self, dir: PathBuf) {
        self.state_dir = dir;
    }
}

/// The state directory as the environment and the password database name it:
/// `$XDG_STATE_HOME/agent-sandbox` when that is absolute, else `~/.local/state/agent-sandbox`.
pub fn state_dir_as_named(env: &[(String, String)], home: &Path) -> PathBuf {
    env.iter()
        .find(|(k, _)| k == "XDG_STATE_HOME")
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".local/state"))
        .join("agent-sandbox")
}

/// `p` with every symlink resolved: its longest part that exists, canonicalized, and the
/// rest (not made yet) as written.
pub fn real_location(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = vec![];
    loop {
        if let Ok(c) = std::fs::canonicalize(&existing) {
            return rest.iter().rev().fold(c, |acc, n: &std::ffi::OsString| acc.join(n));
        }
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(n), Some(parent)) => {
                rest.push(n);
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// The first symbolic link on the way to `p` that leads nowhere (`~/.local ->
/// /scratch/u/local` once a scratch purge removed the target), and where it leads.
pub fn dangling_link(p: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut on_way: Vec<&Path> = p.ancestors().collect();
    on_way.reverse();
    for d in on_way {
        // Below a path that is not there, nothing is: no link further down to blame.
        let m = std::fs::symlink_metadata(d).ok()?;
        if m.file_type().is_symlink() && std::fs::metadata(d).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Some((d.to_path_buf(), std::fs::read_link(d).ok()?));
        }
    }
    None
}

/// `$XDG_RUNTIME_DIR` if it is an absolute path to a directory of `uid` that nobody else can
/// enter (a per-session temp directory under it stays private).
fn private_runtime_dir(uid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    let m = std::fs::symlink_metadata(&dir).ok()?;
    (dir.is_absolute() && m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0).then_some(dir)
}

/// The setuid-root `newgidmap`, if this host has one (a copy that is not setuid root can map
/// nothing but the caller's own gid, which the launcher does itself).
pub fn find_newgidmap() -> Option<PathBuf> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    ["/usr/bin/newgidmap", "/bin/newgidmap", "/usr/sbin/newgidmap"].iter().map(PathBuf::from).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.uid() == 0 && m.permissions().mode() & 0o4000 != 0)
    })
}

/// Whether the running kernel is at least `major.minor`.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let Ok(u) = nix::sys::utsname::uname() else { return false };
    let rel = u.release().to_string_lossy().to_string();
    let mut it = rel.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u32>().ok());
    let (ma, mi) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (ma, mi) >= (major, minor)
}

/// A file of /proc, in one read where it fits: the kernel makes such a file anew for every
/// read(2) from where the last one left off, and `fs::read_to_string` starts with 32 bytes
/// and doubles (eight reads of a mountinfo of 25 mounts, 0.03 ms more than one here).
pub fn read_proc(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(16 << 10);
    std::fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

fn unescape(m: &str) -> PathBuf {
    PathBuf::from(m.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\"))
}

fn mountpoints() -> Vec<PathBuf> {
    read_proc("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .collect()
}

/// One mount of the host (a line of /proc/self/mountinfo): the file system (`dev`,
/// major:minor), the directory of it shown (`root`), and where (`point`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub dev: String,
    pub root: PathBuf,
    pub point: PathBuf,
}

fn mounts() -> Vec<Mount> {
    parse_mounts(&read_proc("/proc/self/mountinfo").unwrap_or_default())
}

pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 4).then(|| Mount { dev: f[2].to_string(), root: unescape(f[3]), point: unescape(f[4]) })
        })
        .collect()
}

/// (name, home, shell) of `uid` in passwd-format text.
fn passwd_entry(text: &str, uid: u32) -> Option<(String, PathBuf, PathBuf)> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 7 && f[2].parse::<u32>().ok() == Some(uid) && !f[0].is_empty())
            .then(|| (f[0].to_string(), PathBuf::from(f[5]), PathBuf::from(f[6])))
    })
}

fn group_name(text: &str, gid: u32) -> Option<String> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 3 && f[2].parse::<u32>().ok() == Some(gid) && !f[0].is_empty()).then(|| f[0].to_string())
    })
}

fn read_sysctl(p: &str) -> Option<i64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Reads the knobs that decide whether an unprivileged user namespace can be created.
/// Cheap file reads only; the launcher still reports the real error if clone fails.
pub fn userns_support() -> UsernsSupport {
    let no = |why: &str| UsernsSupport { available: false, why_not: Some(why.to_string()) };
    if !Path::new("/proc/self/ns/user").exists() {
        return no("the kernel has no user namespaces (CONFIG_USER_NS off)");
    }
    if read_sysctl("/proc/sys/user/max_user_namespaces") == Some(0) {
        return no("user.max_user_namespaces = 0");
    }
    if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return no("kernel.unprivileged_userns_clone = 0");
    }
    // With this AppArmor knob on, only programs with a profile that allows `userns` may
    // create one: whether ours has it only a try can tell (a fork, on such hosts only).
    if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) && !probe_userns() {
        return no("kernel.apparmor_restrict_unprivileged_userns = 1 and no AppArmor profile allows agent-sandbox to create user namespaces");
    }
    UsernsSupport { available: true, why_not: None }
}

/// Forks a child that tries to create a user namespace.
pub fn probe_userns() -> bool {
    // A mount namespace too: Ubuntu's stock `unprivileged_userns` AppArmor profile lets the
    // user namespace be created but strips its capabilities, so only a namespace that needs
    // them tells whether the jail can be built.
    agent_sandbox_sys::process::can_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)
}

/// The node's name and the inode of this PID namespace: `node-4026531836`.
fn host_id() -> String {
    let node = nix::sys::utsname::uname().map(|u| u.nodename().to_string_lossy().into_owned()).unwrap_or_default();
    let node: String = node.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_')).take(64).collect();
    let ns = std::fs::metadata("/proc/self/ns/pid").map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0);
    format!("{node}-{ns}")
}

/// The pseudo-terminals behind descriptors 0-2, if any.
fn own_terminals() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = (0..3)
        .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
        .filter(|p| p.starts_with("/dev/pts/"))
        .collect();
    out.dedup();
    out
}

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// Landlock ABI version of the running kernel, 0 if Landlock is unavailable
/// (not built in, or disabled at boot).
pub fn landlock_abi() -> u32 {
    landlock_kernel_abi().unwrap_or(0)
}

/// ABI version, or the errno explaining why Landlock is unavailable.
pub fn landlock_kernel_abi() -> Result<u32, std::io::Error> {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns
    // the ABI version (or -1 with errno); it reads no memory and creates no file descriptor.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 1 {
        return Err(std::io::Error::last_os_error());
    }
    u32::try_from(ret).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// The mail programs present at the stub's paths (`stub::mail`). A stat per name and
/// directory is a few hundred microseconds on every start, so the answer is cached in the
/// state dir, keyed by the directories' identity and modification times: installing or
/// removing a program changes its directory's mtime and the cache is rebuilt.
pub fn existing_mailers(state_dir: &Path) -> Vec<PathBuf> {
    use crate::stub::mail::{MAILERS, MAILER_DIRS, MAILER_PATHS};
    use std::os::unix::fs::MetadataExt;
    let extra_dirs: Vec<&Path> = MAILER_PATHS.iter().filter_map(|p| Path::new(p).parent()).collect();
    let dirs: Vec<&Path> = MAILER_DIRS.iter().map(Path::new).chain(extra_dirs).collect();
    let mut key = String::from("v2");
    let mut unique: Vec<(u64, u64, &Path)> = vec![];
    for d in &dirs {
        match std::fs::metadata(d) {
            Ok(m) => {
                key.push_str(&format!(" {}:{}:{}.{}", m.dev(), m.ino(), m.mtime(), m.mtime_nsec()));
                if !unique.iter().any(|(dev, ino, _)| *dev == m.dev() && *ino == m.ino()) {
                    unique.push((m.dev(), m.ino(), d));
                }
            }
            Err(_) => key.push_str(" -"),
        }
    }
    let cache = state_dir.join("stubs/mailers");
    if let Ok(text) = std::fs::read_to_string(&cache) {
        let mut lines = text.lines();
        if lines.next() == Some(key.as_str()) {
            return lines.map(PathBuf::from).collect();
        }
    }
    let mut found: Vec<PathBuf> = vec![];
    for (_, _, d) in &unique {
        if MAILER_DIRS.contains(&d.to_str().unwrap_or("")) {
            let names = MAILERS.iter().chain(crate::stub::slurm::SLURM_STUBS);
            found.extend(names.map(|n| d.join(n)).filter(|p| std::fs::symlink_metadata(p).is_ok()));
        }
    }
    found.extend(MAILER_PATHS.iter().map(PathBuf::from).filter(|p| std::fs::symlink_metadata(p).is_ok()));
    let mut text = key;
    for f in &found {
        text.push('\n');
        text.push_str(&f.to_string_lossy());
    }
    // Best effort: a cache that cannot be written only costs the next start its stats.
    let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::create_dir_all(state_dir.join("stubs")).is_ok() && std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, &cache);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names under a listed directory are answered from its one listing: a name made after
    /// it is not seen (no `lstat` was made for it), nor anything below an absent name; a path
    /// below a present name is still asked of the host, and unlisted directories as before.
    #[test]
    fn names_under_a_listed_directory_are_answered_from_one_listing() {
        let d = tempfile::tempdir().unwrap();
        let (root, other) = (d.path().join("home"), d.path().join("elsewhere"));
        std::fs::create_dir_all(root.join(".config/git")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(root.join(".bashrc"), "").unwrap();
        std::os::unix::fs::symlink("/nowhere", root.join("link")).unwrap();
        let fs = RealFs::listing(&[&root]);
        assert_eq!(fs.kind(&root.join(".bashrc")), Some(Kind::File));
        assert_eq!(fs.kind(&root.join("link")), Some(Kind::Symlink));
        std::fs::write(root.join(".zshrc"), "").unwrap();
        std::fs::create_dir_all(root.join(".cargo")).unwrap();
        std::fs::write(root.join(".config/git/credentials"), "").unwrap();
        std::fs::write(other.join("f"), "").unwrap();
        assert_eq!(fs.kind(&root.join(".zshrc")), None, "made after the listing");
        assert_eq!(fs.kind(&root.join(".cargo/credentials")), None, "below a name the listing lacks");
        assert!(fs.read_dir(&root.join(".cargo")).is_empty());
        assert_eq!(fs.kind(&root.join(".config/git/credentials")), Some(Kind::File), "below a present name");
        assert_eq!(fs.kind(&other.join("f")), Some(Kind::File), "not listed");
        assert_eq!(fs.kind(&root), Some(Kind::Dir), "the listed directory itself");
    }

    #[test]
    fn listings_read_side_by_side_answer_and_a_file_they_lack_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("h");
        std::fs::create_dir_all(home.join(".local/share/uv")).unwrap();
        std::fs::write(home.join(".bashrc"), "x").unwrap();
        let fs = RealFs::default();
        let dirs: Vec<PathBuf> = ["", ".local", ".local/share", "missing"].iter().map(|r| home.join(r)).collect();
        fs.list_side_by_side(&dirs);
        // Made after the listings were read: the view answers as listed.
        std::fs::create_dir_all(home.join(".conda")).unwrap();
        std::fs::write(home.join(".conda/environments.txt"), "/x\n").unwrap();
        std::fs::create_dir_all(home.join(".local/share/nvim")).unwrap();
        assert_eq!(fs.read_small(&home.join(".conda/environments.txt"), 64), None);
        assert_eq!(fs.kind(&home.join(".local/share/uv")), Some(Kind::Dir));
        assert_eq!(fs.kind(&home.join(".local/share/nvim")), None);
        assert_eq!(fs.read_small(&home.join(".bashrc"), 64), Some(b"x".to_vec()));
        assert_eq!(fs.kind(&home.join("missing/x")), None);
    }

    /// Directories read side by side (`prefetch_dirs`, `prefetch_kinds`) answer as a view
    /// that asked one question at a time: the same listings, kinds and identities, a missing
    /// directory empty and a missing name absent; what is asked after comes from the answers
    /// taken then (a name made since is not seen).
    #[test]
    fn side_by_side_answers_are_the_ones_asked_one_by_one() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("p");
        let dirs: Vec<PathBuf> = (0..20).map(|i| root.join(format!("d{i}"))).collect();
        for (i, dir) in dirs.iter().enumerate() {
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::write(dir.join(format!("f{i}")), "").unwrap();
            if i % 3 == 0 {
                std::fs::create_dir_all(dir.join(".git")).unwrap();
            }
            if i % 4 == 0 {
                std::os::unix::fs::symlink("/nowhere", dir.join(".envrc")).unwrap();
            }
        }
        let mut asked = dirs.clone();
        asked.push(root.join("missing"));
        let probes: Vec<PathBuf> = dirs
            .iter()
            .flat_map(|d| [d.join("sub/.git"), d.join(".git"), d.join(".envrc"), d.join("nothing")])
            .collect();
        let (fast, slow) = (RealFs::default(), RealFs::default());
        fast.prefetch_dirs(&asked);
        fast.prefetch_kinds(&probes);
        std::fs::write(dirs[1].join("late"), "").unwrap();
        std::fs::create_dir_all(dirs[2].join("sub/.git")).unwrap();
        for dir in &asked {
            let listed: Vec<OsString> = slow.read_dir(dir).iter().filter(|n| *n != "late").cloned().collect();
            assert_eq!(fast.read_dir(dir).to_vec(), listed, "{}", dir.display());
            for name in listed {
                let p = dir.join(&name);
                assert_eq!(fast.kind(&p), slow.kind(&p), "{}", p.display());
            }
        }
        assert_eq!(fast.kind(&dirs[2].join("sub/.git")), None, "made after it was asked");
        for p in probes.iter().filter(|p| !p.starts_with(dirs[2].join("sub"))) {
            assert_eq!(fast.kind(p), slow.kind(p), "{}", p.display());
            let id =
                std::fs::symlink_metadata(p).ok().filter(|m| !m.file_type().is_symlink()).map(|m| (m.dev(), m.ino()));
            assert_eq!(fast.identity(p), id, "{}", p.display());
        }
        assert_eq!(side_by_side(&[1, 2, 3], |x| x * 2), vec![2, 4, 6]);
        assert!(side_by_side(&[] as &[u8], |x| *x).is_empty());
    }

    /// Where the trees are on local block devices the work is done here, one item after
    /// another, with the same answers; elsewhere (a tmpfs, as a network filesystem, has no
    /// device of its own) on threads. The root filesystem of the machine that runs the tests
    /// is a block device's; a tmpfs is looked for in `/dev/shm`.
    #[test]
    fn the_work_overlaps_on_threads_only_where_a_tree_has_no_block_device() {
        let here = || nix::unistd::gettid().as_raw();
        let me = here();
        let on_threads = || {
            let ids = side_by_side(&[1, 2, 3, 4], |_| here());
            let (a, _) = together(here, || ());
            ids.iter().any(|id| *id != me) && a != me
        };
        let root = Path::new("/");
        let block = agent_sandbox_sys::file::known_at(root).is_ok_and(|k| libc::major(k.dev) != 0);
        overlap_where(&[root]);
        assert_eq!(on_threads(), !block, "/ on a block device: {block}");
        assert_eq!(side_by_side(&[1, 2, 3], |x| x * 2), vec![2, 4, 6]);
        assert_eq!(together(|| 1, || 2), (1, 2));
        overlap_where(&[root, Path::new("/dev/shm")]);
        assert!(on_threads(), "a tmpfs has no block device");
        assert_eq!(side_by_side(&[1, 2, 3], |x| x * 2), vec![2, 4, 6]);
        overlap_where(&[Path::new("/nonexistent-asb")]);
        assert!(on_threads(), "a tree that cannot be looked at keeps the threads");
    }

    /// A name the listing answered has an identity (one `lstat` when asked); one swapped for
    /// another kind since the listing has one no inode has, so its anchor refuses it.
    #[test]
    fn a_listed_name_has_its_identity_and_a_swapped_one_none_that_matches() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("home");
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::create_dir_all(root.join("swapped")).unwrap();
        let fs = RealFs::listing(&[&root]);
        assert_eq!(fs.kind(&root.join("data")), Some(Kind::Dir));
        assert_eq!(fs.kind(&root.join("swapped")), Some(Kind::Dir));
        let m = std::fs::metadata(root.join("data")).unwrap();
        assert_eq!(fs.identity(&root.join("data")), Some((m.dev(), m.ino())));
        std::fs::remove_dir(root.join("swapped")).unwrap();
        std::os::unix::fs::symlink("data", root.join("swapped")).unwrap();
        assert_eq!(fs.identity(&root.join("swapped")), Some((u64::MAX, u64::MAX)));
    }

    #[test]
    fn local_passwd_and_group_entries() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nbad line\nu:x:1001:1001:U:/home/u:/bin/zsh\n";
        assert_eq!(passwd_entry(passwd, 1001), Some(("u".into(), "/home/u".into(), "/bin/zsh".into())));
        assert_eq!(passwd_entry(passwd, 42), None);
        assert_eq!(group_name("wheel:x:10:u\nu:x:1001:\n", 1001).as_deref(), Some("u"));
        assert_eq!(group_name("::1001:\n", 1001), None);
    }
}
