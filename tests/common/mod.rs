//! The integration-test rig: runs the real agent-sandbox binary as an unprivileged test user
//! (the test process is root in CI and drops privileges for every launch), with canaries
//! planted where the jail must not reach, and small C probes built from tests/helpers.
//! Without root the tests skip with the reason printed; with CI set, a skip is a failure.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub mod nethost;

pub const USER: &str = "asbtest";
pub const OTHER: &str = "asbother";
pub const SSH_CANARY: &str = "CANARY-SSH-KEY-4f1e";
pub const AWS_CANARY: &str = "CANARY-AWS-9c2d";
pub const OTHER_CANARY: &str = "CANARY-OTHER-USER-77aa";
pub const ENV_CANARY: &str = "CANARY-TOKEN-5b5b";

/// Issue 32: names that say they hold a secret without the prefix or the leading underscore
/// the old scrub patterns needed (each gets a canary of its own, `env_canary(name)`).
pub const SECRET_NAMES: &[&str] = &[
    "API_KEY",
    "TOKEN",
    "SECRET_KEY",
    "PRIVATE_KEY",
    "CREDENTIALS",
    "SYSTEM_ACCESSTOKEN",
    "apiKey",
    "AUTH",
    "DB_PASS",
    "BW_SESSION",
    "SENTRY_DSN",
    "npm_config__auth",
    "ORG_GRADLE_PROJECT_signingKey",
    "OIDC_SOCK",
    // Red team 32 R7
    "SSHPASS",
    "LDAP_BIND_PW",
    "KEYSTOREPASS",
    "MNEMONIC",
    "SEED_PHRASE",
    "TOTP_SEED",
    "RECOVERY_CODES",
];

