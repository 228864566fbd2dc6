//! `agent-sandbox doctor --attack`: a site's self-test. It starts a real session with this
//! host's policy, kernel and Slurm, as the calling user, and runs escape attempts inside it:
//! reading the credentials and hidden files this user has, the launcher's own state
//! directory, every Slurm authentication channel (munge's socket and key, sackd's sockets,
//! `slurm.key` and JWT keys, `SLURM_JWT`), a secret variable of the launcher's environment,
//! a listener of the host's loopback, a signal to a host process, and a write to the user's
//! shell startup file. Each line says what was tried and whether it held; the summary is
//! what an admin pastes into a ticket. The probes are attempts, never a reading of the
//! configuration: a policy weakened to let one through makes that probe fail (tested in
//! tests/attack.rs).

use std::io::Read;
use std::path::{Path, PathBuf};

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

/// The script the jail runs: one `P NAME HELD|ESCAPED DETAIL` line per attempt. `port` is a
/// listener of the host's on every address: on its loopback and on `address`.
pub fn script(
    home: &Path,
    state_dir: &Path,
    host_pid: u32,
    loopback_port: u16,
    address: Option<std::net::Ipv4Addr>,
) -> String {
    let mut s = String::from("p() { printf 'P %s %s %s\\n' \"$1\" \"$2\" \"$3\"; }\n");
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
fn job_probe(state_dir: &Path) -> String {
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
    let script = script(&home, &state_dir, std::process::id(), port, host_address());
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(session_args).args(["-q", "run", "--", "bash", "-c", &script]).env(CANARY_VAR, CANARY);
    let out = match cmd.stdin(std::process::Stdio::null()).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("agent-sandbox: doctor --attack: cannot start a session: {e}");
            return 2;
        }
    };
    drop(listener);
    let found = outcomes(&String::from_utf8_lossy(&out.stdout));
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
        );
        for probe in ["state-directory", "environment", "slurm-auth", "host-loopback", "host-process", "host-address"] {
            assert!(s.contains(&format!("p {probe} HELD")), "{probe}: {s}");
        }
    }
}
