//! The `filtered` network mode against real traffic on this machine only: test hosts in a
//! network namespace on TEST-NET (tests/nethost: HTTP, HTTPS, git, SMTP-like banners, echo,
//! DNS), listeners on host loopback and on the host's own address. Every assertion is made
//! from inside the jail, as the unprivileged test user.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::nethost::*;
use common::*;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

#[test]
fn allowed_flows_work_curl_git_python_https_and_ipv6() {
    let Some(j) = net_jail("net-allowed", "") else { return };
    let out = j.run(
        "grep -c 169.254.77.1 /etc/resolv.conf; \
         curl -sS -m 10 http://allowed.test/hello; \
         curl -sS -m 10 --cacert ca.pem https://allowed.test/hello; \
         git ls-remote http://allowed.test/repo.git; \
         curl -sS -m 10 -g 'http://[2001:db8:51::2]:8080/hello'; \
         curl -sS -m 10 http://v6only.test/hello; \
         python3 -c \"
import socket
s = socket.create_connection(('198.51.100.2', 7777), timeout=10)
data = b'x' * 300000
s.sendall(data)
s.shutdown(socket.SHUT_WR)
got = b''
while True:
    b = s.recv(65536)
    if not b: break
    got += b
print('echo', 'same' if got == data else 'DIFFERENT %d' % len(got))
\"",
    );
    assert_eq!(out.code, 0, "{out}");
    let s = &out.stdout;
    assert!(s.starts_with("1\n"), "resolv.conf names our resolver: {out}");
    assert_eq!(s.matches("hello allowed.test").count(), 2, "http and https by name: {out}");
    assert!(s.contains("refs/heads/main"), "git over http: {out}");
    assert!(s.contains("hello [2001:db8:51::2]:8080"), "IPv6 literal: {out}");
    assert!(s.contains("hello v6only.test"), "AAAA-only name: {out}");
    assert!(s.contains("echo same"), "300 kB echo with half-close: {out}");
}

#[test]
fn floor_ports_and_addresses_are_refused_at_once() {
    let Some(j) = net_jail("net-floors", "") else { return };
    // Listeners that really exist: a floored port on the test host, host loopback, and the
    // host's own address (the host side of the veth).
    let lo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let own = std::net::TcpListener::bind("198.51.100.1:0").unwrap();
    let targets = [
        "198.51.100.2/25".to_string(),
        "198.51.100.2/587".into(),
        "198.51.100.2/2525".into(),
        "198.51.100.2/853".into(),
        format!("127.0.0.1/{}", lo.local_addr().unwrap().port()),
        format!("198.51.100.1/{}", own.local_addr().unwrap().port()),
        "169.254.169.254/80".into(),
    ];
    assert!(std::net::TcpStream::connect("198.51.100.2:25").is_ok(), "the banner on 25 is reachable from the host");
    let script: Vec<String> = targets
        .iter()
        .map(|t| {
            format!("timeout 10 bash -c 'exec 3<>/dev/tcp/{t}' 2>/dev/null && echo {t}=CONNECTED || echo {t}=refused")
        })
        .collect();
    let out = j.run(&script.join("; "));
    for t in &targets {
        assert!(out.stdout.contains(&format!("{t}=refused")), "{t}: {out}");
    }
    // Seven refusals, each of which would take 10 s if it were a silent drop.
    assert!(out.elapsed < Duration::from_secs(5), "refusals must be immediate, took {:?}", out.elapsed);
    let denials = audit_lines(&j);
    let smtp = denials.iter().find(|d| d["dest"] == "198.51.100.2:25").expect("audit record for port 25");
    assert_eq!(smtp["layer"], "floor");
    assert_eq!(smtp["proto"], "tcp");
    assert!(smtp["reason"].as_str().unwrap().contains("mail"), "{smtp}");
}

#[test]
fn blocked_names_get_nxdomain_and_are_refused_by_sni_and_host() {
    let Some(j) = net_jail("net-blocked", "block = [\"blocked.test\"]\n") else { return };
    let out = j.run(
        "getent hosts blocked.test; echo getent=$?; \
         curl -sS -m 10 -H 'Host: blocked.test' http://198.51.100.2/hello; echo; \
         curl -sS -m 10 --cacert ca.pem --resolve blocked.test:443:198.51.100.2 https://blocked.test/hello; echo tls=$?; \
         curl -sS -m 10 --cacert ca.pem https://allowed.test/hello",
    );
    assert!(out.stdout.contains("getent=2"), "NXDOMAIN for a blocked name: {out}");
    assert!(out.stdout.contains("refused by the network policy") && out.stdout.contains("blocked.test"), "{out}");
    assert!(!out.stdout.contains("hello blocked.test"), "{out}");
    assert!(out.stdout.contains("tls=35") || out.stdout.contains("tls=56"), "TLS to a blocked SNI is reset: {out}");
    assert!(out.stdout.contains("hello allowed.test"), "other names still work: {out}");
    let denials = audit_lines(&j);
    assert!(denials.iter().any(|d| d["check"] == "dns" && d["name"] == "blocked.test"), "{denials:?}");
    assert!(denials.iter().any(|d| d["check"] == "sni" && d["name"] == "blocked.test"), "{denials:?}");
    assert!(denials.iter().any(|d| d["check"] == "http-host"), "{denials:?}");
}

