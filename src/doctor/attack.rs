//! `agent-sandbox doctor --attack`: a site's self-test. It starts real sessions with this
//! host's policy, kernel and Slurm, as the calling user, and runs escape attempts inside:
//! reading the credential stores this user has (the catalogue's), the launcher's own state
//! directory, every Slurm authentication channel (munge's socket and key, sackd's sockets,
//! `slurm.key` and JWT keys: sockets are connected to, files read), secrets of the launcher's
//! environment (one per kind of scrub rule, `SLURM_JWT` and `SLURM_SACK_SOCKET` too), a
//! listener of the host's loopback and own address, the port floor (mail, DNS over TLS,
//! remote shells, Slurm's daemons), a signal to the launcher, writes to the user's shell
//! startup files and `PATH` directories, and a job that must re-enter the jail on its node.
//!
//! Each line says what was tried and whether it held; the summary is what an admin pastes into
//! a ticket. The probes are attempts, never a reading of the configuration: a policy weakened
//! to let one through makes that probe fail (tested in tests/attack.rs). What the session
//! could have planted does not decide the result: the probes run under `/bin/bash` with no
//! startup file, a `PATH` of the system's and the jail's stub directory, no exported function;
//! each line carries the run's nonce and its probe's number, and every probe must answer once
//! (a session cut short is a failed self-test, not a shorter list).

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Files of a user's home that hold credentials, tried where present, besides the
/// catalogue's plain `~/` entries.
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

/// Variables that decide what a shell or the loader runs before the probes' script.
const STARTUP_VARS: &[&str] = &["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "BASH_XTRACEFD", "PROMPT_COMMAND"];

/// At most this many credential files are tried (the first found).
const MAX_CREDENTIALS: usize = 40;

/// Slurm's authentication channels, wherever a site keeps them.
const SLURM_CHANNELS: &[&str] = &[
    "/run/munge/munge.socket.2",
    "/var/run/munge/munge.socket.2",
    "/etc/munge/munge.key",
    "/run/slurm/sack.socket",
    "/run/slurmctld/sack.socket",
    "/run/slurmdbd/sack.socket",
    "/etc/slurm/slurm.key",
    "/etc/slurm/jwt_hs256.key",
    "/etc/slurm/jwt.key",
];

/// Shell startup files and login-time programs of the user's: a write to any of them runs
/// outside the jail later.
const STARTUP_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish/config.fish",
];

/// Directories whose new files run outside later (on `PATH`, started at login).
const STARTUP_DIRS: &[&str] = &[".local/bin", "bin", ".config/autostart", ".config/systemd/user"];

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
    /// The attempt could not be made here (no Slurm answers, nothing to try).
    Skipped,
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// A probe script: each probe numbered, each line it prints stamped with the run's nonce.
pub struct Script {
    nonce: String,
    text: String,
    names: Vec<&'static str>,
}

impl Script {
    /// The header: the jail's stub directory (the launcher puts it first on `PATH`) and the
    /// system's, nothing of the caller's `PATH` (a project's venv, `~/bin`).
    pub fn new(nonce: &str) -> Script {
        let text = format!(
            "stubs=\"${{PATH%%:*}}\"; PATH=\"$stubs:/usr/bin:/bin\"; export PATH; unset BASH_ENV ENV\n\
             p() {{ builtin printf 'P {nonce} %s %s %s\\n' \"$1\" \"$2\" \"$3\"; }}\n"
        );
        Script { nonce: nonce.to_string(), text, names: vec![] }
    }

