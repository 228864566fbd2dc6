//! The agent's own home directories (`~/.codex`, `~/.claude`, `~/.gemini`...) as the jail
//! sees them. Allow-listed: what the agent must keep to work (sessions, history, logins,
//! caches: the profile's `agent.state`) is bound writable from your directory and persists;
//! everything else there is the session's own (`MountSpec::Layer`: an overlay whose writes are
//! dropped at exit, or the directory read-only where no overlay can be made), since the agent
//! outside reads it to decide what to run (settings with hooks, MCP servers, notify commands,
//! plugins, environments, rules, the user's own scripts), whatever its name. A missing state
//! entry is made beforehand (a directory, a JSON file holding `{}`, an empty `.jsonl`), so
//! that its bind has somewhere to go. A file the agent keeps state and commands in at once
//! (`~/.claude.json`) is a copy whose harmless keys go back at exit (`agent.merge`, carried
//! out by `jail::agent_copies`).
//!
//! The same holds for the other built-in agents' directories wherever a session can write
//! them (`~/.cache/opencode` under the built-in `~/.cache`, all of them with `home.access =
//! "write"` or `--rw ~/.codex`): their state stays writable, their configuration is the
//! session's own, and a missing one is a read-only placeholder. The plan decides; nothing
//! here touches the host.

pub mod landlock;

use super::fs::{under, Builder, MountSpec};
use super::home_entry;
use super::mounts::pin_ancestors;
use super::{entry_err, Placeholder, PlanError};
use crate::host::Kind;
use crate::policy::merge::Source;
use crate::policy::schema::MergeSpec;
use crate::policy::Policy;
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// A file of the agent's given to the jail as a copy (in the state directory, bound over the
/// file), of which only `keys` are written back into `file` when the session ends; `strip`
/// names keys the copy is made without (a key the jail must not read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeBack {
    #[serde(with = "super::os_path")]
    pub file: PathBuf,
    #[serde(with = "super::os_path")]
    pub copy: PathBuf,
    pub keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strip: Vec<String>,
}

/// What the agent's home adds to the plan besides its mounts.
#[derive(Debug, Default)]
pub struct Confined {
    pub placeholders: Vec<Placeholder>,
    pub merges: Vec<MergeBack>,
}

/// One `agent.*` list, each entry split into its components (a trailing `/` dropped).
struct Patterns(Vec<Vec<String>>);

impl Patterns {
    fn of(list: Option<&Vec<String>>, key: &str) -> Result<Patterns, PlanError> {
        let mut out = vec![];
        for raw in list.into_iter().flatten() {
            let Some(rel) = home_entry(raw.trim_end_matches('/')) else {
                return Err(entry_err(key, raw, "must be a plain path relative to ~ (e.g. .codex/sessions/)"));
            };
            out.push(rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect());
        }
        Ok(Patterns(out))
    }

    /// `rel` is one of the entries (component by component, `*` and `?` matching).
    fn matches(&self, rel: &[String]) -> bool {
        self.0.iter().any(|p| p.len() == rel.len() && p.iter().zip(rel).all(|(p, r)| crate::glob::glob_match(p, r)))
    }

    /// Some entry lies strictly below `rel`.
    fn below(&self, rel: &[String]) -> bool {
        self.0.iter().any(|p| p.len() > rel.len() && p.iter().zip(rel).all(|(p, r)| crate::glob::glob_match(p, r)))
    }
}

