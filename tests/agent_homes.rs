//! The findings of the outside review of the agents' homes
//! (docs/reviews/2026-11-29-agent-homes-outside-review.md), each asserted from inside the
//! jail and on the host after it: links the jail leaves in an agent's state (A1) or pointing
//! at hidden files (A2), other projects' per-project state (A5, A6), the project's `.env`
//! (A4). They change the test user's agent homes: run under `flock /tmp/asb-home.lock`, as
//! tests/agents.rs is.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The agents' homes are the test user's: one test at a time.
static HOME: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    HOME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes what a test made in the home when it ends.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

fn audit_checks(j: &Jail) -> String {
    std::fs::read_to_string(j.rig.home.join(".local/state/agent-sandbox/audit.jsonl")).unwrap_or_default()
}

/// A1: Gemini CLI outside writes the project's `.gitignore` into `~/.gemini/history/<id>/`
/// (checkpointing): a link the jail left there (`-> ~/.bashrc`) was written through. Such a
/// link is refused as it is made, and one that came to lead out otherwise (its directory
/// moved) is removed when the session ends; links inside the entry stay.
#[test]
fn a_link_out_of_an_agents_state_is_refused_and_none_is_left_there_at_exit() {
    let _l = lock();
    let Some(j) = Jail::new("homes-state-link") else { return };
    // This project's entry of gemini's history (the only one the jail sees).
    let out = j.run_with(
        &["--profile", "gemini"],
        "own=$(ls ~/.gemini/history | head -1); [ -n \"$own\" ] || own=asb-a1; echo OWN=$own; \
         mkdir -p ~/.gemini/history/$own && cd ~/.gemini/history/$own && \
         if ln -s ../../../.bashrc .gitignore 2>err; then echo MADE-OUT; fi; cat err; rm -f err; \
         mkdir -p a/b/c/d && ln -s a/b inside && echo MADE-IN; \
         ln -s ../../../../.bashrc a/b/c/d/l && echo MADE-DEEP; \
         mv a/b/c/d d2 && echo MOVED || echo MOVE-REFUSED",
    );
    let own = out.stdout.lines().find_map(|l| l.strip_prefix("OWN=")).unwrap_or("").to_string();
    assert!(!own.is_empty(), "{out}");
    let entry = j.rig.home.join(".gemini/history").join(&own);
    let _c = Cleanup(vec![entry.clone(), j.rig.home.join(".gemini/tmp").join(&own)]);
    assert!(!out.stdout.contains("MADE-OUT"), "a link to ~/.bashrc was made in gemini's state: {out}");
    assert!(out.stdout.contains("may lead only to a place inside it"), "one clear line: {out}");
    for step in ["MADE-IN", "MADE-DEEP", "MOVE-REFUSED"] {
        assert!(out.stdout.contains(step), "{step}: {out}");
    }
    assert!(std::fs::symlink_metadata(entry.join(".gitignore")).is_err());
    // The directory moved so that its link would lead out (`../../../../.bashrc` from one
    // level up) is refused as it moves, its link judged where it would come to be.
    assert!(out.stderr.contains("d2/l: a symlink in the agent's state"), "{out}");
    assert!(std::fs::symlink_metadata(entry.join("d2")).is_err(), "{out}");
    assert!(std::fs::symlink_metadata(entry.join("a/b/c/d/l")).is_ok_and(|m| m.file_type().is_symlink()));
    assert!(std::fs::symlink_metadata(entry.join("inside")).is_ok_and(|m| m.file_type().is_symlink()));
    assert!(audit_checks(&j).contains("state-link"));
}

