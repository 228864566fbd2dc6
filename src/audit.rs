//! The audit log: JSON lines, one record per event, appended to `<state dir>/audit.jsonl`
//! (hidden inside every jail). Field names are stable: orchestrators and admins read them.
//! Never logs environment values; argument lists only of Slurm calls, redacted.
//!
//! A hostile session writes as many records as it likes, so each process of a session writes
//! within bounds (issue 33): every field clipped (an argument list to its first arguments, with
//! its totals kept), records of one kind rate-limited, and a session's records within its share
//! of the rotation budget, so that it cannot push every other session's records out of the
//! rotated files. What is left out is counted in `audit_suppressed` records; a session's start
//! and end are always written.

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
/// What one process of a session (the launcher, its chaperon) writes at most: a quarter of a
/// file, so one session rotates the log at most once and the records before it stay.
pub const SESSION_SHARE: u64 = MAX_BYTES / 4;
/// Records of one kind (event and check) a second, per process of a session: as many as the
/// network supervisor lets through for one source.
const PER_SECOND: u32 = 50;
/// Arguments of a record kept, and bytes of each; bytes of any other text field.
const MAX_ARGS: usize = 64;
const MAX_ARG: usize = 256;
const MAX_FIELD: usize = 1024;
/// How often, at most, a count of suppressed records is written.
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
    /// `audit_suppressed`: records of this session left out since the last such record.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub suppressed: Option<u64>,
}

/// `s` cut to at most `max` bytes (at a character boundary), `…` marking the cut.
fn clip_text(s: &mut String, max: usize) {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push('…');
    }
}

impl Record {
    /// Every field within its bound; an argument list keeps its first `MAX_ARGS` arguments
    /// and its totals.
    fn clip(&mut self) {
        let count = self.argv.len();
        let bytes: usize = self.argv.iter().map(String::len).sum();
        if count > MAX_ARGS || self.argv.iter().any(|a| a.len() > MAX_ARG) {
            self.argv.truncate(MAX_ARGS);
            self.argv.iter_mut().for_each(|a| clip_text(a, MAX_ARG));
            (self.argv_count, self.argv_bytes) = (Some(count), Some(bytes));
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
            clip_text(f, MAX_FIELD);
        }
        self.warnings.truncate(16);
        self.warnings.iter_mut().for_each(|w| clip_text(w, MAX_FIELD));
    }

    /// A session's start and end, always written.
    fn lifecycle(&self) -> bool {
        matches!(self.event.as_str(), "session_start" | "session_end" | "audit_suppressed")
    }
}

/// What one process of a session has written, and left out.
#[derive(Debug, Default)]
struct Budget {
    written: u64,
    /// The second counted, and the records of each kind in it.
    second: u64,
    this_second: std::collections::HashMap<String, u32>,
    suppressed: u64,
    last_summary: u64,
}

#[derive(Clone)]
pub struct AuditLog {
    path: PathBuf,
    pub session: String,
    budget: std::sync::Arc<std::sync::Mutex<Budget>>,
}

impl AuditLog {
    /// A log for a new session; the id is unique enough to tell sessions apart in one log
    /// (time, pid) and short enough to type in `agent-sandbox log --session ID`.
    pub fn new(state_dir: &Path) -> AuditLog {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let id = (now.as_micros() as u64) ^ ((std::process::id() as u64) << 40);
        AuditLog {
            path: state_dir.join(FILE),
            session: format!("{:012x}", id & 0xffff_ffff_ffff),
            budget: Default::default(),
        }
    }

