//! The network destination matcher: one rule language and one decision procedure for every
//! network mode (the `filtered` userspace stack, its DNS answerer, the HTTP and SOCKS proxies).
//!
//! # Rule syntax
//!
//! | form | example | matches |
//! |---|---|---|
//! | `host` | `github.com` | exactly that name |
//! | `host:port` | `github.com:443` | that name on that port |
//! | `*.suffix[:port]` | `*.example.com` | every subdomain at any depth, **not** `example.com` itself |
//! | `*` | `*` | everything |
//! | `port` | `22` | every destination on that port (`*:22` is accepted and printed as `22`) |
//! | IPv4 `CIDR[:port]` | `10.0.0.0/8`, `10.0.0.0/8:443` | addresses in the prefix |
//! | IPv4 `IP[:port]` | `192.0.2.7:22` | that address (= `/32`) |
//! | IPv6 `CIDR` / `IP` | `2001:db8::/32`, `2001:db8::1` | addresses in the prefix (`IP` = `/128`) |
//! | IPv6 with port | `[2001:db8::1]:443`, `[2001:db8::/32]:443` | the same, on that port |
//!
//! Port ranges are not supported. Names are normalized by [`normalize_name`]: ASCII lowercase,
//! one trailing dot removed, Unicode labels converted to punycode (UTS 46 via `idna`), then each
//! label checked (1-63 characters of letters, digits, `-` and `_`, no hyphen at either end,
//! at most 253 characters in all, and the last label must not be a number, so `1.2.3.4.5` or
//! `0x7f000001` are errors rather than host names). Invisible (default-ignorable) characters,
//! which UTS 46 would silently delete, are errors. A CIDR must have no bits set past its
//! prefix (`10.1.2.3/8` is an error that suggests `10.0.0.0/8`). An IPv4-mapped IPv6 rule
//! (`::ffff:10.0.0.0/104`) is stored and printed as the IPv4 rule it denotes (`10.0.0.0/8`); a
//! rule inside the NAT64 prefix `64:ff9b::/96` is an error that asks for the IPv4 form, since
//! such destinations are matched as IPv4 (a v6 rule wider than /96 thus never matches a mapped
//! or NAT64 destination). Every rule prints back in canonical form ([`Rule`]'s `Display`).
//!
//! # Decision procedure ([`RuleSet::decide`])
//!
//! 1. **Floors**, which no rule can lift: destination port 0; a destination port in the port floor
//!    ([`PORT_FLOOR`] plus [`MatcherOptions::extra_floor_ports`]); a
//!    destination address in the IP floor: host loopback `127.0.0.0/8` and `::1`, link-local
//!    `169.254.0.0/16` and `fe80::/10` (cloud metadata `169.254.169.254`, and also AWS's
//!    `fd00:ec2::254` and Alibaba's `100.100.100.200`, which lie in private ranges),
//!    `0.0.0.0/8`, `::/128` and the deprecated IPv4-compatible `::/96`, multicast `224.0.0.0/4`
//!    and `ff00::/8`, broadcast `255.255.255.255`, the host's own addresses
//!    ([`MatcherOptions::host_addrs`]), and with [`MatcherOptions::deny_private`] RFC 1918,
//!    CGNAT `100.64.0.0/10` and ULA `fc00::/7`; the names `localhost` and `*.localhost`
//!    (RFC 6761, they resolve to loopback); and every [`Layer::Floor`] rule (admin-extended
//!    floors, which may only block). IPv4-mapped (`::ffff:a.b.c.d`) and NAT64 (`64:ff9b::/96`)
//!    destinations are matched as the IPv4 address they carry, for floors and rules alike.
//! 2. **Layers**: the most specific matching [`Layer::Admin`] rule is the admin's verdict, the
//!    most specific matching [`Layer::User`] rule the user's. Admin block → block; else user
//!    block → block (a user may always narrow); else allow, whether an allow rule matched or
//!    nothing did: the default is allow. An allow-list is `*` blocked plus allowed exceptions,
//!    which win because they are more specific. An admin allow never lifts a user block.
//! 3. **Specificity**, a total order on rules (least specific first); port qualification only
//!    breaks ties between rules whose target is equally specific:
//!    * `*`, then a bare `port` (which is `*` on one port);
//!    * a CIDR shorter than a single address, longer prefix more specific (an IPv4 `/n` ranks
//!      as the IPv6 `/(n+96)` it is mapped to);
//!    * `*.suffix`, more labels in the suffix more specific; so any name rule beats a CIDR
//!      shorter than `/32` (`/128`);
//!    * an exact host, or an exact address (`/32`, `/128`): the two rank equal.
//!
//!    Within a layer, a tie between an allow and a block rule is a block.
//! 4. Name rules match [`Destination::name`] only, address rules [`Destination::ip`] only. For an
//!    IP-literal destination without a name, name rules do not match: the caller (the DNS cache)
//!    passes the names it resolved to that address, one `decide` per name. A name that is itself
//!    an IP literal (`Host: 1.2.3.4`) is taken as the address; if it differs from `ip`, block.
//!    A name that fails [`normalize_name`] is blocked. Callers must resolve and dial what was
//!    checked: the normalized name and the very address passed in.
//! 5. [`RuleSet::name_allowed`] (DNS: NXDOMAIN unless allowed) is the same decision for the
//!    name alone, without the port and IP floors: a name may be resolved if a flow to it on
//!    *some* port could be allowed by the name rules, so `*` blocked plus `github.com:443`
//!    allowed still resolves `github.com`; each resolved address then goes through `decide`.
//!    Address rules never make a name resolvable: with `*` blocked and `10.0.0.0/8` allowed,
//!    forwarding every name upstream would be a DNS tunnel to anywhere (the query name is the
//!    payload), so such a name gets NXDOMAIN here; allow the names (`*.corp`) to resolve them.
//!    The answer is exact: it probes every port named by a rule that could match the name plus
//!    one port none names.
//! 6. Neither `decide` nor `name_allowed` panics, whatever the input.
//!
//! TCP and UDP are decided alike ([`Destination::proto`] is carried for the audit record). An
//! allowed flow that no rule matched reports `rule: ""` and `layer: User` (the default allow).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::floor::PORT_FLOOR;

/// What a rule does when it is the most specific match of its layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Block,
}

/// The policy layer a rule came from. `Floor` rules are admin-extended floors: unliftable blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    Floor,
    Admin,
    User,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

#[derive(Debug, Clone, Default)]
pub struct MatcherOptions {
    /// The host's own addresses on every interface: a floor.
    pub host_addrs: Vec<IpAddr>,
    /// Floor RFC 1918, CGNAT 100.64/10 and ULA fc00::/7 (true in `proxied`; admin choice in `filtered`).
    pub deny_private: bool,
    /// Admin extension of the port floor.
    pub extra_floor_ports: Vec<u16>,
    /// Where to re-read the host's own addresses (at most once a second) instead of keeping
    /// `host_addrs`: they change during a session (DHCP, a VPN coming up, a new interface),
    /// and a new one is the host's services as much as the old ones. With `host_addrs` empty,
    /// the first read is at the first decision. Given by the caller (`host::own_addresses`),
    /// so the rules read nothing of the host themselves.
    pub refresh_host_addrs: Option<fn() -> Option<Vec<IpAddr>>>,
}

/// The host's own addresses, as given, or re-read when they may have changed. Given none
/// and a way to read them, they are read at the first decision: a launch then does not wait
/// for the interface dump (0.16 ms here, more on a node with many interfaces) before its
/// jail exists, and the first flow it decides sees the addresses of that moment. A read that
/// fails keeps the last set (and is tried again at the next decision); with none read yet,
/// every address counts as the host's: the floor fails closed.
#[derive(Debug, Clone)]
struct HostAddrs {
    refresh: Option<fn() -> Option<Vec<IpAddr>>>,
    state: std::sync::Arc<std::sync::Mutex<HostAddrState>>,
}

/// When the set was last read (None: not yet, or the last read failed), and the set (None:
/// never read).
type HostAddrState = (Option<std::time::Instant>, Option<HashSet<IpAddr>>);

impl HostAddrs {
    const REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

    fn new(given: &[IpAddr], refresh: Option<fn() -> Option<Vec<IpAddr>>>) -> HostAddrs {
        let set: HashSet<IpAddr> = given.iter().copied().map(canonical_ip).collect();
        let state = match (set.is_empty(), refresh) {
            (true, Some(_)) => (None, None),
            _ => (Some(std::time::Instant::now()), Some(set)),
        };
        HostAddrs { refresh, state: std::sync::Arc::new(std::sync::Mutex::new(state)) }
    }

    fn contains(&self, ip: &IpAddr) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let due = state.0.is_none_or(|at| at.elapsed() >= Self::REFRESH);
        if let Some(read) = self.refresh.filter(|_| due) {
            match read() {
                Some(now) => {
                    *state = (Some(std::time::Instant::now()), Some(now.into_iter().map(canonical_ip).collect()))
                }
                None => state.0 = None,
            }
        }
        state.1.as_ref().is_none_or(|set| set.contains(ip))
    }
}

/// One flow (or one candidate flow) to decide on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination<'a> {
    pub ip: Option<IpAddr>,
    pub name: Option<&'a str>,
    pub port: u16,
    pub proto: Proto,
}

/// The verdict, with the rule (canonical text; `""` when no rule matched or the name was
/// invalid) and layer that decided it, for the audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub allowed: bool,
    pub rule: String,
    pub layer: Layer,
    pub reason: String,
}

/// A rule that does not parse, or a name that does not normalize.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid network rule `{rule}`: {kind}")]
pub struct RuleError {
    /// The offending text, escaped and truncated for display.
    pub rule: String,
    pub kind: RuleErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RuleErrorKind {
    #[error("it is empty")]
    Empty,
    #[error("it contains whitespace")]
    Whitespace,
    #[error("it contains a control character")]
    ControlChar,
    #[error("`*` must be the whole rule or the whole first label (`*.example.com`)")]
    Wildcard,
    #[error("a label is empty (`a..b`, a leading dot, or more than one trailing dot)")]
    EmptyLabel,
    #[error("label `{0}` is longer than 63 characters")]
    LabelTooLong(String),
    #[error("the name is {0} characters long, more than 253")]
    NameTooLong(usize),
    #[error("character {0:?} is not allowed in a host name (letters, digits, `-`, `_`)")]
    BadChar(char),
    #[error("label `{0}` starts or ends with a hyphen")]
    Hyphen(String),
    #[error("it ends in a number, so it is neither a host name nor a valid IPv4 address")]
    Numeric,
    #[error("it is not a valid internationalized domain name (UTS 46)")]
    Idna,
    #[error("it contains the invisible character {0:?}")]
    Invisible(char),
    #[error("`{0}` reads as a port, not a host name")]
    LooksLikePort(String),
    #[error("the port after `:` is missing")]
    PortMissing,
    #[error("port `{0}` is not a decimal number")]
    PortNotNumber(String),
    #[error("port `{0}` has a leading zero")]
    PortLeadingZero(String),
    #[error("port 0 is not a destination port")]
    PortZero,
    #[error("port `{0}` is larger than 65535")]
    PortTooLarge(String),
    #[error("port ranges (`{0}`) are not supported; write one rule per port")]
    PortRange(String),
    #[error("`{0}` is not a valid IPv4 address")]
    BadIpv4(String),
    #[error("`{0}` is not a valid IPv6 address (with a port, write `[2001:db8::1]:443`)")]
    BadIpv6(String),
    #[error("prefix length `{len}` is not a number from 0 to {max}")]
    BadPrefix { len: String, max: u8 },
    #[error("bits are set past the /{len} prefix; did you mean `{suggestion}`?")]
    HostBits { len: u8, suggestion: String },
    #[error("brackets are only for IPv6 (`[2001:db8::1]:443`), closed by `]`, optionally followed by `:port`")]
    Brackets,
    #[error("NAT64 destinations are matched as the IPv4 address they carry; write `{0}`")]
    Nat64(String),
    #[error("a floor rule can only block")]
    FloorAllow,
}

impl RuleError {
    fn new(rule: &str, kind: RuleErrorKind) -> RuleError {
        RuleError { rule: shown(rule), kind }
    }
}

/// `s` escaped (control characters visible) and cut to a readable length.
fn shown(s: &str) -> String {
    const MAX: usize = 100;
    let mut out: String = s.chars().take(MAX).flat_map(char::escape_debug).collect();
    if s.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Addresses and prefixes

/// An IPv4 or IPv6 prefix; host bits are always zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Net {
    V4 { addr: u32, len: u8 },
    V6 { addr: u128, len: u8 },
}

fn mask4(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0)
}

