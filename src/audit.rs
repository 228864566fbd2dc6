//! The audit log: JSON lines, one record per event, appended to `<state dir>/audit.jsonl`
//! (hidden inside every jail). Field names are stable: orchestrators and admins read them.
//! Never logs environment values; argument lists only of Slurm calls, redacted.
//!
//! A hostile session writes as many records as it likes, so a session writes within bounds
//! (issue 33): every field clipped (by its size as written; an argument list to its first
//! arguments, with its totals kept), records of one kind rate-limited per process, and all
//! the records of a session (its launcher, chaperon, jobs and their steps) within its share
//! of the rotation budget, accounted in the state directory under the log's lock, so that it
//! cannot push every other session's records out of the rotated files. Past its share a
//! session's records are written minimal (what happened, without details) within a second,
//! smaller share. What is left out is counted, by kind, in `audit_suppressed` records; a
//! session's and a job's start and end, and the Slurm channel closed for flooding, are always
//! written. Writers serialize on `audit.lock`: of writers racing past the size, one rotates.

use serde::Serialize;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const FILE: &str = "audit.jsonl";
/// Size at which the log is rotated (to `audit.jsonl.1`, the older ones to `.2` and `.3`).
pub const MAX_BYTES: u64 = 16 << 20;
/// Rotated files kept: with the live one, up to 64 MiB of history, so that a flood of
/// refusals (the supervisor writes one a second per source) takes hours to push it out.
const ROTATED: u32 = 3;
/// What one session (all its processes and jobs) writes at most in full records: a quarter of
/// a file, so one session rotates the log at most once and the records before it stay.
pub const SESSION_SHARE: u64 = MAX_BYTES / 4;
/// Then at most this much in minimal records (`Record::minimal`): a flood spends the full
/// share first, and the calls after it are still seen.
pub const MINIMAL_SHARE: u64 = MAX_BYTES / 16;
const MINIMAL_FIELD: usize = 128;
/// Records of one kind (`Record::kind`) a second, per process of a session.
const PER_SECOND: u32 = 50;
/// Records left out by the rate are counted in memory and moved to the session's share at
/// least this often (every time for an `eager` log).
const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// The lock every writer takes, and the directory of the sessions' shares, in the state dir.
const LOCK: &str = "audit.lock";
const SHARES: &str = "audit-shares";
/// A share is a few hundred bytes; one past this is unreadable, and counts as spent.
const MAX_SHARE_BYTES: u64 = 1 << 20;
/// A session's share is forgotten (at a rotation) once not written for this long.
const SHARE_KEPT: std::time::Duration = std::time::Duration::from_secs(7 * 86_400);
/// Arguments of a record kept, and bytes of each; bytes of any other text field.
const MAX_ARGS: usize = 64;
const MAX_ARG: usize = 256;
const MAX_FIELD: usize = 1024;
/// How often, at most, a count of suppressed records is written (the first one too).
const SUMMARY_EVERY: u64 = 60;

fn rotated(path: &Path, n: u32) -> PathBuf {
    path.with_extension(format!("jsonl.{n}"))
}

/// One record. `event` says which of the optional fields are set.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Record {
    pub time: String,
    pub session: String,
    pub event: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub project: Option<String>,
    /// The program run (argv[0] only: arguments may carry secrets).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub program: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub net: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub exit: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub warnings: Vec<String>,
    /// Network denials: tcp/udp/dns, the destination (address:port), the name the flow
    /// showed or was resolved for, the rule and its layer, and which check refused it
    /// (`dns`, `connect`, `sni`, `http-host`, `udp`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub proto: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub layer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub check: Option<String>,
    /// Filesystem denials (`fs_denied`, the git guard): the path refused; `check` says why.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub path: Option<String>,
    /// Slurm requests: the arguments (values of `--export` redacted), the cwd, the decision,
    /// the job id, and the batch script's size and fingerprint (never its body).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub argv: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub decision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub job: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub script_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub script_hash: Option<String>,
    /// An argument list clipped: how many arguments and bytes it had.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub argv_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub argv_bytes: Option<usize>,
    /// `audit_suppressed`: records of this session left out since the last such record, and
    /// how many of each kind (`event/check-or-decision[/program][/clipped]`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub suppressed: Option<u64>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub counts: std::collections::BTreeMap<String, u64>,
}

/// Bytes `c` takes once JSON-escaped in the file (serde_json escapes control characters,
/// `"` and `\`): what a record costs is what is written, not what was sent.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `s` cut to at most `max` bytes as written (JSON-escaped), `…` marking the cut. True if cut.
fn clip_text(s: &mut String, max: usize) -> bool {
    let mut size = 0;
    for (at, c) in s.char_indices() {
        size += escaped_len(c);
        if size > max {
            s.truncate(at);
            s.push('…');
            return true;
        }
    }
    false
}

impl Record {
    /// Every field within its bound (as written, escaped); an argument list keeps its first
    /// `MAX_ARGS` arguments and its totals. True if anything was cut.
    fn clip(&mut self) -> bool {
        let count = self.argv.len();
        let bytes: usize = self.argv.iter().map(String::len).sum();
        let mut cut = false;
        if count > MAX_ARGS || self.argv.iter().any(|a| a.chars().map(escaped_len).sum::<usize>() > MAX_ARG) {
            self.argv.truncate(MAX_ARGS);
            self.argv.iter_mut().for_each(|a| {
                clip_text(a, MAX_ARG);
            });
            (self.argv_count, self.argv_bytes) = (Some(count), Some(bytes));
            cut = true;
        }
        for f in [
            &mut self.project,
            &mut self.program,
            &mut self.reason,
            &mut self.proto,
            &mut self.dest,
            &mut self.name,
            &mut self.rule,
            &mut self.layer,
            &mut self.check,
            &mut self.path,
            &mut self.cwd,
            &mut self.decision,
            &mut self.script_hash,
        ]
        .into_iter()
        .flatten()
        {
            cut |= clip_text(f, MAX_FIELD);
        }
        cut |= self.warnings.len() > 16;
        self.warnings.truncate(16);
        self.warnings.iter_mut().for_each(|w| cut |= clip_text(w, MAX_FIELD));
        cut
    }

    /// Always written, past rate and share: a session's or a job's start and end, the count
    /// of what was left out, and the Slurm channel closed for flooding (the one sign of it).
    fn lifecycle(&self) -> bool {
        matches!(self.event.as_str(), "session_start" | "session_end" | "job_start" | "job_end" | "audit_suppressed")
            || (self.event == "slurm"
                && self.program.as_deref() == Some("channel")
                && self.decision.as_deref() == Some("closed"))
    }

    /// The rate bucket and count key: event, check or decision, and for Slurm calls the
    /// program (when it is one the chaperon mediates: a name the jail sent is not a key) and
    /// whether the record had to be clipped, so that a flood of huge or garbage calls does
    /// not hide the ordinary calls of the same second.
    fn kind(&self, clipped: bool) -> String {
        let mut k = format!("{}/{}", self.event, self.check.as_deref().or(self.decision.as_deref()).unwrap_or(""));
        if self.event == "slurm" {
            let p = self.program.as_deref().unwrap_or("");
            k.push('/');
            k.push_str(if SLURM_PROGRAMS.contains(&p) { p } else { "other" });
        }
        if clipped {
            k.push_str("/clipped");
        }
        k
    }

