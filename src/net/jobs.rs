//! The session's services for its own Slurm jobs (`--job-port`): a server in the jail on the
//! login node (a Dask scheduler, a controller) that the project's jobs on compute nodes
//! connect to. The launcher binds one listener per jail port on the login node's
//! cluster-facing address (a port the kernel picks, so sessions never collide) before the
//! jail exists, so the jail's environment can name it; the supervisor then admits a
//! connection only from a node that runs a job of the project at that moment, asked of Slurm
//! (`chaperon::nodes`) and kept for a few seconds, and brings it into the jail like
//! `--publish`. The listeners close with the session.

use chaperon::nodes::{Asker, Running};
use chaperon::scope::{Registry, Scope};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How long Slurm's answer of where the jobs run is used for any peer.
const FRESH: Duration = Duration::from_secs(5);
/// A peer not in the answer asks Slurm again, but not sooner than this after the last time
/// (a scan costs a query a second), unless a job of the project started on a node since:
/// `exec --job` marks the project's events file then, so a new job is admitted at once.
const RECHECK: Duration = Duration::from_secs(1);
/// File times come from the kernel's coarse clock, a tick behind the one we read.
const CLOCK_SLACK: Duration = Duration::from_millis(50);

/// What the supervisor serves: each jail port's listener, and who may connect.
pub struct JobServices {
    pub listeners: Vec<(u16, TcpListener)>,
    pub admission: Admission,
    /// The session's secret: the jobs' supervisors prove they hold it (it travels in the job
    /// directory, which only the user reads), and the listener proves it back.
    pub secret: Secret,
}

/// Bytes of the secret and of each proof.
const PROOF_LEN: usize = 32;
/// How long a job waits for the listener's proof (the listener asks Slurm first, which may
/// take its 5 s).
const PROOF_WAIT: Duration = Duration::from_secs(10);
/// How long the listener waits for a job's proof: a job sends it as it connects.
const JOB_PROOF_WAIT: Duration = Duration::from_secs(3);

/// A session's job-port secret: 32 random bytes, shown as hex only in the job directory.
#[derive(Clone)]
pub struct Secret([u8; PROOF_LEN]);

/// Who proves: each side sends a different proof, so that one side's cannot be replayed as
/// the other's.
#[derive(Clone, Copy)]
enum Side {
    Job,
    Listener,
}

impl Secret {
    pub fn new() -> Result<Secret, String> {
        use ring::rand::SecureRandom;
        let mut b = [0u8; PROOF_LEN];
        ring::rand::SystemRandom::new()
            .fill(&mut b)
            .map_err(|_| "no randomness for the job ports' secret".to_string())?;
        Ok(Secret(b))
    }

    pub fn from_hex(h: &str) -> Option<Secret> {
        let h = h.trim();
        if h.len() != 2 * PROOF_LEN || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut b = [0u8; PROOF_LEN];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Secret(b))
    }

    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The session's HMAC key (the session network signs its own messages with it).
    pub(crate) fn key(&self) -> ring::hmac::Key {
        ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.0)
    }

    /// The HMAC key and the message a side's proof signs.
    fn signing(&self, side: Side) -> (ring::hmac::Key, &'static [u8]) {
        let what: &'static [u8] = match side {
            Side::Job => b"agent-sandbox job port: job",
            Side::Listener => b"agent-sandbox job port: listener",
        };
        (self.key(), what)
    }

    fn proof(&self, side: Side) -> [u8; PROOF_LEN] {
        let (key, what) = self.signing(side);
        let mut out = [0u8; PROOF_LEN];
        out.copy_from_slice(ring::hmac::sign(&key, what).as_ref());
        out
    }

    fn verify(&self, side: Side, got: &[u8]) -> bool {
        let (key, what) = self.signing(side);
        ring::hmac::verify(&key, what, got).is_ok()
    }
}

