//! The session one chaperon serves: whose it is and where (`Config`: user, project, state
//! directory, the frozen policy, where the real Slurm commands are), the record each call
//! leaves for the audit log (`Audit`), and the clean environment every real Slurm command runs
//! with (`Config::command`). Reads no request and decides nothing: `commands` does.

use crate::governor::Governor;
use crate::release::Release;
use crate::scope::Registry;
use crate::spawn::{Io, RealCommand};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One audit event: the chaperon's decision on one call, for the launcher's audit log.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Audit {
    pub command: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub decision: String,
    pub reason: Option<String>,
    pub job: Option<u32>,
    pub script_bytes: Option<usize>,
    pub script_hash: Option<String>,
}

/// Whose session a chaperon serves and where: what the launcher knows of it, built once by the
/// launcher and handed to the chaperon process it starts (the same build at both ends: the
/// form is JSON in its environment, not a stable format), which keeps it as `Config::who`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Handoff {
    pub uid: u32,
    pub user: String,
    pub home: PathBuf,
    pub session: String,
    pub project: PathBuf,
    /// The user's agent-sandbox state directory (jobs/, scope/); hidden in every jail.
    pub state_dir: PathBuf,
    /// The agent-sandbox binary the job wrapper runs on the compute node.
    pub exe: PathBuf,
    /// The session's merged policy as JSON, frozen into every job; None until the session
    /// first uses Slurm (the launcher freezes it then), a job's own on a compute node.
    pub policy: Option<String>,
    /// How the chaperon spares the scheduler (the plan's, from `[slurm]`).
    #[serde(default)]
    pub governor: crate::governor::Settings,
    /// The project directory as the launcher found it when the session started (device,
    /// inode), recorded with each job: a job runs in that directory only. None where it could
    /// not be opened then; no job is submitted.
    #[serde(default)]
    pub project_id: Option<crate::identity::ProjectId>,
}

/// The session one chaperon serves: the launcher's hand-off and what the chaperon learns and
/// keeps while it runs.
pub struct Config {
    /// Whose session it is and where, as the launcher handed it over.
    pub who: Handoff,
    /// Where the real Slurm commands are (`/usr/bin`).
    pub slurm_bin: PathBuf,
    pub audit: Box<dyn Fn(&Audit) + Send + Sync>,
    /// The local cluster's name, learned on first use (`cluster_name`).
    pub cluster: ClusterName,
    /// The scheduler-load governor of the session's read-only calls (`who.governor`'s
    /// settings).
    pub governor: Governor,
    /// Whether Slurm here knows `--agent-sandbox` (the SPANK plugin is installed), learned on
    /// first use (`belt`, `plugin_options`), once `sbatch --help` answered.
    pub spank: std::sync::OnceLock<bool>,
    /// The user's record key (`seal`), read (or made) on first use.
    pub key: std::sync::OnceLock<std::sync::Arc<crate::seal::Key>>,
    /// The installed Slurm's release, learned once (`release`).
    pub release: crate::release::Learned,
}

impl Config {
    /// The local cluster's name (lower case, as Slurm keeps it): slurm.conf's `ClusterName`,
    /// else what `scontrol show config` reports (configless sites have no local slurm.conf).
    pub fn cluster_name(&self) -> Option<&str> {
        self.cluster.get(&self.slurm_bin, &self.who.home, &self.who.user)
    }

    /// The local cluster's name, or the refusal of a call that must record it with a job:
    /// a job recorded without it could not be told from another cluster's job of that id.
    pub fn cluster_to_record(&self) -> Result<String, crate::refusal::Refusal> {
        self.cluster_name().map(str::to_string).ok_or_else(|| {
            crate::refusal::Refusal::Failed(
                "cannot learn this cluster's name (ClusterName in slurm.conf, or `scontrol show config`), \
                 which the session records with each job: not submitted"
                    .into(),
            )
        })
    }