    /// What is kept of a record past the session's full share: what happened, not its details.
    fn minimal(&mut self) {
        self.argv.clear();
        (self.reason, self.cwd, self.warnings) = (None, None, vec![]);
        for f in
            [&mut self.project, &mut self.program, &mut self.path, &mut self.name, &mut self.rule].into_iter().flatten()
        {
            clip_text(f, MINIMAL_FIELD);
        }
    }
}

/// Programs of Slurm records that get a rate bucket of their own (`Record::kind`).
const SLURM_PROGRAMS: &[&str] = &[
    "sbatch", "srun", "salloc", "scancel", "squeue", "scontrol", "sinfo", "sacct", "sstat", "sprio", "sshare",
    "sattach", "sbcast", "channel",
];

/// A session's account in the state directory (`audit-shares/<session>`), shared by all of
/// its processes (launcher, chaperon, jobs and their steps on nodes with the same home),
/// read and written under the log's lock. The jail cannot write it: the state dir is hidden.
#[derive(Debug, Default, Serialize, serde::Deserialize)]
struct Share {
    /// Bytes of full records, and of minimal ones.
    full: u64,
    minimal: u64,
    /// Records left out and not yet reported, by kind, and since when (seconds).
    suppressed: std::collections::BTreeMap<String, u64>,
    since: u64,
}

impl Share {
    /// A share with nothing left: its records are counted, not written.
    fn spent() -> Share {
        Share { full: SESSION_SHARE, minimal: MINIMAL_SHARE, ..Default::default() }
    }
}

/// What one process of a session counts between two looks at its share: the rate of each
/// kind this second, and records left out by the rate (moved into the share at least every
/// `SYNC_EVERY`, at its next record, and when the process's log is dropped or flushed).
#[derive(Debug)]
struct Budget {
    second: u64,
    this_second: std::collections::HashMap<String, u32>,
    pending: std::collections::BTreeMap<String, u64>,
    synced: std::time::Instant,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            second: 0,
            this_second: Default::default(),
            pending: Default::default(),
            synced: std::time::Instant::now(),
        }
    }
}

struct Inner {
    path: PathBuf,
    /// The session whose share this process's records spend.
    share: String,
    /// Every count moved into the share at once (a process killed with no warning, as the
    /// chaperon is when its launcher exits, loses nothing).
    eager: bool,
    budget: std::sync::Mutex<Budget>,
    /// What this process keeps open between its records (shared by the logs made from one).
    kept: std::sync::Arc<std::sync::Mutex<Kept>>,
}

/// The descriptors a process keeps between its records (`AuditLog::open_ahead`): on a home on
/// NFS each open is a lookup and an open at the server. The lock file, only ever locked; the
/// live log, checked under the lock to still be the live one before each append (a rotation
/// by another writer moves it). The session's share as `open_ahead` made it, until a writer on
/// another node may change it (`AuditLog::shared_with_other_nodes`); then it is opened at each
/// record, as only an open sees another node's change on NFS (close-to-open).
#[derive(Default)]
struct Kept {
    /// The process that opened them: a child (the jail's PID 1, cloned from the launcher)
    /// shares their open files, on which one `flock` does not keep the two apart; it opens
    /// its own.
    pid: u32,
    lock: Option<std::fs::File>,
    shares_made: bool,
    /// The live log, and whether other hosts share its filesystem (`shared_over_network`).
    log: Option<(std::fs::File, bool)>,
    /// Other hosts share the share's filesystem (asked once: a round trip on NFS).
    shares_networked: Option<bool>,
    /// The session's share as `open_ahead` made it, serving its records while no writer on
    /// another node can change it: the session's jobs are the only ones, and it has none
    /// before its first Slurm call (on this node, every writer sees the same file).
    made_share: Option<(PathBuf, std::fs::File)>,
    /// `open_ahead` asks `locked` to keep the share it opens, until the session's jobs may
    /// write it (`AuditLog::shared_with_other_nodes`).
    keep_share: bool,
}

/// Holds the log's lock (`flock`) on a kept descriptor until dropped.
struct Locked<'a>(&'a std::fs::File);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = agent_sandbox_sys::file::flock(self.0, libc::LOCK_UN);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let pending = std::mem::take(&mut self.budget.get_mut().unwrap_or_else(|e| e.into_inner()).pending);
        if !pending.is_empty() {
            locked(&self.path, &self.share, &self.kept, |share, _| merge(share, pending, unix_now()));
        }
    }
}

#[derive(Clone)]
pub struct AuditLog {
    pub session: String,
    inner: std::sync::Arc<Inner>,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs()
}

fn merge(share: &mut Share, pending: std::collections::BTreeMap<String, u64>, now: u64) {
    if pending.is_empty() {
        return;
    }
    if share.suppressed.is_empty() {
        share.since = now;
    }
    for (k, n) in pending {
        *share.suppressed.entry(k).or_insert(0) += n;
    }
}

/// A share's file name: the session id as given, if it is one (the launcher makes them; a
/// job's comes from its authenticated job record), else one bucket for anything else.
fn share_file(live: &Path, session: &str) -> PathBuf {
    let ok = !session.is_empty()
        && session.len() <= 64
        && session.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let dir = live.with_file_name(SHARES);
    dir.join(if ok { session } else { "invalid-session-id" })
}

/// Runs `f` on the session's share with the log locked against every other writer (every
/// process of every session of this state directory), then saves the share. Best effort:
/// without the lock file (an unwritable state dir), `f` runs unlocked on a fresh share.
fn locked<T>(
    live: &Path,
    session: &str,
    kept: &std::sync::Mutex<Kept>,
    f: impl FnOnce(&mut Share, Option<&mut Kept>) -> T,
) -> T {
    // Held through: the threads of this process share the lock's descriptor, and a `flock`
    // on one descriptor does not keep them from each other.
    let mut kept = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if kept.pid != std::process::id() {
        *kept = Kept { pid: std::process::id(), ..Kept::default() };
    }
    let dir = live.parent().unwrap_or(Path::new("."));
    if !kept.shares_made {
        kept.shares_made = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir.join(SHARES)).is_ok();
    }
    if kept.lock.is_none() {
        let opened = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(LOCK));
        match opened {
            Ok(l) => kept.lock = Some(l),
            Err(e) => eprintln!("agent-sandbox: cannot lock the audit log {}: {e}", dir.join(LOCK).display()),
        }
    }
    let lock_file = kept.lock.take();
    // Released by `Locked`'s drop.
    let held =
        lock_file.as_ref().and_then(|l| agent_sandbox_sys::file::flock(l, libc::LOCK_EX).ok().map(|()| Locked(l)));
    let path = share_file(live, session);
    // The share `open_ahead` made serves the next record as it is (see `Kept::made_share`).
    let made = kept.made_share.take().filter(|(p, _)| *p == path).map(|(_, f)| f);
    let (mut file, mut share, read_len) = open_share(&path, made);
    let out = f(&mut share, held.as_ref().map(|_| &mut *kept));
    if let (Some(f), Ok(body)) = (file.as_mut(), serde_json::to_vec(&share)) {
        // Written over the old one, cut only where it is shorter (counts only grow: seldom).
        // A truncation first would be a round trip to NFS at every record, and would leave an
        // empty share (a fresh budget) to a crash in between.
        use std::os::unix::fs::FileExt;
        let _ = f.write_all_at(&body, 0).and_then(|()| match read_len > body.len() {
            true => f.set_len(body.len() as u64),
            false => Ok(()),
        });
        // A share another node may read next (the session's jobs may run: it is not kept)
        // reaches the server before the lock is let go, on a filesystem other hosts share.
        let shared = *kept.shares_networked.get_or_insert_with(|| agent_sandbox_sys::file::shared_over_network(f));
        if !kept.keep_share && shared {
            let _ = f.sync_data();
        }
    }
    drop(held);
    kept.lock = lock_file;
    if kept.keep_share {
        kept.made_share = file.map(|f| (path, f));
    }
    out
}

