//! The session's services for its own Slurm jobs (`--job-port`): a server in the jail on the
//! login node (a Dask scheduler, a controller) that the project's jobs on compute nodes
//! connect to. The launcher binds one listener per jail port on the login node's
//! cluster-facing address (a port the kernel picks, so sessions never collide) before the
//! jail exists, so the jail's environment can name it; the supervisor then admits a
//! connection only from a node that runs a job of the project at that moment, asked of Slurm
//! (`chaperon::nodes`) and kept for a few seconds, and brings it into the jail like
//! `--publish`. The listeners close with the session.
//!
//! On a one-host cluster (a workstation or a VM running Slurm: the controller and every node
//! are this host) the cluster-facing address is loopback: the jobs run here and reach it, and
//! no other host does. Other users of the host reach it too; their connections are closed
//! before any challenge (`supervisor::pending`), and the proof and the admission hold as
//! elsewhere.

use crate::secret::Secret;
use crate::secret::LEN as PROOF_LEN;
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

/// How long a job waits for the listener's proof (the listener asks Slurm first, which may
/// take its 5 s).
const PROOF_WAIT: Duration = Duration::from_secs(10);
/// How long the listener waits for a job's proof: a job sends it one round trip after it
/// connects.
const JOB_PROOF_WAIT: Duration = Duration::from_secs(1);

/// Bytes of each side's nonce.
pub(crate) const NONCE: usize = 16;
const JOB_LABEL: &[u8] = b"agent-sandbox job port: job";
const LISTENER_LABEL: &[u8] = b"agent-sandbox job port: listener";

/// What both proofs of one connection cover: the listener's challenge, the job's nonce, and
/// the listener's address as the job dialled it (a proof made for one listener, or one
/// connection, proves nothing for another).
#[derive(Debug)]
pub struct Transcript {
    challenge: [u8; NONCE],
    nonce: [u8; NONCE],
    listener: SocketAddr,
}

impl Transcript {
    fn tag(&self, secret: &Secret, label: &[u8]) -> ring::hmac::Tag {
        secret.sign(&[label, &self.challenge, &self.nonce, self.listener.to_string().as_bytes()])
    }

    fn verify(&self, secret: &Secret, label: &[u8], got: &[u8]) -> bool {
        secret.verifies(&[label, &self.challenge, &self.nonce, self.listener.to_string().as_bytes()], got)
    }
}

pub(crate) fn random_nonce() -> std::io::Result<[u8; NONCE]> {
    crate::random::bytes::<NONCE>()
}

/// The job's side, on the compute node, before the jail's flow is relayed: the listener's
/// challenge answered with the session's proof, then the listener's proof checked, or the flow
/// fails (a port some other process took after the session ended).
pub async fn prove_job(
    stream: &mut tokio::net::TcpStream,
    secret: &Secret,
    listener: SocketAddr,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let silent = |_| std::io::Error::new(std::io::ErrorKind::TimedOut, "the job port did not prove itself");
    let mut challenge = [0u8; NONCE];
    tokio::time::timeout(PROOF_WAIT, stream.read_exact(&mut challenge)).await.map_err(silent)??;
    let t = Transcript { challenge, nonce: random_nonce()?, listener };
    let mut out = t.nonce.to_vec();
    out.extend_from_slice(t.tag(secret, JOB_LABEL).as_ref());
    stream.write_all(&out).await?;
    let mut got = [0u8; PROOF_LEN];
    tokio::time::timeout(PROOF_WAIT, stream.read_exact(&mut got)).await.map_err(silent)??;
    match t.verify(secret, LISTENER_LABEL, &got) {
        true => Ok(()),
        false => Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "not the session's job port")),
    }
}

