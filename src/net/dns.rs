//! The jail's resolver in `filtered` mode. Every DNS query the jail sends (to the gateway, or
//! to any address on port 53) is answered here: names the policy blocks get NXDOMAIN; the
//! rest are forwarded to the host's resolvers, and every address in the answer is checked
//! against the IP floor before the jail sees it (a name that resolves to host loopback or to
//! the host's own address is refused: DNS rebinding). The names each address was given for
//! are remembered, so a flow to a bare address can be matched on the names the jail asked for.
//! Messages are parsed and written by hickory-proto.

use crate::netrules::matcher::{Decision, RuleSet};
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Names are remembered at least this long, whatever the TTL: clients cache answers longer
/// than they are told to, and a flow must still match its name.
const MIN_REMEMBER: Duration = Duration::from_secs(3600);
/// Bound on remembered (address, name) pairs; the oldest go first.
const MAX_ENTRIES: usize = 16384;
/// One upstream try; the query then goes to the next resolver.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest DNS message we read or forward (EDNS payloads are at most this in practice).
pub const MAX_MESSAGE: usize = 65535;

/// address → names given for it by our resolver.
#[derive(Default)]
pub struct NameCache {
    by_ip: HashMap<IpAddr, Vec<(String, Instant)>>,
    order: VecDeque<(IpAddr, String)>,
}

impl NameCache {
    pub fn learn(&mut self, name: &str, ip: IpAddr, ttl: u32, now: Instant) {
        let ip = crate::netrules::matcher::canonical_ip(ip);
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let until = now + MIN_REMEMBER.max(Duration::from_secs(u64::from(ttl)));
        let names = self.by_ip.entry(ip).or_default();
        if let Some(e) = names.iter_mut().find(|(n, _)| *n == name) {
            e.1 = e.1.max(until);
            return;
        }
        names.push((name.clone(), until));
        self.order.push_back((ip, name));
        while self.order.len() > MAX_ENTRIES {
            let Some((old_ip, old_name)) = self.order.pop_front() else { break };
            if let Some(v) = self.by_ip.get_mut(&old_ip) {
                v.retain(|(n, _)| *n != old_name);
                if v.is_empty() {
                    self.by_ip.remove(&old_ip);
                }
            }
        }
    }

    /// The live names our resolver gave for this address.
    pub fn names_for(&self, ip: IpAddr, now: Instant) -> Vec<String> {
        let ip = crate::netrules::matcher::canonical_ip(ip);
        self.by_ip
            .get(&ip)
            .map(|v| v.iter().filter(|(_, until)| *until > now).map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }

    pub fn resolved_to(&self, name: &str, ip: IpAddr, now: Instant) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.names_for(ip, now).contains(&name)
    }
}

/// What the resolver did with one query, for the caller to act on and audit.
#[derive(Debug)]
pub enum Verdict {
    /// Answer the jail with these bytes now (a refusal or an error), auditing the denial if any.
    Answer { reply: Vec<u8>, denied: Option<(String, Decision)> },
    /// Forward `upstream` (the query rebuilt from its question alone: nothing else the jail
    /// put in it goes out) upstream; `name` is the question, for the answer check.
    Forward { name: String, upstream: Vec<u8> },
    /// Not a query we can answer at all (no id to reply to): drop it.
    Drop,
}

