//! The Landlock backend (for hosts without unprivileged user namespaces), forced with
//! `--backend landlock`. The same properties as tests/jail.rs where Landlock can hold them;
//! docs/security-model.md lists the ones it cannot (ENOENT vs EACCES, /proc, /tmp, protected paths).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::path::{Path, PathBuf};

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

/// Issue 32: the same scrub by meaning as the userns jail's (tests/jail.rs).
#[test]
fn landlock_secrets_are_scrubbed_by_what_their_names_mean_and_harmless_names_stay() {
    let j = with_env_canaries(jail!("ll-env-meaning"));
    let out = j.run("env");
    assert_eq!(out.code, 0, "{out}");
    assert_scrubbed_by_meaning(&out, &[]);
    let j = with_env_canaries(jail!("ll-env-meaning-kept")).arg("--env").arg("API_KEY").arg("--env").arg("NOTES");
    assert_scrubbed_by_meaning(&j.run("env"), &["API_KEY", "NOTES"]);
}

/// Issue 32: without a PID namespace the session's own helpers are processes the command can
/// see, and the keeper of the Slurm channel (in the command's Landlock domain, ptrace-able
/// from it by design) was a fork of the launcher: its environ and memory held the user's
/// whole environment. Every process of the session holds only what the jail may see.
#[test]
fn landlock_no_process_readable_inside_holds_a_scrubbed_secret() {
    let out = scan_processes_for_a_scrubbed_canary(jail!("ll-env-procs"));
    // The scan must have reached the keeper (whose pid the jail is told), or it proves nothing.
    let keeper = out.stdout.lines().find_map(|l| l.strip_prefix("KEEPER=")).unwrap_or("none").to_string();
    assert!(keeper.parse::<u32>().is_ok(), "the session has a keeper: {out}");
    for what in ["cmdline", "environ", "mem"] {
        assert!(out.stdout.contains(&format!("READ {keeper} {what}\n")), "keeper {keeper} {what} not read: {out}");
    }
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
fn landlock_dry_run_says_the_shared_temp_trees_are_denied_and_tmpdir_is_the_sessions() {
    let j = jail!("ll-dry");
    let out = j.output(&mut j.command(&["--dry-run", "run", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("denied:     /tmp /var/tmp /dev/shm"), "{out}");
    assert!(
        !out.stdout.contains("tmpfs    /tmp") && !out.stdout.contains("mounts, in order"),
        "nothing is mounted: {out}"
    );
    let line = out.stdout.lines().find(|l| l.contains("TMPDIR, TMP, TEMP")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("/agent-sandbox/landlock/") && line.contains("read-write"), "{out}");
    let json = j.output(&mut j.command(&["--dry-run", "--json", "run", "--", "true"]));
    let plan: serde_json::Value = serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {json}"));
    let ll = &plan["landlock"];
    let rw: Vec<&str> = ll["read_write"].as_array().expect("read_write").iter().filter_map(|v| v.as_str()).collect();
    assert!(!rw.iter().any(|p| ["/tmp", "/var/tmp", "/dev/shm"].contains(p)), "{rw:?}");
    assert!(rw.contains(&ll["session"]["tmp"].as_str().unwrap_or("?")), "{json}");
    let tmpdir = plan["env"].as_array().and_then(|e| e.iter().find(|kv| kv[0] == "TMPDIR")).map(|kv| kv[1].clone());
    assert_eq!(tmpdir.as_ref(), Some(&ll["session"]["tmp"]), "{json}");
}

#[test]
fn landlock_files_move_between_directories_of_the_project() {
    // rename(2) into another directory, as git, submitit and editors do (mv would fall back
    // to a copy and hide an EXDEV).
    let j = jail!("ll-rename");
    let out = j.run(
        "mkdir -p a/b && touch a/f && python3 -c \"import os; os.rename('a/f', 'a/b/f'); os.link('a/b/f', 'g'); print('moved')\"",
    );
    assert!(out.stdout.contains("moved"), "{out}");
    assert!(j.project.join("a/b/f").exists() && j.project.join("g").exists(), "{out}");
}

#[test]
fn landlock_command_not_found_is_127() {
    let j = jail!("ll-127");
    let out = j.output(&mut j.command(&["-q", "run", "--", "no-such-command-xyz"]));
    assert_eq!(out.code, 127, "{out}");
    assert!(out.stderr.contains("command not found"), "{out}");
}

/// Prints `NAME ok` or `NAME errno=N` for `socket(FAMILY, TYPE, PROTOCOL)` (and, with a
/// port, a connect to 127.0.0.1:PORT), for each `NAME:FAMILY:TYPE:PROTOCOL[:PORT]` argument.
const SOCKET_PROBE: &str = r#"perl -MSocket -e '
for (@ARGV) {
  my ($n, $f, $t, $p, $port) = split /:/;
  my $s;
  if (!socket($s, $f, $t, $p)) { print "$n socket errno=", $!+0, "\n"; next }
  if (!defined $port) { print "$n socket ok\n"; next }
  if (connect($s, pack_sockaddr_in($port, inet_aton("127.0.0.1")))) { print "$n connect ok\n" }
  else { print "$n connect errno=", $!+0, "\n" }
}'"#;

/// A listener on a port of the TCP floor (the first of them that is free here).
fn floor_port_listener() -> Option<(std::net::TcpListener, u16)> {
    [465u16, 24, 113, 79].iter().find_map(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).ok().map(|l| (l, *p)))
}

#[test]
fn landlock_mptcp_sctp_and_foreign_families_cannot_walk_around_the_tcp_rules() {
    let Some((_listener, port)) = floor_port_listener() else {
        panic!("no floor port free for the listener");
    };
    let j = jail!("ll-mptcp").arg("--net").arg("open");
    let out = j.run(&format!(
        "{SOCKET_PROBE} tcp:2:1:0:{port} mptcp:2:1:262:{port} mptcp6:10:1:262 sctp:2:1:132 sctp5:2:5:132 \
         raw:2:3:1 udplite:2:2:136 vsock:40:1:0 packet:17:3:0 \
         tcp6:10:1:6 udp:2:2:17 ping:2:2:1 ping6:10:2:58 netlink:16:3:0"
    ));
    assert!(out.stdout.contains("tcp connect errno=13"), "sanity: the floor port is refused over TCP: {out}");
    assert!(!out.stdout.contains("mptcp connect ok"), "MPTCP reached a floored port: {out}");
    for refused in ["mptcp", "mptcp6", "sctp", "sctp5", "raw", "udplite", "vsock", "packet"] {
        assert!(out.stdout.contains(&format!("{refused} socket errno=1\n")), "{refused}: {out}");
    }
    for allowed in ["tcp6", "udp", "netlink"] {
        assert!(out.stdout.contains(&format!("{allowed} socket ok")), "{allowed}: {out}");
    }
    // Ping sockets pass the filter; the host's net.ipv4.ping_group_range may still refuse them (EACCES).
    for ping in ["ping", "ping6"] {
        assert!(out.stdout.contains(&format!("{ping} socket ")), "{ping}: {out}");
        assert!(!out.stdout.contains(&format!("{ping} socket errno=1\n")), "{ping}: {out}");
    }
}

/// A unix listener of the host (as munge's, mode 0777) in a directory the jail cannot list.
struct HostUnixSocket {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
    _listener: std::os::unix::net::UnixListener,
}

impl HostUnixSocket {
    fn new(tag: &str) -> HostUnixSocket {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::path::PathBuf::from(format!("/run/asb-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
        let path = dir.join("socket");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod socket");
        HostUnixSocket { dir, path, _listener: listener }
    }
}

impl Drop for HostUnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const UNIX_PROBE: &str = r#"perl -MSocket -e '
if (socket(my $s, AF_UNIX, SOCK_STREAM, 0)) {
  print connect($s, pack_sockaddr_un($ARGV[0])) ? "unix connect ok\n" : "unix connect errno=".($!+0)."\n";
} else { print "unix socket errno=", $!+0, "\n" }
if (socketpair(my $a, my $b, AF_UNIX, SOCK_STREAM, 0)) {
  syswrite($a, "ping"); sysread($b, my $got, 4); print "socketpair $got\n";
} else { print "socketpair errno=", $!+0, "\n" }'"#;

#[test]
fn landlock_host_unix_sockets_are_unreachable_but_socketpair_works() {
    let sock = HostUnixSocket::new("ll-unix");
    let j = jail!("ll-unix");
    let out = j.run(&format!("{UNIX_PROBE} {}", sock.path.display()));
    assert!(out.stdout.contains("unix socket errno=1\n"), "socket(AF_UNIX) must be refused: {out}");
    assert!(!out.stdout.contains("unix connect ok"), "reached the host's socket: {out}");
    assert!(out.stdout.contains("socketpair ping"), "{out}");

    // `process.unix_sockets = true` gives them back (and with them every host socket).
    let policy = sock.dir.join("policy.toml");
    std::fs::write(&policy, "[process]\nunix_sockets = true\n").expect("policy");
    let j = j.arg("--policy").arg(policy.to_str().expect("utf-8 path"));
    let out = j.run(&format!("{UNIX_PROBE} {}", sock.path.display()));
    assert!(out.stdout.contains("unix connect ok"), "{out}");
}

#[test]
fn landlock_tmp_is_private_and_removed_at_exit() {
    let secret = std::path::PathBuf::from(format!("/tmp/asb-ll-tmp-secret-{}", std::process::id()));
    let j = jail!("ll-tmp");
    std::fs::write(&secret, OTHER_CANARY).expect("write");
    j.give(&[&secret]);
    let made = format!("/tmp/asb-ll-tmp-made-{}", std::process::id());
    let out = j.run(&format!(
        "cat {s}; cat /var/tmp/* /dev/shm/* 2>/dev/null; ls /tmp >/dev/null && echo HOST-TMP-LISTED; \
         echo x > {made} && echo HOST-TMP-WRITTEN; \
         echo \"TMPDIR=$TMPDIR\"; [ \"$TMP\" = \"$TMPDIR\" ] && [ \"$TEMP\" = \"$TMPDIR\" ] && echo SAME; \
         echo \"entries=$(ls -A \"$TMPDIR\" | wc -l)\"; echo x > \"$TMPDIR/f\" && mkdir \"$TMPDIR/d\" && chmod 0 \"$TMPDIR/d\" && echo TMPDIR-WRITABLE; \
         stat -c 'mode=%a' \"$TMPDIR\"",
        s = secret.display()
    ));
    let _ = std::fs::remove_file(&secret);
    let _ = std::fs::remove_file(&made);
    assert!(!out.both().contains(OTHER_CANARY), "read the user's file in the host /tmp: {out}");
    assert!(out.stderr.contains("Permission denied"), "{out}");
    for absent in ["HOST-TMP-LISTED", "HOST-TMP-WRITTEN"] {
        assert!(!out.stdout.contains(absent), "{absent}: {out}");
    }
    for want in ["SAME", "entries=0", "TMPDIR-WRITABLE", "mode=700"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
    let tmpdir = out.stdout.lines().find_map(|l| l.strip_prefix("TMPDIR=")).expect("TMPDIR printed");
    assert!(tmpdir.starts_with('/') && !tmpdir.starts_with("/tmp"), "{out}");
    assert!(!std::path::Path::new(tmpdir).exists(), "the session's temp dir outlived it: {out}");
}

#[test]
fn landlock_daemons_do_not_outlive_the_session() {
    let j = jail!("ll-daemon");
    let out = j.run(
        "setsid sleep 3001 </dev/null >/dev/null 2>&1 & echo PID=$!; \
         (setsid sleep 3002 </dev/null >/dev/null 2>&1 &); echo started",
    );
    assert!(out.stdout.contains("started"), "{out}");
    let pid = out.stdout.lines().find_map(|l| l.strip_prefix("PID=")).expect("PID printed").trim().to_string();
    let survivors = |arg: &str| -> Vec<i32> {
        let want = format!("sleep\0{arg}\0");
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes()))
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
            .collect()
    };
    let (first, second) = (survivors("3001"), survivors("3002"));
    for p in first.iter().chain(&second) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::Signal::SIGKILL);
    }
    let (first, second) = (!first.is_empty(), !second.is_empty());
    assert!(!first && !second, "daemon {pid} (or its double-forked sibling) outlived the session: {out}");
}

#[test]
fn landlock_tcp_fast_open_and_datagram_pairs_cannot_walk_around_the_rules() {
    // TCP Fast Open connects inside sendto() without the connect hook Landlock's port rules
    // use; a datagram socket of a pair can sendto() any host socket path. Both are refused.
    let Some((_listener, port)) = floor_port_listener() else {
        panic!("no floor port free for the listener");
    };
    let j = jail!("ll-tfo").arg("--net").arg("open");
    let out = j.run(&format!(
        "python3 -c \"
import socket
s = socket.socket()
try:
    s.sendto(b'EHLO x', socket.MSG_FASTOPEN, ('127.0.0.1', {port})); print('tfo sent')
except OSError as e:
    print('tfo', e.errno)
for kind, name in [(socket.SOCK_DGRAM, 'dgram'), (socket.SOCK_STREAM, 'stream')]:
    try:
        socket.socketpair(socket.AF_UNIX, kind); print(name, 'pair ok')
    except OSError as e:
        print(name, 'pair', e.errno)
\""
    ));
    assert!(out.stdout.contains("tfo 1\n"), "MSG_FASTOPEN refused (EPERM): {out}");
    assert!(out.stdout.contains("dgram pair 1\n") && out.stdout.contains("stream pair ok"), "{out}");
}

/// Live processes (zombies left out: their environment is gone) whose environment holds `marker`.
fn marked_processes(marker: &str) -> Vec<i32> {
    let needle = marker.as_bytes();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

/// Kills what a failed run left behind: the process groups of every `comm` process of
/// `uid` (a group at once, which no fork escapes), until `beat` has stopped growing.
fn kill_groups_of(comm: &str, uid: u32, beat: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let size = || std::fs::metadata(beat).map_or(0, |m| m.len());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (mut last, mut quiet_since) = (size(), std::time::Instant::now());
    while std::time::Instant::now() < deadline && quiet_since.elapsed() < std::time::Duration::from_millis(500) {
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            if e.metadata().map_or(true, |m| m.uid() != uid) {
                continue;
            }
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let Some((head, rest)) = stat.rsplit_once(')') else { continue };
            let mut f = rest.split_whitespace();
            // Zombies too: they keep their group, and they stay long enough to be found.
            let pgrp = f.nth(2).and_then(|g| g.parse::<i32>().ok());
            if head.ends_with(&format!("({comm}")) {
                if let Some(g) = pgrp.filter(|g| *g > 1) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-g), nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = size();
        if now != last {
            (last, quiet_since) = (now, std::time::Instant::now());
        }
    }
}

#[test]
fn landlock_a_reforking_process_does_not_outlive_the_session() {
    // Each process of the chains forks and exits at once: the pid a walk of /proc found is
    // gone before the walk's kill reaches it, and its child lives on. Every process appends
    // a byte to `beat` first, so a live chain shows as a growing file.
    let marker = format!("ASB_REFORK_MARK={}", std::process::id());
    let (key, value) = marker.split_once('=').expect("NAME=VALUE");
    let j = jail!("ll-refork");
    let beat = j.project.join("beat");
    use std::os::unix::process::CommandExt;
    let mut host = std::process::Command::new("sleep");
    host.arg("30").env(key, value).uid(j.rig.uid).gid(j.rig.gid);
    let mut host = host.spawn().expect("spawn the host process");
    // First the jail sends SIGKILL to every process it can signal but its own shell and
    // itself: whatever ends the session at exit must not be among them.
    let out = j.run(&format!(
        "perl -e 'kill 9, grep {{ $_ != $$ && $_ != getppid() }} map {{ m{{(\\d+)$}} }} glob \"/proc/[0-9]*\"'; \
         export {marker}; {refork} 8 ./beat </dev/null >/dev/null 2>&1 & sleep 0.5; echo started",
        refork = j.refork()
    ));
    // The launcher has returned: within one second nothing of the session runs any more.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let size = || std::fs::metadata(&beat).map_or(0, |m| m.len());
    let before = size();
    let mut left = std::collections::BTreeSet::new();
    let look = std::time::Instant::now();
    while look.elapsed() < std::time::Duration::from_millis(1000) {
        left.extend(marked_processes(&marker).into_iter().filter(|p| *p as u32 != host.id()));
    }
    let grew = size() - before;
    kill_groups_of("refork", j.rig.uid, &beat);
    let host_alive = host.try_wait().expect("wait").is_none();
    let _ = host.kill();
    let _ = host.wait();
    assert!(out.stdout.contains("started") && before > 0, "the chains ran: {out}");
    assert!(
        grew == 0 && left.is_empty(),
        "re-forking processes outlived the session ({grew} forks in a second, seen: {left:?}): {out}"
    );
    assert!(host_alive, "a process of the same user outside the jail was killed");
}

#[test]
fn landlock_a_sigkilled_launchers_daemons_die_too() {
    use std::io::BufRead;
    let j = jail!("ll-killed");
    let marker = format!("ASB_KILLED_MARK={}", std::process::id());
    let mut c = j.command(&[
        "-q",
        "run",
        "--",
        "sh",
        "-c",
        &format!("export {marker}; setsid sleep 3003 </dev/null >/dev/null 2>&1 & echo started; sleep 30"),
    ]);
    let mut child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().expect("spawn");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "started");
    let up = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while marked_processes(&marker).is_empty() && std::time::Instant::now() < up {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!marked_processes(&marker).is_empty(), "the daemon runs");
    let _ = child.kill();
    let _ = child.wait();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while !marked_processes(&marker).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let left = marked_processes(&marker);
    for p in &left {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::Signal::SIGKILL);
    }
    assert!(left.is_empty(), "processes {left:?} outlived their SIGKILLed launcher by 3 s");
}

