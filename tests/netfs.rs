//! A home and project on a network filesystem. slowfs (tools/slowfs: a FUSE passthrough
//! that waits before each metadata request and counts them, the stand-in for NFS, Lustre or
//! GPFS that benches/netfs.sh measures with) serves a home of the test's own, shown at the
//! test user's home in a private mount namespace: the shared test home is not touched.
//! tests/run.sh builds slowfs (`cargo build -p slowfs`) next to the launcher. Without
//! /dev/fuse or fusermount3 the tests fail, naming the fix: they never skip.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Metadata requests a `run -- true` may make on the home and project trees once a first
/// session has made the state directory, with the kernel's 1 s attribute and entry cache
/// expired since (sessions minutes apart), the waiter's removals after it included. In this
/// test's project (10 directories of 30 files and two subdirectories each, 600 files):
/// measured 169 with userns (562 while the walk for nested repositories looked up each entry
/// of the directories one level down and the exit check of links walked the whole project)
/// and 551 with Landlock (879 then: it has no guard to list the links made, so its exit check
/// still walks, and its session directory, 50 stub links, is made and removed in the home
/// without `$XDG_RUNTIME_DIR`). Stop 47: 185 and 568 (a readdir at the end, which NFS does not
/// send, is no longer counted; the listings of `~/.local`, `~/.local/share`, `~/.local/state`
/// and `.git` are new, and work that now runs side by side looks up a name at the same time
/// more than once), in a start that takes less than half the time: the requests overlap.
/// docs/performance.md, "Network filesystems".
const MAX_USERNS_REQUESTS: u64 = 200;
const MAX_LANDLOCK_REQUESTS: u64 = 600;
const HOME_ENTRIES: usize = 80;
const PROJECT_FILES: usize = 300;
const PROJECT_DIRS: usize = 10;

/// slowfs, and what mounting it needs; missing ones fail the test with the fix.
fn slowfs(rig: &Rig) -> PathBuf {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: tests/netfs.rs mounts a FUSE filesystem and does not skip; fix: `modprobe fuse` \
         (a container needs `--device /dev/fuse`)"
    );
    let fusermount = std::process::Command::new("sh").args(["-c", "command -v fusermount3"]).output();
    assert!(
        fusermount.is_ok_and(|o| o.status.success()),
        "fusermount3 is missing: slowfs mounts through it; fix: `apt-get install fuse3` (tests/run.sh does)"
    );
    let p = rig.bin.with_file_name("slowfs");
    assert!(p.exists(), "{} is missing; fix: `cargo build -p slowfs` (tests/run.sh does)", p.display());
    p
}

#[test]
fn a_session_on_a_network_home_starts_writes_its_project_and_still_hides_the_users_secrets() {
    let Some(j) = Jail::new("netfs") else { return };
    let hidden = ["ssh-key-unreadable", "aws-unreadable", "ssh-key-absent", "aws-absent"];
    on_slowfs(j, "netfs-userns", &hidden, true, MAX_USERNS_REQUESTS);
}

/// The same with the Landlock backend: its rules are laid on the FUSE mount's files. It has
/// no git guard (docs/security-model.md): git works, and nothing more is asked of it.
#[test]
fn a_landlock_session_on_a_network_home_writes_its_project_and_hides_the_users_secrets() {
    let Some(j) = Jail::new("netfs-ll") else { return };
    // Landlock denies reading the files; it cannot hide that they exist.
    let hidden = ["ssh-key-unreadable", "aws-unreadable"];
    on_slowfs(j.arg("--backend").arg("landlock"), "netfs-landlock", &hidden, false, MAX_LANDLOCK_REQUESTS);
}

/// What the session does on the network project: the checks of the secrets, a write, and the
/// git guard's work (a nested repository made and committed to; its config's command and a
/// hook refused, as on a local disk). Each check prints a word the test looks for.
const SCRIPT: &str = r#"grep -q ' - fuse slowfs ' /proc/self/mountinfo && echo project-on-slowfs
echo written > note.txt && echo wrote
cat ~/.ssh/id_ed25519 2>/dev/null || echo ssh-key-unreadable
cat ~/.aws/credentials 2>/dev/null || echo aws-unreadable
test -e ~/.ssh/id_ed25519 || echo ssh-key-absent; test -e ~/.aws/credentials || echo aws-absent
g() { git -c user.name=a -c user.email=a@example.org -c init.defaultBranch=main "$@"; }
g init -q sub && echo x > sub/f && g -C sub add f && g -C sub commit -qm x && echo git-committed
g -C sub config core.fsmonitor "touch /tmp/asb-netfs-pwned" 2>/dev/null || echo fsmonitor-refused
printf '#!/bin/sh\ntouch /tmp/asb-netfs-pwned\n' > sub/.git/hooks/pre-commit 2>/dev/null || echo hook-refused
"#;

