//! Everyday work (issue 31): what coding agents do all day (tests/everyday/cases/*.sh: git,
//! venvs, pip, npm, make, pytest, archives, rg, jq), run as the test user unsandboxed and
//! inside the default jail, with the same exit code and output required. A refusal a user
//! meets in ordinary work is a defect: each one found becomes a case.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::path::{Path, PathBuf};

/// One task of the corpus.
struct Case {
    name: String,
    /// Reaches the test hosts (`# needs: net`).
    net: bool,
    /// Launcher arguments for the jailed run (`# jail: ...`).
    jail_args: Vec<String>,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/everyday")
}

fn cases() -> Vec<Case> {
    let mut v: Vec<Case> = std::fs::read_dir(corpus().join("cases"))
        .expect("tests/everyday/cases")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sh"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("case");
            let header =
                |key: &str| text.lines().find_map(|l| l.strip_prefix(&format!("# {key}: ")).map(str::to_string));
            Case {
                name: p.file_stem().expect("name").to_string_lossy().into_owned(),
                net: header("needs").is_some_and(|n| n.split_whitespace().any(|w| w == "net")),
                jail_args: header("jail").map(|a| a.split_whitespace().map(String::from).collect()).unwrap_or_default(),
            }
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(v.len() >= 14, "the corpus lost cases: {}", v.len());
    v
}

/// Copies `from` into `to` as the test user's files.
fn copy_tree(j: &Jail, from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    j.give(&[to]);
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(j, &e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("copy");
            j.give(&[&dst]);
        }
    }
}

/// A directory of test projects, one per case.
fn project(name: &str) -> Option<Jail> {
    let j = Jail::new(name)?;
    Some(
        j.env("NET", "198.51.100.2")
            .env("LC_ALL", "C.UTF-8")
            .env("GIT_AUTHOR_NAME", "Agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.org")
            .env("GIT_COMMITTER_NAME", "Agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.org"),
    )
}

/// The case's exit code and output, its directory written `<W>`. The case's directory is the
/// project (the launcher takes the working directory's), holding the script and the
/// fixtures under hidden names.
fn run_case(j: &Jail, case: &Case, jailed: Option<&[&str]>) -> (i32, String) {
    let dir = j.project.join(&case.name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    j.give(&[&dir]);
    copy_tree(j, &corpus().join("fixtures"), &dir.join(".fixtures"));
    let script = dir.join(".case.sh");
    std::fs::copy(corpus().join("cases").join(format!("{}.sh", case.name)), &script).expect("copy case");
    j.give(&[&script]);
    let script = script.to_str().expect("utf-8");
    let mut c = match jailed {
        None => {
            let mut c = j.as_user("sh");
            c.args(["-eu", script]);
            c
        }
        Some(extra) => {
            let mut args: Vec<&str> = vec!["-q"];
            args.extend(extra);
            args.extend(case.jail_args.iter().map(String::as_str));
            args.extend(["run", "--", "sh", "-eu", script]);
            j.command(&args)
        }
    };
    c.current_dir(&dir).env("FIX", dir.join(".fixtures"));
    let out = j.output_within(&mut c, std::time::Duration::from_secs(180));
    let shown =
        format!("{}{}", out.stdout, if out.code == 0 { String::new() } else { format!("\n[stderr]\n{}", out.stderr) });
    (out.code, shown.replace(dir.to_str().expect("utf-8"), "<W>"))
}

/// Runs every case unsandboxed and in the jail (launcher arguments `extra`), and lists each
/// whose exit code or output differ, or that failed outside.
fn compare(name: &str, extra: &[&str], with_net: bool) -> Vec<String> {
    if with_net {
        let _ = nethost::hosts();
    }
    let (Some(outside), Some(inside)) = (project(&format!("{name}-outside")), project(&format!("{name}-inside")))
    else {
        return vec![];
    };
    let mut failed = vec![];
    for case in cases().iter().filter(|c| with_net || !c.net) {
        let (code_out, out) = run_case(&outside, case, None);
        let (code_in, inn) = run_case(&inside, case, Some(extra));
        if code_out != 0 {
            failed.push(format!("{}: fails even outside the jail (exit {code_out}):\n{out}", case.name));
        } else if (code_out, &out) != (code_in, &inn) {
            failed.push(format!(
                "{}: outside exit {code_out}:\n{out}\n--- inside the jail exit {code_in}:\n{inn}",
                case.name
            ));
        }
    }
    failed
}

#[test]
fn everyday_work_gives_the_same_results_inside_the_default_jail_as_outside() {
    // The user has used npm before: ~/.npm exists (its cache and logs), as on every machine
    // where npm ran once.
    if let Some(r) = rig() {
        let npm = r.home.join(".npm/_logs");
        std::fs::create_dir_all(&npm).expect("mkdir ~/.npm");
        for p in [r.home.join(".npm"), npm] {
            std::os::unix::fs::chown(&p, Some(r.uid), Some(r.gid)).expect("chown");
        }
    }
    let failed = compare("everyday", &[], true);
    assert!(failed.is_empty(), "{} case(s) differ:\n\n{}", failed.len(), failed.join("\n\n"));
}

#[test]
fn everyday_work_gives_the_same_results_under_the_landlock_backend() {
    // No network there by default (`isolated`): the local cases only.
    let failed = compare("everyday-landlock", &["--backend", "landlock"], false);
    assert!(failed.is_empty(), "{} case(s) differ:\n\n{}", failed.len(), failed.join("\n\n"));
}