    /// The log of an existing session (the chaperon writes into its launcher's session).
    pub fn for_session(state_dir: &Path, session: &str) -> AuditLog {
        AuditLog { path: state_dir.join(FILE), session: session.to_string(), budget: Default::default() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn record(&self, event: &str) -> Record {
        Record { time: now_rfc3339(), session: self.session.clone(), event: event.into(), ..Default::default() }
    }

    /// Appends one record, within the session's bounds (see the module's head). Best effort:
    /// a session is not refused because its log cannot be written (the reason goes to stderr).
    pub fn write(&self, r: &Record) {
        let mut r = r.clone();
        r.clip();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        let (summary, keep) = {
            let mut b = self.budget();
            let keep = r.lifecycle() || {
                if b.second != now {
                    b.second = now;
                    b.this_second.clear();
                }
                let kind = format!("{}/{}", r.event, r.check.as_deref().or(r.decision.as_deref()).unwrap_or(""));
                let n = b.this_second.entry(kind).or_insert(0);
                *n += 1;
                *n <= PER_SECOND && b.written < SESSION_SHARE
            };
            if !keep {
                b.suppressed += 1;
            }
            let due = b.suppressed > 0 && (r.lifecycle() || now >= b.last_summary + SUMMARY_EVERY);
            let summary = due.then(|| {
                b.last_summary = now;
                std::mem::take(&mut b.suppressed)
            });
            (summary, keep)
        };
        if let Some(n) = summary {
            let mut s = self.record("audit_suppressed");
            s.suppressed = Some(n);
            s.reason =
                Some("records of this session left out: past their rate or the session's share of the log".into());
            self.append(&s);
        }
        if keep {
            let bytes = self.append(&r);
            self.budget().written += bytes;
        }
    }

    fn budget(&self) -> std::sync::MutexGuard<'_, Budget> {
        self.budget.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes one record as one line; the bytes written.
    fn append(&self, r: &Record) -> u64 {
        let Ok(mut line) = serde_json::to_vec(r) else { return 0 };
        line.push(b'\n');
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
        }
        let opened = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path);
        // One write of a whole line with O_APPEND: concurrent sessions do not interleave.
        let written = opened.and_then(|mut f| {
            f.write_all(&line)?;
            // Bounded: past MAX_BYTES the log moves to `audit.jsonl.1`, and the older ones one
            // place on (the oldest is dropped). Two sessions rotating at once may drop one more.
            if f.metadata()?.len() > MAX_BYTES {
                for n in (1..ROTATED).rev() {
                    let _ = std::fs::rename(rotated(&self.path, n), rotated(&self.path, n + 1));
                }
                std::fs::rename(&self.path, rotated(&self.path, 1))?;
            }
            Ok(())
        });
        match written {
            Ok(()) => line.len() as u64,
            Err(e) => {
                eprintln!("agent-sandbox: cannot write the audit log {}: {e}", self.path.display());
                0
            }
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
    let live = state_dir.join(FILE);
    let mut records = vec![];
    for path in (1..=ROTATED).rev().map(|n| rotated(&live, n)).chain([live.clone()]) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        records.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Record>(l).ok())
                .filter(|r| session.is_none_or(|s| r.session == s)),
        );
    }
    Ok(records)
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
    let mut partial = String::new();
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
            let mut line = String::new();
            let n = reader.read_line(&mut line)?;
            if n == 0 {
                break;
            }
            pos += n as u64;
            partial.push_str(&line);
            if !partial.ends_with('\n') {
                continue; // a line still being written
            }
            if let Ok(r) = serde_json::from_str::<Record>(partial.trim_end()) {
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

/// One readable line per record, for `agent-sandbox log`.
pub fn render(r: &Record) -> String {
    let mut s = format!("{} {} {:<13}", r.time, r.session, r.event);
    let mut add = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            s.push_str(&format!(" {k}={v}"));
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
    add("proto", r.proto.clone());
    add("dest", r.dest.clone());
    add("name", r.name.clone());
    add("check", r.check.clone());
    add("rule", r.rule.clone().map(|r| if r.is_empty() { "-".into() } else { format!("`{r}`") }));
    add("layer", r.layer.clone());
    add("reason", r.reason.clone());
    for w in &r.warnings {
        s.push_str(&format!("\n    warning: {w}"));
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
    let mut records = read(state_dir, session)?;
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
        assert!(!calls.is_empty() && calls.len() < 2000, "{}", calls.len());
        let r = calls[0];
        assert_eq!((r.argv_count, r.argv_bytes), (Some(100), Some(99_007)));
        assert_eq!(r.argv.len(), MAX_ARGS);
        assert!(r.argv.iter().all(|a| a.len() <= MAX_ARG + '…'.len_utf8()), "clipped");
        let suppressed: u64 = mine.iter().filter_map(|r| r.suppressed).sum();
        assert_eq!(suppressed + calls.len() as u64, 2000, "every record written or counted");
        assert!(mine.iter().any(|r| r.event == "session_end"), "the session's end is always written");
        let size: u64 =
            std::fs::read_dir(dir.path()).unwrap().filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum();
        assert!(size <= SESSION_SHARE + 64 * 1024, "{size}");
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
        std::fs::OpenOptions::new()
            .append(true)
            .open(a.path())
            .unwrap()
            .write_all(&vec![b'\n'; MAX_BYTES as usize])
            .unwrap();
        a.write(&a.record("session_end"));
        assert!(!a.path().exists());
        let got: Vec<String> = read(dir.path(), None).unwrap().into_iter().filter_map(|r| r.program).collect();
        assert_eq!(got, ["older", "old", "live"]);
    }
}