/// A2: a project file linked to a hidden one (`.gitignore -> ~/.ssh/id_ed25519`) shows
/// nothing inside, but a tool outside that copies it copies the key where the next jail reads
/// it. Refused however it is spelled, also when a link is renamed to where it leads there.
/// Ordinary links, relative inside the project or to system files, stay.
#[test]
fn a_link_to_a_hidden_file_is_refused_in_the_project_and_removed_at_exit() {
    let _l = lock();
    let Some(j) = Jail::new("homes-hidden-link") else { return };
    let out = j.run(
        "ln -s ~/.ssh/id_ed25519 .gitignore 2>&1 && echo MADE-KEY; \
         ln -s ../../.aws/credentials creds 2>&1 && echo MADE-AWS; \
         mkdir -p src && echo x > src/a.rs && ln -s src/a.rs main.rs && echo MADE-REL; \
         ln -s /etc/hosts hosts && echo MADE-ABS; \
         mkdir -p a/b/c && ln -s ../../../../.ssh/id_ed25519 a/b/c/k && echo MADE-DEEP; \
         mv a/b/c/k a/b/k 2>&1 || echo NOT-MOVED; ln -P a/b/c/k a/b/hk 2>&1 || echo NOT-LINKED; \
         mkdir -p m/b/c && ln -s ../../../../.ssh/id_ed25519 m/b/c/k && mv m/b/c m/c 2>&1 || echo DIR-NOT-MOVED; \
         mkdir -p n/b/c && ln -s ../sibling n/b/c/s && mv n/b/c n/c && echo DIR-MOVED; \
         mkdir -p q/b && ln -s q/b d && ln -s d/../../.ssh/id_ed25519 l && rm d && ln -s . d && echo RETARGETED; \
         mkdir -p x/y/M && ln -s . x/y/M/s && ln -s s/../../../.ssh/id_ed25519 x/y/M/l && mv x/y/M M && \
         echo MOVED-THROUGH; \
         mkdir -p h/q/b && ln -s q/b h/d && ln -s d/../../../.ssh/id_ed25519 h/l && rm h/d && ln -s . h/d && \
         chmod 0311 h && echo HIDDEN-DIR; \
         mkdir -p s/t/q/b && ln -s q/b s/t/d && ln -s d/../../../../.ssh/id_ed25519 s/t/l && rm s/t/d && \
         ln -s . s/t/d && chmod 0200 s && echo SHUT-DIR",
    );
    assert!(!out.stdout.contains("MADE-KEY") && !out.stdout.contains("MADE-AWS"), "{out}");
    assert!(out.stdout.contains("a path the sandbox hides"), "one clear line: {out}");
    // A directory moved up a level (the outside review's A2 under userns): its link would lead
    // to ~/.ssh from there, so the move is refused; one whose links stay harmless moves.
    for step in ["MADE-REL", "MADE-ABS", "MADE-DEEP", "NOT-MOVED", "NOT-LINKED", "DIR-NOT-MOVED", "DIR-MOVED"] {
        assert!(out.stdout.contains(step), "{step}: {out}");
    }
    assert!(std::fs::symlink_metadata(j.project.join("a/b/k")).is_err(), "{out}");
    assert!(std::fs::symlink_metadata(j.project.join("a/b/hk")).is_err(), "{out}");
    assert!(std::fs::symlink_metadata(j.project.join("m/c")).is_err(), "{out}");
    // A link that comes to lead into a hidden path because of a link made after it, or one
    // below a moved directory read through a link inside it (outside review of A2 under
    // userns, F3 and F4), is made; the walk of the project at exit removes it
    // ... also in a directory the jail made unreadable to its owner (second look, N1).
    // ... and below a directory left without its owner's search bit, given back to look
    // there.
    for (step, left) in [("RETARGETED", "l"), ("MOVED-THROUGH", "M/l"), ("HIDDEN-DIR", "h/l"), ("SHUT-DIR", "s/t/l")] {
        assert!(out.stdout.contains(step), "{step}: {out}");
        assert!(std::fs::symlink_metadata(j.project.join(left)).is_err(), "{left} is left: {out}");
    }
    assert!(out.stderr.contains("removed the symlink"), "{out}");
    assert!(out.stderr.contains("/s: the jail left it unreadable to you; made readable again"), "{out}");
    for kept in ["main.rs", "hosts", "a/b/c/k", "m/b/c/k", "n/c/s"] {
        assert!(std::fs::symlink_metadata(j.project.join(kept)).is_ok(), "{kept}: {out}");
    }
    assert!(audit_checks(&j).contains(r#""check":"hidden-link","path":"#));
}

/// Under the git guard a session that made no symlink walks no tree at its end (a walk of a
/// project on NFS is a round trip per directory: issue 35): a directory it left unreadable to
/// its owner, which a walk would list (and make readable again to do so), stays as the jail
/// left it.
#[test]
fn under_the_guard_the_exit_check_walks_no_tree() {
    let _l = lock();
    let Some(j) = Jail::new("homes-no-walk") else { return };
    let out = j.run("mkdir -p shut/inner && chmod 0311 shut && echo SHUT");
    assert!(out.stdout.contains("SHUT"), "{out}");
    let mode = std::fs::metadata(j.project.join("shut")).map(|m| m.permissions().mode() & 0o777);
    let _ = std::fs::set_permissions(j.project.join("shut"), std::fs::Permissions::from_mode(0o755));
    assert!(!out.stderr.contains("made readable again"), "the project was walked at exit: {out}");
    assert_eq!(mode.ok(), Some(0o311), "the project was walked at exit: {out}");
}

/// Two sessions in one project at once: a link one made, harmless then, comes to lead to the
/// key through a link the other makes later (`l -> x/../.ssh/...` while `x` is a directory,
/// then `x -> ..`). The session that made the later link walks the project at its end, the
/// other's links included (outside look at the guard's list of links, F1: looking only at
/// the links a session made itself left `l`).
#[test]
fn a_link_another_session_made_is_checked_by_the_one_that_changed_its_way() {
    let _l = lock();
    let Some(j) = Jail::new("homes-two-sessions") else { return };
    two_sessions_leave_no_link_to_the_key(
        &j,
        r#"sleep 3; rmdir x && ln -s "$(dirname "$PWD")" x"#,
        "mkdir x && ln -s x/../.ssh/id_ed25519 l",
    );
}

/// Session A runs `a` (from its start, after a pause), session B runs `b` a second after A
/// started, in the same project; `b` makes `l`, whose way `a` changes. Both end well, and A's
/// end removes `l`, which has come to lead to the key.
fn two_sessions_leave_no_link_to_the_key(j: &Jail, a: &str, b: &str) {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| j.run(&format!("{a} && echo A-DONE")));
        std::thread::sleep(std::time::Duration::from_secs(1));
        let b = j.run(&format!("{b} && echo B-DONE"));
        (a.join().expect("session A"), b)
    });
    assert!(b.stdout.contains("B-DONE"), "{b}");
    assert!(a.stdout.contains("A-DONE"), "{a}");
    assert!(std::fs::symlink_metadata(j.project.join("l")).is_err(), "the link to the key is left: {a}\n{b}");
    assert!(a.stderr.contains("removed the symlink"), "{a}");
}