/// The share at `path` (`made`: the one kept open, if any), what it says, and how many bytes
/// were read of it. A share that cannot be read counts as spent (its records are counted,
/// not written); one that cannot be opened (an unwritable state directory, where the log is
/// not written either) as fresh.
fn open_share(path: &Path, made: Option<std::fs::File>) -> (Option<std::fs::File>, Share, usize) {
    use std::io::Read;
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .ok()
    };
    // Read to its size as this host knows it (under the lock, every writer of this node has
    // written by then; an open sees another node's): a read past it, or `read_to_string`'s
    // own question of the size, asks the server again, a round trip on NFS. A share is a
    // few hundred bytes.
    let read = |f: &mut std::fs::File, text: &mut String| {
        use std::io::Seek;
        f.rewind()?;
        let size = agent_sandbox_sys::file::known_of(f).map_or(MAX_SHARE_BYTES, |k| k.size.min(MAX_SHARE_BYTES));
        f.take(size).read_to_string(text)
    };
    let kept_one = made.is_some();
    let mut file = made.or_else(open);
    let mut text = String::new();
    let mut got = file.as_mut().map(|f| read(f, &mut text));
    // A kept share that cannot be read (removed under it: ESTALE on NFS) is opened again by
    // its name, once.
    if kept_one && matches!(got, Some(Err(_))) {
        text.clear();
        file = open();
        got = file.as_mut().map(|f| read(f, &mut text));
    }
    let share = match (got, text.trim()) {
        (Some(Ok(_)), "") => Share::default(),
        (Some(Ok(_)), t) => serde_json::from_str(t).unwrap_or_else(|_| Share::spent()),
        // Not even by its name: spent (this record and what this process left out go
        // uncounted), and not written or kept.
        (Some(Err(_)), _) => return (None, Share::spent(), 0),
        (None, _) => Share::default(),
    };
    (file, share, text.len())
}

impl AuditLog {
    /// A log for a new session; the id is unique enough to tell sessions apart in one log
    /// (time, pid) and short enough to type in `agent-sandbox log --session ID`.
    pub fn new(state_dir: &Path) -> AuditLog {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let id = (now.as_micros() as u64) ^ ((std::process::id() as u64) << 40);
        let session = format!("{:012x}", id & 0xffff_ffff_ffff);
        AuditLog::with(state_dir.join(FILE), session.clone(), session, false)
    }

    /// The log of an existing session (the chaperon writes into its launcher's session).
    pub fn for_session(state_dir: &Path, session: &str) -> AuditLog {
        AuditLog::with(state_dir.join(FILE), session.into(), session.into(), false)
    }

    fn with(path: PathBuf, session: String, share: String, eager: bool) -> AuditLog {
        AuditLog::sharing(path, session, share, eager, Default::default())
    }

    fn sharing(
        path: PathBuf,
        session: String,
        share: String,
        eager: bool,
        kept: std::sync::Arc<std::sync::Mutex<Kept>>,
    ) -> AuditLog {
        AuditLog { session, inner: std::sync::Arc::new(Inner { path, share, eager, budget: Default::default(), kept }) }
    }

    /// Opens what the records keep open (`Kept`), and makes the session's share, as the first
    /// record would (`locked` reads it empty): done beside other work, the first record finds
    /// them open (a session's start on a home on NFS: some six round trips to the server, off
    /// its way).
    pub fn open_ahead(&self) {
        let live = &self.inner.path;
        locked(live, &self.inner.share, &self.inner.kept, |_, k| {
            if let Some(k) = k {
                let _ = k.live(live);
                k.keep_share = true;
            }
        });
    }

    /// The session's jobs may run from now on (its first Slurm call), on other nodes, and
    /// write its share there: each record opens it again from here, which is what sees
    /// another node's change on NFS.
    pub fn shared_with_other_nodes(&self) {
        let mut kept = self.inner.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.keep_share = false;
        kept.made_share = None;
    }

    /// The same log, its records spending `session`'s share: a job's task (its own session
    /// id in the log) spends the share of the session that submitted it.
    pub fn charged_to(&self, session: &str) -> AuditLog {
        let i = &self.inner;
        AuditLog::sharing(i.path.clone(), self.session.clone(), session.into(), i.eager, i.kept.clone())
    }

