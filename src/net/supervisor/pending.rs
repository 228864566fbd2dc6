//! Connections that wait for their proof at a listener the network reaches (the session
//! network's, the job ports'), and the refusals of those that never give one. Anyone on the
//! network can open such a connection, so neither kind may crowd out the session's own:
//! - loopback sources are closed at once (a real caller comes from a routed address; a local
//!   user could otherwise bind any `127.x.y.z` and count as many sources);
//! - at most `max` wait at once, `per_source` from one address, and a new one takes the place
//!   of the oldest (its source's, when that source is at its cap; else the oldest of all), so
//!   a flood of silent connections must outpace a real caller's single round trip to keep it
//!   out;
//! - refusals are audited at most once a second per listener and source address, with the
//!   count of the others (the supervisor's audit budget is the jail's too).

use super::decide::{refusal, Shared};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub(super) struct Pending {
    max: usize,
    per_source: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// Oldest first: each waiting connection's id, source, and what ends it.
    queue: VecDeque<(u64, IpAddr, oneshot::Sender<()>)>,
}

/// A waiting connection's place; dropping it gives the place back.
pub(super) struct Place {
    pending: Arc<Pending>,
    id: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Ok(mut i) = self.pending.inner.lock() {
            i.queue.retain(|(id, _, _)| *id != self.id);
        }
    }
}

impl Pending {
    pub(super) fn new(max: usize, per_source: usize) -> Arc<Pending> {
        Arc::new(Pending { max, per_source, inner: Mutex::default() })
    }

    /// A place for a connection from `peer`, and the signal that it was evicted (None: a
    /// loopback source, closed at once).
    pub(super) fn admit(self: &Arc<Pending>, peer: IpAddr) -> Option<(Place, oneshot::Receiver<()>)> {
        if super::super::jobs::canonical(peer).is_loopback() {
            return None;
        }
        let mut i = self.inner.lock().ok()?;
        let from_source = i.queue.iter().filter(|(_, ip, _)| *ip == peer).count();
        let evict = if from_source >= self.per_source {
            i.queue.iter().position(|(_, ip, _)| *ip == peer)
        } else if i.queue.len() >= self.max {
            Some(0)
        } else {
            None
        };
        if let Some(at) = evict {
            // Dropping the sender ends that connection's wait.
            i.queue.remove(at);
        }
        let id = i.next;
        i.next += 1;
        let (tx, rx) = oneshot::channel();
        i.queue.push_back((id, peer, tx));
        Some((Place { pending: self.clone(), id }, rx))
    }

    #[cfg(test)]
    fn waiting(&self) -> Vec<IpAddr> {
        self.inner.lock().map(|i| i.queue.iter().map(|(_, ip, _)| *ip).collect()).unwrap_or_default()
    }
}

/// The refusals of one listener, written at most once a second per source address; those
/// held back are counted in one record at the end of that second.
pub(super) struct Refusals {
    check: &'static str,
    here: Option<SocketAddr>,
    /// Each source's last record, and the refusals held back since (with the last reason).
    recent: Mutex<HashMap<IpAddr, (Instant, usize, String)>>,
}

/// Sources remembered at most; past it, those not heard of for a second are forgotten.
const REMEMBERED: usize = 256;
const WINDOW: Duration = Duration::from_secs(1);

impl Refusals {
    pub(super) fn new(check: &'static str, here: Option<SocketAddr>) -> Refusals {
        Refusals { check, here, recent: Mutex::default() }
    }

    pub(super) fn refuse(self: &Arc<Self>, shared: &Arc<Shared>, peer: IpAddr, why: &str) {
        let Ok(mut recent) = self.recent.lock() else { return };
        let now = Instant::now();
        if recent.len() >= REMEMBERED {
            recent.retain(|_, (last, held, _)| *held > 0 || now.duration_since(*last) < WINDOW);
        }
        let full = recent.len() >= REMEMBERED;
        match recent.get_mut(&peer) {
            Some((last, held, last_why)) if now.duration_since(*last) < WINDOW => {
                *held += 1;
                *last_why = why.to_string();
                if *held == 1 {
                    // The first held back: one record of them all when the second is over.
                    let (me, shared, wait) = (self.clone(), shared.clone(), WINDOW - now.duration_since(*last));
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        me.flush(&shared, peer);
                    });
                }
                return;
            }
            Some((last, _, _)) => *last = now,
            None if full => return,
            None => {
                recent.insert(peer, (now, 0, String::new()));
            }
        }
        drop(recent);
        shared.audit.deny("tcp", self.here, None, self.check, &refusal(why));
    }

    fn flush(&self, shared: &Shared, peer: IpAddr) {
        let Ok(mut recent) = self.recent.lock() else { return };
        let Some((last, held, why)) = recent.get_mut(&peer) else { return };
        let (n, why) = (std::mem::take(held), std::mem::take(why));
        *last = Instant::now();
        drop(recent);
        if n > 0 {
            let d = refusal(&format!("{n} more connection(s) from {peer} refused within a second; the last: {why}"));
            shared.audit.deny("tcp", self.here, None, self.check, &d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_sources_get_no_place() {
        let p = Pending::new(4, 2);
        assert!(p.admit(ip("127.0.0.5")).is_none());
        assert!(p.admit(ip("::1")).is_none());
        assert!(p.admit(ip("::ffff:127.0.0.2")).is_none());
        assert!(p.admit(ip("203.0.113.2")).is_some());
    }

    #[test]
    fn a_new_call_evicts_the_oldest_of_its_source_then_of_all() {
        let p = Pending::new(4, 2);
        let (_a1, mut a1_rx) = p.admit(ip("203.0.113.9")).unwrap();
        let (_a2, _a2_rx) = p.admit(ip("203.0.113.9")).unwrap();
        // The flooding source is at its cap: its own oldest goes, not another's place.
        let (_a3, _a3_rx) = p.admit(ip("203.0.113.9")).unwrap();
        assert!(a1_rx.try_recv().is_err_and(|e| e == oneshot::error::TryRecvError::Closed), "evicted");
        let (_b, mut b_rx) = p.admit(ip("203.0.113.2")).unwrap();
        let (_c, _c_rx) = p.admit(ip("203.0.113.3")).unwrap();
        assert_eq!(p.waiting().len(), 4);
        // Full: the oldest of all goes.
        let (_d, _d_rx) = p.admit(ip("203.0.113.4")).unwrap();
        assert_eq!(p.waiting(), [ip("203.0.113.9"), ip("203.0.113.2"), ip("203.0.113.3"), ip("203.0.113.4")]);
        assert!(b_rx.try_recv().is_err_and(|e| e == oneshot::error::TryRecvError::Empty), "b still waits");
        drop(_b);
        assert_eq!(p.waiting().len(), 3, "a place given back when its connection is done");
    }
}
