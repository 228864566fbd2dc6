//! opencode's saved approvals (review of the agents' homes, A7). opencode keeps the answer
//! "always" to a permission prompt in its database, state the jail writes
//! (`~/.local/share/opencode/opencode.db`): `PermissionV2.ask` adds every row of the
//! `permission` table of a project as an `allow` rule after the configured ones, and a
//! continued session merges its `session.permission` column into its rules (opencode
//! 1.18.33's source). A jail that inserts `bash` / `*` there would have opencode, started
//! outside in that project, run any command without asking.
//!
//! So the launcher reads both before the session and, once the jail is gone, removes the
//! approvals it added or changed, puts back each session's rules it changed, and leaves the
//! `allow` rules out of the sessions it made: what is approved inside holds for that session
//! only. The database is the jail's work: opened without following a link, in SQLite's
//! defensive mode with the schema untrusted, and any trigger in it (opencode makes none)
//! dropped before the changes, which are then read back.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Where opencode keeps its database, below the home (`xdg-basedir`'s data directory; the
/// profile makes that one writable).
pub const DB: &str = ".local/share/opencode/opencode.db";

impl Snapshot {
    /// The database's path.
    pub fn path(&self) -> &Path {
        &self.db
    }
}

/// An approval: (id, project, action, resource).
type Approval = (String, String, String, String);

/// What the database held before the session.
pub struct Snapshot {
    db: PathBuf,
    approvals: BTreeSet<Approval>,
    /// Each session's rules (`session.permission`), by id.
    sessions: HashMap<String, Option<String>>,
}

/// The host path of opencode's database if the jail can write it: a writable bind over it
/// (userns) or a read-write rule above it (Landlock). None when the session cannot change it,
/// so that other sessions pay nothing.
pub fn writable_in(plan: &crate::plan::Plan) -> Option<PathBuf> {
    let db = plan.home.join(DB);
    let bound = plan.mounts.iter().rev().find_map(|m| match m {
        crate::plan::MountSpec::Bind { source, target, rw, .. } if db.starts_with(target) => {
            let rest = db.strip_prefix(target).unwrap_or(Path::new(""));
            // `join("")` would add a `/`: the bind is of the file itself.
            Some(rw.then(|| if rest.as_os_str().is_empty() { source.clone() } else { source.join(rest) }))
        }
        crate::plan::MountSpec::Tmpfs { target, .. } if db.starts_with(target) => Some(None),
        _ => None,
    });
    if let Some(found) = bound {
        return found;
    }
    let granted = plan.landlock.as_ref().is_some_and(|l| l.read_write.iter().any(|r| db.starts_with(r)));
    granted.then_some(db)
}