fn parts(rel: &Path) -> Vec<String> {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

/// One agent's rules: the session's own profile, or another built-in one.
struct Rules {
    /// Its directories (`home.write` entries ending in `/`), files (other `home.write`
    /// entries) and what it reads (`home.read`).
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
    reads: Vec<(PathBuf, bool)>,
    state_raw: Vec<String>,
    state: Patterns,
    session_raw: Vec<String>,
    session: Patterns,
    merge: Vec<MergeSpec>,
    /// A key the jail does not hold (injected from outside): the merged files' keys that
    /// hold it are left out of the copy.
    strip: Vec<String>,
}

impl Rules {
    fn of(
        agent: &crate::policy::schema::AgentSection,
        write: &[String],
        read: &[String],
        home: &Path,
    ) -> Result<Rules, PlanError> {
        let mut r = Rules {
            dirs: vec![],
            files: vec![],
            reads: vec![],
            state_raw: agent.state.clone().unwrap_or_default(),
            state: Patterns::of(agent.state.as_ref(), "agent.state")?,
            session_raw: agent.session.clone().unwrap_or_default(),
            session: Patterns::of(agent.session.as_ref(), "agent.session")?,
            merge: agent.merge.clone().unwrap_or_default(),
            strip: vec![],
        };
        for w in write {
            let Some(rel) = home_entry(w) else { continue };
            let p = home.join(rel);
            let list = if w.ends_with('/') { &mut r.dirs } else { &mut r.files };
            if !list.contains(&p) {
                list.push(p);
            }
        }
        for e in read {
            if let Some(rel) = home_entry(e) {
                r.reads.push((home.join(rel), e.ends_with('/')));
            }
        }
        Ok(r)
    }

    fn writes_inside(&self, home: &Path, d: &Path) -> bool {
        let rel = parts(d.strip_prefix(home).unwrap_or(d));
        self.state.below(&rel)
            || self.session.below(&rel)
            || self.merge.iter().any(|m| home_entry(&m.file).is_some_and(|f| under(&home.join(f), d)))
    }
}

/// The built-in profiles' agents: name, `home.write`, `home.read`, `[agent]`; parsed once.
type Builtin = (String, Vec<String>, Vec<String>, crate::policy::schema::AgentSection);

fn builtin_agents() -> &'static [Builtin] {
    static AGENTS: OnceLock<Vec<Builtin>> = OnceLock::new();
    AGENTS.get_or_init(|| {
        crate::policy::BUILTIN_PROFILES
            .iter()
            .filter_map(|(name, text)| {
                let path = PathBuf::from(format!("<built-in profiles/{name}.toml>"));
                let layer = crate::policy::parse_layer(text, &path, crate::policy::FileKind::Profile).ok()?;
                let home = layer.home.unwrap_or_default();
                Some((name.to_string(), home.write.unwrap_or_default(), home.read.unwrap_or_default(), layer.agent?))
            })
            .collect()
    })
}

/// The state of one plan's confinement: what it made so far.
struct Walk<'p> {
    home: &'p Path,
    /// The session's working directory, then the project: what the agents name their
    /// per-project state after (`PER_PROJECT`).
    places: &'p [PathBuf],
    /// The trees the jail writes: a read-only bind inside one pins its parents there.
    writable: &'p [PathBuf],
    /// Overlays can be made here (`HostFacts::overlay_in_userns`).
    layers: bool,
    copies: &'p Path,
    out: Confined,
    /// Directories already confined (the session's own agent's first).
    done: Vec<PathBuf>,
}

