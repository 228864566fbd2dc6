//! The TOML schema of one policy layer (site, user, admin, profile, `--policy` file).
//! Every field is optional: a layer says only what it changes. Unknown keys are errors.
//! Merging layers into an effective policy is `merge.rs`'s job, not this file's.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One parsed config file. `projects` and `agent` are only meaningful in some layers; the
/// loader rejects them where they do not belong.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    pub sandbox: Option<SandboxSection>,
    pub filesystem: Option<FsSection>,
    pub home: Option<HomeSection>,
    pub env: Option<EnvSection>,
    pub net: Option<NetSection>,
    pub process: Option<ProcessSection>,
    pub mail: Option<MailSection>,
    pub limits: Option<LimitsSection>,
    pub slurm: Option<SlurmSection>,
    /// Per-project tables of the user config, keyed by project path (`~` allowed).
    pub projects: Option<BTreeMap<String, Layer>>,
    /// Only in profiles: what the agent is.
    pub agent: Option<AgentSection>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    pub backend: Option<Backend>,
    /// Directories a project may live under. Default: `~` and common site roots.
    pub project_parents: Option<Vec<String>>,
    pub hostname: Option<String>,
    /// How hidden paths inside read-only trees are removed: one overlay mount with
    /// whiteouts (Linux 5.11+), or a tmpfs copy of the tree with one bind per entry.
    pub hide_with: Option<HideWith>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsSection {
    /// System and site trees bound read-only (allow-list). Missing paths are skipped.
    pub read: Option<Vec<String>>,
    /// Extra writable paths besides the project.
    pub write: Option<Vec<String>>,
    /// Paths that do not exist inside (ENOENT). A floor: entries cannot be removed.
    pub hide: Option<Vec<String>>,
    /// Single files shown as empty. A floor.
    pub hide_files: Option<Vec<String>>,
    /// Project-relative paths that stay read-only inside the writable project.
    pub protected: Option<Vec<String>>,
    /// Device globs bound into /dev.
    pub devices: Option<Vec<String>>,
    /// Device globs never bound (admin veto). A floor.
    pub deny_devices: Option<Vec<String>>,
    /// Let the jail make git repositories and change their config and hooks inside the
    /// project and the extra writable paths (off by default: the user's git outside would
    /// run what they name). An admin `false` forbids.
    pub nested_git: Option<bool>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HomeSection {
    pub access: Option<HomeAccess>,
    /// Home entries bound back read-only (relative to `~`).
    pub read: Option<Vec<String>>,
    /// Home entries bound back writable.
    pub write: Option<Vec<String>>,
    /// Home files copied into the session (writable copy, changes vanish).
    pub seed: Option<Vec<String>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// Names or globs passed through even if a scrub pattern matches.
    pub keep: Option<Vec<String>>,
    /// Names or globs removed from the environment. A floor.
    pub scrub: Option<Vec<String>>,
    /// Variables set inside the jail.
    pub set: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetSection {
    pub mode: Option<NetMode>,
    pub fallback: Option<Fallback>,
    /// A curated allow-list (`agents`, or `agents@VERSION`): `*` blocked, its hosts allowed.
    pub preset: Option<String>,
    /// Destinations allowed (exceptions to `block`); used by the network modes.
    pub allow: Option<Vec<String>>,
    /// Destinations blocked. A floor.
    pub block: Option<Vec<String>>,
    /// Resolvers the filtered mode forwards the jail's DNS to (default: the host's
    /// resolv.conf). An admin setting is final.
    pub dns: Option<Vec<std::net::IpAddr>>,
    /// Host loopback ports the jail may reach through its gateway address (`--host-port`).
    /// An admin list bounds what users may open.
    pub host_ports: Option<Vec<u16>>,
    /// Jail ports published on host loopback (`--publish`), filtered mode. An admin list
    /// bounds what users may publish.
    pub publish: Option<Vec<u16>>,
    /// Jail ports the session's own Slurm jobs reach from the compute nodes (`--job-port`):
    /// the supervisor listens on the login node's cluster-facing address, on a port it picks,
    /// and admits only nodes that run a job of the project. An admin list bounds them.
    pub job_ports: Option<Vec<u16>>,
    /// The address those listeners use (default: the one routed toward the Slurm controller).
    /// An admin setting is final.
    pub job_address: Option<String>,
    /// Floor RFC 1918, CGNAT and ULA destinations in `filtered` mode too (`proxied` always
    /// does). An admin `true` is final.
    pub deny_private: Option<bool>,
    /// The session network: the jails of one session (its own and its jobs') reach one
    /// another's ports, and nothing else reaches them (on by default). An admin `false` is final.
    pub session_network: Option<bool>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSection {
    /// Allow the jailed command to create nested user namespaces (off by default).
    pub nested_userns: Option<bool>,
    /// Landlock backend: let the jailed command create unix sockets (`socket(AF_UNIX)`),
    /// and so connect to every pathname unix socket of the host (off by default).
    pub unix_sockets: Option<bool>,
    /// Landlock backend: open the host's `/dev/pts` to the command, so it can make new
    /// terminals (tmux, script, node-pty), and with it the user's other terminals (off by
    /// default).
    pub host_terminals: Option<bool>,
}

/// Per-session limits. In the admin file, maxima: a user may ask for less, never more.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Memory: `512M`, `4G` (with rlimits: each process's data segment and heap).
    pub mem: Option<String>,
    /// CPUs the session's processes run on (with rlimits: their affinity, not enforced).
    pub cpus: Option<u32>,
    /// Processes and threads at once.
    pub pids: Option<u64>,
    /// Wall-clock time of the session: `90s`, `30m`, `8h`.
    pub timeout: Option<String>,
}

/// How the chaperon spares the scheduler. In the admin file, the interval is a minimum and
/// the rate a maximum: a user may ask for a gentler client, never a harder one.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    /// How long a read-only query's answer is reused for the same call: `15s`, `1m`, `0`.
    pub query_interval: Option<String>,
    /// Real read-only calls to Slurm per minute, at most.
    pub queries_per_minute: Option<u32>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailSection {
    pub block: Option<MailBlock>,
}

#[derive(Debug, Default, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    pub name: Option<String>,
    /// The command line the profile runs (`agent-sandbox codex ARGS` appends ARGS).
    pub command: Option<Vec<String>>,
    /// The agent's instruction file, for the sandbox notice overlay.
    pub instructions: Option<String>,
    pub description: Option<String>,
    /// API keys the supervisor adds to the agent's requests, so that the key itself stays
    /// outside the jail (`filtered` mode).
    pub credentials: Option<Vec<Credential>>,
    /// What in the agent's writable home directories stays writable and persists: its
    /// sessions, history, logins, caches, databases (home-relative; `*` and `?` in the last
    /// component). Allow-listed: everything else there is the session's own (an overlay whose
    /// writes are dropped at exit, or read-only), whatever its name, since what the agent runs
    /// or obeys outside later (settings with hooks, MCP servers, plugins, scripts) must not be
    /// the jail's to change (`plan::agent_home`). A missing directory (trailing `/`), JSON or
    /// `.jsonl` file is made before the session.
    pub state: Option<Vec<String>>,
    /// Entries the agent rewrites or makes while it runs, whose changes are dropped at exit
    /// (settings it writes back, scripts it runs before each command). They are the session's
    /// own like everything not in `state`; listed, they also get a writable copy (a file) or
    /// an empty tmpfs (a directory) where the directory has to be read-only.
    pub session: Option<Vec<String>>,
    /// Accepted for profiles written before the allow-list; nothing outside `state` can be
    /// made to persist, so the names are not needed.
    pub guard: Option<Vec<String>>,
    /// Files of the agent's own given as a copy for the session, of which only the listed
    /// keys go back to your file at exit (keys that cannot run code).
    pub merge: Option<Vec<MergeSpec>>,
}

/// A JSON file the agent rewrites (`~/.claude.json`), given as a session copy; at exit the
/// listed keys of the copy are written into your file, nothing else.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MergeSpec {
    /// Home-relative; one of the profile's `home.write` files.
    pub file: String,
    /// Dotted key paths (`numStartups`, `projects.*.lastCost`: `*` is any key at its level;
    /// `*[type=oauth]`: only objects whose `type` is `oauth`).
    pub keys: Vec<String>,
}