/// Decides a query from the jail before anything goes upstream.
pub fn check_query(query: &[u8], rules: &RuleSet) -> Verdict {
    let msg = match Message::from_vec(query) {
        Ok(m) => m,
        Err(_) => {
            // Malformed: FORMERR if there is at least an id to answer to.
            let Some(id) = query.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]])) else { return Verdict::Drop };
            return Verdict::Answer {
                reply: error_reply(id, OpCode::Query, ResponseCode::FormErr, None),
                denied: None,
            };
        }
    };
    if msg.metadata.message_type != MessageType::Query {
        return Verdict::Drop;
    }
    let id = msg.metadata.id;
    if msg.metadata.op_code != OpCode::Query || msg.queries.len() != 1 {
        return Verdict::Answer {
            reply: error_reply(id, msg.metadata.op_code, ResponseCode::NotImp, None),
            denied: None,
        };
    }
    let q = &msg.queries[0];
    let name = q.name.to_ascii();
    let name = name.trim_end_matches('.').to_string();
    // Reverse lookups ask nothing the policy is about; they go upstream like any other name.
    let decision = rules.name_allowed(&name);
    if !decision.allowed {
        let reply = error_reply(id, OpCode::Query, ResponseCode::NXDomain, Some(&msg));
        return Verdict::Answer { reply, denied: Some((name, decision)) };
    }
    // Only the question leaves: the jail could put any name and data in the other sections
    // (an additional record is as good a DNS tunnel as the question).
    let mut out = Message::query();
    out.metadata.id = id;
    out.metadata.recursion_desired = msg.metadata.recursion_desired;
    out.metadata.checking_disabled = msg.metadata.checking_disabled;
    out.add_query(q.clone());
    if let Some(edns) = &msg.edns {
        let mut ours = hickory_proto::op::Edns::new();
        ours.set_max_payload(edns.max_payload().clamp(512, MAX_MESSAGE as u16));
        ours.set_dnssec_ok(edns.flags().dnssec_ok);
        out.set_edns(ours);
    }
    match out.to_vec() {
        Ok(upstream) => Verdict::Forward { name, upstream },
        Err(_) => {
            Verdict::Answer { reply: error_reply(id, OpCode::Query, ResponseCode::FormErr, Some(&msg)), denied: None }
        }
    }
}

fn error_reply(id: u16, op: OpCode, code: ResponseCode, query: Option<&Message>) -> Vec<u8> {
    let mut m = Message::error_msg(id, op, code);
    m.metadata.recursion_available = true;
    if let Some(q) = query {
        m.metadata.recursion_desired = q.metadata.recursion_desired;
        m.queries = q.queries.clone();
    }
    m.to_vec().unwrap_or_default()
}

/// The upstream answer, checked: addresses in the IP floor are removed (and if that leaves
/// none, the whole answer becomes NXDOMAIN); what remains is what the jail may learn.
pub struct Checked {
    pub reply: Vec<u8>,
    /// (name, address, ttl) pairs to remember for the matcher.
    pub learned: Vec<(String, IpAddr, u32)>,
    /// Addresses removed, with why.
    pub floored: Vec<(IpAddr, Decision)>,
}

pub fn check_answer(answer: &[u8], name: &str, rules: &RuleSet) -> Option<Checked> {
    let mut msg = Message::from_vec(answer).ok()?;
    if msg.metadata.message_type != MessageType::Response {
        return None;
    }
    // Every owner name in the answer (the question and its CNAME chain) is a name of the
    // addresses found: a flow to them may show any of these names.
    let mut owners = vec![name.to_ascii_lowercase()];
    for r in &msg.answers {
        if let RData::CNAME(c) = &r.data {
            owners.push(c.0.to_ascii().trim_end_matches('.').to_ascii_lowercase());
        }
    }
    let mut floored = vec![];
    let mut learned = vec![];
    let before = msg.answers.len();
    msg.answers.retain(|r| {
        let ip = match &r.data {
            RData::A(a) => IpAddr::V4(a.0),
            RData::AAAA(a) => IpAddr::V6(a.0),
            // HTTPS/SVCB records may carry addresses (ipv4hint, ipv6hint) that no floor
            // checks: dropped; clients fall back to A/AAAA, which are checked.
            RData::HTTPS(_) | RData::SVCB(_) => return false,
            _ => return true,
        };
        if let Some(d) = rules.address_floor(ip) {
            floored.push((ip, d));
            return false;
        }
        for owner in &owners {
            learned.push((owner.clone(), ip, r.ttl));
        }
        true
    });
    // Addresses may hide in the authority and additional sections too (glue): the jail gets
    // none of those (a stub resolver needs none), whatever they are.
    let is_address = |r: &hickory_proto::rr::Record| {
        matches!(r.record_type(), RecordType::A | RecordType::AAAA | RecordType::HTTPS | RecordType::SVCB)
    };
    let extra = msg.authorities.iter().chain(&msg.additionals).filter(|r| is_address(r)).count();
    msg.authorities.retain(|r| !is_address(r));
    msg.additionals.retain(|r| !is_address(r));
    if floored.is_empty() && before == msg.answers.len() && extra == 0 {
        return Some(Checked { reply: answer.to_vec(), learned, floored });
    }
    let has_address = msg.answers.iter().any(|r| matches!(r.data, RData::A(_) | RData::AAAA(_)));
    if !has_address && !floored.is_empty() {
        let reply = error_reply(msg.metadata.id, OpCode::Query, ResponseCode::NXDomain, Some(&msg));
        return Some(Checked { reply, learned, floored });
    }
    Some(Checked { reply: msg.to_vec().ok()?, learned, floored })
}