impl Walk<'_> {
    /// The innermost writable tree `p` lies strictly inside.
    fn tree_of(&self, p: &Path) -> Option<&Path> {
        self.writable
            .iter()
            .filter(|w| p.starts_with(w) && p != w.as_path())
            .max_by_key(|w| w.as_os_str().len())
            .map(PathBuf::as_path)
    }

    /// `p` lies in a tree the jail writes (or is one).
    fn reachable(&self, p: &Path) -> bool {
        self.writable.iter().any(|w| under(p, w))
    }

    fn read_only(&mut self, b: &mut Builder<'_>, p: &Path, dir: bool) {
        if let Some(w) = self.tree_of(p) {
            pin_ancestors(b, w, p);
        }
        b.push(MountSpec::Bind { source: p.to_path_buf(), target: p.to_path_buf(), rw: false, dir });
    }

    /// A missing name a later agent outside would read: an empty read-only placeholder for
    /// the session (removed afterwards), so the jail cannot make it.
    ///
    /// Made where it really is: below a tree granted through a link (`--rw ~/.local` with
    /// `~/.local -> /scratch/u/local`), `~/.local/share/opencode` is made as
    /// `/scratch/u/local/share/opencode`, no link on the way, and bound at the name the jail
    /// sees (the launcher makes no placeholder through a link).
    fn placeholder(&mut self, b: &mut Builder<'_>, p: &Path, dir: bool) {
        let real = super::fs::real_parents(b.fs, p);
        if self.out.placeholders.iter().any(|ph| real.starts_with(&ph.path)) {
            return;
        }
        let json = !dir && p.extension().is_some_and(|e| e == "json");
        self.out.placeholders.push(Placeholder { path: real.clone(), dir, json });
        if let Some(w) = self.tree_of(p) {
            pin_ancestors(b, w, p);
        }
        b.push(MountSpec::Bind { source: real, target: p.to_path_buf(), rw: false, dir });
    }

    /// The agent directory `d` for the session: its own layer (or read-only), the masks and
    /// pins made inside it earlier put back on top, then its state bound writable from the
    /// host, each missing literal entry made first.
    fn confine_dir(&mut self, b: &mut Builder<'_>, rules: &Rules, d: &Path, own: bool) -> Result<(), PlanError> {
        self.no_links(b, rules, d)?;
        if let Some(w) = self.tree_of(d) {
            pin_ancestors(b, w, d);
        }
        self.cover(b, d);
        mask_hidden_again(b, d);
        for raw in &rules.state_raw {
            let Some(rel) = home_entry(raw.trim_end_matches('/')) else { continue };
            let p = self.home.join(rel);
            if !under(&p, d) || p == d {
                continue;
            }
            if self.per_project(b, d, &p) {
                continue;
            }
            for q in super::fs::expand_glob(b.fs, &p) {
                if !b.hidden.covers(&q) {
                    self.bind_state(b, d, raw, q, own);
                }
            }
        }
        if !self.layers {
            self.session_copies(b, rules, d);
        }
        self.done.push(d.to_path_buf());
        Ok(())
    }

    /// `d` as its own layer, or bound read-only, with the masks and pins made inside it
    /// earlier put back on top (the new mount would hide them).
    fn cover(&self, b: &mut Builder<'_>, d: &Path) {
        let earlier: Vec<MountSpec> = b
            .mounts
            .iter()
            .filter(|m| matches!(m, MountSpec::Mask { .. } | MountSpec::Pin { .. }))
            .filter(|m| under(m.target(), d) && m.target() != d)
            .cloned()
            .collect();
        if self.layers {
            b.push(MountSpec::Layer { source: d.to_path_buf(), target: d.to_path_buf() });
        } else {
            b.push(MountSpec::Bind { source: d.to_path_buf(), target: d.to_path_buf(), rw: false, dir: true });
        }
        for m in earlier {
            b.push(m);
        }
    }

    /// One state entry `q` (from the profile's entry `raw`) bound writable from the host;
    /// a missing one made first when it is the session's own agent's and literal.
    fn bind_state(&mut self, b: &mut Builder<'_>, d: &Path, raw: &str, q: PathBuf, own: bool) {
        match b.fs.kind(&q) {
            // A link is not followed (the bind would refuse it at start): the jail
            // sees it as the layer shows it, and cannot change it.
            Some(Kind::Symlink) => {}
            Some(k) => {
                if k == Kind::Dir {
                    b.state_dirs.push(q.clone());
                }
                b.push(MountSpec::Bind { source: q.clone(), target: q, rw: true, dir: k == Kind::Dir })
            }
            None if !own || crate::glob::has_glob(&q.to_string_lossy()) => {}
            None => {
                let dir = raw.ends_with('/');
                let name = q.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if !dir && !name.ends_with(".json") && !name.ends_with(".jsonl") {
                    // Made by the agent in the session's layer; it persists once the
                    // agent has made it outside.
                    return;
                }
                self.make_parents(b, d, &q);
                let list = if dir { &mut b.home_dirs } else { &mut b.home_files };
                if !list.contains(&q) {
                    list.push(q.clone());
                }
                if dir {
                    b.state_dirs.push(q.clone());
                }
                b.push(MountSpec::Bind { source: q.clone(), target: q, rw: true, dir });
            }
        }
    }

    /// Read-only (no layer): the settings the agent rewrites are a copy for the session.
    fn session_copies(&mut self, b: &mut Builder<'_>, rules: &Rules, d: &Path) {
        for raw in &rules.session_raw {
            let Some(rel) = home_entry(raw.trim_end_matches('/')) else { continue };
            let p = self.home.join(rel);
            if !under(&p, d) || p == d || b.hidden.covers(&p) {
                continue;
            }
            match b.fs.kind(&p) {
                Some(Kind::File) => b.push(MountSpec::SessionCopy { target: p }),
                Some(Kind::Dir) => b.push(MountSpec::Tmpfs { target: p, mode: 0o700 }),
                // A directory the agent makes at its start (Claude Code's session-env/):
                // made now, empty, as the tmpfs's mount point.
                None if raw.ends_with('/') => {
                    self.make_parents(b, d, &p);
                    if !b.home_dirs.contains(&p) {
                        b.home_dirs.push(p.clone());
                    }
                    b.push(MountSpec::Tmpfs { target: p, mode: 0o700 });
                }
                _ => {}
            }
        }
    }

    /// A state directory the agent keeps one entry per project in (`PER_PROJECT`): the
    /// session's own empty directory over it, with only this project's entries bound
    /// writable from the host (made first if missing). False if `p` is none, or the name of
    /// this project's entry cannot be told (then it is bound whole, as any state entry).
    fn per_project(&mut self, b: &mut Builder<'_>, d: &Path, p: &Path) -> bool {
        let Some(rel) = p.strip_prefix(self.home).ok().and_then(|r| r.to_str()) else { return false };
        let Some((_, naming)) = PER_PROJECT.iter().find(|(n, _)| *n == rel) else { return false };
        if b.hidden.covers(p) || matches!(b.fs.kind(p), Some(k) if k != Kind::Dir) {
            return false;
        }
        let names: Vec<(String, Option<String>)> = match naming {
            Naming::Claude => {
                let mut v: Vec<(String, Option<String>)> = vec![];
                for place in self.places {
                    match claude_slug(place) {
                        Some(n) if !v.iter().any(|(m, _)| *m == n) => v.push((n, None)),
                        Some(_) => {}
                        None => return false,
                    }
                }
                v
            }
            Naming::Gemini => match self.places.first().and_then(|cwd| gemini_slug(b.fs, self.home, cwd)) {
                Some(n) => vec![(n, self.places.first().map(|c| c.display().to_string()))],
                None => return false,
            },
        };
        b.push(MountSpec::Tmpfs { target: p.to_path_buf(), mode: 0o700 });
        if b.fs.kind(p).is_none() {
            self.make_parents(b, d, &p.join("x"));
        }
        for (name, marker) in names {
            let q = p.join(&name);
            if b.fs.kind(&q).is_none() && !b.home_dirs.contains(&q) {
                b.home_dirs.push(q.clone());
            }
            b.state_dirs.push(q.clone());
            b.push(MountSpec::Bind { source: q.clone(), target: q.clone(), rw: true, dir: true });
            // Gemini CLI's mark of whose entry this is: made now if missing, and read-only, so
            // that the jail cannot give its entry (and what it planted there) to another
            // project for gemini outside to adopt.
            if let Some(owner) = marker {
                let m = q.join(GEMINI_MARKER);
                match b.fs.kind(&m) {
                    Some(Kind::File) => {}
                    None => b.home_texts.push((m.clone(), owner)),
                    Some(_) => continue,
                }
                b.push(MountSpec::Bind { source: m.clone(), target: m, rw: false, dir: false });
            }
        }
        // Gemini's downloaded tools (`tmp/bin`, its ripgrep): read-only, as they are.
        if *naming == Naming::Gemini && b.fs.kind(&p.join("bin")) == Some(Kind::Dir) {
            let bin = p.join("bin");
            b.push(MountSpec::Bind { source: bin.clone(), target: bin, rw: false, dir: true });
        }
        true
    }

    /// No symbolic link among the entries of `dir` (and of its directories with state or
    /// session entries below): a write through one would land wherever it leads, in a tree
    /// the jail writes perhaps, where the agent outside reads it. A state entry may be one
    /// (left as it is, never bound).
    fn no_links(&self, b: &Builder<'_>, rules: &Rules, dir: &Path) -> Result<(), PlanError> {
        for name in b.fs.read_dir(dir).iter() {
            let p = dir.join(name);
            let rel = parts(p.strip_prefix(self.home).unwrap_or(&p));
            if b.hidden.covers(&p) || rules.state.matches(&rel) {
                continue;
            }
            match b.fs.kind(&p) {
                Some(Kind::Symlink) => return Err(PlanError::AgentSymlink { path: p }),
                Some(Kind::Dir) if rules.state.below(&rel) || rules.session.below(&rel) => {
                    self.no_links(b, rules, &p)?
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The missing directories between `d` and `q`: made by the launcher, and kept.
    fn make_parents(&self, b: &mut Builder<'_>, d: &Path, q: &Path) {
        let mut make = vec![];
        let mut parent = q.parent();
        while let Some(p) = parent.filter(|p| p.starts_with(d) && *p != d && b.fs.kind(p).is_none()) {
            make.push(p.to_path_buf());
            parent = p.parent();
        }
        for p in make.into_iter().rev() {
            if !b.home_dirs.contains(&p) {
                b.home_dirs.push(p);
            }
        }
    }

    /// The next copy's path in the state directory.
    fn next_copy(&self) -> PathBuf {
        self.copies.join(self.out.merges.len().to_string())
    }
}

/// What the policy hides inside `d`, masked again over the layer, which shows your directory
/// as it is (a home bound whole was rebuilt without them, with no mask).
fn mask_hidden_again(b: &mut Builder<'_>, d: &Path) {
    let hidden: Vec<(PathBuf, bool)> = b
        .hidden
        .all()
        .filter(|h| under(h, d) && h.as_path() != d)
        .filter_map(|h| b.fs.kind(h).map(|k| (h.clone(), k == Kind::Dir)))
        .collect();
    for (h, dir) in hidden {
        let masked = b
            .mounts
            .iter()
            .rev()
            .take_while(|m| m.target() != d)
            .any(|m| matches!(m, MountSpec::Mask { target, .. } if *target == h));
        if !masked {
            b.push(MountSpec::Mask { target: h, dir, made: false });
        }
    }
}

/// Confines the agents' home directories as their profiles say (see the module's doc), and
/// gives the files of `agent.merge` as copies in `copies` (the state directory's, per
/// session). `layers`: session overlays can be made (else read-only directories).
/// `injected`: the session's own agent's key is injected from outside (its merged files'
/// `strip` keys are left out of the copies).
#[allow(clippy::too_many_arguments)]
pub fn confine(
    b: &mut Builder<'_>,
    policy: &Policy,
    home: &Path,
    places: &[PathBuf],
    writable: &[PathBuf],
    copies: &Path,
    layers: bool,
    injected: bool,
) -> Result<Confined, PlanError> {
    let mut walk = Walk { home, places, writable, layers, copies, out: Confined::default(), done: vec![] };
    let own = policy.agent.as_ref().map(|a| &a.value);
    if let Some(agent) = own.filter(|a| a.state.is_some() || a.session.is_some() || a.merge.is_some()) {
        let write: Vec<String> = policy
            .home_write
            .iter()
            .filter(|e| matches!(e.source, Source::Profile(_)))
            .map(|e| e.value.clone())
            .collect();
        let mut rules = Rules::of(agent, &write, &[], home)?;
        if injected {
            rules.strip = STRIP_WHEN_INJECTED.iter().map(|s| s.to_string()).collect();
        }
        confine_own(b, &mut walk, &rules, policy)?;
    }
    let own_name = own.and_then(|a| a.name.clone());
    for (name, write, read, agent) in builtin_agents() {
        if own_name.as_deref() == Some(name.as_str()) {
            continue;
        }
        let rules = Rules::of(agent, write, read, home)?;
        confine_other(b, &mut walk, &rules)?;
    }
    Ok(walk.out)
}

/// How an agent names its per-project entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Naming {
    /// Claude Code: the working directory with every character but ASCII letters and digits
    /// turned into `-` (its `projects/` directory, transcripts and auto-memory).
    Claude,
    /// Gemini CLI 0.61: a short id per project in `projects.json`, owned through the
    /// `.project_root` mark in each entry (its `tmp/` with memory and chats, `history/`).
    Gemini,
}

/// The state directories kept per project (review of the agents' homes, A5 and A6): a jail
/// sees and writes its project's entry only, neither another project's memory (which the
/// agent outside obeys there) nor the transcripts of sessions run outside elsewhere.
const PER_PROJECT: &[(&str, Naming)] =
    [(".claude/projects", Naming::Claude), (".gemini/tmp", Naming::Gemini), (".gemini/history", Naming::Gemini)]
        .as_slice();

/// Gemini CLI's mark of the project an entry belongs to.
const GEMINI_MARKER: &str = ".project_root";

/// Claude Code's name for the directory of `place` (its `sanitizePath`: every UTF-16 unit
/// but ASCII letters and digits becomes `-`); None past 200 characters, where it appends a
/// hash of its own.
pub fn claude_slug(place: &Path) -> Option<String> {
    let text = place.to_str()?;
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.extend(std::iter::repeat_n('-', c.len_utf16()));
        }
    }
    (out.len() <= 200).then_some(out)
}

