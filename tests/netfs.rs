//! A home and project on a network filesystem. slowfs (tools/slowfs: a FUSE passthrough
//! that waits before each metadata request and counts them, the stand-in for NFS, Lustre or
//! GPFS that benches/netfs.sh measures with) serves a home of the test's own, shown at the
//! test user's home in a private mount namespace: the shared test home is not touched.
//! tests/run.sh builds slowfs (`cargo build -p slowfs`) next to the launcher.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// Metadata requests a second `run` of a short command may make on the home and project
/// trees (one slowfs mount here, 1 s attribute cache): 149 measured with the userns backend,
/// 387 with Landlock (its link directory of the stubs is made again each session: 50
/// symlinks and 51 unlinks). A tree walk, or a stat per entry of the home, would pass these.
const MAX_USERNS_REQUESTS: u64 = 200;
const MAX_LANDLOCK_REQUESTS: u64 = 480;

fn slowfs(rig: &Rig) -> PathBuf {
    let p = rig.bin.with_file_name("slowfs");
    assert!(p.exists(), "{} is missing; fix: `cargo build -p slowfs` (tests/run.sh does)", p.display());
    p
}

#[test]
fn a_session_on_a_network_home_starts_writes_its_project_and_still_hides_the_users_secrets() {
    let Some(j) = Jail::new("netfs") else { return };
    let hidden = ["ssh-key-unreadable", "aws-unreadable", "ssh-key-absent", "aws-absent"];
    on_slowfs(j, "netfs-userns", &hidden, MAX_USERNS_REQUESTS);
}

/// The same with the Landlock backend: its rules are laid on the FUSE mount's files.
#[test]
fn a_landlock_session_on_a_network_home_writes_its_project_and_hides_the_users_secrets() {
    let Some(j) = Jail::new("netfs-ll") else { return };
    // Landlock denies reading the files; it cannot hide that they exist.
    let hidden = ["ssh-key-unreadable", "aws-unreadable"];
    on_slowfs(j.arg("--backend").arg("landlock"), "netfs-landlock", &hidden, MAX_LANDLOCK_REQUESTS);
}

fn on_slowfs(j: Jail, name: &str, hidden: &[&str], max_requests: u64) {
    let base = PathBuf::from("/var/tmp/asb-netfs-test").join(name);
    let _ = std::fs::remove_dir_all(&base);
    let home = base.join("home");
    let project_rel = "t/netfs";
    for d in [home.join(project_rel), home.join(".ssh"), home.join(".aws")] {
        std::fs::create_dir_all(&d).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), SSH_CANARY).unwrap();
    std::fs::write(home.join(".aws/credentials"), AWS_CANARY).unwrap();
    std::fs::write(home.join(".gitconfig"), "[user]\n\tname = Test\n").unwrap();
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
    let stats = base.join("stats");
    let shown = j.rig.home.display().to_string();
    // slowfs over the test's home, at the user's home path. A first session makes the state
    // directory (the stubs' links...) once for all; the counters are zeroed before the second
    // and written when it has ended (SIGTERM: written, then unmounted).
    let setup = format!(
        r#"{slowfs} {backing} {shown} --delay-us 1000 --ttl-ms 1000 --stats {stats} </dev/null >/dev/null 2>&1 &
pid=$!
i=0
until grep -q " {shown} .* - fuse slowfs " /proc/self/mountinfo; do
  i=$((i + 1)); [ "$i" -lt 1000 ] || {{ echo "slowfs did not mount" >&2; exit 97; }}; sleep 0.01
done
cd {shown}/{project_rel} && "$@" >/dev/null 2>&1 && sleep 0.3 && kill -USR2 "$pid" && sleep 0.1 && "$@"
rc=$?
kill -TERM "$pid"; wait "$pid"
exit "$rc""#,
        slowfs = slowfs(j.rig).display(),
        backing = home.display(),
        stats = stats.display(),
    );
    let wrapper = ["unshare", "-m", "--propagation", "private", "sh", "-c", &setup, "sh"];
    let script = "grep -q ' - fuse slowfs ' /proc/self/mountinfo && echo project-on-slowfs; \
                  echo written > note.txt && echo wrote; \
                  cat ~/.ssh/id_ed25519 2>/dev/null || echo ssh-key-unreadable; \
                  cat ~/.aws/credentials 2>/dev/null || echo aws-unreadable; \
                  test -e ~/.ssh/id_ed25519 || echo ssh-key-absent; test -e ~/.aws/credentials || echo aws-absent";
    let mut c = j.command_wrapped(&wrapper, &["-q", "run", "--", "sh", "-c", script]);
    c.current_dir("/");
    let out = j.output(&mut c);
    assert_eq!(out.code, 0, "{out}");
    for want in ["project-on-slowfs", "wrote"].iter().chain(hidden) {
        assert!(out.stdout.contains(want), "{want} missing:\n{out}");
    }
    assert!(!out.both().contains(SSH_CANARY) && !out.both().contains(AWS_CANARY), "{out}");
    let note = std::fs::read_to_string(home.join(project_rel).join("note.txt")).unwrap_or_default();
    assert_eq!(note, "written\n", "the project's file, seen on the host's disk behind slowfs");
    let counts = std::fs::read_to_string(&stats).unwrap();
    let metadata: u64 = counts
        .lines()
        .find_map(|l| l.strip_prefix("metadata "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metadata count in {counts}"));
    eprintln!("slowfs counts of the session:\n{counts}");
    assert!(
        metadata <= max_requests,
        "the session made {metadata} metadata requests on its home and project (at most \
         {max_requests}): each is a network round trip on NFS\n{counts}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