    /// `--agent-sandbox=DIR` for a job or step entering the jail with the job directory `dir`,
    /// where the cluster's SPANK plugin (slurm-plugins/) takes it: on the nodes it then refuses
    /// any task of the job that does not enter the jail. None where Slurm does not know the
    /// option (no plugin in plugstack.conf): the job runs as before. Where Slurm's answer
    /// cannot be had, the call is refused (`belt_state`): no tag, no submission.
    pub fn belt(&self, dir: &std::path::Path) -> Result<Option<String>, crate::refusal::Refusal> {
        Ok(self.belt_state()?.then(|| format!("--{SPANK_OPTION}={}", dir.display())))
    }

    /// The options of the site's SPANK plugins the chaperon knows of, which Slurm appends to
    /// sbatch's, srun's and salloc's own: the belt's, where it is installed. A prefix of one
    /// is that option there (or makes a prefix ambiguous), as for the real commands. Where it
    /// is not known yet and cannot be learnt, none: the call is refused by `belt_state` (the
    /// dispatcher asks it first for these commands), and `belt` refuses it again.
    pub fn plugin_options(&self) -> &'static [crate::getopt::LongOpt] {
        static BELT: [crate::getopt::LongOpt; 1] = [crate::getopt::BELT];
        match self.belt_state() {
            Ok(true) => &BELT,
            _ => &[],
        }
    }

    /// Whether Slurm here knows `--agent-sandbox`: `sbatch --help` lists it, asked once. An
    /// sbatch that fails or does not answer within 20 s gives no answer, which is no "no":
    /// the call is refused, since a job submitted without the tag where the site has the belt
    /// would run its tasks unchecked on the nodes, and asked again at the next call.
    pub fn belt_state(&self) -> Result<bool, crate::refusal::Refusal> {
        if let Some(known) = self.spank.get() {
            return Ok(*known);
        }
        // This host's own plugstack.conf, where it says so plainly, answers without running
        // sbatch (a session's first submission would otherwise wait for it).
        if let Some(known) = crate::slurm_conf::local().and_then(|conf| belt_in_local_plugstack(&conf)) {
            return Ok(*self.spank.get_or_init(|| known));
        }
        let mut cmd = self.command("sbatch");
        cmd.arg("--help").stdin(Io::null()).stderr(Io::null());
        let why = match crate::bounded::capture(cmd, 1 << 20, BELT_QUESTION_TIMEOUT) {
            Ok((out, status)) if status.success() => {
                return Ok(*self.spank.get_or_init(|| spank_option_listed(&String::from_utf8_lossy(&out))));
            }
            Ok((_, status)) => format!("`sbatch --help` failed ({status})"),
            Err(e) => e,
        };
        Err(crate::refusal::Refusal::Failed(format!(
            "cannot tell whether this cluster's Slurm takes the node belt's --{SPANK_OPTION} ({why}, {}): \
             nothing submitted, since a job without the tag could run unchecked on the nodes; try again, \
             or ask the admin to check that `sbatch --help` answers",
            self.real("sbatch").display()
        )))
    }

    /// The installed Slurm's release, which every call's options are read with: the real
    /// `sbatch --version` (local, no controller), asked once; the launcher asks it on a thread
    /// of its own as the session starts, so a call seldom waits for it. An sbatch that does
    /// not answer leaves it unknown: that call is read with 22.05's tables, whose options
    /// every later release has but a few it refuses itself (spelled in full, so never
    /// another option there), and the next call asks again.
    pub fn release(&self) -> Release {
        self.release.learn(|| self.installed_release()).unwrap_or(crate::release::R22_05)
    }

    /// From the state directory's cache when it names this very `sbatch` (a later session on
    /// this host asks nothing), else from `sbatch --version`, then kept there.
    fn installed_release(&self) -> Option<Release> {
        let sbatch = self.real("sbatch");
        let key = std::fs::metadata(&sbatch).ok().map(|m| crate::release::cache_key(&m));
        let cache = self.who.state_dir.join(RELEASE_CACHE);
        if let Some(k) = &key {
            let text = read_cache(&cache).unwrap_or_default();
            if let Some(r) = crate::release::cached(&String::from_utf8_lossy(&text), k) {
                return Some(r);
            }
        }
        let mut cmd = self.command("sbatch");
        cmd.arg("--version").stdin(Io::null()).stderr(Io::null());
        let (out, status) = crate::bounded::capture(cmd, 64 << 10, BELT_QUESTION_TIMEOUT).ok()?;
        let r = status.success().then(|| crate::release::parse_version(&String::from_utf8_lossy(&out)))??;
        if let Some(k) = key {
            // Best effort: without it the next session asks again.
            let _ = agent_sandbox_sys::file::write_atomic(&cache, format!("{k} {r}\n").as_bytes(), 0o600);
        }
        Some(r)
    }

    /// The user's record key, which seals every job directory's spec and scope record.
    pub fn key(&self) -> Result<std::sync::Arc<crate::seal::Key>, String> {
        if let Some(k) = self.key.get() {
            return Ok(k.clone());
        }
        let k = std::sync::Arc::new(crate::seal::Key::load_or_create(&self.who.state_dir)?);
        Ok(self.key.get_or_init(|| k).clone())
    }

    pub fn registry(&self) -> Registry {
        match self.key() {
            Ok(k) => Registry::with_key(&self.who.state_dir, k),
            // Read again there, and its failure reported by what reads the record.
            Err(_) => Registry::new(&self.who.state_dir),
        }
    }

    /// The real program, by absolute path: never looked up on a PATH.
    pub fn real(&self, name: &str) -> PathBuf {
        self.slurm_bin.join(name)
    }

    /// The real Slurm command `name`, ready to be given arguments: by absolute path, with the
    /// environment every real command runs with (nothing from the jail, nothing from the
    /// launcher beyond what locates Slurm: sbatch reads `SBATCH_*`, srun `SLURM_*`, and a jail
    /// must not be able to set options that way), `/` as its working directory (never the
    /// project: a relative name a Slurm command opens on the host side must not land where the
    /// jail plants symlinks), and dying with the chaperon.
    pub fn command(&self, name: &str) -> RealCommand {
        real_command(&self.slurm_bin, &self.who.home, &self.who.user, name)
    }
}