/// Gemini CLI's `slugify`: lower case, runs of other characters one `-`, none at the ends.
fn gemini_slugify(name: &str) -> String {
    let mut out = String::new();
    for c in name.to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let t = out.trim_matches('-');
    if t.is_empty() {
        "project".into()
    } else {
        t.into()
    }
}

/// The id Gemini CLI 0.61 gives the project at `cwd` (its `ProjectRegistry.getShortId`): the
/// registry's entry if the marks of its entries say it is this project's; else an entry
/// whose mark names it; else a new one, its directory's name made a slug, numbered past the
/// ids taken and the entries another project owns. None where it cannot be told.
pub fn gemini_slug(fs: &dyn crate::host::HostFs, home: &Path, cwd: &Path) -> Option<String> {
    let gemini = home.join(".gemini");
    let bases = [gemini.join("tmp"), gemini.join("history")];
    let want = cwd.to_str()?;
    let owner = |base: &Path, slug: &str| -> Option<String> {
        fs.read_small(&base.join(slug).join(GEMINI_MARKER), 4096)
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
    };
    let owned_by_us = |slug: &str| bases.iter().all(|b| owner(b, slug).is_none_or(|o| o == want));
    let registry: serde_json::Value = fs
        .read_small(&gemini.join("projects.json"), 4 << 20)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    let projects = registry.get("projects").and_then(|p| p.as_object());
    if let Some(slug) = projects.and_then(|p| p.get(want)).and_then(|s| s.as_str()) {
        if valid_slug(slug) && owned_by_us(slug) {
            return Some(slug.to_string());
        }
    }
    for base in &bases {
        for cand in fs.read_dir(base).iter() {
            let Some(c) = cand.to_str() else { continue };
            if valid_slug(c) && owner(base, c).is_some_and(|o| o == want) {
                return Some(c.to_string());
            }
        }
    }
    let stem = gemini_slugify(cwd.file_name().and_then(|n| n.to_str()).unwrap_or(""));
    let taken: Vec<&str> = projects.map(|p| p.values().filter_map(|v| v.as_str()).collect()).unwrap_or_default();
    (0..1000)
        .map(|i| if i == 0 { stem.clone() } else { format!("{stem}-{i}") })
        .find(|c| !taken.contains(&c.as_str()) && bases.iter().all(|b| owner(b, c).is_none_or(|o| o == want)))
}

