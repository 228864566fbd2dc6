//! Connections that wait for their proof at a listener the network reaches (the session
//! network's, the job ports'), and the refusals of those that never give one. Anyone who
//! reaches the listener can open such a connection, so neither kind may crowd out the
//! session's own:
//! - a connection from this host (loopback, where a one-host cluster's listeners are, or any
//!   of the host's addresses) is asked of the kernel (`net::cluster::local_peer`): another user's is
//!   closed at once, before any challenge (the session's jobs and jails run as the user: it is
//!   never one of them), and the user's own count as one source whatever address they bound (a
//!   local user could otherwise bind any `127.x.y.z` and count as many sources); a loopback
//!   connection whose other end the kernel cannot show is closed too;
//! - at most `max` wait at once, `per_source` from one source (another host's address, or the
//!   user's own processes here), and a new one takes the place of the oldest (its source's,
//!   when that source is at its cap; else the oldest of all), so a flood of silent connections
//!   must outpace a real caller's single round trip to keep it out;
//! - refusals are audited at most once a second per listener and origin (another host's
//!   address, all of loopback counting as one; another local user), with the count of the
//!   others (the supervisor's audit budget is the jail's too): another user's flood neither
//!   fills the log nor hides the refusals of anyone else's connections.

use super::decide::{refusal, Shared};
use crate::net::cluster::jobs::canonical;
use crate::net::cluster::local_peer::{self, Peer};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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
    queue: VecDeque<(u64, Source, oneshot::Sender<()>)>,
}

/// Whom a waiting connection counts as, for the per-source cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// The user's own processes on this host (the session's calls from here, its jobs' on a
    /// node that is this host), from whatever address of it.
    OwnHere,
    /// Another host, by its address.
    Host(IpAddr),
}

/// Whose refusals share one audit record a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Origin {
    /// A source address; all of loopback is one (a local user can bind any of 127.0.0.0/8).
    Address(IpAddr),
    /// Another user of this host.
    User(u32),
}

impl Origin {
    pub(super) fn of(peer: IpAddr) -> Origin {
        match canonical(peer) {
            ip if ip.is_loopback() => Origin::Address(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            ip => Origin::Address(ip),
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Address(ip) => write!(f, "{ip}"),
            Origin::User(uid) => write!(f, "uid {uid} on this host"),
        }
    }
}

/// A connection closed before its challenge: whose, and why.
pub(super) type Closed = (Origin, String);

/// Whom the connection from `peer` to `here` counts as, or why it is closed at once.
pub(super) fn source(peer: SocketAddr, here: SocketAddr) -> Result<Source, Closed> {
    source_given(peer, nix::unistd::geteuid().as_raw(), local_peer::owner(peer, here))
}

/// `source`, with the kernel's answer (`local_peer::owner`) and the user's id given.
fn source_given(peer: SocketAddr, own: u32, owner: std::io::Result<Peer>) -> Result<Source, Closed> {
    let ip = canonical(peer.ip());
    match owner {
        Ok(Peer::Here { uid }) if uid == own => Ok(Source::OwnHere),
        Ok(Peer::Here { uid }) => Err((
            Origin::User(uid),
            format!(
                "it is another user's connection (uid {uid}) from this host: the session's jobs and jails run as \
                 this user"
            ),
        )),
        // Only this host reaches a loopback address: its socket must be here.
        Ok(Peer::Elsewhere) if ip.is_loopback() => {
            Err((Origin::of(ip), "it comes from loopback, but no socket of this host's is its other end".into()))
        }
        Err(e) if ip.is_loopback() => {
            Err((Origin::of(ip), format!("whose connection from loopback it is cannot be told ({e})")))
        }
        Ok(Peer::Elsewhere) | Err(_) => Ok(Source::Host(ip)),
    }
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

    /// A place for a connection that counts as `source` (what `source` tells), and the signal
    /// that it was evicted.
    pub(super) fn admit(self: &Arc<Pending>, source: Source) -> Option<(Place, oneshot::Receiver<()>)> {
        let mut i = self.inner.lock().ok()?;
        let from_source = i.queue.iter().filter(|(_, s, _)| *s == source).count();
        let evict = if from_source >= self.per_source {
            i.queue.iter().position(|(_, s, _)| *s == source)
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
        i.queue.push_back((id, source, tx));
        Some((Place { pending: self.clone(), id }, rx))
    }

    #[cfg(test)]
    fn waiting(&self) -> Vec<Source> {
        self.inner.lock().map(|i| i.queue.iter().map(|(_, s, _)| *s).collect()).unwrap_or_default()
    }
}

/// The refusals of one listener, written at most once a second per source address; those
/// held back are counted in one record at the end of that second.
pub(super) struct Refusals {
    check: &'static str,
    here: Option<SocketAddr>,
    /// Each origin's last record, and the refusals held back since (with the last reason).
    recent: Mutex<HashMap<Origin, (Instant, usize, String)>>,
}

/// Sources remembered at most; past it, those not heard of for a second are forgotten.
const REMEMBERED: usize = 256;
const WINDOW: Duration = Duration::from_secs(1);

impl Refusals {
    pub(super) fn new(check: &'static str, here: Option<SocketAddr>) -> Refusals {
        Refusals { check, here, recent: Mutex::default() }
    }

    pub(super) fn refuse(self: &Arc<Self>, shared: &Arc<Shared>, from: Origin, why: &str) {
        let Ok(mut recent) = self.recent.lock() else { return };
        let now = Instant::now();
        if recent.len() >= REMEMBERED {
            recent.retain(|_, (last, held, _)| *held > 0 || now.duration_since(*last) < WINDOW);
        }
        let full = recent.len() >= REMEMBERED;
        match recent.get_mut(&from) {
            Some((last, held, last_why)) if now.duration_since(*last) < WINDOW => {
                *held += 1;
                *last_why = why.to_string();
                if *held == 1 {
                    // The first held back: one record of them all when the second is over.
                    let (me, shared, wait) = (self.clone(), shared.clone(), WINDOW - now.duration_since(*last));
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        me.flush(&shared, from);
                    });
                }
                return;
            }
            Some((last, _, _)) => *last = now,
            None if full => return,
            None => {
                recent.insert(from, (now, 0, String::new()));
            }
        }
        drop(recent);
        shared.audit.deny("tcp", self.here, None, self.check, &refusal(why));
    }

