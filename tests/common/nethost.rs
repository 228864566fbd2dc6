//! The network test hosts (tests/nethost): a network namespace `asbnet` with HTTP, HTTPS,
//! git, banners, echo and DNS servers, started once per test binary and gone with it.

use super::Jail;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The test hosts, started once per test binary; the server dies with this process (its
/// stdin is a pipe we hold).
pub struct NetHosts {
    pub workdir: PathBuf,
    _server: Mutex<Child>,
}

static HOSTS: OnceLock<Result<NetHosts, String>> = OnceLock::new();

fn start_hosts() -> Result<NetHosts, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let st = Command::new("bash").arg(root.join("tests/nethost/setup.sh")).arg("up").status();
    if !st.map(|s| s.success()).unwrap_or(false) {
        return Err("tests/nethost/setup.sh up failed (needs root, iproute2)".into());
    }
    let workdir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nethost");
    let _ = std::fs::remove_dir_all(&workdir);
    std::fs::create_dir_all(&workdir).map_err(|e| e.to_string())?;
    let mut child = Command::new("ip")
        .args(["netns", "exec", "asbnet", "python3"])
        .arg(root.join("tests/nethost/serve.py"))
        .arg(&workdir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start serve.py: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).map_err(|e| e.to_string())?;
    if line.trim() != "ready" {
        return Err(format!("serve.py did not come up: {line:?}"));
    }
    Ok(NetHosts { workdir, _server: Mutex::new(child) })
}

pub fn hosts() -> &'static NetHosts {
    match HOSTS.get_or_init(start_hosts) {
        Ok(h) => h,
        Err(e) => panic!("network test hosts: {e}"),
    }
}

/// A filtered-mode jail whose resolver forwards to the test DNS server, with `extra` policy
/// TOML (in `[net]`), and the test CA in the project.
pub fn net_jail(name: &str, extra: &str) -> Option<Jail> {
    let j = Jail::new(name)?;
    let h = hosts();
    let policy = j.rig.home.join(format!("t/{name}-policy.toml"));
    std::fs::write(
        &policy,
        format!("[net]\nmode = \"filtered\"\nfallback = \"strict\"\ndns = [\"198.51.100.53\"]\n{extra}"),
    )
    .unwrap();
    j.give(&[&policy]);
    let ca = std::fs::read_to_string(h.workdir.join("ca.pem")).expect("ca.pem");
    let j = j.project_file("ca.pem", &ca);
    Some(j.arg("--policy").arg(policy.to_str().unwrap()))
}

pub fn audit_lines(j: &Jail) -> Vec<serde_json::Value> {
    let log = j.rig.home.join(".local/state/agent-sandbox/audit.jsonl");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["event"] == "net_denied")
        .collect()
}