/// A name that is one plain path component.
fn valid_slug(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0')
}

/// The keys of an agent's merged file that hold a key of its own, left out of the session's
/// copy when the key is injected from outside: Claude Code keeps the API key you gave it in
/// `~/.claude.json` (`primaryApiKey`).
const STRIP_WHEN_INJECTED: &[&str] = &["primaryApiKey"];

fn confine_own(b: &mut Builder<'_>, walk: &mut Walk<'_>, rules: &Rules, policy: &Policy) -> Result<(), PlanError> {
    // The merged files first (a home.write file's bind takes the copy as its source now);
    // the bind of a copy inside a directory goes on top of the directory's layer, after it.
    let mut later = vec![];
    for m in &rules.merge {
        let copy = walk.next_copy();
        if let Some((merge, bind)) = merge_copy(b, policy, walk.home, &rules.dirs, m, &copy, &rules.strip)? {
            walk.done.push(merge.file.clone());
            walk.out.merges.push(merge);
            later.extend(bind);
        }
    }
    for d in &rules.dirs {
        if b.hidden.covers(d) {
            continue;
        }
        let is_dir = b.fs.kind(d) == Some(Kind::Dir);
        // Made by the launcher before the session (`home_dirs`): empty.
        if !is_dir && !b.home_dirs.contains(d) {
            continue;
        }
        if rules.writes_inside(walk.home, d) {
            walk.confine_dir(b, rules, d, true)?;
        } else {
            // Nothing of the agent's to keep here (opencode's config directory): all of it
            // read-only, new names included. The instruction file's mount goes on top.
            walk.read_only(b, d, true);
            walk.done.push(d.clone());
        }
    }
    for m in later {
        b.push(m);
    }
    Ok(())
}