/// Opens the database; `write` for the changes at exit. Before the session it is opened
/// read-only and its write-ahead log left as it is at close: the plan has bound the log's
/// files, which the last connection's close would otherwise checkpoint and remove.
fn open(db: &Path, write: bool) -> rusqlite::Result<Connection> {
    let mode = if write { OpenFlags::SQLITE_OPEN_READ_WRITE } else { OpenFlags::SQLITE_OPEN_READ_ONLY };
    let c = Connection::open_with_flags(db, mode | OpenFlags::SQLITE_OPEN_NOFOLLOW | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    if !write {
        c.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    }
    // opencode outside may be writing it: wait a little, never for long.
    c.busy_timeout(std::time::Duration::from_secs(2))?;
    c.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
    c.pragma_update(None, "trusted_schema", false)?;
    Ok(c)
}

/// A column read as text whatever the jail stored there.
fn text(r: &rusqlite::Row, i: usize) -> rusqlite::Result<Option<String>> {
    Ok(match r.get_ref(i)? {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
    })
}

/// Whether the database has opencode's table `name`, with `columns`. SQLite finds a table by
/// its name in any case, and reads a view of that name as one: a name that is not such a
/// table (a view, `PERMISSION` beside nothing, a column missing) is the jail's work and an
/// error, never "no table" (outside review, F1).
fn has_table(c: &Connection, name: &str, columns: &[&str]) -> rusqlite::Result<bool> {
    let kinds: Vec<String> = {
        let mut st = c.prepare("SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE")?;
        let rows = st.query_map([name], |r| text(r, 0).map(Option::unwrap_or_default))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    if kinds.is_empty() {
        return Ok(false);
    }
    let refused = |why: String| {
        let code = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT);
        rusqlite::Error::SqliteFailure(code, Some(format!("`{name}`: {why}")))
    };
    if kinds.iter().any(|k| k != "table") || kinds.len() > 1 {
        return Err(refused(format!("not opencode's table ({})", kinds.join(", "))));
    }
    let found: Vec<String> = {
        let mut st = c.prepare("SELECT name FROM pragma_table_info(?1)")?;
        let rows = st.query_map([name], |r| text(r, 0).map(Option::unwrap_or_default))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    match columns.iter().find(|c| !found.iter().any(|f| f.eq_ignore_ascii_case(c))) {
        Some(missing) => Err(refused(format!("no column `{missing}`"))),
        None => Ok(true),
    }
}

/// Each approval with its rowid.
fn approvals(c: &Connection) -> rusqlite::Result<Vec<(i64, Approval)>> {
    if !has_table(c, "permission", &["id", "project_id", "action", "resource"])? {
        return Ok(vec![]);
    }
    let mut st = c.prepare("SELECT rowid, id, project_id, action, resource FROM permission")?;
    let rows = st.query_map([], |r| {
        let t = |i| text(r, i).map(Option::unwrap_or_default);
        Ok((r.get::<_, i64>(0)?, (t(1)?, t(2)?, t(3)?, t(4)?)))
    })?;
    rows.collect()
}

/// Each session's rowid, id and rules.
fn sessions(c: &Connection) -> rusqlite::Result<Vec<(i64, String, Option<String>)>> {
    if !has_table(c, "session", &["id", "permission"])? {
        return Ok(vec![]);
    }
    let mut st = c.prepare("SELECT rowid, id, permission FROM session")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, text(r, 1)?.unwrap_or_default(), text(r, 2)?)))?;
    rows.collect()
}

/// Reads the database before the session (a missing one is an empty one: the session may
/// make it). The warning names one that cannot be read.
pub fn take(db: &Path) -> (Option<Snapshot>, Option<String>) {
    let empty = || Snapshot { db: db.to_path_buf(), approvals: BTreeSet::new(), sessions: HashMap::new() };
    match std::fs::symlink_metadata(db) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Some(empty()), None),
        Ok(m) if m.is_file() => {}
        _ => return (None, Some(unchecked(db, "not a regular file"))),
    }
    let read = (|| -> rusqlite::Result<Snapshot> {
        let c = open(db, false)?;
        let approvals = approvals(&c)?.into_iter().map(|(_, a)| a).collect();
        let sessions = sessions(&c)?.into_iter().map(|(_, id, p)| (id, p)).collect();
        Ok(Snapshot { approvals, sessions, ..empty() })
    })();
    match read {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(unchecked(db, &e.to_string()))),
    }
}

fn unchecked(db: &Path, why: &str) -> String {
    format!(
        "{}: opencode's saved approvals are not checked ({why}): an approval given inside the jail would hold \
         for opencode started outside",
        db.display()
    )
}

/// What the session's end changed.
#[derive(Debug, Default, PartialEq)]
pub struct Restored {
    /// The approvals removed, as `action resource`.
    pub removed: Vec<String>,
    /// Sessions whose rules were put back or lost their `allow` rules.
    pub sessions: usize,
    /// Triggers dropped (opencode makes none).
    pub triggers: Vec<String>,
}

impl Restored {
    pub fn is_empty(&self) -> bool {
        *self == Restored::default()
    }
}

