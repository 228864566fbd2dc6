//! Network setup inside the jail's own network namespace, done by the jail's init while it
//! still holds CAP_NET_ADMIN there: `lo` up, and for `filtered` mode `tun0` with IPv4 and
//! IPv6 addresses, MTU and default routes. Plain interface ioctls: a handful of fixed-size
//! requests, no netlink conversation needed.

use crate::netrules::addr;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn os_err<T>(r: nix::Result<T>) -> io::Result<T> {
    r.map_err(|e| io::Error::from_raw_os_error(e as i32))
}

fn dgram(family: nix::sys::socket::AddressFamily) -> io::Result<OwnedFd> {
    use nix::sys::socket::{socket, SockFlag, SockType};
    os_err(socket(family, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None))
}

fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is a plain C struct for which all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.as_bytes().iter().take(libc::IFNAMSIZ - 1)) {
        *dst = *src as libc::c_char;
    }
    req
}

/// ioctl with a pointer argument; the request's type is checked by the caller's choice of `T`.
fn ioctl_ptr<T>(fd: RawFd, request: libc::c_ulong, arg: &mut T) -> io::Result<()> {
    // SAFETY: every caller passes the struct type the request reads or writes (ifreq,
    // in6_ifreq, rtentry, in6_rtmsg), and `arg` lives across the call.
    if unsafe { libc::ioctl(fd, request as _, arg as *mut T) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn link_up(sock: RawFd, name: &str) -> io::Result<()> {
    let mut req = ifreq(name);
    ioctl_ptr(sock, libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    ioctl_ptr(sock, libc::SIOCSIFFLAGS, &mut req)
}

/// The proxied mode's listeners on the jail's loopback: HTTP, then SOCKS5. The supervisor
/// accepts on them from outside; nothing else in the jail can take these ports first.
pub fn proxy_listeners() -> io::Result<Vec<OwnedFd>> {
    use crate::netrules::addr::{HTTP_PORT, SOCKS_PORT};
    let mut out = vec![];
    for port in [HTTP_PORT, SOCKS_PORT] {
        let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port))?;
        out.push(OwnedFd::from(l));
    }
    Ok(out)
}

/// glibc's `struct rtentry` (not in the libc crate for glibc targets).
#[repr(C)]
struct RtEntry {
    rt_pad1: libc::c_ulong,
    rt_dst: libc::sockaddr,
    rt_gateway: libc::sockaddr,
    rt_genmask: libc::sockaddr,
    rt_flags: libc::c_ushort,
    rt_pad2: libc::c_short,
    rt_pad3: libc::c_ulong,
    rt_tos: libc::c_uchar,
    rt_class: libc::c_uchar,
    rt_pad4: [libc::c_short; 3],
    rt_metric: libc::c_short,
    rt_dev: *mut libc::c_char,
    rt_mtu: libc::c_ulong,
    rt_window: libc::c_ulong,
    rt_irtt: libc::c_ushort,
}

/// The kernel's `struct in6_rtmsg` (the libc crate's has private fields).
#[repr(C)]
struct In6RtMsg {
    rtmsg_dst: libc::in6_addr,
    rtmsg_src: libc::in6_addr,
    rtmsg_gateway: libc::in6_addr,
    rtmsg_type: u32,
    rtmsg_dst_len: u16,
    rtmsg_src_len: u16,
    rtmsg_metric: u32,
    rtmsg_info: libc::c_ulong,
    rtmsg_flags: u32,
    rtmsg_ifindex: libc::c_int,
}

fn sockaddr_v4(ip: std::net::Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(ip.octets()) },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr have the same size; the kernel reads it by family.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// The jail's network namespace, being made by a thread of the jail's init while the init
/// builds the filesystem. Making a network namespace is the costliest step of a jail's
/// start (about 1 ms of kernel work), and bringing up `lo` and `tun0` adds 0.3 ms: on a
/// thread of its own (a network namespace is per thread until `enter`), all of it overlaps
/// the mounts.
pub struct NetSetup {
    thread: std::thread::JoinHandle<io::Result<NetBuilt>>,
}

/// What `NetSetup` made: the namespace, to `enter`, and tun0's descriptor when asked for.
pub struct NetBuilt {
    pub netns: OwnedFd,
    pub tun: Option<OwnedFd>,
}

impl NetSetup {
    pub fn finish(self) -> io::Result<NetBuilt> {
        match self.thread.join() {
            Ok(r) => r,
            Err(_) => Err(io::Error::other("the network setup thread panicked")),
        }
    }
}

/// Opens a directory to reach paths in later: the descriptor stays valid once the jail's root
/// replaces the host's, which `start`'s thread may not yet have used it by.
fn dir(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: open with a NUL-terminated path; the result is checked.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if raw < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("cannot open {}: {e}", path.to_string_lossy())));
    }
    // SAFETY: `raw` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn open_at(dir: &OwnedFd, path: &std::ffi::CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: openat with a directory we own and a NUL-terminated relative path.
    let raw = unsafe { libc::openat(dir.as_raw_fd(), path.as_ptr(), flags | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as in `dir`.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn write_at(dir: &OwnedFd, path: &std::ffi::CStr, value: &str) -> io::Result<()> {
    let f = open_at(dir, path, libc::O_WRONLY)?;
    std::fs::File::from(f).write_all(value.as_bytes())
}

/// Starts making the jail's network namespace with `lo` up, and with `tun0` at `tun` when
/// given. Must run before the jail's root replaces /dev and /proc: the directories the
/// thread opens in are opened here. The calling thread stays in its namespace until `enter`.
pub fn start(tun: Option<std::net::Ipv4Addr>) -> io::Result<NetSetup> {
    // /proc/sys and not a directory below net/: the kernel picks a network namespace's
    // sysctls when it looks up "net", by the thread looking it up (the new namespace's).
    let dirs = match tun {
        Some(_) => Some((dir(c"/dev/net")?, dir(c"/proc/sys")?)),
        None => None,
    };
    let thread = std::thread::Builder::new().name("jail-net".into()).spawn(move || {
        crate::timing::mark("net-thread");
        // SAFETY: unshare(CLONE_NEWNET) moves only this thread into a new network namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("cannot make the jail's network namespace: {e}")));
        }
        crate::timing::mark("net-unshared");
        let sock = dgram(nix::sys::socket::AddressFamily::Inet)?;
        link_up(sock.as_raw_fd(), "lo").map_err(|e| io::Error::new(e.kind(), format!("cannot bring up lo: {e}")))?;
        let tun = match (tun, dirs) {
            (Some(address), Some((dev_net, proc_sys))) => {
                Some(make_tun(address, &dev_net, &proc_sys).map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot create tun0 for the filtered network mode: {e}"))
                })?)
            }
            _ => None,
        };
        // SAFETY: SIOCGSKNS takes no argument and returns a new descriptor of the socket's
        // network namespace (this thread's), or -1.
        let ns = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _) };
        if ns < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("cannot take the jail's network namespace: {e}")));
        }
        // SAFETY: the kernel just made this descriptor for us.
        let netns = unsafe { OwnedFd::from_raw_fd(ns) };
        crate::timing::mark("net-done");
        Ok(NetBuilt { netns, tun })
    })?;
    Ok(NetSetup { thread })
}

