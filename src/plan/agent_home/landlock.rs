//! The agent's own directories under the Landlock backend, which cannot mount: no layer, no
//! copy bound over a file, and a rule only ever grants. So the real directory is only
//! readable, each `agent.state` entry is granted writable by its own rule, and the agent is
//! pointed (by the variable it honours: `CLAUDE_CONFIG_DIR`, `CODEX_HOME`, `GEMINI_CLI_HOME`,
//! `PI_CODING_AGENT_DIR`) at a session directory in the state directory that stands in for
//! it: links to the real state entries (written through), links to everything else (read
//! only through them; replacing one changes the session's directory only), copies of the
//! files the agent rewrites (`agent.session`), empty session directories, and the copies of
//! `agent.merge` whose listed keys go back at exit as under userns. The session directory is
//! removed at exit, so nothing the jail wrote there reaches the agent outside. An agent
//! without such a variable (opencode, aider) keeps its directory read-only with its state
//! writable: it cannot rewrite its own settings inside.

use super::{check_key, home_entry, parts, MergeBack, Rules, STRIP_WHEN_INJECTED};
use crate::host::Kind;
use crate::plan::fs::{expand_glob, under, Builder, MountSpec};
use crate::plan::{entry_err, PlanError};
use crate::policy::merge::Source;
use crate::policy::Policy;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// An agent directory the agent can be moved off: its path relative to the home, the
/// variable, whether the variable names the directory's parent (gemini reads
/// `$GEMINI_CLI_HOME/.gemini`), and the path below the directory the variable stands for
/// (pi's `~/.pi/agent`).
struct Redirect {
    dir: &'static str,
    var: &'static str,
    parent: bool,
    below: &'static str,
    /// Home files the agent then reads in the session directory (`$CLAUDE_CONFIG_DIR/.claude.json`).
    files: &'static [&'static str],
}

/// Each from the agent's own documentation or source: Claude Code reads `.claude.json` in
/// `CLAUDE_CONFIG_DIR` when it is set; codex's `CODEX_HOME`; Gemini CLI's `GEMINI_CLI_HOME`
/// (the `.gemini` folder inside it); pi's `PI_CODING_AGENT_DIR` (`~/.pi/agent`).
const REDIRECTS: &[Redirect] = &[
    Redirect { dir: ".claude", var: "CLAUDE_CONFIG_DIR", parent: false, below: "", files: &[".claude.json"] },
    Redirect { dir: ".codex", var: "CODEX_HOME", parent: false, below: "", files: &[] },
    Redirect { dir: ".gemini", var: "GEMINI_CLI_HOME", parent: true, below: "", files: &[] },
    Redirect { dir: ".pi", var: "PI_CODING_AGENT_DIR", parent: false, below: "agent", files: &[] },
];

/// One entry of a session directory, made by the launcher before the session
/// (`jail::session_homes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HomeEntry {
    /// A link to the real entry: written through for a state entry, read-only otherwise.
    Link(#[serde(with = "crate::plan::os_path")] PathBuf),
    /// A copy of the real file (a settings file the agent rewrites).
    Copy(#[serde(with = "crate::plan::os_path")] PathBuf),
    /// An empty directory of the session's own (Claude Code's `session-env/`), or one holding
    /// entries of both kinds.
    Dir,
}

/// A session directory standing in for an agent's own (module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHome {
    /// What the launcher makes and removes (gemini's: the parent of `.gemini`).
    #[serde(with = "crate::plan::os_path")]
    pub root: PathBuf,
    /// Each path inside `root`, parents first.
    pub entries: Vec<(PathBuf, HomeEntry)>,
}

/// What the Landlock confinement adds to the plan.
#[derive(Debug, Default)]
pub struct Redirected {
    pub homes: Vec<SessionHome>,
    pub merges: Vec<MergeBack>,
    pub env: Vec<(String, String)>,
    pub warnings: Vec<String>,
    /// The agent's directories: a writable tree around one (`~/.cache` around
    /// `~/.cache/opencode`) is split into a rule per entry around it, as around a store.
    pub keep_out: Vec<PathBuf>,
}