/// The same without a link made by the session that changes the way: a directory renamed
/// onto the name another session's link passes through (`l -> b/k/.ssh/...` made while `b` was
/// missing, `a/k -> ../../..`, then `mv a b`). A session that made no link still walks its
/// trees at its end when another ran meanwhile (outside look at the walk's skip, F1).
#[test]
fn a_session_that_made_no_link_walks_when_another_ran_meanwhile() {
    let _l = lock();
    let Some(j) = Jail::new("homes-rename-only") else { return };
    two_sessions_leave_no_link_to_the_key(
        &j,
        "sleep 3; mv a b",
        "mkdir a && ln -s ../../.. a/k && ln -s b/k/.ssh/id_ed25519 l",
    );
}

/// A tree granted by a name that is a symlink on the host (`--rw ~/scratch` with `~/scratch ->
/// elsewhere`; `~/.cache -> /scratch/...` on many clusters): the jail sees the directory at the
/// name, the host reaches it through the link; the link that came to lead to the key there is
/// removed at the end all the same (outside look at a list of the links made by name, R1,
/// which missed it).
#[test]
fn a_link_in_a_tree_named_through_a_symlink_is_checked_at_exit() {
    let _l = lock();
    let Some(j) = Jail::new("homes-named-tree") else { return };
    let (real, named) = (j.rig.home.join("asb-named-real"), j.rig.home.join("asb-named-link"));
    let _c = named_tree(&j, &real, Path::new("asb-named-real"), &named);
    let out = j.run_with(
        &["--rw", &named.display().to_string()],
        &format!(
            "cd {} && mkdir -p q/b && ln -s q/b d && ln -s d/../.ssh/id_ed25519 l && rm d && ln -s . d && echo MADE",
            named.display()
        ),
    );
    assert!(out.stdout.contains("MADE"), "{out}");
    assert!(std::fs::symlink_metadata(real.join("l")).is_err(), "the link to the key is left: {out}");
    assert!(out.stderr.contains("removed the symlink"), "{out}");
}

