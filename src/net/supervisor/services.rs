//! The session's job ports (`--job-port`, `net::cluster::jobs`): each listener's connections are
//! admitted or refused off the loop (asking Slurm blocks), and an admitted one is brought into
//! the jail like a published port (`Event::Published`). A refusal closes the connection and
//! is audited (`pending::Refusals`: at most once a second per source).

use super::decide::Shared;
use super::dns::accept_surviving;
use super::pending::{self, Pending, Refusals};
use super::Event;
use crate::net::cluster::jobs::{check_job, prove_listener, JobServices};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// Connections waiting for their proof at once, at most, and from one address (`pending`).
const MAX_PENDING: usize = 64;
const MAX_PENDING_PER_SOURCE: usize = 8;

pub(super) fn serve(jobs: JobServices, events: &UnboundedSender<Event>, shared: Arc<Shared>) {
    let admission = Arc::new(jobs.admission);
    let secret = Arc::new(jobs.secret);
    let pending = Pending::new(MAX_PENDING, MAX_PENDING_PER_SOURCE);
    for (port, listener) in jobs.listeners {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("agent-sandbox: warning: job port {port} cannot be served: {e}");
                continue;
            }
        };
        let (events, shared, admission, pending, secret) =
            (events.clone(), shared.clone(), admission.clone(), pending.clone(), secret.clone());
        tokio::spawn(async move {
            let here = listener.local_addr().ok();
            let refusals = Arc::new(Refusals::new("job_port", here));
            loop {
                let Some(mut stream) = accept_surviving(&listener).await else { continue };
                let (Ok(peer), Ok(local)) = (stream.peer_addr(), stream.local_addr()) else { continue };
                let source = match pending::source(peer, local) {
                    Ok(source) => source,
                    Err((from, why)) => {
                        let why = format!("job port {port}: a connection from {peer} refused: {why}");
                        refusals.refuse(&shared, from, &why);
                        continue;
                    }
                };
                let Some((place, evicted)) = pending.admit(source) else { continue };
                let (events, shared, admission, secret, refusals) =
                    (events.clone(), shared.clone(), admission.clone(), secret.clone(), refusals.clone());
                tokio::spawn(async move {
                    let Some(at) = here else { return };
                    // The session's proof first (in the place a waiting connection holds):
                    // Slurm is asked only for a peer that has it.
                    let proved = tokio::select! {
                        v = check_job(&mut stream, &secret, at) => v,
                        _ = evicted => return,
                    };
                    drop(place);
                    let verdict = match proved {
                        Ok(t) => tokio::task::spawn_blocking(move || admission.admit(peer.ip()).map(|node| (node, t)))
                            .await
                            .unwrap_or_else(|e| Err(format!("the admission check failed: {e}"))),
                        Err(why) => Err(why),
                    };
                    let verdict = match verdict {
                        Ok((node, t)) => {
                            prove_listener(&mut stream, &secret, &t).await.map(|_| node).map_err(|e| e.to_string())
                        }
                        Err(why) => Err(why),
                    };
                    match verdict {
                        Ok(node) => {
                            tracing::info!(%peer, node, port, "job port: a connection from a job of the session");
                            let _ = events.send(Event::Published { stream, port });
                        }
                        Err(why) => refusals.refuse(
                            &shared,
                            pending::Origin::of(peer.ip()),
                            &format!("job port {port}: a connection from {peer} refused: {why}"),
                        ),
                    }
                });
            }
        });
    }
}