/// The real Slurm command `bin/name` with the environment every real command runs with (see
/// `Config::command`), for the chaperon and for the supervisor's own questions to Slurm. It
/// dies with the chaperon: an orphaned `srun` would keep running and hold the jail's output
/// open.
pub fn real_command(bin: &Path, home: &Path, user: &str, name: &str) -> RealCommand {
    let mut cmd = RealCommand::new(bin.join(name));
    cmd.current_dir("/");
    cmd.env("PATH", "/usr/bin:/bin").env("HOME", home).env("USER", user).env("LOGNAME", user).env("LANG", "C.UTF-8");
    if let Ok(conf) = std::env::var("SLURM_CONF") {
        cmd.env("SLURM_CONF", conf);
    }
    cmd
}

/// `real_command` without the death signal: for salloc, which must end by relinquishing its
/// allocation (its holding command's stdin closes with the chaperon), never by SIGKILL.
pub fn real_command_outliving(bin: &Path, home: &Path, user: &str, name: &str) -> RealCommand {
    let mut cmd = real_command(bin, home, user, name);
    cmd.outliving();
    cmd
}

/// How long `sbatch --help` may take to answer whether the belt is installed.
pub const BELT_QUESTION_TIMEOUT: Duration = Duration::from_secs(20);

/// The option the SPANK plugin registers (slurm-plugins/agent_sandbox.c).
pub const SPANK_OPTION: &str = crate::getopt::BELT_NAME;

/// Whether `sbatch --help` lists the plugin's option (under "Options provided by plugins").
/// Whether this host's plugstack.conf (slurm.conf's `PlugStackConfig`, else `plugstack.conf`
/// beside slurm.conf) loads the belt: Some(true) where a `required` line names
/// `agent_sandbox.so` (sbatch then takes its option or fails whole), Some(false) where the
/// file is there and names it nowhere, and None (ask `sbatch --help`) where the file is not
/// here, cannot be read, includes others, or loads the plugin `optional` (which Slurm skips
/// when it fails to load).
pub fn belt_in_local_plugstack(slurm_conf: &str) -> Option<bool> {
    let configured = crate::slurm_conf::value(slurm_conf, "PlugStackConfig").map(PathBuf::from);
    let path = configured.unwrap_or_else(|| {
        let conf = std::env::var_os("SLURM_CONF").map_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"), PathBuf::from);
        conf.with_file_name("plugstack.conf")
    });
    let text = std::fs::read_to_string(path).ok()?;
    belt_in_plugstack(&text)
}

