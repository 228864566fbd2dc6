//! Seccomp-BPF deny-list installed in the jailed child just before `exec`: it fails kernel
//! attack surface (io_uring, bpf, keyrings, the mount API, module loading, ...), nested user
//! namespaces, terminal-injection ioctls, socket families outside an allow-list and every
//! foreign syscall ABI (i386, x32) with EPERM.
//! It is a second wall, not the policy: the default action is ALLOW, so it does not decide
//! which files, devices or hosts the agent may reach; namespaces and Landlock do that.

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// What the caller may relax in the filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeccompOptions {
    /// The jailed process may create user namespaces (`unshare`/`clone` with
    /// `CLONE_NEWUSER`); what the capabilities it holds in them would open besides stays
    /// closed (`NESTED_NETLINK_PROTOCOLS`, `NESTED_DENIED_SOCKOPTS`, no raw or packet inet
    /// sockets).
    pub allow_nested_userns: bool,
    /// With `allow_nested_userns`: `NESTED_SANDBOX_SYSCALLS` too, which a nested sandbox
    /// (bubblewrap) needs and which work only inside a nested user namespace. Only where a
    /// nested sandbox can mount at all: not under Landlock, which refuses every mount.
    pub nested_mounts: bool,
    /// AF_INET/AF_INET6 sockets only as TCP (stream, protocol 0 or `IPPROTO_TCP`), UDP and
    /// ICMP (datagram, protocol 0, `IPPROTO_UDP`, `IPPROTO_ICMP`, `IPPROTO_ICMPV6`): where
    /// Landlock's TCP port rules are the network boundary, MPTCP (262), SCTP and raw sockets
    /// would walk around them.
    pub tcp_udp_icmp_only: bool,
    /// Refuse `socket(AF_UNIX)` (`socketpair` stays allowed): without a mount namespace,
    /// every pathname unix socket of the host (munge, D-Bus, docker.sock, `/run/user/UID`)
    /// could be connected to, and neither Landlock (before ABI 9) nor seccomp sees the path.
    pub deny_unix_sockets: bool,
    /// The jail shares the host's PID namespace (Landlock backend): calls that act on another
    /// process by pid with only a same-user check, which Landlock does not scope, act on the
    /// caller only: `prlimit64` (an `RLIMIT_CPU` of 1 s kills a process that used more;
    /// descriptor limits of 0 silence the chaperon's audit log), `setpriority`,
    /// `sched_setscheduler`/`sched_setparam`/`sched_setattr`, `ioprio_set`. Refused with EPERM
    /// for any other target, the jail's own processes included (`renice -p PID`).
    pub own_process_only: bool,
}

/// The socket families `socket()` may create, with why the jail needs each; every other
/// family fails with EPERM. `socketpair()` is allowed for AF_UNIX only.
pub const ALLOWED_SOCKET_FAMILIES: &[(libc::c_int, &str, &str)] = &[
    (libc::AF_UNIX, "AF_UNIX", "local IPC: nscd, syslog, D-Bus clients, language servers, multiprocessing"),
    (libc::AF_INET, "AF_INET", "IPv4 TCP, UDP, ping (ICMP datagram) sockets"),
    (libc::AF_INET6, "AF_INET6", "IPv6 TCP, UDP, ping sockets; many programs open it first"),
    (libc::AF_NETLINK, "AF_NETLINK", "glibc's getaddrinfo (AI_ADDRCONFIG) and if_nameindex, ip, ss"),
];

/// The calls of `DENIED_SYSCALLS` a nested sandbox needs to build its root (bubblewrap:
/// propagation, tmpfs, bind and read-only remounts, a new `/proc` and `devpts`, `pivot_root`,
/// detaching the old root), allowed with `allow_nested_userns` and `nested_mounts`. Each
/// needs `CAP_SYS_ADMIN` over the caller's mount namespace, which no process of the jail has
/// in the jail's namespaces (every capability dropped, the bounding set empty,
/// `no_new_privs`): only inside a user namespace it made itself, over a mount namespace of its
/// own, where the kernel has locked every mount inherited from the jail (`MNT_LOCKED`: none
/// can be unmounted, moved or remounted writable, suid, dev or exec, and a bind without its
/// submounts is refused), so what the jail hides or makes read-only stays so. The new mount
/// API (`fsopen`, `fsconfig`, `fsmount`, `fspick`, `open_tree`, `move_mount`,
/// `mount_setattr`), `chroot` and `setns` stay denied: bubblewrap does not use them, and
/// `fsconfig` was the way into CVE-2022-0185.
pub const NESTED_SANDBOX_SYSCALLS: &[&str] = &["mount", "umount2", "pivot_root"];

/// With `allow_nested_userns`, the only netlink protocols `socket(AF_NETLINK)` may use. In a
/// network namespace of its own a nested user namespace holds `CAP_NET_ADMIN`, which opens
/// every configuration interface of that namespace: nftables and the other netfilter
/// subsystems (NETLINK_NETFILTER), IPsec (NETLINK_XFRM), the generic-netlink families
/// (wireguard, MPTCP, TIPC bearers, ...), a history of privilege escalations. Kept: what
/// programs use without privileges, and bubblewrap to bring up its loopback.
pub const NESTED_NETLINK_PROTOCOLS: &[(libc::c_int, &str, &str)] = &[
    (libc::NETLINK_ROUTE, "NETLINK_ROUTE", "addresses, links, routes: getaddrinfo, ip, bubblewrap's loopback"),
    (libc::NETLINK_SOCK_DIAG, "NETLINK_SOCK_DIAG", "socket lists: ss"),
];

/// With `allow_nested_userns`: `setsockopt`/`getsockopt` options (level, first, last, what)
/// that configure netfilter or IPsec on any inet socket (a UDP socket reaches iptables'
/// `IPT_SO_SET_REPLACE`, the way into CVE-2021-22555), given `CAP_NET_ADMIN` over a network
/// namespace of the caller's own. None is an option of the IP layer itself.
pub const NESTED_DENIED_SOCKOPTS: &[(libc::c_int, libc::c_int, libc::c_int, &str)] = &[
    (libc::SOL_IP, 16, 17, "IP_IPSEC_POLICY, IP_XFRM_POLICY: per-socket IPsec policy"),
    (libc::SOL_IP, 64, 131, "iptables, arptables, ebtables (IPT_SO_*, ARPT_SO_*, EBT_SO_*, SO_ORIGINAL_DST)"),
    (libc::SOL_IP, 1152, 1167, "IPVS (IP_VS_SO_*)"),
    (libc::SOL_IPV6, 34, 35, "IPV6_IPSEC_POLICY, IPV6_XFRM_POLICY: per-socket IPsec policy"),
    (libc::SOL_IPV6, 64, 65, "ip6tables (IP6T_SO_SET_REPLACE, IP6T_SO_SET_ADD_COUNTERS, IP6T_SO_GET_*)"),
    (libc::SOL_IPV6, 68, 69, "ip6tables (IP6T_SO_GET_REVISION_MATCH, IP6T_SO_GET_REVISION_TARGET)"),
    (libc::SOL_IPV6, 80, 80, "ip6tables (IP6T_SO_ORIGINAL_DST)"),
];

/// The protocols an AF_INET/AF_INET6 socket may use with `tcp_udp_icmp_only`, by type.
const INET_STREAM_PROTOCOLS: [libc::c_int; 2] = [0, libc::IPPROTO_TCP];
const INET_DGRAM_PROTOCOLS: [libc::c_int; 4] = [0, libc::IPPROTO_UDP, libc::IPPROTO_ICMP, libc::IPPROTO_ICMPV6];

/// The table the filter, docs and tests all read: (syscall name, reason).
///
/// Every entry fails with EPERM. A name libc has no `SYS_` constant for on the target is
/// skipped (see `syscall_number`); on x86_64 every entry resolves.
pub const DENIED_SYSCALLS: &[(&str, &str)] = &[
    ("io_uring_setup", "io_uring is a large kernel attack surface and bypasses seccomp for the ops it runs"),
    ("io_uring_enter", "io_uring is a large kernel attack surface and bypasses seccomp for the ops it runs"),
    ("io_uring_register", "io_uring is a large kernel attack surface and bypasses seccomp for the ops it runs"),
    ("userfaultfd", "stalls kernel page faults at will, a classic race-exploitation primitive"),
    ("kexec_load", "replaces the running kernel"),
    ("kexec_file_load", "replaces the running kernel"),
    ("bpf", "loads programs into the kernel; large attack surface"),
    ("perf_event_open", "kernel and hardware profiling: information leaks and a history of exploits"),
    ("keyctl", "kernel keyrings are not namespaced: the agent could read or plant the user's keys"),
    ("add_key", "kernel keyrings are not namespaced: the agent could read or plant the user's keys"),
    ("request_key", "kernel keyrings are not namespaced and can invoke upcalls to host helpers"),
    ("mount", "the jail's mount table is fixed by the supervisor; remounting could undo it"),
    ("umount2", "unmounting could expose what the jail's mounts hide"),
    ("open_tree", "new mount API: could clone or detach mounts of the jail"),
    ("move_mount", "new mount API: could rearrange the jail's mounts"),
    ("fsopen", "new mount API: creates filesystem contexts"),
    ("fsconfig", "new mount API: configures filesystem contexts"),
    ("fsmount", "new mount API: creates mounts"),
    ("fspick", "new mount API: reconfigures existing mounts"),
    ("mount_setattr", "could clear read-only or nosuid flags of the jail's mounts"),
    ("pivot_root", "changes the root filesystem of the jail"),
    ("chroot", "changes the root directory; a classic escape building block"),
    ("swapon", "host administration: enables swap"),
    ("swapoff", "host administration: disables swap"),
    ("reboot", "host administration: reboots or halts the machine"),
    ("init_module", "loads kernel modules"),
    ("finit_module", "loads kernel modules"),
    ("delete_module", "unloads kernel modules"),
    ("acct", "host administration: process accounting"),
    ("quotactl", "host administration: disk quotas"),
    ("quotactl_fd", "host administration: disk quotas"),
    ("syslog", "reads the kernel log, which leaks kernel addresses and host activity"),
    ("setns", "joins other namespaces, which could leave the jail's"),
    ("open_by_handle_at", "opens files by handle, bypassing path-based confinement (the Shocker escape)"),
    ("name_to_handle_at", "produces file handles for open_by_handle_at and leaks inode identities"),
    ("lookup_dcookie", "obsolete profiling interface that reveals paths"),
];

