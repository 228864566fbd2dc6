//! Mail-block stubs: every mailer name and every real mailer path inside the jail reaches the
//! stub, which exits 77 with a message for the agent and sends nothing. One test function:
//! it plants a fake mailer on the host (root), which is global state.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;

const FAKE: &str = "/usr/local/sbin/sendmail";

struct Remove(&'static str);
impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

#[test]
fn every_mailer_is_the_stub_by_name_and_by_path_unless_policy_turns_it_off() {
    let Some(j) = Jail::new("mail") else { return };
    assert!(!std::path::Path::new(FAKE).exists(), "{FAKE} exists on this host; the test will not overwrite it");
    // A "mailer" that would leave a canary in the project if it ever ran.
    std::fs::create_dir_all("/usr/local/sbin").unwrap();
    std::fs::write(FAKE, "#!/bin/sh\necho MAILER-RAN > \"$PWD/MAILER-RAN\"\n").unwrap();
    std::fs::set_permissions(FAKE, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _cleanup = Remove(FAKE);

    let out = j.run(&format!("{FAKE} -t secret-recipient@example.org < /dev/null; echo rc=$?"));
    assert!(out.stdout.contains("rc=77"), "{out}");
    assert!(out.stderr.contains("mail.block") && out.stderr.contains("ask the user"), "{out}");
    assert!(!out.both().contains("secret-recipient"), "the stub must not echo its arguments: {out}");
    assert!(!j.project.join("MAILER-RAN").exists(), "the real mailer ran");

    let names = ["sendmail", "mail", "mailx", "mutt", "msmtp", "swaks", "exim4", "qmail-inject", "postdrop", "dma"];
    let script: Vec<String> = names.iter().map(|n| format!("{n} x </dev/null 2>/dev/null; echo {n}=$?")).collect();
    let out = j.run(&script.join("; "));
    for n in names {
        assert!(out.stdout.contains(&format!("{n}=77")), "{n}: {out}");
    }

    // /dev/tcp to the host's SMTP port: a listener really is there (this root test opens one
    // unless a mail server already does), and the jail cannot reach it.
    let _smtp = std::net::TcpListener::bind("127.0.0.1:25").ok();
    assert!(std::net::TcpStream::connect("127.0.0.1:25").is_ok(), "no SMTP listener on the host to test against");
    let out = j.run("bash -c '(exec 3<>/dev/tcp/127.0.0.1/25) 2>/dev/null && echo CONNECTED || echo refused'");
    assert!(out.stdout.contains("refused") && !out.stdout.contains("CONNECTED"), "{out}");

    // msmtp-mta ships `newaliases -> /bin/true`: the stub covers the mailer's name, never
    // `true` (or any other ordinary program a mailer name links to).
    let _links = [Remove("/usr/local/sbin/newaliases"), Remove("/usr/local/sbin/mailq")];
    for (link, to) in [("/usr/local/sbin/newaliases", "/bin/true"), ("/usr/local/sbin/mailq", "/usr/bin/env")] {
        assert!(std::fs::symlink_metadata(link).is_err(), "{link} exists on this host");
        std::os::unix::fs::symlink(to, link).unwrap();
    }
    let out = j.run(
        "true; echo true=$?; /bin/true; echo bin-true=$?; /usr/bin/true && echo usr-bin-true=0; \
         env echo env-works; false || echo ok-false; newaliases </dev/null 2>/dev/null; echo newaliases=$?; \
         mailq </dev/null 2>/dev/null; echo mailq=$?",
    );
    for want in ["true=0", "bin-true=0", "usr-bin-true=0", "env-works", "ok-false", "newaliases=77", "mailq=77"] {
        assert!(out.stdout.lines().any(|l| l == want), "{want}: {out}");
    }

    let off = j.rig.home.join("t/mail-off.toml");
    std::fs::write(&off, "[mail]\nblock = \"off\"\n").unwrap();
    j.give(&[&off]);
    let j = j.arg("--policy").arg(off.to_str().unwrap());
    let out = j.run(&format!("{FAKE}; echo rc=$?"));
    assert!(out.stdout.contains("rc=0"), "with mail.block = off the real program runs: {out}");
    assert!(j.project.join("MAILER-RAN").exists(), "{out}");
}