/// Confines the session's own agent's directories for the Landlock backend (module doc).
/// `copies`: the state directory's copies directory; `session`: the session id.
pub fn confine(
    b: &mut Builder<'_>,
    policy: &Policy,
    home: &Path,
    copies: &Path,
    session: &str,
    injected: bool,
) -> Result<Redirected, PlanError> {
    let mut out = Redirected::default();
    // Each redirected directory's rules and where its session directory stands in for it.
    let mut placed: Vec<(&Redirect, PathBuf)> = vec![];
    let Some(agent) = policy.agent.as_ref().map(|a| &a.value) else { return Ok(out) };
    if agent.state.is_none() && agent.session.is_none() && agent.merge.is_none() {
        return Ok(out);
    }
    let write: Vec<String> =
        policy.home_write.iter().filter(|e| matches!(e.source, Source::Profile(_))).map(|e| e.value.clone()).collect();
    let mut rules = Rules::of(agent, &write, &[], home)?;
    if injected {
        rules.strip = STRIP_WHEN_INJECTED.iter().map(|s| s.to_string()).collect();
    }
    for d in rules.dirs.clone() {
        if b.hidden.covers(&d) {
            continue;
        }
        let made = b.home_dirs.contains(&d);
        if b.fs.kind(&d) != Some(Kind::Dir) && !made {
            continue;
        }
        no_links(b, &rules, home, &d)?;
        read_only(b, &d);
        out.keep_out.push(d.clone());
        let rel = d.strip_prefix(home).unwrap_or(&d).to_string_lossy().into_owned();
        match REDIRECTS.iter().find(|r| r.dir == rel) {
            Some(r) => {
                let root = copies.join(format!("{session}-{}", r.dir.trim_start_matches('.')));
                let sdir = if r.parent { root.join(r.dir) } else { root.clone() };
                let real = if r.below.is_empty() { d.clone() } else { d.join(r.below) };
                let mut entries = vec![];
                if r.parent {
                    entries.push((sdir.clone(), HomeEntry::Dir));
                }
                if b.fs.kind(&real) == Some(Kind::Dir) || b.home_dirs.contains(&real) {
                    mirror(b, &rules, home, &real, &sdir, &mut entries);
                } else if !r.below.is_empty() {
                    // pi's `agent/` is made by pi: made now, so that what it keeps persists.
                    b.home_dirs.push(real.clone());
                }
                out.homes.push(SessionHome { root: root.clone(), entries });
                placed.push((r, sdir.clone()));
                b.push(MountSpec::Bind { source: root.clone(), target: root.clone(), rw: true, dir: true });
                out.env.push((r.var.into(), if r.parent { root } else { sdir }.display().to_string()));
            }
            None => {
                state_writable(b, &rules, home, &d);
                out.warnings.push(format!(
                    "the Landlock backend keeps ~/{rel} read-only but for the agent's state (no mounts there): the \
                     agent cannot change its own settings inside"
                ));
            }
        }
    }
    for m in &rules.merge {
        for k in &m.keys {
            check_key(k)?;
        }
        let Some(rel) = home_entry(&m.file) else {
            return Err(entry_err("agent.merge", &m.file, "must be a plain path relative to ~ (e.g. .claude.json)"));
        };
        let file = home.join(&rel);
        if b.hidden.covers(&file) {
            continue;
        }
        let Some(copy) = copy_of(&placed, &rel) else {
            // No session directory to put the copy in: the file stays read-only.
            read_only(b, &file);
            continue;
        };
        // The user's file has no rule of its own (nor one of a writable home around it): the
        // agent reads the copy.
        b.mounts.retain(|mm| !matches!(mm, MountSpec::Bind { target, rw: true, .. } if *target == file));
        out.keep_out.push(file.clone());
        if b.fs.kind(&file).is_none() && !b.home_files.contains(&file) {
            b.home_files.push(file.clone());
        }
        out.merges.push(MergeBack { file, copy, keys: m.keys.clone(), strip: rules.strip.clone() });
    }
    Ok(out)
}

/// Where the copy of the merged home file `rel` goes: inside the session directory standing
/// in for the directory holding it, or where its agent reads it once moved.
fn copy_of(placed: &[(&Redirect, PathBuf)], rel: &Path) -> Option<PathBuf> {
    for (r, sdir) in placed {
        if r.files.iter().any(|f| Path::new(f) == rel) {
            return Some(sdir.join(rel));
        }
        let inside = Path::new(r.dir).join(r.below);
        if let Ok(below) = rel.strip_prefix(&inside) {
            return Some(sdir.join(below));
        }
    }
    None
}

/// Every rule on `p` the plan has so far made read-only (`home.write` granted the agent's
/// directory whole), and `p` readable.
fn read_only(b: &mut Builder<'_>, p: &Path) {
    let mut found = false;
    for m in b.mounts.iter_mut() {
        if let MountSpec::Bind { target, rw, .. } = m {
            if target == p {
                *rw = false;
                found = true;
            }
        }
    }
    if !found && b.fs.kind(p).is_some() {
        let dir = b.fs.kind(p) == Some(Kind::Dir);
        b.push(MountSpec::Bind { source: p.to_path_buf(), target: p.to_path_buf(), rw: false, dir });
    }
}

/// Grants `p` writable (a state entry), made first if missing and of a kind the launcher
/// makes (a directory, a JSON file, an empty `.jsonl`). False: nothing to grant.
fn grant(b: &mut Builder<'_>, p: &Path, dir: bool) -> bool {
    match b.fs.kind(p) {
        Some(Kind::Symlink) | Some(Kind::Char) | Some(Kind::Other) => false,
        Some(k) => {
            if k == Kind::Dir {
                b.state_dirs.push(p.to_path_buf());
            }
            b.push(MountSpec::Bind { source: p.to_path_buf(), target: p.to_path_buf(), rw: true, dir: k == Kind::Dir });
            true
        }
        None => {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if crate::glob::has_glob(&p.to_string_lossy())
                || (!dir && !name.ends_with(".json") && !name.ends_with(".jsonl"))
            {
                return false;
            }
            let list = if dir { &mut b.home_dirs } else { &mut b.home_files };
            if !list.contains(&p.to_path_buf()) {
                list.push(p.to_path_buf());
            }
            if dir {
                b.state_dirs.push(p.to_path_buf());
            }
            b.push(MountSpec::Bind { source: p.to_path_buf(), target: p.to_path_buf(), rw: true, dir });
            true
        }
    }
}