#[test]
fn landlock_the_users_other_processes_get_no_limits_or_priorities_from_the_jail() {
    // Same uid, same PID namespace: prlimit's RLIMIT_CPU of 1 s kills a process that used
    // more, a descriptor limit of 0 silences the chaperon's audit log. Only the caller itself.
    let j = jail!("ll-prlimit");
    let sleeper = j.host_sleeper();
    let p = sleeper.pid();
    let out = j.run(&format!(
        "prlimit --pid {p} --nofile=0 && echo PRLIMIT-OTHER; renice -n 19 -p {p} >/dev/null 2>&1 && echo RENICE-OTHER; \
         prlimit --nofile=100 true && echo PRLIMIT-SELF; nice -n 5 true && echo NICE-SELF; echo done"
    ));
    drop(sleeper);
    assert!(out.stdout.contains("done"), "{out}");
    assert!(!out.stdout.contains("PRLIMIT-OTHER") && !out.stdout.contains("RENICE-OTHER"), "{out}");
    assert!(out.stdout.contains("PRLIMIT-SELF") && out.stdout.contains("NICE-SELF"), "{out}");
}

#[test]
fn landlock_the_users_other_terminals_cannot_be_opened() {
    // Another terminal of the user (an ssh or tmux session: `script` makes one here) is on the
    // host's /dev/pts, where the jail could read what is typed into it.
    let j = jail!("ll-pts");
    let mut other = j.as_user("script");
    other.args(["-qfc", "sleep 30", "/dev/null"]).stdin(std::process::Stdio::null());
    other.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut other = other.spawn().expect("script");
    let mut pts = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        // The pty script made is the one its child (sleep) has as stdin.
        let kids = std::fs::read_to_string(format!("/proc/{}/task/{}/children", other.id(), other.id()));
        pts = kids
            .ok()
            .and_then(|k| k.split_whitespace().find_map(|c| std::fs::read_link(format!("/proc/{c}/fd/0")).ok()));
        if pts.as_ref().is_some_and(|p| p.starts_with("/dev/pts/")) {
            break;
        }
    }
    let pts = pts.expect("the other terminal");
    let script = format!(
        "python3 -c 'import os; os.open(\"{p}\", os.O_RDWR | os.O_NOCTTY); print(\"READ-OTHER\")' 2>/dev/null; \
         python3 -c 'import pty,os; m,s=pty.openpty(); os.write(s,b\"x\"); print(\"OWN-PTY\", os.read(m,1))' 2>/dev/null; \
         echo done",
        p = pts.display()
    );
    let out = j.run(&script);
    // `process.host_terminals = true` opens the host's /dev/pts: new terminals work, and
    // the other terminals are reachable again (what the setting says it gives up).
    let policy = j.rig.home.join("t/ll-pts-policy.toml");
    std::fs::write(&policy, "[process]\nhost_terminals = true\n").expect("policy");
    j.give(&[&policy]);
    let open = j.run_with(&["--policy", policy.to_str().expect("utf-8")], &script);
    let _ = other.kill();
    let _ = other.wait();
    assert!(out.stdout.contains("done") && open.stdout.contains("done"), "{out}\n{open}");
    assert!(!out.stdout.contains("READ-OTHER"), "another terminal of the user was opened: {out}");
    assert!(!out.stdout.contains("OWN-PTY"), "no host devpts, no new terminal: {out}");
    assert!(open.stdout.contains("OWN-PTY b'x'") && open.stdout.contains("READ-OTHER"), "{open}");
}