/// Another built-in agent's directories and files where this session could write them.
fn confine_other(b: &mut Builder<'_>, walk: &mut Walk<'_>, rules: &Rules) -> Result<(), PlanError> {
    let taken = |walk: &Walk<'_>, p: &Path| walk.done.iter().any(|d| under(p, d) || under(d, p));
    for d in &rules.dirs {
        if !walk.reachable(d) || b.hidden.covers(d) || taken(walk, d) {
            continue;
        }
        match b.fs.kind(d) {
            Some(Kind::Symlink) => return Err(PlanError::AgentSymlink { path: d.clone() }),
            Some(Kind::Dir) if rules.writes_inside(walk.home, d) => walk.confine_dir(b, rules, d, false)?,
            Some(Kind::Dir) => {
                walk.read_only(b, d, true);
                walk.done.push(d.clone());
            }
            Some(_) => {}
            None if walk.reachable(d.parent().unwrap_or(d))
                && d.parent().is_some_and(|p| b.fs.kind(p) == Some(Kind::Dir)) =>
            {
                walk.placeholder(b, d, true);
                walk.done.push(d.clone());
            }
            None => {}
        }
    }
    // Its files (`~/.claude.json`) and what it reads (`~/.aider.conf.yml`): a merged file is a
    // copy whose listed keys go back; any other is read-only, a missing one a placeholder.
    let files = rules.files.iter().map(|f| (f.clone(), false)).chain(rules.reads.iter().cloned());
    for (f, dir) in files.collect::<Vec<_>>() {
        // A hidden one that exists stays hidden; a missing one (aider's ~/.aider.conf.yml is
        // in the catalogue) still must not be made.
        if !walk.reachable(&f) || f == walk.home || taken(walk, &f) || (b.hidden.covers(&f) && b.fs.kind(&f).is_some())
        {
            continue;
        }
        let merge = rules.merge.iter().find(|m| home_entry(&m.file).is_some_and(|r| walk.home.join(r) == f));
        match (b.fs.kind(&f), merge) {
            (Some(Kind::Symlink), _) => return Err(PlanError::AgentSymlink { path: f }),
            (Some(Kind::File), Some(m)) => {
                let copy = walk.next_copy();
                if let Some(w) = walk.tree_of(&f) {
                    pin_ancestors(b, w, &f);
                }
                b.push(MountSpec::Bind { source: copy.clone(), target: f.clone(), rw: true, dir: false });
                walk.out.merges.push(MergeBack { file: f.clone(), copy, keys: m.keys.clone(), strip: vec![] });
            }
            (Some(k), _) => walk.read_only(b, &f, k == Kind::Dir),
            (None, _) if f.parent().is_some_and(|p| b.fs.kind(p) == Some(Kind::Dir)) => walk.placeholder(b, &f, dir),
            (None, _) => {}
        }
        walk.done.push(f);
    }
    Ok(())
}