#[test]
fn allow_list_policy_holds_without_a_proxy() {
    let Some(j) = net_jail("net-allowlist", "block = [\"*\"]\nallow = [\"allowed.test\"]\n") else { return };
    // Before any name resolved to it, the bare address is just "*": refused.
    let out = j.run("curl -sS -m 10 http://198.51.100.2:8080/hello; echo rc=$?");
    assert!(out.stdout.contains("rc=7"), "bare address under an allow-list: {out}");
    let out = j.run(
        "getent hosts other.test; echo other=$?; \
         curl -sS -m 10 http://allowed.test/hello; \
         curl -sS -m 10 --cacert ca.pem https://allowed.test/hello; \
         curl -sS -m 10 --resolve other.test:80:198.51.100.2 http://other.test/hello; echo; \
         curl -sS -m 10 --cacert ca.pem --resolve other.test:443:198.51.100.2 https://other.test/hello; echo tls=$?; \
         python3 -c \"import socket; s=socket.create_connection(('198.51.100.2', 7777), timeout=10); s.sendall(b'ping'); print('py', s.recv(4))\"",
    );
    assert!(out.stdout.contains("other=2"), "{out}");
    assert_eq!(out.stdout.matches("hello allowed.test").count(), 2, "{out}");
    assert!(out.stdout.contains("refused by the network policy"), "Host other.test refused: {out}");
    assert!(!out.stdout.contains("hello other.test"), "{out}");
    assert!(out.stdout.contains("tls=35") || out.stdout.contains("tls=56"), "{out}");
    assert!(out.stdout.contains("py b'ping'"), "an address the jail resolved an allowed name to: {out}");
}

#[test]
fn rebinding_names_are_refused_at_the_resolver() {
    let Some(j) = net_jail("net-rebind", "") else { return };
    let out = j.run(
        "for n in rebind.test hostself.test meta.test allowed.test; do getent ahostsv4 $n >/dev/null; echo $n=$?; done",
    );
    for n in ["rebind.test", "hostself.test", "meta.test"] {
        assert!(out.stdout.contains(&format!("{n}=2")), "{n}: {out}");
    }
    assert!(out.stdout.contains("allowed.test=0"), "{out}");
    let denials = audit_lines(&j);
    assert!(denials.iter().any(|d| d["check"] == "dns-answer" && d["name"] == "rebind.test"), "{denials:?}");
}

#[test]
fn udp_to_an_allowed_port_works_and_to_a_floor_port_fails_fast() {
    let Some(j) = net_jail("net-udp", "") else { return };
    let out = j.run(
        "python3 -c \"
import socket, time
for port in (9999, 514):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.connect(('198.51.100.2', port))
    t = time.time()
    try:
        s.send(b'dgram')
        print(port, s.recv(100), round(time.time() - t, 2))
    except OSError as e:
        print(port, 'error', type(e).__name__, round(time.time() - t, 2))
\"",
    );
    assert!(out.stdout.contains("9999 b'dgram'"), "{out}");
    let line = out.stdout.lines().find(|l| l.starts_with("514 ")).unwrap_or_default();
    assert!(line.contains("error") && !line.contains("timeout"), "UDP 514 is in the floor: {out}");
}

#[test]
fn host_port_reaches_host_loopback_only_when_asked() {
    let Some(j) = net_jail("net-hostport", "") else { return };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let _ = std::io::Write::write_all(&mut &c, b"model-server\n");
        }
    });
    let script = format!("timeout 10 bash -c 'exec 3<>/dev/tcp/169.254.77.1/{port}; head -1 <&3' || echo refused");
    let out = j.run(&script);
    assert!(out.stdout.contains("refused") && !out.stdout.contains("model-server"), "{out}");
    let j = j.arg("--host-port").arg(&port.to_string());
    let out = j.run(&script);
    assert!(out.stdout.contains("model-server"), "{out}");
}