/// Errors from building or installing the filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// The filter only knows x86_64 and aarch64.
    #[error("the seccomp filter does not support the {0} architecture (only x86_64 and aarch64)")]
    UnsupportedArch(&'static str),
    /// seccompiler refused the rules.
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(seccompiler::BackendError),
    /// The program does not fit in one classic BPF program.
    #[error("the seccomp program has {len} instructions; the kernel accepts at most {max}")]
    TooLong { len: usize, max: usize },
    /// An empty program would be refused by the kernel anyway.
    #[error("refusing to install an empty seccomp program")]
    EmptyProgram,
    /// `prctl(PR_SET_NO_NEW_PRIVS)` failed.
    #[error("prctl(PR_SET_NO_NEW_PRIVS) failed: {0}")]
    NoNewPrivs(io::Error),
    /// The `seccomp(SECCOMP_SET_MODE_FILTER)` syscall failed.
    #[error("seccomp(SECCOMP_SET_MODE_FILTER) failed: {0}")]
    Install(io::Error),
}

/// Kernel limit on the length of one classic BPF program (`BPF_MAXINSNS`).
const MAX_INSNS: usize = libc::BPF_MAXINSNS as usize;

// Classic BPF opcodes, from libc's <linux/bpf_common.h> values (u32 there, u16 in sock_filter).
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;

// Offsets of `struct seccomp_data` fields that the prologue loads.
const DATA_NR: u32 = std::mem::offset_of!(libc::seccomp_data, nr) as u32;
const DATA_ARCH: u32 = std::mem::offset_of!(libc::seccomp_data, arch) as u32;

const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA);
const RET_ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | (libc::ENOSYS as u32 & libc::SECCOMP_RET_DATA);

/// What the prologue needs to know about the native syscall ABI.
struct NativeArch {
    /// `AUDIT_ARCH_*` of the native ABI; libc does not export these, values from <linux/audit.h>.
    audit_arch: u32,
    /// `__X32_SYSCALL_BIT` where the native arch has an x32-style ABI sharing its AUDIT_ARCH.
    x32_bit: Option<u32>,
    clone3: u32,
    target: TargetArch,
}

#[cfg(all(target_arch = "x86_64", target_pointer_width = "64"))]
const NATIVE: Option<NativeArch> = Some(NativeArch {
    // EM_X86_64 (62) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    audit_arch: 0xC000_003E,
    x32_bit: Some(0x4000_0000),
    clone3: libc::SYS_clone3 as u32,
    target: TargetArch::x86_64,
});

#[cfg(target_arch = "aarch64")]
const NATIVE: Option<NativeArch> = Some(NativeArch {
    // EM_AARCH64 (183) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    audit_arch: 0xC000_00B7,
    x32_bit: None,
    clone3: libc::SYS_clone3 as u32,
    target: TargetArch::aarch64,
});

#[cfg(not(any(all(target_arch = "x86_64", target_pointer_width = "64"), target_arch = "aarch64")))]
const NATIVE: Option<NativeArch> = None;

/// Syscall number of a `DENIED_SYSCALLS` name on the target, or `None` when libc has no
/// `SYS_` constant for it there.
fn syscall_number(name: &str) -> Option<i64> {
    #[cfg(any(all(target_arch = "x86_64", target_pointer_width = "64"), target_arch = "aarch64"))]
    {
        let nr: libc::c_long = match name {
            "io_uring_setup" => libc::SYS_io_uring_setup,
            "io_uring_enter" => libc::SYS_io_uring_enter,
            "io_uring_register" => libc::SYS_io_uring_register,
            "userfaultfd" => libc::SYS_userfaultfd,
            "kexec_load" => libc::SYS_kexec_load,
            // libc's musl aarch64 bindings lack this constant.
            #[cfg(not(all(target_arch = "aarch64", target_env = "musl")))]
            "kexec_file_load" => libc::SYS_kexec_file_load,
            "bpf" => libc::SYS_bpf,
            "perf_event_open" => libc::SYS_perf_event_open,
            "keyctl" => libc::SYS_keyctl,
            "add_key" => libc::SYS_add_key,
            "request_key" => libc::SYS_request_key,
            "mount" => libc::SYS_mount,
            "umount2" => libc::SYS_umount2,
            "open_tree" => libc::SYS_open_tree,
            "move_mount" => libc::SYS_move_mount,
            "fsopen" => libc::SYS_fsopen,
            "fsconfig" => libc::SYS_fsconfig,
            "fsmount" => libc::SYS_fsmount,
            "fspick" => libc::SYS_fspick,
            "mount_setattr" => libc::SYS_mount_setattr,
            "pivot_root" => libc::SYS_pivot_root,
            "chroot" => libc::SYS_chroot,
            "swapon" => libc::SYS_swapon,
            "swapoff" => libc::SYS_swapoff,
            "reboot" => libc::SYS_reboot,
            "init_module" => libc::SYS_init_module,
            "finit_module" => libc::SYS_finit_module,
            "delete_module" => libc::SYS_delete_module,
            "acct" => libc::SYS_acct,
            "quotactl" => libc::SYS_quotactl,
            "quotactl_fd" => libc::SYS_quotactl_fd,
            "syslog" => libc::SYS_syslog,
            "setns" => libc::SYS_setns,
            "open_by_handle_at" => libc::SYS_open_by_handle_at,
            "name_to_handle_at" => libc::SYS_name_to_handle_at,
            "lookup_dcookie" => libc::SYS_lookup_dcookie,
            _ => return None,
        };
        Some(sys_nr(nr))
    }
    #[cfg(not(any(all(target_arch = "x86_64", target_pointer_width = "64"), target_arch = "aarch64")))]
    {
        let _ = name;
        None
    }
}

/// libc's `SYS_*` constants are `c_long`, seccompiler keys rules by `i64`. They are the same
/// type on every supported target; `From` keeps this honest if that ever changes.
#[allow(clippy::useless_conversion)]
fn sys_nr(nr: libc::c_long) -> i64 {
    i64::from(nr)
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Hand-written start of the program, run before seccompiler's part:
///
/// 1. a syscall from a foreign ABI (`int $0x80` on x86_64 reports AUDIT_ARCH_I386, AArch32 on
///    aarch64 reports AUDIT_ARCH_ARM) gets EPERM. seccompiler's own arch check kills the
///    process instead; ours comes first, so theirs always passes;
/// 2. on x86_64, an x32 syscall number (nr >= `__X32_SYSCALL_BIT`) gets EPERM. x32 shares
///    AUDIT_ARCH_X86_64, so only the number tells it apart. nr == -1 is let through: tracers
///    use it to skip a syscall and the kernel answers ENOSYS without running anything, while
///    an EPERM here would overwrite the tracer's return value (libseccomp does the same);
/// 3. `clone3` gets ENOSYS: its flags live in a user-memory `struct clone_args` that seccomp
///    cannot read, so CLONE_NEWUSER could not be checked. glibc treats ENOSYS as "old kernel"
///    and falls back to `clone`, whose flags are a register the rules below do check.
///
/// Classic BPF jumps are relative to the next instruction, so seccompiler's program, appended
/// unchanged, keeps working; the prologue itself only jumps within itself or to its end.
fn prologue(native: &NativeArch) -> Vec<sock_filter> {
    let mut p = vec![
        stmt(LD_W_ABS, DATA_ARCH),
        jump(JEQ_K, native.audit_arch, 1, 0),
        stmt(RET_K, RET_EPERM),
        stmt(LD_W_ABS, DATA_NR),
    ];
    if let Some(bit) = native.x32_bit {
        p.extend([jump(JGE_K, bit, 0, 2), jump(JEQ_K, u32::MAX, 1, 0), stmt(RET_K, RET_EPERM)]);
    }
    p.extend([jump(JEQ_K, native.clone3, 0, 1), stmt(RET_K, RET_ENOSYS)]);
    p
}

/// A pseudo-instruction of the fast-allow tree, with jumps to labels resolved later.
enum TreeOp {
    /// `nr >= k` goes to the label, else falls through.
    Jge(u32, usize),
    /// `nr == k` goes to the rule body (the end of the tree), else falls through.
    JeqMatch(u32),
    /// Falls through to a shared `return ALLOW`.
    Allow,
    Label(usize),
}

fn tree(set: &[u32], ops: &mut Vec<TreeOp>, labels: &mut usize) {
    if set.len() <= 4 {
        ops.extend(set.iter().map(|nr| TreeOp::JeqMatch(*nr)));
        ops.push(TreeOp::Allow);
        return;
    }
    let mid = set.len() / 2;
    let right = *labels;
    *labels += 1;
    ops.push(TreeOp::Jge(set[mid], right));
    tree(&set[..mid], ops, labels);
    ops.push(TreeOp::Label(right));
    tree(&set[mid..], ops, labels);
}

/// Lets every syscall without a rule through after a binary search (about log2(n) compares)
/// instead of seccompiler's linear walk over every rule: cheaper for each syscall, and above
/// all for the kernel, which runs the filter for every syscall number when it is installed to
/// build its action cache (that took ~150 us of a 4 ms start before). Numbers with a rule
/// fall through to seccompiler's body, which decides as before. `None` if a jump would not
/// fit classic BPF's 8-bit offsets (then the body alone decides, as it always could).
fn fast_allow(rule_nrs: &[u32]) -> Option<Vec<sock_filter>> {
    let mut set: Vec<u32> = rule_nrs.to_vec();
    set.sort_unstable();
    set.dedup();
    let (mut ops, mut labels) = (vec![], 0);
    tree(&set, &mut ops, &mut labels);
    // Layout: the tree's instructions, then one `ret ALLOW`; "match" means the instruction
    // after that, i.e. the first of seccompiler's body. Labels take no room.
    let mut pos = vec![0usize; labels];
    let mut n = 0;
    for op in &ops {
        match op {
            TreeOp::Label(l) => pos[*l] = n,
            _ => n += 1,
        }
    }
    let ret_allow = n;
    let matched = n + 1;
    let rel = |from: usize, to: usize| u8::try_from(to.checked_sub(from + 1)?).ok();
    let mut out = Vec::with_capacity(n + 1);
    for op in &ops {
        let here = out.len();
        match op {
            TreeOp::Label(_) => continue,
            TreeOp::Jge(k, l) => out.push(jump(JGE_K, *k, rel(here, pos[*l])?, 0)),
            TreeOp::JeqMatch(k) => out.push(jump(JEQ_K, *k, rel(here, matched)?, 0)),
            TreeOp::Allow => out.push(stmt(JA, u32::try_from(ret_allow.checked_sub(here + 1)?).ok()?)),
        }
    }
    out.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
    Some(out)
}

fn cond(arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(arg, len, op, value).map_err(SeccompError::Compile)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(conditions).map_err(SeccompError::Compile)
}

/// The `ioctl` request, as the kernel sees it: `unsigned int`, i.e. the low 32 bits.
const fn ioctl_request(request: libc::Ioctl) -> u64 {
    request as u32 as u64
}

/// `socket()` and `socketpair()` arguments are `int`s: the kernel uses the low 32 bits only,
/// so every compare is a Dword (like `ioctl`'s request).
fn int(v: libc::c_int) -> u64 {
    u64::from(v as u32)
}

/// Deny rules for `socket()`: any family outside the allow-list and, with
/// `tcp_udp_icmp_only`, any AF_INET/AF_INET6 type or protocol but TCP, UDP and ICMP.
fn socket_rules(opts: &SeccompOptions) -> Result<Vec<SeccompRule>, SeccompError> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let families =
        ALLOWED_SOCKET_FAMILIES.iter().map(|(f, _, _)| *f).filter(|f| !(opts.deny_unix_sockets && *f == libc::AF_UNIX));
    let mut out = vec![rule(families.map(|f| cond(0, Dword, Ne, int(f))).collect::<Result<_, _>>()?)?];
    if opts.allow_nested_userns {
        out.extend(nested_socket_rules()?);
    }
    if !opts.tcp_udp_icmp_only {
        return Ok(out);
    }
    // The type argument is the type ORed with at most SOCK_NONBLOCK and SOCK_CLOEXEC (the
    // kernel refuses other bits with EINVAL): the four spellings of each allowed type.
    let spellings = |t: libc::c_int| {
        [0, libc::SOCK_NONBLOCK, libc::SOCK_CLOEXEC, libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC].map(|f| int(t | f))
    };
    for family in [libc::AF_INET, libc::AF_INET6] {
        let is_family = || cond(0, Dword, Eq, int(family));
        let mut other_type = vec![is_family()?];
        for t in spellings(libc::SOCK_STREAM).into_iter().chain(spellings(libc::SOCK_DGRAM)) {
            other_type.push(cond(1, Dword, Ne, t)?);
        }
        out.push(rule(other_type)?);
        for (ty, protocols) in
            [(libc::SOCK_STREAM, &INET_STREAM_PROTOCOLS[..]), (libc::SOCK_DGRAM, &INET_DGRAM_PROTOCOLS[..])]
        {
            let mut c = vec![is_family()?, cond(1, Dword, MaskedEq(0xf), int(ty))?];
            for p in protocols {
                c.push(cond(2, Dword, Ne, int(*p))?);
            }
            out.push(rule(c)?);
        }
    }
    Ok(out)
}