    /// One probe: `body` reports with `@P@ HELD|ESCAPED|SKIPPED "detail"` (every branch once).
    pub fn probe(&mut self, name: &'static str, body: &str) {
        let tag = format!("p {}:{name}", self.names.len());
        self.text.push_str(&body.replace("@P@", &tag));
        self.text.push('\n');
        self.names.push(name);
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The probes' lines in `stdout`, each probe's once: an error names the first probe that
    /// did not answer (a session cut short) or answered twice.
    pub fn outcomes(&self, stdout: &str) -> Result<Vec<Outcome>, String> {
        let mut found: Vec<Option<Outcome>> = self.names.iter().map(|_| None).collect();
        let prefix = format!("P {} ", self.nonce);
        for line in stdout.lines().filter_map(|l| l.strip_prefix(&prefix)) {
            let mut it = line.splitn(3, ' ');
            let (tag, verdict, detail) = (it.next().unwrap_or(""), it.next().unwrap_or(""), it.next().unwrap_or(""));
            let Some((n, name)) = tag.split_once(':') else { continue };
            let Some(slot) = n.parse::<usize>().ok().filter(|n| self.names.get(*n) == Some(&name)) else {
                continue;
            };
            let verdict = match verdict {
                "HELD" => Verdict::Held,
                "SKIPPED" => Verdict::Skipped,
                "ESCAPED" => Verdict::Escaped,
                _ => continue,
            };
            if found[slot].is_some() {
                return Err(format!("probe {n} ({name}) answered twice"));
            }
            let detail = detail.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
            found[slot] = Some(Outcome { name: name.to_string(), verdict, detail });
        }
        let mut out = vec![];
        for (n, o) in found.into_iter().enumerate() {
            out.push(o.ok_or_else(|| format!("the session ended before probe {n} ({}) answered", self.names[n]))?);
        }
        Ok(out)
    }
}

/// What the probes are tried against on this host.
pub struct Targets {
    pub home: PathBuf,
    pub state_dir: PathBuf,
    /// The launcher's pid and its process name (`comm`), as the host sees them.
    pub host_pid: u32,
    pub host_comm: String,
    /// A listener of the host's on every address.
    pub port: u16,
    /// The host's first IPv4 address that is not loopback.
    pub address: Option<Ipv4Addr>,
    /// The variables planted in the launcher's environment, and their values.
    pub canaries: Vec<(&'static str, String)>,
    /// The project's output file of the job probe (the host removes it after).
    pub job_out: PathBuf,
}

/// The variables the self-test plants in the launcher's environment, one per kind of scrub
/// rule: a name pattern (`*_TOKEN`), a secret word (`AUTH`), a value of a provider's key form,
/// a URL with a password, and Slurm's two authentication variables. None may reach the jail.
pub fn canaries(nonce: &str) -> Vec<(&'static str, String)> {
    let body: String = nonce.chars().cycle().take(36).collect();
    vec![
        ("ASBPROBE_API_TOKEN", format!("asbprobe-{nonce}-name")),
        ("ASBPROBE_AUTH", format!("asbprobe-{nonce}-word")),
        ("ASBPROBE_NOTES", format!("ghp_{body}")),
        ("ASBPROBE_MIRROR", format!("https://asbprobe:{nonce}@mirror.invalid/simple")),
        ("SLURM_JWT", format!("asbprobe-{nonce}-jwt")),
        ("SLURM_SACK_SOCKET", format!("/run/asbprobe-{nonce}/sack.socket")),
    ]
}

/// The credential files this user has: the catalogue's plain `~/` paths and a few more.
fn credential_files(home: &Path) -> Vec<PathBuf> {
    let from_catalogue = crate::plan::catalogue::CATALOGUE
        .iter()
        .flat_map(|s| s.paths.iter().copied())
        .filter(|t| !t.contains(['*', '?', '[', '{', '$']))
        .filter_map(|t| t.strip_prefix("~/"));
    let mut out: Vec<PathBuf> = vec![];
    for rel in HOME_SECRETS.iter().copied().chain(from_catalogue) {
        let p = home.join(rel);
        if p.is_file() && !out.contains(&p) && out.len() < MAX_CREDENTIALS {
            out.push(p);
        }
    }
    out
}

/// Slurm's authentication channels that exist on this host (sackd's socket of a named
/// cluster, `/run/slurm-<cluster>/sack.socket`, and where `SLURM_SACK_SOCKET` moves it, too).
fn slurm_channels() -> Vec<PathBuf> {
    let mut channels: Vec<PathBuf> = SLURM_CHANNELS.iter().map(PathBuf::from).collect();
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
    channels.retain(|p| std::fs::symlink_metadata(p).is_ok());
    channels
}

/// A file probe: read a byte of the file (a socket: connect to it through the jail's stub
/// binary). The empty read-only stand-in a hidden store gets inside a writable tree is no
/// escape.
fn file_probe(s: &mut Script, name: &'static str, path: &Path) {
    let q = quote(path);
    s.probe(
        name,
        &format!(
            "if [ -S {q} ]; then if (exec -a agent-sandbox-probe-unix \"$stubs/squeue\" {q}) 2>/dev/null; then \
             @P@ ESCAPED \"connected to \"{q}; else @P@ HELD {q}\" is there but refuses a connection\"; fi; \
             elif [ -e {q} ] || [ -L {q} ]; then n=$(head -c1 {q} 2>/dev/null | wc -c); \
             if [ \"$n\" = 1 ]; then @P@ ESCAPED \"read \"{q}; else @P@ HELD {q}\" is there but cannot be read (or is \
             the empty stand-in)\"; fi; else @P@ HELD {q}\" does not exist inside\"; fi"
        ),
    );
}

/// The whole probe script of the main session (the port floor has a session of its own).
pub fn script(t: &Targets, nonce: &str) -> Script {
    let mut s = Script::new(nonce);
    let creds = credential_files(&t.home);
    if creds.is_empty() {
        s.probe("credentials", "@P@ SKIPPED \"none of the catalogue's credential files is in this home\"");
    }
    for p in &creds {
        file_probe(&mut s, "credentials", p);
    }
    file_probe(&mut s, "state-directory", &t.state_dir.join("records.key"));
    for p in slurm_channels() {
        file_probe(&mut s, "slurm-auth", &p);
    }
    let values = t.canaries.iter().map(|(_, v)| format!("-e '{v}'")).collect::<Vec<_>>().join(" ");
    let names = t.canaries.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" ");
    s.probe(
        "environment",
        &format!(
            "got=$(env | grep -F {values} | sed 's/=.*//' | tr '\\n' ' '); if [ -n \"$got\" ]; then @P@ ESCAPED \
             \"reached the jail: $got\"; else @P@ HELD \"scrubbed: {names}\"; fi"
        ),
    );
    s.probe(
        "host-loopback",
        &format!(
            "if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then @P@ ESCAPED \"connected to the host's \
             127.0.0.1:{port}\"; else @P@ HELD \"the host's 127.0.0.1:{port} cannot be reached\"; fi",
            port = t.port
        ),
    );
    match t.address {
        Some(a) => s.probe(
            "host-address",
            &format!(
                "if (exec 3<>/dev/tcp/{a}/{port}) 2>/dev/null; then @P@ ESCAPED \"connected to the host's own \
                 {a}:{port}\"; else @P@ HELD \"the host's own {a}:{port} cannot be reached\"; fi",
                port = t.port
            ),
        ),
        None => s.probe("host-address", "@P@ SKIPPED \"this host has no IPv4 address but loopback\""),
    }
    let (pid, comm) = (t.host_pid, &t.host_comm);
    s.probe(
        "host-process",
        &format!(
            "if kill -0 {pid} 2>/dev/null && [ \"$(cat /proc/{pid}/comm 2>/dev/null)\" = '{comm}' ]; then @P@ ESCAPED \
             \"the launcher (pid {pid}) can be signalled\"; else @P@ HELD \"the launcher (host pid {pid}) cannot be seen \
             or signalled\"; fi"
        ),
    );
    write_probes(&mut s, &t.home);
    // Last: it may wait two minutes, and every other probe has answered by then.
    job_probe(&mut s, &t.job_out, &t.state_dir, &t.canaries);
    s
}

/// The user's startup files (each, as the host's file: a session's own copy, `home.seed`, is
/// not the file) and startup directories, for writing; nothing is written to a file, and a
/// file made in a directory is removed at once.
fn write_probes(s: &mut Script, home: &Path) {
    let mut any = false;
    for rel in STARTUP_FILES {
        let p = home.join(rel);
        let Ok(m) = std::fs::metadata(&p) else { continue };
        any = true;
        let (q, ino) = (quote(&p), m.ino());
        s.probe(
            "write-outside",
            &format!(
                "if (: >> {q}) 2>/dev/null; then if [ \"$(stat -L -c %i {q})\" = {ino} ]; then @P@ ESCAPED {q}\" can be \
                 written\"; else @P@ HELD \"only the session's own copy of \"{q}\" can be written\"; fi; else @P@ HELD \
                 {q}\" cannot be written\"; fi"
            ),
        );
    }
    for rel in STARTUP_DIRS {
        let p = home.join(rel);
        if !p.is_dir() {
            continue;
        }
        any = true;
        let q = quote(&p);
        s.probe(
            "write-outside",
            &format!(
                "if f=$(mktemp -p {q} .agent-sandbox-probe.XXXXXX 2>/dev/null); then rm -f \"$f\"; @P@ ESCAPED \"a file \
                 can be made in \"{q}; else @P@ HELD \"no file can be made in \"{q}; fi"
            ),
        );
    }
    if !any {
        s.probe("write-outside", "@P@ SKIPPED \"this home has none of the shell startup files or PATH directories\"");
    }
}

/// Where Slurm answers, a job submitted from inside (through the session's `sbatch`) must run
/// in the jail on the node: its PID 1 the jail's (under userns: Landlock has no PID
/// namespace), no authentication channel it can read or connect to, the state directory's key
/// unreadable, the launcher's planted secrets not there, and the jail's variables set (a job
/// outside has none). Waits for it at most two minutes, then cancels it and reports skipped.
/// Its output goes to `out` (named with the run's nonce), and only output that carries the
/// token the probe shell passed the job in its environment counts: no file an earlier run
/// left, or another session wrote, decides it.
pub fn job_probe(s: &mut Script, out: &Path, state_dir: &Path, canaries: &[(&'static str, String)]) {
    // Quoted for the job's script, which is itself single-quoted here.
    let key = quote(&state_dir.join("records.key")).replace('\'', "'\\''");
    let o = quote(out);
    let values = canaries.iter().map(|(_, v)| format!("-e {v}")).collect::<Vec<_>>().join(" ");
    let channels = SLURM_CHANNELS.join(" ");
    s.probe(
        "job-reentry",
        &format!(
            "if ! squeue -h >/dev/null 2>&1; then @P@ SKIPPED \"no Slurm answers here\"; \
             elif ! tok=$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \\n') || [ -z \"$tok\" ]; then \
             @P@ SKIPPED \"no random token for the job (/dev/urandom)\"; \
             elif ! id=$(ASBPROBE_JOB=$tok sbatch --parsable -J agent-sandbox-probe -o {o} --wrap \
             'echo JOB-PID1=$(cat /proc/1/comm) JOB-IN=${{AGENT_SANDBOX:-no}} JOB-TOKEN=${{ASBPROBE_JOB:-}}; \
             s=\"${{PATH%%:*}}\"; for f in {channels} {key}; do if [ -S \"$f\" ]; then \
             (exec -a agent-sandbox-probe-unix \"$s/squeue\" \"$f\") 2>/dev/null && echo JOB-SEES=$f; \
             elif head -c1 \"$f\" >/dev/null 2>&1; then echo JOB-SEES=$f; fi; done; \
             env | grep -q -F {values} && echo JOB-SEES=env; echo JOB-END' 2>&1); then \
             @P@ SKIPPED \"sbatch refused the job: $(echo $id | head -c 300)\"; \
             else id=\"${{id%%;*}}\"; i=0; while [ $i -lt 240 ] && ! grep -q \"JOB-TOKEN=$tok\" {o} 2>/dev/null; do \
             [ $((i % 10)) = 9 ] && [ -z \"$(squeue -h -j \"$id\" 2>/dev/null)\" ] && sleep 1 && break; \
             sleep 0.5; i=$((i+1)); done; \
             sleep 0.5; if ! grep -q \"JOB-TOKEN=$tok\" {o} 2>/dev/null || ! grep -q JOB-END {o}; then scancel \"$id\" 2>/dev/null; \
             @P@ SKIPPED \"job $id did not run its script within two minutes (cancelled; sacct -j $id says why)\"; \
             elif grep -q -e JOB-SEES -e JOB-IN=no {o} || {{ [ \"${{AGENT_SANDBOX_BACKEND:-}}\" != landlock ] && \
             ! grep -q JOB-PID1=agent-sandbox {o}; }}; then \
             @P@ ESCAPED \"the job ran outside the jail: $(tr '\\n' ' ' < {o})\"; \
             else @P@ HELD \"a job submitted from inside ran in the jail on its node\"; fi; fi"
        ),
    );
}

/// This host's first IPv4 address that is not loopback, if any.
fn host_address() -> Option<Ipv4Addr> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter_map(|i| i.address.and_then(|a| a.as_sockaddr_in().map(|s| s.ip())))
        .find(|ip| !ip.is_loopback())
}

/// A port of the floor (`netrules::floor`) the probe tries.
pub struct FloorPort {
    pub port: u16,
    pub class: &'static str,
    /// Ours, on every address, so that a connect the floor lets through succeeds. None where
    /// a service of the host listens there already (Slurm's daemons, a mail server). Either
    /// way the evidence is the jail's connect: a connection arriving here could be another
    /// self-test's, run at the same time.
    pub listener: Option<TcpListener>,
}

/// The TCP ports something listens on at this host (`/proc/net/tcp`, `tcp6`): read, not
/// connected to, so that finding a mail server is no port scan.
fn listening_ports() -> Vec<u16> {
    let mut ports = vec![];
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for line in text.lines().skip(1) {
            let mut w = line.split_whitespace();
            let (local, state) = (w.nth(1), w.nth(1));
            let port = local.and_then(|l| l.rsplit(':').next()).and_then(|p| u16::from_str_radix(p, 16).ok());
            if let (Some(p), Some("0A")) = (port, state) {
                ports.push(p);
            }
        }
    }
    ports
}

/// The floor's ports this host lets the probe try: each one this user can listen on (ports
/// below 1024 need root, or `net.ipv4.ip_unprivileged_port_start`), and each one a service
/// of the host already listens on.
pub fn floor_ports() -> Vec<FloorPort> {
    let listening = listening_ports();
    let mut out = vec![];
    for &(port, class, _) in crate::netrules::floor::PORT_FLOOR {
        match TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)) {
            Ok(l) => out.push(FloorPort { port, class, listener: Some(l) }),
            Err(_) if listening.contains(&port) => out.push(FloorPort { port, class, listener: None }),
            Err(_) => {}
        }
    }
    out
}