#[test]
fn publish_serves_a_jail_port_on_host_loopback() {
    let Some(j) = net_jail("net-publish", "") else { return };
    // A free port on the host, then a server on the jail's localhost (as dev servers bind).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let j = j.arg("--publish").arg(&port.to_string());
    let script = format!(
        "echo jail-served > page.txt; timeout 20 python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1"
    );
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", &script]);
    let mut child = c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut body = String::new();
    for _ in 0..100 {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /page.txt HTTP/1.0\r\n\r\n");
            let _ = s.read_to_string(&mut body);
            if body.contains("jail-served") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(body.contains("jail-served"), "published port did not serve: {body:?}");
}

#[test]
fn publish_survives_the_launcher_running_out_of_descriptors() {
    // More host connections to a published port than the launcher has descriptors for: the
    // accept that fails (EMFILE) used to end the port's accept loop for the rest of the
    // session. Once the connections are gone, the port serves again.
    let Some(j) = net_jail("net-publish-emfile", "") else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let j = j.arg("--publish").arg(&port.to_string());
    let script = format!(
        "echo jail-served > page.txt; timeout 40 python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1"
    );
    let mut c = j.command_wrapped(&["prlimit", "--nofile=48:48", "--"], &["-q", "run", "--", "sh", "-c", &script]);
    let mut child = c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let fetch = || {
        use std::io::{Read, Write};
        let mut body = String::new();
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
            let _ = s.write_all(b"GET /page.txt HTTP/1.0\r\n\r\n");
            let _ = s.read_to_string(&mut body);
        }
        body
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !fetch().contains("jail-served") {
        assert!(std::time::Instant::now() < deadline, "the published port never served");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Idle connections, far more than 48 descriptors: the kernel completes their handshakes
    // into the listen queue, the launcher's accepts run out of descriptors.
    let held: Vec<_> = (0..150).filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok()).collect();
    assert!(held.len() > 100, "only {} connections", held.len());
    std::thread::sleep(Duration::from_millis(1500));
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut body = String::new();
    while std::time::Instant::now() < deadline {
        body = fetch();
        if body.contains("jail-served") {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(
        body.contains("jail-served"),
        "the published port no longer serves after descriptors ran out: {body:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn proxied_mode_allows_and_refuses_through_both_proxies() {
    let Some(j) = net_jail("net-proxied", "block = [\"blocked.test\"]\n") else { return };
    let policy = j.rig.home.join("t/net-proxied-policy.toml");
    let text = std::fs::read_to_string(&policy).unwrap().replace("mode = \"filtered\"", "mode = \"proxied\"");
    std::fs::write(&policy, text).unwrap();
    let out = j.run(
        "echo $https_proxy $ALL_PROXY; \
         curl -sS -m 10 http://allowed.test/hello; \
         curl -sS -m 10 --cacert ca.pem https://allowed.test/hello; \
         curl -sS -m 10 --proxy socks5h://127.0.0.1:1080 http://allowed.test:8080/hello; \
         curl -sS -m 10 http://blocked.test/hello; \
         curl -sS -m 10 --cacert ca.pem https://blocked.test/hello; echo connect=$?; \
         curl -sS -m 10 --proxy socks5h://127.0.0.1:1080 http://blocked.test/hello; echo socks=$?; \
         curl -sS -m 10 http://rebind.test/hello; \
         curl -sS -m 10 http://allowed.test:25/; \
         curl -sS -m 5 --noproxy '*' http://198.51.100.2/hello; echo direct=$?",
    );
    let s = &out.stdout;
    assert!(s.contains("http://127.0.0.1:3128 socks5h://127.0.0.1:1080"), "{out}");
    assert!(s.contains("hello allowed.test\n"), "absolute-URI request: {out}");
    assert_eq!(s.matches("hello allowed.test").count(), 3, "CONNECT and SOCKS too: {out}");
    assert!(!s.contains("hello blocked.test"), "{out}");
    assert!(s.contains("blocked.test:80 refused by the network policy"), "403 names the reason: {out}");
    assert!(s.contains("connect=56") || s.contains("connect=35"), "CONNECT refused: {out}");
    assert!(s.contains("socks=97"), "SOCKS refused: {out}");
    assert!(s.contains("127.0.0.1:80 refused") && s.contains("IP floor"), "rebinding refused: {out}");
    assert!(s.contains("port 25 is in the port floor"), "{out}");
    assert!(s.contains("direct=7"), "no route without the proxy: {out}");
    let denials = audit_lines(&j);
    assert!(denials.iter().any(|d| d["check"] == "proxy-socks" && d["net"] == "proxied"), "{denials:?}");
}

#[test]
fn proxies_survive_garbage_and_stalled_clients() {
    let Some(j) = net_jail("net-proxy-garbage", "") else { return };
    let policy = j.rig.home.join("t/net-proxy-garbage-policy.toml");
    let text = std::fs::read_to_string(&policy).unwrap().replace("mode = \"filtered\"", "mode = \"proxied\"");
    std::fs::write(&policy, text).unwrap();
    let out = j.run(
        "python3 -c \"
import socket, time
def talk(port, data, read=True):
    s = socket.create_connection(('127.0.0.1', port), timeout=5)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server may answer and close before taking it all: read the answer
        if read:
            s.shutdown(socket.SHUT_WR)
            got = b''
            while True:
                b = s.recv(200)
                if not b: return got
                got += b
    except OSError as e:
        return repr(e).encode()
    return s
idle = [socket.create_connection(('127.0.0.1', p)) for p in (3128, 1080) for _ in range(20)]
print('bad-connect', talk(3128, b'CONNECT\\r\\n\\r\\n')[:12])
print('no-host', talk(3128, b'GET /relative HTTP/1.1\\r\\n\\r\\n')[:12])
print('huge', talk(3128, b'GET http://allowed.test/ HTTP/1.1\\r\\nX: ' + b'a' * (1 << 20) + b'\\r\\n\\r\\n')[:12])
print('socks-bad-version', talk(1080, b'\\x04\\x01\\x00\\x50'))
print('socks-bad-len', talk(1080, b'\\x05\\x01\\x00\\x05\\x01\\x00\\x03\\xff' + b'a' * 10))
print('socks-udp', talk(1080, b'\\x05\\x01\\x00\\x05\\x03\\x00\\x01\\x7f\\x00\\x00\\x01\\x00\\x35'))
half = talk(3128, b'GET http://allowed.test/hello HTTP/1.1\\r\\nHost: allow', read=False)
\" ; curl -sS -m 10 http://allowed.test/hello",
    );
    let s = &out.stdout;
    assert!(s.contains("bad-connect b'HTTP/1.1 400"), "{out}");
    assert!(s.contains("no-host b'HTTP/1.1 400"), "{out}");
    assert!(s.contains("huge b'HTTP/1.1 431"), "a 1 MiB header: {out}");
    assert!(s.contains("socks-udp b'\\x05\\x00\\x05\\x07"), "UDP ASSOCIATE: command not supported: {out}");
    assert!(s.contains("hello allowed.test"), "the proxy still serves after all that: {out}");
}

#[test]
fn icmp_echo_is_answered_by_the_gateway_and_refused_elsewhere_never_hanging() {
    let Some(j) = net_jail("net-icmp", "") else { return };
    let out = j.run(
        "python3 -c \"
import socket, struct, time
def ping(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    s.settimeout(5)
    s.connect((addr, 0))
    t = time.time()
    s.send(struct.pack('!BBHHH', 8, 0, 0, 0, 1) + b'agent-sandbox')
    try:
        r = s.recv(100)
        return 'reply type=%d' % r[0], round(time.time() - t, 2)
    except OSError as e:
        return type(e).__name__, round(time.time() - t, 2)
print('gateway', *ping('169.254.77.1'))
print('world', *ping('198.51.100.2'))
\"",
    );
    assert!(out.stdout.contains("gateway reply type=0"), "{out}");
    let world = out.stdout.lines().find(|l| l.starts_with("world ")).unwrap_or_else(|| panic!("{out}"));
    assert!(world.contains("Error") && !world.contains("TimeoutError"), "refused at once: {out}");
}

/// A login namespace as `ip netns exec` gives one (a container user's view): its own network
/// (192.0.2.1/30, routed to the test hosts through their namespace) and its own
/// /etc/netns/NAME/resolv.conf, which `ip netns exec` binds over /etc/resolv.conf.
fn login_netns() -> &'static str {
    static DONE: OnceLock<()> = OnceLock::new();
    const NS: &str = "asblogin";
    DONE.get_or_init(|| {
        hosts();
        let ip = |args: &[&str]| {
            let st = Command::new("ip").args(args).status();
            assert!(st.is_ok_and(|s| s.success()), "ip {args:?}");
        };
        let _ = Command::new("ip").args(["netns", "del", NS]).status();
        let _ = Command::new("ip").args(["-n", "asbnet", "link", "del", "asbl1"]).status();
        ip(&["netns", "add", NS]);
        ip(&["link", "add", "asbl0", "netns", NS, "type", "veth", "peer", "name", "asbl1", "netns", "asbnet"]);
        ip(&["-n", NS, "addr", "add", "192.0.2.1/30", "dev", "asbl0"]);
        ip(&["-n", NS, "link", "set", "asbl0", "up"]);
        ip(&["-n", NS, "link", "set", "lo", "up"]);
        ip(&["-n", "asbnet", "addr", "add", "192.0.2.2/30", "dev", "asbl1"]);
        ip(&["-n", "asbnet", "link", "set", "asbl1", "up"]);
        ip(&["-n", NS, "route", "add", "198.51.100.0/24", "via", "192.0.2.2"]);
        std::fs::create_dir_all(format!("/etc/netns/{NS}")).unwrap();
        std::fs::write(format!("/etc/netns/{NS}/resolv.conf"), "nameserver 198.51.100.53\n").unwrap();
    });
    NS
}

#[test]
fn from_an_ip_netns_exec_login_namespace_the_default_jail_filters() {
    // The default policy (filtered, upstreams from resolv.conf), started as a container user
    // would: inside `ip netns exec`, whose resolv.conf is bound over /etc/resolv.conf.
    let Some(j) = Jail::new("net-login-ns") else { return };
    let ns = login_netns();
    let ca = std::fs::read_to_string(hosts().workdir.join("ca.pem")).expect("ca.pem");
    let j = j.project_file("ca.pem", &ca);
    let script =
        "curl -sS -m 10 http://allowed.test/hello; curl -sS -m 10 --cacert ca.pem https://allowed.test/hello; \
                  curl -sS -m 5 http://198.51.100.2:25/ >/dev/null 2>&1 || echo smtp-refused; \
                  getent hosts pastebin.com || echo pastebin-nxdomain";
    let mut c = j.command_wrapped(&["ip", "netns", "exec", ns], &["-q", "run", "--", "sh", "-c", script]);
    let out = j.output(&mut c);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout.matches("hello allowed.test").count(), 2, "http and https by name: {out}");
    assert!(out.stdout.contains("smtp-refused") && out.stdout.contains("pastebin-nxdomain"), "{out}");
}

/// A proxied-mode jail blocking `blocked.test`, with `smuggle.py` in the project: small
/// clients that speak CONNECT, SOCKS5 and absolute-URI HTTP by hand, so a test controls what
/// goes inside a tunnel or on a kept-alive connection (curl would never smuggle a name).
fn proxied_smuggle_jail(name: &str) -> Option<Jail> {
    let j = net_jail(name, "block = [\"blocked.test\"]\n")?;
    let policy = j.rig.home.join(format!("t/{name}-policy.toml"));
    let text = std::fs::read_to_string(&policy).unwrap().replace("mode = \"filtered\"", "mode = \"proxied\"");
    std::fs::write(&policy, text).unwrap();
    Some(j.project_file("smuggle.py", &format!("{HTTP_CLIENT_PY}{SMUGGLE_PY}")))
}

/// What both smuggling clients read responses with.
const HTTP_CLIENT_PY: &str = r#"
def recv_head(s):
    head = b''
    while b'\r\n\r\n' not in head:
        b = s.recv(1)
        if not b:
            break
        head += b
    return head

def read_response(s):
    # One HTTP/1.1 response with a Content-Length body, or whatever came before EOF.
    head = recv_head(s)
    if not head:
        return b'EOF'
    length = 0
    for line in head.split(b'\r\n')[1:]:
        k, _, v = line.partition(b':')
        if k.strip().lower() == b'content-length':
            length = int(v.strip())
    body = b''
    while len(body) < length:
        b = s.recv(length - len(body))
        if not b:
            break
        body += b
    return head.split(b'\r\n')[0] + b' | ' + body.strip()
"#;

const SMUGGLE_PY: &str = r#"
import socket, ssl, struct, sys


def http_connect(target):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(b'CONNECT ' + target.encode() + b' HTTP/1.1\r\nHost: ' + target.encode() + b'\r\n\r\n')
    status = recv_head(s).split(b'\r\n')[0]
    return s, status

def socks_connect(host, port):
    s = socket.create_connection(('127.0.0.1', 1080), timeout=10)
    s.sendall(b'\x05\x01\x00')
    assert s.recv(2) == b'\x05\x00'
    s.sendall(b'\x05\x01\x00\x03' + bytes([len(host)]) + host.encode() + struct.pack('!H', port))
    rep = s.recv(4)
    rest = {1: 6, 4: 18}.get(rep[3], 0) if len(rep) == 4 else 0
    while rest:
        b = s.recv(rest)
        if not b:
            break
        rest -= len(b)
    return s, rep[:2]

def tls_get(s, sni):
    # A TLS session to whatever the tunnel reaches, naming `sni`; prints the answer or the error.
    ctx = ssl.create_default_context(cafile='ca.pem')
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(b'GET /hello HTTP/1.1\r\nHost: ' + sni.encode() + b'\r\nConnection: close\r\n\r\n')
        return read_response(t)
    except (OSError, ssl.SSLError) as e:
        return ('refused ' + type(e).__name__).encode()

def plain_get(s, host):
    try:
        s.sendall(b'GET /hello HTTP/1.1\r\nHost: ' + host.encode() + b'\r\nConnection: close\r\n\r\n')
        return read_response(s)
    except OSError as e:
        return ('refused ' + type(e).__name__).encode()

def forward(reqs):
    # Several absolute-URI requests on one connection, one after the other.
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    for url, host in reqs:
        try:
            s.sendall(b'GET ' + url.encode() + b' HTTP/1.1\r\nHost: ' + host.encode() + b'\r\n\r\n')
            print('forward', url, host, read_response(s))
        except OSError as e:
            print('forward', url, host, 'error', type(e).__name__)

what = sys.argv[1]
if what == 'connect':
    for target, sni in [('allowed.test:443', 'allowed.test'), ('allowed.test:443', 'blocked.test'),
                        ('198.51.100.2:443', 'allowed.test'), ('198.51.100.2:443', 'blocked.test')]:
        s, status = http_connect(target)
        print('connect', target, sni, status, tls_get(s, sni))
    for target, host in [('allowed.test:80', 'allowed.test'), ('allowed.test:80', 'blocked.test')]:
        s, status = http_connect(target)
        print('connect', target, host, status, plain_get(s, host))
elif what == 'socks':
    for sni in ['allowed.test', 'blocked.test']:
        s, rep = socks_connect('allowed.test', 443)
        print('socks', sni, rep, tls_get(s, sni))
elif what == 'host':
    forward([('http://allowed.test/hello', 'blocked.test')])
    forward([('http://allowed.test/hello', 'other.test')])
    forward([('http://allowed.test/hello', 'Allowed.Test:80')])
elif what == 'keepalive':
    forward([('http://allowed.test/hello', 'allowed.test'), ('http://blocked.test/hello', 'blocked.test'),
             ('http://allowed.test/hello', 'allowed.test')])
"#;

#[test]
fn proxied_connect_tunnel_refuses_a_smuggled_server_name() {
    let Some(j) = proxied_smuggle_jail("net-proxy-sni") else { return };
    let out = j.run("python3 smuggle.py connect");
    let s = &out.stdout;
    let line = |prefix: &str| s.lines().find(|l| l.starts_with(prefix)).unwrap_or_default().to_string();
    assert!(
        line("connect allowed.test:443 allowed.test ").contains("hello allowed.test"),
        "a tunnel used for its own name works: {out}"
    );
    let smuggled = line("connect allowed.test:443 blocked.test ");
    assert!(smuggled.contains("refused") && !smuggled.contains("hello"), "SNI blocked.test in a tunnel: {out}");
    assert!(line("connect 198.51.100.2:443 allowed.test ").contains("hello allowed.test"), "{out}");
    let by_ip = line("connect 198.51.100.2:443 blocked.test ");
    assert!(by_ip.contains("refused") && !by_ip.contains("hello"), "a tunnel to an address: {out}");
    assert!(line("connect allowed.test:80 allowed.test ").contains("hello allowed.test"), "{out}");
    let plain = line("connect allowed.test:80 blocked.test ");
    assert!(plain.contains("403") && !plain.contains("hello"), "Host blocked.test in a tunnel: {out}");
    let denials = audit_lines(&j);
    assert!(
        denials.iter().any(|d| d["check"] == "sni" && d["name"] == "blocked.test" && d["net"] == "proxied"),
        "{denials:?}"
    );
    assert!(denials.iter().any(|d| d["check"] == "http-host" && d["name"] == "blocked.test"), "{denials:?}");
}

#[test]
fn proxied_socks_tunnel_refuses_a_smuggled_server_name() {
    let Some(j) = proxied_smuggle_jail("net-proxy-socks-sni") else { return };
    let out = j.run("python3 smuggle.py socks");
    let s = &out.stdout;
    let line = |prefix: &str| s.lines().find(|l| l.starts_with(prefix)).unwrap_or_default().to_string();
    assert!(line("socks allowed.test ").contains("hello allowed.test"), "{out}");
    let smuggled = line("socks blocked.test ");
    assert!(smuggled.contains("refused") && !smuggled.contains("hello"), "SNI blocked.test over SOCKS: {out}");
    let denials = audit_lines(&j);
    assert!(denials.iter().any(|d| d["check"] == "sni" && d["name"] == "blocked.test"), "{denials:?}");
}

#[test]
fn proxied_forward_request_refuses_a_host_header_other_than_its_target() {
    let Some(j) = proxied_smuggle_jail("net-proxy-host") else { return };
    let out = j.run("python3 smuggle.py host");
    let s = &out.stdout;
    let line = |prefix: &str| s.lines().find(|l| l.starts_with(prefix)).unwrap_or_default().to_string();
    let blocked = line("forward http://allowed.test/hello blocked.test ");
    assert!(blocked.contains("403") && !blocked.contains("| hello"), "Host: blocked.test: {out}");
    let other = line("forward http://allowed.test/hello other.test ");
    assert!(other.contains("403") && !other.contains("| hello"), "Host names another host: {out}");
    assert!(line("forward http://allowed.test/hello Allowed.Test:80 ").contains("200"), "same host: {out}");
    let denials = audit_lines(&j);
    assert!(denials.iter().any(|d| d["check"] == "http-host" && d["name"] == "blocked.test"), "{denials:?}");
}

#[test]
fn proxied_keep_alive_connection_decides_every_request() {
    let Some(j) = proxied_smuggle_jail("net-proxy-keepalive") else { return };
    let out = j.run("python3 smuggle.py keepalive");
    let lines: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("forward ")).collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].contains("200") && lines[0].contains("hello allowed.test"), "{out}");
    assert!(lines[1].contains("403") && lines[1].contains("refused by the network policy"), "second request: {out}");
    assert!(!lines[1].contains("| hello"), "{out}");
    assert!(lines[2].contains("200") && lines[2].contains("hello allowed.test"), "third, same connection: {out}");
    let denials = audit_lines(&j);
    assert!(denials.iter().any(|d| d["check"] == "proxy-http" && d["name"] == "blocked.test"), "{denials:?}");
}

