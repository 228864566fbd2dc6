//! A session's policy as its Slurm jobs carry it to the compute nodes: serialized once, when
//! the session first uses Slurm, with a version, and read back only here. The chaperon and the
//! job directory hold it as opaque text; a node that cannot read it refuses the job.

use super::Policy;
use std::net::SocketAddr;

/// The version of the frozen form this build writes and reads.
pub const VERSION: u32 = 1;

/// A frozen policy: opaque text between `freeze` and `thaw`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Frozen(String);

#[derive(serde::Serialize)]
struct Out<'a> {
    agent_sandbox_frozen_policy: u32,
    policy: &'a Policy,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    job_services: &'a [SocketAddr],
    #[serde(skip_serializing_if = "Option::is_none")]
    job_secret: Option<String>,
}

#[derive(serde::Deserialize)]
struct In {
    agent_sandbox_frozen_policy: u32,
    policy: serde_json::Value,
    /// The session's listeners for its own jobs (`--job-port`), which a job's network may
    /// reach: the launcher bound them, so they are facts of the session, not policy.
    #[serde(default)]
    job_services: Vec<SocketAddr>,
    /// The secret the jobs prove to those listeners (hex of a `secret::Secret`).
    #[serde(default)]
    job_secret: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum FrozenError {
    #[error("the job's frozen policy cannot be read: {0}")]
    Unreadable(String),
    #[error("the job's policy was frozen by a newer agent-sandbox (form {found}; this one reads {VERSION})")]
    Newer { found: u32 },
    #[error("the policy cannot be frozen for the session's jobs: {0}")]
    Freeze(String),
}

impl FrozenError {
    pub fn fix(&self) -> Option<String> {
        Some(match self {
            FrozenError::Unreadable(_) => {
                "fix: the job directory was damaged or written by another program; resubmit the job from its session"
                    .into()
            }
            FrozenError::Newer { .. } => {
                "fix: install the same agent-sandbox on the compute nodes as on the login nodes".into()
            }
            FrozenError::Freeze(_) => return None,
        })
    }
}

impl Frozen {
    pub fn freeze(p: &Policy) -> Result<Frozen, FrozenError> {
        Frozen::freeze_with(p, &[], None)
    }

    /// The policy and the session's job services (`--job-port` listeners on the login node) with
    /// the secret its jobs prove to them.
    pub fn freeze_with(
        p: &Policy,
        job_services: &[SocketAddr],
        job_secret: Option<&crate::secret::Secret>,
    ) -> Result<Frozen, FrozenError> {
        let job_secret = job_secret.map(crate::secret::Secret::hex);
        let out = Out { agent_sandbox_frozen_policy: VERSION, policy: p, job_services, job_secret };
        serde_json::to_string(&out).map(Frozen).map_err(|e| FrozenError::Freeze(e.to_string()))
    }

    /// The text a job directory holds, to be thawed.
    pub fn from_text(text: &str) -> Frozen {
        Frozen(text.to_string())
    }

    pub fn text(&self) -> &str {
        &self.0
    }

    /// The session's job services frozen with the policy and the secret its jobs prove to
    /// them, read in one pass (none where unreadable: `thaw` says why; no secret where it is
    /// not one).
    pub fn job_link(&self) -> (Vec<SocketAddr>, Option<crate::secret::Secret>) {
        let Ok(i) = serde_json::from_str::<In>(&self.0) else { return Default::default() };
        (i.job_services, i.job_secret.as_deref().and_then(crate::secret::Secret::from_hex))
    }

    pub fn thaw(&self) -> Result<Policy, FrozenError> {
        let found: In = serde_json::from_str(&self.0).map_err(|e| FrozenError::Unreadable(e.to_string()))?;
        if found.agent_sandbox_frozen_policy > VERSION {
            return Err(FrozenError::Newer { found: found.agent_sandbox_frozen_policy });
        }
        serde_json::from_value(found.policy).map_err(|e| FrozenError::Unreadable(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_thaws_as_it_was_frozen_and_what_is_not_one_is_refused() {
        let p = crate::policy::merge(&[], None).expect("built-in policy");
        let f = Frozen::freeze(&p).expect("freeze");
        let back = f.thaw().expect("thaw");
        assert_eq!(serde_json::to_value(&back).ok(), serde_json::to_value(&p).ok());
        assert!(matches!(Frozen::from_text("").thaw(), Err(FrozenError::Unreadable(_))));
        assert!(matches!(Frozen::from_text("{}").thaw(), Err(FrozenError::Unreadable(_))));
        // A policy as earlier versions froze it (no form number): refused, with a reason.
        let bare = serde_json::to_string(&p).expect("json");
        assert!(matches!(Frozen::from_text(&bare).thaw(), Err(FrozenError::Unreadable(_))));
        let newer = f.text().replacen("\"agent_sandbox_frozen_policy\":1", "\"agent_sandbox_frozen_policy\":2", 1);
        let e = Frozen::from_text(&newer).thaw().expect_err("newer form");
        assert!(matches!(e, FrozenError::Newer { found: 2 }) && e.fix().is_some(), "{e}");
    }

    #[test]
    fn job_services_travel_with_the_policy_and_are_none_by_default() {
        let p = crate::policy::merge(&[], None).expect("built-in policy");
        let (services, secret) = Frozen::freeze(&p).expect("freeze").job_link();
        assert!(services.is_empty() && secret.is_none());
        let at: Vec<SocketAddr> = vec!["203.0.113.1:40123".parse().unwrap(), "[fd00::1]:40124".parse().unwrap()];
        let made = crate::secret::Secret::new().expect("a secret");
        let f = Frozen::freeze_with(&p, &at, Some(&made)).expect("freeze");
        let (services, secret) = f.job_link();
        assert_eq!((services, secret.map(|s| s.hex())), (at, Some(made.hex())));
        assert!(f.thaw().is_ok());
        // A secret that is not one (damaged, or not ours) is none at all.
        let text = f.text().replace(&made.hex(), "ab12");
        assert!(Frozen::from_text(&text).job_link().1.is_none());
    }
}