/// Issue 32 under Landlock, which grants the project whole and cannot make a path inside it
/// read-only: the protected settings (an agent's, an editor's, a hook manager's, the git
/// hooks and config) the jail changed, made or removed are put back at exit as they were, the
/// jail's versions kept aside in the state directory, said in one line and in the audit log.
#[test]
fn landlock_protected_settings_the_jail_changes_are_put_back_at_exit() {
    let j = jail!("ll-restore")
        .project_file(".claude/settings.json", "{\"mine\":true}\n")
        .project_file(".vscode/settings.json", "{\"editor\":1}\n")
        .project_file(".husky/pre-commit", "echo mine\n")
        .project_file("src/main.c", "int main(){}\n");
    let git = std::process::Command::new("git").arg("init").arg("-q").arg(&j.project).status().unwrap();
    assert!(git.success());
    let chown = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", j.rig.uid, j.rig.gid))
        .arg(&j.project)
        .status()
        .unwrap();
    assert!(chown.success());
    let config_before = std::fs::read(j.project.join(".git/config")).unwrap();
    let out = j.run(
        "echo '{\"hooks\":{\"SessionStart\":[{\"hooks\":[{\"type\":\"command\",\"command\":\"touch pwned\"}]}]}}' > .claude/settings.json; \
         mkdir -p .codex && echo 'notify = [\"touch\", \"pwned\"]' > .codex/config.toml; \
         echo '{\"mcpServers\":{\"pwn\":{\"command\":\"touch\"}}}' > .mcp.json; \
         rm .vscode/settings.json; echo 'touch pwned' > .husky/pre-commit; \
         printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         git config core.fsmonitor 'touch pwned'; git remote add origin https://example.invalid/r.git; \
         echo changed > src/main.c; echo done",
    );
    assert!(out.stdout.contains("done"), "{out}");
    let read = |rel: &str| std::fs::read_to_string(j.project.join(rel)).ok();
    assert_eq!(read(".claude/settings.json").as_deref(), Some("{\"mine\":true}\n"), "{out}");
    assert_eq!(read(".vscode/settings.json").as_deref(), Some("{\"editor\":1}\n"), "{out}");
    assert_eq!(read(".husky/pre-commit").as_deref(), Some("echo mine\n"), "{out}");
    assert!(!j.project.join(".codex").exists() && !j.project.join(".mcp.json").exists(), "{out}");
    assert!(!j.project.join(".git/hooks/pre-commit").exists(), "{out}");
    // The config keeps the user's entries and the jail's remote (what `git remote add` and
    // `push -u` write runs nothing), without the fsmonitor.
    let config = std::fs::read(j.project.join(".git/config")).unwrap();
    let text = String::from_utf8_lossy(&config);
    assert!(config.starts_with(&config_before), "{text}");
    assert!(text.contains("https://example.invalid/r.git") && !text.contains("fsmonitor"), "{text}");
    // The project's own work stays.
    assert_eq!(read("src/main.c").as_deref(), Some("changed\n"), "{out}");
    assert!(
        out.stderr
            .contains("put back as they were: .claude, .codex, .git/config, .git/hooks, .husky, .mcp.json, .vscode"),
        "{out}"
    );
    let session_aside = j.rig.home.join(".local/state/agent-sandbox/rejected");
    let kept: Vec<PathBuf> = std::fs::read_dir(&session_aside).unwrap().flatten().map(|e| e.path()).collect();
    assert!(
        kept.iter()
            .any(|d| std::fs::read_to_string(d.join(".claude/settings.json")).is_ok_and(|t| t.contains("pwned"))),
        "the jail's version is kept aside: {kept:?}"
    );
    let audit = std::fs::read_to_string(j.rig.home.join(".local/state/agent-sandbox/audit.jsonl")).unwrap_or_default();
    assert!(audit.contains("put back at exit") && audit.contains(".mcp.json"), "{audit}");
}

