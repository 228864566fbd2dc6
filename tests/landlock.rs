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