/// The job's side, on the compute node, before the jail's flow is relayed: its proof, then the
/// listener's, or the flow fails (a port some other process took after the session ended).
pub async fn prove_job(stream: &mut tokio::net::TcpStream, secret: &Secret) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(&secret.proof(Side::Job)).await?;
    let mut got = [0u8; PROOF_LEN];
    tokio::time::timeout(PROOF_WAIT, stream.read_exact(&mut got))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "the job port did not prove itself"))??;
    match secret.verify(Side::Listener, &got) {
        true => Ok(()),
        false => Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "not the session's job port")),
    }
}

/// The listener's side: the job's proof, read before anything else is asked.
pub async fn check_job(stream: &mut tokio::net::TcpStream, secret: &Secret) -> Result<(), String> {
    use tokio::io::AsyncReadExt;
    let mut got = [0u8; PROOF_LEN];
    match tokio::time::timeout(JOB_PROOF_WAIT, stream.read_exact(&mut got)).await {
        Ok(Ok(_)) if secret.verify(Side::Job, &got) => Ok(()),
        Ok(Ok(_)) => Err("it is no job of this session (its first bytes are not the session's proof)".into()),
        Ok(Err(_)) | Err(_) => Err("it sent no proof of being a job of this session".into()),
    }
}

/// The listener's proof, once the job is admitted.
pub async fn prove_listener(stream: &mut tokio::net::TcpStream, secret: &Secret) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    stream.write_all(&secret.proof(Side::Listener)).await
}

/// Which peers may connect: the nodes of the project's running jobs.
pub struct Admission {
    asker: Asker,
    registry: Registry,
    session: String,
    project: PathBuf,
    last: Mutex<Option<Asked>>,
}

/// Slurm's last answer of where the project's jobs run, and when it was asked (both clocks:
/// the monotonic one for its age, the wall one against the events file's mark).
type Asked = (Instant, SystemTime, Result<Running, String>);

impl JobServices {
    /// The outside address of each listener, by jail port.
    pub fn endpoints(&self) -> Vec<(u16, SocketAddr)> {
        self.listeners.iter().filter_map(|(p, l)| l.local_addr().ok().map(|a| (*p, a))).collect()
    }
}