/// Hides a name from the peek: a ClientHello cut into two TLS records, an HTTP head with more
/// headers than the peek used to read or with empty lines first. Each prints one line:
/// `<case> <the server's answer>` or `<case> refused ...`.
const HIDE_PY: &str = r#"
import socket, ssl, sys

mode = sys.argv[1]

def connect(port):
    if mode == 'filtered':
        return socket.create_connection(('allowed.test', port), timeout=10)
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    t = 'allowed.test:%d' % port
    s.sendall(('CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' % (t, t)).encode())
    head = b''
    while b'\r\n\r\n' not in head:
        b = s.recv(1)
        if not b:
            break
        head += b
    return s

def body_of(s):
    data = b''
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError as e:
        if not data:
            return 'refused ' + type(e).__name__
    if not data:
        return 'refused EOF'
    return data.split(b'\r\n\r\n', 1)[-1].decode(errors='replace').strip()

def split_hello(sni):
    s = connect(443)
    ctx = ssl.create_default_context(cafile='ca.pem')
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    t = ctx.wrap_bio(inc, out, server_hostname=sni)
    try:
        t.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = out.read()
    body = hello[5:]
    rec = lambda b: hello[:3] + len(b).to_bytes(2, 'big') + b
    try:
        s.sendall(rec(body[:20]) + rec(body[20:]))
        while True:
            try:
                t.do_handshake()
                break
            except ssl.SSLWantReadError:
                o = out.read()
                if o:
                    s.sendall(o)
                d = s.recv(65536)
                if not d:
                    return 'refused EOF'
                inc.write(d)
        t.write(('GET /hello HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % sni).encode())
        s.sendall(out.read())
        resp = b''
        while True:
            d = s.recv(65536)
            if not d:
                break
            inc.write(d)
            try:
                while True:
                    resp += t.read(65536)
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
        return resp.split(b'\r\n\r\n', 1)[-1].decode(errors='replace').strip()
    except (OSError, ssl.SSLError) as e:
        return 'refused ' + type(e).__name__

def padded(host, headers, lead=b''):
    s = connect(80)
    extra = b''.join(b'X-%d: a\r\n' % i for i in range(headers))
    s.sendall(lead + b'GET /hello HTTP/1.1\r\n' + extra + b'Host: ' + host.encode() + b'\r\nConnection: close\r\n\r\n')
    return body_of(s)

def session(case, reqs, together=False):
    # Requests on one connection: one after the other (keep-alive), or all sent at once
    # (pipelined). Prints each answer, or how the connection ended.
    s = connect(80)
    answers = []
    try:
        if together:
            s.sendall(b''.join(reqs))
        for r in reqs:
            if not together:
                s.sendall(r)
            answers.append(read_response(s).decode(errors='replace'))
    except OSError as e:
        answers.append('refused ' + type(e).__name__)
    print(case, ' || '.join(answers))

def get(host, close=False):
    return b'GET /hello HTTP/1.1\r\nHost: ' + host.encode() + (b'\r\nConnection: close' if close else b'') + b'\r\n\r\n'

fake = get('blocked.test')
session('keepalive-allowed', [get('allowed.test'), get('allowed.test', True)])
session('keepalive-blocked', [get('allowed.test'), get('blocked.test', True)])
session('pipelined-blocked', [get('allowed.test'), get('blocked.test', True)], together=True)
session('body-then-blocked', [b'POST /p HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: %d\r\n\r\n' % len(fake) + fake,
                              get('blocked.test', True)])
session('chunked-then-blocked', [b'POST /p HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n'
                                 + b'%x\r\n' % len(fake) + fake + b'\r\n0\r\n\r\n', get('blocked.test', True)])
# A body on a GET, which the server's GET handler never reads: it would parse it as the next
# request. And a Host with more than a name in it, which servers read a name out of.
session('getbody-blocked', [b'GET /hello HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: %d\r\n\r\n' % len(fake)
                            + fake, get('allowed.test', True)])
print('host-userinfo', padded('x@blocked.test', 0))
print('split-allowed', split_hello('allowed.test'))
print('split-blocked', split_hello('blocked.test'))
print('headers-blocked', padded('blocked.test', 70))
print('crlf-blocked', padded('blocked.test', 0, b'\r\n'))
print('headers-allowed', padded('allowed.test', 70))
"#;

#[test]
fn names_hidden_by_splitting_or_padding_the_first_bytes_are_refused() {
    // Filtered mode and proxied tunnels alike: the same request with the name cut over two
    // TLS records, behind 70 headers or after an empty line reached the server before.
    for mode in ["filtered", "proxied"] {
        let name = format!("net-hide-{mode}");
        let Some(j) = net_jail(&name, "block = [\"blocked.test\"]\n") else { return };
        let j = j.project_file("hide.py", &format!("{HTTP_CLIENT_PY}{HIDE_PY}")).arg("--net").arg(mode);
        let out = j.run(&format!("python3 hide.py {mode}"));
        let line = |case: &str| out.stdout.lines().find(|l| l.starts_with(case)).unwrap_or("").to_string();
        assert!(line("split-allowed").contains("hello allowed.test"), "{mode}: a split hello still works: {out}");
        assert!(line("headers-allowed").contains("hello allowed.test"), "{mode}: {out}");
        for case in ["split-blocked", "headers-blocked", "crlf-blocked"] {
            let l = line(case);
            assert!(!l.is_empty() && !l.contains("hello blocked.test"), "{mode} {case}: {out}");
        }
    }
}

/// Issue 33, finding 3: a first request the peek did not know (a method of no list, HTTP/2 in
/// the clear, an HTTP/1.0 request without Host in a tunnel) or bytes of no protocol let the
/// flow go on the address alone, and what followed was never read.
const UNKNOWN_FIRST_PY: &str = r#"
def raw(case, first, then=None):
    answers = []
    try:
        s = connect(80)
        s.sendall(first)
        answers.append(read_response(s).decode(errors='replace'))
        if then:
            s.sendall(then)
            answers.append(read_response(s).decode(errors='replace'))
    except Exception as e:
        answers.append('refused ' + type(e).__name__)
    print(case, ' || '.join(a.replace('\r', ' ').replace('\n', ' ') for a in answers))

blocked = b'GET /hello HTTP/1.1\r\nHost: blocked.test\r\nConnection: close\r\n\r\n'
raw('propfind-then-blocked', b'PROPFIND /hello HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\n\r\n', blocked)
raw('brew-then-blocked', b'BREW /hello HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\n\r\n', blocked)
raw('http10-then-blocked', b'GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n', blocked)
raw('h2c', b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')
raw('garbage', b'\x00\x01junk\r\n\r\n', blocked)
raw('ssh-banner', b'SSH-2.0-OpenSSH_9.2p1 test\r\n')
"#;

#[test]
fn an_unknown_first_request_or_protocol_on_a_web_port_cannot_carry_a_blocked_name() {
    for mode in ["filtered", "proxied"] {
        let name = format!("net-first-{mode}");
        let Some(j) = net_jail(&name, "block = [\"blocked.test\"]\n") else { return };
        let j =
            j.project_file("first.py", &format!("{HTTP_CLIENT_PY}{HIDE_PY}{UNKNOWN_FIRST_PY}")).arg("--net").arg(mode);
        let out = j.run(&format!("python3 first.py {mode} 2>&1 | grep -aE '^(propfind|brew|http10|h2c|garbage|ssh)'"));
        let line = |case: &str| out.stdout.lines().find(|l| l.starts_with(case)).unwrap_or("").to_string();
        for case in ["propfind-then-blocked", "brew-then-blocked", "http10-then-blocked"] {
            let l = line(case);
            assert!(!l.is_empty() && !l.contains("hello blocked.test"), "{mode} {case}: {out}");
            assert!(
                l.contains("403 Forbidden | agent-sandbox: ") || l.contains("refused") || l.contains("EOF"),
                "{mode} {case}: {out}"
            );
        }
        // The first request of each of those was served (framed, decided on its Host).
        assert!(line("http10-then-blocked").contains("200 OK"), "{mode}: {out}");
        for case in ["h2c", "garbage"] {
            let l = line(case);
            assert!(l.contains("refused") || l.contains("EOF") || l.contains("403"), "{mode} {case}: {out}");
            assert!(
                !l.contains("400") && !l.contains("505") && !l.contains("hello"),
                "{mode} {case}: reached the server: {out}"
            );
        }
        // An SSH banner passes on the address (`ssh -p 443`): the web server answers it.
        assert!(line("ssh-banner").contains("400"), "{mode}: {out}");
        let denials = audit_lines(&j);
        assert!(
            denials.iter().any(|d| d["check"] == "peek" && d["reason"].as_str().is_some_and(|r| r.contains("h2c"))),
            "{mode}: {denials:?}"
        );
        assert!(
            denials
                .iter()
                .any(|d| d["check"] == "peek"
                    && d["reason"].as_str().is_some_and(|r| r.contains("neither TLS nor HTTP"))),
            "{mode}: {denials:?}"
        );
    }
}

#[test]
fn every_request_of_a_plain_http_connection_is_decided() {
    // Filtered mode and proxied tunnels alike: after a request for an allowed name, a second
    // one on the same connection (kept alive, pipelined, or after a body that looks like a
    // request) for a blocked name on the same address reached the server unread before.
    for mode in ["filtered", "proxied"] {
        let name = format!("net-keepalive-{mode}");
        let Some(j) = net_jail(&name, "block = [\"blocked.test\"]\n") else { return };
        let j = j.project_file("hide.py", &format!("{HTTP_CLIENT_PY}{HIDE_PY}")).arg("--net").arg(mode);
        let out = j.run(&format!("python3 hide.py {mode}"));
        let line = |case: &str| out.stdout.lines().find(|l| l.starts_with(case)).unwrap_or("").to_string();
        let both = line("keepalive-allowed");
        assert_eq!(both.matches("hello allowed.test").count(), 2, "{mode}: keep-alive still works: {out}");
        // The refused request gets its 403, with the reason, after the answers before it.
        let refused = "403 Forbidden | agent-sandbox: ";
        for case in ["keepalive-blocked", "pipelined-blocked"] {
            let l = line(case);
            assert!(l.contains("200 OK | hello allowed.test || "), "{mode} {case}: the first is served: {out}");
            assert!(l.contains(refused) && !l.contains("hello blocked.test"), "{mode} {case}: {out}");
        }
        for case in ["body-then-blocked", "chunked-then-blocked"] {
            let l = line(case);
            assert!(l.contains("posted 43 to allowed.test || "), "{mode} {case}: a body is a body: {out}");
            assert!(l.contains(refused) && !l.contains("hello blocked.test"), "{mode} {case}: {out}");
        }
        for case in ["getbody-blocked", "host-userinfo"] {
            let l = line(case);
            assert!(!l.is_empty() && !l.contains("hello blocked.test"), "{mode} {case}: {out}");
            assert!(l.contains("refused by the network policy"), "{mode} {case}: {out}");
        }
        let denials = audit_lines(&j);
        let later = denials.iter().filter(|d| d["check"] == "http-host" && d["name"] == "blocked.test").count();
        assert!(later >= 4, "{mode}: each refused later request is audited: {denials:?}");
    }
}

#[test]
fn an_address_the_host_gains_during_the_session_is_in_the_floor_at_once() {
    // The host's own addresses are a floor; one that appears after the jail started (DHCP, a
    // VPN, a new interface) is the host's as much as the others.
    let Some(j) = net_jail("net-new-host-addr", "") else { return };
    const DEV: &str = "asbdyn0";
    let _ = Command::new("ip").args(["link", "del", DEV]).status();
    struct Del;
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", DEV]).status();
        }
    }
    let _del = Del;
    let script = "sleep 3; python3 -c \"import socket; socket.create_connection(('192.0.2.77', 7799), timeout=5); print('CONNECTED')\" \
                  2>/dev/null || echo refused";
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", script]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().expect("spawn");
    std::thread::sleep(Duration::from_millis(1000));
    for args in [
        // No dummy module on every host: a veth pair, both ends on the host.
        &["link", "add", DEV, "type", "veth", "peer", "name", "asbdyn1"][..],
        &["addr", "add", "192.0.2.77/32", "dev", DEV],
        &["link", "set", DEV, "up"],
        &["link", "set", "asbdyn1", "up"],
    ] {
        assert!(Command::new("ip").args(args).status().is_ok_and(|s| s.success()), "ip {args:?}");
    }
    let listener = std::net::TcpListener::bind("192.0.2.77:7799").expect("listen on the new address");
    assert!(std::net::TcpStream::connect("192.0.2.77:7799").is_ok(), "the host reaches its own new address");
    drop(listener.accept());
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("refused") && !stdout.contains("CONNECTED"), "{stdout}");
}