/// The same tree at another depth on the host (`~/asb-deep-link -> /srv/asb-deep-real`): a
/// link's `..` climbs from where the directory really is when a tool outside follows it, so
/// `../../home/USER/.ssh/id_ed25519` there is the key, though in the jail it reads as a path
/// below the home. Judged as the host follows it: refused as it is made (outside look at the
/// guard's list, P1).
#[test]
fn a_link_judged_from_where_a_tree_named_through_a_symlink_really_is() {
    let _l = lock();
    let Some(j) = Jail::new("homes-deep-tree") else { return };
    let (real, named) = (PathBuf::from("/srv/asb-deep-real"), j.rig.home.join("asb-deep-link"));
    let _c = named_tree(&j, &real, &real, &named);
    let key = j.rig.home.join(".ssh/id_ed25519");
    let target = format!("../../{}", key.strip_prefix("/").unwrap().display());
    let out = j.run_with(
        &["--rw", &named.display().to_string()],
        &format!("cd {} && ln -s {target} l 2>&1; echo DONE", named.display()),
    );
    assert!(out.stdout.contains("DONE"), "{out}");
    assert!(std::fs::symlink_metadata(real.join("l")).is_err(), "the link to the key is left: {out}");
    assert!(out.stdout.contains("a path the sandbox hides"), "one clear line: {out}");
}