/// `SOCK_PACKET` (10): libc marks it deprecated (AF_PACKET replaced it), but the kernel still
/// makes a packet socket of `socket(AF_INET, SOCK_PACKET, ...)`.
const SOCK_PACKET: libc::c_int = 10;

/// `allow_nested_userns`: the sockets through which `CAP_NET_ADMIN` or `CAP_NET_RAW` over a
/// network namespace of a nested user namespace would reach kernel code the jail keeps closed:
/// netlink protocols outside `NESTED_NETLINK_PROTOCOLS`, and raw and packet inet sockets (raw
/// sockets also carry legacy iptables, ebtables and multicast routing). The jail itself never
/// holds these capabilities, so outside a nested namespace nothing that worked is refused.
fn nested_socket_rules() -> Result<Vec<SeccompRule>, SeccompError> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let mut netlink = vec![cond(0, Dword, Eq, int(libc::AF_NETLINK))?];
    for (p, _, _) in NESTED_NETLINK_PROTOCOLS {
        netlink.push(cond(2, Dword, Ne, int(*p))?);
    }
    let mut out = vec![rule(netlink)?];
    for family in [libc::AF_INET, libc::AF_INET6] {
        for ty in [libc::SOCK_RAW, SOCK_PACKET] {
            out.push(rule(vec![cond(0, Dword, Eq, int(family))?, cond(1, Dword, MaskedEq(0xf), int(ty))?])?);
        }
    }
    Ok(out)
}

/// `allow_nested_userns`: `NESTED_DENIED_SOCKOPTS` for `setsockopt` and `getsockopt`
/// (`fd, level, optname, ...`; level and optname are `int`s).
fn nested_sockopt_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), SeccompError> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::{Eq, Ge, Le};
    for nr in [libc::SYS_setsockopt, libc::SYS_getsockopt] {
        let mut alts = vec![];
        for (level, first, last, _) in NESTED_DENIED_SOCKOPTS {
            alts.push(rule(vec![
                cond(1, Dword, Eq, int(*level))?,
                cond(2, Dword, Ge, int(*first))?,
                cond(2, Dword, Le, int(*last))?,
            ])?);
        }
        rules.insert(sys_nr(nr), alts);
    }
    Ok(())
}

/// `own_process_only`: the calls that take a pid act on the caller alone (pid or who 0).
fn own_process_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), SeccompError> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::Ne;
    for nr in [libc::SYS_prlimit64, libc::SYS_sched_setscheduler, libc::SYS_sched_setparam, libc::SYS_sched_setattr] {
        rules.insert(sys_nr(nr), vec![rule(vec![cond(0, Dword, Ne, 0)?])?]);
    }
    // setpriority(which, who, prio) and ioprio_set(which, who, ioprio): only "this process"
    // (PRIO_PROCESS / IOPRIO_WHO_PROCESS, both 1 for ioprio and 0 for setpriority, with who 0).
    let prio_process = int(libc::PRIO_PROCESS as libc::c_int);
    rules.insert(
        sys_nr(libc::SYS_setpriority),
        vec![rule(vec![cond(0, Dword, Ne, prio_process)?])?, rule(vec![cond(1, Dword, Ne, 0)?])?],
    );
    const IOPRIO_WHO_PROCESS: u64 = 1;
    rules.insert(
        sys_nr(libc::SYS_ioprio_set),
        vec![rule(vec![cond(0, Dword, Ne, IOPRIO_WHO_PROCESS)?])?, rule(vec![cond(1, Dword, Ne, 0)?])?],
    );
    Ok(())
}

/// Rules for seccompiler; every match fails with EPERM.
fn rules(opts: &SeccompOptions) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompError> {
    let relaxed =
        |name: &str| opts.allow_nested_userns && opts.nested_mounts && NESTED_SANDBOX_SYSCALLS.contains(&name);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED_SYSCALLS
        .iter()
        .filter(|(name, _)| !relaxed(name))
        .filter_map(|(name, _)| syscall_number(name))
        .map(|nr| (nr, Vec::new()))
        .collect();

    if opts.allow_nested_userns {
        nested_sockopt_rules(&mut rules)?;
    } else {
        // Flags are arg0 of both unshare and clone (x86_64 and aarch64), an unsigned long: the
        // whole 64-bit argument is masked.
        let newuser = u64::from(libc::CLONE_NEWUSER as u32);
        for nr in [libc::SYS_unshare, libc::SYS_clone] {
            let newuser_set = cond(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(newuser), newuser)?;
            rules.insert(sys_nr(nr), vec![rule(vec![newuser_set])?]);
        }
    }

    // The kernel declares ioctl's request as `unsigned int` and drops the high 32 bits of the
    // register, so ioctl(fd, TIOCSTI | 1 << 32) still runs TIOCSTI. A Qword compare would let
    // that through: compare only the low 32 bits (Dword).
    let mut ioctl = Vec::new();
    for request in [libc::TIOCSTI, libc::TIOCLINUX] {
        ioctl.push(rule(vec![cond(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, ioctl_request(request))?])?);
    }
    rules.insert(sys_nr(libc::SYS_ioctl), ioctl);

    // personality(2): only the query (0xffffffff) and plain PER_LINUX. Any other persona
    // turns off ASLR (ADDR_NO_RANDOMIZE) or makes every readable mapping executable
    // (READ_IMPLIES_EXEC) for what the jail runs next. The argument is an `unsigned int`.
    let persona = |v: u64| cond(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v);
    rules.insert(sys_nr(libc::SYS_personality), vec![rule(vec![persona(0xffff_ffff)?, persona(0)?])?]);

    // Sockets: an allow-list of families (AF_VSOCK, AF_PACKET, AF_BLUETOOTH, AF_ALG, ... are
    // not network-namespaced, bypass the supervisor or are rarely needed attack surface).
    rules.insert(sys_nr(libc::SYS_socket), socket_rules(opts)?);
    let not_unix = cond(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, int(libc::AF_UNIX))?;
    let mut pair = vec![rule(vec![not_unix])?];
    if opts.deny_unix_sockets {
        // A datagram socket of a pair can still sendto() or connect() to any pathname socket
        // (Landlock below ABI 9 does not check the path): only stream and seqpacket pairs,
        // which are connected to each other for good, stay. An allow-list of the type: the
        // kernel makes SOCK_RAW a datagram socket in AF_UNIX.
        for ty in (0..=0xf).filter(|t| ![libc::SOCK_STREAM, libc::SOCK_SEQPACKET].contains(t)) {
            let unix = cond(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, int(libc::AF_UNIX))?;
            let other = cond(1, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(0xf), int(ty))?;
            pair.push(rule(vec![unix, other])?);
        }
    }
    rules.insert(sys_nr(libc::SYS_socketpair), pair);
    if opts.own_process_only {
        own_process_rules(&mut rules)?;
    }
    if opts.tcp_udp_icmp_only {
        // TCP Fast Open connects inside sendto/sendmsg without the connect hook Landlock's port
        // rules hang on: MSG_FASTOPEN would reach a refused port (SMTP) anyway.
        let fastopen = u64::from(libc::MSG_FASTOPEN as u32);
        for (nr, flags_arg) in [(libc::SYS_sendto, 3), (libc::SYS_sendmsg, 2), (libc::SYS_sendmmsg, 3)] {
            let set = cond(flags_arg, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(fastopen), fastopen)?;
            rules.insert(sys_nr(nr), vec![rule(vec![set])?]);
        }
    }
    Ok(rules)
}

/// Builds the filter: the arch/x32/clone3 prologue followed by seccompiler's deny-list.
pub fn build_program(opts: &SeccompOptions) -> Result<BpfProgram, SeccompError> {
    let native = NATIVE.as_ref().ok_or(SeccompError::UnsupportedArch(std::env::consts::ARCH))?;
    let rules = rules(opts)?;
    let rule_nrs: Vec<u32> = rules.keys().filter_map(|nr| u32::try_from(*nr).ok()).collect();
    let filter =
        SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), native.target)
            .map_err(SeccompError::Compile)?;
    let body = BpfProgram::try_from(filter).map_err(SeccompError::Compile)?;

    assemble(prologue(native), &rule_nrs, body)
}

