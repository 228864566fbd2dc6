//! The session network: the jails of one session (its own on the login node and each job's
//! on the compute nodes) reach one another's listening ports, as an MPI launch (`mpirun`'s
//! daemons call back to it, ranks call each other) or a Dask cluster (the scheduler calls its
//! workers) needs. Nothing else reaches them: a jail has no address any other host routes.
//!
//! Each jail claims an address of its own in `169.254.0.0/16` (link-local: no destination a
//! user could want is shadowed, and floors refuse it to everything else) as a file in the
//! session's registry, `<state>/net/<session>/`, which only the user's processes outside a
//! jail can write (the state directory is shared with the compute nodes, as the job
//! directories are). Its supervisor listens on the host, and the file says where (`Role`). A
//! flow of one jail to another's address is dialled to that listener by the caller's
//! supervisor, which proves the session's secret, and names the jail it calls, in a
//! challenge-response that the listener answers with its own proof; only then does the
//! listener bring the connection into its jail, from the caller's jail address, so that the
//! program there sees the peer it knows.

use crate::net::cluster::jobs::{random_nonce, NONCE};
use crate::secret::Secret;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The third octet of the gateway's addresses (`addr::GATEWAY_V4`): no jail claims them.
const GATEWAY_OCTET: u8 = 77;
/// Cloud metadata services (`169.254.169.254`, `169.254.170.2`): never a jail's, so a flow
/// to them stays floored and no jail receives another's metadata requests.
const METADATA_OCTETS: [u8; 2] = [169, 170];
/// How many random addresses a claim tries before it gives up (the space holds 64 000).
const CLAIM_TRIES: usize = 64;
/// Largest registry entry read.
const MAX_ENTRY: u64 = 128;
/// The name of the entry where the session writes its own host address (the jobs route
/// toward it to find theirs).
const LOGIN: &str = "login";
/// How long a caller waits for a claimed address to get its listener (a jail that has just
/// started, whose supervisor is still asking where it is).
const PUBLISH_WAIT: Duration = Duration::from_secs(5);
/// How long the listener waits for the caller's proof (a caller sends it one round trip after
/// it connects), and the caller for the listener's.
#[cfg(not(test))]
const PROOF_WAIT: Duration = Duration::from_secs(1);
#[cfg(test)]
const PROOF_WAIT: Duration = Duration::from_millis(300);
const MAC: usize = 32;
/// The caller's half: its nonce, its jail address, the jail address and port it calls, its
/// MAC. Naming the jail called binds the proof to that jail's listener: a listener the
/// registry no longer names rightly (a stale entry, a port another user took) cannot pass a
/// call on to a live jail of the session.
const DIAL_LEN: usize = NONCE + 4 + 4 + 2 + MAC;

/// Whether `ip` can be a jail's address on the session network.
pub fn is_peer(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            a == 169
                && b == 254
                && !matches!(c, 0 | GATEWAY_OCTET | 255)
                && !METADATA_OCTETS.contains(&c)
                && !matches!(d, 0 | 255)
        }
        IpAddr::V6(_) => false,
    }
}

/// The session's registry of jail addresses.
pub fn registry(state_dir: &Path, session: &str) -> PathBuf {
    state_dir.join("net").join(session)
}

/// A jail's address, claimed in the registry: the file it names exists (empty until the
/// supervisor knows where it listens) for as long as the jail; `path` is removed after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub address: Ipv4Addr,
    pub path: PathBuf,
}

/// Claims an unused address in `registry` (created, private to the user, if missing).
pub fn claim(registry: &Path) -> io::Result<Claim> {
    agent_sandbox_sys::file::make_dir(registry, 0o700)?;
    for _ in 0..CLAIM_TRIES {
        let b = crate::random::bytes::<2>()?;
        let address = Ipv4Addr::new(169, 254, b[0], b[1]);
        if !is_peer(address.into()) {
            continue;
        }
        let path = registry.join(address.to_string());
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(_) => return Ok(Claim { address, path }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!("no free address in {} after {CLAIM_TRIES} tries", registry.display())))
}

impl Claim {
    /// Says where the jail's listener is: written beside and renamed over the claim, so that a
    /// reader sees the whole line or the empty claim.
    pub fn publish(&self, at: SocketAddr) -> io::Result<()> {
        agent_sandbox_sys::file::write_atomic(&self.path, format!("{at}\n").as_bytes(), 0o600)
    }
}

/// The entry of the session's own host address.
pub fn login_path(registry: &Path) -> PathBuf {
    registry.join(LOGIN)
}

