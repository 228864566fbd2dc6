//! `agent-sandbox doctor --attack`: a site's self-test. It starts a real session with this
//! host's policy, kernel and Slurm, as the calling user, and runs escape attempts inside it:
//! reading the credentials and hidden files this user has, the launcher's own state
//! directory, every Slurm authentication channel (munge's socket and key, sackd's sockets,
//! `slurm.key` and JWT keys, `SLURM_JWT`), a secret variable of the launcher's environment,
//! a listener of the host's loopback, the port floor (mail, DNS over TLS, remote shells,
//! Slurm's daemons) on the host's own address, a signal to a host process, and a write to the
//! user's shell startup file. Each line says what was tried and whether it held; the summary is
//! what an admin pastes into a ticket. The probes are attempts, never a reading of the
//! configuration: a policy weakened to let one through makes that probe fail (tested in
//! tests/attack.rs).

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A secret the launcher's environment holds while the probes run; the scrub must remove it.
const CANARY_VAR: &str = "AGENT_SANDBOX_PROBE_API_TOKEN";
const CANARY: &str = "asb-probe-canary-7f3e";

/// Files of a user's home that hold credentials (a few of the catalogue's), tried if present.
const HOME_SECRETS: &[&str] = &[
    ".ssh/id_ed25519",
    ".ssh/id_rsa",
    ".ssh/id_ecdsa",
    ".aws/credentials",
    ".git-credentials",
    ".netrc",
    ".config/gh/hosts.yml",
    ".docker/config.json",
    ".kube/config",
    ".pypirc",
];

/// Slurm's authentication channels, wherever a site keeps them.
const SLURM_CHANNELS: &[&str] = &[
    "/run/munge/munge.socket.2",
    "/var/run/munge/munge.socket.2",
    "/etc/munge/munge.key",
    "/run/slurm/sack.socket",
    "/etc/slurm/slurm.key",
    "/etc/slurm/jwt_hs256.key",
    "/etc/slurm/jwt.key",
];

/// One probe's outcome.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub name: String,
    pub verdict: Verdict,
    pub detail: String,
}

#[derive(Debug, PartialEq, Clone, Copy)]
pub enum Verdict {
    Held,
    Escaped,
    /// The attempt could not be made here (no Slurm answers).
    Skipped,
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The paths tried for each file probe, found on this host (each only if it exists here).
fn targets(home: &Path, state_dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut out = vec![];
    for rel in HOME_SECRETS {
        let p = home.join(rel);
        if p.exists() {
            out.push(("credentials", p));
        }
    }
    out.push(("state-directory", state_dir.join("records.key")));
    let mut channels: Vec<PathBuf> = SLURM_CHANNELS.iter().map(PathBuf::from).collect();
    // sackd's socket of a named cluster (`/run/slurm-<cluster>/sack.socket`), and where
    // `SLURM_SACK_SOCKET` moves it.
    if let Ok(rd) = std::fs::read_dir("/run") {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("slurm-") {
                channels.push(e.path().join("sack.socket"));
            }
        }
    }
    if let Some(p) = std::env::var_os("SLURM_SACK_SOCKET").map(PathBuf::from).filter(|p| p.is_absolute()) {
        channels.push(p);
    }
    for p in channels {
        if std::fs::symlink_metadata(&p).is_ok() {
            out.push(("slurm-auth", p));
        }
    }
    out
}

/// This host's first IPv4 address that is not loopback, if any.
fn host_address() -> Option<std::net::Ipv4Addr> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter_map(|i| i.address.and_then(|a| a.as_sockaddr_in().map(|s| s.ip())))
        .find(|ip| !ip.is_loopback())
}

/// A port of the floor (`netrules::floor`) the probe tries on the host's own address.
pub struct FloorPort {
    pub port: u16,
    pub class: &'static str,
    /// Ours, on every address, so that a connect the floor lets through succeeds. None where a
    /// service of the host listens there already (Slurm's daemons, a mail server). Either way
    /// the evidence is the jail's connect: a connection arriving here could be another
    /// self-test's, run at the same time.
    pub listener: Option<TcpListener>,
}