fn mask6(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0)
}

impl Net {
    fn contains(&self, ip: IpAddr) -> bool {
        match (*self, ip) {
            (Net::V4 { addr, len }, IpAddr::V4(a)) => u32::from(a) & mask4(len) == addr,
            (Net::V6 { addr, len }, IpAddr::V6(a)) => u128::from(a) & mask6(len) == addr,
            _ => false,
        }
    }

    fn is_single(&self) -> bool {
        matches!(*self, Net::V4 { len: 32, .. } | Net::V6 { len: 128, .. })
    }

    /// The prefix's first address (a probe for a grant of the whole prefix).
    fn first(&self) -> IpAddr {
        match *self {
            Net::V4 { addr, .. } => IpAddr::V4(Ipv4Addr::from(addr)),
            Net::V6 { addr, .. } => IpAddr::V6(std::net::Ipv6Addr::from(addr)),
        }
    }

    /// The prefix length as an IPv6 prefix (an IPv4 /n is the mapped /(n+96)).
    fn len6(&self) -> u8 {
        match *self {
            Net::V4 { len, .. } => len.saturating_add(96),
            Net::V6 { len, .. } => len,
        }
    }

    fn is_v6(&self) -> bool {
        matches!(self, Net::V6 { .. })
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Net::V4 { addr, len: 32 } => write!(f, "{}", Ipv4Addr::from(addr)),
            Net::V4 { addr, len } => write!(f, "{}/{len}", Ipv4Addr::from(addr)),
            Net::V6 { addr, len: 128 } => write!(f, "{}", Ipv6Addr::from(addr)),
            Net::V6 { addr, len } => write!(f, "{}/{len}", Ipv6Addr::from(addr)),
        }
    }
}

const NAT64_PREFIX: u128 = 0x0064_ff9b_u128 << 96;
const NAT64_LOCAL_PREFIX: u128 = 0x0064_ff9b_0001_u128 << 80;
const TRANSLATED_PREFIX: u128 = 0xffff_0000_u128 << 32;
const SIX_TO_FOUR_PREFIX: u128 = 0x2002_u128 << 112;
const TEREDO_PREFIX: u128 = 0x2001_0000_u128 << 96;

/// The address a destination is matched as: IPv4-mapped and NAT64 (`64:ff9b::/96`) IPv6
/// addresses become the IPv4 address they carry.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let bits = u128::from(v6);
            // Truncations are the point: each form carries the IPv4 address in fixed bits.
            if bits & mask6(96) == NAT64_PREFIX || bits & mask6(96) == TRANSLATED_PREFIX {
                // RFC 6052 /96, and the IPv4-translated form ::ffff:0:a.b.c.d (RFC 2765): the
                // low 32 bits.
                return IpAddr::V4(Ipv4Addr::from(bits as u32));
            }
            if bits & mask6(48) == NAT64_LOCAL_PREFIX {
                // The local-use prefix 64:ff9b:1::/48 (RFC 8215) with either RFC 6052 layout: a
                // /96 (48 zero bits after the prefix, the address in the low 32) or the /48
                // one (the address in bits 48-63 and 72-87).
                if (bits >> 32) & ((1u128 << 48) - 1) == 0 {
                    return IpAddr::V4(Ipv4Addr::from(bits as u32));
                }
                let high = ((bits >> 64) & 0xffff) as u32;
                let low = ((bits >> 40) & 0xffff) as u32;
                return IpAddr::V4(Ipv4Addr::from((high << 16) | low));
            }
            if bits & mask6(16) == SIX_TO_FOUR_PREFIX {
                // 6to4 (RFC 3056): 2002:AABB:CCDD::/48 is the site behind IPv4 AA.BB.CC.DD.
                return IpAddr::V4(Ipv4Addr::from((bits >> 80) as u32));
            }
            if bits & mask6(32) == TEREDO_PREFIX {
                // Teredo (RFC 4380): the client's IPv4 address, inverted, in the low 32 bits.
                return IpAddr::V4(Ipv4Addr::from(!(bits as u32)));
            }
            ip
        }
    }
}

/// The IP floor: (prefix, why). Order matters only for the reason reported.
const IP_FLOOR: &[(Net, &str)] = &[
    (Net::V4 { addr: 0x7f00_0000, len: 8 }, "host loopback"),
    (Net::V6 { addr: 1, len: 128 }, "host loopback"),
    (Net::V4 { addr: 0xa9fe_a9fe, len: 32 }, "cloud metadata service"),
    (Net::V4 { addr: 0xa9fe_0000, len: 16 }, "link-local"),
    (Net::V6 { addr: 0xfe80_u128 << 112, len: 10 }, "link-local"),
    (Net::V6 { addr: (0xfd00_0ec2_u128 << 96) | 0x254, len: 128 }, "cloud metadata service (AWS)"),
    (Net::V4 { addr: 0x6464_64c8, len: 32 }, "cloud metadata service (Alibaba)"),
    (Net::V4 { addr: 0, len: 8 }, "\"this network\" 0.0.0.0/8"),
    (Net::V6 { addr: 0, len: 128 }, "unspecified address"),
    (Net::V6 { addr: 0, len: 96 }, "deprecated IPv4-compatible IPv6"),
    (Net::V4 { addr: 0xe000_0000, len: 4 }, "multicast"),
    (Net::V6 { addr: 0xff_u128 << 120, len: 8 }, "multicast"),
    (Net::V4 { addr: 0xffff_ffff, len: 32 }, "broadcast"),
];

/// Floored only with `deny_private`.
const PRIVATE_FLOOR: &[(Net, &str)] = &[
    (Net::V4 { addr: 0x0a00_0000, len: 8 }, "private (RFC 1918)"),
    (Net::V4 { addr: 0xac10_0000, len: 12 }, "private (RFC 1918)"),
    (Net::V4 { addr: 0xc0a8_0000, len: 16 }, "private (RFC 1918)"),
    (Net::V4 { addr: 0x6440_0000, len: 10 }, "carrier-grade NAT (RFC 6598)"),
    (Net::V6 { addr: 0xfc_u128 << 120, len: 7 }, "unique local (ULA, RFC 4193)"),
];

// ---------------------------------------------------------------------------------------------
// Names

/// Normalize a host name: ASCII lowercase, one trailing dot removed, Unicode labels to
/// punycode, labels validated (see the module doc). IP literals are errors (`Numeric`, or a
/// bad character for IPv6).
pub fn normalize_name(s: &str) -> Result<String, RuleError> {
    normalize_kind(s).map_err(|kind| RuleError::new(s, kind))
}

fn check_chars(s: &str) -> Result<(), RuleErrorKind> {
    if s.is_empty() {
        return Err(RuleErrorKind::Empty);
    }
    if s.chars().any(char::is_whitespace) {
        return Err(RuleErrorKind::Whitespace);
    }
    if s.chars().any(char::is_control) {
        return Err(RuleErrorKind::ControlChar);
    }
    Ok(())
}

fn normalize_kind(s: &str) -> Result<String, RuleErrorKind> {
    check_chars(s)?;
    // Rules and destinations must compare on the form that goes on the wire (DNS, SNI, Host are
    // ASCII), and `bücher.example` must equal `xn--bcher-kva.example`: that mapping (UTS 46:
    // case folding, width and compatibility mapping, punycode) is what `idna` is for. Pure
    // ASCII input skips the mapping so that our own checks give precise errors.
    // UTS 46 silently deletes these (`git\u{ad}hub.com` is `github.com`): in a policy that
    // only hides what a rule says, so refuse them.
    if let Some(c) = s.chars().find(|&c| is_default_ignorable(c)) {
        return Err(RuleErrorKind::Invisible(c));
    }
    let ascii = if s.is_ascii() {
        s.to_ascii_lowercase()
    } else {
        idna::domain_to_ascii_cow(s.as_bytes(), idna::AsciiDenyList::URL).map_err(|_| RuleErrorKind::Idna)?.into_owned()
    };
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    check_labels(name)?;
    if s.is_ascii() && name.split('.').any(|l| l.starts_with("xn--")) {
        // An A-label must be valid punycode of a valid U-label; idna checks that.
        match idna::domain_to_ascii_cow(name.as_bytes(), idna::AsciiDenyList::URL) {
            Ok(checked) if checked == name => {}
            _ => return Err(RuleErrorKind::Idna),
        }
    }
    Ok(name.to_owned())
}

/// Unicode's Default_Ignorable_Code_Point property (DerivedCoreProperties.txt).
fn is_default_ignorable(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

fn check_labels(name: &str) -> Result<(), RuleErrorKind> {
    if name.is_empty() {
        return Err(RuleErrorKind::EmptyLabel);
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(RuleErrorKind::EmptyLabel);
        }
        if let Some(c) = label.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
            return Err(RuleErrorKind::BadChar(c));
        }
        if label.len() > 63 {
            return Err(RuleErrorKind::LabelTooLong(shown(label)));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(RuleErrorKind::Hyphen(label.to_owned()));
        }
    }
    if name.len() > 253 {
        return Err(RuleErrorKind::NameTooLong(name.len()));
    }
    // WHATWG's "ends in a number": such a name would be read as an IPv4 address by URL
    // parsers and inet_aton (`0x7f000001`, `127.1`), never as a DNS name.
    let last = name.rsplit('.').next().unwrap_or(name);
    let hex = last.strip_prefix("0x").map(|h| h.chars().all(|c| c.is_ascii_hexdigit()));
    if last.chars().all(|c| c.is_ascii_digit()) || hex == Some(true) {
        return Err(RuleErrorKind::Numeric);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Rules

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Target {
    All,
    Host(String),
    /// `*.suffix`: strict subdomains of the (normalized) suffix.
    Suffix(String),
    Net(Net),
}

/// One parsed rule (no action, no layer). Parse with `str::parse`; `Display` prints the
/// canonical form, which parses back to the same rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    target: Target,
    port: Option<u16>,
}

/// Specificity key, compared lexicographically: (target class, within-class rank, has port).
type Key = (u8, u8, u8);

impl Rule {
    fn key(&self) -> Key {
        let port = u8::from(self.port.is_some());
        match &self.target {
            Target::All => (0, 0, port),
            Target::Net(net) if !net.is_single() => (1, net.len6(), port),
            Target::Suffix(s) => (2, u8::try_from(s.split('.').count()).unwrap_or(u8::MAX), port),
            Target::Host(_) | Target::Net(_) => (3, 0, port),
        }
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.target, self.port) {
            (Target::All, None) => f.write_str("*"),
            (Target::All, Some(p)) => write!(f, "{p}"),
            (Target::Host(h), None) => f.write_str(h),
            (Target::Host(h), Some(p)) => write!(f, "{h}:{p}"),
            (Target::Suffix(s), None) => write!(f, "*.{s}"),
            (Target::Suffix(s), Some(p)) => write!(f, "*.{s}:{p}"),
            (Target::Net(n), None) => write!(f, "{n}"),
            (Target::Net(n), Some(p)) if n.is_v6() => write!(f, "[{n}]:{p}"),
            (Target::Net(n), Some(p)) => write!(f, "{n}:{p}"),
        }
    }
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Rule, RuleError> {
        parse_rule(s).map_err(|kind| RuleError::new(s, kind))
    }
}