/// The listener's side (at `here`): its challenge, then the job's proof, read before anything
/// else is asked.
pub async fn check_job(
    stream: &mut tokio::net::TcpStream,
    secret: &Secret,
    here: SocketAddr,
) -> Result<Transcript, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let challenge = random_nonce().map_err(|e| e.to_string())?;
    stream.write_all(&challenge).await.map_err(|e| format!("it left before the challenge: {e}"))?;
    let mut got = [0u8; NONCE + PROOF_LEN];
    match tokio::time::timeout(JOB_PROOF_WAIT, stream.read_exact(&mut got)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) | Err(_) => return Err("it sent no proof of being a job of this session".into()),
    }
    let (nonce, tag) = got.split_at(NONCE);
    let mut t = Transcript { challenge, nonce: [0u8; NONCE], listener: here };
    t.nonce.copy_from_slice(nonce);
    match t.verify(secret, JOB_LABEL, tag) {
        true => Ok(t),
        false => Err("it is no job of this session (its answer is not the session's proof)".into()),
    }
}

/// The listener's proof, once the job is admitted.
pub async fn prove_listener(
    stream: &mut tokio::net::TcpStream,
    secret: &Secret,
    t: &Transcript,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    stream.write_all(t.tag(secret, LISTENER_LABEL).as_ref()).await
}

/// Which peers may connect: the nodes of the project's running jobs.
pub struct Admission {
    asker: Asker,
    registry: Registry,
    session: String,
    project: PathBuf,
    last: Mutex<Option<Asked>>,
    /// The local cluster's name, once learnt: only the project's jobs recorded on it count.
    cluster: chaperon::session::ClusterName,
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

/// What a jail dials for a session's listener at `at`: `at`, except that in a jail loopback is
/// the jail's own, so a listener on the host's loopback (a one-host cluster) is named at the
/// jail's gateway, at its port; a job's supervisor takes a flow there for that listener.
pub fn seen_from_a_jail(at: SocketAddr) -> SocketAddr {
    match at.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => (crate::netrules::addr::GATEWAY_V4, at.port()).into(),
        IpAddr::V6(ip) if ip.is_loopback() => (crate::netrules::addr::GATEWAY_V6, at.port()).into(),
        _ => at,
    }
}