/// The copy of a merged file, and the bind of it still to push (for a file inside one of
/// the agent's directories: over the directory's layer). None for a hidden file (a login the
/// policy hides): its mask stays, and no copy of it is made.
fn merge_copy(
    b: &mut Builder<'_>,
    policy: &Policy,
    home: &Path,
    dirs: &[PathBuf],
    m: &MergeSpec,
    copy: &Path,
    strip: &[String],
) -> Result<Option<(MergeBack, Option<MountSpec>)>, PlanError> {
    let Some(rel) = home_entry(&m.file) else {
        return Err(entry_err("agent.merge", &m.file, "must be a plain path relative to ~ (e.g. .claude.json)"));
    };
    let file = home.join(&rel);
    if b.hidden.covers(&file) {
        return Ok(None);
    }
    let listed = policy.home_write.iter().any(|e| home_entry(&e.value).as_deref() == Some(rel.as_path()))
        || dirs.iter().any(|d| file.starts_with(d) && &file != d);
    if !listed {
        return Err(entry_err("agent.merge", &m.file, "must be one of the profile's home.write files, or inside one"));
    }
    for k in &m.keys {
        check_key(k)?;
    }
    let mut bound = false;
    for mount in b.mounts.iter_mut() {
        if let MountSpec::Bind { source, target, rw: true, .. } = mount {
            if *target == file {
                *source = copy.to_path_buf();
                bound = true;
            }
        }
    }
    let mut later = None;
    if !bound {
        // Inside one of the agent's directories: the file must exist as the copy's mount point.
        if b.fs.kind(&file).is_none() && !b.home_files.contains(&file) {
            b.home_files.push(file.clone());
        }
        later = Some(MountSpec::Bind { source: copy.to_path_buf(), target: file.clone(), rw: true, dir: false });
    }
    let merge = MergeBack { file, copy: copy.to_path_buf(), keys: m.keys.clone(), strip: strip.to_vec() };
    Ok(Some((merge, later)))
}

/// Writes the listed keys of `copy` (what the agent left in its session copy) into `real`
/// (your file as it is now), and nothing else: a key the copy does not have is left as it is
/// in `real`. `*` in a key path is any key at its level (`projects.*.lastCost`);
/// `name[field=value]` takes only an object whose `field` is that string. Both must be JSON
/// objects.
pub fn merge_keys(real: &mut serde_json::Value, copy: &serde_json::Value, keys: &[String]) {
    for k in keys {
        let path: Vec<&str> = k.split('.').collect();
        merge_path(real, copy, &path);
    }
}

fn merge_path(real: &mut serde_json::Value, copy: &serde_json::Value, path: &[&str]) {
    let (Some((first, rest)), Some(from)) = (path.split_first(), copy.as_object()) else { return };
    let Some(into) = real.as_object_mut() else { return };
    // `name[field=value]`: only an object whose field holds that string, in the copy and in
    // your file if it has one of that name (`anthropic[type=oauth]`: a login, which never
    // replaces an entry of another type, whose key could be a command).
    let (first, only) = match first.strip_suffix(']').and_then(|f| f.split_once('[')) {
        Some((name, cond)) => (name, cond.split_once('=')),
        None => (*first, None),
    };
    let names: Vec<&String> = match first {
        "*" => from.keys().collect(),
        name => from.keys().filter(|k| k.as_str() == name).collect(),
    };
    let holds =
        |v: &serde_json::Value, (field, want): (&str, &str)| v.get(field).and_then(|v| v.as_str()) == Some(want);
    for name in names {
        let value = &from[name.as_str()];
        if let Some(cond) = only {
            if !holds(value, cond) || into.get(name.as_str()).is_some_and(|mine| !holds(mine, cond)) {
                continue;
            }
        }
        if rest.is_empty() {
            into.insert(name.clone(), value.clone());
        } else if value.is_object() {
            // A new entry starts as what its condition says, and is kept only if a listed
            // field of it came back.
            let fresh = match only {
                Some((field, want)) => serde_json::json!({ field: want }),
                None => serde_json::json!({}),
            };
            let had = into.contains_key(name.as_str());
            let mut slot = into.get(name.as_str()).cloned().unwrap_or_else(|| fresh.clone());
            if !slot.is_object() {
                continue;
            }
            merge_path(&mut slot, value, rest);
            if had || slot != fresh {
                into.insert(name.clone(), slot);
            }
        }
    }
}