/// Records the session's own host address, which its jobs route toward (`own_address`).
pub fn publish_login(registry: &Path, at: IpAddr) -> io::Result<()> {
    agent_sandbox_sys::file::write_atomic(&registry.join(LOGIN), format!("{at}\n").as_bytes(), 0o600)
}

fn read_entry(path: &Path) -> io::Result<String> {
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let mut text = String::new();
    f.take(MAX_ENTRY).read_to_string(&mut text)?;
    Ok(text)
}

/// The session's own host address, as it recorded it (None: not recorded, or unreadable).
pub fn login_address(registry: &Path) -> Option<IpAddr> {
    read_entry(&registry.join(LOGIN)).ok()?.trim().parse().ok()
}

/// What the registry says of an address.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// No jail of the session has it.
    Missing,
    /// Claimed; its supervisor has not said where it listens yet.
    Pending,
    At(SocketAddr),
}

pub fn lookup(registry: &Path, ip: Ipv4Addr) -> Entry {
    if !is_peer(ip.into()) {
        return Entry::Missing;
    }
    match read_entry(&registry.join(ip.to_string())) {
        Err(_) => Entry::Missing,
        Ok(t) if t.trim().is_empty() => Entry::Pending,
        Ok(t) => t.trim().parse().map(Entry::At).unwrap_or(Entry::Missing),
    }
}

/// Removes `ip`'s entry if it still names `at`, where nothing listened (a jail killed with
/// its cleanup, by SIGKILL to its process group or a node's crash): the address is free again
/// and the registry can go with its session. A jail that claimed the address since has
/// written another listener, and keeps its entry.
pub fn forget_stale(registry: &Path, ip: Ipv4Addr, at: SocketAddr) {
    if lookup(registry, ip) == Entry::At(at) {
        let _ = std::fs::remove_file(registry.join(ip.to_string()));
    }
}

/// Where `ip`'s listener is, waiting a little for a jail that is starting (asynchronously: a
/// jail calling addresses that never get a listener holds no thread).
pub async fn locate(registry: &Path, ip: Ipv4Addr) -> io::Result<SocketAddr> {
    let until = tokio::time::Instant::now() + PUBLISH_WAIT;
    loop {
        let reg = registry.to_path_buf();
        let entry = tokio::task::spawn_blocking(move || lookup(&reg, ip)).await.map_err(io::Error::other)?;
        match entry {
            Entry::At(at) => return Ok(at),
            Entry::Missing => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("no jail of this session is {ip}"),
                ))
            }
            Entry::Pending if tokio::time::Instant::now() >= until => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the jail at {ip} never started listening"),
                ))
            }
            Entry::Pending => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

const DIAL_LABEL: &[u8] = b"agent-sandbox session network: call";
const ANSWER_LABEL: &[u8] = b"agent-sandbox session network: answer";

fn denied(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_string())
}

/// The caller's side, before any of the jail's bytes go: answers the listener's challenge
/// with the session's proof (naming its own jail address and the port it calls), and checks
/// the listener's proof in return.
pub async fn call(stream: &mut TcpStream, secret: &Secret, from: Ipv4Addr, to: SocketAddrV4) -> io::Result<()> {
    let timed_out = |_| io::Error::new(io::ErrorKind::TimedOut, "the session network's listener did not answer");
    let mut challenge = [0u8; NONCE];
    tokio::time::timeout(PROOF_WAIT, stream.read_exact(&mut challenge)).await.map_err(timed_out)??;
    let mut dial = Vec::with_capacity(DIAL_LEN);
    dial.extend_from_slice(&random_nonce()?);
    dial.extend_from_slice(&from.octets());
    dial.extend_from_slice(&to.ip().octets());
    dial.extend_from_slice(&to.port().to_be_bytes());
    let tag = secret.sign(&[DIAL_LABEL, &challenge, &dial]);
    dial.extend_from_slice(tag.as_ref());
    stream.write_all(&dial).await?;
    let mut answer = [0u8; MAC];
    tokio::time::timeout(PROOF_WAIT, stream.read_exact(&mut answer)).await.map_err(timed_out)??;
    match secret.verifies(&[ANSWER_LABEL, &challenge, &dial], &answer) {
        true => Ok(()),
        false => Err(denied("not a jail of this session")),
    }
}

/// Tries at a call: a listener at its cap of calls waiting from one address makes room for a
/// new one by closing the oldest (`supervisor::pending`), so a flood of silent connections
/// from the caller's address (another user's, on a shared login node) can close a call before
/// its proof is through. The call is then made again on a fresh connection.
const CALL_TRIES: usize = 4;

