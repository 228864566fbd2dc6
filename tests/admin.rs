//! The admin lock file, for real: the test (root) writes /etc/agent-sandbox/admin.toml and
//! the unprivileged user tries to widen past it. One test function: the file is global state.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const ETC: &str = "/etc/agent-sandbox";

/// Moves an existing /etc/agent-sandbox aside and puts it back, whatever happens.
struct EtcGuard {
    saved: Option<PathBuf>,
}

impl EtcGuard {
    fn take() -> EtcGuard {
        let saved = Path::new(ETC).exists().then(|| {
            let to = PathBuf::from(format!("{ETC}.test-saved-{}", std::process::id()));
            std::fs::rename(ETC, &to).expect("move /etc/agent-sandbox aside");
            to
        });
        std::fs::create_dir_all(ETC).expect("mkdir");
        std::fs::set_permissions(ETC, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        EtcGuard { saved }
    }
    fn write(&self, name: &str, text: &str, mode: u32) {
        let p = Path::new(ETC).join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

impl Drop for EtcGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(ETC);
        if let Some(s) = &self.saved {
            let _ = std::fs::rename(s, ETC);
        }
    }
}

const ADMIN: &str = r#"
[net]
mode = "isolated"

[home]
access = "restricted"

[filesystem]
hide = ["/opt"]
write = ["/var/tmp/asb-admin-allowed"]
deny_devices = ["/dev/kmsg"]

[env]
scrub = ["HARMLESS_*"]
"#;

#[test]
fn admin_locks_hold_against_every_user_layer() {
    let Some(j) = Jail::new("admin") else { return };
    let guard = EtcGuard::take();
    for d in ["/var/tmp/asb-admin-allowed", "/var/tmp/asb-admin-denied"] {
        std::fs::create_dir_all(d).unwrap();
        std::os::unix::fs::chown(d, Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    }
    guard.write("admin.toml", ADMIN, 0o644);
    let j = j
        .env("HARMLESS_X", "should-be-scrubbed")
        .env("AGENT_SANDBOX_ETC_DIR", "/nonexistent")
        .arg("--net")
        .arg("open")
        .arg("--home-access")
        .arg("write")
        .arg("--rw")
        .arg("/var/tmp/asb-admin-allowed")
        .arg("--rw")
        .arg("/var/tmp/asb-admin-denied")
        .arg("--device")
        .arg("/dev/kmsg");

    let show = j.output(&mut j.command(&["policy", "show"]));
    assert!(show.stdout.contains("net.mode") && show.stdout.contains("locked by admin"), "{show}");

    let out = j.run(
        "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '; \
         touch ~/x 2>/dev/null && echo HOME-WRITABLE; \
         ls /opt 2>/dev/null && echo OPT-VISIBLE; \
         env | grep HARMLESS_X; \
         test -e /dev/kmsg && echo KMSG-BOUND; \
         touch /var/tmp/asb-admin-allowed/f && echo ALLOWED-RW; \
         touch /var/tmp/asb-admin-denied/f 2>/dev/null && echo DENIED-RW; \
         echo end",
    );
    assert!(out.stdout.starts_with("lo\n"), "admin net.mode isolated must win over --net open: {out}");
    for bad in ["HOME-WRITABLE", "OPT-VISIBLE", "should-be-scrubbed", "KMSG-BOUND", "DENIED-RW"] {
        assert!(!out.stdout.contains(bad), "{bad}: {out}");
    }
    assert!(out.stdout.contains("ALLOWED-RW"), "{out}");
    assert!(out.stderr.contains("/var/tmp/asb-admin-denied") && out.stderr.contains("dropped"), "{out}");

    // An admin file others could write is not trusted: every launch refuses, naming it.
    guard.write("admin.toml", ADMIN, 0o666);
    let out = j.run("touch ./ran");
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("admin.toml is not trusted"), "{out}");
    assert!(!j.project.join("ran").exists());

    // A malformed admin file stops every launch with file and line.
    guard.write("admin.toml", "[net]\nmode = \"isolated\"\nbogus = 1\n", 0o644);
    let out = j.run("touch ./ran");
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("/etc/agent-sandbox/admin.toml:3:"), "{out}");
    assert!(!j.project.join("ran").exists());

    // The site config sets defaults a user may still change.
    guard.write("admin.toml", "", 0o644);
    guard.write("config.toml", "[home]\naccess = \"restricted\"\n", 0o644);
    let out = j.run("touch ~/x && echo HOME-WRITABLE");
    assert!(out.stdout.contains("HOME-WRITABLE"), "--home-access write overrides a site default: {out}");
    drop(guard);
    let _ = std::fs::remove_dir_all("/var/tmp/asb-admin-allowed");
    let _ = std::fs::remove_dir_all("/var/tmp/asb-admin-denied");
}