/// Binds a listener for each of `ports` on `address` (empty: the address routed toward the
/// Slurm controller). The error says what to set.
pub fn bind(ports: &[u16], address: &str, admission: Admission, secret: Secret) -> Result<JobServices, String> {
    let ip = cluster_address(address, &admission.asker)?;
    if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() {
        return Err(format!(
            "net.job_address {ip} is no address compute nodes reach; set it to the login node's address on the \
             cluster network"
        ));
    }
    let mut listeners = vec![];
    for port in ports {
        let l = TcpListener::bind((ip, 0)).map_err(|e| format!("cannot listen on {ip} for job port {port}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| format!("job port {port}: {e}"))?;
        listeners.push((*port, l));
    }
    Ok(JobServices { listeners, admission, secret })
}

/// `net.job_address` (an address or a name), else the local address of the route toward the
/// controller: on a login node, the interface the compute nodes share with it.
pub fn cluster_address(address: &str, asker: &Asker) -> Result<IpAddr, String> {
    let fix = "set net.job_address in the site's admin.toml to the login node's address on the cluster network";
    if !address.trim().is_empty() {
        return chaperon::nodes::resolve(address.trim())
            .into_iter()
            .next()
            .ok_or_else(|| format!("net.job_address `{address}` does not resolve; {fix}"));
    }
    let controller = asker.controller().map_err(|e| format!("cannot find the cluster's address: {e}; {fix}"))?;
    local_address_toward(controller).map_err(|e| format!("no route to the controller {controller}: {e}; {fix}"))
}

/// The source address the host would use to reach `to` (a UDP connect sends nothing).
pub(crate) fn local_address_toward(to: IpAddr) -> std::io::Result<IpAddr> {
    let any: SocketAddr = if to.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
    let s = UdpSocket::bind(any)?;
    s.connect((to, 9))?;
    Ok(s.local_addr()?.ip())
}

impl Admission {
    pub fn new(asker: Asker, state_dir: &std::path::Path, session: &str, project: &std::path::Path) -> Admission {
        Admission {
            asker,
            registry: Registry::new(state_dir),
            session: session.to_string(),
            project: project.to_path_buf(),
            last: Mutex::new(None),
        }
    }

    /// The project as the plan has it (canonical): the one the scope records name.
    pub fn set_project(&mut self, project: &std::path::Path) {
        self.project = project.to_path_buf();
    }

    /// Whether `peer` is a node running a job of the project now: Ok(the node's name), or the
    /// reason it is refused. Blocks while Slurm is asked (call off the supervisor's loop).
    pub fn admit(&self, peer: IpAddr) -> Result<String, String> {
        let peer = canonical(peer);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let knows = |r: &Result<Running, String>| r.as_ref().is_ok_and(|m| m.contains_key(&peer));
        let marked = || std::fs::metadata(self.registry.events(&self.project)).and_then(|m| m.modified()).ok();
        let ask = match &*last {
            None => true,
            Some((at, wall, r)) => {
                at.elapsed() >= FRESH
                    || (!knows(r) && (at.elapsed() >= RECHECK || marked().is_some_and(|m| m + CLOCK_SLACK >= *wall)))
            }
        };
        if ask {
            let jobs = self.registry.jobs(Scope::Project, &self.session, &self.project);
            let wall = SystemTime::now();
            *last = Some((Instant::now(), wall, self.asker.running(&jobs).map_err(|e| e.to_string())));
        }
        match last.as_ref().map(|(_, _, r)| r) {
            Some(Ok(m)) => match m.get(&peer) {
                Some(node) => Ok(node.clone()),
                None if m.is_empty() => {
                    Err(format!("{peer} is not a node running a job of this project (none runs now)"))
                }
                None => {
                    let nodes: std::collections::BTreeSet<&str> = m.values().map(String::as_str).collect();
                    let nodes: Vec<&str> = nodes.into_iter().collect();
                    Err(format!(
                        "{peer} is not a node running a job of this project (they run on {})",
                        nodes.join(", ")
                    ))
                }
            },
            Some(Err(e)) => Err(format!("cannot tell where the project's jobs run ({e}): refused")),
            None => Err("cannot tell where the project's jobs run: refused".into()),
        }
    }
}

/// An IPv4 peer on a dual-stack listener shows as `::ffff:a.b.c.d`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_proves_the_secret_and_one_proof_is_not_the_other() {
        let s = Secret::new().unwrap();
        let back = Secret::from_hex(&s.hex()).unwrap();
        assert!(back.verify(Side::Job, &s.proof(Side::Job)) && back.verify(Side::Listener, &s.proof(Side::Listener)));
        assert!(!s.verify(Side::Listener, &s.proof(Side::Job)), "a job's proof replayed as the listener's");
        let other = Secret::new().unwrap();
        assert!(!other.verify(Side::Job, &s.proof(Side::Job)), "another session's secret");
        for bad in ["", "00", &"zz".repeat(32), &"00".repeat(33)] {
            assert!(Secret::from_hex(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_route_toward_a_local_address_starts_from_it() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(local_address_toward(lo).unwrap(), lo);
    }

    #[test]
    fn a_mapped_peer_is_its_ipv4_address() {
        assert_eq!(canonical("::ffff:203.0.113.2".parse().unwrap()), "203.0.113.2".parse::<IpAddr>().unwrap());
        assert_eq!(canonical("fd00::2".parse().unwrap()), "fd00::2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn without_slurm_every_peer_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let asker = Asker { bin: dir.path().join("no-slurm"), home: dir.path().into(), user: "u".into() };
        let a = Admission::new(asker, dir.path(), "s", dir.path());
        // No job in scope: no question to Slurm, and no node runs one.
        let e = a.admit("203.0.113.2".parse().unwrap()).unwrap_err();
        assert!(e.contains("none runs now"), "{e}");
        Registry::new(dir.path())
            .add(&chaperon::scope::Entry { job: 7, session: "s".into(), project: dir.path().into() })
            .unwrap();
        // Asked again at once: a job of the project started since (the events file's mark).
        chaperon::governor::mark(&Registry::new(dir.path()).events(dir.path()));
        let e = a.admit("203.0.113.2".parse().unwrap()).unwrap_err();
        assert!(e.contains("cannot tell where") && e.contains("squeue"), "{e}");
    }
}
