//! The session network's listener (`net::peers`): bound on the host before the loop runs,
//! announced in the session's registry once the host's address toward its peers is known
//! (asking Slurm may take a while, so off the loop), and each connection's proof checked off
//! the loop; an admitted one is brought into the jail at the port it called, from the
//! caller's jail address (`Event::Peer`). A refusal closes the connection and leaves one
//! audit record.

use super::decide::{refusal, Shared};
use super::dns::accept_surviving;
use super::Event;
use crate::net::peers::{self, PeerNet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Semaphore;

/// Calls waiting for their proof at once, at most: more are closed unread.
const MAX_PENDING: usize = 64;

pub(super) fn serve(net: PeerNet, events: &UnboundedSender<Event>, shared: Arc<Shared>) {
    let listener = match std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .and_then(tokio::net::TcpListener::from_std)
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("agent-sandbox: warning: the session network cannot listen: {e}; other jails of the session cannot reach this one");
            return;
        }
    };
    let Ok(port) = listener.local_addr().map(|a| a.port()) else { return };
    let PeerNet { claim, registry, secret, locate } = net;
    let login = matches!(locate, peers::Locate::Login { .. });
    tokio::spawn(async move {
        let announced = tokio::task::spawn_blocking(move || {
            let ip = locate.own_address(&registry)?;
            if login {
                peers::publish_login(&registry, ip).map_err(|e| e.to_string())?;
            }
            claim.publish(SocketAddr::new(ip, port)).map_err(|e| e.to_string())?;
            Ok::<_, String>(SocketAddr::new(ip, port))
        })
        .await;
        match announced {
            Ok(Ok(at)) => tracing::info!(%at, "session network: listening"),
            Ok(Err(why)) => eprintln!(
                "agent-sandbox: warning: the session network does not know this host's address ({why}); \
                 other jails of the session cannot reach this one"
            ),
            Err(e) => eprintln!("agent-sandbox: warning: the session network failed to start: {e}"),
        }
    });
    let secret = Arc::new(secret);
    let pending = Arc::new(Semaphore::new(MAX_PENDING));
    let events = events.clone();
    tokio::spawn(async move {
        let here = listener.local_addr().ok();
        loop {
            let Some(mut stream) = accept_surviving(&listener).await else { continue };
            let Ok(permit) = pending.clone().try_acquire_owned() else { continue };
            let Ok(peer) = stream.peer_addr() else { continue };
            let (events, shared, secret) = (events.clone(), shared.clone(), secret.clone());
            tokio::spawn(async move {
                let verdict = peers::answer(&mut stream, &secret).await;
                drop(permit);
                match verdict {
                    Ok(call) => {
                        tracing::debug!(%peer, from = %call.from, port = call.port, "session network: a call from a jail of the session");
                        let _ = events.send(Event::Peer { stream, from: call.from, port: call.port });
                    }
                    Err(why) => {
                        let d = refusal(&format!("session network: a connection from {peer} refused: {why}"));
                        shared.audit.deny("tcp", here, None, "session_net", &d);
                    }
                }
            });
        }
    });
}