/// The floor's ports this host lets the probe try on `address`: each one this user can listen
/// on (ports below 1024 need root, or `net.ipv4.ip_unprivileged_port_start`), and each one
/// where a service already answers on that address.
pub fn floor_ports(address: IpAddr) -> Vec<FloorPort> {
    let mut out = vec![];
    for &(port, class, _) in crate::netrules::floor::PORT_FLOOR {
        match TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)) {
            Ok(l) if l.set_nonblocking(true).is_ok() => out.push(FloorPort { port, class, listener: Some(l) }),
            Ok(_) => {}
            Err(_) => {
                // Refused (privileged) or taken: tried where something answers on the address.
                let answers = TcpStream::connect_timeout(&SocketAddr::new(address, port), Duration::from_millis(300));
                if answers.is_ok() {
                    out.push(FloorPort { port, class, listener: None });
                }
            }
        }
    }
    out
}

/// The port-floor probe: a connect from inside to each of `ports` on `address`; any that
/// connects is an escape. `timeout` bounds a connect the network neither accepts nor refuses.
fn port_floor_probe(address: IpAddr, ports: &[FloorPort]) -> String {
    if ports.is_empty() {
        return "p port-floor SKIPPED \"no port of the floor could be listened on, and no service answers on one, \
                here\"\n"
            .to_string();
    }
    let mut s = String::from("fl=; t=; command -v timeout >/dev/null 2>&1 && t='timeout 10'\n");
    for f in ports {
        s.push_str(&format!(
            "if $t bash -c 'exec 3<>/dev/tcp/{address}/{0}' 2>/dev/null; then fl=\"$fl {address}:{0}({1})\"; fi\n",
            f.port, f.class
        ));
    }
    let listed = ports.iter().map(|f| f.port.to_string()).collect::<Vec<_>>().join(",");
    let mut classes: Vec<&str> = ports.iter().map(|f| f.class).collect();
    classes.dedup();
    let untried: Vec<String> = crate::netrules::floor::floor_ports()
        .filter(|p| !ports.iter().any(|f| f.port == *p))
        .map(|p| p.to_string())
        .collect();
    let untried = if untried.is_empty() {
        String::new()
    } else {
        format!("; not tried: {} (this user cannot listen there and nothing answers)", untried.join(","))
    };
    s.push_str(&format!(
        "if [ -n \"$fl\" ]; then p port-floor ESCAPED \"connected to$fl\"; else p port-floor HELD \"{address}:{{{listed}}} \
         ({}) cannot be reached{untried}\"; fi\n",
        classes.join(", ")
    ));
    s
}

/// What every probe script starts with: `p NAME VERDICT DETAIL` prints one probe's line.
pub const PRELUDE: &str = "p() { printf 'P %s %s %s\\n' \"$1\" \"$2\" \"$3\"; }\n";