fn parse_rule(s: &str) -> Result<Rule, RuleErrorKind> {
    check_chars(s)?;
    if let Some(rest) = s.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or(RuleErrorKind::Brackets)?;
        let port = match after {
            "" => None,
            _ => Some(parse_port(after.strip_prefix(':').ok_or(RuleErrorKind::Brackets)?)?),
        };
        if !inner.contains(':') {
            return Err(RuleErrorKind::Brackets);
        }
        return Ok(Rule { target: Target::Net(parse_v6_net(inner)?), port });
    }
    if s.matches(':').count() >= 2 {
        return Ok(Rule { target: Target::Net(parse_v6_net(s)?), port: None });
    }
    let (t, port) = match s.split_once(':') {
        Some((t, p)) => (t, Some(parse_port(p)?)),
        None => (s, None),
    };
    if t.is_empty() {
        return Err(RuleErrorKind::Empty);
    }
    if t == "*" {
        return Ok(Rule { target: Target::All, port });
    }
    if port.is_none() && t.chars().all(|c| c.is_ascii_digit() || c == '-') {
        return Ok(Rule { target: Target::All, port: Some(parse_port(t)?) });
    }
    if t.contains('*') {
        return match t.strip_prefix("*.") {
            Some(suffix) if !suffix.is_empty() && !suffix.contains('*') => {
                Ok(Rule { target: Target::Suffix(normalize_kind(suffix)?), port })
            }
            _ => Err(RuleErrorKind::Wildcard),
        };
    }
    if let Some((addr, len)) = t.split_once('/') {
        let a: Ipv4Addr = addr.parse().map_err(|_| RuleErrorKind::BadIpv4(shown(addr)))?;
        let len = parse_prefix(len, 32)?;
        let bits = u32::from(a);
        if bits & !mask4(len) != 0 {
            let suggestion = Net::V4 { addr: bits & mask4(len), len }.to_string();
            return Err(RuleErrorKind::HostBits { len, suggestion });
        }
        return Ok(Rule { target: Target::Net(Net::V4 { addr: bits, len }), port });
    }
    if let Ok(a) = t.parse::<Ipv4Addr>() {
        return Ok(Rule { target: Target::Net(Net::V4 { addr: u32::from(a), len: 32 }), port });
    }
    match normalize_kind(t) {
        // Only reachable through Unicode digits (`２２`): the canonical text would be a port.
        Ok(host) if host.chars().all(|c| c.is_ascii_digit() || c == '-') => Err(RuleErrorKind::LooksLikePort(host)),
        Ok(host) => Ok(Rule { target: Target::Host(host), port }),
        // Dotted numbers that are not an IPv4 address: say so in IPv4 terms.
        Err(RuleErrorKind::Numeric) if t.chars().all(|c| c.is_ascii_digit() || c == '.') => {
            Err(RuleErrorKind::BadIpv4(shown(t)))
        }
        Err(e) => Err(e),
    }
}

fn parse_port(p: &str) -> Result<u16, RuleErrorKind> {
    if p.is_empty() {
        return Err(RuleErrorKind::PortMissing);
    }
    if let Some((a, b)) = p.split_once('-') {
        let digits = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_digit());
        if digits(a) && digits(b) {
            return Err(RuleErrorKind::PortRange(shown(p)));
        }
    }
    if !p.chars().all(|c| c.is_ascii_digit()) {
        return Err(RuleErrorKind::PortNotNumber(shown(p)));
    }
    if p.len() > 1 && p.starts_with('0') {
        return Err(RuleErrorKind::PortLeadingZero(shown(p)));
    }
    match p.parse::<u32>() {
        Ok(0) => Err(RuleErrorKind::PortZero),
        Ok(n) => u16::try_from(n).map_err(|_| RuleErrorKind::PortTooLarge(shown(p))),
        Err(_) => Err(RuleErrorKind::PortTooLarge(shown(p))),
    }
}

fn parse_prefix(len: &str, max: u8) -> Result<u8, RuleErrorKind> {
    let bad = || RuleErrorKind::BadPrefix { len: shown(len), max };
    if len.is_empty() || len.len() > 3 || !len.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    if len.len() > 1 && len.starts_with('0') {
        return Err(bad());
    }
    match len.parse::<u8>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(bad()),
    }
}

fn parse_v6_net(s: &str) -> Result<Net, RuleErrorKind> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, parse_prefix(l, 128)?),
        None => (s, 128),
    };
    let a: Ipv6Addr = addr.parse().map_err(|_| RuleErrorKind::BadIpv6(shown(addr)))?;
    let bits = u128::from(a);
    if bits & !mask6(len) != 0 {
        let suggestion = Net::V6 { addr: bits & mask6(len), len }.to_string();
        return Err(RuleErrorKind::HostBits { len, suggestion });
    }
    if len >= 96 {
        // Truncation is the point: the low 32 bits are the IPv4 address carried.
        let v4 = Net::V4 { addr: bits as u32, len: len - 96 };
        if a.to_ipv4_mapped().is_some() {
            return Ok(v4);
        }
        if bits & mask6(96) == NAT64_PREFIX {
            return Err(RuleErrorKind::Nat64(v4.to_string()));
        }
    }
    Ok(Net::V6 { addr: bits, len })
}

// ---------------------------------------------------------------------------------------------
// Rule sets

#[derive(Debug, Clone)]
struct Entry {
    rule: Rule,
    text: String,
    action: Action,
    key: Key,
}

/// The rules of one layer, indexed so that a decision costs O(labels + CIDR rules).
#[derive(Debug, Clone, Default)]
struct LayerRules {
    entries: Vec<Entry>,
    exact: HashMap<String, Vec<usize>>,
    suffix: HashMap<String, Vec<usize>>,
    nets: Vec<usize>,
    anywhere: Vec<usize>,
}

struct Query<'a> {
    name: Option<&'a str>,
    ip: Option<IpAddr>,
    port: u16,
}

impl LayerRules {
    fn push(&mut self, rule: Rule, action: Action) {
        let i = self.entries.len();
        match &rule.target {
            Target::All => self.anywhere.push(i),
            Target::Host(h) => self.exact.entry(h.clone()).or_default().push(i),
            Target::Suffix(s) => self.suffix.entry(s.clone()).or_default().push(i),
            Target::Net(_) => self.nets.push(i),
        }
        let text = rule.to_string();
        let key = rule.key();
        self.entries.push(Entry { rule, text, action, key });
    }

    /// Every rule that could match a flow to `name` on some port and address.
    fn for_name<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s Entry> + 's {
        let exact = self.exact.get(name).into_iter().flatten();
        let suffixes = name
            .match_indices('.')
            .filter_map(move |(i, _)| name.get(i + 1..).and_then(|s| self.suffix.get(s)))
            .flatten();
        self.anywhere.iter().chain(&self.nets).chain(exact).chain(suffixes).filter_map(move |&i| self.entries.get(i))
    }

    /// The most specific matching rule; on a tie, a block rule.
    fn best(&self, q: &Query<'_>) -> Option<&Entry> {
        let mut best: Option<&Entry> = None;
        let mut consider = |ids: &[usize]| {
            for e in ids.iter().filter_map(|&i| self.entries.get(i)) {
                if !e.rule.port_matches(q.port) {
                    continue;
                }
                if let (Target::Net(net), ip) = (&e.rule.target, q.ip) {
                    if !ip.is_some_and(|ip| net.contains(ip)) {
                        continue;
                    }
                }
                let better = match best {
                    None => true,
                    Some(b) => {
                        e.key > b.key || (e.key == b.key && e.action == Action::Block && b.action == Action::Allow)
                    }
                };
                if better {
                    best = Some(e);
                }
            }
        };
        consider(&self.anywhere);
        consider(&self.nets);
        if let Some(name) = q.name {
            if let Some(ids) = self.exact.get(name) {
                consider(ids);
            }
            for (i, _) in name.match_indices('.') {
                if let Some(ids) = name.get(i + 1..).and_then(|s| self.suffix.get(s)) {
                    consider(ids);
                }
            }
        }
        best
    }
}

/// A parsed, validated policy: floors plus the admin and user layers.
#[derive(Debug, Clone)]
pub struct RuleSet {
    floor: LayerRules,
    admin: LayerRules,
    user: LayerRules,
    /// Port floor: port → reason.
    floor_ports: HashMap<u16, String>,
    host_addrs: HostAddrs,
    deny_private: bool,
    grants: Grants,
}

/// Rules the user granted from outside the jail while the session runs (`agent-sandbox allow`),
/// each until its time. Shared by every clone of the set (the supervisor's, the proxies', the
/// control socket's). They lift the user's own blocks, never an admin block or a floor.
#[derive(Debug, Clone, Default)]
struct Grants(std::sync::Arc<std::sync::Mutex<Vec<(Rule, String, std::time::Instant)>>>);

impl Grants {
    /// The text of a live grant matching `q`, after dropping the ones whose time ended.
    fn find(&self, q: &Query<'_>) -> Option<String> {
        let mut g = self.0.lock().ok()?;
        if g.is_empty() {
            return None;
        }
        let now = std::time::Instant::now();
        g.retain(|(_, _, until)| *until > now);
        g.iter().find(|(rule, _, _)| rule_matches(rule, q)).map(|(_, text, _)| text.clone())
    }
}

/// Whether one rule matches a flow (the per-layer index does this for many rules at once).
fn rule_matches(rule: &Rule, q: &Query<'_>) -> bool {
    if !rule.port_matches(q.port) {
        return false;
    }
    match (&rule.target, q.name, q.ip) {
        (Target::All, _, _) => true,
        (Target::Host(h), Some(n), _) => h == n,
        (Target::Suffix(s), Some(n), _) => {
            n.len() > s.len() && n.ends_with(s.as_str()) && n[..n.len() - s.len()].ends_with('.')
        }
        (Target::Net(net), _, Some(ip)) => net.contains(ip),
        _ => false,
    }
}

fn block(rule: impl Into<String>, layer: Layer, reason: String) -> Decision {
    Decision { allowed: false, rule: rule.into(), layer, reason }
}

impl RuleSet {
    #[cfg(test)]
    fn host_addrs_for_tests(&self) -> &std::sync::Mutex<HostAddrState> {
        &self.host_addrs.state
    }

    pub fn new(rules: &[(String, Action, Layer)], opts: MatcherOptions) -> Result<RuleSet, RuleError> {
        let mut set = RuleSet {
            floor: LayerRules::default(),
            admin: LayerRules::default(),
            user: LayerRules::default(),
            floor_ports: HashMap::new(),
            host_addrs: HostAddrs::new(&opts.host_addrs, opts.refresh_host_addrs),
            deny_private: opts.deny_private,
            grants: Grants::default(),
        };
        for (port, class, why) in PORT_FLOOR {
            set.floor_ports.insert(*port, format!("{class}: {why}"));
        }
        for port in opts.extra_floor_ports {
            set.floor_ports.entry(port).or_insert_with(|| "added to the floor by the administrator".to_owned());
        }
        // RFC 6761: these names resolve to loopback.
        set.floor.push(Rule { target: Target::Host("localhost".to_owned()), port: None }, Action::Block);
        set.floor.push(Rule { target: Target::Suffix("localhost".to_owned()), port: None }, Action::Block);
        for (text, action, layer) in rules {
            let rule: Rule = text.parse()?;
            match layer {
                Layer::Floor if *action == Action::Allow => {
                    return Err(RuleError::new(text, RuleErrorKind::FloorAllow))
                }
                Layer::Floor => set.floor.push(rule, Action::Block),
                Layer::Admin => set.admin.push(rule, *action),
                Layer::User => set.user.push(rule, *action),
            }
        }
        Ok(set)
    }

