//! Per-kind request counters, shared by the FUSE threads and the signal thread.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Every request kind slowfs answers; the metadata ones are delayed.
#[derive(Clone, Copy)]
pub enum Op {
    Lookup,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Opendir,
    Readdir,
    /// A readdir at the listing's end, which only learns that it ended: NFS's READDIR reply
    /// says so itself (its `eof`), with no round trip of its own. Counted, not delayed.
    ReaddirEnd,
    Create,
    Statfs,
    Access,
    /// A flush to the server's disk (NFS's COMMIT, or a stable WRITE): a round trip.
    Fsync,
    Xattr,
    Read,
    Write,
}

const NAMES: [&str; 22] = [
    "lookup",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "rename",
    "link",
    "open",
    "opendir",
    "readdir",
    "readdir-end",
    "create",
    "statfs",
    "access",
    "fsync",
    "xattr",
    "read",
    "write",
];

impl Op {
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }

    /// Data requests are not round trips of metadata: they go through undelayed.
    pub fn is_metadata(self) -> bool {
        !matches!(self, Op::Read | Op::Write | Op::Xattr | Op::ReaddirEnd)
    }
}

#[derive(Clone, Default)]
pub struct Counters(Arc<[AtomicU64; 22]>);

impl Counters {
    pub fn add(&self, op: Op) {
        self.0[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn reset(&self) {
        for c in self.0.iter() {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// `kind count` lines, then `metadata TOTAL` (the delayed ones).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut meta = 0;
        for (i, name) in NAMES.iter().enumerate() {
            let n = self.0[i].load(Ordering::Relaxed);
            out.push_str(&format!("{name} {n}\n"));
            if i < Op::Xattr as usize {
                meta += n;
            }
        }
        out.push_str(&format!("metadata {meta}\n"));
        out
    }
}
