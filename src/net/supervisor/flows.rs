//! The table of the jail's TCP flows: each flow's key, smoltcp socket, phase, host socket and
//! the bytes it owes; the wakers that mark a flow ready when its host socket is (no walk over
//! every flow per event); the open-flow limit and the socket-buffer budget
//! (`stack::BUFFER_BUDGET`) the flows hold; reaping of finished flows. It decides nothing and
//! moves no bytes: `tcp.rs` opens flows, `relay.rs` moves their bytes.

use super::decide::refusal;
use crate::net::parse::http1::Framer;
use crate::net::stack::{self, Stack};
use crate::netrules::matcher::Decision;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use tokio::sync::Notify;

/// Most TCP flows open at once (the rest are refused with RST).
pub const MAX_TCP_FLOWS: usize = 4096;

/// A TCP flow: (the jail's end, the destination), or for a published port (the jail's
/// listening end, the gateway's end).
pub(super) type Key = (SocketAddr, SocketAddr);

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Hostname port: the handshake is done, reading the first bytes for a name.
    Peeking,
    /// Waiting for the host connection (SYN-ACK held back, or the peeked bytes kept); also a
    /// refused flow whose socket is closing, for which no host will come.
    Dialing,
    Relay,
}

pub(super) struct TcpFlow {
    pub(super) key: Key,
    pub(super) handle: SocketHandle,
    pub(super) phase: Phase,
    pub(super) host: Option<super::host::HostConn>,
    /// Bytes read from the jail while peeking, owed to the host before anything else; on a
    /// plain-HTTP flow, every byte from the jail waits here until the framer decided it.
    pub(super) pending: Vec<u8>,
    /// Plain HTTP: how many bytes at the front of `pending` are decided and may go.
    pub(super) approved: usize,
    /// The socket's buffer size each way, counted in `FlowTable::buffered`.
    buffer: usize,
    /// Plain HTTP to a name-ruled port: every request head is decided, not only the first.
    pub(super) http: Option<Framer>,
    /// A later request on this connection was refused: nothing more from the jail goes out,
    /// and once the server has answered what it had (and closed), the jail gets this 403.
    pub(super) refused_tail: Option<Vec<u8>>,
    pub(super) host_eof: bool,
    pub(super) shut_wr: bool,
    pub(super) waker: Waker,
}

/// Flow ids whose host socket became ready, filled by the flows' wakers.
pub(super) struct Ready {
    ids: Mutex<Vec<u64>>,
    notify: Notify,
}

impl Ready {
    /// Resolves when a flow's waker has fired since the last call.
    pub(super) async fn notified(&self) {
        self.notify.notified().await
    }
}

struct FlowWaker {
    id: u64,
    ready: Arc<Ready>,
}

impl Wake for FlowWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Ok(mut ids) = self.ready.ids.lock() {
            ids.push(self.id);
        }
        self.ready.notify.notify_one();
    }
}

pub(super) struct FlowTable {
    flows: HashMap<u64, TcpFlow>,
    by_key: HashMap<Key, u64>,
    next_id: u64,
    /// Flows with work to do: new packets from the jail, a ready host socket, an event.
    dirty: HashSet<u64>,
    /// Flows serviced since the last egress, to drop if their socket is done.
    serviced: Vec<u64>,
    ready: Arc<Ready>,
    /// Socket buffer bytes the open flows hold, against `stack::BUFFER_BUDGET`.
    buffered: usize,
    /// Most flows open at once: `MAX_TCP_FLOWS` (lower in tests).
    limit: usize,
}

impl FlowTable {
    pub(super) fn new() -> FlowTable {
        FlowTable {
            flows: HashMap::new(),
            by_key: HashMap::new(),
            next_id: 1,
            dirty: HashSet::new(),
            serviced: vec![],
            ready: Arc::new(Ready { ids: Mutex::new(vec![]), notify: Notify::new() }),
            buffered: 0,
            limit: MAX_TCP_FLOWS,
        }
    }

    /// The per-direction buffer a new flow gets, or the refusal when the table is full or
    /// the session's buffer budget is spent.
    pub(super) fn admit(&self) -> Result<usize, Decision> {
        if self.flows.len() >= self.limit {
            return Err(refusal("too many open connections in this jail"));
        }
        stack::buffer_for(self.buffered).ok_or_else(|| {
            refusal(&format!(
                "the jail's open connections hold {} MiB of buffers, the session's limit; close some",
                stack::BUFFER_BUDGET >> 20
            ))
        })
    }

    /// Adds a flow whose socket (`buffer` bytes each way, from `admit`) is `handle`.
    pub(super) fn add(&mut self, key: Key, handle: SocketHandle, phase: Phase, buffer: usize) -> u64 {
        self.buffered += 2 * buffer;
        let id = self.next_id;
        self.next_id += 1;
        let waker = Waker::from(Arc::new(FlowWaker { id, ready: self.ready.clone() }));
        let flow = TcpFlow {
            key,
            handle,
            phase,
            host: None,
            pending: vec![],
            approved: 0,
            buffer,
            http: None,
            refused_tail: None,
            host_eof: false,
            shut_wr: false,
            waker,
        };
        self.flows.insert(id, flow);
        self.by_key.insert(key, id);
        id
    }

    pub(super) fn id_of(&self, key: &Key) -> Option<u64> {
        self.by_key.get(key).copied()
    }

