//! Reading this host's slurm.conf, and the `Key = value` lines of `scontrol show config`,
//! which read the same way: keys case-insensitive, an index (`SlurmctldHost[0]`) belongs to
//! the key, `#` starts a comment. What Slurm's commands read first, so an answer found here
//! costs no round trip to the controller.

use std::io::Read;

/// The largest slurm.conf read: a bigger one is taken for none.
const MAX_CONF: u64 = 4 << 20;

/// The text of this host's slurm.conf (`SLURM_CONF`, else /etc/slurm/slurm.conf), where there
/// is one. None on a configless host, or where it is unreadable or absurdly large.
pub fn local() -> Option<String> {
    let path = std::env::var_os("SLURM_CONF").unwrap_or_else(|| "/etc/slurm/slurm.conf".into());
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(MAX_CONF + 1).read_to_string(&mut text).ok()?;
    (text.len() as u64 <= MAX_CONF).then_some(text)
}

/// The first value of `key` (trimmed; empty where the line says `Key=`), with any index of
/// the key (`SlurmctldHost[1]`) taken for the key itself.
pub fn value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split('#').next()?.split_once('=')?;
        let k = k.trim();
        let name = k.split_once('[').map_or(k, |(name, _)| name);
        name.eq_ignore_ascii_case(key).then_some(v.trim())
    })
}

/// `value`'s first word: what Slurm takes for a one-word setting.
pub fn word<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    value(text, key)?.split_whitespace().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_as_slurm_reads_them() {
        let conf = "# AuthType=auth/none\nauthtype = auth/slurm # new\nSlurmctldHost[1]=b(10.0.0.2)\n\
                    ClusterName=Tc extra\nPlugStackConfig=/etc/slurm/my plug.conf\nEmpty=\n";
        assert_eq!(value(conf, "AuthType"), Some("auth/slurm"));
        assert_eq!(value(conf, "SlurmctldHost"), Some("b(10.0.0.2)"));
        assert_eq!(word(conf, "clustername"), Some("Tc"));
        assert_eq!(value(conf, "PlugStackConfig"), Some("/etc/slurm/my plug.conf"));
        assert_eq!(value(conf, "Empty"), Some(""));
        assert_eq!(word(conf, "Empty"), None);
        assert_eq!(value(conf, "Auth"), None);
        assert_eq!(value("no equals here\n", "no"), None);
    }

    #[test]
    fn the_first_line_of_a_key_wins() {
        assert_eq!(value("SlurmctldHost=a\nSlurmctldHost=b\n", "SlurmctldHost"), Some("a"));
    }
}
