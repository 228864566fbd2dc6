//! The session network's listener (`net::cluster::peers`). The session's own jail's is bound by the
//! launcher, which announces it at the first Slurm call and hands it over; a job's jail's is
//! bound here, on the address routed toward the session's, and announced at once. Each
//! connection's proof is checked off the loop, in a bounded place (`pending`); an admitted one
//! is brought into the jail at the port it called, from the caller's jail address
//! (`Event::Peer`). A refusal closes the connection and is audited (`pending::Refusals`).

use super::decide::Shared;
use super::dns::accept_surviving;
use super::pending::{self, Pending, Refusals};
use super::Event;
use crate::net::cluster::peers::{self, PeerNet, Role};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// Calls waiting for their proof at once, at most, and from one address (`pending`).
const MAX_PENDING: usize = 64;
const MAX_PENDING_PER_SOURCE: usize = 8;

pub(super) fn serve(net: PeerNet, events: &UnboundedSender<Event>, shared: Arc<Shared>) {
    let PeerNet { claim, registry, secret, role } = net;
    let own = claim.address;
    let (events, secret) = (events.clone(), Arc::new(secret));
    tokio::spawn(async move {
        let listener = match role {
            // Nothing to serve until the session first uses Slurm (or ever).
            Role::Login { listener } => match listener.await {
                Ok(l) => l,
                Err(_) => return,
            },
            Role::Job { asker } => {
                // The session's record answers at once; without it, Slurm is asked (off the loop).
                let ip = match peers::job_address_quick(&registry) {
                    Some(ip) => Ok(ip),
                    None => {
                        let registry = registry.clone();
                        tokio::task::spawn_blocking(move || peers::job_address(&registry, &asker))
                            .await
                            .unwrap_or_else(|e| Err(e.to_string()))
                    }
                };
                match ip.and_then(|ip| bind_and_publish(&claim, ip)) {
                    Ok(l) => l,
                    Err(why) => {
                        eprintln!(
                            "agent-sandbox: warning: the session network cannot listen ({why}); \
                             the session's other jails cannot reach this one"
                        );
                        return;
                    }
                }
            }
        };
        accept_calls(listener, own, secret, events, shared).await;
    });
}

fn bind_and_publish(claim: &peers::Claim, ip: IpAddr) -> Result<std::net::TcpListener, String> {
    let l = std::net::TcpListener::bind((ip, 0)).map_err(|e| format!("cannot listen on {ip}: {e}"))?;
    let at = l.local_addr().map_err(|e| e.to_string())?;
    claim.publish(at).map_err(|e| e.to_string())?;
    tracing::info!(%at, "session network: listening");
    Ok(l)
}

async fn accept_calls(
    listener: std::net::TcpListener,
    own: Ipv4Addr,
    secret: Arc<crate::secret::Secret>,
    events: UnboundedSender<Event>,
    shared: Arc<Shared>,
) {
    let listener = match listener.set_nonblocking(true).and_then(|_| tokio::net::TcpListener::from_std(listener)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("agent-sandbox: warning: the session network cannot listen: {e}");
            return;
        }
    };
    let pending = Pending::new(MAX_PENDING, MAX_PENDING_PER_SOURCE);
    let refusals = Arc::new(Refusals::new("session_net", listener.local_addr().ok()));
    loop {
        let Some(mut stream) = accept_surviving(&listener).await else { continue };
        let (Ok(peer), Ok(here)) = (stream.peer_addr(), stream.local_addr()) else { continue };
        let source = match pending::source(peer, here) {
            Ok(source) => source,
            Err((from, why)) => {
                refusals.refuse(&shared, from, &format!("session network: a connection from {peer} refused: {why}"));
                continue;
            }
        };
        let Some((place, evicted)) = pending.admit(source) else { continue };
        let (events, shared, secret, refusals) = (events.clone(), shared.clone(), secret.clone(), refusals.clone());
        tokio::spawn(async move {
            let verdict = tokio::select! {
                v = peers::answer(&mut stream, &secret, own) => v,
                _ = evicted => return,
            };
            drop(place);
            match verdict {
                Ok(call) => {
                    tracing::debug!(%peer, from = %call.from, port = call.port, "session network: a call from a jail of the session");
                    let _ = events.send(Event::Peer { stream, from: call.from, port: call.port });
                }
                Err(why) => refusals.refuse(
                    &shared,
                    pending::Origin::of(peer.ip()),
                    &format!("session network: a connection from {peer} refused: {why}"),
                ),
            }
        });
    }
}