/// The script the jail runs: one `P NAME HELD|ESCAPED DETAIL` line per attempt. `port` is a
/// listener of the host's on every address: on its loopback and on `address`.
pub fn script(
    home: &Path,
    state_dir: &Path,
    host_pid: u32,
    loopback_port: u16,
    address: Option<std::net::Ipv4Addr>,
    floor: &[FloorPort],
) -> String {
    let mut s = String::from(PRELUDE);
    for (probe, path) in targets(home, state_dir) {
        let q = quote(path.as_path());
        s.push_str(&format!(
            "if [ -e {q} ] || [ -L {q} ]; then if head -c1 {q} >/dev/null 2>&1; then p {probe} ESCAPED \"read \"{q}; \
             else p {probe} HELD {q}\" is there but cannot be read\"; fi; else p {probe} HELD {q}\" does not exist \
             inside\"; fi\n"
        ));
    }
    s.push_str(&format!(
        "if [ -n \"${{{CANARY_VAR}:-}}\" ] || env | grep -q {CANARY}; then p environment ESCAPED \"{CANARY_VAR} \
         reached the jail\"; else p environment HELD \"{CANARY_VAR} was scrubbed\"; fi\n\
         if [ -n \"${{SLURM_JWT:-}}${{SLURM_SACK_SOCKET:-}}\" ]; then p slurm-auth ESCAPED \"SLURM_JWT or \
         SLURM_SACK_SOCKET reached the jail\"; else p slurm-auth HELD \"SLURM_JWT and SLURM_SACK_SOCKET are not set\"; fi\n\
         if (exec 3<>/dev/tcp/127.0.0.1/{loopback_port}) 2>/dev/null; then p host-loopback ESCAPED \"connected to the \
         host's 127.0.0.1:{loopback_port}\"; else p host-loopback HELD \"the host's 127.0.0.1:{loopback_port} cannot be \
         reached\"; fi\n\
         if kill -0 {host_pid} 2>/dev/null && [ \"$(cat /proc/{host_pid}/comm 2>/dev/null)\" = agent-sandbox ]; then \
         p host-process ESCAPED \"the launcher (pid {host_pid}) can be signalled\"; else p host-process HELD \"the \
         launcher (host pid {host_pid}) cannot be seen or signalled\"; fi\n"
    ));
    if let Some(a) = address {
        s.push_str(&format!(
            "if (exec 3<>/dev/tcp/{a}/{loopback_port}) 2>/dev/null; then p host-address ESCAPED \"connected to the \
             host's own {a}:{loopback_port}\"; else p host-address HELD \"the host's own {a}:{loopback_port} cannot be \
             reached\"; fi\n"
        ));
    }
    let floor_address = IpAddr::V4(address.unwrap_or(Ipv4Addr::LOCALHOST));
    s.push_str(&port_floor_probe(floor_address, floor));
    s.push_str(&job_probe(state_dir));
    let rc = [".bashrc", ".profile", ".bash_profile"].iter().map(|r| home.join(r)).find(|p| p.is_file());
    if let Some(rc) = rc {
        let q = quote(&rc);
        s.push_str(&format!(
            "if (: >> {q}) 2>/dev/null; then p write-outside ESCAPED {q}\" can be written\"; else p write-outside HELD \
             {q}\" cannot be written\"; fi\n"
        ));
    }
    s
}

/// Where Slurm answers, a job submitted from inside (through the session's `sbatch`) must run
/// in the jail on the node: its PID 1 the jail's, no authentication channel, the state
/// directory and the launcher's secret not there. Waits for it at most two minutes; a job
/// that did not run by then is reported skipped, not held.
pub fn job_probe(state_dir: &Path) -> String {
    let key = quote(&state_dir.join("records.key"));
    format!(
        "if squeue -h >/dev/null 2>&1; then\n\
         out=\"$PWD/.agent-sandbox-probe-job.$$.out\"; rm -f \"$out\"\n\
         if sbatch --parsable -J agent-sandbox-probe -o \"$out\" --wrap 'echo JOB-PID1=$(cat /proc/1/comm); \
         for f in /run/munge/munge.socket.2 /etc/munge/munge.key /run/slurm/sack.socket /etc/slurm/slurm.key '{key}'; \
         do [ -e \"$f\" ] && echo JOB-SEES=$f; done; [ -n \"${{{CANARY_VAR}:-}}\" ] && echo JOB-SEES=env; echo JOB-END' \
         >/dev/null 2>&1; then\n\
         i=0; while [ $i -lt 240 ] && ! grep -q JOB-END \"$out\" 2>/dev/null; do sleep 0.5; i=$((i+1)); done\n\
         if ! grep -q JOB-END \"$out\" 2>/dev/null; then p job-reentry SKIPPED \"the job did not run within two minutes\"\n\
         elif grep -q JOB-SEES \"$out\" || ! grep -q JOB-PID1=agent-sandbox \"$out\"; then p job-reentry ESCAPED \
         \"the job ran outside the jail: $(tr '\\n' ' ' < \"$out\")\"\n\
         else p job-reentry HELD \"a job submitted from inside ran in the jail on its node\"; fi\n\
         else p job-reentry SKIPPED \"sbatch refused the job\"; fi; rm -f \"$out\"\n\
         else p job-reentry SKIPPED \"no Slurm answers here\"; fi\n"
    )
}

/// Reads the probes' lines.
pub fn outcomes(stdout: &str) -> Vec<Outcome> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("P "))
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let (name, verdict, detail) = (it.next()?, it.next()?, it.next().unwrap_or(""));
            let verdict = match verdict {
                "HELD" => Verdict::Held,
                "SKIPPED" => Verdict::Skipped,
                _ => Verdict::Escaped,
            };
            Some(Outcome { name: name.into(), verdict, detail: detail.into() })
        })
        .collect()
}