/// The port-floor probe: a connect from inside to each of `ports` on each of `addresses` (the
/// host's own, the jail's gateway where `--host-port` forwards to the host's loopback, and
/// loopback, the host's under Landlock); any that connects is an escape.
pub fn port_floor_probe(s: &mut Script, addresses: &[IpAddr], ports: &[FloorPort]) {
    if ports.is_empty() {
        s.probe(
            "port-floor",
            "@P@ SKIPPED \"no port of the floor could be listened on, and no service listens on one\"",
        );
        return;
    }
    let mut body = String::from("fl=; t=; command -v timeout >/dev/null 2>&1 && t='timeout 10'\n");
    for a in addresses {
        for f in ports {
            body.push_str(&format!(
                "if $t /bin/bash --norc --noprofile -c 'exec 3<>/dev/tcp/{a}/{0}' 2>/dev/null; then \
                 fl=\"$fl {a}:{0}({1})\"; fi\n",
                f.port, f.class
            ));
        }
    }
    let listed = ports.iter().map(|f| f.port.to_string()).collect::<Vec<_>>().join(",");
    let at = addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ");
    let mut classes: Vec<&str> = ports.iter().map(|f| f.class).collect();
    classes.dedup();
    let untried: Vec<String> = crate::netrules::floor::floor_ports()
        .filter(|p| !ports.iter().any(|f| f.port == *p))
        .map(|p| p.to_string())
        .collect();
    let untried = match untried.is_empty() {
        true => String::new(),
        false => format!("; not tried: {} (this user cannot listen there and nothing does)", untried.join(",")),
    };
    body.push_str(&format!(
        "if [ -n \"$fl\" ]; then @P@ ESCAPED \"connected to$fl\"; else @P@ HELD \"ports {listed} ({}) at {at} cannot be \
         reached{untried}\"; fi",
        classes.join(", ")
    ));
    s.probe("port-floor", &body);
}

