//! The session's job ports (`--job-port`, `net::jobs`): each listener's connections are
//! admitted or refused off the loop (asking Slurm blocks), and an admitted one is brought into
//! the jail like a published port (`Event::Published`). A refusal closes the connection and
//! leaves one audit record.

use super::decide::{refusal, Shared};
use super::dns::accept_surviving;
use super::Event;
use crate::net::jobs::{check_job, prove_listener, JobServices};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Semaphore;

/// Connections waiting for their admission at once, at most: more are closed unread.
const MAX_PENDING: usize = 64;

pub(super) fn serve(jobs: JobServices, events: &UnboundedSender<Event>, shared: Arc<Shared>) {
    let admission = Arc::new(jobs.admission);
    let secret = Arc::new(jobs.secret);
    let pending = Arc::new(Semaphore::new(MAX_PENDING));
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
            loop {
                let Some(mut stream) = accept_surviving(&listener).await else { continue };
                let Ok(permit) = pending.clone().try_acquire_owned() else { continue };
                let Ok(peer) = stream.peer_addr() else { continue };
                let (events, shared, admission, secret) =
                    (events.clone(), shared.clone(), admission.clone(), secret.clone());
                tokio::spawn(async move {
                    // The session's proof first: Slurm is asked only for a peer that has it.
                    let Some(at) = here else { return };
                    let verdict = match check_job(&mut stream, &secret, at).await {
                        Ok(t) => tokio::task::spawn_blocking(move || admission.admit(peer.ip()).map(|node| (node, t)))
                            .await
                            .unwrap_or_else(|e| Err(format!("the admission check failed: {e}"))),
                        Err(why) => Err(why),
                    };
                    drop(permit);
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
                        Err(why) => {
                            let d = refusal(&format!("job port {port}: a connection from {peer} refused: {why}"));
                            shared.audit.deny("tcp", here, None, "job_port", &d);
                        }
                    }
                });
            }
        });
    }
}