    /// The same log, each count of records left out saved at once: for a process that ends
    /// without warning (the chaperon, killed with its launcher).
    pub fn eager(&self) -> AuditLog {
        let i = &self.inner;
        AuditLog::sharing(i.path.clone(), self.session.clone(), i.share.clone(), true, i.kept.clone())
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn record(&self, event: &str) -> Record {
        Record { time: now_rfc3339(), session: self.session.clone(), event: event.into(), ..Default::default() }
    }

    /// Appends one record, within the session's bounds (see the module's head). Best effort:
    /// a session is not refused because its log cannot be written (the reason goes to stderr).
    pub fn write(&self, r: &Record) {
        let mut r = r.clone();
        let clipped = r.clip();
        let kind = r.kind(clipped);
        let lifecycle = r.lifecycle();
        let now = unix_now();
        // The rate, per process: no lock, no file, for a record that is only counted.
        let pending = {
            let mut b = self.budget();
            if !lifecycle {
                if b.second != now {
                    b.second = now;
                    b.this_second.clear();
                }
                let n = b.this_second.entry(kind.clone()).or_insert(0);
                *n += 1;
                if *n > PER_SECOND {
                    *b.pending.entry(kind).or_insert(0) += 1;
                    if !self.inner.eager && b.synced.elapsed() < SYNC_EVERY {
                        return;
                    }
                    b.synced = std::time::Instant::now();
                    let pending = std::mem::take(&mut b.pending);
                    drop(b);
                    locked(&self.inner.path, &self.inner.share, &self.inner.kept, |share, _| {
                        merge(share, pending, now)
                    });
                    return;
                }
            }
            b.synced = std::time::Instant::now();
            std::mem::take(&mut b.pending)
        };
        locked(&self.inner.path, &self.inner.share, &self.inner.kept, |share, mut kept| {
            merge(share, pending, now);
            let keep = if lifecycle || share.full < SESSION_SHARE {
                Some(false)
            } else if share.minimal < MINIMAL_SHARE {
                r.minimal();
                Some(true)
            } else {
                merge(share, [(kind, 1)].into(), now);
                None
            };
            let due = !share.suppressed.is_empty() && (lifecycle || now >= share.since + SUMMARY_EVERY);
            if due {
                let counts = std::mem::take(&mut share.suppressed);
                let mut s = self.record("audit_suppressed");
                s.suppressed = Some(counts.values().sum());
                s.counts = counts;
                s.reason =
                    Some("records of this session left out: past their rate or the session's share of the log".into());
                if self.append(&s, kept.as_deref_mut()).is_none() {
                    merge(share, s.counts, now);
                }
            }
            if let Some(minimal) = keep {
                match (self.append(&r, kept), minimal) {
                    (Some(n), false) => share.full += n,
                    (Some(n), true) => share.minimal += n,
                    (None, _) => merge(share, [("lost/write-failed".to_string(), 1)].into(), now),
                }
            }
        });
    }

    /// Counts `n` records of `kind` left out before they reached the log (a writer's own rate:
    /// the git guard's), as if they had been suppressed here.
    pub fn count_left_out(&self, kind: &str, n: u64) {
        *self.budget().pending.entry(kind.to_string()).or_insert(0) += n;
        if self.inner.eager {
            self.flush();
        }
    }

    /// Saves what this process left out into its session's share now (written with the
    /// session's next record, or its end).
    pub fn flush(&self) {
        let pending = std::mem::take(&mut self.budget().pending);
        if !pending.is_empty() {
            locked(&self.inner.path, &self.inner.share, &self.inner.kept, |share, _| merge(share, pending, unix_now()));
        }
    }

    fn budget(&self) -> std::sync::MutexGuard<'_, Budget> {
        self.inner.budget.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes one record as one line with one write, then rotates if the live file is past
    /// `MAX_BYTES`; the bytes written, None if it could not be written (nothing of it stays:
    /// a short write, a full disk, is cut back). Called with the log's lock held.
    /// Appends the line of `r`; `kept`: the process's descriptors, when the log's lock is held
    /// (a rotation is made only then).
    fn append(&self, r: &Record, mut kept: Option<&mut Kept>) -> Option<u64> {
        let path = &self.inner.path;
        let mut line = serde_json::to_vec(r).ok()?;
        line.push(b'\n');
        let locked = kept.is_some();
        let unlocked;
        // Under the lock, the kept descriptor is the live file (checked), as an open is.
        let file = match kept.as_deref_mut() {
            Some(k) => k.live(path),
            None => {
                unlocked = open_live(path);
                let f = unlocked.as_ref().map_err(|e| std::io::Error::new(e.kind(), e.to_string()));
                f.map(|f| (f, agent_sandbox_sys::file::shared_over_network(f)))
            }
        };
        let written = file.and_then(|(f, shared)| {
            // On a filesystem other hosts share, the size an append writes at is the one this
            // host knows: asked of the server first, so that a line another node appended
            // under the lock is not written over (NFS revalidates it only when its cache
            // says so).
            let start = match shared && locked {
                true => Some(agent_sandbox_sys::file::refresh(f)?.size),
                false => None,
            };
            // One write of the whole line with O_APPEND: a writer without the lock (an
            // older version) does not interleave with it.
            let n = (&*f).write(&line);
            // Cut back to where this line began, so the next record does not glue onto part of
            // it (under the lock, the file ends with what this write left).
            let cut_back = |written: u64| {
                let to = match start {
                    Some(s) => Ok(s),
                    None => f.metadata().map(|m| m.len().saturating_sub(written)),
                };
                let _ = to.and_then(|to| f.set_len(to)).and_then(|()| if shared { f.sync_data() } else { Ok(()) });
            };
            if !matches!(n, Ok(n) if n == line.len()) {
                if let (true, Ok(part)) = (locked, &n) {
                    cut_back(*part as u64);
                }
                return Err(n.err().unwrap_or_else(|| std::io::Error::other("short write (disk full?)")));
            }
            // On a filesystem other hosts share, the line reaches the server before the lock
            // is let go: a writer on another node then appends after it, not over it (a write
            // stays in this host's cache until then; the `stat` this append once made flushed
            // it as a side effect). An error the server reports there (quota, disk full) is
            // this record's, and nothing of it stays.
            if shared {
                if let Err(e) = f.sync_data() {
                    if locked {
                        cut_back(line.len() as u64);
                    }
                    return Err(e);
                }
            }
            // Bounded: past MAX_BYTES the log moves to `audit.jsonl.1`, the older ones one
            // place on (the oldest is dropped). Under the lock, where the descriptor is the live
            // file: of writers racing past the size, one rotates, once. The size as this host
            // knows it, which holds its own writes (asking the server would be a round trip a
            // record on NFS; another node's records count at the next record after an open).
            if locked && agent_sandbox_sys::file::known_of(f)?.size > MAX_BYTES {
                for n in (1..ROTATED).rev() {
                    let _ = std::fs::rename(rotated(path, n), rotated(path, n + 1));
                }
                std::fs::rename(path, rotated(path, 1))?;
                forget_old_shares(path);
            }
            Ok(())
        });
        match written {
            Ok(()) => Some(line.len() as u64),
            Err(e) => {
                eprintln!("agent-sandbox: cannot write the audit log {}: {e}", path.display());
                // Not kept: a descriptor that failed (a log another node rotated and removed:
                // ESTALE on NFS) is opened again by name at the next record.
                if let Some(k) = kept {
                    k.log = None;
                }
                None
            }
        }
    }
}

/// The live log opened for appending (made if missing), never through a link.
fn open_live(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

impl Kept {
    /// The kept descriptor of the live log, opened again when it is not the file at `path`
    /// any more (another writer rotated it, or none was kept yet).
    /// Also whether other hosts share its filesystem.
    fn live(&mut self, path: &Path) -> std::io::Result<(&std::fs::File, bool)> {
        // Identities as this host knows them: an inode's number never changes, and the name's
        // is what the path leads to now (a round trip to revalidate it where the cache says
        // so, but not the attributes' refresh a plain `stat` asks after every append on NFS).
        use agent_sandbox_sys::file::{known_at, known_of};
        let same = |(f, _): &(std::fs::File, bool)| match (known_of(f), known_at(path)) {
            (Ok(a), Ok(b)) => (a.dev, a.ino) == (b.dev, b.ino),
            _ => false,
        };
        if !self.log.as_ref().is_some_and(same) {
            let f = open_live(path)?;
            let shared = agent_sandbox_sys::file::shared_over_network(&f);
            self.log = Some((f, shared));
        }
        self.log.as_ref().map(|(f, n)| (f, *n)).ok_or_else(|| std::io::Error::other("no log"))
    }
}

/// Shares of sessions not written for `SHARE_KEPT`: removed at a rotation, so that the
/// directory does not grow with every session ever run.
fn forget_old_shares(live: &Path) {
    let Ok(dir) = std::fs::read_dir(live.with_file_name(SHARES)) else { return };
    for e in dir.flatten() {
        let old = e.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok());
        if old.is_some_and(|d| d > SHARE_KEPT) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

use std::os::unix::fs::DirBuilderExt;

/// UTC time as RFC 3339 with milliseconds, without a date crate: days to civil date.
pub fn now_rfc3339() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format_rfc3339(now.as_secs() as i64, now.subsec_millis())
}

fn format_rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days_from_civil inverse.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Reads the log, its rotated files first (oldest first), keeping the records of one session
/// if asked; unreadable lines are skipped.
pub fn read(state_dir: &Path, session: Option<&str>) -> std::io::Result<Vec<Record>> {
    read_all(state_dir, session).map(|(r, _)| r)
}

/// As `read`, with the number of lines skipped (not a record). A file is read as bytes and
/// each line taken lossily: a bad byte (a torn write, a file changed by hand) costs its own
/// line at most, never the whole log.
pub fn read_all(state_dir: &Path, session: Option<&str>) -> std::io::Result<(Vec<Record>, usize)> {
    let live = state_dir.join(FILE);
    let (mut records, mut skipped) = (vec![], 0);
    for path in (1..=ROTATED).rev().map(|n| rotated(&live, n)).chain([live.clone()]) {
        let bytes = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
            match serde_json::from_str::<Record>(&String::from_utf8_lossy(line)) {
                Ok(r) if session.is_none_or(|s| r.session == s) => records.push(r),
                Ok(_) => {}
                Err(_) => skipped += 1,
            }
        }
    }
    Ok((records, skipped))
}

/// Prints the last `tail` records, then every record appended after them, forever (polls
/// the file; follows rotation to `audit.jsonl.1` by reopening when the file shrinks or is
/// replaced).
pub fn follow(
    state_dir: &Path,
    session: Option<&str>,
    tail: usize,
    out: &mut dyn FnMut(&Record),
) -> std::io::Result<()> {
    use std::io::{BufRead, Seek};
    use std::os::unix::fs::MetadataExt;
    let path = state_dir.join(FILE);
    let first = read(state_dir, session)?;
    for r in &first[first.len().saturating_sub(tail)..] {
        out(r);
    }
    let mut pos = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut ino = std::fs::metadata(&path).map(|m| m.ino()).unwrap_or(0);
    let mut partial: Vec<u8> = vec![];
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if meta.ino() != ino || meta.len() < pos {
            ino = meta.ino();
            pos = 0;
            partial.clear();
        }
        if meta.len() == pos {
            continue;
        }
        let mut f = std::fs::File::open(&path)?;
        f.seek(std::io::SeekFrom::Start(pos))?;
        let mut reader = std::io::BufReader::new(f);
        loop {
            // Bytes, not text: a bad byte costs its line, not the rest of the log.
            let n = reader.read_until(b'\n', &mut partial)?;
            if n == 0 {
                break;
            }
            pos += n as u64;
            if !partial.ends_with(b"\n") {
                continue; // a line still being written
            }
            if let Ok(r) = serde_json::from_str::<Record>(String::from_utf8_lossy(&partial).trim_end()) {
                if session.is_none_or(|s| r.session == s) {
                    out(&r);
                }
            }
            partial.clear();
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
}

/// `v` safe to print on a terminal: control characters (CR, ESC, newlines...) and the
/// characters that reorder text (bidi controls) shown as escapes, never sent raw.
fn shown(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// One readable line per record, for `agent-sandbox log`. Every field is escaped: the jail
/// chose many of them (a Slurm command's name, a path, a host name).
pub fn render(r: &Record) -> String {
    let mut s = format!("{} {} {:<13}", shown(&r.time), shown(&r.session), shown(&r.event));
    let mut add = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            s.push_str(&format!(" {k}={}", shown(&v)));
        }
    };
    add("project", r.project.clone());
    add("program", r.program.clone());
    add("backend", r.backend.clone());
    add("net", r.net.clone());
    add("exit", r.exit.map(|e| e.to_string()));
    add("signal", r.signal.map(|e| e.to_string()));
    add("ms", r.duration_ms.map(|e| e.to_string()));
    add("decision", r.decision.clone());
    add("job", r.job.map(|j| j.to_string()));
    if !r.argv.is_empty() {
        add("argv", Some(format!("{:?}", r.argv.join(" "))));
    }
    add("argc", r.argv_count.map(|n| n.to_string()));
    add("proto", r.proto.clone());
    add("dest", r.dest.clone());
    add("name", r.name.clone());
    add("check", r.check.clone());
    add("path", r.path.clone());
    add("rule", r.rule.clone().map(|r| if r.is_empty() { "-".into() } else { format!("`{r}`") }));
    add("layer", r.layer.clone());
    add("suppressed", r.suppressed.map(|n| n.to_string()));
    if !r.counts.is_empty() {
        add("counts", Some(r.counts.iter().map(|(k, n)| format!("{k}:{n}")).collect::<Vec<_>>().join(",")));
    }
    add("reason", r.reason.clone());
    for w in &r.warnings {
        s.push_str(&format!("\n    warning: {}", shown(w)));
    }
    s
}

/// `agent-sandbox log`: the records of `state_dir`'s log (of one session, the last `tail`),
/// as lines or as JSON, and with `follow` the new ones as they come.
pub fn print_log(
    state_dir: &Path,
    session: Option<&str>,
    json: bool,
    tail: Option<usize>,
    follow: bool,
) -> std::io::Result<()> {
    let print = |r: &Record| {
        if json {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        } else {
            println!("{}", render(r));
        }
    };
    if follow {
        return self::follow(state_dir, session, tail.unwrap_or(10), &mut |r| print(r));
    }
    let (mut records, skipped) = read_all(state_dir, session)?;
    if skipped > 0 {
        eprintln!(
            "agent-sandbox: {skipped} line(s) of the audit log in {} are not records and were skipped",
            state_dir.display()
        );
    }
    if let Some(n) = tail {
        let skip = records.len().saturating_sub(n);
        records.drain(..skip);
    }
    records.iter().for_each(print);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a Slurm record of `a` with this decision (a mark to find it by).
    fn decided(a: &AuditLog, d: &str) {
        let mut r = a.record("slurm");
        r.decision = Some(d.into());
        a.write(&r);
    }

    /// Whether a record with this decision is in the log of `dir`.
    fn has_decision(dir: &Path, d: &str) -> bool {
        read(dir, None).unwrap().iter().any(|r| r.decision.as_deref() == Some(d))
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(format_rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(format_rfc3339(1_795_392_000, 0), "2026-11-23T00:00:00.000Z");
        assert_eq!(format_rfc3339(4_102_444_799, 999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn records_round_trip_and_filter_by_session() {
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::new(dir.path());
        let mut r = a.record("session_start");
        r.program = Some("codex".into());
        a.write(&r);
        let b = AuditLog::for_session(dir.path(), "other");
        b.write(&b.record("session_start"));
        std::fs::OpenOptions::new().append(true).open(a.path()).unwrap().write_all(b"garbage\n").unwrap();
        assert_eq!(read(dir.path(), None).unwrap().len(), 2);
        let mine = read(dir.path(), Some(&a.session)).unwrap();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].program.as_deref(), Some("codex"));
        assert!(render(&mine[0]).contains("session_start"));
    }

    #[test]
    fn a_hostile_session_cannot_flush_the_log_and_its_records_are_clipped() {
        // Issue 33: 48 refused scancel calls of 1.5 MB each pushed every earlier record out.
        let dir = tempfile::tempdir().unwrap();
        let other = AuditLog::new(dir.path());
        other.write(&other.record("session_start"));
        let hostile = AuditLog::for_session(dir.path(), "hostile");
        hostile.write(&hostile.record("session_start"));
        // Long argument lists, each call of another kind (to pass the rate), as fast as it can.
        let argv: Vec<String> =
            std::iter::once("scancel".to_string()).chain((0..99).map(|_| "y".repeat(1000))).collect();
        for i in 0..2000 {
            let mut r = hostile.record("slurm");
            r.decision = Some(format!("denied{i}"));
            r.argv = argv.clone();
            hostile.write(&r);
        }
        hostile.write(&hostile.record("session_end"));
        let all = read(dir.path(), None).unwrap();
        assert!(all.iter().any(|r| r.session == other.session), "the other session's record is still there");
        let mine: Vec<&Record> = all.iter().filter(|r| r.session == "hostile").collect();
        let calls: Vec<&&Record> = mine.iter().filter(|r| r.event == "slurm").collect();
        assert!(!calls.is_empty());
        let r = calls[0];
        assert_eq!((r.argv_count, r.argv_bytes), (Some(100), Some(99_007)));
        assert_eq!(r.argv.len(), MAX_ARGS);
        assert!(r.argv.iter().all(|a| a.len() <= MAX_ARG + '…'.len_utf8()), "clipped");
        let suppressed: u64 = mine.iter().filter_map(|r| r.suppressed).sum();
        assert_eq!(suppressed + calls.len() as u64, 2000, "every record written or counted");
        assert!(mine.iter().any(|r| r.event == "session_end"), "the session's end is always written");
        let size: u64 = log_files(dir.path()).iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
        assert!(size <= SESSION_SHARE + MINIMAL_SHARE + 64 * 1024, "{size}");
    }

    #[test]
    fn records_of_one_kind_are_rate_limited_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::new(dir.path());
        for _ in 0..500 {
            let mut r = a.record("slurm");
            r.decision = Some("denied".into());
            a.write(&r);
        }
        let mut r = a.record("net_denied");
        r.check = Some("sni".into());
        a.write(&r);
        let got = read(dir.path(), None).unwrap();
        assert!(got.iter().all(|r| r.event != "audit_suppressed"), "counts wait for their interval or the end");
        a.write(&a.record("session_end"));
        let got = read(dir.path(), None).unwrap();
        let kept = got.iter().filter(|r| r.event == "slurm").count();
        assert!(kept >= PER_SECOND as usize && kept < 500, "{kept}");
        assert!(got.iter().any(|r| r.event == "net_denied"), "another kind is not held back");
        assert!(got.iter().any(|r| r.event == "audit_suppressed" && r.suppressed.is_some()), "the count is written");
    }

    #[test]
    fn rotated_files_are_kept_and_read_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::new(dir.path());
        for (n, body) in [(3, "oldest"), (2, "older"), (1, "old")] {
            let mut r = a.record("session_start");
            r.program = Some(body.into());
            let line = serde_json::to_string(&r).unwrap() + "\n";
            std::fs::write(rotated(a.path(), n), line).unwrap();
        }
        let mut r = a.record("session_start");
        r.program = Some("live".into());
        a.write(&r);
        let got: Vec<String> = read(dir.path(), None).unwrap().into_iter().filter_map(|r| r.program).collect();
        assert_eq!(got, ["oldest", "older", "old", "live"]);
        // Past the size, the live file becomes .1 and each older one moves on; the oldest goes.
        past_the_size(a.path());
        a.write(&a.record("session_end"));
        assert!(!a.path().exists());
        let got: Vec<String> = read(dir.path(), None).unwrap().into_iter().filter_map(|r| r.program).collect();
        assert_eq!(got, ["older", "old", "live"]);
    }

    /// Grows the live log past `MAX_BYTES`: the next locked record rotates it.
    fn past_the_size(live: &Path) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(live)
            .unwrap()
            .write_all(&vec![b'\n'; MAX_BYTES as usize])
            .unwrap();
    }

