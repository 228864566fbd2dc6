//! Which backend runs (user namespaces or Landlock), and the git guard it can have.

use super::*;

/// The backend this policy gets on this host: the plan's choice, also asked by the launch
/// before planning (the chaperon's door differs: a socket to bind in, or a channel).
pub fn choose_backend(policy: &Policy, facts: &HostFacts) -> Result<BackendKind, PlanError> {
    let landlock_ok = facts.landlock_abi > 0;
    match policy.backend.value {
        Backend::Userns if !facts.userns.available => Err(PlanError::Backend {
            why: format!(
                "user namespaces are unavailable ({})",
                facts.userns.why_not.clone().unwrap_or_default()
            ),
            fix: "ask your admin to enable unprivileged user namespaces (see `agent-sandbox doctor`), or run with --backend landlock".into(),
        }),
        Backend::Userns => Ok(BackendKind::Userns),
        Backend::Landlock if !landlock_ok => Err(PlanError::Backend {
            why: "the kernel has no Landlock (needs Linux 5.13+ with CONFIG_SECURITY_LANDLOCK and landlock in lsm=)".into(),
            fix: "use the user-namespace backend (--backend userns) or ask your admin to enable Landlock".into(),
        }),
        Backend::Landlock => Ok(BackendKind::Landlock),
        Backend::Auto if facts.userns.available => Ok(BackendKind::Userns),
        Backend::Auto if landlock_ok => Ok(BackendKind::Landlock),
        Backend::Auto => Err(PlanError::Backend {
            why: format!(
                "user namespaces are unavailable ({}) and the kernel has no Landlock",
                facts.userns.why_not.clone().unwrap_or_default()
            ),
            fix: "ask your admin to enable unprivileged user namespaces or Landlock; `agent-sandbox doctor` shows the details".into(),
        }),
    }
}

/// Decides the git guard: on in the namespace backend unless `filesystem.nested_git`; a
/// kernel that cannot run it stops the launch rather than run without it.
pub(super) fn git_guard(
    policy: &Policy,
    facts: &HostFacts,
    backend: BackendKind,
    roots: Vec<PathBuf>,
) -> Result<Option<GitGuardPlan>, PlanError> {
    if policy.nested_git.value || backend != BackendKind::Userns {
        return Ok(None);
    }
    if !facts.guard_kernel {
        return Err(PlanError::GitGuard {
            why: "it needs seccomp user notification with SECCOMP_ADDFD_FLAG_SEND (Linux 5.14 or later)".into(),
            fix: "run on a newer kernel, or set `nested_git = true` under [filesystem] in \
                  ~/.config/agent-sandbox/config.toml to run without this protection (the agent could then \
                  write git hooks and config that your own git runs outside the jail)"
                .into(),
        });
    }
    Ok(Some(GitGuardPlan { roots, links: LinkPlan::default() }))
}