/// One session running `script`, with `session_args` (the options given before `doctor`) and
/// the canaries planted; its probes' outcomes, or why there are none.
fn run_session(
    exe: &Path,
    session_args: &[std::ffi::OsString],
    script: &Script,
    canaries: &[(&'static str, String)],
) -> Result<Vec<Outcome>, String> {
    use std::io::Write;
    let mut cmd = std::process::Command::new(exe);
    // The script on stdin, not on the command line: without a PID namespace (Landlock) other
    // processes of the user read every command line, and the nonce is in it.
    cmd.args(session_args).args(["-q", "run", "--", "/bin/bash", "--norc", "--noprofile", "-c", "eval \"$(cat)\""]);
    // What would run before the script (a startup file named by a variable, exported
    // functions, a preloaded library, trace hooks) stays out of the probes' shell.
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if STARTUP_VARS.contains(&name.as_ref()) || name.starts_with("BASH_FUNC_") || name.starts_with("LD_") {
            cmd.env_remove(&k);
        }
    }
    for (k, v) in canaries {
        cmd.env(k, v);
    }
    cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot start a session: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A session that ends before reading it is reported below, by the probes missing.
        let _ = stdin.write_all(script.text().as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| format!("the session: {e}"))?;
    script.outcomes(&String::from_utf8_lossy(&out.stdout)).map_err(|why| {
        let mut err = String::from_utf8_lossy(&out.stderr).into_owned();
        err.truncate(4000);
        format!("{why} (the session: {}):\n{err}", out.status)
    })
}

/// This user's home as the launcher sees it: the password database's, not `$HOME`.
fn home() -> PathBuf {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/"))
}

fn read_small(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

/// Runs the probes, prints a line per probe and the summary; 0 when every probe held, 1 when
/// one escaped, 2 when the probes could not all be made.
pub fn run(session_args: &[std::ffi::OsString]) -> i32 {
    match attack(session_args) {
        Ok(found) => report(&found, session_args),
        Err(e) => {
            eprintln!("agent-sandbox: doctor --attack: {e}");
            2
        }
    }
}

fn attack(session_args: &[std::ffi::OsString]) -> Result<Vec<Outcome>, String> {
    let home = home();
    let env: Vec<(String, String)> = std::env::vars().collect();
    let state_dir = crate::host::real_location(&crate::host::state_dir_as_named(&env, &home));
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    // What the probes print is stamped with it: the job ports' random source.
    let nonce = crate::random::hex::<16>().map_err(|e| format!("no nonce for the probes: {e}"))?;
    let canaries = canaries(&nonce);
    let address = host_address();
    // The port floor first, in a short session of its own: its listeners are up only for it
    // (a Slurm daemon starting meanwhile could not bind its port).
    let mut floor = Script::new(&nonce);
    let ports = floor_ports();
    let mut at: Vec<IpAddr> = address.into_iter().map(IpAddr::V4).collect();
    at.extend([IpAddr::V4(crate::netrules::addr::GATEWAY_V4), IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    port_floor_probe(&mut floor, &at, &ports);
    let mut found = run_session(&exe, session_args, &floor, &canaries)?;
    drop(ports);
    // A listener on the host's loopback and its own addresses, which no jail may reach.
    let listener = TcpListener::bind("0.0.0.0:0").map_err(|e| format!("cannot listen for the network probes: {e}"))?;
    let cwd = std::env::current_dir().map_err(|e| format!("cannot tell the current directory: {e}"))?;
    let targets = Targets {
        home,
        state_dir,
        host_pid: std::process::id(),
        host_comm: read_small("/proc/self/comm"),
        port: listener.local_addr().map(|a| a.port()).unwrap_or(0),
        address,
        canaries,
        job_out: cwd.join(format!("agent-sandbox-probe-job.{nonce}.out")),
    };
    let main = script(&targets, &nonce);
    let result = run_session(&exe, session_args, &main, &targets.canaries);
    // The job's output, however the session ended (cut short, or the job cancelled).
    let _ = std::fs::remove_file(&targets.job_out);
    found.extend(result?);
    Ok(found)
}

fn report(found: &[Outcome], session_args: &[std::ffi::OsString]) -> i32 {
    let count = |v: Verdict| found.iter().filter(|o| o.verdict == v).count();
    let (escaped, skipped) = (count(Verdict::Escaped), count(Verdict::Skipped));
    for o in found {
        let v = match o.verdict {
            Verdict::Held => "held",
            Verdict::Escaped => "ESCAPED",
            Verdict::Skipped => "skipped",
        };
        println!("{v:8} {:16} {}", o.name, o.detail);
    }
    let opts = session_args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
    println!(
        "agent-sandbox doctor --attack: {} probes, {} held, {} escaped, {} skipped (kernel {}, options: {})",
        found.len(),
        count(Verdict::Held),
        escaped,
        skipped,
        read_small("/proc/sys/kernel/osrelease"),
        if opts.is_empty() { "none".to_string() } else { opts }
    );
    i32::from(escaped > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_probe_must_answer_once_with_the_runs_nonce() {
        let mut s = Script::new("n1");
        s.probe("a", "@P@ HELD \"x\"");
        s.probe("b", "@P@ ESCAPED \"y\"");
        assert!(s.text().contains("p 0:a HELD") && s.text().contains("p 1:b ESCAPED"), "{}", s.text());
        let got = s.outcomes("noise\nP n1 0:a HELD x\nP n1 1:b ESCAPED read\x1b[2J it\n").unwrap();
        assert_eq!((got[0].verdict, got[1].verdict), (Verdict::Held, Verdict::Escaped));
        assert_eq!(got[1].detail, "read?[2J it");
        // Another nonce, an unknown probe, a wrong name: not the probes' lines.
        let e = s.outcomes("P n2 0:a HELD x\nP n1 1:b HELD y\nP n1 7:z HELD\nP n1 0:b HELD").unwrap_err();
        assert!(e.contains("probe 0 (a)"), "{e}");
        let e = s.outcomes("P n1 0:a HELD x\nP n1 1:b HELD y\nP n1 1:b HELD y").unwrap_err();
        assert!(e.contains("answered twice"), "{e}");
    }

    #[test]
    fn the_script_names_each_probe_and_quotes_paths() {
        assert_eq!(quote(Path::new("/h/it's")), "'/h/it'\\''s'");
        let t = Targets {
            home: PathBuf::from("/nonexistent-home"),
            state_dir: PathBuf::from("/nonexistent-state"),
            host_pid: 42,
            host_comm: "agent-sandbox".into(),
            port: 4242,
            address: Some([10, 1, 2, 3].into()),
            canaries: canaries("abcd"),
            job_out: PathBuf::from("/p/out"),
        };
        let s = script(&t, "abcd");
        for probe in ["credentials", "state-directory", "environment", "host-loopback", "host-process", "host-address"]
        {
            assert!(s.names.contains(&probe), "{probe}: {}", s.text());
        }
        assert!(s.text().contains("-e 'ghp_abcdabcd"), "{}", s.text());
        let mut f = Script::new("abcd");
        let ports = [
            FloorPort { port: 2525, class: "mail", listener: None },
            FloorPort { port: 6817, class: "slurm", listener: None },
        ];
        port_floor_probe(&mut f, &[IpAddr::V4([10, 1, 2, 3].into())], &ports);
        assert!(f.text().contains("/dev/tcp/10.1.2.3/2525") && f.text().contains("ports 2525,6817 (mail, slurm)"));
    }
}