/// `head`, then the fast-allow tree over the numbers with rules, then seccompiler's body.
/// The accumulator still holds the syscall number after `head` (the prologue loads it last).
fn assemble(head: Vec<sock_filter>, rule_nrs: &[u32], body: BpfProgram) -> Result<BpfProgram, SeccompError> {
    let mut prog = head;
    if let Some(fast) = fast_allow(rule_nrs) {
        prog.extend(fast);
    }
    prog.extend(body);
    if prog.len() > MAX_INSNS {
        return Err(SeccompError::TooLong { len: prog.len(), max: MAX_INSNS });
    }
    Ok(prog)
}

/// The git guard's filter (`jail::guard`), installed in the command on top of the jail's:
/// every syscall that makes a name (`bind` included) or opens a file for writing goes to the guard, which
/// decides and carries it out itself (see `guard::emulate` for why it cannot just let the
/// syscall continue). `openat2` fails with ENOSYS: its flags are in memory the filter cannot
/// read, and callers fall back to `openat`, which it can.
pub fn build_guard_program() -> Result<BpfProgram, SeccompError> {
    use SeccompCmpArgLen::Dword;
    use SeccompCmpOp::MaskedEq;
    let native = NATIVE.as_ref().ok_or(SeccompError::UnsupportedArch(std::env::consts::ARCH))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in GUARD_ALWAYS {
        rules.insert(sys_nr(*nr), vec![]);
    }
    // open/openat: only with O_CREAT or O_TRUNC, or opened for writing; never O_PATH (which
    // ignores the others and opens nothing for reading or writing).
    let int_flag = |v: libc::c_int| u64::from(v as u32);
    for (nr, flags_arg) in GUARD_OPENS {
        let mut alts = vec![];
        for (mask, value) in [
            (libc::O_ACCMODE, libc::O_WRONLY),
            (libc::O_ACCMODE, libc::O_RDWR),
            (libc::O_ACCMODE, libc::O_ACCMODE),
            (libc::O_CREAT, libc::O_CREAT),
            (libc::O_TRUNC, libc::O_TRUNC),
        ] {
            alts.push(rule(vec![
                cond(*flags_arg, Dword, MaskedEq(int_flag(libc::O_PATH)), 0)?,
                cond(*flags_arg, Dword, MaskedEq(int_flag(mask)), int_flag(value))?,
            ])?);
        }
        rules.insert(sys_nr(*nr), alts);
    }
    // unlinkat removing a directory (AT_REMOVEDIR): the guard keeps a removed git directory's
    // path one (a plain unlink, far more frequent, is not trapped: it cannot free a
    // directory's path).
    let removedir = int_flag(libc::AT_REMOVEDIR);
    rules.insert(sys_nr(libc::SYS_unlinkat), vec![rule(vec![cond(2, Dword, MaskedEq(removedir), removedir)?])?]);
    let rule_nrs: Vec<u32> = rules.keys().filter_map(|nr| u32::try_from(*nr).ok()).collect();
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Trace(GUARD_MARK), native.target)
        .map_err(SeccompError::Compile)?;
    let mut body = BpfProgram::try_from(filter).map_err(SeccompError::Compile)?;
    // seccompiler has no USER_NOTIF action: its Trace return, marked, becomes one.
    for insn in body.iter_mut().filter(|i| i.code == RET_K && i.k == libc::SECCOMP_RET_TRACE | GUARD_MARK) {
        insn.k = libc::SECCOMP_RET_USER_NOTIF;
    }
    let mut head = prologue(native);
    head.extend([jump(JEQ_K, libc::SYS_openat2 as u32, 0, 1), stmt(RET_K, RET_ENOSYS)]);
    assemble(head, &rule_nrs, body)
}

/// The data of the Trace action that marks the guard's matches before they become USER_NOTIF.
const GUARD_MARK: u32 = 0x4a7d;

/// Syscalls that make a name, trapped whatever their arguments (`bind` makes one for a unix
/// socket's path; its address is in memory the filter cannot read).
const GUARD_ALWAYS: &[libc::c_long] = &[
    libc::SYS_bind,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_symlinkat,
    libc::SYS_linkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_mkdir,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_mknod,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_symlink,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_link,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_rename,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_creat,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_rmdir,
    // By path it needs no descriptor opened for writing, which the guard would have seen.
    libc::SYS_truncate,
];

/// Syscalls that open a file, with the index of their flags argument.
const GUARD_OPENS: &[(libc::c_long, u8)] = &[
    (libc::SYS_openat, 2),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_open, 1),
];

/// `struct sock_fprog` over seccompiler's `sock_filter`, which has the kernel's layout.
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const sock_filter,
}