    #[test]
    fn a_kept_log_follows_a_rotation_another_writer_made() {
        // The process keeps its log open between records (`Kept`): after another process
        // rotated the log, its next record goes to the new live file, not to the moved one.
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::new(dir.path());
        a.open_ahead();
        let mut r = a.record("session_start");
        r.program = Some("first".into());
        a.write(&r);
        let other = AuditLog::for_session(dir.path(), "other");
        past_the_size(a.path());
        other.write(&other.record("session_end"));
        assert!(!a.path().exists(), "the other writer rotated the log");
        let mut r = a.record("session_end");
        r.program = Some("after".into());
        a.charged_to("elsewhere").write(&r);
        let live: Vec<String> = std::fs::read_to_string(a.path())
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Record>(l).ok())
            .filter_map(|r| r.program)
            .collect();
        assert_eq!(live, ["after"]);
        // Threads of one process share its descriptors: their records are whole lines, each once.
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || (0..6).for_each(|_| a.write(&a.record("allow"))))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let text = std::fs::read_to_string(a.path()).unwrap();
        assert!(text.lines().all(|l| serde_json::from_str::<Record>(l).is_ok()), "{text}");
        assert_eq!(text.lines().filter(|l| l.contains("\"allow\"")).count(), 48, "under the rate of one kind");
    }

    #[test]
    fn the_share_made_ahead_serves_until_the_sessions_jobs_may_write_it_and_then_is_read_again() {
        // Before its first Slurm call a session has no job, and no writer on another node:
        // its records spend the share it made ahead, kept open. From that call on, a job of
        // the session may replace the share on another node (an NFS client sees that only at
        // an open): every record opens it again and sees what it holds.
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::new(dir.path());
        a.open_ahead();
        a.write(&a.record("session_start"));
        let share = share_file(a.path(), &a.session);
        let spent = serde_json::to_vec(&Share::spent()).unwrap();
        let replace = || agent_sandbox_sys::file::write_atomic(&share, &spent, 0o600).unwrap();
        replace();
        decided(&a, "before-any-job");
        a.shared_with_other_nodes();
        replace();
        decided(&a, "after-the-job");
        let all = read(dir.path(), None).unwrap();
        assert!(all.iter().any(|r| r.event == "session_start"), "the start is written");
        assert!(has_decision(dir.path(), "before-any-job"), "the kept share was used");
        assert!(!has_decision(dir.path(), "after-the-job"), "the spent share was not read");
    }

    #[test]
    fn a_kept_share_that_cannot_be_read_is_opened_again_by_its_name() {
        // A kept share whose file went away under it (ESTALE on NFS) reads as an error: the
        // share is opened again by its name, and the record counted there, not on a fresh
        // budget and not left uncounted.
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::new(dir.path());
        a.open_ahead();
        let share = share_file(a.path(), &a.session);
        {
            let mut kept = a.inner.kept.lock().unwrap();
            // Write-only: a read of it fails, as a read of a stale NFS handle does.
            let unreadable = std::fs::OpenOptions::new().write(true).open(&share).unwrap();
            kept.made_share = Some((share.clone(), unreadable));
        }
        // Spent, as the file by that name says: a fresh budget would write the record.
        std::fs::write(&share, serde_json::to_vec(&Share::spent()).unwrap()).unwrap();
        decided(&a, "on-an-unreadable-share");
        assert!(!has_decision(dir.path(), "on-an-unreadable-share"), "a fresh budget");
        let after: Share = serde_json::from_str(&std::fs::read_to_string(&share).unwrap()).unwrap();
        assert!(!after.suppressed.is_empty(), "the record left out is counted in the share by its name");
    }

    #[test]
    fn a_share_is_written_over_in_place_and_cut_where_the_new_one_is_shorter() {
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::new(dir.path());
        a.open_ahead();
        let share = share_file(a.path(), &a.session);
        // A longer share than the one the next record leaves (padding the JSON allows).
        let long = format!("{}{}", serde_json::to_string(&Share::default()).unwrap(), " ".repeat(4000));
        std::fs::write(&share, &long).unwrap();
        a.shared_with_other_nodes();
        a.write(&a.record("session_start"));
        let text = std::fs::read_to_string(&share).unwrap();
        let s: Share = serde_json::from_str(&text).unwrap();
        assert!(text.len() < 1000, "cut back: {} bytes", text.len());
        assert!(s.full > 0, "the record is counted: {text}");
        // Past the bound a share is not read whole: it counts as spent.
        std::fs::write(&share, format!("{{\"full\":0{}}}", " ".repeat(MAX_SHARE_BYTES as usize))).unwrap();
        decided(&a, "past-a-huge-share");
        assert!(!has_decision(dir.path(), "past-a-huge-share"));
    }

    #[test]
    fn a_child_process_does_not_write_under_its_parents_lock() {
        // The jail's PID 1 is cloned from the launcher with the log's kept descriptors: one
        // `flock` on a shared open file does not keep two processes apart, so the child opens
        // its own, and waits while the launcher holds the log's lock.
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::new(dir.path());
        a.open_ahead();
        let held = a.inner.kept.lock().unwrap().lock.as_ref().map(|f| f.try_clone().unwrap()).unwrap();
        agent_sandbox_sys::file::flock(&held, libc::LOCK_EX).unwrap();
        // SAFETY: the child writes one record (system calls, small allocations) and _exits.
        let child = match unsafe { nix::unistd::fork() }.expect("fork") {
            nix::unistd::ForkResult::Child => {
                let mut r = a.record("session_end");
                r.program = Some("child".into());
                a.write(&r);
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => child,
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        let early = std::fs::read_to_string(a.path()).unwrap_or_default().contains("child");
        agent_sandbox_sys::file::flock(&held, libc::LOCK_UN).unwrap();
        let status = nix::sys::wait::waitpid(child, None).expect("waitpid");
        assert!(!early, "the child wrote under its parent's lock");
        assert!(matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)), "{status:?}");
        assert!(std::fs::read_to_string(a.path()).unwrap().contains("child"), "written once the lock was free");
    }

    fn log_files(dir: &Path) -> Vec<PathBuf> {
        let live = dir.join(FILE);
        (1..=ROTATED).map(|n| rotated(&live, n)).chain([live.clone()]).filter(|p| p.exists()).collect()
    }

    fn marker(dir: &Path, file: &Path, name: &str) {
        let a = AuditLog::for_session(dir, name);
        let line = serde_json::to_string(&a.record("session_start")).unwrap() + "\n";
        std::fs::write(file, line).unwrap();
    }

    #[test]
    fn racing_writers_past_the_size_rotate_once_and_lose_no_file() {
        // Red team F1: every writer that saw the live file past the size rotated again, each
        // time dropping one more file of history. A race: many rounds, each a fresh log whose
        // live file is (sparse) just below the size.
        let sessions = |p: &Path| -> Vec<String> {
            std::fs::read(p)
                .unwrap_or_default()
                .split(|b| *b == b'\n')
                .filter_map(|l| serde_json::from_slice::<Record>(l).ok())
                .map(|r| r.session)
                .collect()
        };
        for round in 0..15 {
            let dir = tempfile::tempdir().unwrap();
            let live = dir.path().join(FILE);
            for n in 1..=ROTATED {
                marker(dir.path(), &rotated(&live, n), &format!("rotated{n}"));
            }
            marker(dir.path(), &live, "live");
            std::fs::OpenOptions::new().write(true).open(&live).unwrap().set_len(MAX_BYTES - 100).unwrap();
            // Many writers, each its own process as far as the log knows (its own share, its
            // own descriptors), all crossing the size in the same instant.
            let go = std::sync::Arc::new(std::sync::Barrier::new(64));
            let threads: Vec<_> = (0..64)
                .map(|i| {
                    let (d, go) = (dir.path().to_path_buf(), go.clone());
                    std::thread::spawn(move || {
                        let a = AuditLog::for_session(&d, &format!("writer{i}"));
                        go.wait();
                        for _ in 0..4 {
                            a.write(&a.record("session_start"));
                        }
                    })
                })
                .collect();
            threads.into_iter().for_each(|t| t.join().unwrap());
            // Exactly one rotation: live -> .1, .1 -> .2, .2 -> .3, the oldest dropped.
            assert_eq!(sessions(&rotated(&live, 3)), ["rotated2"], "round {round}");
            assert_eq!(sessions(&rotated(&live, 2)), ["rotated1"], "round {round}");
            assert!(rotated(&live, 1).exists(), "round {round}");
            let written: usize = log_files(dir.path()).iter().map(|p| sessions(p).len()).sum();
            assert_eq!(written, 2 + 64 * 4, "every record in some file, round {round}");
        }
    }

    #[test]
    fn a_sessions_share_is_spent_by_all_its_processes_and_jobs() {
        // Red team F5: each process (job task, step, node chaperon) had a share of its own.
        let dir = tempfile::tempdir().unwrap();
        let other = AuditLog::new(dir.path());
        other.write(&other.record("session_start"));
        let argv: Vec<String> =
            std::iter::once("scancel".to_string()).chain((0..70).map(|_| "y".repeat(300))).collect();
        // A session and 16 array tasks charged to it, each flooding as fast as it can.
        let launcher = AuditLog::for_session(dir.path(), "hostile");
        let tasks: Vec<AuditLog> =
            (0..16).map(|i| AuditLog::for_session(dir.path(), &format!("task{i}")).charged_to("hostile")).collect();
        for (i, log) in std::iter::once(&launcher).chain(&tasks).enumerate() {
            log.write(&log.record(if i == 0 { "session_start" } else { "job_start" }));
            for n in 0..400 {
                let mut r = log.record("slurm");
                r.program = Some("scancel".into());
                r.decision = Some(format!("denied{n}"));
                r.argv = argv.clone();
                log.write(&r);
            }
        }
        for t in &tasks {
            t.write(&t.record("job_end"));
        }
        launcher.write(&launcher.record("session_end"));
        let all = read(dir.path(), None).unwrap();
        assert!(all.iter().any(|r| r.session == other.session), "the other session's records stay");
        let size: u64 = log_files(dir.path()).iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
        assert!(size <= SESSION_SHARE + MINIMAL_SHARE + 256 * 1024, "{size}");
        let ends = all.iter().filter(|r| r.event == "job_end").count();
        assert_eq!(ends, 16, "a job's end is always written");
        let calls = all.iter().filter(|r| r.event == "slurm").count() as u64;
        let counted: u64 = all.iter().filter_map(|r| r.suppressed).sum();
        assert_eq!(calls + counted, 17 * 400, "every call written or counted");
    }

    #[test]
    fn what_a_process_left_out_is_counted_after_it_ends() {
        // Red team F2: the chaperon's count was lost (it is killed with its launcher), the
        // first count was written at once ("1"), and the channel's `closed` record could be
        // left out.
        let dir = tempfile::tempdir().unwrap();
        let launcher = AuditLog::for_session(dir.path(), "s");
        launcher.write(&launcher.record("session_start"));
        {
            // The share spent first: the channel's closing is written all the same.
            let spender = AuditLog::for_session(dir.path(), "s");
            locked(spender.path(), "s", &Default::default(), |share, _| share.full = SESSION_SHARE + MINIMAL_SHARE);
            let mut r = spender.record("slurm");
            (r.program, r.decision) = (Some("channel".into()), Some("closed".into()));
            spender.write(&r);
            locked(spender.path(), "s", &Default::default(), |share, _| share.full = 0);
            let chaperon = AuditLog::for_session(dir.path(), "s").eager();
            for _ in 0..500 {
                let mut r = chaperon.record("slurm");
                (r.program, r.decision) = (Some("channel".into()), Some("denied".into()));
                chaperon.write(&r);
            }
            // Killed: nothing of it runs after this.
            std::mem::forget(chaperon);
        }
        let before_end = read(dir.path(), None).unwrap();
        assert!(before_end.iter().all(|r| r.event != "audit_suppressed"), "no count before its interval");
        assert!(before_end.iter().any(|r| r.decision.as_deref() == Some("closed")), "the channel's closing is written");
        launcher.write(&launcher.record("session_end"));
        let all = read(dir.path(), None).unwrap();
        let written = all.iter().filter(|r| r.decision.as_deref() == Some("denied")).count() as u64;
        let s: Vec<&Record> = all.iter().filter(|r| r.event == "audit_suppressed").collect();
        assert_eq!(s.len(), 1);
        assert_eq!(written + s[0].suppressed.unwrap(), 500);
        assert_eq!(s[0].counts.get("slurm/denied/channel"), s[0].suppressed.as_ref());
        assert_eq!(all.last().map(|r| r.event.as_str()), Some("session_end"));
    }

    #[test]
    fn a_flood_of_huge_calls_does_not_hide_the_ordinary_ones() {
        // Red team F6: 64 refused calls with 300 arguments of 1000 control bytes spent the
        // share (and the rate) and the 9 real calls after them were neither written nor counted.
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::for_session(dir.path(), "s");
        let junk: Vec<String> =
            std::iter::once("scancel".to_string()).chain((0..300).map(|_| "\u{1}".repeat(1000))).collect();
        for _ in 0..64 {
            let mut r = a.record("slurm");
            (r.program, r.decision, r.argv) = (Some("scancel".into()), Some("denied".into()), junk.clone());
            a.write(&r);
        }
        for _ in 0..3 {
            for (p, d) in [("squeue", "allowed"), ("scancel", "denied"), ("scontrol", "allowed")] {
                let mut r = a.record("slurm");
                (r.program, r.decision, r.argv) = (Some(p.into()), Some(d.into()), vec![p.into(), "1".into()]);
                a.write(&r);
            }
        }
        let all = read(dir.path(), None).unwrap();
        let real = all.iter().filter(|r| r.argv.last().map(String::as_str) == Some("1")).count();
        assert_eq!(real, 9, "every ordinary call is written");
        // A junk record is bounded by what it costs escaped (F7: `\u0001` is 6 bytes).
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        let biggest = text.lines().map(str::len).max().unwrap();
        assert!(biggest < MAX_ARGS * (MAX_ARG + 8) + 4 * MAX_FIELD, "{biggest}");
    }

    #[test]
    fn rendered_records_show_no_control_characters_and_show_paths() {
        // Red team F3: a Slurm command name with CR, ESC and newlines forged lines on a terminal.
        let mut r = AuditLog::for_session(Path::new("/nonexistent"), "s").record("slurm");
        r.program = Some("\r\u{1b}[2Kfake\nline\u{1b}[8m".into());
        r.reason = Some("`\u{1b}[8m` is not mediated".into());
        r.path = Some("/p/.git/hooks/\u{7}x".into());
        r.event = "fs_denied\u{1b}".into();
        let s = render(&r);
        assert!(!s.chars().any(|c| c.is_control()), "{s:?}");
        assert!(s.contains("path=/p/.git/hooks/"), "{s}");
    }

    #[test]
    fn a_bad_byte_in_a_log_file_hides_only_its_line() {
        // Red team F4 (the reading half): one invalid UTF-8 byte made `log` print nothing.
        let dir = tempfile::tempdir().unwrap();
        let a = AuditLog::for_session(dir.path(), "s");
        a.write(&a.record("session_start"));
        std::fs::write(rotated(a.path(), 3), b"\xff\n{\"time\":\"t\",\"session\":\"old\",\"event\":\"x\xff\"}\n")
            .unwrap();
        a.write(&a.record("session_end"));
        let (got, skipped) = read_all(dir.path(), None).unwrap();
        assert_eq!(
            got.iter().map(|r| r.event.as_str()).collect::<Vec<_>>(),
            ["x\u{fffd}", "session_start", "session_end"]
        );
        assert_eq!(skipped, 1);
    }

    #[test]
    fn a_write_cut_short_leaves_no_partial_line() {
        // Red team F9: a full disk cut a record mid-line; the next glued onto it, and a cut
        // multibyte character made `log` fail on the whole file. Here the file size limit
        // (RLIMIT_FSIZE, in a child process of this test) cuts the write the same way.
        const LIMIT: u64 = 10_000;
        if let Ok(dir) = std::env::var("ASB_AUDIT_FSIZE_DIR") {
            let a = AuditLog::for_session(Path::new(&dir), "s");
            for i in 0..40 {
                let mut r = a.record("slurm");
                (r.program, r.decision, r.reason) =
                    (Some("squeue".into()), Some(format!("d{i}")), Some("é".repeat(200)));
                a.write(&r);
            }
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args(["--exact", "audit::tests::a_write_cut_short_leaves_no_partial_line", "--test-threads=1"]);
        child.env("ASB_AUDIT_FSIZE_DIR", dir.path());
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit and signal are async-signal-safe; nothing else runs before exec.
        unsafe {
            child.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: LIMIT, rlim_max: LIMIT };
                libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
        let out = child.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read(dir.path().join(FILE)).unwrap();
        assert!(text.len() > 5_000, "the child wrote up to the limit: {}", text.len());
        assert!(text.ends_with(b"\n"), "no partial line at the end");
        let (records, skipped) = read_all(dir.path(), None).unwrap();
        assert_eq!(skipped, 0);
        assert!(records.len() < 40);
        let share = std::fs::read_to_string(share_file(&dir.path().join(FILE), "s")).unwrap();
        assert!(share.contains("lost/write-failed"), "the loss is counted: {share}");
    }
}