/// Names that mean nothing secret: they reach the jail as they are, with these values.
pub const HARMLESS_VARS: &[(&str, &str)] = &[
    ("XDG_SESSION_TYPE", "tty"),
    ("DESKTOP_SESSION", "ubuntu"),
    ("SESSION_MANAGER", "local/node1:@/tmp/.ICE-unix/1234,unix/node1:/tmp/.ICE-unix/1234"),
    ("TERM_SESSION_ID", "w0t0p0:6F2B1C3E-0000-4000-8000-000000000000"),
    ("GPG_TTY", "/dev/pts/0"),
    ("KEYTIMEOUT", "1"),
    ("HISTCONTROL", "ignoreboth"),
    ("PKG_CONFIG_PATH", "/opt/site/lib/pkgconfig"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("GIT_AUTHOR_NAME", "Ada Lovelace"),
    ("GPG_KEY", "7169605F62C751356D054A26A821E680E5FA6305"),
    ("SLURM_CPUS_PER_TASK", "4"),
    ("UPSTREAM_REPO", "ssh://git@github.com/org/repo.git"),
    ("MIRROR_REPO", "https://alice@example.org/org/repo.git"),
    ("PW_TEST_HTML_REPORT_OPEN", "never"),
    ("RANDOM_SEED", "42"),
    ("SALT", "na"),
];

/// The canary the variable `name` of `SECRET_NAMES` holds.
pub fn env_canary(name: &str) -> String {
    format!("CANARY-ENV-{name}-5c5c")
}

/// `prefix` then `body` padded with `0` to `len` characters: a key of a provider's form.
fn key_form(prefix: &str, body: &str, len: usize) -> String {
    format!("{prefix}{body}{}", "0".repeat(len.saturating_sub(body.len())))
}

/// Harmless names holding a value in a provider key's form (the value is its own canary).
pub fn key_form_vars() -> Vec<(&'static str, String)> {
    vec![
        ("NOTES", key_form("ghp_", "CnryGitHub1", 36)),
        ("LAST_COMMAND", format!("curl -H 'Authorization: Bearer {}'", key_form("sk-proj-", "CnryOpenAi2", 40))),
        ("OLD_REMOTE", format!("https://oauth2:{}@gitlab.example.org/g/p.git", key_form("glpat-", "CnryGitLab3", 20))),
        ("BOT", format!("xoxb-123456789012-{}", key_form("", "CnrySlack4", 24))),
        ("CLOUD_ID", "AKIAIOSFODNN7EXAMPLE".into()),
        ("HUB", key_form("hf_", "CnryHuggingFaceFive", 34)),
        ("DATABASE_URL", "postgres://app:CnryUrlPassword6@db.example.org:5432/prod".into()),
        // Red team 32 R7
        ("NGC", key_form("nvapi-", "CnryNvidia7", 64)),
        ("PYPI_UPLOAD", "pypi-AgEIcHlwaS5vcmcCnryPyPI8".into()),
        ("REPO", "https://CnryGhTokenUser9abcdef@github.com/o/r.git".into()),
        ("NOTIFY", "https://hooks.slack.com/services/T0/B0/CnrySlackHook10".into()),
        ("SAS", "https://a.blob.core.windows.net/c?sv=2022-11-02&sig=CnryAzureSas11abcdef%3D".into()),
        ("GIT_CONFIG_VALUE_0", "Authorization: Bearer CnryHeader12xyz".into()),
    ]
}

/// A launch with every variable of `SECRET_NAMES`, `key_form_vars` and `HARMLESS_VARS`.
pub fn with_env_canaries(mut j: Jail) -> Jail {
    for name in SECRET_NAMES {
        j = j.env(name, &env_canary(name));
    }
    for (name, value) in key_form_vars() {
        j = j.env(name, &value);
    }
    for (name, value) in HARMLESS_VARS {
        j = j.env(name, value);
    }
    j
}

/// Checks the output of `env` inside a launch `with_env_canaries`, except the names in
/// `passed` (given with `--env NAME`), which must be there.
pub fn assert_scrubbed_by_meaning(out: &Out, passed: &[&str]) {
    let lines: Vec<&str> = out.stdout.lines().collect();
    let has = |name: &str, value: &str| lines.contains(&format!("{name}={value}").as_str());
    let named = |name: &str| lines.iter().any(|l| l.starts_with(&format!("{name}=")));
    let mut wrong = vec![];
    for name in SECRET_NAMES {
        let canary = env_canary(name);
        match passed.contains(name) {
            true if !has(name, &canary) => wrong.push(format!("{name}: passed with --env, missing")),
            false if named(name) || out.both().contains(&canary) => wrong.push(format!("{name}: reached the jail")),
            _ => {}
        }
    }
    for (name, value) in key_form_vars() {
        match passed.contains(&name) {
            true if !has(name, &value) => wrong.push(format!("{name}: passed with --env, missing")),
            false if named(name) || out.both().contains(&value) => {
                wrong.push(format!("{name}: key form reached the jail"))
            }
            _ => {}
        }
    }
    for (name, value) in HARMLESS_VARS {
        if !has(name, value) {
            wrong.push(format!("{name}: harmless, missing"));
        }
    }
    // The jail's own variables are set after the scrub, whatever their words.
    if !named("AGENT_SANDBOX_SESSION") {
        wrong.push("AGENT_SANDBOX_SESSION: the jail's own, missing".into());
    }
    assert!(wrong.is_empty(), "{}\n{out}", wrong.join("\n"));
}

/// Scans every process readable from where it runs (its own excepted) for the canary given
/// in two halves as its arguments (so that the whole canary is in no process's arguments):
/// `/proc/PID/cmdline`, `environ` and every readable mapping through `mem`. Prints `READ PID
/// WHAT` for what it could read and `LEAK PID WHAT` where it found the canary.
pub const PROC_SCAN: &str = r#"import os, sys
needle = (sys.argv[1] + sys.argv[2]).encode()
me = os.getpid()
for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):
    if pid == me:
        continue
    for what in ('cmdline', 'environ'):
        try:
            with open(f'/proc/{pid}/{what}', 'rb') as f:
                data = f.read()
        except OSError:
            continue
        print(f'READ {pid} {what}')
        if needle in data:
            print(f'LEAK {pid} {what}')
    try:
        with open(f'/proc/{pid}/maps') as f:
            maps = f.read().splitlines()
        mem = open(f'/proc/{pid}/mem', 'rb', 0)
    except OSError:
        continue
    read = 0
    for line in maps:
        f = line.split()
        if 'r' not in f[1] or (len(f) > 5 and f[5].startswith('[v')):
            continue
        lo, hi = (int(x, 16) for x in f[0].split('-'))
        if hi - lo > 1 << 28:
            continue
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        read += len(data)
        if needle in data:
            print(f'LEAK {pid} mem {line}')
    if read:
        print(f'READ {pid} mem')
