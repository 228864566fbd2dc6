//! The credential catalogue in a plan: which stores this session hides (into
//! `Hidden::stores`), which the policy or the profile shows, and how the user's git configs
//! are shown without their credentials (userns: a stripped copy over each file the jail shows;
//! Landlock: the files left out of the rules, git pointed at one stripped copy).

use super::catalogue::{self, Context, CredentialsPlan, Named};
use super::gitstrip::{self, Outcome};
use super::*;

/// How the user's git configs are shown.
#[derive(Debug, Default)]
pub(super) struct GitView {
    /// userns: the files shown with entries left out, and their text.
    pub stripped: Vec<(PathBuf, String)>,
    /// Landlock: the global config git reads instead (`GIT_CONFIG_GLOBAL`), where one of the
    /// user's had something left out.
    pub landlock_global: Option<String>,
}

/// The file git is pointed at under the Landlock backend, in the session directory.
pub(super) const LANDLOCK_GITCONFIG: &str = "gitconfig";

/// Decides the catalogue's part of the plan and puts the stores to hide into `base.hidden`.
pub(super) fn decide(
    policy: &Policy,
    facts: &HostFacts,
    fs: &dyn HostFs,
    base: &mut Base,
) -> Result<(CredentialsPlan, GitView), PlanError> {
    let stores = catalogue::CATALOGUE;
    let ctx = Context {
        home: &base.home,
        home_as_named: &facts.home,
        uid: facts.uid,
        user: &facts.user,
        env: &facts.env,
        configs: &facts.user_configs,
    };
    let located = catalogue::locate(stores, &ctx, fs);
    let agent = policy.agent.as_ref().map(|a| match &a.value.name {
        Some(n) => n.as_str(),
        None => match &a.source {
            crate::policy::merge::Source::Profile(p) => p.as_str(),
            _ => "",
        },
    });
    let kept_outside = !base.net.credentials.is_empty();
    let named = named(policy, &base.home);
    let mut plan = catalogue::decide(stores, located, &named, &base.home, &base.project, agent, kept_outside);
    base.hidden.add_stores(plan.hidden.iter().map(|l| l.path.clone()));
    linked_stores(policy, fs, &named, base, &mut plan);
    // A store below a link (`~/.local -> /scratch/u/local` holds `~/.local/share/keyrings`)
    // is hidden where it really is too, where a jail granted that tree would reach it.
    // Only a store with a link among its directories is looked up: their kinds are asked once
    // each (cached), the stores' own never (a catalogue has many paths, a user few of them).
    let mut linked = std::collections::HashMap::new();
    let real: Vec<PathBuf> = base
        .hidden
        .stores()
        .iter()
        .filter(|s| s.parent().is_some_and(|d| link_on_way(fs, d, &mut linked)) && fs.kind(s).is_some())
        .map(|s| fs::real_path(fs, s))
        .filter(|r| !base.hidden.covers(r))
        .collect();
    base.hidden.add_stores(real);
    let view = git_view(facts, base, &mut plan);
    Ok((plan, view))
}

/// What the catalogue hides from this user outside any session (`agent-sandbox doctor`): the
/// policy without a profile or project, nothing injected; which git config entries every
/// session leaves out.
pub fn report(policy: &Policy, facts: &HostFacts, fs: &dyn HostFs) -> Result<CredentialsPlan, PlanError> {
    let stores = catalogue::CATALOGUE;
    let home = facts.home_canonical.clone();
    let ctx = Context {
        home: &home,
        home_as_named: &facts.home,
        uid: facts.uid,
        user: &facts.user,
        env: &facts.env,
        configs: &facts.user_configs,
    };
    let located = catalogue::locate(stores, &ctx, fs);
    let mut plan = catalogue::decide(stores, located, &named(policy, &home), &home, &home, None, false);
    let mut hidden = Hidden::default();
    hidden.add_stores(plan.hidden.iter().map(|l| l.path.clone()));
    for h in &policy.hide {
        hidden.paths.push(expand_tilde(&h.value, &home));
    }
    for f in &facts.user_configs.git {
        if let Outcome::Stripped { dropped, .. } = gitstrip::strip(f, &home, &|p: &Path| hidden.covers(p)) {
            plan.stripped.push((f.path.clone(), dropped));
        }
    }
    Ok(plan)
}

/// A store that is a symbolic link (`~/.npmrc -> dotfiles/npmrc`, as dotfile managers make
/// them) is hidden where it leads too, or the jail reads it there. Looked at only where the
/// plan looks anyway: the whole home in `read` and `write` modes, else below a listed entry.
fn linked_stores(policy: &Policy, fs: &dyn HostFs, listed: &Named, base: &mut Base, plan: &mut CredentialsPlan) {
    let whole_home = matches!(policy.home_access.value, HomeAccess::Read | HomeAccess::Write);
    // The stores below a listed entry: one range of the sorted stores per entry.
    let mut below: Vec<&Path> =
        listed.entries.iter().flat_map(|(_, _, e)| base.hidden.stores_below(e)).map(PathBuf::as_path).collect();
    below.sort_unstable();
    let mut found = vec![];
    for l in &plan.hidden {
        let looked_at =
            (whole_home && fs::under(&l.path, &base.home)) || below.binary_search(&l.path.as_path()).is_ok();
        if !looked_at || fs.kind(&l.path) != Some(Kind::Symlink) {
            continue;
        }
        let Some(target) = fs.canonicalize(&l.path) else { continue };
        let tree = target.components().filter(|c| matches!(c, std::path::Component::Normal(_))).count() < 2;
        if tree || fs::under(&base.home, &target) || fs::under(&base.project, &target) || base.hidden.covers(&target) {
            continue;
        }
        let via = Some(format!("the link {}", tilde(&l.path, &base.home)));
        found.push(catalogue::Located { store: l.store, path: target, via });
    }
    base.hidden.add_stores(found.iter().map(|l| l.path.clone()));
    plan.hidden.extend(found);
}

