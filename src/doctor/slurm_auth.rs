//! What `doctor` says of Slurm's authentication on this host: the Slurm and munge versions,
//! munge's socket, `auth/slurm`'s sackd sockets and keys. Every one of them is a way to act
//! as the user on the whole cluster, outside any jail; the jail hides them all, and this says
//! which exist, so an admin can see what is at stake (an unpatched munge above all).

use std::path::Path;

/// The first munge release without CVE-2026-25506 (a local user can leak the munge key).
pub const MUNGE_FIXED: (u32, u32, u32) = (0, 5, 18);

/// The sockets sackd serves credentials on: 24.11's clients try the first three in turn;
/// 25.x adds one per cluster, and `SLURM_SACK_SOCKET` moves it.
pub const SACK_SOCKETS: &[&str] =
    &["/run/slurm/sack.socket", "/run/slurmctld/sack.socket", "/run/slurmdbd/sack.socket"];

/// `x.y.z` at the start of the first word that has one (`munge-0.5.15 (2023-01-01)`,
/// `slurm 24.11.5`, `slurm-wlm 22.05.8`).
pub fn version_in(text: &str) -> Option<(u32, u32, u32)> {
    text.split(|c: char| c.is_whitespace() || c == '-').find_map(|word| {
        let mut parts = word.split('.');
        let mut num = || parts.next()?.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok();
        Some((num()?, num()?, num().unwrap_or(0)))
    })
}

/// What one program prints for `--version` (stdout and stderr: munge prints to either).
fn version_of(program: &Path) -> Option<String> {
    let out = std::process::Command::new(program).arg("--version").stdin(std::process::Stdio::null()).output().ok()?;
    Some(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The munge line: its version where a munge program is installed, said plainly when it is
/// older than the fix, and whether its socket is here.
pub fn munge_line(socket_here: bool, version: Option<(u32, u32, u32)>) -> (bool, String) {
    let socket = match socket_here {
        true => "munge socket present on the host (hidden inside the jail)",
        false => "no munge socket on this host",
    };
    match version {
        Some(v) if v < MUNGE_FIXED => (
            true,
            format!(
                "munge {}.{}.{} is older than 0.5.18: a local user can leak the munge key (CVE-2026-25506) unless \
                 your distribution patched this build; {socket}. The jail keeps munge's socket and key out of \
                 every session, so an agent cannot, but every other local account can",
                v.0, v.1, v.2
            ),
        ),
        Some(v) => (false, format!("munge {}.{}.{}; {socket}", v.0, v.1, v.2)),
        None => (false, socket.to_string()),
    }
}

/// The checks: (name, warn, detail, fix).
pub fn lines(sbatch: Option<&Path>) -> Vec<(&'static str, bool, String, Option<&'static str>)> {
    let mut v = vec![];
    if let Some(sbatch) = sbatch {
        let slurm = version_of(sbatch).and_then(|t| version_in(&t));
        let conf = chaperon::slurm_conf::local();
        let auth = conf
            .as_deref()
            .and_then(|c| chaperon::slurm_conf::word(c, "AuthType").map(str::to_string))
            .unwrap_or_else(|| "unknown (no local slurm.conf)".into());
        let version = slurm.map_or("unknown".to_string(), |v| format!("{}.{:02}.{}", v.0, v.1, v.2));
        v.push(("slurm version", false, format!("Slurm {version}; AuthType {auth}"), None));
    }
    let munged = ["/usr/sbin/munged", "/usr/bin/munge", "/usr/local/sbin/munged"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists());
    let (warn, detail) = munge_line(
        Path::new("/run/munge/munge.socket.2").exists(),
        munged.and_then(version_of).and_then(|t| version_in(&t)),
    );
    v.push((
        "munge",
        warn,
        detail,
        warn.then_some("upgrade munge to 0.5.18 or later (or your distribution's patched build)"),
    ));
    let moved = std::env::var("SLURM_SACK_SOCKET").ok().filter(|s| s.starts_with('/'));
    let sack: Vec<String> =
        SACK_SOCKETS.iter().map(|s| s.to_string()).chain(moved).filter(|s| Path::new(s).exists()).collect();
    if !sack.is_empty() {
        v.push((
            "sackd",
            false,
            format!("auth/slurm credentials are served at {} (hidden inside the jail)", sack.join(", ")),
            None,
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_each_program_prints_them() {
        assert_eq!(version_in("munge-0.5.15 (2023-01-01)\n"), Some((0, 5, 15)));
        assert_eq!(version_in("slurm 24.11.5\n"), Some((24, 11, 5)));
        assert_eq!(version_in("slurm-wlm 22.05.8\n"), Some((22, 5, 8)));
        assert_eq!(version_in("munge-0.5.18\n"), Some((0, 5, 18)));
        assert_eq!(version_in("no version here"), None);
    }

    #[test]
    fn a_munge_older_than_the_fix_is_said_plainly_and_a_fixed_one_is_not() {
        let (warn, text) = munge_line(true, Some((0, 5, 15)));
        assert!(warn && text.contains("older than 0.5.18") && text.contains("CVE-2026-25506"), "{text}");
        for fixed in [(0, 5, 18), (0, 6, 0)] {
            let (warn, text) = munge_line(false, Some(fixed));
            assert!(!warn && !text.contains("CVE"), "{text}");
        }
        assert!(!munge_line(false, None).0);
    }
}