"#;

pub struct Rig {
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub bin: PathBuf,
    pub helpers: PathBuf,
}

static RIG: OnceLock<Result<Rig, String>> = OnceLock::new();

fn sh(cmd: &str) -> Result<(), String> {
    let st = Command::new("sh").arg("-c").arg(cmd).status().map_err(|e| e.to_string())?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("`{cmd}` failed: {st}"))
    }
}

fn lookup(user: &str) -> Option<(u32, u32, PathBuf)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 7 && f[0] == user).then(|| (f[2].parse().ok(), f[3].parse().ok(), PathBuf::from(f[5])))
        })
        .and_then(|(u, g, h)| Some((u?, g?, h)))
}

fn ensure_user(user: &str) -> Result<(u32, u32, PathBuf), String> {
    if let Some(u) = lookup(user) {
        return Ok(u);
    }
    sh(&format!("useradd -m -s /bin/bash {user}"))?;
    lookup(user).ok_or_else(|| format!("user {user} missing after useradd"))
}

fn plant(path: &Path, contents: &str, uid: u32, gid: u32, mode: u32) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        std::os::unix::fs::chown(parent, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
    }
    std::fs::write(path, contents).map_err(|e| e.to_string())?;
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())
}

fn build_helper(src: &str, out: &Path) -> Result<(), String> {
    build_with(src, out, &["-O1"])
}

fn build_with(src: &str, out: &Path, flags: &[&str]) -> Result<(), String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers").join(src);
    let st = Command::new("cc").args(flags).arg("-o").arg(out).arg(&src).status().map_err(|e| format!("cc: {e}"))?;
    st.success().then_some(()).ok_or_else(|| format!("cc {} failed", src.display()))
}

fn setup() -> Result<Rig, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("the integration tests run as root and drop to the test user; run tests/run.sh as root".into());
    }
    let (uid, gid, home) = ensure_user(USER)?;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o750)).map_err(|e| e.to_string())?;
    plant(&home.join(".ssh/id_ed25519"), SSH_CANARY, uid, gid, 0o600)?;
    plant(&home.join(".aws/credentials"), AWS_CANARY, uid, gid, 0o600)?;
    plant(&home.join(".gitconfig"), "[user]\n\tname = Test\n", uid, gid, 0o644)?;
    let (ouid, ogid, ohome) = ensure_user(OTHER)?;
    std::fs::set_permissions(&ohome, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    // World-readable on purpose: only the jail stands between the agent and this file.
    plant(&ohome.join("notes.txt"), OTHER_CANARY, ouid, ogid, 0o644)?;
    if !Path::new("/etc/munge").exists() {
        std::fs::create_dir_all("/etc/munge").map_err(|e| e.to_string())?;
        std::fs::write("/etc/munge/agent-sandbox-test-canary", "canary").map_err(|e| e.to_string())?;
    }
    let helpers = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helpers");
    std::fs::create_dir_all(&helpers).map_err(|e| e.to_string())?;
    for dir in helpers.ancestors() {
        if dir.as_os_str().len() > 1 {
            let _ = std::fs::metadata(dir).map(|m| {
                let mode = m.permissions().mode();
                if mode & 0o005 != 0o005 {
                    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o005));
                }
            });
        }
    }
    build_helper("probe.c", &helpers.join("probe"))?;
    build_helper("int80.c", &helpers.join("int80"))?;
    build_helper("refork.c", &helpers.join("refork"))?;
    build_with("thread_preload.c", &helpers.join("thread_preload.so"), &["-O1", "-shared", "-fPIC", "-pthread"])?;
    Ok(Rig { uid, gid, home, bin: PathBuf::from(env!("CARGO_BIN_EXE_agent-sandbox")), helpers })
}