/// `rules` (a session's `permission` column: a JSON list of `{permission, pattern, action}`)
/// without its `allow` rules (as it is if it has none); None (no rules) if it is not such a
/// list.
fn without_allow(rules: &str) -> Option<String> {
    let serde_json::Value::Array(list) = serde_json::from_str(rules).ok()? else { return None };
    let allows = |r: &serde_json::Value| r.get("action").is_some_and(|a| a == "allow");
    if !list.iter().any(allows) {
        return Some(rules.to_string());
    }
    let kept: Vec<serde_json::Value> = list.into_iter().filter(|r| !allows(r)).collect();
    serde_json::to_string(&kept).ok()
}

/// After the session: the approvals it added or changed are removed, each session's rules
/// it changed put back, the `allow` rules of a session it made left out.
pub fn restore(s: &Snapshot) -> Result<Restored, String> {
    match std::fs::symlink_metadata(&s.db) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Restored::default()),
        Ok(m) if m.is_file() => {}
        _ => return Err(set_aside(&s.db, "not a regular file")),
    }
    let checked = (|| -> rusqlite::Result<Result<Restored, String>> {
        let mut c = open(&s.db, true)?;
        let done = put_back(&mut c, s)?;
        // Read back: nothing the session approved is left.
        let left = approvals(&c)?;
        if left.iter().any(|(_, a)| !s.approvals.contains(a)) {
            return Ok(Err("an approval given inside the jail is still there after its removal".into()));
        }
        Ok(Ok(done))
    })();
    match checked {
        Ok(Ok(done)) => Ok(done),
        // opencode outside holds it (the jail's processes are gone): said, left as it is.
        Err(rusqlite::Error::SqliteFailure(e, _))
            if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) =>
        {
            Err("opencode outside holds it locked; look at its `permission` table before using it".into())
        }
        // A database the jail made that cannot be checked (a table rebuilt another way, its
        // mode taken away, its bytes broken) is set aside whole: fail closed (outside review, F2).
        Ok(Err(why)) => Err(set_aside(&s.db, &why)),
        Err(e) => Err(set_aside(&s.db, &e.to_string())),
    }
}

/// Moves the database and its log aside (`NAME.agent-sandbox-unchecked`), so that opencode
/// outside starts with a new one and obeys nothing the jail saved; returns what to say.
fn set_aside(db: &Path, why: &str) -> String {
    let aside = db.with_extension("db.agent-sandbox-unchecked");
    let moved = std::fs::rename(db, &aside);
    for log in ["-wal", "-shm", "-journal"] {
        let mut from = db.as_os_str().to_owned();
        from.push(log);
        let mut to = aside.as_os_str().to_owned();
        to.push(log);
        let _ = std::fs::rename(&from, &to);
    }
    match moved {
        Ok(()) => format!(
            "{why}: it was set aside as {} (opencode outside starts with a new database; look at its `permission` \
             table and put it back if it holds nothing of the jail's)",
            aside.display()
        ),
        Err(e) => format!("{why}, and it could not be set aside ({e})"),
    }
}