    /// Allows `rule` (a rule as in `net.allow`) until `until`, for this set and every clone of
    /// it: the user's grant from outside the jail. Floors and admin blocks still win, and a
    /// grant they would make useless is refused with their reason (rather than reported as
    /// granted). Returns the rule as normalized.
    pub fn grant(&self, rule: &str, until: std::time::Instant) -> Result<String, String> {
        let parsed: Rule = rule.parse().map_err(|e: RuleError| e.to_string())?;
        let text = parsed.to_string();
        let (name, ip): (Option<String>, Option<IpAddr>) = match &parsed.target {
            Target::Host(h) => (Some(h.clone()), None),
            Target::Suffix(s) => (Some(format!("a.{s}")), None),
            Target::Net(n) => (None, Some(n.first())),
            Target::All => (None, None),
        };
        let port = parsed.port.unwrap_or(443);
        let Ok(mut g) = self.grants.0.lock() else { return Err("the grants are unavailable".into()) };
        g.push((parsed, text.clone(), until));
        drop(g);
        if name.is_some() || ip.is_some() {
            let d = self.evaluate(name.as_deref(), ip.map(canonical_ip), ip, port, true);
            if !d.allowed {
                if let Ok(mut g) = self.grants.0.lock() {
                    g.pop();
                }
                return Err(d.reason);
            }
        }
        Ok(text)
    }

    /// Decide one flow. Never panics.
    pub fn decide(&self, dst: &Destination<'_>) -> Decision {
        let raw_ip = dst.ip;
        let mut ip = dst.ip.map(canonical_ip);
        let mut name = None;
        if let Some(n) = dst.name {
            if let Some(lit) = ip_literal(n) {
                let lit = canonical_ip(lit);
                match ip {
                    None => ip = Some(lit),
                    Some(x) if x == lit => {}
                    Some(x) => {
                        let reason = format!("the name `{}` is an IP literal other than the destination {x}", shown(n));
                        return block("", Layer::Floor, reason);
                    }
                }
            } else {
                match normalize_name(n) {
                    Ok(n) => name = Some(n),
                    Err(e) => return block("", Layer::Floor, format!("invalid destination name: {e}")),
                }
            }
        }
        self.evaluate(name.as_deref(), ip, raw_ip, dst.port, true)
    }

    /// For DNS: may this name be resolved at all (NXDOMAIN otherwise)? Allowed if a flow to the
    /// name could be allowed on some port and to some address; port and IP floors are not
    /// consulted (the caller checks every resolved address with `decide`). See the module doc.
    pub fn name_allowed(&self, name: &str) -> Decision {
        let name = match normalize_name(name) {
            Ok(n) => n,
            Err(e) => return block("", Layer::Floor, format!("invalid name: {e}")),
        };
        // Every port a rule that could match this name names, and one that none names.
        let mut ports: Vec<u16> = [&self.floor, &self.admin, &self.user]
            .iter()
            .flat_map(|l| l.for_name(&name))
            .filter_map(|e| e.rule.port)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        let generic = (1..=u16::MAX).find(|p| ports.binary_search(p).is_err());
        // The plain answer: no address, a port no rule names.
        let plain = self.evaluate(Some(&name), None, None, generic.unwrap_or(1), false);
        if plain.allowed {
            return plain;
        }
        for port in generic.iter().chain(&ports).copied() {
            let d = self.evaluate(Some(&name), None, None, port, false);
            if d.allowed {
                let reason = format!("resolvable: a flow on port {port} could be allowed ({})", d.reason);
                return Decision { reason, ..d };
            }
        }
        plain
    }

    /// The IP floor alone (loopback, link-local, the host's own addresses...), for checking
    /// every address a DNS answer carries before the jail sees it.
    pub fn address_floor(&self, ip: IpAddr) -> Option<Decision> {
        self.ip_floor(canonical_ip(ip), Some(ip))
    }

    /// Is any rule about names (not addresses)? Then a flow's name matters, and flows that
    /// cannot show one (QUIC) are refused rather than decided on the address.
    pub fn has_name_rules(&self) -> bool {
        // The floor always holds `localhost` and `*.localhost`: those alone do not count.
        let floor_names = self.floor.exact.len() + self.floor.suffix.len() > 2;
        floor_names || [&self.admin, &self.user].iter().any(|l| !l.exact.is_empty() || !l.suffix.is_empty())
    }

    fn ip_floor(&self, ip: IpAddr, raw: Option<IpAddr>) -> Option<Decision> {
        let shown_ip = match raw {
            Some(r) if r != ip => format!("{ip} (as {r})"),
            _ => ip.to_string(),
        };
        let private: &[(Net, &str)] = if self.deny_private { PRIVATE_FLOOR } else { &[] };
        if let Some((net, why)) = IP_FLOOR.iter().chain(private).find(|(net, _)| net.contains(ip)) {
            return Some(block(net.to_string(), Layer::Floor, format!("{shown_ip} is in the IP floor: {why}")));
        }

        if self.host_addrs.contains(&ip) {
            return Some(block(
                ip.to_string(),
                Layer::Floor,
                format!("{shown_ip} is in the IP floor: one of the host's own addresses"),
            ));
        }
        None
    }

    /// `name` normalized, `ip` canonical (`raw` as given, for the reason text). Without
    /// `floors`, the port and IP floors are skipped (name floors and floor rules still apply).
    fn evaluate(
        &self,
        name: Option<&str>,
        ip: Option<IpAddr>,
        raw: Option<IpAddr>,
        port: u16,
        floors: bool,
    ) -> Decision {
        if floors {
            if port == 0 {
                return block("0", Layer::Floor, "port 0 is not a destination port".to_owned());
            }
            if let Some(why) = self.floor_ports.get(&port) {
                return block(port.to_string(), Layer::Floor, format!("port {port} is in the port floor ({why})"));
            }
            if let Some(d) = ip.and_then(|ip| self.ip_floor(ip, raw)) {
                return d;
            }
        }
        let q = Query { name, ip, port };
        if let Some(e) = self.floor.best(&q) {
            let reason = format!("matches the floor rule `{}`; floors cannot be lifted", e.text);
            return block(e.text.clone(), Layer::Floor, reason);
        }
        let admin = self.admin.best(&q);
        let user = self.user.best(&q);
        if !admin.is_some_and(|a| a.action == Action::Block) {
            if let Some(text) = self.grants.find(&q) {
                let reason =
                    format!("allowed by `{text}`, granted from outside the jail for a time (agent-sandbox allow)");
                return Decision { allowed: true, rule: text, layer: Layer::User, reason };
            }
        }
        match (admin, user) {
            (Some(a), u) if a.action == Action::Block => {
                let mut reason = format!("blocked by the admin rule `{}`", a.text);
                if let Some(u) = u.filter(|u| u.action == Action::Allow) {
                    reason.push_str(&format!("; admin rules outrank the user allow `{}`", u.text));
                }
                block(a.text.clone(), Layer::Admin, reason)
            }
            (a, Some(u)) if u.action == Action::Block => {
                let mut reason = format!("blocked by the user rule `{}`", u.text);
                if let Some(a) = a {
                    reason.push_str(&format!("; the admin allow `{}` does not stop a user narrowing", a.text));
                }
                block(u.text.clone(), Layer::User, reason)
            }
            (_, Some(u)) => Decision {
                allowed: true,
                rule: u.text.clone(),
                layer: Layer::User,
                reason: format!("allowed by the user rule `{}`", u.text),
            },
            (Some(a), None) => Decision {
                allowed: true,
                rule: a.text.clone(),
                layer: Layer::Admin,
                reason: format!("allowed by the admin rule `{}`", a.text),
            },
            (None, None) => Decision {
                allowed: true,
                rule: String::new(),
                layer: Layer::User,
                reason: "no rule matched; the default is allow".to_owned(),
            },
        }
    }
}

