//! Supervisor-side networking: the userspace stack behind `tun0` (`filtered`), the proxies
//! (`proxied`), the jail's resolver, and the supervisor loop. What a flow may reach is
//! decided with `netrules`; this module enforces it on the host side.

pub(crate) mod audit;
pub mod cluster;
pub mod config;
pub mod control;
pub mod dns;
pub mod packet;
pub mod parse;
pub mod proxy;
pub mod stack;
pub mod supervisor;
pub mod udp;

/// The 403 a refused plain-HTTP request gets, in `filtered` and in the proxies' tunnels alike:
/// the body is the one line an agent can act on.
pub fn forbidden_response(dst: std::net::SocketAddr, reason: &str) -> Vec<u8> {
    let body = format!("agent-sandbox: {dst} refused by the network policy: {reason}\n");
    let mut out = format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Runs `serve` on a thread named `thread`, in a current-thread tokio runtime of its own. Its
/// failure (or a panic) stops `what`, loudly; the command keeps running without it.
fn spawn_service<F, Fut>(thread: &str, what: &'static str, serve: F) -> std::io::Result<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>>,
{
    std::thread::Builder::new().name(thread.into()).spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // A blocking task's thread (a question to Slurm) goes soon after its work.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_keep_alive(std::time::Duration::from_millis(500))
                .build()?;
            rt.block_on(serve())
        }));
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("agent-sandbox: {what} stopped: {e}"),
            Err(_) => eprintln!("agent-sandbox: {what} stopped after an internal error (reported above)"),
        }
    })?;
    Ok(())
}

/// Starts what serves the jail's network, as the plan says, on the descriptors the jail's
/// init handed out (tun0 for `filtered`, the two listeners for `proxied`). The jail calls it
/// through the callback it is handed; it knows nothing of this module.
/// The credential endpoints of the plan, with their keys from the launcher's own
/// environment (the plan holds none). Without a TLS trust store they are left out, loudly:
/// the agent's requests to the endpoint are then refused, never sent without the key.
fn credential_endpoints(net: &crate::plan::NetPlan) -> Vec<std::sync::Arc<supervisor::inject::Endpoint>> {
    if net.credentials.is_empty() {
        return vec![];
    }
    let tls = match supervisor::inject::tls_client() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("agent-sandbox: warning: no API key can be added to the agent's requests: {e}");
            return vec![];
        }
    };
    net.credentials
        .iter()
        .filter_map(|route| {
            let keys: Vec<(String, String)> = route
                .keys
                .iter()
                .filter_map(|k| {
                    let key = std::env::var(&k.env).ok().filter(|v| !v.is_empty())?;
                    Some((k.header.clone(), format!("{}{key}", k.prefix)))
                })
                .collect();
            (!keys.is_empty()).then(|| {
                std::sync::Arc::new(supervisor::inject::Endpoint { route: route.clone(), keys, tls: tls.clone() })
            })
        })
        .collect()
}

/// Every flow of the jail holds a descriptor of the launcher (two for a credential endpoint):
/// the soft limit goes up to the hard one, so that the jail's flows, not the 1024 of a login
/// shell, bound the supervisor (the flow table's own limit is 4096). Called once the jail
/// exists, so its processes keep the limit they were given.
fn raise_descriptor_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

pub fn start(
    net: &crate::plan::NetPlan,
    mut fds: Vec<std::os::fd::OwnedFd>,
    audit: Option<crate::audit::AuditLog>,
    control: Option<std::path::PathBuf>,
    jobs: Option<cluster::jobs::JobServices>,
    peers: Option<cluster::peers::PeerNet>,
) -> std::io::Result<()> {
    use crate::plan::JailNet;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
    let Some(rules) = net.matcher.clone() else {
        return if fds.is_empty() { Ok(()) } else { Err(bad("the plan has no supervisor for these descriptors")) };
    };
    raise_descriptor_limit();
    // One malloc arena for the launcher's threads: the supervisor's and the short-lived
    // threads that ask Slurm (`spawn_blocking`) would each keep an arena of their own for
    // the session's life, where the launcher's main thread only waits.
    // Called before the service threads exist.
    agent_sandbox_sys::memory::one_arena();
    if net.upstreams.is_empty() && net.jail == JailNet::Tun {
        eprintln!(
            "agent-sandbox: warning: no DNS resolver found (resolv.conf, net.dns): names will not resolve in the jail"
        );
    }
    let common = config::Common {
        rules,
        upstreams: net.upstreams.clone(),
        hostname_ports: net.hostname_ports.clone(),
        audit,
        mode: net.effective.as_str(),
        control,
        grant_bound: net.grant_bound.clone(),
    };
    if net.jail == JailNet::Proxies && fds.len() == 2 {
        return proxy::spawn(fds, common);
    }
    let cfg = supervisor::NetConfig {
        common,
        host_ports: net.host_ports.clone(),
        publish: net.publish.clone(),
        credentials: credential_endpoints(net),
        jobs,
        job_services: net.job_services.clone(),
        job_secret: net.job_secret.clone(),
        peers,
    };
    match (net.jail, fds.len()) {
        (JailNet::Tun, 1) => supervisor::spawn(fds.remove(0), cfg),
        _ => Err(bad("the jail's network and its plan disagree")),
    }
}
