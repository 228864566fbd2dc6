//! The jail's `/etc/resolv.conf` and the host's resolvers, read from the host's file. Pure:
//! the plan uses it to write the jail's file and to choose where DNS goes.

use super::addr;
use std::net::{IpAddr, SocketAddr};

/// The host's resolvers as the launcher sees them (`nameserver` lines of resolv.conf).
pub fn host_resolvers(resolv_conf: &str) -> Vec<SocketAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        // A scoped IPv6 address (fe80::1%eth0) keeps only the address: the host routes it.
        .filter_map(|a| a.split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// The jail's resolv.conf: our resolver, with the host's search domains and options, so
/// short cluster names resolve inside as they do outside.
pub fn jail_resolv_conf(host: &str) -> String {
    let mut out = format!(
        "# agent-sandbox: the jail's resolver (filtered network mode)\nnameserver {}\nnameserver {}\n",
        addr::GATEWAY_V4,
        addr::GATEWAY_V6
    );
    for l in host.lines() {
        let first = l.split_whitespace().next();
        if matches!(first, Some("search" | "domain")) || (first == Some("options") && !l.contains("use-vc")) {
            out.push_str(l.trim());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_is_read_and_written() {
        let host = "# x\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\nsearch cluster.local\noptions ndots:2\nnameserver bogus\n";
        let ups = host_resolvers(host);
        assert_eq!(ups, vec!["10.255.255.53:53".parse().unwrap(), "[fe80::1]:53".parse().unwrap()]);
        let jail = jail_resolv_conf(host);
        assert!(jail.contains("nameserver 169.254.77.1\n"));
        assert!(jail.contains("search cluster.local\n"));
        assert!(jail.contains("options ndots:2\n"));
        assert!(!jail.contains("10.255.255.53"));
    }
}