/// An API key kept outside the jail: the agent talks plain HTTP to an endpoint of the
/// supervisor, which sends each request on over TLS to the provider with the key added.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// The variable holding the key in your environment; inside the jail it holds a stand-in.
    pub env: String,
    /// The variable the agent reads its API endpoint from; inside the jail it names the
    /// supervisor's endpoint.
    pub base_url_env: String,
    /// The provider's endpoint (`https://` only), unless `base_url_env` is set (to an
    /// `https://` URL) in your environment.
    pub upstream: String,
    /// The request header that carries the key (`authorization`, `x-api-key`...).
    pub header: String,
    /// What comes before the key in that header (`"Bearer "`).
    #[serde(default)]
    pub prefix: String,
    /// Arguments put right after the agent's program when the key is injected, `{url}` being
    /// the endpoint: for an agent that takes its endpoint from its config, not a variable
    /// (codex: `["-c", "openai_base_url=\"{url}\""]`).
    #[serde(default)]
    pub args: Vec<String>,
}

macro_rules! ordered_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, Hash)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($variant),+ }
        impl $name {
            #[allow(dead_code)]
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(format!(
                        "`{s}` is not one of: {}",
                        [$($text),+].join(", ")
                    )),
                }
            }
        }
    };
}

ordered_enum!(
    /// Network modes, least strict first: the stricter of user and admin wins.
    NetMode { Open = "open", Filtered = "filtered", Proxied = "proxied", Isolated = "isolated" }
);
ordered_enum!(
    /// Home directory modes, least strict first.
    HomeAccess { Write = "write", Read = "read", Tmpwrite = "tmpwrite", Restricted = "restricted" }
);
ordered_enum!(
    /// What to do when the asked network mode cannot run here, least strict first.
    Fallback { Open = "open", Stricter = "stricter", Strict = "strict" }
);
ordered_enum!(
    /// Mail-block stubs, least strict first.
    MailBlock { Off = "off", Auto = "auto", On = "on" }
);
ordered_enum!(
    /// Isolation backend. Not ordered by strictness: an admin value simply wins.
    Backend { Auto = "auto", Userns = "userns", Landlock = "landlock" }
);
ordered_enum!(
    /// How hidden paths inside read-only trees vanish. Equally strict; an admin value wins.
    HideWith { Overlay = "overlay", Rebuild = "rebuild" }
);