/// An agent directory kept where it is: each state entry inside it writable by its own rule.
fn state_writable(b: &mut Builder<'_>, rules: &Rules, home: &Path, d: &Path) {
    for raw in &rules.state_raw {
        let Some(rel) = home_entry(raw.trim_end_matches('/')) else { continue };
        let p = home.join(rel);
        if !under(&p, d) || p == d {
            continue;
        }
        let dir = raw.ends_with('/');
        let found = expand_glob(b.fs, &p);
        if found.is_empty() {
            if !b.hidden.covers(&p) && p.parent().is_some_and(|q| b.fs.kind(q) == Some(Kind::Dir) || q == d) {
                grant(b, &p, dir);
            }
            continue;
        }
        for q in found {
            if !b.hidden.covers(&q) {
                grant(b, &q, dir);
            }
        }
    }
}

/// The session directory `sdir` standing in for the real `real`, entry by entry (module doc).
fn mirror(
    b: &mut Builder<'_>,
    rules: &Rules,
    home: &Path,
    real: &Path,
    sdir: &Path,
    out: &mut Vec<(PathBuf, HomeEntry)>,
) {
    let mut names: Vec<_> = b.fs.read_dir(real).iter().cloned().collect();
    // The state and session entries not made yet: made now (state) or empty (session dirs).
    for raw in rules.state_raw.iter().chain(&rules.session_raw) {
        let Some(rel) = home_entry(raw.trim_end_matches('/')) else { continue };
        let p = home.join(rel);
        if p.parent() == Some(real) && !crate::glob::has_glob(&p.to_string_lossy()) {
            if let Some(n) = p.file_name().filter(|n| !names.iter().any(|m| m == *n)) {
                names.push(n.to_os_string());
            }
        }
    }
    names.sort();
    let merged: Vec<PathBuf> = rules.merge.iter().filter_map(|m| home_entry(&m.file)).map(|r| home.join(r)).collect();
    for name in names {
        let p = real.join(&name);
        let s = sdir.join(&name);
        let rel = parts(p.strip_prefix(home).unwrap_or(&p));
        if b.hidden.covers(&p) || merged.contains(&p) {
            continue;
        }
        let kind = b.fs.kind(&p);
        let raw_of = |list: &[String]| {
            list.iter().find(|raw| home_entry(raw.trim_end_matches('/')).is_some_and(|r| home.join(r) == p)).cloned()
        };
        if rules.state.matches(&rel) {
            let dir = raw_of(&rules.state_raw).map_or(kind == Some(Kind::Dir), |r| r.ends_with('/'));
            if grant(b, &p, dir) {
                out.push((s, HomeEntry::Link(p)));
            }
        } else if rules.session.matches(&rel) {
            match kind {
                Some(Kind::File) => out.push((s, HomeEntry::Copy(p))),
                Some(Kind::Dir) => out.push((s, HomeEntry::Dir)),
                None if raw_of(&rules.session_raw).is_some_and(|r| r.ends_with('/')) => out.push((s, HomeEntry::Dir)),
                _ => {}
            }
        } else if kind == Some(Kind::Dir)
            && (rules.state.below(&rel) || rules.session.below(&rel) || merged.iter().any(|m| under(m, &p) && *m != p))
        {
            out.push((s.clone(), HomeEntry::Dir));
            mirror(b, rules, home, &p, &s, out);
        } else if matches!(kind, Some(Kind::Dir) | Some(Kind::File)) {
            out.push((s, HomeEntry::Link(p)));
        }
    }
}

/// No symbolic link among the agent directory's entries but its state entries (as under
/// userns, `Walk::no_links`): a link would lead the agent's reads, and the state rules, away.
fn no_links(b: &Builder<'_>, rules: &Rules, home: &Path, dir: &Path) -> Result<(), PlanError> {
    for name in b.fs.read_dir(dir).iter() {
        let p = dir.join(name);
        let rel = parts(p.strip_prefix(home).unwrap_or(&p));
        if b.hidden.covers(&p) || rules.state.matches(&rel) {
            continue;
        }
        match b.fs.kind(&p) {
            Some(Kind::Symlink) => return Err(PlanError::AgentSymlink { path: p }),
            Some(Kind::Dir) if rules.state.below(&rel) || rules.session.below(&rel) => no_links(b, rules, home, &p)?,
            _ => {}
        }
    }
    Ok(())
}