fn put_back(c: &mut Connection, s: &Snapshot) -> rusqlite::Result<Restored> {
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut done = Restored::default();
    let triggers: Vec<String> = {
        let mut st = tx.prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'")?;
        let rows = st.query_map([], |r| text(r, 0).map(Option::unwrap_or_default))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for t in triggers {
        tx.execute_batch(&format!("DROP TRIGGER \"{}\"", t.replace('"', "\"\"")))?;
        done.triggers.push(t);
    }
    for (rowid, a) in approvals(&tx)? {
        if !s.approvals.contains(&a) {
            tx.execute("DELETE FROM permission WHERE rowid = ?1", [rowid])?;
            done.removed.push(format!("{} {}", a.2, a.3));
        }
    }
    for (rowid, id, rules) in sessions(&tx)? {
        let want = match s.sessions.get(&id) {
            Some(before) => before.clone(),
            None => rules.as_deref().and_then(without_allow),
        };
        if want != rules {
            tx.execute("UPDATE session SET permission = ?1 WHERE rowid = ?2", rusqlite::params![want, rowid])?;
            done.sessions += 1;
        }
    }
    tx.commit()?;
    Ok(done)
}

/// One line and an audit record for what was put back, or for a database that could not be.
pub fn report(db: &Path, done: &Result<Restored, String>, audit: &crate::audit::AuditLog) {
    let line = match done {
        Ok(d) if d.is_empty() => return,
        Ok(d) => {
            let mut what = vec![];
            if !d.removed.is_empty() {
                what.push(format!("the approvals given inside it removed ({})", d.removed.join(", ")));
            }
            if d.sessions > 0 {
                what.push(format!("the rules of {} session(s) it changed or made put back", d.sessions));
            }
            if !d.triggers.is_empty() {
                what.push(format!("triggers opencode does not make dropped ({})", d.triggers.join(", ")));
            }
            format!(
                "agent-sandbox: {}: opencode started outside would have obeyed what the jail saved: {}",
                db.display(),
                what.join("; ")
            )
        }
        Err(e) => format!(
            "agent-sandbox: warning: {}: opencode's saved approvals could not be put back ({e}): look at its \
             `permission` table before starting opencode outside",
            db.display()
        ),
    };
    eprintln!("{line}");
    let mut r = audit.record("fs_denied");
    r.check = Some(line.trim_start_matches("agent-sandbox: ").to_string());
    r.path = Some(db.display().to_string());
    audit.write(&r);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// opencode 1.18.33's two tables, as it makes them (the columns read here).
    fn opencode_db(p: &Path) -> Connection {
        let c = Connection::open(p).expect("db");
        c.execute_batch(include_str!("../../tests/fixtures/opencode-1.18.33-tables.sql")).expect("schema");
        c.execute_batch(
            "INSERT INTO permission VALUES ('per_1', 'prj', 'edit', 'src/*', 1, 1);
             INSERT INTO session VALUES ('ses_1', 'prj', '[{\"permission\":\"question\",\"pattern\":\"*\",\"action\":\"deny\"}]');",
        )
        .expect("schema");
        c
    }

    #[test]
    fn approvals_given_inside_are_removed_and_sessions_rules_put_back() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("opencode.db");
        let c = opencode_db(&p);
        let (s, w) = take(&p);
        let s = s.expect("snapshot");
        assert!(w.is_none());
        // What a jail could write.
        c.execute_batch(
            "INSERT INTO permission VALUES ('per_2', 'prj', 'bash', '*', 2, 2);
             UPDATE session SET permission = '[{\"permission\":\"bash\",\"pattern\":\"*\",\"action\":\"allow\"}]' WHERE id = 'ses_1';
             INSERT INTO session VALUES ('ses_2', 'prj', '[{\"permission\":\"bash\",\"pattern\":\"*\",\"action\":\"allow\"},{\"permission\":\"question\",\"pattern\":\"*\",\"action\":\"deny\"}]');
             INSERT INTO session VALUES ('ses_3', 'prj', NULL);
             CREATE TRIGGER again AFTER DELETE ON permission BEGIN INSERT INTO permission VALUES ('per_3', 'prj', 'bash', '*x', 3, 3); END;",
        )
        .expect("plant");
        drop(c);
        let done = restore(&s).expect("restored");
        assert_eq!(done.removed, ["bash *"]);
        assert_eq!((done.sessions, done.triggers.as_slice()), (2, &["again".to_string()][..]));
        let c = Connection::open(&p).expect("db");
        let rows: Vec<String> = c
            .prepare("SELECT id FROM permission ORDER BY id")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .expect("rows");
        assert_eq!(rows, ["per_1"], "the user's own approval stays");
        let rules = |id: &str| -> Option<String> {
            c.query_row("SELECT permission FROM session WHERE id = ?1", [id], |r| r.get(0)).expect("session")
        };
        assert_eq!(
            rules("ses_1").as_deref(),
            Some("[{\"permission\":\"question\",\"pattern\":\"*\",\"action\":\"deny\"}]")
        );
        let kept: serde_json::Value = serde_json::from_str(&rules("ses_2").expect("rules")).expect("json");
        assert_eq!(kept, serde_json::json!([{"permission": "question", "pattern": "*", "action": "deny"}]));
        assert_eq!(rules("ses_3"), None);
        assert!(restore(&s).expect("again").is_empty(), "nothing more to put back");
    }

    /// Outside review, F1 and F2: tables the jail renamed (`PERMISSION`), turned into a view or
    /// rebuilt `WITHOUT ROWID` hold approvals opencode still reads; none is taken for "no
    /// table". A renamed one is found as SQLite finds it, and cleaned; one that cannot be
    /// checked sets the database aside whole, so that opencode outside starts with a new one.
    #[test]
    fn a_database_the_jail_reshaped_is_cleaned_or_set_aside_never_trusted() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("opencode.db");
        let c = opencode_db(&p);
        let (s, _) = take(&p);
        c.execute_batch("ALTER TABLE permission RENAME TO ptmp; ALTER TABLE ptmp RENAME TO PERMISSION;").expect("case");
        c.execute_batch("INSERT INTO permission VALUES ('per_x', 'prj', 'bash', '*', 2, 2);").expect("plant");
        drop(c);
        assert_eq!(restore(&s.expect("snapshot")).expect("cleaned").removed, ["bash *"]);
        for reshape in [
            "ALTER TABLE permission RENAME TO pdata; INSERT INTO pdata VALUES ('per_x', 'prj', 'bash', '*', 2, 2); \
             CREATE VIEW permission AS SELECT * FROM pdata;",
            "ALTER TABLE permission RENAME TO pold; CREATE TABLE permission (`id` text PRIMARY KEY, `project_id` \
             text, `action` text, `resource` text, `time_created` integer, `time_updated` integer) WITHOUT ROWID;",
        ] {
            let d = tempfile::tempdir().expect("tmp");
            let p = d.path().join("opencode.db");
            let c = opencode_db(&p);
            let (s, _) = take(&p);
            let s = s.expect("snapshot");
            c.execute_batch(reshape).expect("reshape");
            if !reshape.contains("VIEW") {
                c.execute_batch("INSERT INTO permission VALUES ('per_x', 'prj', 'bash', '*', 2, 2);").expect("plant");
            }
            drop(c);
            let why = restore(&s).expect_err(reshape);
            assert!(why.contains("set aside"), "{reshape}: {why}");
            assert!(!p.exists() && d.path().join("opencode.db.agent-sandbox-unchecked").exists(), "{reshape}");
        }
    }

    /// The plan binds the write-ahead log's files (opencode's state): reading the database
    /// before the session must not remove them (the jail's bind would fail).
    #[test]
    fn reading_before_the_session_leaves_the_write_ahead_log_in_place() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("opencode.db");
        let c = opencode_db(&p);
        c.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).expect("config");
        drop(c);
        let log = [d.path().join("opencode.db-wal"), d.path().join("opencode.db-shm")];
        assert!(log.iter().all(|f| f.exists()), "the log as opencode leaves it while running");
        let (s, w) = take(&p);
        assert!(s.is_some() && w.is_none(), "{w:?}");
        assert!(log.iter().all(|f| f.exists()), "the log is still there");
    }

    #[test]
    fn a_database_made_inside_keeps_no_approval_and_a_link_is_not_followed() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("opencode.db");
        let (s, _) = take(&p);
        let s = s.expect("a missing database is an empty one");
        drop(opencode_db(&p));
        assert_eq!(restore(&s).expect("restored").removed, ["edit src/*"]);
        std::fs::remove_file(&p).expect("rm");
        std::os::unix::fs::symlink(d.path().join("elsewhere.db"), &p).expect("ln");
        assert!(restore(&s).is_err(), "a link is the jail's: not followed");
        assert!(std::fs::symlink_metadata(&p).is_err(), "and set aside");
        std::os::unix::fs::symlink(d.path().join("elsewhere.db"), &p).expect("ln");
        let (s, w) = take(&p);
        assert!(s.is_none() && w.is_some_and(|w| w.contains("not checked")));
    }
}