/// A name that is really an IP literal (`1.2.3.4`, `::1`, `[::1]`).
fn ip_literal(name: &str) -> Option<IpAddr> {
    let inner = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
    match inner {
        Some(v6) => v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        None => name.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::discriminant;
    use Action::{Allow, Block};
    use Layer::{Admin, Floor, User};
    use RuleErrorKind as K;

    const PROTOS: [Proto; 2] = [Proto::Tcp, Proto::Udp];

    type Rules = &'static [(&'static str, Action, Layer)];

    fn set_opts(rules: &[(&str, Action, Layer)], opts: MatcherOptions) -> RuleSet {
        let rules: Vec<(String, Action, Layer)> = rules.iter().map(|(t, a, l)| (t.to_string(), *a, *l)).collect();
        RuleSet::new(&rules, opts).unwrap()
    }

    fn set(rules: &[(&str, Action, Layer)]) -> RuleSet {
        set_opts(rules, MatcherOptions::default())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn dst<'a>(name: Option<&'a str>, addr: Option<&str>, port: u16, proto: Proto) -> Destination<'a> {
        Destination { ip: addr.map(ip), name, port, proto }
    }

    fn rule(s: &str) -> Rule {
        s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn grants_lift_user_blocks_for_their_time_never_admin_blocks_or_floors() {
        let s = set(&[("*", Block, User), ("*.evil.test", Block, Admin)]);
        let gh = dst(Some("github.com"), Some("140.82.112.3"), 443, Proto::Tcp);
        assert!(!s.decide(&gh).allowed);
        let clone = s.clone();
        let later = std::time::Instant::now() + std::time::Duration::from_secs(60);
        s.grant("github.com", later).unwrap();
        assert!(s.grant("*.evil.test", later).is_err(), "the admin blocks it: refused, not granted");
        assert!(s.grant("127.0.0.1", later).is_err(), "a floor: refused, not granted");
        let d = clone.decide(&gh);
        assert!(d.allowed && d.reason.contains("agent-sandbox allow"), "a clone shares the grant: {d:?}");
        assert!(clone.name_allowed("github.com").allowed, "and the name resolves");
        assert!(!clone.decide(&dst(Some("api.github.com"), None, 443, Proto::Tcp)).allowed, "only what was granted");
        assert!(!s.decide(&dst(Some("x.evil.test"), None, 443, Proto::Tcp)).allowed, "an admin block holds");
        assert!(!s.decide(&dst(None, Some("127.0.0.1"), 80, Proto::Tcp)).allowed, "a floor holds");
        assert!(s.grant("not a rule!", later).is_err());
        assert!(s.grant("localhost", later).is_err_and(|e| e.contains("floor")), "a useless grant is refused");
        assert!(s.grant("allowed.test:25", later).is_err(), "a floor port");
        let soon = std::time::Instant::now() + std::time::Duration::from_millis(50);
        let s2 = set(&[("*", Block, User)]);
        s2.grant("github.com", soon).unwrap();
        assert!(s2.decide(&gh).allowed);
        std::thread::sleep(std::time::Duration::from_millis(80));
        assert!(!s2.decide(&gh).allowed, "a grant ends with its time");
    }

    #[test]
    fn every_rule_form_parses_and_round_trips() {
        let table = [
            ("github.com", "github.com"),
            ("GitHub.COM.", "github.com"),
            ("github.com:443", "github.com:443"),
            ("GITHUB.com.:22", "github.com:22"),
            ("localhost", "localhost"),
            ("a-b.c-d.e", "a-b.c-d.e"),
            ("_sip._tcp.example.com", "_sip._tcp.example.com"),
            ("x1.example.com:65535", "x1.example.com:65535"),
            ("example.com:1", "example.com:1"),
            ("*.example.com", "*.example.com"),
            ("*.Example.COM.:8443", "*.example.com:8443"),
            ("*.com", "*.com"),
            ("*", "*"),
            ("*:443", "443"),
            ("22", "22"),
            ("1", "1"),
            ("65535", "65535"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("10.0.0.0/8:443", "10.0.0.0/8:443"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("192.0.2.7", "192.0.2.7"),
            ("192.0.2.7/32", "192.0.2.7"),
            ("192.0.2.7:22", "192.0.2.7:22"),
            ("192.0.2.7/32:22", "192.0.2.7:22"),
            ("2001:db8::/32", "2001:db8::/32"),
            ("2001:DB8:0:0::/32", "2001:db8::/32"),
            ("2001:db8::1", "2001:db8::1"),
            ("2001:db8::1/128", "2001:db8::1"),
            ("::1", "::1"),
            ("::/0", "::/0"),
            ("[2001:db8::1]:443", "[2001:db8::1]:443"),
            ("[2001:db8::/32]:443", "[2001:db8::/32]:443"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("[2001:db8::/48]", "2001:db8::/48"),
            ("::ffff:1.2.3.4", "1.2.3.4"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
            ("[::ffff:192.0.2.7]:80", "192.0.2.7:80"),
            ("::ffff:0:0/96", "0.0.0.0/0"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("BÜCHER.example.:443", "xn--bcher-kva.example:443"),
            ("*.bücher.example", "*.xn--bcher-kva.example"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("ＥＸＡＭＰＬＥ。com", "example.com"),
            ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
        ];
        for (input, canonical) in table {
            let r = rule(input);
            assert_eq!(r.to_string(), canonical, "{input}");
            let again = rule(canonical);
            assert_eq!(again, r, "{input}: canonical text parses to the same rule");
            assert_eq!(again.to_string(), canonical, "{input}: display is stable");
        }
    }

    /// Each input fails to parse with its kind of error, a message that names the rule with
    /// its control characters escaped, and `RuleSet::new` reports the same.
    fn assert_typed_errors(table: &[(&str, RuleErrorKind)]) {
        for (input, want) in table {
            let err = input.parse::<Rule>().expect_err(input);
            assert_eq!(discriminant(&err.kind), discriminant(want), "{input:?}: {err}");
            let msg = err.to_string();
            assert!(msg.contains("invalid network rule `"), "{msg}");
            assert!(!msg.chars().any(char::is_control), "{input:?}: control characters are escaped: {msg}");
            let ruleset = RuleSet::new(&[(input.to_string(), Block, User)], MatcherOptions::default());
            assert_eq!(ruleset.err().map(|e| e.kind), Some(err.kind.clone()), "{input:?}: RuleSet::new reports it");
        }
    }

    #[test]
    fn empty_input_bad_characters_and_wildcards_are_typed_errors() {
        assert_typed_errors(&[
            ("", K::Empty),
            (" github.com", K::Whitespace),
            ("github.com ", K::Whitespace),
            ("git hub.com", K::Whitespace),
            ("github.com\u{3000}", K::Whitespace),
            ("github.com\n", K::Whitespace),
            ("git\u{0}hub.com", K::ControlChar),
            ("github\u{7f}.com", K::ControlChar),
            ("*github.com", K::Wildcard),
            ("github.*", K::Wildcard),
            ("a.*.com", K::Wildcard),
            ("*.*.com", K::Wildcard),
            ("**", K::Wildcard),
            ("*.", K::Wildcard),
            ("*.:443", K::Wildcard),
            ("*.com*", K::Wildcard),
            ("a\u{200b}b.com", K::Invisible('\u{200b}')),
            ("git\u{ad}hub.com", K::Invisible('\u{ad}')),
            ("github.com\u{feff}", K::Invisible('\u{feff}')),
        ]);
    }

    #[test]
    fn bad_ports_are_typed_errors() {
        assert_typed_errors(&[
            ("github.com:0", K::PortZero),
            ("0", K::PortZero),
            ("*:0", K::PortZero),
            ("github.com:65536", K::PortTooLarge(String::new())),
            ("70000", K::PortTooLarge(String::new())),
            ("github.com:99999999999999999999999", K::PortTooLarge(String::new())),
            ("github.com:", K::PortMissing),
            ("github.com:http", K::PortNotNumber(String::new())),
            ("github.com:+443", K::PortNotNumber(String::new())),
            ("github.com:-1", K::PortNotNumber(String::new())),
            ("github.com:0443", K::PortLeadingZero(String::new())),
            ("022", K::PortLeadingZero(String::new())),
            ("1000-2000", K::PortRange(String::new())),
            ("github.com:1000-2000", K::PortRange(String::new())),
            ("[::1]:80-90", K::PortRange(String::new())),
            ("[::1]:", K::PortMissing),
            ("２５６-１", K::LooksLikePort(String::new())),
        ]);
    }

    #[test]
    fn bad_addresses_prefixes_and_brackets_are_typed_errors() {
        assert_typed_errors(&[
            ("10.0.0.0/33", K::BadPrefix { len: String::new(), max: 0 }),
            ("10.0.0.0/-1", K::BadPrefix { len: String::new(), max: 0 }),
            ("10.0.0.0/", K::BadPrefix { len: String::new(), max: 0 }),
            ("10.0.0.0/08", K::BadPrefix { len: String::new(), max: 0 }),
            ("10.0.0.0/1000", K::BadPrefix { len: String::new(), max: 0 }),
            ("2001:db8::/129", K::BadPrefix { len: String::new(), max: 0 }),
            ("[2001:db8::/x]:443", K::BadPrefix { len: String::new(), max: 0 }),
            ("10.1.2.3/8", K::HostBits { len: 0, suggestion: String::new() }),
            ("2001:db8::1/32", K::HostBits { len: 0, suggestion: String::new() }),
            ("::1:", K::BadIpv6(String::new())),
            (":::", K::BadIpv6(String::new())),
            ("::1::2", K::BadIpv6(String::new())),
            ("2001:db8::1:443:", K::BadIpv6(String::new())),
            ("fe80::1%eth0", K::BadIpv6(String::new())),
            ("host:80:90", K::BadIpv6(String::new())),
            ("[::g]:80", K::BadIpv6(String::new())),
            ("1.2.3.4.5", K::BadIpv4(String::new())),
            ("256.1.1.1", K::BadIpv4(String::new())),
            ("010.0.0.1", K::BadIpv4(String::new())),
            ("1.2.3", K::BadIpv4(String::new())),
            ("1.2.3.4/8x", K::BadPrefix { len: String::new(), max: 0 }),
            ("example.com/24", K::BadIpv4(String::new())),
            ("a/b.com:80", K::BadIpv4(String::new())),
            ("[::1", K::Brackets),
            ("[::1]x", K::Brackets),
            ("[::1]443", K::Brackets),
            ("[1.2.3.4]:80", K::Brackets),
            ("[example.com]:80", K::Brackets),
            ("64:ff9b::a01:203", K::Nat64(String::new())),
            ("64:ff9b::/96", K::Nat64(String::new())),
            ("[64:ff9b::a01:203]:443", K::Nat64(String::new())),
        ]);
    }

    #[test]
    fn bad_names_are_typed_errors() {
        let long_label = format!("{}.com", "a".repeat(64));
        let long_name = ["abcdefghi"; 26].join("."); // 259 characters
        assert_typed_errors(&[
            ("0x7f000001", K::Numeric),
            ("example.123", K::Numeric),
            ("*.1.2.3.4", K::Numeric),
            ("a..b", K::EmptyLabel),
            (".a", K::EmptyLabel),
            ("a..", K::EmptyLabel),
            (".", K::EmptyLabel),
            ("-a.com", K::Hyphen(String::new())),
            ("a-.com", K::Hyphen(String::new())),
            (&long_label, K::LabelTooLong(String::new())),
            (&long_name, K::NameTooLong(0)),
            ("a!b.com", K::BadChar('!')),
            ("exa]mple.com", K::BadChar(']')),
            ("xn--zz.example", K::Idna),
        ]);
    }

    #[test]
    fn errors_name_the_rule_and_say_what_is_wrong() {
        let e = "10.1.2.3/8".parse::<Rule>().unwrap_err();
        assert_eq!(e.rule, "10.1.2.3/8");
        assert_eq!(e.kind, K::HostBits { len: 8, suggestion: "10.0.0.0/8".into() });
        assert!(e.to_string().contains("did you mean `10.0.0.0/8`"), "{e}");
        let e = "2001:db8::1/32".parse::<Rule>().unwrap_err();
        assert_eq!(e.kind, K::HostBits { len: 32, suggestion: "2001:db8::/32".into() });
        let e = "64:ff9b::a01:203".parse::<Rule>().unwrap_err();
        assert_eq!(e.kind, K::Nat64("10.1.2.3".into()));
        let e = "1000-2000".parse::<Rule>().unwrap_err();
        assert_eq!(e.kind, K::PortRange("1000-2000".into()));
        let e = "a\nb".parse::<Rule>().unwrap_err();
        assert_eq!(e.rule, "a\\nb");
        let long = "x".repeat(5000);
        let e = long.parse::<Rule>().unwrap_err();
        assert!(e.to_string().len() < 400, "long input is truncated in the message");
        let e = RuleSet::new(&[("evil.com".into(), Allow, Floor)], MatcherOptions::default()).unwrap_err();
        assert_eq!((e.rule.as_str(), e.kind), ("evil.com", K::FloorAllow));
    }

    #[test]
    fn normalize_name_table() {
        let ok = [
            ("github.com", "github.com"),
            ("GitHub.Com", "github.com"),
            ("github.com.", "github.com"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("BÜCHER.EXAMPLE.", "xn--bcher-kva.example"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("XN--BCHER-KVA.Example.", "xn--bcher-kva.example"),
            ("bücher.example。", "xn--bcher-kva.example"),
            ("_dmarc.example.com", "_dmarc.example.com"),
            ("a", "a"),
            ("0x7g", "0x7g"),
            ("123.example", "123.example"),
            ("4.3.2.1.in-addr.arpa", "4.3.2.1.in-addr.arpa"),
        ];
        for (input, want) in ok {
            assert_eq!(normalize_name(input).as_deref(), Ok(want), "{input}");
            assert_eq!(normalize_name(want).as_deref(), Ok(want), "{input}: idempotent");
        }
        let max_label = "a".repeat(63);
        assert!(normalize_name(&max_label).is_ok());
        let max_name = format!("{}.{}.{}.{}", "a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61));
        assert_eq!(max_name.len(), 253);
        assert!(normalize_name(&max_name).is_ok());
        assert!(normalize_name(&format!("{max_name}.")).is_ok(), "the trailing dot does not count");
        assert_eq!(normalize_name(&format!("{max_name}e")).map_err(|e| e.kind), Err(K::NameTooLong(254)));
        let bad = [
            ("", K::Empty),
            ("a b", K::Whitespace),
            ("a\tb", K::Whitespace),
            ("a\u{1}b", K::ControlChar),
            ("a..b", K::EmptyLabel),
            ("a..", K::EmptyLabel),
            ("..", K::EmptyLabel),
            ("*.example.com", K::BadChar('*')),
            ("example.com:443", K::BadChar(':')),
            ("[::1]", K::BadChar('[')),
            ("1.2.3.4", K::Numeric),
            ("127.1", K::Numeric),
            ("0x7f.0x0.0x0.0x1", K::Numeric),
            ("-x", K::Hyphen("-x".into())),
            ("xn--zz", K::Idna),
            ("a%b", K::BadChar('%')),
            ("bü%cher.example", K::Idna),
        ];
        for (input, want) in bad {
            let err = normalize_name(input).expect_err(input);
            assert_eq!(discriminant(&err.kind), discriminant(&want), "{input:?}: {err}");
        }
    }

    #[test]
    fn idn_and_punycode_forms_are_the_same_name() {
        for (rule_text, name, blocked) in [
            ("bücher.example", "xn--bcher-kva.example", true),
            ("xn--bcher-kva.example", "bücher.example", true),
            ("xn--bcher-kva.example", "BÜCHER.example.", true),
            ("*.bücher.example", "www.XN--BCHER-KVA.example.", true),
            ("*.bücher.example", "bücher.example", false),
            ("bücher.example", "bucher.example", false),
        ] {
            let s = set(&[(rule_text, Block, User)]);
            for proto in PROTOS {
                let d = s.decide(&dst(Some(name), None, 443, proto));
                assert_eq!(d.allowed, !blocked, "{rule_text} vs {name}: {d:?}");
            }
            assert_eq!(s.name_allowed(name).allowed, !blocked, "{rule_text} vs {name}");
        }
    }

    /// (address, floored by default, floored with deny_private)
    const IP_TABLE: &[(&str, bool, bool)] = &[
        ("127.0.0.1", true, true),
        ("127.255.255.254", true, true),
        ("::1", true, true),
        ("::ffff:127.0.0.1", true, true),
        ("64:ff9b::7f00:1", true, true),
        ("169.254.169.254", true, true),
        ("::ffff:169.254.169.254", true, true),
        ("64:ff9b::a9fe:a9fe", true, true),
        ("169.254.1.1", true, true),
        ("fe80::1", true, true),
        ("febf:ffff::1", true, true),
        ("fd00:ec2::254", true, true),
        ("100.100.100.200", true, true),
        ("0.0.0.0", true, true),
        ("0.1.2.3", true, true),
        ("::ffff:0.0.0.0", true, true),
        ("::", true, true),
        ("::7f00:1", true, true),
        ("224.0.0.1", true, true),
        ("239.255.255.250", true, true),
        ("::ffff:224.0.0.251", true, true),
        ("ff02::1", true, true),
        ("ff05::1:3", true, true),
        ("255.255.255.255", true, true),
        ("64:ff9b::ffff:ffff", true, true),
        ("10.1.2.3", false, true),
        ("::ffff:10.1.2.3", false, true),
        ("64:ff9b::a01:203", false, true),
        ("172.16.0.1", false, true),
        ("172.31.255.255", false, true),
        ("192.168.1.1", false, true),
        ("100.64.0.1", false, true),
        ("100.127.255.255", false, true),
        ("fc00::1", false, true),
        ("fd12:3456::1", false, true),
        ("172.32.0.1", false, false),
        ("100.128.0.1", false, false),
        ("11.0.0.1", false, false),
        ("8.8.8.8", false, false),
        ("::ffff:8.8.8.8", false, false),
        ("64:ff9b::808:808", false, false),
        ("64:ff9b:1::a01:203", false, true),
        // 6to4, Teredo and the local-use NAT64 prefix carry an IPv4 address too.
        ("2002:7f00:1::", true, true),
        ("::ffff:0:7f00:1", true, true),
        ("::ffff:0:a01:203", false, true),
        ("2002:a9fe:a9fe::1", true, true),
        ("2002:a01:203::", false, true),
        ("2002:808:808::", false, false),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", true, true),
        ("2001:0:4136:e378:8000:63bf:f5fe:fdfc", false, true),
        ("64:ff9b:1::7f00:1", true, true),
        ("64:ff9b:1:7f00:0:100::", true, true),
        ("64:ff9b:1:a9fe:a9:fe00::", true, true),
        ("2001:4860:4860::8888", false, false),
        ("fe00::1", false, false),
        ("223.255.255.255", false, false),
    ];

    #[test]
    fn ip_floors_with_mapped_and_nat64_forms_beat_every_allow() {
        for deny_private in [false, true] {
            for &(addr, floored, floored_private) in IP_TABLE {
                let want = if deny_private { floored_private } else { floored };
                // The admin and user allow everything, this address, and its CIDR on this port.
                let exact = match canonical_ip(ip(addr)) {
                    IpAddr::V4(v4) => format!("{v4}:443"),
                    IpAddr::V6(v6) => format!("[{v6}]:443"),
                };
                let rules = [
                    ("*", Allow, Admin),
                    (exact.as_str(), Allow, Admin),
                    ("*", Allow, User),
                    (exact.as_str(), Allow, User),
                ];
                let s = set_opts(&rules, MatcherOptions { deny_private, ..Default::default() });
                for proto in PROTOS {
                    for name in [None, Some("example.com")] {
                        let d = s.decide(&dst(name, Some(addr), 443, proto));
                        assert_eq!(d.allowed, !want, "{addr} deny_private={deny_private}: {d:?}");
                        if want {
                            assert_eq!(d.layer, Floor, "{addr}");
                            assert!(d.reason.contains("IP floor"), "{d:?}");
                        }
                    }
                }
            }
        }
        let s = set(&[]);
        let d = s.decide(&dst(None, Some("::ffff:169.254.169.254"), 80, Proto::Tcp));
        assert_eq!((d.rule.as_str(), d.layer), ("169.254.169.254", Floor));
        assert!(d.reason.contains("cloud metadata") && d.reason.contains("::ffff:169.254.169.254"), "{d:?}");
        let d = s.decide(&dst(None, Some("64:ff9b::7f00:1"), 80, Proto::Udp));
        assert_eq!(d.rule, "127.0.0.0/8");
    }

    #[test]
    fn every_port_floor_port_is_blocked_for_an_allowed_host() {
        let extra = [2222_u16, 8025];
        let opts = MatcherOptions { extra_floor_ports: extra.to_vec(), ..Default::default() };
        let ports: Vec<u16> = crate::netrules::floor::floor_ports().chain(extra).collect();
        assert!(ports.len() >= PORT_FLOOR.len() + 2);
        for port in ports {
            let host_port = format!("github.com:{port}");
            let ip_port = format!("203.0.113.5:{port}");
            let bare = port.to_string();
            let rules = [
                ("github.com", Allow, Admin),
                (host_port.as_str(), Allow, Admin),
                (ip_port.as_str(), Allow, Admin),
                (bare.as_str(), Allow, Admin),
                (host_port.as_str(), Allow, User),
            ];
            let s = set_opts(&rules, opts.clone());
            for proto in PROTOS {
                for (name, addr) in
                    [(Some("github.com"), None), (None, Some("203.0.113.5")), (Some("github.com"), Some("203.0.113.5"))]
                {
                    let d = s.decide(&dst(name, addr, port, proto));
                    assert!(!d.allowed, "port {port} {proto:?}");
                    assert_eq!((d.rule.as_str(), d.layer), (bare.as_str(), Floor), "port {port}");
                    assert!(d.reason.contains("port floor"), "{d:?}");
                }
                assert!(s.decide(&dst(Some("github.com"), None, 443, proto)).allowed);
            }
        }
        let d = set(&[("*", Allow, Admin)]).decide(&dst(Some("github.com"), None, 0, Proto::Tcp));
        assert!(!d.allowed && d.layer == Floor, "port 0 is floored: {d:?}");
        let d = set(&[]).decide(&dst(Some("smtp.example.com"), None, 25, Proto::Tcp));
        assert!(d.reason.contains("mail"), "the floor's reason is reported: {d:?}");
    }

    #[test]
    fn host_addrs_are_floored() {
        let opts = MatcherOptions {
            host_addrs: vec![ip("192.0.2.10"), ip("2001:db8::10"), ip("::ffff:198.51.100.1")],
            ..Default::default()
        };
        let s = set_opts(&[("*", Allow, Admin), ("192.0.2.10", Allow, Admin), ("2001:db8::10", Allow, User)], opts);
        for proto in PROTOS {
            for addr in ["192.0.2.10", "::ffff:192.0.2.10", "64:ff9b::c000:20a", "2001:db8::10", "198.51.100.1"] {
                let d = s.decide(&dst(Some("login1.cluster.example"), Some(addr), 22, proto));
                assert!(!d.allowed && d.layer == Floor, "{addr}: {d:?}");
                assert!(d.reason.contains("host's own"), "{d:?}");
            }
            for addr in ["192.0.2.11", "2001:db8::11"] {
                assert!(s.decide(&dst(None, Some(addr), 22, proto)).allowed, "{addr}");
            }
        }
    }

    #[test]
    fn host_addrs_not_given_are_read_at_the_first_decision_and_floored() {
        static READS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        fn read() -> Option<Vec<IpAddr>> {
            READS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Some(vec!["192.0.2.20".parse().unwrap()])
        }
        let opts = MatcherOptions { refresh_host_addrs: Some(read), ..Default::default() };
        let s = set_opts(&[("*", Allow, Admin)], opts);
        assert_eq!(READS.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing read before a decision");
        let d = s.decide(&dst(None, Some("192.0.2.20"), 443, Proto::Tcp));
        assert!(!d.allowed && d.layer == Floor, "read at the first decision and floored: {d:?}");
        assert!(s.decide(&dst(None, Some("192.0.2.21"), 443, Proto::Tcp)).allowed);
        assert_eq!(READS.load(std::sync::atomic::Ordering::SeqCst), 1, "read once within the second");
    }

    /// A read of the host's addresses that fails (no descriptor left) never empties the floor:
    /// the last set stays, and with none read yet every address is floored.
    #[test]
    fn a_failed_read_of_the_host_addrs_keeps_the_floor_closed() {
        static FAIL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
        fn read() -> Option<Vec<IpAddr>> {
            (!FAIL.load(std::sync::atomic::Ordering::SeqCst)).then(|| vec!["192.0.2.30".parse().unwrap()])
        }
        let s =
            set_opts(&[("*", Allow, Admin)], MatcherOptions { refresh_host_addrs: Some(read), ..Default::default() });
        let d = s.decide(&dst(None, Some("192.0.2.31"), 443, Proto::Tcp));
        assert!(!d.allowed && d.layer == Floor, "nothing read yet: every address is floored: {d:?}");
        FAIL.store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(s.decide(&dst(None, Some("192.0.2.31"), 443, Proto::Tcp)).allowed, "read at the next decision");
        assert!(!s.decide(&dst(None, Some("192.0.2.30"), 443, Proto::Tcp)).allowed);
        // A failed re-read (forced due: the state's time cleared) keeps the set it had.
        FAIL.store(true, std::sync::atomic::Ordering::SeqCst);
        s.host_addrs_for_tests().lock().unwrap().0 = None;
        assert!(!s.decide(&dst(None, Some("192.0.2.30"), 443, Proto::Tcp)).allowed, "kept after a failed read");
        assert!(s.decide(&dst(None, Some("192.0.2.31"), 443, Proto::Tcp)).allowed);
    }

    struct Case {
        rules: &'static [(&'static str, Action, Layer)],
        name: Option<&'static str>,
        ip: Option<&'static str>,
        port: u16,
        allowed: bool,
        rule: &'static str,
        layer: Layer,
    }

    const fn c(
        rules: &'static [(&'static str, Action, Layer)],
        name: Option<&'static str>,
        ip: Option<&'static str>,
        port: u16,
        allowed: bool,
        rule: &'static str,
        layer: Layer,
    ) -> Case {
        Case { rules, name, ip, port, allowed, rule, layer }
    }

    const ADMIN_ALLOWLIST: &[(&str, Action, Layer)] = &[
        ("*", Block, Admin),
        ("pypi.org", Allow, Admin),
        ("*.pythonhosted.org", Allow, Admin),
        ("evil.com", Allow, User),
    ];
    const DEPTH: &[(&str, Action, Layer)] = &[
        ("*", Block, User),
        ("*.example.com", Allow, User),
        ("*.corp.example.com", Block, User),
        ("*.b.corp.example.com", Allow, User),
    ];
    const CIDRS: &[(&str, Action, Layer)] =
        &[("10.0.0.0/8", Block, User), ("10.1.0.0/16", Allow, User), ("10.1.2.0/24", Block, User)];
    const CIDRS6: &[(&str, Action, Layer)] = &[("2001:db8::/32", Block, Admin), ("2001:db8:1::/48", Allow, Admin)];

    const N: Option<&str> = None;

    const PRECEDENCE: &[Case] = &[
        // Admin block beats a user allow, even a more specific one.
        c(&[("evil.com", Block, Admin), ("evil.com", Allow, User)], Some("evil.com"), N, 443, false, "evil.com", Admin),
        c(
            &[("*.evil.com", Block, Admin), ("a.evil.com", Allow, User)],
            Some("a.evil.com"),
            N,
            443,
            false,
            "*.evil.com",
            Admin,
        ),
        c(&[("*", Block, Admin), ("a.com:443", Allow, User)], Some("a.com"), N, 443, false, "*", Admin),
        // A user block beats an admin allow (a user may always narrow).
        c(
            &[("github.com", Allow, Admin), ("github.com", Block, User)],
            Some("github.com"),
            N,
            443,
            false,
            "github.com",
            User,
        ),
        c(
            &[("gist.github.com:443", Allow, Admin), ("*", Block, User)],
            Some("gist.github.com"),
            N,
            443,
            false,
            "*",
            User,
        ),
        // Admin allow-list: `*` blocked plus exceptions.
        c(ADMIN_ALLOWLIST, Some("pypi.org"), N, 443, true, "pypi.org", Admin),
        c(ADMIN_ALLOWLIST, Some("files.pythonhosted.org"), N, 443, true, "*.pythonhosted.org", Admin),
        c(ADMIN_ALLOWLIST, Some("a.b.pythonhosted.org"), N, 80, true, "*.pythonhosted.org", Admin),
        c(ADMIN_ALLOWLIST, Some("pythonhosted.org"), N, 443, false, "*", Admin),
        c(ADMIN_ALLOWLIST, Some("www.pypi.org"), N, 443, false, "*", Admin),
        c(ADMIN_ALLOWLIST, Some("evil.com"), N, 443, false, "*", Admin),
        c(ADMIN_ALLOWLIST, N, Some("203.0.113.9"), 443, false, "*", Admin),
        c(ADMIN_ALLOWLIST, Some("pypi.org"), Some("203.0.113.9"), 443, true, "pypi.org", Admin),
        // User allow-list.
        c(
            &[("*", Block, User), ("github.com:443", Allow, User)],
            Some("github.com"),
            N,
            443,
            true,
            "github.com:443",
            User,
        ),
        c(&[("*", Block, User), ("github.com:443", Allow, User)], Some("github.com"), N, 22, false, "*", User),
        // More specific wins, both directions, in both layers.
        c(
            &[("*.example.com", Block, User), ("api.example.com", Allow, User)],
            Some("api.example.com"),
            N,
            443,
            true,
            "api.example.com",
            User,
        ),
        c(
            &[("*.example.com", Block, User), ("api.example.com", Allow, User)],
            Some("www.example.com"),
            N,
            443,
            false,
            "*.example.com",
            User,
        ),
        c(
            &[("*.example.com", Allow, User), ("bad.example.com", Block, User)],
            Some("bad.example.com"),
            N,
            443,
            false,
            "bad.example.com",
            User,
        ),
        c(
            &[("*.example.com", Allow, User), ("bad.example.com", Block, User)],
            Some("ok.example.com"),
            N,
            443,
            true,
            "*.example.com",
            User,
        ),
        c(
            &[("*.example.com", Block, Admin), ("api.example.com", Allow, Admin)],
            Some("api.example.com"),
            N,
            443,
            true,
            "api.example.com",
            Admin,
        ),
        c(
            &[("*.example.com", Allow, Admin), ("bad.example.com", Block, Admin)],
            Some("bad.example.com"),
            N,
            443,
            false,
            "bad.example.com",
            Admin,
        ),
        // Ties in one layer: block wins, whatever the order.
        c(&[("x.com", Allow, User), ("x.com", Block, User)], Some("x.com"), N, 443, false, "x.com", User),
        c(&[("x.com", Block, User), ("x.com", Allow, User)], Some("x.com"), N, 443, false, "x.com", User),
        c(
            &[("x.com:443", Allow, Admin), ("x.com:443", Block, Admin)],
            Some("x.com"),
            N,
            443,
            false,
            "x.com:443",
            Admin,
        ),
        c(&[("*.x.com", Allow, User), ("*.x.com", Block, User)], Some("a.x.com"), N, 443, false, "*.x.com", User),
        c(
            &[("203.0.113.5", Allow, User), ("x.com", Block, User)],
            Some("x.com"),
            Some("203.0.113.5"),
            443,
            false,
            "x.com",
            User,
        ),
        c(
            &[("203.0.113.5", Block, User), ("x.com", Allow, User)],
            Some("x.com"),
            Some("203.0.113.5"),
            443,
            false,
            "203.0.113.5",
            User,
        ),
        c(
            &[("[2001:db8::5]:443", Block, Admin), ("x.com:443", Allow, Admin)],
            Some("x.com"),
            Some("2001:db8::5"),
            443,
            false,
            "[2001:db8::5]:443",
            Admin,
        ),
        c(&[("*", Allow, User), ("*", Block, User)], N, N, 443, false, "*", User),
        c(&[("443", Allow, User), ("*:443", Block, User)], N, Some("203.0.113.5"), 443, false, "443", User),
        // Port-qualified beats the same rule without port.
        c(&[("x.com", Block, User), ("x.com:443", Allow, User)], Some("x.com"), N, 443, true, "x.com:443", User),
        c(&[("x.com", Block, User), ("x.com:443", Allow, User)], Some("x.com"), N, 80, false, "x.com", User),
        c(&[("x.com", Allow, User), ("x.com:22", Block, User)], Some("x.com"), N, 22, false, "x.com:22", User),
        c(&[("x.com", Allow, User), ("x.com:22", Block, User)], Some("x.com"), N, 443, true, "x.com", User),
        c(
            &[("*.x.com:443", Allow, User), ("*.x.com", Block, User)],
            Some("a.x.com"),
            N,
            443,
            true,
            "*.x.com:443",
            User,
        ),
        c(
            &[("10.0.0.0/8", Block, User), ("10.0.0.0/8:443", Allow, User)],
            N,
            Some("10.1.1.1"),
            443,
            true,
            "10.0.0.0/8:443",
            User,
        ),
        c(
            &[("10.0.0.0/8", Block, User), ("10.0.0.0/8:443", Allow, User)],
            N,
            Some("10.1.1.1"),
            80,
            false,
            "10.0.0.0/8",
            User,
        ),
        c(
            &[("2001:db8::/32", Block, User), ("[2001:db8::/32]:443", Allow, User)],
            N,
            Some("2001:db8::7"),
            443,
            true,
            "[2001:db8::/32]:443",
            User,
        ),
        c(&[("*", Block, User), ("443", Allow, User)], Some("any.org"), N, 443, true, "443", User),
        c(&[("*", Block, User), ("443", Allow, User)], Some("any.org"), N, 80, false, "*", User),
        // ... but only between equally specific targets: a bare port is below every host/CIDR.
        c(&[("22", Block, User), ("github.com", Allow, User)], Some("github.com"), N, 22, true, "github.com", User),
        c(&[("22", Block, User), ("github.com", Allow, User)], Some("gitlab.com"), N, 22, false, "22", User),
        c(&[("github.com", Block, User), ("443", Allow, User)], Some("github.com"), N, 443, false, "github.com", User),
        c(&[("0.0.0.0/0", Block, User), ("443", Allow, User)], N, Some("203.0.113.5"), 443, false, "0.0.0.0/0", User),
        c(
            &[("*.x.com:443", Allow, User), ("api.x.com", Block, User)],
            Some("api.x.com"),
            N,
            443,
            false,
            "api.x.com",
            User,
        ),
        c(
            &[("10.0.0.0/8:443", Allow, User), ("10.1.0.0/16", Block, User)],
            N,
            Some("10.1.0.1"),
            443,
            false,
            "10.1.0.0/16",
            User,
        ),
        // Wildcard depth: a longer suffix beats a shorter one; `*.s` never matches `s`.
        c(DEPTH, Some("a.example.com"), N, 443, true, "*.example.com", User),
        c(DEPTH, Some("corp.example.com"), N, 443, true, "*.example.com", User),
        c(DEPTH, Some("a.corp.example.com"), N, 443, false, "*.corp.example.com", User),
        c(DEPTH, Some("x.y.corp.example.com"), N, 443, false, "*.corp.example.com", User),
        c(DEPTH, Some("b.corp.example.com"), N, 443, false, "*.corp.example.com", User),
        c(DEPTH, Some("x.b.corp.example.com"), N, 443, true, "*.b.corp.example.com", User),
        c(DEPTH, Some("x.y.b.corp.example.com"), N, 443, true, "*.b.corp.example.com", User),
        c(DEPTH, Some("example.com"), N, 443, false, "*", User),
        c(DEPTH, Some("notexample.com"), N, 443, false, "*", User),
        // CIDR prefix length.
        c(CIDRS, N, Some("10.1.2.3"), 443, false, "10.1.2.0/24", User),
        c(CIDRS, N, Some("10.1.3.3"), 443, true, "10.1.0.0/16", User),
        c(CIDRS, N, Some("10.2.0.1"), 443, false, "10.0.0.0/8", User),
        c(CIDRS, N, Some("::ffff:10.1.3.3"), 443, true, "10.1.0.0/16", User),
        c(CIDRS, N, Some("11.0.0.1"), 443, true, "", User),
        c(CIDRS6, N, Some("2001:db8:1::1"), 443, true, "2001:db8:1::/48", Admin),
        c(CIDRS6, N, Some("2001:db8:2::1"), 443, false, "2001:db8::/32", Admin),
        // Name against CIDR: any name rule beats a CIDR shorter than one address; an exact
        // address equals an exact host (tie → block) and beats a wildcard.
        c(
            &[("203.0.113.0/24", Block, User), ("example.com", Allow, User)],
            Some("example.com"),
            Some("203.0.113.5"),
            443,
            true,
            "example.com",
            User,
        ),
        c(
            &[("203.0.113.0/24", Block, User), ("*.example.com", Allow, User)],
            Some("a.example.com"),
            Some("203.0.113.5"),
            443,
            true,
            "*.example.com",
            User,
        ),
        c(
            &[("203.0.113.4/31", Allow, User), ("*.example.com", Block, User)],
            Some("a.example.com"),
            Some("203.0.113.5"),
            443,
            false,
            "*.example.com",
            User,
        ),
        c(
            &[("203.0.113.5", Block, User), ("*.example.com", Allow, User)],
            Some("a.example.com"),
            Some("203.0.113.5"),
            443,
            false,
            "203.0.113.5",
            User,
        ),
        c(
            &[("2001:db8::5", Allow, User), ("*.example.com", Block, User)],
            Some("a.example.com"),
            Some("2001:db8::5"),
            443,
            true,
            "2001:db8::5",
            User,
        ),
        c(
            &[("2001:db8::4/127", Allow, User), ("*.example.com", Block, User)],
            Some("a.example.com"),
            Some("2001:db8::5"),
            443,
            false,
            "*.example.com",
            User,
        ),
        // Name rules need a name, address rules an address.
        c(&[("example.com", Block, User)], N, Some("203.0.113.5"), 443, true, "", User),
        c(&[("203.0.113.0/24", Block, User)], Some("example.com"), N, 443, true, "", User),
        c(&[("*", Block, User)], N, N, 443, false, "*", User),
        // Mapped and NAT64 destinations match IPv4 rules; mapped rules are IPv4 rules.
        c(&[("203.0.113.0/24", Block, User)], N, Some("::ffff:203.0.113.9"), 443, false, "203.0.113.0/24", User),
        c(&[("203.0.113.0/24", Block, User)], N, Some("64:ff9b::cb00:7109"), 443, false, "203.0.113.0/24", User),
        c(&[("::ffff:203.0.113.0/120", Block, User)], N, Some("203.0.113.9"), 443, false, "203.0.113.0/24", User),
        c(&[("::/0", Block, User)], N, Some("::ffff:203.0.113.9"), 443, true, "", User),
        // Defaults and reporting.
        c(&[], Some("example.com"), N, 443, true, "", User),
        c(&[("x.com", Allow, Admin), ("x.com", Allow, User)], Some("x.com"), N, 443, true, "x.com", User),
        c(&[("*", Block, Admin), ("x.com", Allow, Admin), ("*", Allow, User)], Some("x.com"), N, 443, true, "*", User),
        // Floor-layer rules and name floors cannot be lifted.
        c(
            &[("evil.com", Block, Floor), ("evil.com", Allow, Admin), ("evil.com:443", Allow, User)],
            Some("evil.com"),
            N,
            443,
            false,
            "evil.com",
            Floor,
        ),
        c(&[("*", Block, Floor), ("*", Allow, Admin)], Some("ok.com"), N, 443, false, "*", Floor),
        c(&[("2222", Block, Floor), ("x.com:2222", Allow, Admin)], Some("x.com"), N, 2222, false, "2222", Floor),
        c(
            &[("10.0.0.0/8", Block, Floor), ("10.1.2.3", Allow, Admin)],
            N,
            Some("::ffff:10.1.2.3"),
            443,
            false,
            "10.0.0.0/8",
            Floor,
        ),
        c(&[("localhost", Allow, Admin)], Some("localhost"), N, 8080, false, "localhost", Floor),
        c(&[("*.localhost", Allow, Admin)], Some("app.LOCALHOST."), N, 8080, false, "*.localhost", Floor),
    ];

    #[test]
    fn precedence_table() {
        for (i, case) in PRECEDENCE.iter().enumerate() {
            let s = set(case.rules);
            for proto in PROTOS {
                let d = s.decide(&dst(case.name, case.ip, case.port, proto));
                let want = (case.allowed, case.rule, case.layer);
                assert_eq!((d.allowed, d.rule.as_str(), d.layer), want, "case {i} {proto:?}: {d:?}");
                assert!(!d.reason.is_empty());
            }
        }
    }

    #[test]
    fn specificity_is_a_total_order() {
        // Groups from least to most specific; rules within a group rank equal.
        let groups: &[&[&str]] = &[
            &["*"],
            &["443", "*:22"],
            &["::/0"],
            &["2001:db8::/32"],
            &["0.0.0.0/0", "::/96"],
            &["10.0.0.0/8"],
            &["10.0.0.0/8:443"],
            &["10.1.0.0/16", "2001:db8::/112"],
            &["10.1.2.0/31", "2001:db8::/127"],
            &["*.com"],
            &["*.com:443"],
            &["*.example.com"],
            &["*.a.example.com"],
            &["a.example.com", "10.1.2.3", "2001:db8::1", "10.1.2.3/32"],
            &["a.example.com:443", "10.1.2.3:443", "[2001:db8::1]:443"],
        ];
        let keys: Vec<Vec<Key>> = groups.iter().map(|g| g.iter().map(|r| rule(r).key()).collect()).collect();
        for (i, gi) in keys.iter().enumerate() {
            assert!(gi.iter().all(|k| *k == gi[0]), "group {:?} ranks equal", groups[i]);
            for (j, gj) in keys.iter().enumerate() {
                assert_eq!(gi[0].cmp(&gj[0]), i.cmp(&j), "{:?} vs {:?}", groups[i], groups[j]);
            }
        }
    }

    #[test]
    fn name_allowed_table() {
        let table: &[(Rules, &str, bool, &str, Layer)] = &[
            (&[], "example.com", true, "", User),
            (&[("*", Block, User), ("github.com:443", Allow, User)], "github.com", true, "github.com:443", User),
            (&[("*", Block, User), ("github.com:443", Allow, User)], "GitHub.com.", true, "github.com:443", User),
            (&[("*", Block, User), ("github.com:443", Allow, User)], "evil.com", false, "*", User),
            (&[("evil.com", Block, User)], "EVIL.com.", false, "evil.com", User),
            (&[("*.evil.com", Block, Admin), ("a.evil.com", Allow, User)], "a.evil.com", false, "*.evil.com", Admin),
            (&[("evil.com:443", Block, User)], "evil.com", true, "", User),
            (&[("*", Block, User), ("443", Allow, User)], "anything.org", true, "443", User),
            (&[("*", Block, Admin), ("443", Allow, User)], "anything.org", false, "*", Admin),
            (
                &[("*", Block, User), ("smtp.example.com:25", Allow, User)],
                "smtp.example.com",
                true,
                "smtp.example.com:25",
                User,
            ),
            (&[("22", Block, User)], "x.org", true, "", User),
            (&[("10.0.0.0/8", Block, User)], "x.org", true, "", User),
            // An address rule never makes a name resolvable: that would forward every name
            // upstream, a DNS tunnel. The name must be allowed itself.
            (&[("*", Block, Admin), ("10.0.0.0/8", Allow, Admin)], "license.corp", false, "*", Admin),
            (&[("*", Block, User), ("10.0.0.0/8", Allow, User)], "x.org", false, "*", User),
            (
                &[("*", Block, Admin), ("*.corp", Allow, Admin), ("10.0.0.0/8", Allow, Admin)],
                "license.corp",
                true,
                "*.corp",
                Admin,
            ),
            (&[("*", Block, User), ("x.org", Block, User), ("10.0.0.0/8", Allow, User)], "x.org", false, "x.org", User),
            (&[("*.evil.com", Block, Floor)], "a.evil.com", false, "*.evil.com", Floor),
            (&[("*.evil.com:443", Block, Floor)], "a.evil.com", true, "", User),
            (&[], "localhost", false, "localhost", Floor),
            (&[], "a..b", false, "", Floor),
            (&[], "1.2.3.4", false, "", Floor),
            (&[], "", false, "", Floor),
        ];
        for (rules, name, allowed, rule_text, layer) in table {
            let d = set(rules).name_allowed(name);
            assert_eq!(
                (d.allowed, d.rule.as_str(), d.layer),
                (*allowed, *rule_text, *layer),
                "{rules:?} {name:?}: {d:?}"
            );
        }
        // Only the ports of rules that could match the name are probed.
        let many: Vec<(String, Action, Layer)> =
            (1..=u16::MAX).map(|p| (format!("p{p}.org:{p}"), Block, User)).collect();
        let s = RuleSet::new(&many, MatcherOptions::default()).unwrap();
        assert!(s.name_allowed("p7.org").allowed);
        assert!(s.name_allowed("x.org").allowed);
        let s = set(&[("*", Block, User), ("x.org:1", Allow, User), ("x.org:2", Block, User)]);
        assert_eq!(s.name_allowed("x.org").rule, "x.org:1");
    }

    #[test]
    fn ip_literal_names() {
        let s = set(&[("203.0.113.0/24", Block, User), ("example.com", Allow, User)]);
        for proto in PROTOS {
            let blocked = |name: &str, addr: Option<&str>| !s.decide(&dst(Some(name), addr, 443, proto)).allowed;
            assert!(blocked("203.0.113.5", None), "the literal is the address");
            assert!(blocked("[::ffff:203.0.113.5]", None));
            assert!(blocked("203.0.113.5", Some("::ffff:203.0.113.5")), "same address");
            assert!(!blocked("198.51.100.1", Some("198.51.100.1")));
            assert!(blocked("198.51.100.1", Some("198.51.100.2")), "a literal that is not the destination");
            assert!(blocked("127.0.0.1", None), "floors apply to literal names");
            assert!(blocked("[::1]", None));
        }
    }

    #[test]
    fn invalid_destination_names_are_blocked() {
        let s = set(&[("*", Allow, Admin)]);
        for name in ["", "a..b", "-x.com", "bad name", "a\u{0}b", "x.com:443", "*.x.com", "1.2.3.4.5", "xn--zz"] {
            for proto in PROTOS {
                let d = s.decide(&dst(Some(name), Some("203.0.113.5"), 443, proto));
                assert!(!d.allowed && d.layer == Floor && d.rule.is_empty(), "{name:?}: {d:?}");
                assert!(d.reason.contains("invalid"), "{d:?}");
            }
        }
    }

    #[test]
    fn decision_is_serializable() {
        fn serializable<T: Serialize>(_: &T) {}
        let d = set(&[]).decide(&dst(Some("example.com"), None, 443, Proto::Tcp));
        serializable(&d);
        serializable(&Layer::Floor);
        serializable(&Proto::Udp);
    }

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
            &xs[self.below(xs.len())]
        }
    }

    const SEEDS: &[&str] = &[
        "github.com",
        "*.example.com:443",
        "10.0.0.0/8:22",
        "[2001:db8::/32]:443",
        "::ffff:10.0.0.0/104",
        "64:ff9b::a01:203",
        "bücher.example",
        "22",
        "*",
        "xn--bcher-kva.example",
        "_sip._tcp.example.com.",
        "1.2.3.4",
        "fe80::1%eth0",
    ];
    const PIECES: &[&str] = &[
        "*",
        ".",
        ":",
        "[",
        "]",
        "/",
        "-",
        "_",
        "0",
        "1",
        "9",
        "65535",
        "65536",
        "255",
        "256",
        "a",
        "Z",
        "xn--",
        "ff",
        "::",
        "ffff",
        "64:ff9b",
        "com",
        "..",
        " ",
        "\t",
        "\u{0}",
        "\u{7f}",
        "ü",
        "。",
        "．",
        "＊",
        "：",
        "\u{200b}",
        "\u{ad}",
        "%",
        "@",
        "128",
        "129",
        "33",
        "10.0.0.0",
        "2001:db8",
        "é",
        "ß",
        "ς",
        "\u{1f600}",
        "\u{fffd}",
        "-1",
        "0x",
        "07",
        "\u{202e}",
        "\u{e000}",
        "\u{10ffff}",
    ];

    fn generate(rng: &mut Rng) -> String {
        match rng.below(4) {
            0 => {
                let bytes: Vec<u8> = (0..rng.below(40)).map(|_| rng.next() as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            1 => (0..rng.below(12)).map(|_| *rng.pick(PIECES)).collect(),
            2 => {
                let mut chars: Vec<char> = rng.pick(SEEDS).chars().collect();
                for _ in 0..=rng.below(3) {
                    let at = rng.below(chars.len() + 1);
                    let piece: Vec<char> = rng.pick(PIECES).chars().collect();
                    match rng.below(3) {
                        0 => chars.splice(at..at, piece).for_each(drop),
                        1 if at < chars.len() => drop(chars.remove(at)),
                        _ if at < chars.len() => chars[at] = piece.first().copied().unwrap_or('x'),
                        _ => {}
                    }
                }
                chars.into_iter().collect()
            }
            _ => {
                let len = rng.below(300);
                (0..len)
                    .map(|_| if rng.below(8) == 0 { '.' } else { char::from(b'a' + (rng.below(26) as u8)) })
                    .collect()
            }
        }
    }

    #[test]
    fn robustness_random_inputs_never_panic() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut parsed = Vec::new();
        let (mut ok_rules, mut ok_names) = (0, 0);
        for i in 0..100_000 {
            let s = generate(&mut rng);
            if let Ok(r) = s.parse::<Rule>() {
                ok_rules += 1;
                let text = r.to_string();
                let again: Rule = text.parse().unwrap_or_else(|e| panic!("{s:?} → {text:?}: {e}"));
                assert_eq!(again, r, "{s:?} → {text:?}");
                assert_eq!(again.to_string(), text);
                if parsed.len() < 64 {
                    parsed.push(text);
                }
            }
            if let Ok(n) = normalize_name(&s) {
                ok_names += 1;
                assert_eq!(normalize_name(&n).as_deref(), Ok(n.as_str()), "{s:?}: normalization is idempotent");
                assert!(n.is_ascii() && n.len() <= 253);
            }
            let addr = match rng.below(4) {
                0 => None,
                1 => Some(IpAddr::V4(Ipv4Addr::from(rng.next() as u32))),
                2 => Some(IpAddr::V6(Ipv6Addr::from(u128::from(rng.next()) << 64 | u128::from(rng.next())))),
                _ => Some(IpAddr::V6(Ipv4Addr::from(rng.next() as u32).to_ipv6_mapped())),
            };
            if i % 10 == 0 {
                let s2 = set(&[]);
                let port = rng.next() as u16;
                let name = if rng.below(2) == 0 { Some(s.as_str()) } else { None };
                let _ = s2.decide(&Destination { ip: addr, name, port, proto: *rng.pick(&PROTOS) });
                let _ = s2.name_allowed(&s);
            }
        }
        assert!(ok_rules > 1_000 && ok_names > 1_000, "the generator reaches valid inputs: {ok_rules} {ok_names}");
        // A policy built from what parsed, decided against random destinations.
        let layers = [Admin, User];
        let rules: Vec<(String, Action, Layer)> = parsed
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), if i % 2 == 0 { Block } else { Allow }, layers[i % 2]))
            .collect();
        let s = RuleSet::new(&rules, MatcherOptions { deny_private: true, ..Default::default() }).unwrap();
        for _ in 0..20_000 {
            let name = generate(&mut rng);
            let addr = Some(IpAddr::V4(Ipv4Addr::from(rng.next() as u32)));
            let _ = s.decide(&Destination { ip: addr, name: Some(&name), port: rng.next() as u16, proto: Proto::Udp });
            let _ = s.name_allowed(&name);
        }
    }
}