/// Red team 32 R6 under Landlock: other agents', editors' and mise's settings the jail makes
/// or changes at the project's top are put back at exit (made ones gone, changed ones as they
/// were); the project's own work stays.
#[test]
fn landlock_other_agents_and_editors_settings_are_put_back_at_exit() {
    let j = jail!("ll-restore-r6").project_file(".zed/settings.json", "{}\n").project_file("src/a.c", "x\n");
    // Not `.github/hooks/`: a glob entry (a missing `.github` must stay the project's to
    // make), and under Landlock a glob that matches nothing at the start records nothing to
    // put back (named as a limit in docs/security-model.md).
    let made = [
        ".qwen/settings.json",
        ".crush.json",
        "crush.json",
        ".roo/mcp.json",
        ".kilocode/mcp.json",
        ".kiro/hooks/x.kiro.hook",
        ".amazonq/mcp.json",
        ".junie/mcp/mcp.json",
        ".clinerules/hooks/PreToolUse",
        ".openhands/setup.sh",
        ".helix/languages.toml",
        "mise.toml",
        ".mise.toml",
        ".factory/settings.json",
        ".amp/settings.json",
    ];
    let mut script = String::new();
    for p in made {
        if let Some(d) = Path::new(p).parent().filter(|d| !d.as_os_str().is_empty()) {
            script.push_str(&format!("mkdir -p '{}'; ", d.display()));
        }
        script.push_str(&format!("echo pwned > '{p}'; "));
    }
    script.push_str("echo pwned > .zed/settings.json; echo changed > src/a.c; echo done");
    let out = j.run(&script);
    assert!(out.stdout.contains("done"), "{out}");
    for p in made {
        assert!(!j.project.join(p).exists(), "{p} stays on the host: {out}");
    }
    let read = |rel: &str| std::fs::read_to_string(j.project.join(rel)).ok();
    assert_eq!(read(".zed/settings.json").as_deref(), Some("{}\n"), "{out}");
    assert_eq!(read("src/a.c").as_deref(), Some("changed\n"), "{out}");
}