/// `net.preset = "agents"`: deny by default, the curated hosts allowed; `policy show` lists them.
#[test]
fn the_agents_preset_allows_its_hosts_and_nothing_else() {
    let Some(j) = net_jail("net-preset", "preset = \"agents\"\n") else { return };
    let out = j.run("curl -sS -m 10 http://pypi.org/hello; echo; curl -sS -m 10 http://allowed.test/hello; echo rc=$?");
    assert!(out.stdout.contains("hello pypi.org"), "a host of the preset: {out}");
    assert!(!out.stdout.contains("hello allowed.test") && out.stdout.contains("rc=6"), "any other name: {out}");
    let policy = j.rig.home.join("t/net-preset-policy.toml");
    let show = j.output(&mut j.command(&["--policy", policy.to_str().unwrap(), "policy", "show"]));
    assert!(show.stdout.contains("net.preset") && show.stdout.contains("agents@2026.11"), "{show}");
    assert!(show.stdout.contains("files.pythonhosted.org") && show.stdout.contains("blocks `*`"), "{show}");
}

/// `agent-sandbox allow` from another terminal widens a running session at once, for its time
/// only, and is logged; a path asks for a new session; nothing inside the jail can call it.
#[test]
fn allow_from_outside_widens_a_running_session_for_a_time_and_nothing_inside_can_call_it() {
    let Some(j) = net_jail("net-allow", "block = [\"*\"]\nallow = [\"allowed.test\"]\n") else { return };
    let script = "echo $AGENT_SANDBOX_SESSION > sid; \
        curl -sS -m 5 http://other.test/hello; echo before=$?; \
        /run/agent-sandbox/agent-sandbox allow --for 1h host other.test; echo inside-allow=$?; \
        ls -d ~/.local/state/agent-sandbox 2>&1; \
        while [ ! -e go ]; do sleep 0.05; done; \
        curl -sS -m 5 http://other.test/hello; echo after=$?; \
        sleep 3; curl -sS -m 5 http://other.test/hello; echo expired=$?";
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", script]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let sid_file = j.project.join("sid");
    let mut sid = String::new();
    for _ in 0..200 {
        sid = std::fs::read_to_string(&sid_file).unwrap_or_default().trim().to_owned();
        if !sid.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!sid.is_empty(), "the session wrote its id");
    let allow = |args: &[&str]| {
        let mut c = j.as_user(&j.rig.bin);
        c.arg("allow").arg("--session").arg(&sid).args(args);
        j.output(&mut c)
    };
    // The socket's path is not secret: a request without the session's token (what a Landlock
    // jail allowed unix sockets could send) changes nothing.
    let socket = j.rig.home.join(format!(".local/state/agent-sandbox/sessions/{sid}.allow"));
    let forged = format!(
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); \
         s.sendall(b'{{\"token\":\"0000\",\"what\":\"host\",\"rule\":\"other.test\",\"seconds\":600}}\\n'); \
         print(s.recv(4096).decode())",
        socket.display()
    );
    let forged = j.output(j.as_user("python3").arg("-c").arg(&forged));
    assert!(forged.stdout.contains("\"ok\":false") && forged.stdout.contains("token"), "{forged}");
    let useless = allow(&["host", "localhost"]);
    assert!(useless.code == 1 && useless.stderr.contains("cannot be allowed"), "a floor is not granted: {useless}");
    let granted = allow(&["--for", "2s", "host", "other.test"]);
    assert_eq!(granted.code, 0, "{granted}");
    assert!(granted.stdout.contains("`other.test` is allowed in this session for 2 s"), "{granted}");
    let path = allow(&["path", "~/data:ro"]);
    assert!(path.code == 1 && path.stderr.contains("--ro ~/data"), "a path needs a new session: {path}");
    std::fs::write(j.project.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("before=6"), "refused before the grant: {stdout}");
    assert!(!stdout.contains("inside-allow=0"), "the jail cannot call it: {stdout}");
    assert!(stdout.contains("No such file"), "the state directory does not exist inside: {stdout}");
    assert!(stdout.contains("hello other.test") && stdout.contains("after=0"), "allowed at once: {stdout}");
    assert!(stdout.contains("expired=6"), "refused again when the time ends: {stdout}");
    let log = std::fs::read_to_string(j.rig.home.join(".local/state/agent-sandbox/audit.jsonl")).unwrap_or_default();
    assert!(
        log.lines().any(|l| l.contains(&sid) && l.contains("\"event\":\"allow\"") && l.contains("other.test")),
        "the grant is in the session's audit log"
    );
}