    pub(super) fn get(&self, id: u64) -> Option<&TcpFlow> {
        self.flows.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut TcpFlow> {
        self.flows.get_mut(&id)
    }

    /// The flow has work to do at the next turn of the loop.
    pub(super) fn mark_dirty(&mut self, id: u64) {
        self.dirty.insert(id);
    }

    /// The flows with work to do, emptying the set.
    pub(super) fn take_dirty(&mut self) -> Vec<u64> {
        self.dirty.drain().collect()
    }

    pub(super) fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The wakers' signal, for the loop to wait on.
    pub(super) fn ready(&self) -> Arc<Ready> {
        self.ready.clone()
    }

    /// Moves the flows whose wakers fired into the dirty set.
    pub(super) fn collect_ready(&mut self) {
        let ids = self.ready.ids.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default();
        self.dirty.extend(ids);
    }

    /// The flow was serviced: `reap_serviced` looks at it after the next egress.
    pub(super) fn serviced(&mut self, id: u64) {
        self.serviced.push(id);
    }

    /// Drops every serviced flow whose socket is done. After egress: a socket closed by
    /// abort() still had its RST to send.
    pub(super) fn reap_serviced(&mut self, stack: &mut Stack) {
        for id in std::mem::take(&mut self.serviced) {
            self.reap(id, stack);
        }
    }

    /// Drops a flow whose socket is done, returning its buffers to the budget.
    fn reap(&mut self, id: u64, stack: &mut Stack) {
        let Some(flow) = self.flows.get(&id) else { return };
        let state = stack.socket(flow.handle).state();
        if !matches!(state, tcp::State::Closed | tcp::State::TimeWait) {
            return;
        }
        let Some(flow) = self.flows.remove(&id) else { return };
        self.by_key.remove(&flow.key);
        stack.remove(flow.handle);
        self.buffered -= 2 * flow.buffer;
        if let Some(host) = flow.host {
            // Closed without both FINs: the jail reset the connection, and so do we.
            if !(flow.host_eof && flow.shut_wr) {
                let _ = host.set_zero_linger();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::Event;
    use super::*;
    use crate::net::stack::{BUFFER_BUDGET, SOCKET_BUFFER};

    #[test]
    fn syn_is_refused_with_rst_when_the_flow_table_is_full() {
        let mut rig = Rig::new(&[]);
        rig.sup.flows.limit = 1;
        rig.open_to_host();
        assert_eq!(rig.sup.flows.flows.len(), 1);
        let (from, to) = (jail(40001), gateway(HOST_PORT));
        rig.send(&syn(from, to));
        assert!(rig.segments().iter().any(|s| s.rst && s.dst == from), "the second SYN is reset");
        assert!(rig.sup.flows.id_of(&(from, to)).is_none());
        let d = rig.denials();
        assert_eq!((d.len(), d[0].check.as_deref()), (1, Some("limit")), "{d:?}");
        assert_eq!(rig.dialled.lock().unwrap().len(), 1, "only the first flow is dialled");
    }

    #[test]
    fn syn_is_refused_with_rst_when_the_buffer_budget_is_spent() {
        let mut rig = Rig::new(&[]);
        rig.sup.flows.buffered = BUFFER_BUDGET;
        let (from, to) = (jail(40000), gateway(HOST_PORT));
        rig.send(&syn(from, to));
        assert!(rig.segments().iter().any(|s| s.rst));
        assert!(rig.sup.flows.id_of(&(from, to)).is_none());
        let d = rig.denials();
        assert!(d[0].reason.as_deref().unwrap_or("").contains("MiB of buffers"), "{d:?}");
        assert!(rig.dialled.lock().unwrap().is_empty());
    }

    #[test]
    fn a_published_connection_past_the_limits_is_dropped_without_a_flow() {
        let mut rig = Rig::new(&[]);
        rig.sup.flows.buffered = BUFFER_BUDGET;
        let _client = rig.publish(3000);
        assert!(rig.received().is_empty());
        assert!(rig.sup.flows.flows.is_empty());
    }

    #[test]
    fn a_flow_holds_its_buffers_until_it_is_reaped() {
        let mut rig = Rig::new(&[]);
        let (_, id) = rig.open_to_host();
        assert_eq!(rig.sup.flows.buffered, 2 * SOCKET_BUFFER, "both directions of the first flow, full size");
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        rig.deliver(Event::Dialed { id, result: Err(refused) });
        assert!(rig.sup.flows.get(id).is_none());
        assert_eq!(rig.sup.flows.buffered, 0, "the budget is whole again");
        assert!(rig.sup.flows.by_key.is_empty() && rig.sup.stack.has_no_sockets());
    }

    #[test]
    fn an_open_flow_is_not_reaped() {
        let mut rig = Rig::new(&[]);
        let (_, id) = rig.open_to_host();
        rig.sup.flows.serviced(id);
        rig.sup.turn();
        assert!(rig.sup.flows.get(id).is_some(), "still waiting for its host");
    }

    #[test]
    fn a_flows_waker_marks_only_that_flow_dirty() {
        let mut table = FlowTable::new();
        let mut sockets = smoltcp::iface::SocketSet::new(vec![]);
        let mut open = |key: Key| {
            let sock = tcp::Socket::new(tcp::SocketBuffer::new(vec![0; 16]), tcp::SocketBuffer::new(vec![0; 16]));
            let handle = sockets.add(sock);
            table.add(key, handle, Phase::Relay, 16)
        };
        let a = open((jail(1), sa("198.51.100.7:80")));
        let b = open((jail(2), sa("198.51.100.7:80")));
        assert_ne!(a, b);
        assert_eq!(table.id_of(&(jail(2), sa("198.51.100.7:80"))), Some(b));
        assert!(!table.has_dirty());
        table.get(b).expect("flow b").waker.wake_by_ref();
        table.collect_ready();
        assert_eq!(table.take_dirty(), [b]);
        assert!(!table.has_dirty());
        assert_eq!(table.buffered, 2 * 16 * 2);
    }
}
