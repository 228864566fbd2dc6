//! Where the session's jobs run now, for the session's job services (`--job-port`): the
//! supervisor admits a connection from a compute node only while a job of the project runs
//! there. Also where the controller is, whose route gives the login node's cluster-facing
//! address. The answers come from Slurm (squeue, sinfo, scontrol), never from anything a jail
//! could write.

use crate::session::real_command;
use crate::spawn::{Io, RealCommand};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;

/// Largest answer read from squeue or sinfo.
const MAX_ANSWER: usize = 4 << 20;
/// How long a question to Slurm may take.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Who asks Slurm: the real commands' directory, and the user they run as.
#[derive(Debug, Clone)]
pub struct Asker {
    pub bin: PathBuf,
    pub home: PathBuf,
    pub user: String,
}

#[derive(Debug, thiserror::Error)]
pub enum NodesError {
    #[error("{command} failed: {why}")]
    Command { command: &'static str, why: String },
}

/// The nodes that run one of `jobs` now: every address they have, with the node's name.
pub type Running = BTreeMap<IpAddr, String>;

impl Asker {
    /// A real command's output, bounded in size and time: a controller that does not answer
    /// refuses the connection waiting on it, it does not hold it.
    fn run(&self, name: &'static str, args: &[&str]) -> Result<String, NodesError> {
        let mut cmd: RealCommand = real_command(&self.bin, &self.home, &self.user, name);
        cmd.args(args).stdin(Io::null()).stderr(Io::null());
        let (out, status) = crate::bounded::capture(cmd, MAX_ANSWER, ASK_TIMEOUT)
            .map_err(|why| NodesError::Command { command: name, why })?;
        if !status.success() {
            return Err(NodesError::Command { command: name, why: format!("exited with {status}") });
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// The nodes where one of `jobs` is running (state R) now, with their addresses
    /// (`NodeAddr`, resolved where it is a name).
    pub fn running(&self, jobs: &[u32]) -> Result<Running, NodesError> {
        if jobs.is_empty() {
            return Ok(Running::default());
        }
        // The user's own running jobs (never a -j list: a project's records only grow), those
        // of the scope kept here; an array task counts by its array's id too.
        let running = self.run("squeue", &["-h", "--me", "-t", "R", "-o", "%A|%F|%N"])?;
        let lists: Vec<&str> = running
            .lines()
            .filter_map(|l| {
                let mut f = l.trim().split('|');
                let (id, array, nodes) = (f.next()?, f.next()?, f.next()?);
                let ours = [id, array].iter().any(|x| x.parse::<u32>().is_ok_and(|x| jobs.contains(&x)));
                ours.then_some(nodes)
            })
            .filter(|l| valid_hostlist(l))
            .collect();
        if lists.is_empty() {
            return Ok(Running::default());
        }
        let nodes = self.run("sinfo", &["-h", "-N", "-n", &lists.join(","), "-o", "%N %o"])?;
        Ok(running_from(&nodes, resolve))
    }

    /// Every node of the cluster and its address as Slurm has it (`NodeAddr`: a name or an
    /// address, not resolved, so a caller resolves only as many as it needs).
    /// From this host's slurm.conf where it lists every node plainly (no round trip to the
    /// controller), else from `sinfo`.
    pub fn nodes(&self) -> Result<Vec<(String, String)>, NodesError> {
        if let Some(nodes) = crate::slurm_conf::local().and_then(|t| nodes_in_conf(&t)) {
            return Ok(nodes);
        }
        Ok(nodes_in(&self.run("sinfo", &["-h", "-N", "-o", "%N %o"])?))
    }

    /// The first `SlurmctldHost`'s address: from this host's slurm.conf where it has one (no
    /// round trip to the controller on a session's first Slurm call), else from
    /// `scontrol show config` (a configless host).
    pub fn controller(&self) -> Result<IpAddr, NodesError> {
        let host = match crate::slurm_conf::local().as_deref().and_then(controller_in) {
            Some(host) => host,
            None => controller_in(&self.run("scontrol", &["show", "config"])?).ok_or(NodesError::Command {
                command: "scontrol",
                why: "`scontrol show config` names no SlurmctldHost".into(),
            })?,
        };
        resolve(&host).into_iter().next().ok_or(NodesError::Command {
            command: "scontrol",
            why: format!("the controller's host name `{host}` does not resolve"),
        })
    }
}

/// A hostlist as squeue prints it (`n[1-3,7],gpu01`): anything else is not passed on.
fn valid_hostlist(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 4096
        && !s.starts_with('-')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.,[]".contains(c))
}

/// `sinfo -N -o "%N %o"` lines (a node once per partition) into each node's name and address.
fn nodes_in(sinfo: &str) -> Vec<(String, String)> {
    let mut seen = BTreeSet::new();
    sinfo
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (name, addr) = (words.next()?, words.next()?);
            seen.insert(name).then(|| (name.to_string(), addr.to_string()))
        })
        .collect()
}

/// The same lines into every address of each node, with the node's name.
fn running_from(sinfo: &str, resolve: impl Fn(&str) -> Vec<IpAddr>) -> Running {
    let mut r = Running::new();
    for (name, addr) in nodes_in(sinfo) {
        for ip in resolve(&addr) {
            r.entry(ip).or_insert_with(|| name.clone());
        }
    }
    r
}

/// `SlurmctldHost[0] = tc(203.0.113.1)` or `SlurmctldHost[0] = ctl1` from `scontrol show config`:
/// the address in parentheses, else the name.
/// slurm.conf's own `SlurmctldHost=tc(203.0.113.1)` reads the same way (its keys are
/// case-insensitive; `#` starts a comment).
fn controller_in(config: &str) -> Option<String> {
    let value = crate::slurm_conf::value(config, "SlurmctldHost")?;
    let host = match value.split_once('(') {
        Some((_, rest)) => rest.trim_end_matches(')').trim(),
        None => value,
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// Every node of slurm.conf with its address (`NodeAddr`, else `NodeHostname`, else the name),
/// where the file lists them one by one: None (ask `sinfo`) where it may hold more than it
/// says plainly (an `Include`, a continued line, a hostlist `n[1-4]` or a list `a,b`, nodes
/// that register themselves: `MaxNodeCount`), or lists none.
fn nodes_in_conf(conf: &str) -> Option<Vec<(String, String)>> {
    let mut nodes = vec![];
    for line in conf.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let first = line.split_whitespace().next().unwrap_or("");
        let key = first.split_once('=').map_or(first, |(k, _)| k);
        if line.ends_with('\\') || key.eq_ignore_ascii_case("Include") || key.eq_ignore_ascii_case("MaxNodeCount") {
            return None;
        }
        if !key.eq_ignore_ascii_case("NodeName") {
            continue;
        }
        let field = |want: &str| {
            line.split_whitespace().find_map(|w| {
                let (k, v) = w.split_once('=')?;
                k.eq_ignore_ascii_case(want).then_some(v)
            })
        };
        let name = field("NodeName")?;
        if name.eq_ignore_ascii_case("DEFAULT") {
            continue;
        }
        let addr = field("NodeAddr").or(field("NodeHostname")).unwrap_or(name);
        let plain = |v: &str| !v.is_empty() && !v.contains(['[', ',', '"', '\'']);
        if !plain(name) || !plain(addr) {
            return None;
        }
        if !nodes.iter().any(|(n, _): &(String, String)| n == name) {
            nodes.push((name.to_string(), addr.to_string()));
        }
    }
    (!nodes.is_empty()).then_some(nodes)
}

/// An address, or every address a name resolves to (none if it does not).
pub fn resolve(host: &str) -> Vec<IpAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return vec![ip];
    }
    (host, 0).to_socket_addrs().map(|a| a.map(|s| s.ip()).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinfo_lines_give_each_node_once_with_its_addresses() {
        let sinfo = "n2 203.0.113.2\ntc 203.0.113.1\nn2 203.0.113.2\ngpu1 gpu1.cluster\n\nbroken\n";
        let r = running_from(sinfo, |h| match h {
            "gpu1.cluster" => vec!["10.1.0.7".parse().unwrap(), "fd00::7".parse().unwrap()],
            other => resolve(other),
        });
        let got: Vec<String> = r.iter().map(|(ip, n)| format!("{ip}={n}")).collect();
        assert_eq!(got, ["10.1.0.7=gpu1", "203.0.113.1=tc", "203.0.113.2=n2", "fd00::7=gpu1"]);
        let nodes: Vec<String> = nodes_in(sinfo).into_iter().map(|(n, a)| format!("{n}={a}")).collect();
        assert_eq!(nodes, ["n2=203.0.113.2", "tc=203.0.113.1", "gpu1=gpu1.cluster"]);
    }

    #[test]
    fn the_controller_is_its_address_in_parentheses_else_its_name() {
        let conf = "AccountingStorageHost = x\nSlurmctldHost[0]        = tc(203.0.113.1)\nSlurmctldHost[1] = b\n";
        assert_eq!(controller_in(conf).as_deref(), Some("203.0.113.1"));
        assert_eq!(controller_in("SlurmctldHost[0] = ctl1\n").as_deref(), Some("ctl1"));
        assert_eq!(controller_in("ClusterName = tc\n"), None);
        // slurm.conf's own form.
        let conf = "# SlurmctldHost=old\nClusterName=tc\nslurmctldhost=ctl1(10.1.0.2) # primary\nSlurmctldHost=ctl2\n";
        assert_eq!(controller_in(conf).as_deref(), Some("10.1.0.2"));
    }

    #[test]
    fn slurm_conf_gives_its_nodes_only_where_it_lists_each_plainly() {
        let conf = "NodeName=DEFAULT CPUs=2\nNodeName=n1 NodeHostname=h NodeAddr=127.0.0.1 Port=6821\n\
                    nodename=n2 NodeHostname=h2   # no address\nNodeName=n3\nPartitionName=p Nodes=n[1-3]\n";
        let got: Vec<String> =
            nodes_in_conf(conf).unwrap_or_default().into_iter().map(|(n, a)| format!("{n}={a}")).collect();
        assert_eq!(got, ["n1=127.0.0.1", "n2=h2", "n3=n3"]);
        for unsure in [
            "NodeName=n[1-4] NodeAddr=10.0.0.[1-4]\n",
            "NodeName=a,b\n",
            "NodeName=n1\nInclude /etc/slurm/nodes.conf\n",
            "NodeName=n1 \\\n  CPUs=4\n",
            "NodeName=n1\nMaxNodeCount=100\n",
            "ClusterName=tc\n",
        ] {
            assert_eq!(nodes_in_conf(unsure), None, "{unsure}");
        }
    }

    #[test]
    fn only_hostlists_reach_sinfo() {
        for ok in ["n2", "n[1-3,7],gpu01", "node-1.cluster"] {
            assert!(valid_hostlist(ok), "{ok}");
        }
        for bad in ["", "-n", "(null)", "n1 n2", "a;b"] {
            assert!(!valid_hostlist(bad), "{bad}");
        }
    }
}