#[test]
fn a_thousand_held_connections_cost_the_supervisor_at_most_32_mib() {
    // The supervisor is a thread of the launcher: the launcher's resident memory is its.
    let Some(j) = net_jail("net-held", "") else { return };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = vec![];
        for mut c in l.incoming().flatten() {
            let mut b = [0u8; 1];
            if std::io::Read::read_exact(&mut c, &mut b).is_ok() {
                let _ = std::io::Write::write_all(&mut c, &b);
            }
            held.push(c);
        }
    });
    let client = r#"
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1200), hard))
held = []
for _ in range(1000):
    s = socket.create_connection(("169.254.77.1", int(sys.argv[1])), timeout=10)
    s.sendall(b"x")
    assert s.recv(1) == b"x"
    held.append(s)
print("held", len(held), flush=True)
time.sleep(60)
"#;
    let j = j.arg("--host-port").arg(&port.to_string());
    let mut c = j.command(&["-q", "run", "--", "python3", "-c", client, &port.to_string()]);
    let mut child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let _ = std::io::BufRead::read_line(&mut out, &mut line);
    let rss_kib = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()))
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(line.trim(), "held 1000", "the jail held its connections");
    eprintln!("launcher with 1000 held connections: {:.1} MiB", rss_kib as f64 / 1024.0);
    assert!(rss_kib <= 32 << 10, "{rss_kib} KiB with 1000 connections held (the bound is 32 MiB)");
}
