//! The Landlock backend (for hosts without unprivileged user namespaces), forced with
//! `--backend landlock`. The same properties as tests/jail.rs where Landlock can hold them;
//! docs/security-model.md lists the ones it cannot (ENOENT vs EACCES, /proc, /tmp, protected paths).

mod common;
use common::*;

macro_rules! jail {
    ($name:expr) => {
        match Jail::new($name) {
            Some(j) => j.arg("--backend").arg("landlock"),
            None => return,
        }
    };
}

#[test]
fn landlock_hidden_files_are_unreadable() {
    let j = jail!("ll-hidden");
    let out = j.run(
        "cat ~/.ssh/id_ed25519; cat ~/.aws/credentials; cat /home/asbother/notes.txt; cat /etc/munge/* ; ls /etc/munge; echo done",
    );
    assert!(out.stdout.contains("done"), "{out}");
    for canary in [SSH_CANARY, AWS_CANARY, OTHER_CANARY] {
        assert!(!out.both().contains(canary), "{canary} leaked: {out}");
    }
    assert!(out.stderr.contains("Permission denied"), "{out}");
}

#[test]
fn landlock_project_is_the_only_writable_tree() {
    let j = jail!("ll-write");
    let out = j.run("echo x > ./inside && echo PROJECT-OK; for p in /usr/x /etc/x ~/x /opt/x; do touch $p 2>/dev/null && echo WROTE $p; done");
    assert!(out.stdout.contains("PROJECT-OK"), "{out}");
    assert!(!out.stdout.contains("WROTE"), "{out}");
    assert!(j.project.join("inside").exists());
}

#[test]
fn landlock_environment_is_scrubbed() {
    let j = jail!("ll-env").env("GH_TOKEN", ENV_CANARY).env("HARMLESS", "kept");
    let out = j.run("env");
    assert!(!out.stdout.contains(ENV_CANARY), "{out}");
    assert!(out.stdout.contains("HARMLESS=kept") && out.stdout.contains("AGENT_SANDBOX_BACKEND=landlock"), "{out}");
}

#[test]
fn landlock_seccomp_and_foreign_abis_are_denied() {
    let j = jail!("ll-seccomp");
    let out = j.run(&format!(
        "{p} keyctl; {p} bpf; {p} unshare_user; {p} io_uring_setup; {i} mkdir ./by-int80",
        p = j.probe(),
        i = j.int80()
    ));
    for op in ["keyctl", "bpf", "unshare_user", "io_uring_setup"] {
        assert!(out.stdout.contains(&format!("probe {op} errno=1 ")), "{op}: {out}");
    }
    assert!(!j.project.join("by-int80").exists(), "{out}");
}

#[test]
fn landlock_isolated_mode_refuses_tcp_and_open_mode_keeps_the_port_floor() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().unwrap().port();
    let j = jail!("ll-tcp");
    let out = j.run(&format!("{p} connect {port}", p = j.probe()));
    assert!(out.stdout.contains("probe connect errno=13"), "isolated must refuse with EACCES: {out}");
    let j = j.arg("--net").arg("open");
    let out = j.run(&format!("{p} connect {port}; {p} connect 25; {p} connect 587", p = j.probe()));
    assert!(out.stdout.contains("probe connect ok"), "open mode reaches an ordinary port: {out}");
    assert_eq!(out.stdout.matches("probe connect errno=13").count(), 2, "SMTP ports are floored: {out}");
}

#[test]
fn landlock_cannot_signal_processes_outside() {
    let j = jail!("ll-signal");
    let sleeper = j.host_sleeper();
    let out = j.run(&format!("{p} kill {pid}", p = j.probe(), pid = sleeper.pid()));
    drop(sleeper);
    assert!(out.stdout.contains("probe kill errno=1"), "{out}");
}

#[test]
fn landlock_exit_codes_and_banner() {
    let j = jail!("ll-exit");
    assert_eq!(j.run("exit 9").code, 9);
    let out = j.output(&mut j.command(&["--net", "isolated", "run", "--", "true"]));
    assert!(out.stderr.contains("backend landlock") && out.stderr.contains("weaker"), "{out}");
}

#[test]
fn landlock_command_not_found_is_127() {
    let j = jail!("ll-127");
    let out = j.output(&mut j.command(&["-q", "run", "--", "no-such-command-xyz"]));
    assert_eq!(out.code, 127, "{out}");
    assert!(out.stderr.contains("command not found"), "{out}");
}