/// The network home's backing tree for test `name`: a home with an ssh key, cloud
/// credentials, a git config, many entries, and a project of many files, all the test user's.
/// Its base directory, the home and the project.
fn network_home(j: &Jail, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let base = PathBuf::from("/var/tmp/asb-netfs-test").join(name);
    let _ = std::fs::remove_dir_all(&base);
    let home = base.join("home");
    let project = home.join(PROJECT_REL);
    for d in [project.clone(), home.join(".ssh"), home.join(".aws")] {
        std::fs::create_dir_all(&d).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), SSH_CANARY).unwrap();
    std::fs::write(home.join(".aws/credentials"), AWS_CANARY).unwrap();
    std::fs::write(home.join(".gitconfig"), "[user]\n\tname = Test\n").unwrap();
    // Enough entries that a stat of each in the home, or a walk of the project, breaks the
    // bound on requests.
    for i in 0..HOME_ENTRIES {
        std::fs::write(home.join(format!("notes-{i}.txt")), "n\n").unwrap();
    }
    // A project as researchers' are: directories of files, one level below it a few (which
    // the walk for nested repositories lists) and deeper ones. A lookup of each file, or a
    // walk of the whole tree at exit, breaks the bound.
    for i in 0..PROJECT_FILES {
        let dir = project.join(format!("mod{}/deep{}", i % PROJECT_DIRS, i % 2));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}.c")), "int x;\n").unwrap();
        std::fs::write(project.join(format!("mod{}/g{i}.c", i % PROJECT_DIRS)), "int y;\n").unwrap();
    }
    for d in [base.parent().unwrap(), &base] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let st = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", j.rig.uid, j.rig.gid))
        .arg(&home)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o750)).unwrap();
    (base, home, project)
}

/// The project's path in the home.
const PROJECT_REL: &str = "t/netfs";

/// slowfs's count of metadata requests in its `--stats` file.
fn metadata_requests(counts: &str) -> u64 {
    counts
        .lines()
        .find_map(|l| l.strip_prefix("metadata "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metadata count in {counts}"))
}

fn on_slowfs(j: Jail, name: &str, hidden: &[&str], guarded: bool, max_requests: u64) {
    let slowfs = slowfs(j.rig);
    let (base, home, project) = network_home(&j, name);
    let project_rel = PROJECT_REL;
    let stats = base.join("stats");
    let shown = j.rig.home.display().to_string();
    // slowfs over the test's home, at the user's home path. A first `run -- true` makes the
    // state directory (the stubs' links...) once for all; the counters are zeroed once the
    // cache of what it looked up has expired, and written half a second after the second
    // ended (the waiter's removals of its placeholders included). Then the session of
    // SCRIPT, whose output the test reads.
    // "$@" is the launcher's command line up to `run` and the script after it.
    let setup = format!(
        r#"{slowfs} {backing} {shown} --delay-us 1000 --ttl-ms 1000 --stats {stats} </dev/null >/dev/null 2>&1 &
pid=$!
i=0
until grep -q " {shown} .* - fuse slowfs " /proc/self/mountinfo; do
  i=$((i + 1)); [ "$i" -lt 1000 ] || {{ echo "slowfs did not mount" >&2; exit 97; }}; sleep 0.01
done
args=("$@")
for i in "${{!args[@]}}"; do [ "${{args[$i]}}" = run ] && break; done
launcher=("${{args[@]:0:$i}}")
cd {shown}/{project_rel} || exit 98
"${{launcher[@]}}" run -- true >/dev/null 2>&1
sleep 1.2; kill -USR2 "$pid"; sleep 0.1
"${{launcher[@]}}" run -- true
echo "true-exit=$?"
sleep 0.5; kill -USR1 "$pid"; sleep 0.1; mv {stats} {stats}.true
"$@"
rc=$?
kill -TERM "$pid"; wait "$pid"
exit "$rc""#,
        slowfs = slowfs.display(),
        backing = home.display(),
        stats = stats.display(),
    );
    let wrapper = ["unshare", "-m", "--propagation", "private", "bash", "-c", &setup, "bash"];
    let mut c = j.command_wrapped(&wrapper, &["-q", "run", "--", "sh", "-c", SCRIPT]);
    c.current_dir("/");
    let out = j.output(&mut c);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("true-exit=0"), "`run -- true` failed on the network home: {out}");
    let guard: &[&str] = if guarded { &["fsmonitor-refused", "hook-refused"] } else { &[] };
    for want in ["project-on-slowfs", "wrote", "git-committed"].iter().chain(hidden).chain(guard) {
        assert!(out.stdout.contains(want), "{want} missing:\n{out}");
    }
    assert!(!out.both().contains(SSH_CANARY) && !out.both().contains(AWS_CANARY), "{out}");
    let note = std::fs::read_to_string(project.join("note.txt")).unwrap_or_default();
    assert_eq!(note, "written\n", "the project's file, seen on the host's disk behind slowfs");
    // Behind slowfs, on the disk: the repository's config has no command, and no hook is there.
    if guarded {
        let config = std::fs::read_to_string(project.join("sub/.git/config")).unwrap_or_default();
        assert!(config.contains("[core]") && !config.contains("fsmonitor"), "{config}\n{out}");
        assert!(!project.join("sub/.git/hooks/pre-commit").exists(), "a hook was planted: {out}");
    }
    let counts = std::fs::read_to_string(stats.with_extension("true"))
        .unwrap_or_else(|e| panic!("slowfs wrote no counts of `run -- true`: {e}\n{out}"));
    let metadata = metadata_requests(&counts);
    eprintln!("slowfs counts of `run -- true` ({metadata} metadata requests):\n{counts}");
    // Each audit record reaches the server before the log's lock is let go (a writer on
    // another node appends after it, not over it): the session's start and end, at least.
    let fsyncs: u64 = counts.lines().find_map(|l| l.strip_prefix("fsync ")?.trim().parse().ok()).unwrap_or(0);
    assert!(fsyncs >= 2, "the audit records were not flushed to the server ({fsyncs} fsync)\n{counts}");
    assert!(
        metadata <= max_requests,
        "`run -- true` made {metadata} metadata requests on its home and project (at most {max_requests}): each \
         is a network round trip on NFS\n{counts}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