/// `ioctl(2)` on a socket: a descriptor of its network namespace (linux/sockios.h).
const SIOCGSKNS: libc::c_ulong = 0x894C;

/// Moves the calling thread into `netns`, the namespace `start` made.
pub fn enter(netns: &OwnedFd) -> io::Result<()> {
    // SAFETY: setns with a namespace descriptor we own and its type.
    if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates `tun0` in the calling thread's network namespace and configures it; returns the
/// device's descriptor for the supervisor.
fn make_tun(address: std::net::Ipv4Addr, dev_net: &OwnedFd, proc_sys: &OwnedFd) -> io::Result<OwnedFd> {
    // Published ports (`--publish`) arrive on tun0 addressed to 127.0.0.1, so that servers
    // listening on localhost only (most dev servers) are reachable; without this the kernel
    // drops such packets as martians. Set as this netns's default, which tun0 (created next)
    // inherits; the host is unaffected.
    write_at(proc_sys, c"net/ipv4/conf/default/route_localnet", "1")
        .map_err(|e| io::Error::new(e.kind(), format!("route_localnet: {e}")))?;
    // Unprivileged ping (ICMP datagram sockets) for the jail's own user: the supervisor
    // answers echo to the gateway and refuses the rest at once. Best effort, this netns only.
    // Only ids mapped in the jail's user namespace are valid here: the user's own group.
    let gid = nix::unistd::getgid();
    let _ = write_at(proc_sys, c"net/ipv4/ping_group_range", &format!("{gid} {gid}"));
    // The device joins the namespace of the thread that opened it: opened here.
    let tun = open_at(dev_net, c"tun", libc::O_RDWR | libc::O_NONBLOCK)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open /dev/net/tun: {e}")))?;
    let mut req = ifreq(addr::TUN_NAME);
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    ioctl_ptr(tun.as_raw_fd(), libc::TUNSETIFF as libc::c_ulong, &mut req)
        .map_err(|e| io::Error::new(e.kind(), format!("TUNSETIFF: {e}")))?;
    configure(addr::TUN_NAME, address)?;
    Ok(tun)
}

fn configure(name: &str, address: std::net::Ipv4Addr) -> io::Result<()> {
    use nix::sys::socket::AddressFamily;
    let v4 = dgram(AddressFamily::Inet)?;
    let s = v4.as_raw_fd();
    let mut req = ifreq(name);
    req.ifr_ifru.ifru_mtu = addr::MTU as libc::c_int;
    ioctl_ptr(s, libc::SIOCSIFMTU, &mut req)?;
    let mut req = ifreq(name);
    req.ifr_ifru.ifru_addr = sockaddr_v4(address);
    ioctl_ptr(s, libc::SIOCSIFADDR, &mut req)?;
    let mut req = ifreq(name);
    let mask = u32::MAX << (32 - addr::PREFIX_V4);
    req.ifr_ifru.ifru_netmask = sockaddr_v4(std::net::Ipv4Addr::from(mask));
    ioctl_ptr(s, libc::SIOCSIFNETMASK, &mut req)?;
    link_up(s, name)?;
    let mut req = ifreq(name);
    ioctl_ptr(s, libc::SIOCGIFINDEX, &mut req)?;
    // SAFETY: SIOCGIFINDEX filled the ifindex member of the union.
    let ifindex = unsafe { req.ifr_ifru.ifru_ifindex };

    let mut dev = name.as_bytes().to_vec();
    dev.push(0);
    // SAFETY: all-zero is a valid rtentry (null device pointer, zero addresses).
    let mut rt: RtEntry = unsafe { std::mem::zeroed() };
    rt.rt_dst = sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED);
    rt.rt_genmask = sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED);
    rt.rt_gateway = sockaddr_v4(addr::GATEWAY_V4);
    rt.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
    rt.rt_dev = dev.as_mut_ptr().cast();
    ioctl_ptr(s, libc::SIOCADDRT, &mut rt).map_err(|e| io::Error::new(e.kind(), format!("IPv4 default route: {e}")))?;

    // IPv6 is best effort: a kernel booted with ipv6.disable=1 still gets a working IPv4 jail.
    let Ok(v6) = dgram(AddressFamily::Inet6) else { return Ok(()) };
    let s6 = v6.as_raw_fd();
    let mut ifr6 = libc::in6_ifreq {
        ifr6_addr: libc::in6_addr { s6_addr: addr::JAIL_V6.octets() },
        ifr6_prefixlen: addr::PREFIX_V6 as u32,
        ifr6_ifindex: ifindex,
    };
    ioctl_ptr(s6, libc::SIOCSIFADDR, &mut ifr6).map_err(|e| io::Error::new(e.kind(), format!("IPv6 address: {e}")))?;
    let mut rt6 = In6RtMsg {
        rtmsg_dst: libc::in6_addr { s6_addr: [0; 16] },
        rtmsg_src: libc::in6_addr { s6_addr: [0; 16] },
        rtmsg_gateway: libc::in6_addr { s6_addr: addr::GATEWAY_V6.octets() },
        rtmsg_type: 0,
        rtmsg_dst_len: 0,
        rtmsg_src_len: 0,
        rtmsg_metric: 1,
        rtmsg_info: 0,
        rtmsg_flags: (libc::RTF_UP | libc::RTF_GATEWAY) as u32,
        rtmsg_ifindex: ifindex,
    };
    ioctl_ptr(s6, libc::SIOCADDRT, &mut rt6)
        .map_err(|e| io::Error::new(e.kind(), format!("IPv6 default route: {e}")))?;
    Ok(())
}