/// Binds a listener for each of `ports` on `address` (empty: the address routed toward the
/// Slurm controller). The error says what to set.
pub fn bind(ports: &[u16], address: &str, admission: Admission, secret: Secret) -> Result<JobServices, String> {
    let ip = cluster_address(address, &admission.asker)?.ip();
    let mut listeners = vec![];
    for port in ports {
        let l = TcpListener::bind((ip, 0)).map_err(|e| format!("cannot listen on {ip} for job port {port}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| format!("job port {port}: {e}"))?;
        listeners.push((*port, l));
    }
    Ok(JobServices { listeners, admission, secret })
}

/// Where the session's listeners (job ports, the session network's) bind: the address the
/// cluster's nodes reach this host at. Loopback only on a one-host cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterAddress {
    /// An address the cluster's other hosts route to this one.
    Routed(IpAddr),
    /// Loopback, where the controller and every node are this host (a workstation, a VM
    /// running Slurm): the jobs run here, and reach it; no other host does.
    OneHost(IpAddr),
}

impl ClusterAddress {
    pub fn ip(self) -> IpAddr {
        match self {
            ClusterAddress::Routed(ip) | ClusterAddress::OneHost(ip) => ip,
        }
    }
}

const ADDRESS_FIX: &str =
    "set net.job_address in the site's admin.toml to the login node's address on the cluster network";

/// `net.job_address` (an address or a name), else the local address of the route toward the
/// controller: on a login node, the interface the compute nodes share with it. Where that is
/// loopback (the controller is this host, its name resolving to 127.0.1.1 as Debian has it),
/// the nodes decide (`over_loopback`).
pub fn cluster_address(address: &str, asker: &Asker) -> Result<ClusterAddress, String> {
    let given = !address.trim().is_empty();
    let ip = if given {
        chaperon::nodes::resolve(address.trim())
            .into_iter()
            .next()
            .ok_or_else(|| format!("net.job_address `{address}` does not resolve; {ADDRESS_FIX}"))?
    } else {
        let controller =
            asker.controller().map_err(|e| format!("cannot find the cluster's address: {e}; {ADDRESS_FIX}"))?;
        local_address_toward(controller)
            .map_err(|e| format!("no route to the controller {controller}: {e}; {ADDRESS_FIX}"))?
    };
    if ip.is_unspecified() || ip.is_multicast() {
        return Err(format!("{ip} is no address compute nodes reach; {ADDRESS_FIX}"));
    }
    if !ip.is_loopback() {
        return Ok(ClusterAddress::Routed(ip));
    }
    let nodes = asker.nodes().map_err(|e| format!("cannot tell where the cluster's nodes are: {e}; {ADDRESS_FIX}"))?;
    over_loopback(ip, given, &nodes, chaperon::nodes::resolve, local_address_toward)
}

/// The cluster address where `ip` (given as `net.job_address`, or the route toward the
/// controller) is loopback: loopback itself when every node is this host (a one-host
/// cluster); else, unless it was given, the route toward the first node elsewhere, whose
/// jobs could never reach this host's loopback.
fn over_loopback(
    ip: IpAddr,
    given: bool,
    nodes: &[(String, String)],
    resolve: impl Fn(&str) -> Vec<IpAddr>,
    toward: impl Fn(IpAddr) -> std::io::Result<IpAddr>,
) -> Result<ClusterAddress, String> {
    if nodes.is_empty() {
        return Err(format!("the controller is this host at {ip}, and the cluster lists no nodes; {ADDRESS_FIX}"));
    }
    for (name, addr) in nodes {
        let ips = resolve(addr);
        let elsewhere = match ips.iter().find(|a| !on_this_host(**a, &toward)) {
            Some(a) => *a,
            None if ips.is_empty() => {
                return Err(format!("node {name}'s address `{addr}` does not resolve here; {ADDRESS_FIX}"))
            }
            None => continue,
        };
        if given {
            return Err(format!(
                "net.job_address {ip} is loopback, but node {name} ({elsewhere}) is another host; {ADDRESS_FIX}"
            ));
        }
        return match toward(elsewhere) {
            Ok(via) if !(via.is_loopback() || via.is_unspecified()) => Ok(ClusterAddress::Routed(via)),
            Ok(via) => Err(format!("the route toward node {name} ({elsewhere}) starts at {via}; {ADDRESS_FIX}")),
            Err(e) => Err(format!("no route to node {name} ({elsewhere}): {e}; {ADDRESS_FIX}")),
        };
    }
    Ok(ClusterAddress::OneHost(ip))
}

/// Whether `ip` is this host's: loopback, or one of its addresses (the route toward an
/// address of the host's own starts at that address).
fn on_this_host(ip: IpAddr, toward: impl Fn(IpAddr) -> std::io::Result<IpAddr>) -> bool {
    ip.is_loopback() || toward(ip).is_ok_and(|src| src == ip)
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
            cluster: Default::default(),
        }
    }

    /// The local cluster's name (tried again while unknown). A job recorded on another
    /// cluster (a home shared by two) has an id that names another job here.
    fn cluster(&self) -> Option<&str> {
        let a = &self.asker;
        self.cluster.get(&a.bin, &a.home, &a.user)
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
        let knows =
            |r: &Result<Running, String>| r.as_ref().is_ok_and(|m| node_of(m, peer, local_address_toward).is_some());
        let marked = || std::fs::metadata(self.registry.events(&self.project)).and_then(|m| m.modified()).ok();
        let ask = match &*last {
            None => true,
            Some((at, wall, r)) => {
                at.elapsed() >= FRESH
                    || (!knows(r) && (at.elapsed() >= RECHECK || marked().is_some_and(|m| m + CLOCK_SLACK >= *wall)))
            }
        };
        if ask {
            let jobs = self.registry.jobs(Scope::Project, &self.session, &self.project, self.cluster());
            let wall = SystemTime::now();
            *last = Some((Instant::now(), wall, self.asker.running(&jobs).map_err(|e| e.to_string())));
        }
        match last.as_ref().map(|(_, _, r)| r) {
            Some(Ok(m)) => match node_of(m, peer, local_address_toward) {
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

/// The node `peer` is among those running the project's jobs: by its address; a loopback
/// peer (a job on a one-host cluster calls from this host) is a node that is this host,
/// whatever address Slurm has for it (127.0.1.1, the host's own).
fn node_of(running: &Running, peer: IpAddr, toward: impl Fn(IpAddr) -> std::io::Result<IpAddr>) -> Option<&String> {
    running.get(&peer).or_else(|| match peer.is_loopback() {
        true => running.iter().find(|(ip, _)| on_this_host(**ip, &toward)).map(|(_, node)| node),
        false => None,
    })
}

/// An IPv4 peer on a dual-stack listener shows as `::ffff:a.b.c.d`.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair() -> (tokio::net::TcpStream, tokio::net::TcpStream, SocketAddr) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        let c = tokio::net::TcpStream::connect(at).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s, at)
    }

    #[tokio::test]
    async fn each_side_proves_the_secret_over_a_fresh_challenge() {
        let secret = Secret::new().unwrap();
        let (mut c, mut s, at) = pair().await;
        let sec = secret.clone();
        let job = tokio::spawn(async move { prove_job(&mut c, &sec, at).await });
        let t = check_job(&mut s, &secret, at).await.unwrap();
        prove_listener(&mut s, &secret, &t).await.unwrap();
        job.await.unwrap().unwrap();
        // Another session's secret: refused by the listener, and the job refuses its answer.
        let (mut c, mut s, at) = pair().await;
        let job = tokio::spawn(async move { prove_job(&mut c, &Secret::new().unwrap(), at).await });
        assert!(check_job(&mut s, &secret, at).await.unwrap_err().contains("no job of this session"));
        drop(s);
        assert!(job.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_recorded_proof_does_not_pass_a_new_challenge_or_another_listener() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let secret = Secret::new().unwrap();
        let (mut c, mut s, at) = pair().await;
        let sec = secret.clone();
        let job = tokio::spawn(async move { prove_job(&mut c, &sec, at).await });
        s.write_all(&[1u8; NONCE]).await.unwrap();
        let mut recorded = [0u8; NONCE + PROOF_LEN];
        s.read_exact(&mut recorded).await.unwrap();
        drop(s);
        let _ = job.await.unwrap();
        // Replayed: the listener's challenge is new.
        let (mut c, mut s, at) = pair().await;
        let replay = tokio::spawn(async move {
            let mut ch = [0u8; NONCE];
            c.read_exact(&mut ch).await.unwrap();
            c.write_all(&recorded).await.unwrap();
            c
        });
        assert!(check_job(&mut s, &secret, at).await.is_err());
        drop(replay.await.unwrap());
        // A proof made for one listener's address, checked by another.
        let (mut c, mut s, at) = pair().await;
        let sec = secret.clone();
        let job = tokio::spawn(async move { prove_job(&mut c, &sec, at).await });
        let elsewhere: SocketAddr = "203.0.113.1:40123".parse().unwrap();
        assert!(check_job(&mut s, &secret, elsewhere).await.is_err());
        drop(s);
        assert!(job.await.unwrap().is_err());
    }

    #[test]
    fn the_route_toward_a_local_address_starts_from_it() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(local_address_toward(lo).unwrap(), lo);
    }

    /// This host's addresses, for the tests: loopback and 192.0.2.2, where the route toward any
    /// other starts.
    fn toward(to: IpAddr) -> std::io::Result<IpAddr> {
        Ok(if to.is_loopback() { "127.0.0.1" } else { "192.0.2.2" }.parse().unwrap())
    }

    fn resolve(name: &str) -> Vec<IpAddr> {
        match name {
            "vm" => vec!["127.0.1.1".parse().unwrap()],
            "gone" => vec![],
            other => chaperon::nodes::resolve(other),
        }
    }

    fn nodes(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(n, a)| (n.to_string(), a.to_string())).collect()
    }

    #[test]
    fn loopback_is_the_cluster_address_only_where_every_node_is_this_host() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        // A workstation: the node named by the host's name (127.0.1.1), or by another of its
        // addresses.
        for list in [&[("vm", "vm")][..], &[("vm", "vm"), ("n2", "192.0.2.2"), ("n3", "127.0.0.3")]] {
            let got = over_loopback(lo, false, &nodes(list), resolve, toward);
            assert_eq!(got, Ok(ClusterAddress::OneHost(lo)), "{list:?}");
            assert_eq!(over_loopback(lo, true, &nodes(list), resolve, toward), Ok(ClusterAddress::OneHost(lo)));
        }
        // The controller's name resolves to loopback here, but a node is elsewhere: the route
        // toward it, or (net.job_address given as loopback) a refusal that names the node.
        let list = nodes(&[("vm", "vm"), ("c1", "203.0.113.7")]);
        let via: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(over_loopback(lo, false, &list, resolve, toward), Ok(ClusterAddress::Routed(via)));
        let e = over_loopback(lo, true, &list, resolve, toward).unwrap_err();
        assert!(e.contains("node c1 (203.0.113.7) is another host") && e.contains("net.job_address"), "{e}");
        // What cannot be told is refused, with the fix.
        let e = over_loopback(lo, false, &nodes(&[("x", "gone")]), resolve, toward).unwrap_err();
        assert!(e.contains("does not resolve") && e.contains("net.job_address"), "{e}");
        assert!(over_loopback(lo, false, &[], resolve, toward).unwrap_err().contains("no nodes"));
    }

    #[test]
    fn a_loopback_peer_is_a_node_that_is_this_host() {
        let running: Running =
            [("127.0.1.1".parse().unwrap(), "vm".to_string()), ("203.0.113.7".parse().unwrap(), "c1".to_string())]
                .into();
        let at = |s: &str| node_of(&running, s.parse().unwrap(), toward).cloned();
        assert_eq!(at("127.0.0.1").as_deref(), Some("vm"), "a job on the one-host node calls from 127.0.0.1");
        assert_eq!(at("203.0.113.7").as_deref(), Some("c1"));
        assert_eq!(at("203.0.113.8"), None);
        // Only a loopback peer is taken for this host's node: another host's is by its address.
        let elsewhere: Running = [("203.0.113.7".parse().unwrap(), "c1".to_string())].into();
        assert_eq!(node_of(&elsewhere, "127.0.0.1".parse().unwrap(), toward), None, "no node here runs a job");
        assert_eq!(node_of(&running, "192.0.2.2".parse().unwrap(), toward), None);
    }

    #[test]
    fn a_loopback_listener_is_named_at_the_jails_gateway() {
        let at = |s: &str| seen_from_a_jail(s.parse().unwrap()).to_string();
        assert_eq!(at("127.0.0.1:40123"), "169.254.77.1:40123");
        assert_eq!(at("[::1]:40123"), "[fd00:a5b::1]:40123");
        assert_eq!(at("203.0.113.1:40123"), "203.0.113.1:40123");
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
            .add(&chaperon::scope::Entry {
                job: 7,
                session: "s".into(),
                project: dir.path().into(),
                cluster: None,
                dir: None,
            })
            .unwrap();
        // Asked again at once: a job of the project started since (the events file's mark).
        chaperon::governor::mark(&Registry::new(dir.path()).events(dir.path()));
        let e = a.admit("203.0.113.2".parse().unwrap()).unwrap_err();
        assert!(e.contains("cannot tell where") && e.contains("squeue"), "{e}");
    }
}