/// A merged key names what goes back field by field: a condition (`name[type=oauth]`)
/// selects an object whose fields are then listed, never the whole object, which could hold
/// a host or a command.
fn check_key(k: &str) -> Result<(), PlanError> {
    if k.is_empty() || k.split('.').any(str::is_empty) {
        return Err(entry_err("agent.merge", k, "a key is a dotted path of names (`projects.*.lastCost`)"));
    }
    if k.rsplit('.').next().is_some_and(|last| last.ends_with(']')) {
        return Err(entry_err(
            "agent.merge",
            k,
            "a condition selects an object whose fields are then listed (`anthropic[type=oauth].refresh`), never the whole object",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_listed_keys_go_back_and_nothing_that_names_a_command() {
        let mut real = json!({"numStartups": 3, "projects": {"/p": {"lastCost": 1}}, "theme": "dark"});
        let copy = json!({
            "numStartups": 4,
            "mcpServers": {"evil": {"command": "sh", "args": ["-c", "touch /tmp/pwned"]}},
            "projects": {
                "/p": {"lastCost": 2, "mcpServers": {"x": {"command": "sh"}}, "allowedTools": ["Bash(*)"]},
                "/q": {"lastCost": 5, "hasTrustDialogAccepted": true}
            },
            "theme": "light"
        });
        merge_keys(&mut real, &copy, &["numStartups".into(), "projects.*.lastCost".into()]);
        assert_eq!(
            real,
            json!({"numStartups": 4, "projects": {"/p": {"lastCost": 2}, "/q": {"lastCost": 5}}, "theme": "dark"})
        );
    }

    #[test]
    fn a_key_of_another_shape_in_the_copy_or_the_file_is_left_alone() {
        let mut real = json!({"projects": "not an object", "a": 1});
        let copy = json!({"projects": {"/p": {"lastCost": 2}}, "a": {"nested": true}});
        merge_keys(&mut real, &copy, &["projects.*.lastCost".into(), "a".into()]);
        assert_eq!(real, json!({"projects": "not an object", "a": {"nested": true}}));
        let mut real = json!({"x": 1});
        merge_keys(&mut real, &json!([1, 2]), &["x".into()]);
        assert_eq!(real, json!({"x": 1}));
    }

    /// pi's auth.json (issue 32, F3): only the listed token fields of a login go back, never
    /// a field that names a host (`enterpriseUrl`), never a whole object; a login never
    /// replaces your entry of another type (an api_key entry, whose key may be a
    /// `!command`); a new login is kept only if a listed field came back.
    #[test]
    fn only_the_listed_fields_of_a_login_go_back_and_never_over_another_type() {
        let mut real = json!({
            "anthropic": {"type": "api_key", "key": "sk-mine"},
            "openai-codex": {"type": "oauth", "access": "old", "refresh": "r0", "expires": 1}
        });
        let copy = json!({
            "anthropic": {"type": "oauth", "access": "x", "refresh": "y", "expires": 1},
            "openai-codex": {"type": "oauth", "access": "new", "refresh": "r1", "expires": 2,
                             "enterpriseUrl": "attacker.example", "baseUrl": "http://attacker"},
            "github-copilot": {"type": "oauth", "refresh": "ghu_ATTACKER", "enterpriseUrl": "attacker.example"},
            "x": "not an object"
        });
        let keys: Vec<String> = ["anthropic", "openai-codex"]
            .iter()
            .flat_map(|p| ["access", "refresh", "expires"].map(|f| format!("{p}[type=oauth].{f}")))
            .collect();
        merge_keys(&mut real, &copy, &keys);
        assert_eq!(
            real,
            json!({"anthropic": {"type": "api_key", "key": "sk-mine"},
                   "openai-codex": {"type": "oauth", "access": "new", "refresh": "r1", "expires": 2}})
        );
        // A new login: its listed fields, nothing else; one with none of them is not made.
        let mut real = json!({});
        let copy = json!({"openai-codex": {"type": "oauth", "refresh": "r", "proxy": "p"},
                          "anthropic": {"type": "oauth", "enterpriseUrl": "e"}});
        merge_keys(&mut real, &copy, &keys);
        assert_eq!(real, json!({"openai-codex": {"type": "oauth", "refresh": "r"}}));
        // A whole object behind a condition is refused in a profile.
        assert!(check_key("*[type=oauth]").is_err() && check_key("anthropic[type=oauth].refresh").is_ok());
    }

    #[test]
    fn patterns_match_component_by_component() {
        let p = Patterns::of(Some(&vec![".codex/*.sqlite*".into(), ".pi/agent/sessions/".into()]), "k").unwrap();
        let r = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
        assert!(p.matches(&r(".codex/state_5.sqlite-wal")));
        assert!(!p.matches(&r(".codex/config.toml")));
        assert!(p.matches(&r(".pi/agent/sessions")));
        assert!(p.below(&r(".pi/agent")) && p.below(&r(".pi")));
        assert!(!p.below(&r(".pi/agent/sessions")));
        assert!(Patterns::of(Some(&vec!["../x".into()]), "agent.state").is_err());
    }
}
