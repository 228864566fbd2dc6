//! The mail-block stub: every mail program inside the jail resolves to this, which tells the
//! agent that sending mail is blocked by policy and exits 77 (EX_NOPERM), sending nothing.
//! It never echoes its arguments: they may carry the message or addresses.

/// The mail programs the stub stands in for, by absolute path and first on PATH.
pub const MAILERS: &[&str] = &[
    "sendmail",
    "sendmail.sendmail",
    "sendmail.postfix",
    "rmail",
    "mail",
    "mailx",
    "Mail",
    "s-nail",
    "nail",
    "bsd-mailx",
    "heirloom-mailx",
    "mutt",
    "neomutt",
    "msmtp",
    "ssmtp",
    "nullmailer-send",
    "smtp-cli",
    "postsuper",
    "postdrop",
    "postqueue",
    "mailq",
    "newaliases",
    "swaks",
    "mpack",
    "metasend",
    "exim",
    "exim4",
    "dma",
    "qmail-inject",
    "qmail-qmqpc",
    "qmail-remote",
];

/// Directories listed on the host for real mailers to cover inside the jail.
pub const MAILER_DIRS: &[&str] = &["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"];

/// Classic mailer paths outside those directories (too large to list).
pub const MAILER_PATHS: &[&str] = &["/usr/lib/sendmail", "/usr/libexec/sendmail", "/usr/lib/sm.bin/sendmail"];

/// Exit status of a blocked mail program: EX_NOPERM from sysexits.h.
pub const EXIT_BLOCKED: i32 = 77;

pub fn message(name: &str) -> String {
    format!(
        "{name}: sending mail is blocked in this sandbox (agent-sandbox policy mail.block). \
         This is configured policy, not an error to work around: any other mail program or \
         mail port gives the same result. If this mail must be sent, ask the user to send it."
    )
}

pub fn run(name: &str) -> i32 {
    eprintln!("{}", message(name));
    EXIT_BLOCKED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_every_mailer_of_the_policy_once() {
        let mut seen = std::collections::HashSet::new();
        for m in MAILERS {
            assert!(seen.insert(m), "duplicate {m}");
            assert!(!m.contains('/') && !m.is_empty());
        }
        assert_eq!(MAILERS.len(), 31);
    }

    #[test]
    fn message_names_policy_and_never_echoes_arguments() {
        let m = message("sendmail");
        assert!(m.contains("mail.block") && m.contains("ask the user"));
    }
}
