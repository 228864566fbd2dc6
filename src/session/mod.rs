//! What a launch holds while its jail runs, and gives back after: the session's door to its
//! chaperon, the project lock with its placeholders, the address claimed on the session
//! network, and the session's job ports with their secret. `Held::take` takes them before the
//! plan (which binds or names each) in the order the launch has always taken them; whatever
//! the launch does not hand on to the jail goes when the launch returns, however it returns.

mod network;

pub use network::{session_network, SessionNet};

use crate::plan::{PeerPlan, Plan, RunRequest};
use crate::{host, jail, policy, slurm, stub};
use network::PendingClaim;
use std::path::{Path, PathBuf};

/// Where this launch happens, and what differs there.
pub enum Origin {
    /// A session the user started on the login node.
    Session { dry_run: bool, json: bool, quiet: bool },
    /// A job's task on a compute node: the submitting session's id and frozen policy.
    Job { job: Option<u32>, session: String, frozen: policy::Frozen, project_id: chaperon::job::ProjectId },
}

impl Origin {
    pub fn is_job(&self) -> bool {
        matches!(self, Origin::Job { .. })
    }
}

/// What the launch decided once, before it takes anything: every later stage reads it.
pub struct Prelude {
    /// A dry run takes nothing and runs nothing: it shows the plan.
    pub dry_run: bool,
    /// The session's id: the launcher's own, or for a job its submitting session's.
    pub session: String,
    /// The backend (Landlock's command inherits the chaperon's channel, no socket), the jail's
    /// network and the groups, chosen once for the jail's early PID 1 and the plan alike.
    pub choices: crate::plan::Choices,
}

/// The command's part of the plan's request, as the launch was given it.
pub struct Command {
    pub command: Vec<String>,
    pub project: PathBuf,
    pub cwd: PathBuf,
    pub extra_files: Vec<(PathBuf, String)>,
    pub env: Option<Vec<(String, String)>>,
}

/// What the launch holds. Fields drop in the reverse of the order they were taken in.
pub struct Held {
    /// The session's job ports (`--job-port`), bound on the cluster-facing address.
    pub jobs: Option<crate::net::cluster::jobs::JobServices>,
    /// This jail's address on the session network, given back unless the plan uses it.
    peer_claim: Option<PendingClaim>,
    /// A job's: its session's listeners, which its network may reach.
    job_services: Vec<std::net::SocketAddr>,
    /// The secret the session's jobs and jails prove.
    job_secret: Option<crate::secret::Secret>,
    /// The project lock (None in a dry run).
    pub lock: Option<jail::placeholders::ProjectLock>,
    /// The door's socket file, removed when the launch returns.
    pub door_file: RemovedAtEnd,
    /// The door to the session's chaperon (None in a dry run).
    pub door: Option<slurm::Chaperon>,
}

impl Held {
    /// The door, the stub links and the project lock, the session network's address and the
    /// job ports: each as the policy asks and `origin` allows; none in a dry run. `own`: this
    /// launch's own id in the audit log, which names its door (a job's tasks on one node share
    /// their session's id, not a door).
    pub fn take(
        pre: &Prelude,
        own: &str,
        policy: &policy::Policy,
        facts: &host::HostFacts,
        origin: &Origin,
        project_dir: &Path,
    ) -> Result<Held, String> {
        let door = match pre.dry_run {
            true => None,
            false => Some(
                chaperon_door(pre.choices.landlock(), &facts.sockets_dir(), own)
                    .map_err(|e| format!("cannot create the session's Slurm socket: {e}"))?,
            ),
        };
        // The session's socket goes with the launch however it returns, a plan refused
        // included; with a launcher killed before that (a Ctrl-C while it plans), with its
        // waiter.
        let door_file = door.as_ref().and_then(|d| d.socket.clone());
        if let Some(f) = &door_file {
            jail::waiter::remove_after_exit(&[f]);
        }
        let door_file = RemovedAtEnd(door_file);
        // The session's secret, which its jobs prove to its job ports and every jail of the
        // session to the others: a session makes one, a job has its session's.
        let (job_services, mut job_secret) = match origin {
            Origin::Job { frozen, .. } => frozen.job_link(),
            Origin::Session { .. } => (vec![], None),
        };
        // The session's locks, and this jail's address on the session network (claimed before
        // the plan configures tun0 with it), side by side: a chain of round trips each to the
        // state directory's server on a home on NFS.
        let (lock, peer_claim) = match pre.dry_run {
            true => (None, None),
            false => {
                let (lock, claim) = host::together(
                    || project_lock(facts, project_dir),
                    || network::claim_peer_address(policy, facts, origin, &pre.session, &mut job_secret),
                );
                // A lock not taken gives the claim back (`PendingClaim`'s drop).
                (Some(lock?), claim)
            }
        };
        // The claim, and the registry once empty, go with a launcher killed before the plan
        // exists too (its waiter); one that returns gives the claim back itself.
        if let Some(PendingClaim(Some((claim, registry)))) = &peer_claim {
            jail::waiter::remove_after_exit(&[&claim.path, registry]);
        }
        // The session's job ports are bound before the plan, whose environment names them.
        let jobs = match (origin, policy.net_job_ports.value.is_empty()) {
            (Origin::Session { dry_run: false, .. }, false) => {
                let secret = match job_secret.clone() {
                    Some(s) => s,
                    None => crate::secret::Secret::new()?,
                };
                job_secret = Some(secret.clone());
                Some(network::bind_job_ports(policy, facts, &pre.session, project_dir, secret)?)
            }
            _ => None,
        };
        Ok(Held { jobs, peer_claim, job_services, job_secret, lock, door_file, door })
    }

