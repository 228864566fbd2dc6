//! The scope record (which jobs a session or project may see) is a file in the user's state
//! directory: whatever it holds, reading it gives a list of jobs, never a panic.
#![no_main]
use chaperon::scope::{Entry, Registry, Scope};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile_dir() else { return };
    let reg = Registry::new(&dir);
    let project = Path::new("/p");
    let seed = Entry { job: 1, session: "s".into(), project: project.into(), cluster: Some("c".into()), dir: None };
    if reg.add(&seed).is_err() {
        return;
    }
    // The file the registry made for the project: overwritten with the input.
    let Some(file) = walk(&dir) else { return };
    if std::fs::write(&file, data).is_err() {
        return;
    }
    let _ = reg.jobs(Scope::Project, "s", project, Some("c"));
    let _ = reg.live_jobs(Scope::Session, "s", project, None);
    let _ = reg.live_jobs_on(project, "c");
    let _ = std::fs::remove_dir_all(&dir);
});

fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("asb-fuzz-scope-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn walk(dir: &Path) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(f) = walk(&p) {
                return Some(f);
            }
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            return Some(p);
        }
    }
    None
}