/// A directory `real` of the test user's, named `named` in the home through a symlink to
/// `target`; both removed when the guard returned is dropped.
fn named_tree(j: &Jail, real: &Path, target: &Path, named: &Path) -> Cleanup {
    let c = Cleanup(vec![real.to_path_buf(), named.to_path_buf()]);
    let _ = std::fs::remove_dir_all(real);
    let _ = std::fs::remove_file(named);
    std::fs::create_dir_all(real).unwrap();
    std::os::unix::fs::chown(real, Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    std::os::unix::fs::symlink(target, named).unwrap();
    std::os::unix::fs::lchown(named, Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    c
}

/// The Landlock backend has no guard: such links are made, and removed when the session ends,
/// also one that came to lead there because its directory was moved.
#[test]
fn under_landlock_links_to_hidden_files_and_out_of_state_are_removed_at_exit() {
    let _l = lock();
    let Some(j) = Jail::new("homes-landlock-links") else { return };
    let j = j.arg("--backend").arg("landlock");
    let entry = j.rig.home.join(".gemini/history/asb-a1-landlock");
    let _c = Cleanup(vec![entry.clone()]);
    let _ = std::fs::remove_dir_all(&entry);
    std::fs::create_dir_all(&entry).unwrap();
    std::os::unix::fs::chown(&entry, Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    let out = j.run_with(
        &["--profile", "gemini"],
        "ln -s ~/.ssh/id_ed25519 .gitignore && echo MADE-KEY; ln -s src/a.rs main.rs && echo MADE-REL; \
         ln -s ../../../.bashrc ~/.gemini/history/asb-a1-landlock/.gitignore && echo MADE-OUT; \
         mkdir -p a/b/c && ln -s ../../../../.ssh/id_ed25519 a/b/c/k && mv a/b/c a/c && echo MOVED; \
         mkdir -p h && ln -s ~/.ssh/id_ed25519 h/k && chmod 0311 h && echo HIDDEN-DIR",
    );
    // The walk at exit lists a directory the jail left unreadable to its owner once it made
    // it readable again, and says so (second look, N1).
    assert!(out.stdout.contains("HIDDEN-DIR"), "{out}");
    assert!(std::fs::symlink_metadata(j.project.join("h/k")).is_err(), "{out}");
    assert!(out.stderr.contains("/h: the jail left it unreadable to you; made readable again"), "{out}");
    assert!(out.stdout.contains("MADE-KEY") && out.stdout.contains("MADE-OUT"), "{out}");
    assert!(out.stdout.contains("MOVED"), "{out}");
    assert!(std::fs::symlink_metadata(j.project.join(".gitignore")).is_err(), "{out}");
    assert!(std::fs::symlink_metadata(j.project.join("a/c/k")).is_err(), "{out}");
    assert!(out.stderr.contains("removed the symlink"), "{out}");
    assert!(std::fs::symlink_metadata(entry.join(".gitignore")).is_err(), "{out}");
    assert!(std::fs::symlink_metadata(j.project.join("main.rs")).is_ok(), "{out}");
}

/// Claude Code's name for a directory (every character but ASCII letters and digits: `-`).
fn claude_slug(p: &Path) -> String {
    p.to_string_lossy().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// A5, A6: Claude Code keeps every project's transcripts and auto-memory in
/// `~/.claude/projects/<slug>/`; a jail saw all of them (transcripts of sessions run
/// outside in other projects) and wrote another project's memory, which claude outside
/// obeys there. Only this project's entry is shown now, writable and kept.
#[test]
fn a_claude_jail_sees_and_keeps_only_its_own_projects_entry() {
    let _l = lock();
    let Some(j) = Jail::new("homes-claude-own") else { return };
    let other = format!(".claude/projects/{}", claude_slug(&j.rig.home.join("t/asb-other")));
    let third = format!(".claude/projects/{}", claude_slug(&j.rig.home.join("t/asb-third")));
    let own = format!(".claude/projects/{}", claude_slug(&j.project));
    let _c = Cleanup(vec![j.rig.home.join(&other), j.rig.home.join(&third), j.rig.home.join(&own)]);
    home_file(&j, &format!("{other}/memory/MEMORY.md"), "OTHER-PROJECTS-MEMORY\n");
    let out = j.run_with(
        &["--profile", "claude"],
        &format!(
            "ls -a ~/.claude/projects; cat ~/{other}/memory/MEMORY.md 2>/dev/null || echo NO-OTHER; \
             mkdir -p ~/{own}/memory && echo OWN-MEMORY > ~/{own}/memory/MEMORY.md && echo WROTE-OWN; \
             mkdir -p ~/{third}/memory && echo PLANTED > ~/{third}/memory/MEMORY.md && echo PLANTED-THIRD"
        ),
    );
    assert!(out.stdout.contains("NO-OTHER") && !out.stdout.contains("OTHER-PROJECTS-MEMORY"), "{out}");
    assert!(!out.stdout.contains("asb-other"), "another project's entry is listed: {out}");
    assert!(out.stdout.contains("WROTE-OWN"), "{out}");
    let kept = std::fs::read_to_string(j.rig.home.join(&own).join("memory/MEMORY.md")).unwrap_or_default();
    assert_eq!(kept, "OWN-MEMORY\n", "the project's own entry persists: {out}");
    assert!(!j.rig.home.join(&third).exists(), "an entry planted for another project is the session's own: {out}");
    assert!(j.rig.home.join(&other).join("memory/MEMORY.md").exists());
}

/// The same for Gemini CLI's `~/.gemini/tmp/<id>/` (its memory and chats): only this
/// project's entry, writable, with gemini's mark of whose it is read-only.
#[test]
fn a_gemini_jail_sees_and_keeps_only_its_own_projects_entry() {
    let _l = lock();
    let Some(j) = Jail::new("homes-gemini-own") else { return };
    let other = j.rig.home.join(".gemini/tmp/asb-other");
    let _c = Cleanup(vec![other.clone()]);
    home_file(&j, ".gemini/tmp/asb-other/memory/MEMORY.md", "OTHER-GEMINI-MEMORY\n");
    home_file(&j, ".gemini/tmp/asb-other/.project_root", &j.rig.home.join("t/asb-other").display().to_string());
    let project = j.project.display().to_string();
    let out = j.run_with(
        &["--profile", "gemini"],
        &format!(
            "ls -a ~/.gemini/tmp; cat ~/.gemini/tmp/asb-other/memory/MEMORY.md 2>/dev/null || echo NO-OTHER; \
             for d in ~/.gemini/tmp/*/; do if [ \"$(cat $d/.project_root 2>/dev/null)\" = '{project}' ]; then \
             echo OWN=$(basename $d); echo MINE > $d/note && echo WROTE-OWN; \
             echo /elsewhere > $d/.project_root 2>/dev/null && echo MARK-CHANGED; fi; done"
        ),
    );
    assert!(out.stdout.contains("NO-OTHER") && !out.stdout.contains("OTHER-GEMINI-MEMORY"), "{out}");
    assert!(!out.stdout.contains("asb-other"), "another project's entry is listed: {out}");
    assert!(out.stdout.contains("WROTE-OWN") && !out.stdout.contains("MARK-CHANGED"), "{out}");
    let own = out.stdout.lines().find_map(|l| l.strip_prefix("OWN=")).expect("the project's own entry").to_string();
    let own_dir = j.rig.home.join(".gemini/tmp").join(&own);
    let _c2 = Cleanup(vec![own_dir.clone(), j.rig.home.join(".gemini/history").join(&own)]);
    assert_eq!(std::fs::read_to_string(own_dir.join("note")).unwrap_or_default(), "MINE\n", "{out}");
    assert_eq!(std::fs::read_to_string(own_dir.join(".project_root")).unwrap_or_default(), project);
}

/// A4: the project's `.env` is loaded by aider and Gemini CLI started outside; a line that runs
/// a command at aider's start (`AIDER_LOAD`) or sends gemini's key elsewhere must never be
/// there for them, not even while the session runs (another terminal). Under userns the guard
/// takes every write of a `.env`: a line adding such a variable is left out as it is written,
/// with one line and an audit record; a rename that would add one is refused; a link or a
/// second name is never a `.env`; ordinary work on it (appends, a rewrite through a rename,
/// the user's own controls) stays.
#[test]
fn a_dotenv_written_inside_never_holds_a_control_the_jail_added_even_while_the_session_runs() {
    let _l = lock();
    let Some(j) = Jail::new("homes-dotenv-live") else { return };
    let mine = "DATABASE_URL=postgres://db\nOPENAI_API_BASE=https://mine\n";
    let j = j.project_file(".env", mine);
    let env = j.project.join(".env");
    let seen = j.project.join("seen");
    let _ = std::fs::remove_file(&seen);
    let script = "printf 'AIDER_LOAD=notes.txt\\nPORT=1\\n' >> .env && echo APPENDED; \
         for i in $(seq 600); do [ -e seen ] && break; sleep 0.05; done; \
         printf 'GEMINI_SYSTEM_MD=/tmp/x\\n' > new.env; mv new.env .env 2>&1 || echo RENAME-REFUSED; \
         printf 'AIDER_LOAD=x\\n' > evil; mkdir -p sub; ln evil sub/.env 2>&1 || echo HARDLINK-REFUSED; \
         ln -s /etc/passwd sub/.env 2>&1 || echo SYMLINK-REFUSED; \
         python3 -c \"open('new.env','w').write(open('.env').read()+'DEBUG=1\\n'); import os; os.replace('new.env','.env')\" \
           && echo REWRITTEN";
    let (out, during) = std::thread::scope(|s| {
        let running = s.spawn(|| j.run(script));
        // Read from outside while the jail waits for `seen`: the session is still running.
        let during = wait_for_text(&env, "PORT=1");
        std::fs::write(&seen, "").expect("mark");
        (running.join().expect("jail thread"), during)
    });
    assert!(out.stdout.contains("APPENDED"), "the jail may write .env: {out}");
    assert_eq!(during, format!("{mine}PORT=1\n"), "while the session runs: {out}");
    assert!(
        out.stderr
            .contains("`AIDER_LOAD` (read by aider (its options, and the hosts and keys of its models)) left out"),
        "{out}"
    );
    for refused in ["RENAME-REFUSED", "HARDLINK-REFUSED", "SYMLINK-REFUSED"] {
        assert!(out.stdout.contains(refused), "{refused}: {out}");
    }
    assert!(out.stdout.contains("GEMINI_SYSTEM_MD") || out.stderr.contains("GEMINI_SYSTEM_MD"), "{out}");
    assert!(!j.project.join("sub/.env").exists(), "no second name nor link is a .env: {out}");
    assert!(out.stdout.contains("REWRITTEN"), "a rewrite through a rename keeps working: {out}");
    assert_eq!(std::fs::read_to_string(&env).unwrap(), format!("{mine}PORT=1\nDEBUG=1\n"), "{out}");
    assert!(!out.stderr.contains("put back as it was"), "nothing left for the exit check: {out}");
    assert!(audit_checks(&j).contains("\"dotenv\""), "audited");
}

/// The same guard, with what users do to a `.env` and what the loaders read: git's stash and
/// checkout remove a tracked `.env` and write it anew, and the user's own controlling lines
/// (`PYTHONPATH=src`, as VS Code's Python setup writes it) stay; spellings python-dotenv
/// reads as an assignment (`NAME\x1c=`, a blank of Python's only) and variables that run code
/// through git's config (`HOME`) are left out like the rest (outside review of A4, F1, F2, F5).
#[test]
fn a_dotenv_git_writes_anew_keeps_the_users_own_lines_and_no_loader_spelling_gets_through() {
    let _l = lock();
    let Some(j) = Jail::new("homes-dotenv-git") else { return };
    let mine = "PYTHONPATH=src\nDEBUG=0\n";
    let j = j.project_file(".env", mine);
    let _c = Cleanup(vec![j.project.join(".git")]);
    let out = j.run(
        "git init -q . && git add .env && git -c user.name=t -c user.email=t@t commit -qm env && \
         echo DEBUG=1 >> .env && sleep 0.3 && git stash -q && sleep 0.3 && git stash pop -q && sleep 0.3 && \
         git checkout -- .env && sleep 0.3 && echo GIT-OK; \
         printf 'AIDER_LOAD\\034=notes\\nHOME=/tmp/h\\n' >> .env; sleep 0.3; echo; cat .env",
    );
    assert!(out.stdout.contains("GIT-OK"), "git's stash and checkout of a .env work: {out}");
    assert_eq!(std::fs::read_to_string(j.project.join(".env")).unwrap(), mine, "{out}");
    assert!(out.stderr.contains("`AIDER_LOAD` (read by aider") && out.stderr.contains("`HOME`"), "{out}");
}

/// A `.env` is written as a file (outside review of A4, F6): vim with its defaults saves one
/// (its `4913` probe passes `S_IFREG` in the mode, then a backup by rename and a new file),
/// and `fsync`, `ftruncate` and `fchmod` on the descriptor work as on any file; what they
/// write is checked the same, and the bits the writer set are the file's.
#[test]
fn a_dotenv_is_written_as_a_file_and_vim_fsync_ftruncate_and_fchmod_work_on_it() {
    let _l = lock();
    let Some(j) = Jail::new("homes-dotenv-file") else { return };
    let j = j.project_file(".env", "DATABASE_URL=x\n");
    let _ = std::fs::remove_dir_all(j.project.join("d"));
    let out = j.run(
        "vim -N -u DEFAULTS -es -c 'normal GoPORT=3' -c 'normal oAIDER_LOAD=x' -c wq .env && echo VIM-OK; sleep 0.3; \
         cat > /tmp/w.py <<'PY'
import os
fd = os.open('.env', os.O_WRONLY | os.O_APPEND)
os.write(fd, b'A=1\\n')
os.fsync(fd)
os.close(fd)
os.mkdir('d')
fd = os.open('d/.env', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b'SECRET=k\\nHOME=/x\\n')
os.fchmod(fd, 0o600)
os.ftruncate(fd, 9)
os.close(fd)
print('PY-OK')
PY
         python3 /tmp/w.py; sleep 0.3",
    );
    assert!(out.stdout.contains("VIM-OK") && out.stdout.contains("PY-OK"), "{out}");
    assert_eq!(std::fs::read_to_string(j.project.join(".env")).unwrap(), "DATABASE_URL=x\nPORT=3\nA=1\n", "{out}");
    assert!(out.stderr.contains("`AIDER_LOAD` (read by aider"), "{out}");
    let d = j.project.join("d/.env");
    assert_eq!(std::fs::read_to_string(&d).unwrap(), "SECRET=k\n", "{out}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o600, "the writer's fchmod holds");
}

/// `> .env` then `>> .env` at once keep every line (outside review of A4, F5: the second
/// writer's install could come first, and the first then replaced it): installs of one name
/// follow the order the writers opened it.
#[test]
fn quick_writes_of_a_dotenv_are_installed_in_order() {
    let _l = lock();
    let Some(j) = Jail::new("homes-dotenv-order") else { return };
    let out = j.run(
        "for i in 1 2 3 4 5 6; do rm -f .env; printf 'A=1\\n' > .env; printf 'B=2\\n' >> .env; \
         printf 'C=3\\n' >> .env; sleep 0.3; echo \"$(tr '\\n' ' ' < .env)\"; done",
    );
    assert_eq!(out.stdout.lines().filter(|l| *l == "A=1 B=2 C=3 ").count(), 6, "{out}");
}

/// The Landlock backend has no guard: a `.env` into which the jail added such a variable is
/// put back when the session ends (the jail's version kept aside); an ordinary one stays.
#[test]
fn under_landlock_a_dotenv_given_an_agents_control_variable_is_put_back_at_exit() {
    let _l = lock();
    let Some(j) = Jail::new("homes-dotenv") else { return };
    let j = j.project_file(".env", "DATABASE_URL=postgres://db\n").arg("--backend").arg("landlock");
    let out = j.run("printf 'AIDER_LOAD=notes.txt\\nGOOGLE_GEMINI_BASE_URL=http://evil\\n' >> .env && echo ADDED");
    assert!(out.stdout.contains("ADDED"), "the jail may write .env: {out}");
    assert_eq!(std::fs::read_to_string(j.project.join(".env")).unwrap(), "DATABASE_URL=postgres://db\n", "{out}");
    assert!(out.stderr.contains("AIDER_LOAD") && out.stderr.contains("put back as it was"), "{out}");
    assert!(audit_checks(&j).contains("dotenv: AIDER_LOAD"));
    let out = j.run("echo PORT=8080 >> .env");
    assert_eq!(
        std::fs::read_to_string(j.project.join(".env")).unwrap(),
        "DATABASE_URL=postgres://db\nPORT=8080\n",
        "everyday work on .env stays: {out}"
    );
}

/// The user's files at `names` in `dir`, set aside for a test and put back after it.
struct Aside(Vec<(PathBuf, PathBuf)>);

impl Aside {
    fn new(dir: &Path, names: &[&str]) -> Aside {
        let mut moved = vec![];
        for n in names {
            let (from, to) = (dir.join(n), dir.join(format!("{n}.asb-aside")));
            if std::fs::rename(&from, &to).is_ok() {
                moved.push((from, to));
            }
        }
        Aside(moved)
    }
}

impl Drop for Aside {
    fn drop(&mut self) {
        for (from, to) in &self.0 {
            let _ = std::fs::rename(to, from);
        }
    }
}

/// A7: opencode keeps "always allow" answers in its database (state the jail writes), and
/// opencode started outside obeys them: a `permission` row `bash` / `*` runs any command
/// without asking, and so do a continued session's `allow` rules. Those the jail saved are
/// gone when it ends (one line, audited); the user's own approvals and sessions stay.
#[test]
fn approvals_saved_inside_an_opencode_jail_are_gone_when_it_ends() {
    let _l = lock();
    let Some(j) = Jail::new("homes-opencode-db") else { return };
    let dir = j.rig.home.join(".local/share/opencode");
    let names = ["opencode.db", "opencode.db-wal", "opencode.db-shm"];
    let _aside = Aside::new(&dir, &names);
    for backend in ["userns", "landlock"] {
        approvals_saved_inside_are_gone(&j, &dir, &names, backend);
    }
}

fn approvals_saved_inside_are_gone(j: &Jail, dir: &Path, names: &[&str], backend: &str) {
    let db = home_file(j, ".local/share/opencode/opencode.db", "");
    let _gone = Cleanup(names.iter().map(|n| dir.join(n)).collect());
    // Held open for the session, as opencode running in another terminal holds it: its
    // write-ahead log is there then, which the Landlock backend needs to grant its state.
    let c = rusqlite::Connection::open(&db).expect("db");
    {
        // opencode 1.18.33's tables (the columns that matter), with one approval of the user's.
        c.execute_batch(include_str!("fixtures/opencode-1.18.33-tables.sql")).expect("schema");
        c.execute_batch(
            "INSERT INTO permission VALUES ('per_user', 'prj', 'edit', 'src/*', 1, 1);
             INSERT INTO session VALUES ('ses_user', 'prj', '[]');",
        )
        .expect("schema");
    }
    let wal: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).filter(|p| p.exists()).collect();
    j.give(&wal.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    let out = j.run_with(
        &["--profile", "opencode", "--backend", backend],
        "python3 -c \"import sqlite3, os; c = sqlite3.connect(os.path.expanduser('~/.local/share/opencode/opencode.db')); \
         c.execute(\\\"INSERT INTO permission VALUES ('per_jail', 'prj', 'bash', '*', 2, 2)\\\"); \
         c.execute(\\\"UPDATE session SET permission = '[{\\\\\\\"permission\\\\\\\":\\\\\\\"bash\\\\\\\",\\\\\\\"pattern\\\\\\\":\\\\\\\"*\\\\\\\",\\\\\\\"action\\\\\\\":\\\\\\\"allow\\\\\\\"}]' WHERE id = 'ses_user'\\\"); \
         c.commit(); print('SAVED')\"",
    );
    assert!(out.stdout.contains("SAVED"), "{backend}: opencode's database is writable in its jail: {out}");
    assert!(out.stderr.contains("the approvals given inside it removed (bash *)"), "{backend}: {out}");
    let ids: Vec<String> =
        c.prepare("SELECT id FROM permission").and_then(|mut s| s.query_map([], |r| r.get(0))?.collect()).expect("ids");
    assert_eq!(ids, ["per_user"], "{out}");
    let rules: String =
        c.query_row("SELECT permission FROM session WHERE id = 'ses_user'", [], |r| r.get(0)).expect("rules");
    assert_eq!(rules, "[]", "{out}");
    assert!(audit_checks(j).contains("opencode started outside would have obeyed"), "audited");
}