    /// The plan's request: the command, and what the launch holds as the jail will see it.
    pub fn request(&self, pre: &Prelude, policy: &policy::Policy, c: Command) -> RunRequest {
        // As the jail names them: a loopback listener (a one-host cluster) at the jail's
        // gateway; a dry run shows where they would go.
        let job_endpoints = match &self.jobs {
            Some(j) => {
                j.endpoints().into_iter().map(|(p, a)| (p, crate::net::cluster::jobs::seen_from_a_jail(a))).collect()
            }
            None => {
                policy.net_job_ports.value.iter().map(|p| (*p, (std::net::Ipv4Addr::UNSPECIFIED, 0).into())).collect()
            }
        };
        RunRequest {
            job_endpoints,
            job_services: self.job_services.clone(),
            job_secret: self.job_secret.clone(),
            peer: self
                .peer_claim
                .as_ref()
                .and_then(|p| p.0.as_ref())
                .map(|(c, r)| PeerPlan { address: c.address, registry: r.clone() }),
            command: c.command,
            project: c.project,
            cwd: c.cwd,
            session: pre.session.clone(),
            chaperon_socket: self.door.as_ref().and_then(|d| d.socket.clone()),
            chaperon_channel: pre.choices.landlock(),
            extra_files: c.extra_files,
            env: c.env,
        }
    }

    /// What the plan made of the holdings: a claim it has no use for (no tun0 after a
    /// fallback) is given back now; the job ports admit the project's jobs as planned.
    pub fn planned(mut self, plan: &Plan) -> Planned {
        let peer_claim = self.peer_claim.take().and_then(|c| if plan.net.peer.is_some() { c.keep() } else { None });
        if let Some(j) = &mut self.jobs {
            j.admission.set_project(&plan.project);
        }
        Planned { held: self, peer_claim }
    }
}

/// The holdings once the plan exists.
pub struct Planned {
    pub held: Held,
    /// The session network's address the jail keeps, and its registry.
    pub peer_claim: Option<(crate::net::cluster::peers::Claim, PathBuf)>,
}

/// Orders for the waiter, run once the launcher has gone however it goes: the door's socket,
/// the allocations the chaperon could not end, the session network's claim and registry, the
/// control socket and its token. A job's task also finishes its project's lock here, on the
/// node.
pub fn order_after_exit(
    lock: &mut jail::placeholders::ProjectLock,
    door: &slurm::Chaperon,
    peer_claim: &Option<(crate::net::cluster::peers::Claim, PathBuf)>,
    origin: &Origin,
    state_dir: PathBuf,
    control: Option<&Path>,
) {
    if let Some(socket) = door.socket.clone() {
        lock.remove_after_exit(socket);
    }
    // An allocation whose salloc the chaperon could not end (it died with us while the
    // request was pending) is cancelled once we are gone.
    lock.run_after_exit(slurm::CANCEL_LEFT, slurm::cancel_left_args(&state_dir));
    if origin.is_job() {
        lock.finish_here();
    }
    // The jail's address on the session network is given back when it ends; the session's
    // registry goes too once no job of the session holds an address in it.
    if let Some((claim, registry)) = peer_claim {
        lock.remove_after_exit(claim.path.clone());
        if !origin.is_job() {
            lock.remove_after_exit(crate::net::cluster::peers::login_path(registry));
        }
        // Last, and only once empty: a job that outlived its session empties it too.
        lock.remove_after_exit(registry.clone());
    }
    if let Some(c) = control {
        lock.remove_after_exit(c.to_path_buf());
        lock.remove_after_exit(crate::net::control::token_path(c));
    }
}

/// The stub links, then the project lock: held from before planning so that no other session
/// of this project removes a placeholder this plan counts on. An agent's instruction file, and
/// the agents' directories and files any session may reach (`~/.cache/opencode`, all of them
/// with the home writable), may need placeholders in the home.
/// The stub links made, the project's and the home's locks taken, and the session among the
/// user's running ones (`jail::running`): side by side, each a few round trips to the state
/// directory's server on a home on NFS.
fn project_lock(facts: &host::HostFacts, project_dir: &Path) -> Result<jail::placeholders::ProjectLock, String> {
    let state = facts.state_dir();
    let links =
        || stub::ensure_links(&state).map_err(|e| format!("cannot prepare the stub links in {}: {e}", state.display()));
    let locks = || {
        let (lock, home) = host::together(
            || jail::placeholders::ProjectLock::acquire(&state, project_dir),
            || jail::placeholders::ProjectLock::home_lock(&state, &facts.home_canonical, project_dir),
        );
        let lock = lock.map_err(|e| e.to_string())?;
        Ok::<_, String>(lock.with_home_lock(home.map_err(|e| e.to_string())?))
    };
    let ((links, running), lock) =
        host::together(|| host::together(links, || jail::running::Running::join(&state)), locks);
    links?;
    Ok(lock?.with_running(running))
}

/// The session's door to its chaperon: a socket the plan binds into the userns jail, or a
/// channel the Landlock backend's command inherits.
fn chaperon_door(landlock: bool, sockets_dir: &Path, session: &str) -> std::io::Result<slurm::Chaperon> {
    if landlock {
        slurm::channel()
    } else {
        slurm::bind(sockets_dir, session)
    }
}

/// A file the launch made that goes when the launch returns, however it returns.
pub struct RemovedAtEnd(Option<PathBuf>);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}
