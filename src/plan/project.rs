//! Where a project may be and what extra paths may be named: the checks that refuse a
//! launch with the path and the fix.

use super::*;

/// The project checks that need no policy: run before any policy file is read, so a bad
/// project (`/`, `~`) is reported as such and not as a side effect elsewhere.
pub fn check_project_basics(facts: &HostFacts, fs: &dyn HostFs, asked: &Path) -> Result<PathBuf, PlanError> {
    project_basics(&facts.home_canonical, fs, asked)
}

/// `check_project_basics` for the user whose home is `home_canonical` (where it really is).
pub fn project_basics(home_canonical: &Path, fs: &dyn HostFs, asked: &Path) -> Result<PathBuf, PlanError> {
    let err = |why: &str, fix: &str| PlanError::Project { path: asked.to_path_buf(), why: why.into(), fix: fix.into() };
    let project =
        fs.canonicalize(asked).ok_or_else(|| err("it does not exist", "create it first, or pass --project DIR"))?;
    if fs.kind(&project) != Some(Kind::Dir) {
        return Err(err("it is not a directory", "pass --project DIR with a directory"));
    }
    if project == Path::new("/") {
        return Err(err(
            "`/` cannot be a project",
            "cd into your project (a directory under your home or scratch space)",
        ));
    }
    if home_canonical.starts_with(&project) {
        return Err(err(
            "it is your home directory or one of its parents; the whole home would become writable",
            "cd into a project directory under your home, e.g. ~/myproject",
        ));
    }
    Ok(project)
}

pub(super) fn check_project(
    policy: &Policy,
    facts: &HostFacts,
    fs: &dyn HostFs,
    asked: &Path,
) -> Result<PathBuf, PlanError> {
    let err = |why: &str, fix: &str| PlanError::Project { path: asked.to_path_buf(), why: why.into(), fix: fix.into() };
    let project = check_project_basics(facts, fs, asked)?;
    if let Some(exe_dir) = facts.exe.parent() {
        if project.starts_with(exe_dir) {
            return Err(err(
                "it is agent-sandbox's install directory",
                "run agent-sandbox from your project directory",
            ));
        }
    }
    // Most projects sit under a parent as written (~, /scratch): only canonicalize the
    // parents (a few syscalls each) when none matches literally.
    let literal: Vec<PathBuf> = policy.project_parents.iter().map(|p| expand_tilde(&p.value, &facts.home)).collect();
    let inside = |parents: &[PathBuf]| parents.iter().any(|p| project.starts_with(p) && &project != p);
    let canonical: Vec<PathBuf>;
    let parents = if inside(&literal) {
        &literal
    } else {
        canonical = literal.iter().map(|p| fs.canonicalize(p).unwrap_or_else(|| p.clone())).collect();
        &canonical
    };
    if !inside(parents) {
        let list: Vec<String> = parents.iter().map(|p| p.display().to_string()).collect();
        return Err(err(
            &format!("it is not under an allowed parent ({})", list.join(", ")),
            "move the project under one of those, or ask your admin to add its parent to sandbox.project_parents",
        ));
    }
    Ok(project)
}

/// Extra read/write paths: absolute, never `/`, never home or its parents, not inside home
/// (home entries go through `home.read`/`home.write`, which know the home modes).
pub(super) fn check_extra_path(key: &str, raw: &str, home: &Path, fs: &dyn HostFs) -> Result<PathBuf, PlanError> {
    if raw.starts_with('~') {
        return Err(entry_err(key, raw, "paths in your home belong in home.read or home.write"));
    }
    let p = fs::normalized(Path::new(raw));
    if !p.is_absolute() || p.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(entry_err(key, raw, "must be an absolute path without `..`"));
    }
    let resolved = fs.canonicalize(&p);
    let canon = resolved.clone().unwrap_or_else(|| p.clone());
    // A descriptor's name (`/dev/fd/7`, `/proc/self/fd/7`: a link of the launcher's /proc,
    // which the jail's does not have): the path it is open on, or a clear refusal.
    let real = fs::real_parents(fs, &p);
    let descriptor = real.starts_with("/proc") && fs.kind(&real) == Some(Kind::Symlink);
    let p = match descriptor {
        false => p,
        true if resolved.as_ref().is_some_and(|c| !c.starts_with("/proc") && fs.kind(c).is_some()) => canon.clone(),
        true => {
            return Err(entry_err(
                key,
                raw,
                "is a descriptor's name that is open on no path the jail could show (a pipe, a socket, a deleted \
                 file?); name the file or directory itself",
            ))
        }
    };
    for candidate in [&p, &canon] {
        if home.starts_with(candidate) {
            return Err(entry_err(
                key,
                raw,
                "would expose home directories (yours and other users'); list the subdirectory you need",
            ));
        }
        if candidate.starts_with(home) && descriptor {
            let rel = candidate.strip_prefix(home).unwrap_or(candidate);
            return Err(entry_err(
                key,
                raw,
                &format!("is a descriptor open on ~/{} inside your home; name that path instead", rel.display()),
            ));
        }
        if candidate.starts_with(home) {
            return Err(entry_err(
                key,
                raw,
                "is inside your home; use home.read / home.write (--ro/--rw accept it there)",
            ));
        }
    }
    Ok(p)
}
