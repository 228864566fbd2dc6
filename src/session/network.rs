//! The session network's and the job ports' part of a launch: the address a jail claims on
//! its session's network (`net::cluster::peers`), the session's job ports (`net::cluster::jobs`), and what the
//! supervisor serves of them.

use super::Origin;
use crate::plan::Plan;
use crate::{host, policy, slurm};
use std::path::{Path, PathBuf};

/// An address claimed on the session network, given back unless the launch keeps it (a
/// launch that fails before its jail exists leaves no claim behind).
pub(super) struct PendingClaim(pub(super) Option<(crate::net::cluster::peers::Claim, PathBuf)>);

impl PendingClaim {
    pub(super) fn keep(mut self) -> Option<(crate::net::cluster::peers::Claim, PathBuf)> {
        self.0.take()
    }
}

impl Drop for PendingClaim {
    fn drop(&mut self) {
        if let Some((claim, registry)) = self.0.take() {
            let _ = std::fs::remove_file(&claim.path);
            // A session's registry holds nothing else yet (a job's has the others' claims).
            let _ = std::fs::remove_dir(registry);
        }
    }
}

/// Claims this jail's address on its session's network (`net::cluster::peers`) where there is one:
/// the `filtered` mode's tun0 with `net.session_network` on, for a session on a host with
/// Slurm (it makes the session's secret here) or a job whose session had a secret. Failing to
/// claim costs only the network between the session's jails: a warning, not a refusal.
pub(super) fn claim_peer_address(
    policy: &policy::Policy,
    facts: &host::HostFacts,
    origin: &Origin,
    session: &str,
    secret: &mut Option<crate::secret::Secret>,
) -> Option<PendingClaim> {
    use crate::{net::cluster::peers, secret::Secret};
    if !policy.net_session_network.value || policy.net_mode.value != policy::NetMode::Filtered {
        return None;
    }
    let wanted = match origin {
        Origin::Session { .. } => slurm::slurm_bin().join("sbatch").is_file(),
        Origin::Job { .. } => secret.is_some(),
    };
    let plain = !session.is_empty()
        && !session.starts_with('.')
        && session.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !wanted || !plain {
        return None;
    }
    let registry = peers::registry(&facts.state_dir(), session);
    let claim = match peers::claim(&registry) {
        Ok(c) => PendingClaim(Some((c, registry))),
        Err(e) => {
            eprintln!(
                "agent-sandbox: warning: no address on the session network ({e}); the session's other jails cannot reach this one"
            );
            return None;
        }
    };
    if secret.is_none() {
        match Secret::new() {
            Ok(s) => *secret = Some(s),
            Err(e) => {
                eprintln!("agent-sandbox: warning: the session network is off: {e}");
                return None;
            }
        }
    }
    Some(claim)
}

/// Binds the session's job ports (`--job-port`, `net::cluster::jobs`) on the cluster-facing address.
pub(super) fn bind_job_ports(
    policy: &policy::Policy,
    facts: &host::HostFacts,
    session: &str,
    project: &Path,
    secret: crate::secret::Secret,
) -> Result<crate::net::cluster::jobs::JobServices, String> {
    use crate::net::cluster::jobs;
    let asker = slurm::asker(&facts.home, &facts.user);
    let admission = jobs::Admission::new(asker, &facts.state_dir(), session, project);
    jobs::bind(&policy.net_job_ports.value, &policy.net_job_address.value, admission, secret)
}

/// What the jail's network supervisor serves beyond the plan: the socket `agent-sandbox allow`
/// reaches it through, the job ports, the session network, and (the session's own jail only)
/// the announcement made at its first Slurm call.
pub struct SessionNet {
    pub control: Option<PathBuf>,
    pub jobs: Option<crate::net::cluster::jobs::JobServices>,
    pub peers: Option<crate::net::cluster::peers::PeerNet>,
    pub announce: Option<crate::net::cluster::peers::Announce>,
}

/// The session network's part of this launch (`net::cluster::peers`): what the supervisor serves, and
/// for the session's own jail the announcement made at its first Slurm call. None where the
/// jail has no address on it, or no secret.
pub fn session_network(
    claim: Option<(crate::net::cluster::peers::Claim, PathBuf)>,
    plan: &Plan,
    policy: &policy::Policy,
    facts: &host::HostFacts,
    origin: &Origin,
) -> (Option<crate::net::cluster::peers::PeerNet>, Option<crate::net::cluster::peers::Announce>) {
    use crate::net::cluster::peers::{Announce, PeerNet, Role};
    let Some((claim, registry)) = claim else { return (None, None) };
    let Some(secret) = plan.net.job_secret.clone() else {
        return (None, None);
    };
    let asker = slurm::asker(&facts.home, &facts.user);
    match origin {
        Origin::Job { .. } => (Some(PeerNet { claim, registry, secret, role: Role::Job { asker } }), None),
        Origin::Session { .. } => {
            let (to, listener) = crate::net::cluster::peers::login_handover();
            let announce = Announce {
                claim: claim.clone(),
                registry: registry.clone(),
                job_address: policy.net_job_address.value.clone(),
                asker,
                to,
            };
            (Some(PeerNet { claim, registry, secret, role: Role::Login { listener } }), Some(announce))
        }
    }
}