/// Forwards one query over UDP to the first upstream that answers it (with a matching id).
/// If the answer was truncated, asks the same server again over TCP.
pub async fn forward(query: &[u8], upstreams: &[SocketAddr]) -> Option<Vec<u8>> {
    let id = query.get(..2)?;
    for up in upstreams {
        let bind: SocketAddr = if up.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
        let Ok(sock) = tokio::net::UdpSocket::bind(bind).await else { continue };
        if sock.connect(up).await.is_err() || sock.send(query).await.is_err() {
            continue;
        }
        let mut buf = vec![0u8; MAX_MESSAGE];
        let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
                Ok(Ok(n)) if n >= 12 && &buf[..2] == id => {
                    buf.truncate(n);
                    // TC bit: the full answer needs TCP.
                    if buf[2] & 0x02 != 0 {
                        if let Some(full) = forward_tcp(query, *up).await {
                            return Some(full);
                        }
                    }
                    return Some(buf);
                }
                Ok(Ok(_)) => continue,
                _ => break,
            }
        }
    }
    None
}

async fn forward_tcp(query: &[u8], up: SocketAddr) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let work = async {
        let mut s = tokio::net::TcpStream::connect(up).await.ok()?;
        let len = u16::try_from(query.len()).ok()?;
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(query);
        s.write_all(&framed).await.ok()?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await.ok()?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut buf).await.ok()?;
        Some(buf)
    };
    tokio::time::timeout(UPSTREAM_TIMEOUT, work).await.ok().flatten()
}