/// Whether `dir` or a directory above it (not `/`) is a link, each directory asked once.
fn link_on_way(fs: &dyn HostFs, dir: &Path, seen: &mut std::collections::HashMap<PathBuf, bool>) -> bool {
    if dir.parent().is_none() {
        return false;
    }
    if let Some(l) = seen.get(dir) {
        return *l;
    }
    let l = fs.kind(dir) == Some(Kind::Symlink) || dir.parent().is_some_and(|p| link_on_way(fs, p, seen));
    seen.insert(dir.to_path_buf(), l);
    l
}

/// Every entry of the lists that bind a path: naming a store (or a path below one) there is
/// how a user shows it.
fn named(policy: &Policy, home: &Path) -> Named {
    let mut entries = vec![];
    for (key, list) in
        [("home.read", &policy.home_read), ("home.write", &policy.home_write), ("home.seed", &policy.home_seed)]
    {
        for e in list {
            if let Some(rel) = home_entry(&e.value) {
                entries.push((key, e.value.clone(), home.join(rel)));
            }
        }
    }
    for (key, list) in [("filesystem.read", &policy.fs_read), ("filesystem.write", &policy.fs_write)] {
        for e in list {
            let p = PathBuf::from(&e.value);
            if p.is_absolute() {
                entries.push((key, e.value.clone(), p));
            }
        }
    }
    Named::new(entries)
}

/// What the jail gets of each of the user's git configs. A file that cannot be read as git
/// reads it is withheld (hidden); under Landlock, which cannot put a copy over a file, every
/// file with something left out is hidden and git is pointed at one stripped copy of the
/// global files, whose includes of hidden files are left out (git stops on an include it
/// may not read).
fn git_view(facts: &HostFacts, base: &mut Base, plan: &mut CredentialsPlan) -> GitView {
    let files = &facts.user_configs.git;
    let home = base.home.clone();
    let outcomes = |hidden: &Hidden| -> Vec<Outcome> {
        files.iter().map(|f| gitstrip::strip(f, &home, &|p: &Path| hidden.covers(p))).collect()
    };
    let mut out = outcomes(&base.hidden);
    let landlock = base.backend == BackendKind::Landlock;
    if landlock && out.iter().any(|o| *o != Outcome::Unchanged) {
        // A file left out of the rules is an include git may not read: drop those includes too.
        let changed = files.iter().zip(&out).filter(|(_, o)| **o != Outcome::Unchanged);
        base.hidden.add_stores(changed.map(|(f, _)| f.path.clone()).collect::<Vec<_>>());
        out = outcomes(&base.hidden);
    }
    let mut view = GitView::default();
    for (f, o) in files.iter().zip(&out) {
        match o {
            Outcome::Unchanged => {}
            Outcome::Withheld { why } => {
                base.hidden.add_stores([f.path.clone()]);
                base.warnings.push(format!(
                    "{}: not shown inside ({why}): agent-sandbox cannot tell what in it carries a credential",
                    tilde(&f.path, &home)
                ));
            }
            Outcome::Stripped { text, dropped } => {
                plan.stripped.push((f.path.clone(), dropped.clone()));
                match landlock {
                    true => base.hidden.add_stores([f.path.clone()]),
                    false => view.stripped.push((f.path.clone(), text.clone())),
                }
            }
        }
    }
    if landlock && out.iter().any(|o| *o != Outcome::Unchanged) {
        view.landlock_global = Some(merged_global(files, &out, &home));
    }
    view
}

/// The global files git reads (not those they include) as one config, stripped, in git's order, their
/// include paths made absolute (the copy lives elsewhere).
fn merged_global(files: &[crate::host::GitConfigFile], out: &[Outcome], home: &Path) -> String {
    let mut entries = vec![];
    for (f, o) in files.iter().zip(out).filter(|(f, _)| f.role == crate::host::configs::GitRole::Global) {
        let text: &[u8] = match o {
            Outcome::Withheld { .. } => continue,
            Outcome::Stripped { text, .. } => text.as_bytes(),
            Outcome::Unchanged => f.bytes.as_deref().unwrap_or(b""),
        };
        let dir = f.path.parent().unwrap_or(Path::new("/"));
        for mut e in crate::gitconfig::parse(text).unwrap_or_default() {
            if e.key == "path" && matches!(e.section.as_str(), "include" | "includeif") {
                if let Some(v) = e.value.as_deref().and_then(|v| std::str::from_utf8(v).ok()) {
                    let abs = crate::host::configs::include_target(v, dir, home);
                    e.value = Some(abs.as_os_str().as_encoded_bytes().to_vec());
                }
            }
            entries.push(e);
        }
    }
    String::from_utf8(crate::gitconfig::write(&entries)).unwrap_or_default()
}

/// `~/x` for a path in the home, for messages.
fn tilde(p: &Path, home: &Path) -> String {
    match p.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => p.display().to_string(),
    }
}

/// Whether `p` is inside something the mount list binds from the host.
pub(super) fn shown(mounts: &[MountSpec], p: &Path) -> bool {
    mounts.iter().any(|m| match m {
        MountSpec::Bind { target, .. } | MountSpec::TreeBind { target, .. } | MountSpec::Overlay { target, .. } => {
            fs::under(p, target)
        }
        _ => false,
    })
}