/// Installs `prog` on the calling thread, first setting PR_SET_NO_NEW_PRIVS if it is not set.
///
/// Meant for a forked child just before `exec`: it does not allocate and makes at most three
/// raw syscalls (two `prctl`, one `seccomp`). Filters stack, so calling it twice is harmless.
pub fn install(prog: &BpfProgram) -> Result<(), SeccompError> {
    if prog.is_empty() {
        return Err(SeccompError::EmptyProgram);
    }
    let len = match u16::try_from(prog.len()) {
        Ok(len) if prog.len() <= MAX_INSNS => len,
        _ => return Err(SeccompError::TooLong { len: prog.len(), max: MAX_INSNS }),
    };

    let zero: libc::c_ulong = 0;
    let one: libc::c_ulong = 1;
    // SAFETY: PR_GET_NO_NEW_PRIVS takes no pointers; it only reads a flag of this thread.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, zero, zero, zero, zero) };
    if nnp != 1 {
        // SAFETY: PR_SET_NO_NEW_PRIVS takes no pointers; it only sets a flag of this thread.
        let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero) };
        if rc != 0 {
            return Err(SeccompError::NoNewPrivs(io::Error::last_os_error()));
        }
    }

    let fprog = SockFprog { len, filter: prog.as_ptr() };
    // SAFETY: `fprog` points to `len` initialised instructions in `prog`, which outlives the
    // call; the kernel copies the program before returning and keeps no pointer to it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::c_ulong::from(libc::SECCOMP_SET_MODE_FILTER),
            zero,
            &fprog as *const SockFprog,
        )
    };
    if rc != 0 {
        return Err(SeccompError::Install(io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::ffi::{CString, OsStr};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    const EPERM: i32 = libc::EPERM;

    fn deny_all() -> BpfProgram {
        build_program(&SeccompOptions::default()).unwrap()
    }

    /// The userns backend's filter with `process.nested_userns = true`.
    fn allow_userns() -> BpfProgram {
        build_program(&SeccompOptions { allow_nested_userns: true, nested_mounts: true, ..Default::default() }).unwrap()
    }

    // ---- table ----

    #[test]
    fn table_reasons_names_and_numbers() {
        let mut seen = HashSet::new();
        for (name, reason) in DENIED_SYSCALLS {
            assert!(!reason.trim().is_empty(), "{name} has no reason");
            assert!(seen.insert(*name), "{name} is listed twice");
            #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
            {
                #[cfg(all(target_arch = "aarch64", target_env = "musl"))]
                if *name == "kexec_file_load" {
                    continue;
                }
                assert!(syscall_number(name).is_some(), "{name} has no number");
            }
        }
        let numbers: HashSet<_> = DENIED_SYSCALLS.iter().filter_map(|(n, _)| syscall_number(n)).collect();
        assert_eq!(numbers.len(), seen.len(), "two names share a number");
        assert_eq!(syscall_number("getpid"), None);
        // What a nested sandbox gets back is a part of the table, never something new.
        for name in NESTED_SANDBOX_SYSCALLS {
            assert!(seen.contains(name), "{name} is not a denied call");
        }
        for (_, name, why) in ALLOWED_SOCKET_FAMILIES.iter().chain(NESTED_NETLINK_PROTOCOLS) {
            assert!(!why.trim().is_empty(), "{name} has no reason");
        }
        for (level, first, last, what) in NESTED_DENIED_SOCKOPTS {
            assert!(first <= last && *first >= 0 && !what.trim().is_empty(), "{level} {first}..{last}");
        }
    }

    // ---- program shape ----

    #[test]
    fn program_builds_within_limits_and_starts_with_prologue() {
        for prog in [deny_all(), allow_userns()] {
            assert!(prog.len() < 4096, "{} instructions", prog.len());
            assert!(prog.len() <= MAX_INSNS);
            let native = NATIVE.as_ref().unwrap();
            assert_eq!(prog[..prologue(native).len()], prologue(native)[..]);
            assert_eq!(prog[0], stmt(LD_W_ABS, 4), "first loads seccomp_data.arch");
            assert_eq!(prog[1].code, JEQ_K);
            assert_eq!(prog[1].k, native.audit_arch);
            assert_eq!(prog[2], stmt(RET_K, RET_EPERM));
            assert_eq!(prog[3], stmt(LD_W_ABS, 0), "then loads seccomp_data.nr");
            #[cfg(target_arch = "x86_64")]
            assert_eq!(prog[4], jump(JGE_K, 0x4000_0000, 0, 2));
        }
        assert!(matches!(install(&Vec::new()), Err(SeccompError::EmptyProgram)));
        let huge = vec![stmt(RET_K, libc::SECCOMP_RET_ALLOW); MAX_INSNS + 1];
        assert!(matches!(
            install(&huge),
            Err(SeccompError::TooLong { len, .. }) if len == MAX_INSNS + 1
        ));
    }

    /// Landlock backend: another process (the user's shell, editor, the launcher, the
    /// chaperon: the same uid, the same PID namespace) cannot be given resource limits, a
    /// priority or a scheduler; the caller itself can.
    #[test]
    fn calls_that_take_a_pid_act_only_on_the_caller_in_landlock() {
        let arch = NATIVE.as_ref().unwrap().audit_arch;
        let landlock = build_program(&SeccompOptions { own_process_only: true, ..Default::default() }).unwrap();
        let default = deny_all();
        let nr = |n: libc::c_long| n as i32;
        let cases: [(i32, [u64; 3], bool); 12] = [
            (nr(libc::SYS_prlimit64), [0, 0, 0], true),
            (nr(libc::SYS_prlimit64), [4242, 0, 0], false),
            (nr(libc::SYS_sched_setscheduler), [0, 5, 0], true),
            (nr(libc::SYS_sched_setscheduler), [4242, 5, 0], false),
            (nr(libc::SYS_sched_setparam), [4242, 0, 0], false),
            (nr(libc::SYS_sched_setattr), [4242, 0, 0], false),
            (nr(libc::SYS_setpriority), [libc::PRIO_PROCESS as u64, 0, 19], true),
            (nr(libc::SYS_setpriority), [libc::PRIO_PROCESS as u64, 4242, 19], false),
            (nr(libc::SYS_setpriority), [libc::PRIO_USER as u64, 0, 19], false),
            (nr(libc::SYS_ioprio_set), [1, 0, 0], true),
            (nr(libc::SYS_ioprio_set), [1, 4242, 0], false),
            (nr(libc::SYS_ioprio_set), [3 /* IOPRIO_WHO_USER */, 0, 0], false),
        ];
        for (n, a, own) in cases {
            let args = [a[0], a[1], a[2], 0, 0, 0];
            assert_eq!(run_bpf(&landlock, n, arch, args), if own { ALLOW } else { RET_EPERM }, "{n} {a:?}");
            assert_eq!(run_bpf(&default, n, arch, args), ALLOW, "the userns jail sees no outside pid: {n}");
        }
    }

    /// The fast-allow tree changes speed, never decisions: for every syscall number and a
    /// spread of arguments, the program with it answers exactly as the program without it.
    #[test]
    fn fast_allow_tree_decides_exactly_like_the_plain_filter() {
        for bits in 0..32u8 {
            let nested = bits & 1 != 0;
            let opts = SeccompOptions {
                allow_nested_userns: nested,
                tcp_udp_icmp_only: bits & 2 != 0,
                deny_unix_sockets: bits & 4 != 0,
                own_process_only: bits & 8 != 0,
                nested_mounts: bits & 16 != 0,
            };
            let fast = build_program(&opts).unwrap();
            let native = NATIVE.as_ref().unwrap();
            let filter = SeccompFilter::new(
                rules(&opts).unwrap(),
                SeccompAction::Allow,
                SeccompAction::Errno(libc::EPERM as u32),
                native.target,
            )
            .unwrap();
            let mut plain = prologue(native);
            plain.extend(BpfProgram::try_from(filter).unwrap());
            assert!(fast.len() > plain.len(), "the tree is in the program");
            let argsets = [
                [0u64; 6],
                [libc::CLONE_NEWUSER as u64, ioctl_request(libc::TIOCSTI), 0, 0, 0, 0],
                [u64::MAX; 6],
                [0, ioctl_request(libc::TIOCLINUX) | (1 << 32), 0, 0, 0, 0],
                [0xffff_ffff, 0, 0, 0, 0, 0],
                [0x0040000, 0, 0, 0, 0, 0],
                // socket()/socketpair(): families, types with flags, protocols.
                [AF_VSOCK, SOCK_STREAM, 0, 0, 0, 0],
                [AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, 0, 0, 0],
                [AF_INET, SOCK_STREAM, MPTCP, 0, 0, 0],
                [AF_INET6, SOCK_STREAM | SOCK_NONBLOCK, TCP, 0, 0, 0],
                [AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, ICMP, 0, 0, 0],
                [AF_INET6, SOCK_DGRAM, 136, 0, 0, 0],
                [AF_INET, SOCK_RAW, ICMP, 0, 0, 0],
                [AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0, 0, 0, 0],
                [AF_INET | 1 << 32, SOCK_SEQPACKET, 132, 0, 0, 0],
                // nested: netlink protocols, packet sockets, netfilter socket options.
                [AF_NETLINK, SOCK_RAW, 12, 0, 0, 0],
                [AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, 4, 0, 0, 0],
                [AF_INET6, 10, 0, 0, 0, 0],
                [3, SOL_IP, 64, 0, 0, 0],
                [3, SOL_IP, 131 | 1 << 32, 0, 0, 0],
                [3, SOL_IPV6, 67, 0, 0, 0],
                [3, SOL_IPV6, 80, 0, 0, 0],
                [3, SOL_IP, 1160, 0, 0, 0],
            ];
            for nr in -1..1100 {
                for args in argsets {
                    assert_eq!(
                        run_bpf(&fast, nr, native.audit_arch, args),
                        run_bpf(&plain, nr, native.audit_arch, args),
                        "nr {nr} args {args:?} nested {nested}"
                    );
                }
            }
            assert_eq!(run_bpf(&fast, libc::SYS_getpid as i32, native.audit_arch, [0; 6]), libc::SECCOMP_RET_ALLOW);
        }
    }

    /// A classic-BPF interpreter for the opcodes seccompiler and the prologue emit, so the
    /// program's decisions can be checked for any seccomp_data, foreign arches included.
    fn run_bpf(prog: &[sock_filter], nr: i32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        let (ja, jgt) = ((libc::BPF_JMP | libc::BPF_JA) as u16, (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16);
        let and_k = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let ins = &prog[pc];
            pc += 1;
            let cond = |taken: bool| usize::from(if taken { ins.jt } else { ins.jf });
            match ins.code {
                c if c == LD_W_ABS => {
                    let k = ins.k as usize;
                    acc = u32::from_ne_bytes(data[k..k + 4].try_into().unwrap());
                }
                c if c == and_k => acc &= ins.k,
                c if c == ja => pc += ins.k as usize,
                c if c == JEQ_K => pc += cond(acc == ins.k),
                c if c == JGE_K => pc += cond(acc >= ins.k),
                c if c == jgt => pc += cond(acc > ins.k),
                c if c == RET_K => return ins.k,
                c => panic!("unexpected opcode {c:#x} at {}", pc - 1),
            }
            assert!(pc < prog.len(), "jump past the end of the program");
        }
    }

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

    const fn u(v: libc::c_int) -> u64 {
        v as u32 as u64
    }
    const AF_UNIX: u64 = u(libc::AF_UNIX);
    const AF_INET: u64 = u(libc::AF_INET);
    const AF_INET6: u64 = u(libc::AF_INET6);
    const AF_NETLINK: u64 = u(libc::AF_NETLINK);
    const AF_VSOCK: u64 = u(libc::AF_VSOCK);
    const SOCK_STREAM: u64 = u(libc::SOCK_STREAM);
    const SOCK_DGRAM: u64 = u(libc::SOCK_DGRAM);
    const SOCK_RAW: u64 = u(libc::SOCK_RAW);
    const SOCK_SEQPACKET: u64 = u(libc::SOCK_SEQPACKET);
    const SOCK_NONBLOCK: u64 = u(libc::SOCK_NONBLOCK);
    const SOCK_CLOEXEC: u64 = u(libc::SOCK_CLOEXEC);
    const TCP: u64 = u(libc::IPPROTO_TCP);
    const UDP: u64 = u(libc::IPPROTO_UDP);
    const ICMP: u64 = u(libc::IPPROTO_ICMP);
    const ICMPV6: u64 = u(libc::IPPROTO_ICMPV6);
    const MPTCP: u64 = u(libc::IPPROTO_MPTCP);
    const SCTP: u64 = u(libc::IPPROTO_SCTP);
    const SOL_IP: u64 = u(libc::SOL_IP);
    const SOL_IPV6: u64 = u(libc::SOL_IPV6);

    /// Every backend: socket families by allow-list; with `tcp_udp_icmp_only` (Landlock)
    /// only TCP, UDP and ICMP for AF_INET/AF_INET6; with `deny_unix_sockets` no
    /// `socket(AF_UNIX)`, while `socketpair(AF_UNIX)` always passes.
    #[test]
    fn socket_families_by_allow_list_and_inet_protocols_in_landlock() {
        let arch = NATIVE.as_ref().unwrap().audit_arch;
        let (socket, socketpair) = (libc::SYS_socket as i32, libc::SYS_socketpair as i32);
        let default = deny_all();
        let landlock =
            build_program(&SeccompOptions { tcp_udp_icmp_only: true, deny_unix_sockets: true, ..Default::default() })
                .unwrap();
        let run = |p: &BpfProgram, nr: i32, a: [u64; 3]| run_bpf(p, nr, arch, [a[0], a[1], a[2], 0, 0, 0]);
        // Families: allowed everywhere, the rest refused everywhere, also with high bits set.
        for prog in [&default, &landlock] {
            for fam in [AF_INET, AF_INET6, AF_NETLINK] {
                assert_eq!(run(prog, socket, [fam, SOCK_DGRAM | SOCK_CLOEXEC, 0]), ALLOW, "family {fam}");
            }
            for fam in [
                0,
                AF_VSOCK,
                17, /* AF_PACKET */
                31, /* AF_BLUETOOTH */
                38, /* AF_ALG */
                21, /* AF_RDS */
                44, /* AF_XDP */
                0xffff_ffff,
            ] {
                assert_eq!(run(prog, socket, [fam, SOCK_STREAM, 0]), RET_EPERM, "family {fam}");
            }
            assert_eq!(run(prog, socketpair, [AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0]), ALLOW);
            assert_eq!(run(prog, socketpair, [AF_INET, SOCK_STREAM, 0]), RET_EPERM);
            assert_eq!(run(prog, socketpair, [AF_VSOCK, SOCK_STREAM, 0]), RET_EPERM);
        }
        // Landlock: no datagram pair (it can sendto() any host socket path), no TCP Fast Open
        // (it connects without Landlock's connect hook).
        let (sendto, sendmsg) = (libc::SYS_sendto as i32, libc::SYS_sendmsg as i32);
        assert_eq!(run(&landlock, socketpair, [AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0]), RET_EPERM);
        assert_eq!(run(&landlock, socketpair, [AF_UNIX, SOCK_STREAM, 0]), ALLOW);
        assert_eq!(run(&landlock, socketpair, [AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0]), ALLOW);
        // SOCK_RAW is a datagram socket in AF_UNIX (an attacker's way around the rule above).
        for ty in [SOCK_RAW, 4 /* RDM */, 6, 10, 0, 0xf] {
            assert_eq!(run(&landlock, socketpair, [AF_UNIX, ty, 0]), RET_EPERM, "type {ty:#x}");
        }
        assert_eq!(run(&default, socketpair, [AF_UNIX, SOCK_DGRAM, 0]), ALLOW);
        let fastopen = libc::MSG_FASTOPEN as u32 as u64;
        assert_eq!(run_bpf(&landlock, sendto, arch, [3, 0, 8, fastopen | 0x40, 0, 0]), RET_EPERM);
        assert_eq!(run_bpf(&landlock, sendmsg, arch, [3, 0, fastopen, 0, 0, 0]), RET_EPERM);
        assert_eq!(run_bpf(&landlock, sendto, arch, [3, 0, 8, 0x40, 0, 0]), ALLOW);
        assert_eq!(run_bpf(&default, sendto, arch, [3, 0, 8, fastopen, 0, 0]), ALLOW);
        // The kernel reads `int`s: high bits do not change the family it sees, nor our answer.
        assert_eq!(run(&default, socket, [AF_INET | 1 << 32, SOCK_STREAM, 0]), ALLOW);
        assert_eq!(run(&default, socket, [AF_VSOCK | 1 << 32, SOCK_STREAM, 0]), RET_EPERM);
        // AF_UNIX: the userns jail keeps it, Landlock refuses socket() but not socketpair().
        assert_eq!(run(&default, socket, [AF_UNIX, SOCK_STREAM, 0]), ALLOW);
        assert_eq!(run(&landlock, socket, [AF_UNIX, SOCK_STREAM, 0]), RET_EPERM);
        assert_eq!(run(&landlock, socket, [AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0]), RET_EPERM);
        // Protocols: the userns jail does not look at them (its netns is the boundary).
        for (ty, proto) in [(SOCK_STREAM, MPTCP), (SOCK_STREAM, SCTP), (SOCK_SEQPACKET, SCTP), (SOCK_RAW, ICMP)] {
            assert_eq!(run(&default, socket, [AF_INET, ty, proto]), ALLOW);
        }
        for fam in [AF_INET, AF_INET6] {
            for ty in [SOCK_STREAM, SOCK_STREAM | SOCK_NONBLOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK] {
                for proto in [0, TCP] {
                    assert_eq!(run(&landlock, socket, [fam, ty, proto]), ALLOW, "{fam} {ty:#x} {proto}");
                }
                for proto in [MPTCP, SCTP, UDP, 1 << 8 | TCP] {
                    assert_eq!(run(&landlock, socket, [fam, ty, proto]), RET_EPERM, "{fam} {ty:#x} {proto}");
                }
                assert_eq!(run(&landlock, socket, [fam, ty, TCP | 1 << 32]), ALLOW, "int protocol");
            }
            for ty in [SOCK_DGRAM, SOCK_DGRAM | SOCK_CLOEXEC] {
                for proto in [0, UDP, ICMP, ICMPV6] {
                    assert_eq!(run(&landlock, socket, [fam, ty, proto]), ALLOW, "{fam} {ty:#x} {proto}");
                }
                for proto in [TCP, 136 /* UDP-Lite */, MPTCP] {
                    assert_eq!(run(&landlock, socket, [fam, ty, proto]), RET_EPERM, "{fam} {ty:#x} {proto}");
                }
            }
            for ty in [
                SOCK_RAW,
                SOCK_SEQPACKET,
                4,  /* RDM */
                6,  /* DCCP */
                10, /* PACKET */
                0,
                SOCK_STREAM | 0x100,
            ] {
                assert_eq!(run(&landlock, socket, [fam, ty, 0]), RET_EPERM, "{fam} {ty:#x}");
            }
        }
        // Netlink keeps its raw/dgram types and protocols (NETLINK_ROUTE, SOCK_DIAG).
        assert_eq!(run(&landlock, socket, [AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 4]), ALLOW);
    }

    #[test]
    fn bpf_decisions() {
        let native = NATIVE.as_ref().unwrap();
        let arch = native.audit_arch;
        let nr = |n: libc::c_long| n as i32;
        let prog = deny_all();
        let run = |n: i32, a: [u64; 6]| run_bpf(&prog, n, arch, a);

        assert_eq!(run(nr(libc::SYS_getpid), [0; 6]), ALLOW);
        for (name, _) in DENIED_SYSCALLS {
            if let Some(n) = syscall_number(name) {
                assert_eq!(run(n as i32, [0; 6]), RET_EPERM, "{name}");
            }
        }
        // Foreign arches, whatever the number: i386 (int $0x80), ARM, aarch64/x86_64.
        for foreign in [0x4000_0003, 0x4000_0028, 0xC000_00B7, 0xC000_003E] {
            if foreign != arch {
                for n in [0, 20, 39, 172] {
                    assert_eq!(run_bpf(&prog, n, foreign, [0; 6]), RET_EPERM);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(run(nr(libc::SYS_getpid) | 0x4000_0000, [0; 6]), RET_EPERM);
            assert_eq!(run(0x4000_0000 + 512, [0; 6]), RET_EPERM);
            assert_eq!(run(-1, [0; 6]), ALLOW, "nr -1 (tracer skip) is left alone");
        }
        assert_eq!(run(nr(libc::SYS_clone3), [0; 6]), RET_ENOSYS);

        let newuser = libc::CLONE_NEWUSER as u64;
        let newns = libc::CLONE_NEWNS as u64;
        let sigchld = libc::SIGCHLD as u64;
        for sys in [nr(libc::SYS_unshare), nr(libc::SYS_clone)] {
            assert_eq!(run(sys, [newuser, 0, 0, 0, 0, 0]), RET_EPERM);
            assert_eq!(run(sys, [newuser | newns | sigchld, 0, 0, 0, 0, 0]), RET_EPERM);
            assert_eq!(run(sys, [newuser | 1 << 40, 0, 0, 0, 0, 0]), RET_EPERM);
            assert_eq!(run(sys, [newns | sigchld, 0, 0, 0, 0, 0]), ALLOW);
            assert_eq!(run(sys, [sigchld, 0, 0, 0, 0, 0]), ALLOW);
            let lax = allow_userns();
            assert_eq!(run_bpf(&lax, sys, arch, [newuser, 0, 0, 0, 0, 0]), ALLOW);
        }

        let ioctl = nr(libc::SYS_ioctl);
        for req in [ioctl_request(libc::TIOCSTI), ioctl_request(libc::TIOCLINUX)] {
            assert_eq!(run(ioctl, [0, req, 0, 0, 0, 0]), RET_EPERM);
            assert_eq!(run(ioctl, [0, req | 1 << 32, 0, 0, 0, 0]), RET_EPERM);
            assert_eq!(run(ioctl, [0, req | 0xFFFF_FFFF << 32, 0, 0, 0, 0]), RET_EPERM);
            assert_eq!(run(ioctl, [u64::MAX, req, 0, 0, 0, 0]), RET_EPERM);
        }
        assert_eq!(run(ioctl, [0, ioctl_request(libc::TCGETS), 0, 0, 0, 0]), ALLOW);
        assert_eq!(run(ioctl, [0, 0x5412 + 1, 0, 0, 0, 0]), ALLOW);
    }

    /// With nested user namespaces allowed, a nested sandbox gets back exactly `mount`,
    /// `umount2` and `pivot_root`; every other call of the table stays denied, and so does what
    /// `CAP_NET_ADMIN` and `CAP_NET_RAW` over a network namespace of its own would open: netlink
    /// but route and sock_diag, raw and packet inet sockets, netfilter and IPsec socket options.
    /// Without the key nothing of this changes the default filter's answers.
    #[test]
    fn nested_sandboxes_get_their_mount_calls_and_nothing_netfilter_or_raw() {
        let arch = NATIVE.as_ref().unwrap().audit_arch;
        let (lax, strict) = (allow_userns(), deny_all());
        for (name, _) in DENIED_SYSCALLS {
            let Some(n) = syscall_number(name) else { continue };
            let want = if NESTED_SANDBOX_SYSCALLS.contains(name) { ALLOW } else { RET_EPERM };
            assert_eq!(run_bpf(&lax, n as i32, arch, [u64::MAX; 6]), want, "{name}");
            assert_eq!(run_bpf(&strict, n as i32, arch, [u64::MAX; 6]), RET_EPERM, "{name}");
        }
        assert_eq!(run_bpf(&lax, libc::SYS_clone3 as i32, arch, [0; 6]), RET_ENOSYS);
        // Landlock's filter with the key: user namespaces and the socket rules, no mount calls
        // (Landlock refuses every mount: nothing there would use them).
        let landlock = build_program(&SeccompOptions { allow_nested_userns: true, ..Default::default() }).unwrap();
        for name in NESTED_SANDBOX_SYSCALLS {
            let n = syscall_number(name).unwrap() as i32;
            assert_eq!(run_bpf(&landlock, n, arch, [u64::MAX; 6]), RET_EPERM, "{name} under Landlock");
        }
        let unshare = libc::SYS_unshare as i32;
        assert_eq!(run_bpf(&landlock, unshare, arch, [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]), ALLOW);
        let netfilter = [AF_NETLINK, SOCK_RAW, 12, 0, 0, 0];
        assert_eq!(run_bpf(&landlock, libc::SYS_socket as i32, arch, netfilter), RET_EPERM);
        let socket =
            |p: &BpfProgram, a: [u64; 3]| run_bpf(p, libc::SYS_socket as i32, arch, [a[0], a[1], a[2], 0, 0, 0]);
        for (proto, _, _) in NESTED_NETLINK_PROTOCOLS {
            for ty in [SOCK_RAW, SOCK_DGRAM | SOCK_CLOEXEC] {
                assert_eq!(socket(&lax, [AF_NETLINK, ty, u(*proto)]), ALLOW, "netlink {proto}");
            }
        }
        // NETLINK_XFRM 6, NETLINK_AUDIT 9, NETLINK_NETFILTER 12, NETLINK_KOBJECT_UEVENT 15,
        // NETLINK_GENERIC 16, NETLINK_RDMA 20, NETLINK_CRYPTO 21; and high bits the kernel drops.
        for proto in [6, 9, 12, 15, 16, 20, 21, 12 | 1 << 32, 0xffff_ffff] {
            assert_eq!(socket(&lax, [AF_NETLINK, SOCK_RAW, proto]), RET_EPERM, "netlink {proto:#x}");
            assert_eq!(socket(&strict, [AF_NETLINK, SOCK_RAW, proto]), ALLOW, "netlink {proto:#x} unchanged");
        }
        assert_eq!(socket(&lax, [AF_NETLINK, SOCK_RAW, 1 << 32]), ALLOW, "NETLINK_ROUTE, as an int");
        for fam in [AF_INET, AF_INET6, AF_INET | 1 << 32] {
            for ty in [SOCK_RAW, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 10 /* SOCK_PACKET */, 10 | SOCK_CLOEXEC] {
                assert_eq!(socket(&lax, [fam, ty, ICMP]), RET_EPERM, "{fam:#x} {ty:#x}");
                assert_eq!(socket(&strict, [fam, ty, ICMP]), ALLOW, "{fam:#x} {ty:#x} unchanged");
            }
            for ty in [SOCK_STREAM, SOCK_DGRAM | SOCK_CLOEXEC, SOCK_SEQPACKET] {
                assert_eq!(socket(&lax, [fam, ty, 0]), ALLOW, "{fam:#x} {ty:#x}");
            }
        }
        for nr in [libc::SYS_setsockopt as i32, libc::SYS_getsockopt as i32] {
            let opt = |p: &BpfProgram, level: u64, name: u64| run_bpf(p, nr, arch, [3, level, name, 0, 4, 0]);
            for (level, first, last, what) in NESTED_DENIED_SOCKOPTS {
                for name in [*first, *last, (first + last) / 2] {
                    assert_eq!(opt(&lax, u(*level), u(name)), RET_EPERM, "{what}: {name}");
                    assert_eq!(opt(&lax, u(*level) | 1 << 32, u(name) | 1 << 32), RET_EPERM, "{what}: int args");
                    assert_eq!(opt(&strict, u(*level), u(name)), ALLOW, "{what}: unchanged without the key");
                }
            }
            // Options of the IP layer itself, and the same numbers at other levels, pass.
            for (level, name) in [
                (SOL_IP, 1 /* IP_TOS */),
                (SOL_IP, 15 /* IP_FREEBIND */),
                (SOL_IP, 18 /* IP_PASSSEC */),
                (SOL_IP, 63),
                (SOL_IP, 132),
                (SOL_IPV6, 66 /* IPV6_RECVTCLASS */),
                (SOL_IPV6, 67 /* IPV6_TCLASS */),
                (SOL_IPV6, 26 /* IPV6_V6ONLY */),
                (SOL_IPV6, 70 /* IPV6_AUTOFLOWLABEL */),
                (u(libc::SOL_SOCKET), 64),
                (u(libc::SOL_TCP), 80),
            ] {
                assert_eq!(opt(&lax, level, name), ALLOW, "level {level} option {name}");
            }
        }
    }

    // ---- real behaviour in forked children ----

    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }

    /// Raw syscall: Ok(return value) or Err(errno).
    fn raw(nr: libc::c_long, a: [u64; 4]) -> Result<i64, i32> {
        // SAFETY: test-only raw syscall; callers pass invalid pointers only where the kernel
        // must refuse (or the filter must stop) the call.
        let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3]) };
        if r < 0 {
            Err(errno())
        } else {
            Ok(r)
        }
    }

    /// 0 on success, the errno otherwise: the child's exit code.
    fn code(r: Result<i64, i32>) -> i32 {
        r.map_or_else(|e| e, |_| 0)
    }

    fn wait_exit(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid, "waitpid: {}", io::Error::last_os_error());
        assert!(libc::WIFEXITED(status), "child died: status {status:#x}");
        libc::WEXITSTATUS(status)
    }

    const INSTALL_FAILED: i32 = 200;

    /// Forks; the child installs `prog` (if any), runs `check` (raw syscalls only) and exits
    /// with its result. Returns that exit code.
    fn in_child(prog: Option<&BpfProgram>, check: fn() -> i32) -> i32 {
        // SAFETY: the child of this (multi-threaded) test process only calls `install`, which
        // does not allocate, and raw syscalls, then _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            let rc = match prog.map(install) {
                Some(Err(_)) => INSTALL_FAILED,
                _ => check(),
            };
            // SAFETY: _exit is async-signal-safe and does not return.
            unsafe { libc::_exit(rc) }
        }
        wait_exit(pid)
    }

    /// clone(flags) with no new stack (fork semantics); the new child exits 0 at once.
    fn raw_clone(flags: u64) -> i32 {
        match raw(libc::SYS_clone, [flags, 0, 0, 0]) {
            // SAFETY: we are the freshly cloned child; _exit does not return.
            Ok(0) => unsafe { libc::_exit(0) },
            Ok(pid) => wait_exit(pid as libc::pid_t),
            Err(e) => e,
        }
    }

    fn getpid_check() -> i32 {
        match raw(libc::SYS_getpid, [0; 4]) {
            Ok(pid) if pid > 0 => 0,
            _ => 1,
        }
    }
    fn keyctl_check() -> i32 {
        // keyctl(KEYCTL_GET_KEYRING_ID = 0, KEY_SPEC_THREAD_KEYRING = -1, create = 0)
        code(raw(libc::SYS_keyctl, [0, -1i64 as u64, 0, 0]))
    }
    fn unshare_newuser() -> i32 {
        code(raw(libc::SYS_unshare, [libc::CLONE_NEWUSER as u64, 0, 0, 0]))
    }
    fn unshare_newuts() -> i32 {
        code(raw(libc::SYS_unshare, [libc::CLONE_NEWUTS as u64, 0, 0, 0]))
    }
    fn clone_newuser() -> i32 {
        raw_clone((libc::CLONE_NEWUSER | libc::SIGCHLD) as u64)
    }
    fn clone_plain() -> i32 {
        raw_clone(libc::SIGCHLD as u64)
    }
    fn libc_fork() -> i32 {
        // SAFETY: single-threaded child; the grandchild only calls _exit.
        match unsafe { libc::fork() } {
            // SAFETY: _exit does not return.
            0 => unsafe { libc::_exit(0) },
            pid if pid > 0 => wait_exit(pid),
            _ => errno(),
        }
    }
    /// glibc's posix_spawn tries clone3 first and must fall back to clone on our ENOSYS.
    fn posix_spawn_true() -> i32 {
        let path = c"/bin/true";
        let argv = [path.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
        let envp = [std::ptr::null_mut::<libc::c_char>()];
        let mut pid = 0;
        // SAFETY: valid NUL-terminated path and NULL-terminated argv/envp arrays.
        let r = unsafe {
            libc::posix_spawn(&mut pid, path.as_ptr(), std::ptr::null(), std::ptr::null(), argv.as_ptr(), envp.as_ptr())
        };
        if r != 0 {
            return r;
        }
        wait_exit(pid)
    }
    fn clone3_check() -> i32 {
        code(raw(libc::SYS_clone3, [0, 0, 0, 0]))
    }
    fn io_uring_check() -> i32 {
        code(raw(libc::SYS_io_uring_setup, [0, 0, 0, 0]))
    }
    const TIOCSTI_HIGH: u64 = ioctl_request(libc::TIOCSTI) | 1 << 32;
    const TIOCLINUX_HIGH: u64 = ioctl_request(libc::TIOCLINUX) | 1 << 32;
    const BAD_FD: u64 = 987_654;
    fn open_ptmx() -> Result<i64, i32> {
        let path = c"/dev/ptmx";
        raw(
            libc::SYS_openat,
            [libc::AT_FDCWD as u64, path.as_ptr() as u64, (libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) as u64, 0],
        )
    }
    fn tiocsti_pty() -> i32 {
        let fd = match open_ptmx() {
            Ok(fd) => fd as u64,
            Err(_) => return 255,
        };
        let ch = b"x".as_ptr() as u64;
        code(raw(libc::SYS_ioctl, [fd, TIOCSTI_HIGH, ch, 0]))
    }
    fn tiocgptn_pty() -> i32 {
        let fd = match open_ptmx() {
            Ok(fd) => fd as u64,
            Err(_) => return 255,
        };
        let mut n: libc::c_uint = 0;
        let ptr = &mut n as *mut libc::c_uint as u64;
        code(raw(libc::SYS_ioctl, [fd, ioctl_request(libc::TIOCGPTN), ptr, 0]))
    }
    fn socket_of(family: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> i32 {
        match raw(libc::SYS_socket, [u(family), u(ty | libc::SOCK_CLOEXEC), u(proto), 0]) {
            Ok(fd) => {
                // SAFETY: closing the descriptor this child just created.
                unsafe { libc::close(fd as libc::c_int) };
                0
            }
            Err(e) => e,
        }
    }
    fn vsock_socket() -> i32 {
        socket_of(libc::AF_VSOCK, libc::SOCK_STREAM, 0)
    }
    fn mptcp_socket() -> i32 {
        socket_of(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP)
    }
    fn tcp_socket() -> i32 {
        socket_of(libc::AF_INET6, libc::SOCK_STREAM, 0)
    }
    fn netlink_socket() -> i32 {
        socket_of(libc::AF_NETLINK, libc::SOCK_RAW, 0)
    }
    fn unix_socket() -> i32 {
        socket_of(libc::AF_UNIX, libc::SOCK_STREAM, 0)
    }
    fn unix_socketpair() -> i32 {
        let mut fds = [0 as libc::c_int; 2];
        let ptr = fds.as_mut_ptr() as u64;
        code(raw(libc::SYS_socketpair, [u(libc::AF_UNIX), u(libc::SOCK_STREAM), 0, ptr]))
    }
    fn tiocsti_badfd() -> i32 {
        code(raw(libc::SYS_ioctl, [BAD_FD, TIOCSTI_HIGH, 0, 0]))
    }
    fn tioclinux_badfd() -> i32 {
        code(raw(libc::SYS_ioctl, [BAD_FD, TIOCLINUX_HIGH, 0, 0]))
    }
    /// Every table entry with all-ones arguments (bad fds, pointers and flags, so nothing
    /// happens even unfiltered) must give EPERM. Returns 1 + the index of the first that does
    /// not.
    fn every_denied_syscall() -> i32 {
        for (i, (name, _)) in DENIED_SYSCALLS.iter().enumerate() {
            if let Some(nr) = syscall_number(name) {
                if raw(nr, [u64::MAX; 4]) != Err(EPERM) {
                    return i as i32 + 1;
                }
            }
        }
        0
    }
    #[cfg(target_arch = "x86_64")]
    fn x32_getpid() -> i32 {
        code(raw(libc::SYS_getpid | 0x4000_0000, [0; 4]))
    }
    #[cfg(target_arch = "x86_64")]
    fn nr_minus_one() -> i32 {
        code(raw(-1, [0; 4]))
    }

    #[test]
    fn install_works_and_getpid_is_allowed() {
        let prog = deny_all();
        assert_eq!(in_child(Some(&prog), getpid_check), 0);
        assert_eq!(in_child(Some(&allow_userns()), getpid_check), 0);
    }

    #[test]
    fn denied_syscalls_fail_with_eperm() {
        let prog = deny_all();
        assert_eq!(in_child(Some(&prog), every_denied_syscall), 0);
        // keyctl and io_uring_setup with bad arguments fail differently without the filter,
        // which shows the EPERM comes from it.
        assert_eq!(in_child(Some(&prog), keyctl_check), EPERM);
        assert_ne!(in_child(None, keyctl_check), EPERM);
        assert_eq!(in_child(Some(&prog), io_uring_check), EPERM);
        let io_uring_enabled =
            std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").map_or(true, |v| v.trim() == "0");
        if io_uring_enabled {
            assert_ne!(in_child(None, io_uring_check), EPERM);
        }
    }

    #[test]
    fn nested_userns_denied_unless_allowed() {
        let prog = deny_all();
        assert_eq!(in_child(Some(&prog), unshare_newuser), EPERM);
        assert_eq!(in_child(Some(&prog), clone_newuser), EPERM);

        // Other namespaces are not the filter's business: same answer with or without it.
        assert_eq!(in_child(Some(&prog), unshare_newuts), in_child(None, unshare_newuts));

        // With allow_nested_userns the filter must not change the host's answer.
        let lax = allow_userns();
        assert_eq!(in_child(Some(&lax), unshare_newuser), in_child(None, unshare_newuser));
        assert_eq!(in_child(Some(&lax), clone_newuser), in_child(None, clone_newuser));
    }

    /// The checks below run in a user namespace of the child's own making, with a mount and
    /// a network namespace of its own: where a nested sandbox holds every capability.
    fn in_nested_namespaces(check: fn() -> i32) -> i32 {
        let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET) as u64;
        match raw(libc::SYS_unshare, [flags, 0, 0, 0]) {
            Ok(_) => check(),
            Err(e) => 100 + e,
        }
    }
    fn nested_tmpfs() -> i32 {
        in_nested_namespaces(|| {
            // SAFETY: NUL-terminated strings and no data; the mount is in the child's own namespace.
            let r = unsafe { libc::mount(c"none".as_ptr(), c"/tmp".as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) };
            if r < 0 {
                errno()
            } else {
                0
            }
        })
    }
    fn nested_fsopen() -> i32 {
        in_nested_namespaces(|| code(raw(libc::SYS_fsopen, [c"tmpfs".as_ptr() as u64, 0, 0, 0])))
    }
    fn nested_netlink_route() -> i32 {
        in_nested_namespaces(netlink_socket)
    }
    fn nested_netlink_netfilter() -> i32 {
        in_nested_namespaces(|| socket_of(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_NETFILTER))
    }
    fn nested_raw_socket() -> i32 {
        in_nested_namespaces(|| socket_of(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP))
    }
    /// iptables' IPT_SO_SET_REPLACE (64) on a UDP socket, with a table too short to parse.
    fn nested_iptables_sockopt() -> i32 {
        in_nested_namespaces(|| {
            let fd = match raw(libc::SYS_socket, [u(libc::AF_INET), u(libc::SOCK_DGRAM), 0, 0]) {
                Ok(fd) => fd as u64,
                Err(e) => return 150 + e,
            };
            let buf = [0u8; 16];
            // SAFETY: a valid buffer of the given length; the kernel only reads it.
            let r = unsafe { libc::syscall(libc::SYS_setsockopt, fd, libc::SOL_IP, 64, buf.as_ptr(), buf.len()) };
            if r < 0 {
                errno()
            } else {
                0
            }
        })
    }

    /// The filter's allowances are for a nested sandbox and its refusals hold inside one:
    /// each answer differs from the unfiltered kernel's, so it is the filter's.
    #[test]
    fn a_nested_namespace_mounts_but_reaches_no_netfilter_raw_socket_or_new_mount_api() {
        if in_child(None, nested_tmpfs) != 0 {
            eprintln!("skipped: this host does not let a process make user namespaces");
            assert!(std::env::var_os("CI").is_none(), "CI must allow user namespaces");
            return;
        }
        let lax = allow_userns();
        assert_eq!(in_child(Some(&lax), nested_tmpfs), 0, "bubblewrap's mounts work in a nested namespace");
        assert_eq!(in_child(Some(&lax), nested_netlink_route), 0, "and its loopback set-up");
        for refused in [nested_fsopen, nested_netlink_netfilter, nested_raw_socket, nested_iptables_sockopt] {
            assert_ne!(in_child(None, refused), EPERM, "the kernel alone allows it in a nested namespace");
            assert_eq!(in_child(Some(&lax), refused), EPERM);
        }
        assert_eq!(in_child(Some(&deny_all()), nested_tmpfs), 100 + EPERM, "no nested namespace by default");
    }

    #[test]
    fn plain_clone_fork_and_spawn_still_work() {
        let prog = deny_all();
        assert_eq!(in_child(Some(&prog), clone_plain), 0);
        assert_eq!(in_child(Some(&prog), libc_fork), 0);
        assert_eq!(in_child(Some(&prog), clone3_check), libc::ENOSYS);
        assert_ne!(in_child(None, clone3_check), libc::ENOSYS);
        if Path::new("/bin/true").exists() {
            assert_eq!(in_child(Some(&prog), posix_spawn_true), 0);
        }
    }

    #[test]
    fn terminal_injection_ioctls_denied_even_with_high_bits() {
        let prog = deny_all();
        assert_eq!(in_child(Some(&prog), tiocsti_pty), EPERM);
        assert_eq!(in_child(Some(&prog), tiocgptn_pty), 0, "other ioctls pass");
        // On a closed fd the kernel says EBADF: EPERM can only come from the filter.
        assert_eq!(in_child(None, tiocsti_badfd), libc::EBADF);
        assert_eq!(in_child(Some(&prog), tiocsti_badfd), EPERM);
        assert_eq!(in_child(None, tioclinux_badfd), libc::EBADF);
        assert_eq!(in_child(Some(&prog), tioclinux_badfd), EPERM);
    }

    #[test]
    fn socket_allow_list_in_process() {
        // The host creates AF_VSOCK (and MPTCP where enabled) sockets: any EPERM is the filter's.
        assert_ne!(in_child(None, vsock_socket), EPERM);
        assert_ne!(in_child(None, mptcp_socket), EPERM);
        let userns = deny_all();
        assert_eq!(in_child(Some(&userns), vsock_socket), EPERM);
        for ok in [tcp_socket, netlink_socket, unix_socket, unix_socketpair] {
            assert_eq!(in_child(Some(&userns), ok), in_child(None, ok));
        }
        let landlock =
            build_program(&SeccompOptions { tcp_udp_icmp_only: true, deny_unix_sockets: true, ..Default::default() })
                .unwrap();
        for refused in [vsock_socket, mptcp_socket, unix_socket] {
            assert_eq!(in_child(Some(&landlock), refused), EPERM);
        }
        for ok in [tcp_socket, netlink_socket, unix_socketpair] {
            assert_eq!(in_child(Some(&landlock), ok), 0);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_numbers_denied_in_process() {
        let prog = deny_all();
        // ENOSYS on this host (no x32 support); a host with x32 would run it. Never EPERM.
        assert_ne!(in_child(None, x32_getpid), EPERM);
        assert_eq!(in_child(Some(&prog), x32_getpid), EPERM);
        assert_eq!(in_child(Some(&prog), nr_minus_one), libc::ENOSYS);
    }

    // ---- foreign ABIs from a real binary: tests/helpers/int80.c ----

    /// Temporary directory removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> Self {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
            let dir = std::env::temp_dir().join(format!("agent-sandbox-seccomp-{tag}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn cstr(s: impl AsRef<OsStr>) -> CString {
        CString::new(s.as_ref().as_bytes()).unwrap()
    }

    /// Forks; the child sends stdout to a pipe, installs `prog` (if any) and execs `argv`.
    /// Returns (exit code, stdout).
    fn exec_in_child(prog: Option<&BpfProgram>, argv: &[CString]) -> (i32, String) {
        let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid out-array of two ints.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the child only does raw syscalls, `install` (no allocation), execv, _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: dup2 onto stdout (dup2 clears CLOEXEC on the new fd); execv gets a
            // NUL-terminated path and NULL-terminated argv built before fork; _exit never
            // returns.
            unsafe {
                if libc::dup2(fds[1], 1) < 0 {
                    libc::_exit(INSTALL_FAILED + 1);
                }
                if let Some(p) = prog {
                    if install(p).is_err() {
                        libc::_exit(INSTALL_FAILED);
                    }
                }
                libc::execv(ptrs[0], ptrs.as_ptr());
                libc::_exit(127);
            }
        }
        // SAFETY: closing our copy of the write end so reading sees EOF.
        unsafe { libc::close(fds[1]) };
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            // SAFETY: reading into a live buffer of the given length.
            let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        // SAFETY: our read end, not used afterwards.
        unsafe { libc::close(fds[0]) };
        (wait_exit(pid), String::from_utf8_lossy(&out).trim().to_string())
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn foreign_abis_are_refused_and_never_executed() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers/int80.c");
        let tmp = TempDir::new("int80");
        let bin = tmp.0.join("int80");
        let cc = std::process::Command::new("cc")
            .args(["-O1", "-Wall", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("run cc (gcc) to build tests/helpers/int80.c");
        assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
        let prog = deny_all();
        let run = |filtered: bool, args: &[&OsStr]| {
            let mut argv = vec![cstr(&bin)];
            argv.extend(args.iter().map(cstr));
            exec_in_child(filtered.then_some(&prog), &argv)
        };
        let os = |s: &'static str| OsStr::new(s);

        // i386 getpid via int $0x80.
        let (rc, out) = run(false, &[os("getpid")]);
        assert_eq!(rc, 1, "unfiltered int80 getpid must succeed: {out}");
        let (rc, out) = run(true, &[os("getpid")]);
        assert_eq!((rc, out.as_str()), (0, "int80 getpid ret=-1 errno=1"));

        // i386 mkdir via int $0x80: really runs without the filter, never with it.
        let dir = tmp.0.join("made-by-int80");
        let (rc, out) = run(false, &[os("mkdir"), dir.as_os_str()]);
        assert_eq!((rc, out.as_str()), (1, "int80 mkdir ret=0 errno=0"));
        assert!(dir.is_dir(), "sanity: int $0x80 mkdir works unfiltered");
        std::fs::remove_dir(&dir).unwrap();
        let (rc, out) = run(true, &[os("mkdir"), dir.as_os_str()]);
        assert_eq!((rc, out.as_str()), (0, "int80 mkdir ret=-1 errno=1"));
        assert!(!dir.exists(), "the filtered i386 mkdir must not have run");

        // x32 numbers via `syscall`: this host has no x32 (ENOSYS); the filter says EPERM.
        let x32 = os("x32");
        let (_, out) = run(false, &[x32, os("getpid")]);
        assert_ne!(out, "x32 getpid ret=-1 errno=1", "unfiltered x32 must not be EPERM");
        let (rc, out) = run(true, &[x32, os("getpid")]);
        assert_eq!((rc, out.as_str()), (0, "x32 getpid ret=-1 errno=1"));
        let xdir = tmp.0.join("made-by-x32");
        let (rc, out) = run(true, &[x32, os("mkdir"), xdir.as_os_str()]);
        assert_eq!((rc, out.as_str()), (0, "x32 mkdir ret=-1 errno=1"));
        assert!(!xdir.exists(), "the filtered x32 mkdir must not have run");
    }
}