/// Connects to the listener at `at` and makes the call (see `call`), again when the
/// listener closed it before answering; the stream is the jail's, ready to relay.
pub async fn dial(at: SocketAddr, secret: &Secret, from: Ipv4Addr, to: SocketAddrV4) -> io::Result<TcpStream> {
    let mut tries = 0;
    loop {
        tries += 1;
        let mut stream = TcpStream::connect(at).await?;
        match call(&mut stream, secret, from, to).await {
            Ok(()) => return Ok(stream),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && tries < CALL_TRIES => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A call the listener admitted: from which jail address, to which port of its own jail.
#[derive(Debug, PartialEq, Eq)]
pub struct Admitted {
    pub from: Ipv4Addr,
    pub port: u16,
}

/// The listener's side (of the jail at `own`): its challenge, the caller's proof checked (and
/// that it calls this jail), its own proof sent.
pub async fn answer(stream: &mut TcpStream, secret: &Secret, own: Ipv4Addr) -> Result<Admitted, String> {
    let challenge = random_nonce().map_err(|e| e.to_string())?;
    stream.write_all(&challenge).await.map_err(|e| e.to_string())?;
    let mut dial = [0u8; DIAL_LEN];
    match tokio::time::timeout(PROOF_WAIT, stream.read_exact(&mut dial)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) | Err(_) => return Err("it sent no proof of being a jail of this session".into()),
    }
    let (signed, tag) = dial.split_at(DIAL_LEN - MAC);
    if !secret.verifies(&[DIAL_LABEL, &challenge, signed], tag) {
        return Err("it is no jail of this session (its proof is not the session's)".into());
    }
    let from = Ipv4Addr::new(signed[NONCE], signed[NONCE + 1], signed[NONCE + 2], signed[NONCE + 3]);
    let to = Ipv4Addr::new(signed[NONCE + 4], signed[NONCE + 5], signed[NONCE + 6], signed[NONCE + 7]);
    let port = u16::from_be_bytes([signed[NONCE + 8], signed[NONCE + 9]]);
    if to != own {
        return Err(format!("it calls the jail at {to}, not this one ({own}): a stale or taken entry passed on"));
    }
    if !is_peer(from.into()) || port == 0 {
        return Err(format!("its jail address {from} or port {port} is not one of the session network"));
    }
    let reply = secret.sign(&[ANSWER_LABEL, &challenge, &dial]);
    stream.write_all(reply.as_ref()).await.map_err(|e| e.to_string())?;
    Ok(Admitted { from, port })
}

/// What a jail's supervisor serves the session network with.
pub struct PeerNet {
    pub claim: Claim,
    pub registry: PathBuf,
    pub secret: Secret,
    pub role: Role,
}

/// Where a jail's listener is and who says so.
pub enum Role {
    /// The session's own jail on the login node: the launcher binds its listener on the
    /// session's cluster-facing address and says where it is when the session first uses Slurm
    /// (`Announce`), and hands it over here: no job can call it sooner, and a session that
    /// never submits asks Slurm nothing and listens nowhere.
    Login { listener: tokio::sync::oneshot::Receiver<std::net::TcpListener> },
    /// A job's jail: its supervisor listens on the address routed toward the login node's
    /// (as the session recorded it), or toward the controller where it recorded none.
    Job { asker: chaperon::nodes::Asker },
}

/// The session's own jail's announcement, made once, by the launcher, at the first Slurm call.
pub struct Announce {
    pub claim: Claim,
    pub registry: PathBuf,
    pub job_address: String,
    pub asker: chaperon::nodes::Asker,
    /// Where the listener goes once bound (the session's supervisor).
    pub to: tokio::sync::oneshot::Sender<std::net::TcpListener>,
}

impl Announce {
    pub fn run(self) -> Result<SocketAddr, String> {
        let ip = crate::net::cluster::jobs::cluster_address(&self.job_address, &self.asker)?.ip();
        let listener = std::net::TcpListener::bind((ip, 0)).map_err(|e| format!("cannot listen on {ip}: {e}"))?;
        let at = listener.local_addr().map_err(|e| e.to_string())?;
        self.to.send(listener).map_err(|_| "the jail's network supervisor is gone".to_string())?;
        publish_login(&self.registry, ip).map_err(|e| e.to_string())?;
        self.claim.publish(at).map_err(|e| e.to_string())?;
        Ok(at)
    }
}

/// The pair an `Announce` and its `Role::Login` share.
pub fn login_handover(
) -> (tokio::sync::oneshot::Sender<std::net::TcpListener>, tokio::sync::oneshot::Receiver<std::net::TcpListener>) {
    tokio::sync::oneshot::channel()
}

/// A job's jail's address on its host, toward its peers.
pub fn job_address(registry: &Path, asker: &chaperon::nodes::Asker) -> Result<IpAddr, String> {
    match login_address(registry) {
        Some(login) => toward_login(login),
        None => Ok(crate::net::cluster::jobs::cluster_address("", asker)?.ip()),
    }
}

/// The session's login address from the registry, without asking Slurm (None: not recorded).
pub fn job_address_quick(registry: &Path) -> Option<IpAddr> {
    toward_login(login_address(registry)?).ok()
}

/// The address of the route toward the session's `login` address. Loopback only where the
/// session's own is (a one-host cluster, whose jobs run on the session's host): elsewhere a
/// loopback listener would be this node's own, which no other host reaches.
fn toward_login(login: IpAddr) -> Result<IpAddr, String> {
    let ip = crate::net::cluster::jobs::local_address_toward(login).map_err(|e| e.to_string())?;
    if ip.is_unspecified() || ip.is_multicast() || (ip.is_loopback() && !login.is_loopback()) {
        return Err(format!("{ip} cannot be reached from the other nodes"));
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_addresses_are_link_local_outside_the_gateways_and_the_edges() {
        assert!(is_peer("169.254.1.1".parse().unwrap()));
        assert!(is_peer("169.254.200.254".parse().unwrap()));
        for not in [
            "169.254.77.1",
            "169.254.77.2",
            "169.254.0.5",
            "169.254.255.5",
            "169.254.3.0",
            "169.254.3.255",
            "169.254.169.254",
            "169.254.170.2",
        ] {
            assert!(!is_peer(not.parse().unwrap()), "{not}");
        }
        for not in ["10.1.2.3", "127.0.0.1", "fe80::1", "169.253.1.1"] {
            assert!(!is_peer(not.parse().unwrap()), "{not}");
        }
    }

    #[test]
    fn claims_are_distinct_private_and_found_once_published() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path(), "s1");
        let a = claim(&reg).unwrap();
        let b = claim(&reg).unwrap();
        assert_ne!(a.address, b.address);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&reg).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(lookup(&reg, a.address), Entry::Pending);
        let at: SocketAddr = "192.0.2.5:40123".parse().unwrap();
        a.publish(at).unwrap();
        assert_eq!(lookup(&reg, a.address), Entry::At(at));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        assert_eq!(rt.block_on(locate(&reg, a.address)).unwrap(), at);
        assert_eq!(lookup(&reg, Ipv4Addr::new(169, 254, 9, 9)), Entry::Missing);
        let missing = rt.block_on(locate(&reg, Ipv4Addr::new(169, 254, 9, 9))).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::ConnectionRefused);
        // Garbage in an entry is no address.
        std::fs::write(&b.path, "not an address\n").unwrap();
        assert_eq!(lookup(&reg, b.address), Entry::Missing);
        publish_login(&reg, "192.0.2.1".parse().unwrap()).unwrap();
        assert_eq!(login_address(&reg), Some("192.0.2.1".parse().unwrap()));
        // A one-host cluster's session records loopback: its jobs, on the same host, listen there.
        publish_login(&reg, "127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(job_address_quick(&reg), Some("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn a_stale_entry_is_forgotten_only_while_it_names_the_dead_listener() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path(), "s1");
        let c = claim(&reg).unwrap();
        let dead: SocketAddr = "192.0.2.5:40123".parse().unwrap();
        c.publish("192.0.2.5:40999".parse().unwrap()).unwrap();
        forget_stale(&reg, c.address, dead);
        assert!(c.path.exists(), "an entry naming another listener stays");
        c.publish(dead).unwrap();
        forget_stale(&reg, c.address, dead);
        assert!(!c.path.exists());
    }

    #[test]
    fn a_symlinked_entry_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path(), "s1");
        std::fs::create_dir_all(&reg).unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "192.0.2.7:1\n").unwrap();
        std::os::unix::fs::symlink(&target, reg.join("169.254.9.9")).unwrap();
        assert_eq!(lookup(&reg, Ipv4Addr::new(169, 254, 9, 9)), Entry::Missing);
    }

    const TO: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(169, 254, 5, 6), 80);

    #[tokio::test]
    async fn a_call_passed_on_to_another_jails_listener_is_refused() {
        // A stale entry's port, taken by someone who relays the handshake to a live jail of
        // the session: the call names the jail it meant, and the live one is another.
        let secret = Secret::new().unwrap();
        let (mut c, mut s) = pair().await;
        let sec = secret.clone();
        let caller = tokio::spawn(async move { call(&mut c, &sec, Ipv4Addr::new(169, 254, 3, 4), TO).await });
        let got = answer(&mut s, &secret, Ipv4Addr::new(169, 254, 9, 9)).await.unwrap_err();
        assert!(got.contains("not this one"), "{got}");
        drop(s);
        assert!(caller.await.unwrap().is_err());
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    #[tokio::test]
    async fn a_call_closed_before_its_answer_is_made_again_and_gets_through() {
        // The listener closes the first two connections as a flood would make it (at its cap
        // for the caller's address), then answers.
        let secret = Secret::new().unwrap();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        let sec = secret.clone();
        let listener = tokio::spawn(async move {
            for _ in 0..2 {
                let (s, _) = l.accept().await.unwrap();
                drop(s);
            }
            let (mut s, _) = l.accept().await.unwrap();
            answer(&mut s, &sec, *TO.ip()).await
        });
        let from = Ipv4Addr::new(169, 254, 3, 4);
        dial(at, &secret, from, TO).await.expect("the third try gets through");
        assert_eq!(listener.await.unwrap().unwrap(), Admitted { from, port: TO.port() });
        // Closed every time: the caller gives up after its tries, with the reason.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        let closer = tokio::spawn(async move {
            let mut n = 0;
            while let Ok(Ok((s, _))) = tokio::time::timeout(Duration::from_secs(2), l.accept()).await {
                drop(s);
                n += 1;
            }
            n
        });
        let e = dial(at, &secret, from, TO).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        assert_eq!(closer.await.unwrap(), CALL_TRIES);
    }

    #[tokio::test]
    async fn both_sides_prove_the_session_and_the_call_names_its_jail_and_port() {
        let secret = Secret::new().unwrap();
        let (mut c, mut s) = pair().await;
        let from = Ipv4Addr::new(169, 254, 3, 4);
        let sec = secret.clone();
        let to = SocketAddrV4::new(Ipv4Addr::new(169, 254, 5, 6), 8786);
        let caller = tokio::spawn(async move { call(&mut c, &sec, from, to).await });
        assert_eq!(answer(&mut s, &secret, *to.ip()).await.unwrap(), Admitted { from, port: 8786 });
        caller.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn another_sessions_secret_is_refused_both_ways() {
        let (mut c, mut s) = pair().await;
        let caller =
            tokio::spawn(async move { call(&mut c, &Secret::new().unwrap(), Ipv4Addr::new(169, 254, 3, 4), TO).await });
        let got = answer(&mut s, &Secret::new().unwrap(), *TO.ip()).await.unwrap_err();
        assert!(got.contains("no jail of this session"), "{got}");
        drop(s);
        assert!(caller.await.unwrap().is_err());
        // A listener with another secret: the caller refuses its answer.
        let (mut c, mut s) = pair().await;
        let mine = Secret::new().unwrap();
        let listener = tokio::spawn(async move {
            let mut dial = [0u8; DIAL_LEN];
            s.write_all(&[7u8; NONCE]).await.unwrap();
            s.read_exact(&mut dial).await.unwrap();
            s.write_all(&[0u8; MAC]).await.unwrap();
            s
        });
        let got = call(&mut c, &mine, Ipv4Addr::new(169, 254, 3, 4), TO).await.unwrap_err();
        assert_eq!(got.kind(), io::ErrorKind::PermissionDenied);
        drop(listener.await.unwrap());
    }

    #[tokio::test]
    async fn a_replayed_call_does_not_pass_a_new_challenge() {
        let secret = Secret::new().unwrap();
        // Record one genuine call.
        let (mut c, mut s) = pair().await;
        let sec = secret.clone();
        let caller = tokio::spawn(async move { call(&mut c, &sec, Ipv4Addr::new(169, 254, 3, 4), TO).await });
        let challenge = random_nonce().unwrap();
        s.write_all(&challenge).await.unwrap();
        let mut recorded = [0u8; DIAL_LEN];
        s.read_exact(&mut recorded).await.unwrap();
        drop(s);
        let _ = caller.await.unwrap();
        // Replayed against the listener: its challenge is new, so the proof fails.
        let (mut c, mut s) = pair().await;
        let replay = tokio::spawn(async move {
            let mut ch = [0u8; NONCE];
            c.read_exact(&mut ch).await.unwrap();
            c.write_all(&recorded).await.unwrap();
            c
        });
        assert!(answer(&mut s, &secret, *TO.ip()).await.is_err());
        drop(replay.await.unwrap());
    }

    #[tokio::test]
    async fn silence_is_refused_in_bounded_time() {
        let (_c, mut s) = pair().await;
        let got = answer(&mut s, &Secret::new().unwrap(), *TO.ip()).await.unwrap_err();
        assert!(got.contains("no proof"), "{got}");
    }
}
