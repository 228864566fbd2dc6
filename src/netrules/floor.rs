//! The port-class deny floor: destination ports no user policy can open, with the reason
//! each is there. Every network mode and the Landlock backend read this one table.

/// (port, class, why). Admins can extend the floor; nobody can shrink it.
pub const PORT_FLOOR: &[(u16, &str, &str)] = &[
    (24, "mail", "private mail system; used for direct mail submission"),
    (25, "mail", "SMTP: an agent could send mail as the host"),
    (465, "mail", "SMTP submission over TLS"),
    (587, "mail", "SMTP submission"),
    (2525, "mail", "alternative SMTP submission port of mail APIs"),
    (853, "dns", "DNS over TLS would bypass the jail's resolver and hostname rules"),
    (23, "remote-shell", "telnet: cleartext remote login"),
    (79, "legacy", "finger: user enumeration"),
    (113, "legacy", "ident: user identification of connections"),
    (512, "remote-shell", "rexec: cleartext remote execution"),
    (513, "remote-shell", "rlogin: cleartext remote login"),
    (514, "remote-shell", "rsh: cleartext remote shell"),
    (6817, "slurm", "slurmctld: only the chaperon may talk to Slurm"),
    (6818, "slurm", "slurmd: only the chaperon may talk to Slurm"),
    (6819, "slurm", "slurmdbd: only the chaperon may talk to Slurm"),
    (6820, "slurm", "slurmrestd: only the chaperon may talk to Slurm"),
];

pub fn floor_ports() -> impl Iterator<Item = u16> {
    PORT_FLOOR.iter().map(|(p, _, _)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_complete_and_has_reasons() {
        let mut seen = std::collections::HashSet::new();
        for (port, class, why) in PORT_FLOOR {
            assert!(seen.insert(*port), "duplicate {port}");
            assert!(!class.is_empty() && why.len() > 5, "{port} needs a reason");
        }
        for must in [24, 25, 465, 587, 2525, 853, 23, 79, 113, 512, 513, 514] {
            assert!(seen.contains(&must), "floor lacks {must}");
        }
    }
}