    fn flush(&self, shared: &Shared, from: Origin) {
        let Ok(mut recent) = self.recent.lock() else { return };
        let Some((last, held, why)) = recent.get_mut(&from) else { return };
        let (n, why) = (std::mem::take(held), std::mem::take(why));
        *last = Instant::now();
        drop(recent);
        if n > 0 {
            let d = refusal(&format!("{n} more connection(s) from {from} refused within a second; the last: {why}"));
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

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn another_users_connection_from_this_host_gets_no_place() {
        // A one-host cluster's listener on loopback, or the host's own address: the kernel
        // names the socket's owner.
        for peer in ["127.0.0.5:40000", "[::ffff:127.0.0.2]:40000", "192.0.2.7:40000"] {
            let (from, e) = source_given(sa(peer), 1000, Ok(Peer::Here { uid: 1001 })).unwrap_err();
            assert!(e.contains("another user's connection (uid 1001)"), "{peer}: {e}");
            assert_eq!(from, Origin::User(1001), "audited apart from the user's own connections");
            assert_eq!(source_given(sa(peer), 1000, Ok(Peer::Here { uid: 1000 })), Ok(Source::OwnHere), "{peer}");
        }
        // Loopback whose other end the kernel does not show, or cannot be asked about.
        let lo = Origin::Address(ip("127.0.0.1"));
        assert_eq!(source_given(sa("127.0.0.9:1"), 1000, Ok(Peer::Elsewhere)).unwrap_err().0, lo);
        assert_eq!(source_given(sa("[::1]:1"), 1000, Err(std::io::Error::other("no sock_diag"))).unwrap_err().0, lo);
        // Another host: by its address, whether or not the kernel could be asked.
        assert_eq!(source_given(sa("203.0.113.2:1"), 1000, Ok(Peer::Elsewhere)), Ok(Source::Host(ip("203.0.113.2"))));
        assert_eq!(
            source_given(sa("[::ffff:203.0.113.2]:1"), 1000, Err(std::io::Error::other("no sock_diag"))),
            Ok(Source::Host(ip("203.0.113.2")))
        );
    }

    #[test]
    fn the_users_own_connections_from_this_host_are_one_source_whatever_their_address() {
        // Eight of the user's own (from whichever addresses of this host), then a ninth: one
        // source, so its own oldest makes room, not another host's call.
        let p = Pending::new(16, 8);
        let (_other, mut other_rx) = p.admit(Source::Host(ip("203.0.113.2"))).unwrap();
        let first = p.admit(Source::OwnHere).unwrap();
        let mut held: Vec<_> = (0..7).map(|_| p.admit(Source::OwnHere).unwrap()).collect();
        held.push(p.admit(Source::OwnHere).unwrap());
        let (_, mut first_rx) = first;
        assert!(first_rx.try_recv().is_err_and(|e| e == oneshot::error::TryRecvError::Closed), "evicted");
        assert!(other_rx.try_recv().is_err_and(|e| e == oneshot::error::TryRecvError::Empty), "another host's waits");
        assert_eq!(p.waiting().iter().filter(|s| **s == Source::OwnHere).count(), 8);
    }

    #[test]
    fn a_new_call_evicts_the_oldest_of_its_source_then_of_all() {
        let p = Pending::new(4, 2);
        let host = |s: &str| Source::Host(ip(s));
        let (_a1, mut a1_rx) = p.admit(host("203.0.113.9")).unwrap();
        let (_a2, _a2_rx) = p.admit(host("203.0.113.9")).unwrap();
        // The flooding source is at its cap: its own oldest goes, not another's place.
        let (_a3, _a3_rx) = p.admit(host("203.0.113.9")).unwrap();
        assert!(a1_rx.try_recv().is_err_and(|e| e == oneshot::error::TryRecvError::Closed), "evicted");
        let (_b, mut b_rx) = p.admit(host("203.0.113.2")).unwrap();
        let (_c, _c_rx) = p.admit(host("203.0.113.3")).unwrap();
        assert_eq!(p.waiting().len(), 4);
        // Full: the oldest of all goes.
        let (_d, _d_rx) = p.admit(host("203.0.113.4")).unwrap();
        assert_eq!(p.waiting(), [host("203.0.113.9"), host("203.0.113.2"), host("203.0.113.3"), host("203.0.113.4")]);
        assert!(b_rx.try_recv().is_err_and(|e| e == oneshot::error::TryRecvError::Empty), "b still waits");
        drop(_b);
        assert_eq!(p.waiting().len(), 3, "a place given back when its connection is done");
    }
}