/// Resolves a name to its addresses through `upstreams` (A and AAAA): the proxied mode's
/// lookups, so they use the same resolvers as the filtered mode's. Empty if nothing answers.
pub async fn resolve(name: &str, upstreams: &[SocketAddr]) -> Vec<IpAddr> {
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    let Ok(qname) = Name::from_ascii(name) else { return vec![] };
    let ask = |rtype: RecordType| {
        let mut m = Message::query();
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(qname.clone(), rtype));
        async move {
            let Ok(q) = m.to_vec() else { return vec![] };
            let Some(answer) = forward(&q, upstreams).await else { return vec![] };
            let Ok(msg) = Message::from_vec(&answer) else { return vec![] };
            msg.answers
                .iter()
                .filter_map(|r| match &r.data {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        }
    };
    let (v4, v6) = tokio::join!(ask(RecordType::A), ask(RecordType::AAAA));
    v4.into_iter().chain(v6).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::netrules::matcher::{Action, Layer, MatcherOptions};
    use hickory_proto::op::Query;
    use hickory_proto::rr::rdata::{A, AAAA, CNAME};
    use hickory_proto::rr::{Name, Record};

    fn rules(list: &[(&str, Action)]) -> RuleSet {
        let r: Vec<_> = list.iter().map(|(t, a)| (t.to_string(), *a, Layer::User)).collect();
        let opts = MatcherOptions { host_addrs: vec!["192.0.2.2".parse().unwrap()], ..Default::default() };
        RuleSet::new(&r, opts).unwrap()
    }

    /// A query for the A records of `name`, as a stub resolver sends it.
    pub(crate) fn query(name: &str, id: u16) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = id;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        m.to_vec().unwrap()
    }

    fn answer(name: &str, id: u16, addrs: &[&str], cname: Option<&str>) -> Vec<u8> {
        let mut m = Message::response(id, OpCode::Query);
        let owner = Name::from_ascii(name).unwrap();
        m.add_query(Query::query(owner.clone(), RecordType::A));
        let mut target = owner.clone();
        if let Some(c) = cname {
            target = Name::from_ascii(c).unwrap();
            m.add_answer(Record::from_rdata(owner, 60, RData::CNAME(CNAME(target.clone()))));
        }
        for a in addrs {
            let ip: IpAddr = a.parse().unwrap();
            let data = match ip {
                IpAddr::V4(v) => RData::A(A(v)),
                IpAddr::V6(v) => RData::AAAA(AAAA(v)),
            };
            m.add_answer(Record::from_rdata(target.clone(), 30, data));
        }
        m.to_vec().unwrap()
    }

    fn rcode(reply: &[u8]) -> ResponseCode {
        Message::from_vec(reply).unwrap().metadata.response_code
    }

    #[test]
    fn blocked_names_get_nxdomain_with_the_question_echoed() {
        let r = rules(&[("pastebin.com", Action::Block)]);
        match check_query(&query("pastebin.com.", 7), &r) {
            Verdict::Answer { reply, denied: Some((name, d)) } => {
                assert_eq!(name, "pastebin.com");
                assert!(!d.allowed);
                let m = Message::from_vec(&reply).unwrap();
                assert_eq!(m.metadata.id, 7);
                assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
                assert_eq!(m.queries.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(check_query(&query("example.org.", 8), &r), Verdict::Forward { .. }));
    }

    #[test]
    fn allow_list_policy_resolves_only_its_exceptions() {
        let r = rules(&[("*", Action::Block), ("github.com", Action::Allow), ("*.pythonhosted.org", Action::Allow)]);
        assert!(matches!(check_query(&query("github.com.", 1), &r), Verdict::Forward { .. }));
        assert!(matches!(check_query(&query("files.pythonhosted.org.", 1), &r), Verdict::Forward { .. }));
        assert!(matches!(check_query(&query("evil.example.", 1), &r), Verdict::Answer { denied: Some(_), .. }));
    }

    #[test]
    fn floored_addresses_never_reach_the_jail() {
        let r = rules(&[]);
        // Rebinding: a public name answering with loopback, the host's own address, metadata.
        for bad in ["127.0.0.1", "192.0.2.2", "169.254.169.254", "::1", "::ffff:127.0.0.1"] {
            let c = check_answer(&answer("rebind.test", 3, &[bad], None), "rebind.test", &r).unwrap();
            assert_eq!(rcode(&c.reply), ResponseCode::NXDomain, "{bad}");
            assert!(c.learned.is_empty());
            assert_eq!(c.floored.len(), 1);
        }
        // Mixed: the good address stays, the bad one goes.
        let c = check_answer(&answer("mixed.test", 3, &["198.51.100.2", "127.0.0.1"], None), "mixed.test", &r).unwrap();
        let m = Message::from_vec(&c.reply).unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(c.learned, vec![("mixed.test".to_string(), "198.51.100.2".parse().unwrap(), 30)]);
    }

    #[test]
    fn addresses_in_the_other_sections_never_reach_the_jail() {
        // Glue: an A record of 127.0.0.1 in the additional section of an otherwise clean
        // answer (and one in the authority section) used to pass byte for byte.
        let r = rules(&[]);
        let mut m = Message::from_vec(&answer("glue.test", 4, &["198.51.100.2"], None)).unwrap();
        let ns = Name::from_ascii("ns.glue.test").unwrap();
        m.add_additional(Record::from_rdata(ns.clone(), 30, RData::A(A("127.0.0.1".parse().unwrap()))));
        m.add_authority(Record::from_rdata(ns, 30, RData::AAAA(AAAA("::1".parse().unwrap()))));
        let c = check_answer(&m.to_vec().unwrap(), "glue.test", &r).unwrap();
        let out = Message::from_vec(&c.reply).unwrap();
        assert_eq!(out.answers.len(), 1);
        assert!(out
            .additionals
            .iter()
            .chain(&out.authorities)
            .all(|r| !matches!(r.data, RData::A(_) | RData::AAAA(_))));
        assert_eq!(c.learned.len(), 1);
    }

    #[test]
    fn a_deny_all_name_rule_with_an_address_allow_forwards_no_name() {
        // Otherwise every name would go upstream: a DNS tunnel to any server.
        let r = rules(&[("*", Action::Block), ("198.51.100.0/24", Action::Allow), ("allowed.test", Action::Allow)]);
        assert!(matches!(
            check_query(&query("exfil-data.evil.example.", 9), &r),
            Verdict::Answer { denied: Some(_), .. }
        ));
        assert!(matches!(check_query(&query("allowed.test.", 9), &r), Verdict::Forward { .. }));
    }

    #[test]
    fn only_the_question_goes_upstream() {
        // A record the jail adds to its query (a name and data of its choosing) stays here.
        let r = rules(&[]);
        let mut m = Message::from_vec(&query("allowed.test.", 11)).unwrap();
        let exfil = Name::from_ascii("exfil-in-additional.evil.example.").unwrap();
        m.add_additional(Record::from_rdata(exfil, 30, RData::A(A("192.0.2.9".parse().unwrap()))));
        let Verdict::Forward { upstream, .. } = check_query(&m.to_vec().unwrap(), &r) else { panic!("not forwarded") };
        let up = Message::from_vec(&upstream).unwrap();
        assert_eq!((up.metadata.id, up.queries.len()), (11, 1));
        assert!(up.additionals.is_empty() && up.answers.is_empty() && up.authorities.is_empty());
        assert!(!String::from_utf8_lossy(&upstream).contains("exfil"));
    }

    #[test]
    fn clean_answers_pass_byte_for_byte_and_teach_the_cname_chain() {
        let r = rules(&[]);
        let a = answer("www.github.com", 9, &["140.82.112.3"], Some("github.com"));
        let c = check_answer(&a, "www.github.com", &r).unwrap();
        assert_eq!(c.reply, a);
        let names: Vec<_> = c.learned.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["www.github.com", "github.com"]);
    }

    #[test]
    fn garbage_queries_get_formerr_or_nothing() {
        let r = rules(&[]);
        assert!(matches!(check_query(&[], &r), Verdict::Drop));
        assert!(matches!(check_query(&[1], &r), Verdict::Drop));
        match check_query(&[0xab, 0xcd, 0xff, 0xff, 0xff], &r) {
            Verdict::Answer { reply, .. } => assert_eq!(&reply[..2], &[0xab, 0xcd]),
            other => panic!("{other:?}"),
        }
        let mut seed = 99u64;
        for len in 0..300 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = check_query(&buf, &r);
            let _ = check_answer(&buf, "x.test", &r);
        }
        assert!(check_answer(&query("x.test.", 1), "x.test", &r).is_none(), "a query is no answer");
    }

    #[test]
    fn cache_remembers_names_per_address_and_forgets_the_oldest() {
        let mut c = NameCache::default();
        let now = Instant::now();
        let ip: IpAddr = "198.51.100.2".parse().unwrap();
        c.learn("Allowed.Test.", ip, 5, now);
        c.learn("other.test", "::ffff:198.51.100.2".parse().unwrap(), 5, now);
        assert_eq!(c.names_for(ip, now), ["allowed.test", "other.test"]);
        assert!(c.resolved_to("allowed.test", ip, now));
        assert!(!c.resolved_to("blocked.test", ip, now));
        assert!(c.names_for(ip, now + Duration::from_secs(7200)).is_empty());
        for i in 0..(MAX_ENTRIES + 10) {
            c.learn(&format!("n{i}.test"), "203.0.113.9".parse().unwrap(), 5, now);
        }
        assert!(c.names_for(ip, now).is_empty(), "oldest entries evicted");
        assert!(c.order.len() <= MAX_ENTRIES);
    }
}