/// Runs the probes in a session started with `session_args` (the options given before
/// `doctor`), prints a line per probe and the summary; 0 when every probe held.
pub fn run(session_args: &[std::ffi::OsString]) -> i32 {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
    let env: Vec<(String, String)> = std::env::vars().collect();
    let state_dir = crate::host::real_location(&crate::host::state_dir_as_named(&env, &home));
    // A listener on the host's loopback and its own addresses, which no jail may reach
    // (isolated, filtered and proxied sessions have their own network and its IP floors
    // refuse the host's addresses; Landlock refuses TCP connects).
    let listener = match std::net::TcpListener::bind("0.0.0.0:0") {
        Ok(l) => l,
        Err(e) => {
            eprintln!("agent-sandbox: doctor --attack: cannot listen on 127.0.0.1 for the network probe: {e}");
            return 2;
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("agent-sandbox: doctor --attack: cannot find this program: {e}");
            return 2;
        }
    };
    let address = host_address();
    // Listening before the session starts: the floor's ports on every address.
    let floor = floor_ports(IpAddr::V4(address.unwrap_or(Ipv4Addr::LOCALHOST)));
    let script = script(&home, &state_dir, std::process::id(), port, address, &floor);
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(session_args).args(["-q", "run", "--", "bash", "-c", &script]).env(CANARY_VAR, CANARY);
    let out = match cmd.stdin(std::process::Stdio::null()).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("agent-sandbox: doctor --attack: cannot start a session: {e}");
            return 2;
        }
    };
    let found = outcomes(&String::from_utf8_lossy(&out.stdout));
    drop(listener);
    if found.is_empty() {
        let mut err = String::from_utf8_lossy(&out.stderr).into_owned();
        err.truncate(4000);
        eprintln!("agent-sandbox: doctor --attack: the session did not run the probes ({}):\n{err}", out.status);
        return 2;
    }
    let count = |v: Verdict| found.iter().filter(|o| o.verdict == v).count();
    let (escaped, skipped) = (count(Verdict::Escaped), count(Verdict::Skipped));
    for o in &found {
        let v = match o.verdict {
            Verdict::Held => "held",
            Verdict::Escaped => "ESCAPED",
            Verdict::Skipped => "skipped",
        };
        println!("{v:8} {:16} {}", o.name, o.detail);
    }
    let kernel = std::fs::File::open("/proc/sys/kernel/osrelease")
        .and_then(|mut f| {
            let mut s = String::new();
            f.read_to_string(&mut s).map(|_| s)
        })
        .unwrap_or_default();
    let opts = session_args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
    println!(
        "agent-sandbox doctor --attack: {} probes, {} held, {} escaped, {} skipped (kernel {}, options: {})",
        found.len(),
        count(Verdict::Held),
        escaped,
        skipped,
        kernel.trim(),
        if opts.is_empty() { "none".to_string() } else { opts }
    );
    i32::from(escaped > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_lines_are_read_and_a_path_with_a_quote_is_quoted() {
        let got =
            outcomes("noise\nP credentials HELD /h/.ssh/id_rsa does not exist inside\nP host-loopback ESCAPED x\n");
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].verdict, got[1].verdict), (Verdict::Held, Verdict::Escaped));
        assert!(got[0].detail.ends_with("inside"));
        assert_eq!(quote(Path::new("/h/it's")), "'/h/it'\\''s'");
        let s = script(
            Path::new("/nonexistent-home"),
            Path::new("/nonexistent-state"),
            42,
            4242,
            Some([10, 1, 2, 3].into()),
            &[
                FloorPort { port: 2525, class: "mail", listener: None },
                FloorPort { port: 6817, class: "slurm", listener: None },
            ],
        );
        assert!(s.contains("/dev/tcp/10.1.2.3/2525") && s.contains("10.1.2.3:{2525,6817} (mail, slurm)"), "{s}");
        for probe in [
            "state-directory",
            "environment",
            "slurm-auth",
            "host-loopback",
            "host-process",
            "host-address",
            "port-floor",
        ] {
            assert!(s.contains(&format!("p {probe} HELD")), "{probe}: {s}");
        }
    }
}
