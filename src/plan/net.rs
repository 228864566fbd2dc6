//! How the network mode is chosen (requested, available here, the fallback rule) and the
//! destination rules parsed once for the supervisor.

use super::*;

/// The destination rules, parsed once now so a bad rule stops the launch with its key: into
/// the matcher the supervisor enforces, for the modes that have one (with the host's
/// addresses as a floor, read by the supervisor); only checked for the others.
#[allow(clippy::type_complexity)]
pub(super) fn net_rules(
    policy: &Policy,
    net: &NetPlan,
) -> Result<
    (
        Vec<(String, crate::netrules::matcher::Action, crate::netrules::matcher::Layer)>,
        Option<crate::netrules::matcher::RuleSet>,
    ),
    PlanError,
> {
    use crate::netrules::matcher::{Action, Layer, MatcherOptions, Rule, RuleError, RuleSet};
    use std::str::FromStr;
    let layer = |e: &crate::policy::Sourced<String>| if e.source.is_admin() { Layer::Admin } else { Layer::User };
    let rules: Vec<_> = policy
        .net_block
        .iter()
        .map(|e| (e.value.clone(), Action::Block, layer(e)))
        .chain(policy.net_allow.iter().map(|e| (e.value.clone(), Action::Allow, layer(e))))
        .collect();
    let bad = |e: RuleError| PlanError::Entry {
        key: "net.block / net.allow".into(),
        entry: e.rule.clone(),
        why: e.to_string(),
    };
    if net.jail.handed_out() == 0 {
        for (text, _, _) in &rules {
            Rule::from_str(text).map_err(bad)?;
        }
        return Ok((rules, None));
    }
    let opts = MatcherOptions {
        // Read by the supervisor at its first decision, not before the jail is built.
        host_addrs: vec![],
        deny_private: net.deny_private,
        extra_floor_ports: vec![],
        refresh_host_addrs: Some(crate::host::own_addresses),
    };
    let set = RuleSet::new(&rules, opts).map_err(bad)?;
    Ok((rules, Some(set)))
}

/// Which network modes this build and backend can run, and why not.
pub fn net_available(mode: NetMode, backend: BackendKind, facts: &HostFacts) -> Result<(), String> {
    match (mode, backend) {
        (NetMode::Isolated | NetMode::Open, _) => Ok(()),
        (NetMode::Filtered, BackendKind::Landlock) => {
            Err("the filtered mode needs a network namespace (the Landlock backend has none)".into())
        }
        (NetMode::Filtered, BackendKind::Userns) => match &facts.tun_unusable {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        },
        (NetMode::Proxied, BackendKind::Landlock) => {
            Err("the proxied mode needs a network namespace (the Landlock backend has none)".into())
        }
        (NetMode::Proxied, BackendKind::Userns) => Ok(()),
    }
}

/// The session's job services into the plan: they need the userspace stack, which alone
/// brings a connection into the jail's own network namespace (fails closed elsewhere).
pub(super) fn job_services(net: &mut NetPlan, req: &super::RunRequest) -> Result<(), PlanError> {
    if !req.job_endpoints.is_empty() && net.jail != JailNet::Tun {
        let ports: Vec<String> = req.job_endpoints.iter().map(|(p, _)| p.to_string()).collect();
        return Err(PlanError::Entry {
            key: "net.job_ports".into(),
            entry: ports.join(","),
            why: format!(
                "job ports need the `filtered` network with the user-namespace backend (this session's is `{}`); \
                 use --net filtered, or drop --job-port",
                net.effective
            ),
        });
    }
    net.job_endpoints = req.job_endpoints.clone();
    if net.jail == JailNet::Tun {
        net.job_services = req.job_services.clone();
        net.job_secret = req.job_secret.clone();
        net.peer = req.peer.clone();
    }
    Ok(())
}

pub(super) fn choose_net(policy: &Policy, backend: BackendKind, facts: &HostFacts) -> Result<NetPlan, PlanError> {
    let asked = policy.net_mode.value;
    let mut upstreams: Vec<std::net::SocketAddr> =
        policy.net_dns.value.iter().map(|ip| std::net::SocketAddr::new(*ip, 53)).collect();
    if upstreams.is_empty() {
        upstreams = crate::netrules::resolv::host_resolvers(&facts.resolv_conf);
    }
    let plan = |effective: NetMode, fallback: Option<String>| NetPlan {
        requested: asked,
        effective,
        jail: JailNet::of(effective),
        rules: vec![],
        matcher: None,
        fallback,
        upstreams: upstreams.clone(),
        hostname_ports: HOSTNAME_PORTS.to_vec(),
        host_ports: policy.net_host_ports.value.clone(),
        publish: policy.net_publish.value.clone(),
        job_endpoints: vec![],
        job_services: vec![],
        job_secret: None,
        peer: None,
        deny_private: policy.net_deny_private.value || effective == NetMode::Proxied,
        credentials: vec![],
        grant_bound: None,
    };
    let Err(why) = net_available(asked, backend, facts) else {
        return Ok(plan(asked, None));
    };
    let fallback = policy.net_fallback.value;
    let chosen = match fallback {
        Fallback::Strict => None,
        Fallback::Stricter => {
            NetMode::ALL.iter().copied().find(|m| *m > asked && net_available(*m, backend, facts).is_ok())
        }
        Fallback::Open => Some(NetMode::Open),
    };
    match chosen {
        Some(effective) => Ok(plan(
            effective,
            Some(format!(
                "network mode `{asked}` is unavailable ({why}); net.fallback = \"{fallback}\" chose `{effective}`"
            )),
        )),
        None => Err(PlanError::Net {
            asked,
            why,
            fix: "pick another mode with --net, or set net.fallback = \"stricter\"".into(),
        }),
    }
}