/// `belt_in_local_plugstack` for the file's text.
fn belt_in_plugstack(text: &str) -> Option<bool> {
    let mut loaded = false;
    for line in text.lines() {
        let mut words = line.split('#').next().unwrap_or("").split_whitespace();
        let Some(first) = words.next() else { continue };
        if first.eq_ignore_ascii_case("include") {
            return None;
        }
        let names_belt =
            words.next().is_some_and(|p| Path::new(p).file_name().is_some_and(|n| n == "agent_sandbox.so"));
        match (first, names_belt) {
            ("required", true) => loaded = true,
            (_, true) => return None,
            _ => {}
        }
    }
    Some(loaded)
}

pub fn spank_option_listed(help: &str) -> bool {
    help.lines().any(|l| l.trim_start().starts_with(&format!("--{SPANK_OPTION}=")))
}

/// The local cluster's name, kept once it is learnt (`local_cluster_name`); a lookup that
/// fails is tried again at the next use.
#[derive(Debug, Default)]
pub struct ClusterName(std::sync::OnceLock<String>);

impl ClusterName {
    /// The name, learnt with the real commands in `bin` as `user` where not known yet.
    pub fn get(&self, bin: &Path, home: &Path, user: &str) -> Option<&str> {
        if self.0.get().is_none() {
            if let Some(name) = local_cluster_name(bin, home, user) {
                let _ = self.0.set(name);
            }
        }
        self.0.get().map(String::as_str)
    }
}

/// The local cluster's name (lower case, as Slurm keeps it): slurm.conf's `ClusterName`, else
/// what `scontrol show config` (the real one in `bin`) reports: configless sites have no local
/// slurm.conf.
fn local_cluster_name(bin: &Path, home: &Path, user: &str) -> Option<String> {
    let from_conf = crate::slurm_conf::local().and_then(|t| cluster_name_in(&t));
    from_conf.or_else(|| {
        let mut cmd = real_command(bin, home, user, "scontrol");
        cmd.args(["show", "config"]).stdin(Io::null()).stderr(Io::null());
        let (out, _) = crate::bounded::capture(cmd, 4 << 20, Duration::from_secs(20)).ok()?;
        cluster_name_in(&String::from_utf8_lossy(&out))
    })
}

/// `ClusterName` from slurm.conf text or `scontrol show config` output, lower case, as
/// Slurm keeps it.
pub fn cluster_name_in(text: &str) -> Option<String> {
    crate::slurm_conf::word(text, "ClusterName").map(str::to_ascii_lowercase)
}

/// The state directory's cache of the installed Slurm's release (`KEY YY.MM`, see
/// `release::cache_key`): hidden from every jail, like the rest of the state directory.
const RELEASE_CACHE: &str = "slurm-release";

fn read_cache(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    let mut text = Vec::new();
    f.take(4096).read_to_end(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugstack_conf_answers_for_the_belt_only_where_it_says_so_plainly() {
        let belt = "required /usr/lib/slurm/agent_sandbox.so exe=/usr/bin/agent-sandbox\n";
        assert_eq!(belt_in_plugstack(&format!("# site plugins\n{belt}optional /x/other.so\n")), Some(true));
        assert_eq!(belt_in_plugstack("optional /x/other.so\n# required /x/agent_sandbox.so\n"), Some(false));
        assert_eq!(belt_in_plugstack(""), Some(false));
        // What the file alone cannot say: sbatch is asked.
        assert_eq!(belt_in_plugstack("optional /usr/lib/slurm/agent_sandbox.so\n"), None);
        assert_eq!(belt_in_plugstack(&format!("{belt}include /etc/slurm/plugstack.conf.d/*\n")), None);
        assert_eq!(belt_in_plugstack("include /etc/slurm/plugstack.conf.d/*.conf\n"), None);
    }
}