/// The rig, or `None` (test skipped, reason printed). Under CI a skip panics.
pub fn rig() -> Option<&'static Rig> {
    match RIG.get_or_init(setup) {
        Ok(r) => Some(r),
        Err(why) => {
            if std::env::var_os("CI").is_some() {
                panic!("integration test cannot run in CI: {why}");
            }
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Out {
    pub fn both(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

pub struct Jail {
    pub rig: &'static Rig,
    pub project: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: Option<String>,
    cwd: Option<PathBuf>,
}

impl Jail {
    /// A jail with a fresh project directory `~/t/NAME` owned by the test user.
    pub fn new(name: &str) -> Option<Jail> {
        let rig = rig()?;
        let project = rig.home.join("t").join(name);
        let _ = std::fs::remove_dir_all(&project);
        std::fs::create_dir_all(&project).expect("create project");
        for p in [rig.home.join("t"), project.clone()] {
            std::os::unix::fs::chown(&p, Some(rig.uid), Some(rig.gid)).expect("chown project");
        }
        Some(Jail { rig, project, args: vec![], env: vec![], stdin: None, cwd: None })
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn stdin(mut self, s: &str) -> Self {
        self.stdin = Some(s.into());
        self
    }

    pub fn cwd(mut self, p: &Path) -> Self {
        self.cwd = Some(p.to_path_buf());
        self
    }

    /// Creates a file in the project (as the test user would have), before the run.
    pub fn project_file(self, rel: &str, contents: &str) -> Self {
        let p = self.project.join(rel);
        let mut dir = p.parent().map(Path::to_path_buf);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, contents).expect("write");
        std::os::unix::fs::chown(&p, Some(self.rig.uid), Some(self.rig.gid)).expect("chown");
        while let Some(d) = dir {
            if !d.starts_with(&self.project) {
                break;
            }
            std::os::unix::fs::chown(&d, Some(self.rig.uid), Some(self.rig.gid)).expect("chown");
            dir = d.parent().map(Path::to_path_buf);
        }
        self
    }

    /// The launcher as the test user, started by root through `wrapper` (a command that sets
    /// up the user's world first: `unshare -m ...`, `ip netns exec NAME`), which ends by
    /// running what follows it: `setpriv` drops to the test user before the launcher runs.
    pub fn command_wrapped(&self, wrapper: &[&str], jail_args: &[&str]) -> Command {
        let (first, rest) = wrapper.split_first().expect("a wrapper command");
        let mut c = self.with_user_env(first);
        c.args(rest).args([
            "setpriv".to_string(),
            format!("--reuid={}", self.rig.uid),
            format!("--regid={}", self.rig.gid),
            "--clear-groups".into(),
            "--".into(),
        ]);
        c.arg(&self.rig.bin).args(self.launcher_args(jail_args));
        c
    }

    /// The launcher as the test user with the user's supplementary groups (`setpriv
    /// --init-groups`): every other launch has none, as `Command::uid` clears them.
    pub fn command_with_groups(&self, jail_args: &[&str]) -> Command {
        let mut c = self.with_user_env("setpriv");
        c.args([
            format!("--reuid={}", self.rig.uid),
            format!("--regid={}", self.rig.gid),
            "--init-groups".into(),
            "--".into(),
        ]);
        c.arg(&self.rig.bin).args(self.launcher_args(jail_args));
        c
    }

    /// `program` as the test user in the project, with a clean environment plus the test's
    /// variables: the base of every launch, also through `script`, tmux or a copied binary.
    pub fn as_user(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = self.with_user_env(program);
        c.uid(self.rig.uid).gid(self.rig.gid);
        c
    }

    /// `program` (still as the caller) with the test user's clean environment and the project
    /// as its working directory.
    fn with_user_env(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .env("HOME", &self.rig.home)
            .env("USER", USER)
            .env("LOGNAME", USER)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(self.cwd.as_ref().unwrap_or(&self.project));
        c
    }

    /// The arguments every launch gets: the test helpers readable inside, then the test's.
    pub fn launcher_args(&self, jail_args: &[&str]) -> Vec<std::ffi::OsString> {
        let mut v: Vec<std::ffi::OsString> = vec!["--ro".into(), self.rig.helpers.clone().into()];
        v.extend(self.args.iter().map(Into::into));
        v.extend(jail_args.iter().map(Into::into));
        v
    }

    /// The launcher command as the test user, with a clean environment plus test variables.
    pub fn command(&self, jail_args: &[&str]) -> Command {
        let mut c = self.as_user(&self.rig.bin);
        c.args(self.launcher_args(jail_args));
        c
    }

    /// Makes paths the test created as root belong to the test user.
    pub fn give(&self, paths: &[&Path]) {
        for p in paths {
            std::os::unix::fs::chown(p, Some(self.rig.uid), Some(self.rig.gid)).expect("chown to the test user");
        }
    }

    /// `agent-sandbox -q ARGS run -- sh -c SCRIPT`, with a 60 s watchdog.
    pub fn run(&self, script: &str) -> Out {
        self.run_with(&[], script)
    }

    /// `run`, with launcher options before `run` (`--policy FILE`, `--net MODE`...).
    pub fn run_with(&self, opts: &[&str], script: &str) -> Out {
        let mut args = vec!["-q"];
        args.extend_from_slice(opts);
        args.extend(["run", "--", "sh", "-c", script]);
        let mut c = self.command(&args);
        self.output(&mut c)
    }

    pub fn output(&self, c: &mut Command) -> Out {
        self.output_within(c, Duration::from_secs(60))
    }

    /// `output` with another watchdog: the child is killed after `limit`.
    pub fn output_within(&self, c: &mut Command, limit: Duration) -> Out {
        c.stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = c.spawn().expect("spawn agent-sandbox");
        if let (Some(s), Some(mut w)) = (&self.stdin, child.stdin.take()) {
            std::io::Write::write_all(&mut w, s.as_bytes()).expect("stdin");
        }
        // Drain both pipes while waiting: a child blocked on a full pipe never exits.
        let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = vec![];
                if let Some(mut r) = r {
                    let _ = std::io::Read::read_to_end(&mut r, &mut buf);
                }
                buf
            })
        };
        let out_t = drain(child.stdout.take().map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
        let err_t = drain(child.stderr.take().map(|r| Box::new(r) as Box<dyn std::io::Read + Send>));
        let deadline = start + limit;
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break child.wait().expect("wait");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        use std::os::unix::process::ExitStatusExt;
        let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        Out {
            code,
            stdout: String::from_utf8_lossy(&out_t.join().unwrap_or_default()).into(),
            stderr: String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into(),
            elapsed: start.elapsed(),
        }
    }

    /// A process of the test user outside any jail (the target of kill/ptrace attempts);
    /// killed when the guard drops.
    pub fn host_sleeper(&self) -> Sleeper {
        let mut c = Command::new("sleep");
        c.arg("30").uid(self.rig.uid).gid(self.rig.gid);
        Sleeper(c.spawn().expect("spawn sleep"))
    }

    pub fn probe(&self) -> String {
        self.rig.helpers.join("probe").display().to_string()
    }

    /// `refork [CHAINS]`: chains of processes that each fork and exit at once (runs until killed).
    pub fn refork(&self) -> String {
        self.rig.helpers.join("refork").display().to_string()
    }

    /// A library that starts a thread of its own when loaded (`LD_PRELOAD`).
    pub fn thread_preload(&self) -> PathBuf {
        self.rig.helpers.join("thread_preload.so")
    }

    pub fn int80(&self) -> String {
        self.rig.helpers.join("int80").display().to_string()
    }
}

pub struct Sleeper(pub std::process::Child);

impl Sleeper {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Fails (never skips) if the Slurm test cluster (tests/cluster) is not answering.
pub fn cluster_up() {
    let out = Command::new("sinfo").args(["-h", "-o", "%T"]).output();
    let ok = out.as_ref().map(|o| o.status.success() && !o.stdout.is_empty()).unwrap_or(false);
    assert!(ok, "the Slurm test cluster is not running: as root, tests/cluster/start.sh --user {USER}");
}

/// A jail for a test that submits to the cluster.
pub fn slurm_jail(name: &str) -> Option<Jail> {
    let j = Jail::new(name)?;
    cluster_up();
    Some(j)
}

/// The one-host test cluster (`tests/cluster/start.sh --one-host`): its controller and only
/// node are this host at 127.0.1.1, as on a workstation whose host name resolves to loopback.
pub const ONE_HOST_CONF: &str = "/etc/slurm/tc1/slurm.conf";

/// A jail whose Slurm is the one-host cluster (`SLURM_CONF`, which the launcher keeps for the
/// real commands and the jail does not see). Fails (never skips) if that cluster is not up.
pub fn one_host_slurm_jail(name: &str) -> Option<Jail> {
    let j = Jail::new(name)?;
    let out = Command::new("sinfo").env("SLURM_CONF", ONE_HOST_CONF).args(["-h", "-o", "%T"]).output();
    let up = out.as_ref().is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    assert!(up, "the one-host test cluster is not running: as root, tests/cluster/start.sh --user {USER} --one-host");
    Some(j.env("SLURM_CONF", ONE_HOST_CONF))
}

/// Runs `PROC_SCAN` inside `j` for a canary held by variables the scrub removes (`GH_TOKEN`
/// by an old pattern, the others by their words); fails on a `LEAK`, returns the output.
pub fn scan_processes_for_a_scrubbed_canary(j: Jail) -> Out {
    let (first, second) = ("CANARY-PROC", "SCAN-1d1d");
    let j = j
        .project_file("scan.py", PROC_SCAN)
        .env("API_KEY", &format!("{first}{second}"))
        .env("SECRET_KEY", &format!("{first}{second}"))
        .env("GH_TOKEN", &format!("{first}{second}"));
    let out = j.run(&format!(
        "echo KEEPER=${{AGENT_SANDBOX_SLURM_KEEPER:-none}}; python3 scan.py {first} {second} && echo SCANNED"
    ));
    assert!(out.stdout.contains("SCANNED"), "{out}");
    assert!(!out.stdout.contains("LEAK"), "a process readable inside holds the canary:\n{out}");
    out
}

/// The test user's record key (`chaperon::seal`), as a jail that reached the state directory
/// could never read it: the tests act for such a jail (or for the user) when they forge or
/// reseal a record. Made here, owned by the user, where no session has made it yet.
pub fn user_record_key(rig: &Rig) -> chaperon::seal::Key {
    let state = rig.home.join(".local/state/agent-sandbox");
    let path = state.join(chaperon::seal::KEY_FILE);
    if !path.exists() {
        for d in [rig.home.join(".local"), rig.home.join(".local/state"), state.clone()] {
            if !d.exists() {
                std::fs::create_dir(&d).expect("state directory");
                std::os::unix::fs::chown(&d, Some(rig.uid), Some(rig.gid)).expect("chown");
            }
        }
        let bytes: Vec<u8> = (0..32).map(|i| (std::process::id() as u8).wrapping_mul(31).wrapping_add(i)).collect();
        let tmp = state.join(format!(".key-{}", std::process::id()));
        std::fs::write(&tmp, &bytes).expect("key");
        std::os::unix::fs::chown(&tmp, Some(rig.uid), Some(rig.gid)).expect("chown");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).expect("mode");
        let _ = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
    }
    let bytes = std::fs::read(&path).expect("the user's record key");
    chaperon::seal::Key::from_ring(&bytes).expect("whole keys in the user's record key")
}

/// A sealed text's data (`chaperon::seal`: 64 hex digits and a space first), and its seal;
/// the text whole and no seal where it has none (as written before records were sealed).
pub fn unseal_unchecked(bytes: &[u8]) -> (&[u8], Option<&[u8]>) {
    let sealed = bytes.len() > 64 && bytes[64] == b' ' && bytes[..64].iter().all(u8::is_ascii_hexdigit);
    match sealed {
        true => (&bytes[65..], Some(&bytes[..64])),
        false => (bytes, None),
    }
}

/// Writes `text` to `rel` below the test user's home: made as root, then the file and every
/// directory made for it given to the user.
pub fn home_file(j: &Jail, rel: &str, text: &str) -> PathBuf {
    let p = j.rig.home.join(rel);
    let mut made = vec![];
    let mut dir = p.parent();
    while let Some(d) = dir.filter(|d| !d.exists()) {
        made.push(d.to_path_buf());
        dir = d.parent();
    }
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    let mut all: Vec<&Path> = made.iter().map(PathBuf::as_path).collect();
    all.push(&p);
    j.give(&all);
    p
}

/// The text of `p` once it holds `needle`, or whatever it holds after 60 s (a job's output
/// file, written on a node while the test waits).
#[allow(dead_code)] // not every test binary waits for a file
pub fn wait_for_text(p: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        if text.contains(needle) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
