//! The jail's environment: the launcher's variables minus the secrets (unless kept), plus
//! the variables the jail defines. A variable is a secret when an `env.scrub` pattern matches
//! its name, when a word of its name names one (`meaning`), or when its value is a provider's
//! key (`key_forms`). Values never appear in `policy show` or `--dry-run`, only names and the
//! rule that scrubbed each.

mod key_forms;
mod meaning;

pub use key_forms::{KEY_FORMS, VALUE_FORMS};
pub use meaning::{HARMLESS, SECRET_ENDINGS, SECRET_LAST_WORDS, SECRET_PAIRS, SECRET_WORDS};

use crate::glob::Pattern;
use crate::policy::{Policy, Sourced};
use serde::Serialize;
use std::path::Path;

pub struct EnvPlan {
    pub vars: Vec<(String, String)>,
    /// Names removed, each with the rule that removed it (for `--dry-run`; never the values).
    pub removed: Vec<Scrubbed>,
}

/// A variable of the launcher's that the jail does not get, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scrubbed {
    pub name: String,
    pub rule: ScrubRule,
}

/// Why a variable was scrubbed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum ScrubRule {
    /// An `env.scrub` entry, from `layer`; `admin`: the admin's, which no user's keep passes.
    Pattern { pattern: String, layer: String, admin: bool },
    /// A word of the name that names a secret (`KEY` in `API_KEY`), as written there.
    Word { word: String },
    /// The value holds a provider's key (`GitHub token`), whatever the name.
    KeyForm { form: &'static str },
}

impl std::fmt::Display for ScrubRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScrubRule::Pattern { pattern, layer, admin: false } => write!(f, "env.scrub `{pattern}` [{layer}]"),
            ScrubRule::Pattern { pattern, layer, admin: true } => {
                write!(f, "env.scrub `{pattern}` [{layer}, locked by admin]")
            }
            ScrubRule::Word { word } => write!(f, "the word `{word}` in its name"),
            ScrubRule::KeyForm { form } => write!(f, "its value holds a {form}"),
        }
    }
}

impl std::fmt::Display for Scrubbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.rule)
    }
}

pub struct JailVars<'a> {
    pub user: &'a str,
    pub home: &'a Path,
    pub shell: &'a Path,
    pub project: &'a Path,
    pub cwd: &'a Path,
    pub net_mode: &'a str,
    /// The jail reaches out through the proxies on its loopback (`proxied`).
    pub proxies: bool,
    pub backend: &'a str,
    pub session: &'a str,
    /// The session's job services (`--job-port`): jail port, outside address.
    pub job_endpoints: &'a [(u16, std::net::SocketAddr)],
}

/// Variables the launcher always drops: they point at host things that do not exist inside
/// (old cwd, the host's runtime dir) or would confuse the agent about where it runs.
const ALWAYS_DROPPED: &[&str] = &["OLDPWD", "PWD", "XDG_RUNTIME_DIR", "AGENT_SANDBOX_LOG"];

/// Tools that keep a cache (and logs) in the home and fail when they cannot write it: where
/// the jail's home is not writable (the Landlock backend; `home.access` `read` or
/// `restricted`), each is pointed at a directory of the session, unless the user set the
/// variable. (npm refuses to install anything without a writable cache.)
pub const SESSION_CACHES: &[(&str, &str)] = &[("npm_config_cache", ".npm")];

/// Points the tools of `SESSION_CACHES` under `dir`, where the user has not pointed them.
pub fn session_caches(vars: &mut Vec<(String, String)>, launcher_env: &[(String, String)], dir: &Path) {
    for (var, sub) in SESSION_CACHES {
        if !launcher_env.iter().any(|(k, _)| k == var) {
            vars.retain(|(k, _)| k != var);
            vars.push((var.to_string(), dir.join(sub).display().to_string()));
        }
    }
    vars.sort();
}

/// `env.scrub` or `env.keep` entries compiled once, each with where it came from.
struct SourcedPatterns<'p> {
    entries: Vec<(Pattern, &'p Sourced<String>)>,
}

impl<'p> SourcedPatterns<'p> {
    fn new(entries: impl Iterator<Item = &'p Sourced<String>>, case_insensitive: bool) -> Self {
        SourcedPatterns { entries: entries.map(|e| (Pattern::new(&e.value, case_insensitive), e)).collect() }
    }

    fn matches(&self, name: &str) -> bool {
        self.entries.iter().any(|(p, _)| p.matches(name))
    }

    /// The first entry matching `name`, as the rule that scrubs it (for scrub entries).
    fn rule(&self, name: &str) -> Option<ScrubRule> {
        let (_, e) = self.entries.iter().find(|(p, _)| p.matches(name))?;
        Some(ScrubRule::Pattern { pattern: e.value.clone(), layer: e.source.to_string(), admin: e.locked })
    }
}

/// Why `name=value` is a secret the built-in rules see, short of a keep: an `env.scrub`
/// pattern, a word of its name (unless the name is a harmless one), a key in its value.
fn scrub_rule(name: &str, value: &str, patterns: &SourcedPatterns<'_>) -> Option<ScrubRule> {
    if let Some(rule) = patterns.rule(name) {
        return Some(rule);
    }
    if let Some(word) = meaning::secret_word(name) {
        return Some(ScrubRule::Word { word: word.to_string() });
    }
    key_forms::find(value).map(|form| ScrubRule::KeyForm { form })
}

/// The jail's variables. Precedence, highest first: an admin `env.scrub` entry (passed only by
/// the admin's own `env.keep`); any layer's `env.keep` (and `--env NAME`); the other
/// `env.scrub` entries, the words of a name and a key in a value.
pub fn build(launcher_env: &[(String, String)], policy: &Policy, j: &JailVars<'_>) -> EnvPlan {
    let keep_p: Vec<Pattern> = policy.env_keep.iter().map(|p| Pattern::new(&p.value, false)).collect();
    let scrub_p = SourcedPatterns::new(policy.env_scrub.iter(), true);
    // The admin's scrub entries are a floor: only the admin's own keep entries pass a name
    // they match, never a user's keep, set or --env.
    let admin_keep_p = SourcedPatterns::new(policy.env_keep.iter().filter(|p| p.locked), false);
    let admin_scrub_p = SourcedPatterns::new(policy.env_scrub.iter().filter(|p| p.locked), true);
    let admin_floor = |k: &str| match admin_keep_p.matches(k) {
        true => None,
        false => admin_scrub_p.rule(k),
    };
    let keep = |k: &str| keep_p.iter().any(|p| p.matches(k));
    let mut vars = vec![];
    let mut removed = vec![];
    for (k, v) in launcher_env {
        if ALWAYS_DROPPED.contains(&k.as_str()) || k.starts_with("AGENT_SANDBOX") {
            continue;
        }
        let rule = match admin_floor(k) {
            Some(rule) => Some(rule),
            None if keep(k) => None,
            None => scrub_rule(k, v, &scrub_p),
        };
        match rule {
            Some(rule) => removed.push(Scrubbed { name: k.clone(), rule }),
            None => vars.push((k.clone(), v.clone())),
        }
    }
    fn put(vars: &mut Vec<(String, String)>, k: &str, v: String) {
        vars.retain(|(name, _)| name != k);
        vars.push((k.to_string(), v));
    }
    let has_path = vars.iter().any(|(k, _)| k == "PATH");
    let mut set = |k: &str, v: String| put(&mut vars, k, v);
    set("HOME", j.home.display().to_string());
    set("USER", j.user.to_string());
    set("LOGNAME", j.user.to_string());
    set("SHELL", j.shell.display().to_string());
    set("PWD", j.cwd.display().to_string());
    set("TMPDIR", "/tmp".into());
    set("AGENT_SANDBOX", "1".into());
    set("AGENT_SANDBOX_PROJECT", j.project.display().to_string());
    set("AGENT_SANDBOX_NET", j.net_mode.to_string());
    set("AGENT_SANDBOX_BACKEND", j.backend.to_string());
    if !j.session.is_empty() {
        set("AGENT_SANDBOX_SESSION", j.session.to_string());
    }
    // What a server in the jail advertises to the project's jobs (a Dask scheduler's
    // contact address): the login node's listener that forwards to its port.
    for (port, outside) in j.job_endpoints {
        set(&format!("AGENT_SANDBOX_JOB_PORT_{port}"), outside.to_string());
    }
    if j.proxies {
        // Both spellings: curl and Go read the lower case, most others the upper; socks5h
        // makes clients send names, so the host side resolves and matches them.
        let http = format!("http://127.0.0.1:{}", crate::netrules::addr::HTTP_PORT);
        let socks = format!("socks5h://127.0.0.1:{}", crate::netrules::addr::SOCKS_PORT);
        for (k, v) in [("HTTP_PROXY", &http), ("HTTPS_PROXY", &http), ("ALL_PROXY", &socks)] {
            set(k, v.clone());
            set(&k.to_ascii_lowercase(), v.clone());
        }
        set("NO_PROXY", "localhost,127.0.0.1,::1".into());
        set("no_proxy", "localhost,127.0.0.1,::1".into());
    }
    if !has_path {
        set("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".into());
    }
    for (k, v) in &policy.env_set {
        if let Some(rule) = admin_floor(k).filter(|_| !v.locked) {
            removed.push(Scrubbed { name: k.clone(), rule });
            continue;
        }
        // `~/x` names a file in the user's home (a profile cannot know where that is).
        let value = match v.value.strip_prefix("~/") {
            Some(rest) => j.home.join(rest).display().to_string(),
            None => v.value.clone(),
        };
        set(k, value);
    }
    vars.sort();
    removed.sort_by(|a, b| a.name.cmp(&b.name));
    EnvPlan { vars, removed }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{merge, parse_layer, FileKind, Source, SourcedLayer};
    use Verdict::{Kept, Scrubbed};

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Verdict {
        Scrubbed,
        Kept,
    }

    /// Real variable names from tools' documentation (CI systems, clouds, model providers,
    /// package registries, HPC tools, desktops and shells), each with what the built-in
    /// policy does with it and why. Values here are plain (`x`): the names decide.
    const NAMES: &[(&str, Verdict, &str)] = &[
        // GitHub Actions and the gh CLI
        ("GITHUB_TOKEN", Scrubbed, "TOKEN: the workflow's token"),
        ("GITHUB_ACTIONS", Kept, "a flag (`true`)"),
        ("GITHUB_SHA", Kept, "a commit"),
        ("GITHUB_REF", Kept, "a branch or tag"),
        ("GITHUB_REPOSITORY", Kept, "owner/name"),
        ("GITHUB_WORKSPACE", Kept, "a directory"),
        ("GITHUB_RUN_ID", Kept, "a number"),
        ("GITHUB_EVENT_PATH", Kept, "the path of the event's JSON"),
        ("GITHUB_OUTPUT", Kept, "a file path"),
        ("ACTIONS_RUNTIME_TOKEN", Scrubbed, "TOKEN: the runner's token"),
        ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", Scrubbed, "TOKEN: mints OIDC tokens"),
        ("ACTIONS_ID_TOKEN_REQUEST_URL", Scrubbed, "TOKEN: half of the OIDC request, gone with the other half"),
        ("ACTIONS_CACHE_URL", Kept, "a URL without a credential"),
        ("RUNNER_TEMP", Kept, "a directory"),
        ("RUNNER_OS", Kept, "`Linux`"),
        ("GH_TOKEN", Scrubbed, "TOKEN (and `*_TOKEN`)"),
        ("GH_ENTERPRISE_TOKEN", Scrubbed, "TOKEN"),
        ("GITHUB_PAT", Scrubbed, "PAT: a personal access token (R's remotes, usethis)"),
        ("GH_HOST", Kept, "a host name"),
        // GitLab CI
        ("CI", Kept, "a flag (`true`); no word"),
        ("CI_JOB_TOKEN", Scrubbed, "TOKEN"),
        ("CI_REGISTRY_PASSWORD", Scrubbed, "PASSWORD"),
        ("CI_COMMIT_SHA", Scrubbed, "`CI_*`: GitLab's predefined set, some of it tokens, goes whole"),
        ("CI_DEPLOY_PASSWORD", Scrubbed, "PASSWORD"),
        ("GITLAB_CI", Scrubbed, "`GITLAB_*`"),
        ("GITLAB_TOKEN", Scrubbed, "TOKEN"),
        // Jenkins
        ("BUILD_NUMBER", Kept, "a number"),
        ("JOB_NAME", Kept, "a name"),
        ("WORKSPACE", Kept, "a directory"),
        ("JENKINS_URL", Scrubbed, "`JENKINS_*`"),
        ("JENKINS_API_TOKEN", Scrubbed, "TOKEN"),
        // Azure Pipelines
        ("SYSTEM_ACCESSTOKEN", Scrubbed, "ACCESSTOKEN ends in TOKEN: the pipeline's OAuth token"),
        ("BUILD_SOURCEBRANCH", Kept, "a branch"),
        ("SYSTEM_TEAMPROJECT", Kept, "a project name"),
        ("AGENT_OS", Kept, "`Linux`"),
        ("TF_BUILD", Kept, "a flag (`True`)"),
        ("AZURE_DEVOPS_EXT_PAT", Scrubbed, "PAT (and `AZURE_*`)"),
        // CircleCI, Travis, Buildkite, Bitbucket, Drone, code-quality services
        ("CIRCLE_BRANCH", Kept, "a branch"),
        ("CIRCLE_TOKEN", Scrubbed, "TOKEN"),
        ("CIRCLECI", Kept, "a flag (`true`); `CIRCLECI_*` needs the underscore"),
        ("TRAVIS_BRANCH", Kept, "a branch"),
        ("TRAVIS_SECURE_ENV_VARS", Kept, "a flag; SECURE is no secret word"),
        ("BUILDKITE_AGENT_ACCESS_TOKEN", Scrubbed, "TOKEN (and `BUILDKITE_*`)"),
        ("BITBUCKET_STEP_OIDC_TOKEN", Scrubbed, "TOKEN"),
        ("BITBUCKET_BRANCH", Kept, "a branch"),
        ("DRONE_BRANCH", Kept, "a branch"),
        ("CODECOV_TOKEN", Scrubbed, "TOKEN"),
        ("COVERALLS_REPO_TOKEN", Scrubbed, "TOKEN"),
        ("SONAR_TOKEN", Scrubbed, "TOKEN"),
        ("SNYK_TOKEN", Scrubbed, "TOKEN"),
        // Clouds
        ("AWS_ACCESS_KEY_ID", Scrubbed, "KEY (and `AWS_*`)"),
        ("AWS_SECRET_ACCESS_KEY", Scrubbed, "SECRET, KEY"),
        ("AWS_SESSION_TOKEN", Scrubbed, "SESSION, TOKEN"),
        ("AWS_REGION", Scrubbed, "`AWS_*`: the family goes whole (a region is no secret)"),
        ("AWS_PROFILE", Scrubbed, "`AWS_*`"),
        ("GOOGLE_APPLICATION_CREDENTIALS", Scrubbed, "CREDENTIALS: a key file's path"),
        ("CLOUDSDK_AUTH_ACCESS_TOKEN", Scrubbed, "AUTH, TOKEN"),
        ("CLOUDSDK_CORE_PROJECT", Kept, "a project id"),
        ("GOOGLE_CLOUD_PROJECT", Scrubbed, "`GOOGLE_CLOUD_*`"),
        ("AZURE_CLIENT_SECRET", Scrubbed, "SECRET"),
        ("AZURE_CLIENT_ID", Scrubbed, "`AZURE_*`"),
        ("ARM_CLIENT_SECRET", Scrubbed, "SECRET (Terraform's azurerm)"),
        ("ARM_SUBSCRIPTION_ID", Kept, "an id, no credential"),
        ("ARM_TENANT_ID", Kept, "an id, no credential"),
        ("DIGITALOCEAN_ACCESS_TOKEN", Scrubbed, "TOKEN"),
        ("HCLOUD_TOKEN", Scrubbed, "TOKEN"),
        ("LINODE_CLI_TOKEN", Scrubbed, "TOKEN"),
        ("OS_PASSWORD", Scrubbed, "PASSWORD (OpenStack)"),
        ("OS_USERNAME", Kept, "a user name"),
        ("OS_AUTH_URL", Scrubbed, "AUTH: OpenStack's credential set; pass it with --env"),
        ("OS_PROJECT_NAME", Kept, "a project name"),
        ("OS_APPLICATION_CREDENTIAL_SECRET", Scrubbed, "CREDENTIAL, SECRET"),
        ("CLOUDFLARE_API_TOKEN", Scrubbed, "TOKEN"),
        ("HEROKU_API_KEY", Scrubbed, "KEY"),
        ("VERCEL_TOKEN", Scrubbed, "TOKEN"),
        ("NETLIFY_AUTH_TOKEN", Scrubbed, "AUTH, TOKEN"),
        ("FLY_API_TOKEN", Scrubbed, "TOKEN"),
        ("IBMCLOUD_API_KEY", Scrubbed, "KEY"),
        ("OCI_CLI_KEY_FILE", Scrubbed, "KEY: the signing key's path"),
        ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", Scrubbed, "KEY, SECRET"),
        ("TF_TOKEN_app_terraform_io", Scrubbed, "TOKEN (Terraform's host tokens)"),
        ("TF_VAR_db_password", Scrubbed, "password"),
        ("TF_VAR_region", Kept, "a region"),
        ("KUBECONFIG", Scrubbed, "`KUBECONFIG`: the cluster's credentials"),
        ("VAULT_TOKEN", Scrubbed, "TOKEN"),
        ("VAULT_ADDR", Scrubbed, "`VAULT_*`"),
        ("DOCKER_HOST", Scrubbed, "`DOCKER_*`: the daemon is root on the host"),
        ("DOCKER_AUTH_CONFIG", Scrubbed, "AUTH"),
        // Model providers, agents, ML tools
        ("OPENAI_API_KEY", Scrubbed, "KEY (the profiles keep it)"),
        ("OPENAI_BASE_URL", Kept, "an endpoint"),
        ("OPENAI_ORG_ID", Kept, "an id"),
        ("ANTHROPIC_API_KEY", Scrubbed, "KEY"),
        ("ANTHROPIC_AUTH_TOKEN", Scrubbed, "AUTH, TOKEN"),
        ("ANTHROPIC_MODEL", Kept, "a model name"),
        ("CLAUDE_CODE_OAUTH_TOKEN", Scrubbed, "OAUTH, TOKEN"),
        ("CLAUDE_CODE_USE_BEDROCK", Kept, "a switch"),
        ("GEMINI_API_KEY", Scrubbed, "KEY"),
        ("GOOGLE_API_KEY", Scrubbed, "KEY"),
        ("GOOGLE_GENAI_USE_VERTEXAI", Kept, "a switch"),
        ("MISTRAL_API_KEY", Scrubbed, "KEY"),
        ("COHERE_API_KEY", Scrubbed, "KEY"),
        ("GROQ_API_KEY", Scrubbed, "KEY"),
        ("OPENROUTER_API_KEY", Scrubbed, "KEY"),
        ("DEEPSEEK_API_KEY", Scrubbed, "KEY"),
        ("XAI_API_KEY", Scrubbed, "KEY"),
        ("TOGETHER_API_KEY", Scrubbed, "KEY"),
        ("REPLICATE_API_TOKEN", Scrubbed, "TOKEN"),
        ("AZURE_OPENAI_API_KEY", Scrubbed, "KEY"),
        ("HF_TOKEN", Scrubbed, "TOKEN"),
        ("HUGGING_FACE_HUB_TOKEN", Scrubbed, "TOKEN"),
        ("HF_HOME", Kept, "a directory"),
        ("HF_HUB_OFFLINE", Kept, "a switch"),
        (
            "HF_HUB_DISABLE_IMPLICIT_TOKEN",
            Scrubbed,
            "`*_TOKEN`: a pattern scrubs a harmless name too (pass it with --env)",
        ),
        ("TOKENIZERS_PARALLELISM", Kept, "TOKENIZERS is not TOKEN"),
        ("TRANSFORMERS_CACHE", Kept, "a directory"),
        ("WANDB_API_KEY", Scrubbed, "KEY"),
        ("WANDB_MODE", Kept, "`offline`"),
        ("MLFLOW_TRACKING_URI", Kept, "an endpoint"),
        ("MLFLOW_TRACKING_TOKEN", Scrubbed, "TOKEN"),
        ("MLFLOW_TRACKING_PASSWORD", Scrubbed, "PASSWORD"),
        ("LANGCHAIN_API_KEY", Scrubbed, "KEY"),
        ("LANGCHAIN_TRACING_V2", Kept, "a switch"),
        ("OLLAMA_HOST", Kept, "an address"),
        ("CODEX_HOME", Kept, "a directory"),
        ("AIDER_MODEL", Kept, "a model name"),
        ("JUPYTER_TOKEN", Scrubbed, "TOKEN"),
        ("JPY_SESSION_NAME", Kept, "harmless list: the notebook's path"),
        // Package registries and build tools
        ("NPM_TOKEN", Scrubbed, "TOKEN"),
        ("NODE_AUTH_TOKEN", Scrubbed, "AUTH, TOKEN"),
        ("npm_config__auth", Scrubbed, "auth: npm's base64 user:password"),
        ("npm_config_registry", Kept, "a URL"),
        ("npm_config_cache", Kept, "a directory"),
        ("NPM_CONFIG_USERCONFIG", Kept, "a file path"),
        ("YARN_NPM_AUTH_TOKEN", Scrubbed, "AUTH, TOKEN"),
        ("PIP_INDEX_URL", Kept, "an index URL (a password written into a URL is not recognised)"),
        ("PIP_EXTRA_INDEX_URL", Kept, "as PIP_INDEX_URL"),
        ("TWINE_USERNAME", Kept, "a user name"),
        ("TWINE_PASSWORD", Scrubbed, "PASSWORD"),
        ("PYPI_API_TOKEN", Scrubbed, "TOKEN"),
        ("UV_PUBLISH_TOKEN", Scrubbed, "TOKEN"),
        ("UV_INDEX_URL", Kept, "an index URL"),
        ("POETRY_PYPI_TOKEN_PYPI", Scrubbed, "TOKEN"),
        ("POETRY_HTTP_BASIC_PRIVATE_PASSWORD", Scrubbed, "PASSWORD"),
        ("CARGO_REGISTRY_TOKEN", Scrubbed, "TOKEN"),
        ("CARGO_REGISTRIES_CRATES_IO_PROTOCOL", Kept, "`sparse`"),
        ("CARGO_HOME", Kept, "a directory"),
        ("GEM_HOST_API_KEY", Scrubbed, "KEY"),
        ("HOMEBREW_GITHUB_API_TOKEN", Scrubbed, "TOKEN"),
        ("GOPROXY", Kept, "a URL list"),
        ("GOPRIVATE", Kept, "module patterns; PRIVATE alone is no secret word"),
        ("GONOSUMDB", Kept, "module patterns"),
        ("GOFLAGS", Kept, "flags"),
        ("ANACONDA_API_TOKEN", Scrubbed, "TOKEN"),
        ("CONDA_PREFIX", Kept, "a directory"),
        ("CONDA_DEFAULT_ENV", Kept, "an environment's name"),
        ("ORG_GRADLE_PROJECT_signingKey", Scrubbed, "Key, by its case change"),
        ("ORG_GRADLE_PROJECT_sonatypePassword", Scrubbed, "Password, by its case change"),
        ("MAVEN_GPG_PASSPHRASE", Scrubbed, "PASSPHRASE"),
        ("MAVEN_OPTS", Kept, "JVM options"),
        ("JF_ACCESS_TOKEN", Scrubbed, "TOKEN (JFrog)"),
        ("JULIA_PKG_SERVER", Kept, "a URL"),
        // HPC: Slurm, MPI, other schedulers, modules, containers, grid and Kerberos
        ("SLURM_JOB_ID", Kept, "a job's number"),
        ("SLURM_JOB_NODELIST", Kept, "node names"),
        ("SLURM_CPUS_PER_TASK", Kept, "a number"),
        ("SLURM_NTASKS", Kept, "a number"),
        ("SLURM_SUBMIT_DIR", Kept, "a directory"),
        ("SLURM_PROCID", Kept, "a rank"),
        ("SLURM_JOB_ACCOUNT", Kept, "an account's name"),
        ("SLURM_JWT", Scrubbed, "JWT: Slurm's REST token"),
        ("SLURM_SACK_SOCKET", Scrubbed, "sackd's socket, where it was moved: an authentication channel"),
        ("SLURM_CONF", Scrubbed, "`SLURM_CONF`: the host's config, hidden inside"),
        ("SBATCH_ACCOUNT", Kept, "an account's name"),
        ("SQUEUE_FORMAT", Kept, "a format"),
        ("PMIX_RANK", Kept, "a rank"),
        ("PMIX_SECURITY_MODE", Kept, "`munge,native`; SECURITY is no secret word"),
        ("PMI_FD", Kept, "a descriptor's number"),
        ("OMPI_MCA_btl", Kept, "transports"),
        ("I_MPI_PMI_LIBRARY", Kept, "a library's path"),
        ("UCX_TLS", Kept, "transports"),
        ("PBS_JOBID", Kept, "a job's id"),
        ("PBS_NODEFILE", Kept, "a file path"),
        ("LSB_JOBID", Kept, "a job's id"),
        ("SGE_TASK_ID", Kept, "a number"),
        ("MODULEPATH", Kept, "directories"),
        ("LMOD_CMD", Kept, "a program's path"),
        ("_ModuleTable001_", Kept, "Lmod's state (base64 of a Lua table)"),
        ("EBROOTPYTHON", Kept, "EasyBuild's install directory"),
        ("SPACK_ROOT", Kept, "a directory"),
        ("CUDA_VISIBLE_DEVICES", Kept, "device numbers"),
        ("OMP_NUM_THREADS", Kept, "a number"),
        ("APPTAINER_BIND", Kept, "bind paths"),
        ("APPTAINER_DOCKER_USERNAME", Kept, "a user name"),
        ("APPTAINER_DOCKER_PASSWORD", Scrubbed, "PASSWORD"),
        ("SINGULARITY_DOCKER_PASSWORD", Scrubbed, "PASSWORD"),
        ("APPTAINER_CACHEDIR", Kept, "a directory"),
        ("LM_LICENSE_FILE", Kept, "port@host of a license server"),
        ("KRB5CCNAME", Scrubbed, "`KRB5CCNAME`: the Kerberos ticket cache"),
        ("KRB5_CONFIG", Kept, "a config file's path"),
        ("KRB5_KTNAME", Scrubbed, "`KRB5_KTNAME`: a keytab's path"),
        ("X509_USER_PROXY", Scrubbed, "`X509_USER_PROXY`: a grid proxy, key included"),
        ("X509_CERT_DIR", Kept, "CA certificates"),
        ("BEARER_TOKEN_FILE", Scrubbed, "TOKEN (WLCG tokens)"),
        ("OIDC_SOCK", Scrubbed, "`OIDC_SOCK`: oidc-agent's socket, which hands out tokens"),
        ("GLOBUS_COMPUTE_CLIENT_SECRET", Scrubbed, "SECRET"),
        // Desktops, terminals, shells, editors
        ("XDG_SESSION_TYPE", Kept, "harmless list: `tty`, `x11`"),
        ("XDG_SESSION_ID", Kept, "harmless list: logind's session number"),
        ("XDG_SESSION_CLASS", Kept, "harmless list: `user`"),
        ("XDG_SESSION_DESKTOP", Kept, "harmless list: a desktop's name"),
        ("XDG_CURRENT_DESKTOP", Kept, "a desktop's name"),
        ("DESKTOP_SESSION", Kept, "harmless list: a desktop's name"),
        ("SESSION_MANAGER", Kept, "harmless list: an ICE address, useless without ~/.ICEauthority"),
        ("TERM_SESSION_ID", Kept, "harmless list: a terminal tab's id"),
        ("ITERM_SESSION_ID", Kept, "harmless list: a terminal tab's id"),
        ("WT_SESSION", Kept, "harmless list: Windows Terminal's tab id"),
        (
            "DBUS_SESSION_BUS_ADDRESS",
            Scrubbed,
            "`DBUS_SESSION_BUS_ADDRESS`: the desktop's bus can start programs outside",
        ),
        ("XAUTHORITY", Scrubbed, "`XAUTHORITY`: the X cookie's file"),
        ("DISPLAY", Kept, "a display's name"),
        ("WAYLAND_DISPLAY", Kept, "a socket's name"),
        ("GNOME_KEYRING_CONTROL", Scrubbed, "`GNOME_KEYRING_*`: the keyring daemon"),
        ("SSH_AUTH_SOCK", Scrubbed, "`SSH_*`: the agent's socket"),
        ("SSH_CONNECTION", Scrubbed, "`SSH_*`"),
        ("GPG_AGENT_INFO", Scrubbed, "`GPG_AGENT_INFO`: the agent's socket"),
        ("GPG_TTY", Kept, "a terminal's path"),
        ("GNUPGHOME", Scrubbed, "`GNUPGHOME`: the keyring's directory"),
        ("GPG_KEY", Kept, "harmless list: a release key's fingerprint (Python's images)"),
        ("KEYTIMEOUT", Kept, "zsh's key timeout: one word, not KEY"),
        ("HISTCONTROL", Kept, "a shell setting"),
        ("HISTFILE", Kept, "a file path"),
        ("PKG_CONFIG_PATH", Kept, "directories"),
        ("LD_LIBRARY_PATH", Kept, "directories"),
        ("TERM", Kept, "a terminal type"),
        ("LANG", Kept, "a locale"),
        ("LC_ALL", Kept, "a locale"),
        ("EDITOR", Kept, "a program"),
        ("TMUX", Scrubbed, "`TMUX`: the server's socket"),
        ("SUDO_USER", Scrubbed, "`SUDO_*`"),
        ("GIT_AUTHOR_NAME", Kept, "AUTHOR is not AUTH"),
        ("GIT_ASKPASS", Kept, "a program's path; ASKPASS is not PASS"),
        ("GIT_CONFIG_COUNT", Kept, "a number"),
        ("GIT_CONFIG_KEY_0", Kept, "harmless list: a config name; without it git refuses to start"),
        ("GIT_CONFIG_VALUE_0", Kept, "its value"),
        ("GIT_SSH_COMMAND", Kept, "a command"),
        ("GIT_TERMINAL_PROMPT", Kept, "a switch"),
        ("GCM_CREDENTIAL_STORE", Scrubbed, "CREDENTIAL: Git Credential Manager's store"),
        ("PASSWORD_STORE_DIR", Scrubbed, "PASSWORD: pass's store"),
        // Databases and services
        ("PGPASSWORD", Scrubbed, "PGPASSWORD ends in PASSWORD"),
        ("PGHOST", Kept, "a host"),
        ("PGUSER", Kept, "a user name"),
        ("MYSQL_PWD", Scrubbed, "PWD: MySQL's password"),
        ("DATABASE_URL", Scrubbed, "`DATABASE_URL`: credentials in a URL"),
        ("REDIS_URL", Scrubbed, "`REDIS_URL`"),
        ("SENTRY_DSN", Scrubbed, "DSN: a client key in a URL"),
        ("SLACK_WEBHOOK_URL", Scrubbed, "WEBHOOK: whoever has the URL may post"),
        ("SLACK_BOT_TOKEN", Scrubbed, "TOKEN"),
        ("DJANGO_SECRET_KEY", Scrubbed, "SECRET, KEY"),
        ("BW_SESSION", Scrubbed, "SESSION: Bitwarden's unlocked vault key"),
        ("OP_SESSION_my", Scrubbed, "SESSION: 1Password's session token"),
        ("OP_SERVICE_ACCOUNT_TOKEN", Scrubbed, "TOKEN"),
        // Generic names (the issue's own)
        ("API_KEY", Scrubbed, "KEY"),
        ("TOKEN", Scrubbed, "TOKEN"),
        ("SECRET_KEY", Scrubbed, "SECRET, KEY"),
        ("PRIVATE_KEY", Scrubbed, "KEY"),
        ("CREDENTIALS", Scrubbed, "CREDENTIALS"),
        ("apiKey", Scrubbed, "Key, by its case change"),
        ("AUTH", Scrubbed, "AUTH"),
        ("SESSION", Scrubbed, "SESSION"),
        ("COOKIE_SECRET", Scrubbed, "COOKIE, SECRET"),
        ("DB_PASS", Scrubbed, "PASS"),
        ("API_KEY2", Scrubbed, "KEY, a digit apart"),
        // Red team 32 R7: passwords and seeds the words missed
        ("SSHPASS", Scrubbed, "SSHPASS: sshpass -e's password"),
        ("LDAP_BIND_PW", Scrubbed, "PW as the last word: OpenLDAP's bind password"),
        ("ADMIN_PW", Scrubbed, "PW as the last word"),
        ("ROOT_PW", Scrubbed, "PW as the last word"),
        ("PW", Scrubbed, "PW alone is the last word"),
        ("PW_TEST_HTML_REPORT_OPEN", Kept, "Playwright's switch: PW first is no password"),
        ("PWDEBUG", Kept, "Playwright's debug switch: one word, not PW"),
        ("KEYSTOREPASS", Scrubbed, "ends in STOREPASS: a Java keystore's password"),
        ("STOREPASS", Scrubbed, "STOREPASS"),
        ("KEYPASS", Scrubbed, "KEYPASS: a keystore key's password"),
        ("ANDROID_KEYPASS", Scrubbed, "KEYPASS"),
        ("MASTERKEY", Scrubbed, "MASTERKEY"),
        ("MNEMONIC", Scrubbed, "MNEMONIC: a wallet's recovery words"),
        ("WALLET_MNEMONIC", Scrubbed, "MNEMONIC"),
        ("SEED_PHRASE", Scrubbed, "SEED then PHRASE: a wallet's recovery phrase"),
        ("TOTP_SEED", Scrubbed, "TOTP then SEED: every one-time code is made from it"),
        ("MFA_SEED", Scrubbed, "MFA then SEED"),
        ("RECOVERY_CODES", Scrubbed, "RECOVERY then CODES: a login's recovery codes"),
        ("PEPPER", Scrubbed, "PEPPER: the hashes' secret besides the salt"),
        ("SALT", Kept, "a salt is stored beside each hash in the clear: no secret"),
        ("RANDOM_SEED", Kept, "SEED alone: a reproducible run's seed"),
        ("PYTHONHASHSEED", Kept, "one word: Python's hash seed"),
        ("EXIT_CODES", Kept, "CODES alone"),
        // Everyday variables the jail's tools need
        ("VIRTUAL_ENV", Kept, "a directory"),
        ("PYTHONPATH", Kept, "directories"),
        ("JAVA_HOME", Kept, "a directory"),
        ("NODE_OPTIONS", Kept, "options"),
        ("NODE_EXTRA_CA_CERTS", Kept, "CA certificates"),
        ("SSL_CERT_FILE", Kept, "CA certificates"),
        ("REQUESTS_CA_BUNDLE", Kept, "CA certificates"),
        ("HTTPS_PROXY", Kept, "a proxy (without a password in it)"),
        ("NO_PROXY", Kept, "host names"),
        ("COLORTERM", Kept, "`truecolor`"),
    ];

    /// Values under names the words keep, each with what the built-in policy does with it
    /// and why: the value decides.
    const VALUES: &[(&str, &str, Verdict, &str)] = &[
        ("NGC", "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", Scrubbed, "NVIDIA's key"),
        ("PYPI_UPLOAD", "pypi-AgEIcHlwaS5vcmcCJGI4YmNhMDA5LTg0", Scrubbed, "a PyPI token by its macaroon's start"),
        ("REPO", "https://CANARYGHTOKENUSER@github.com/o/r.git", Scrubbed, "a token as the URL's user"),
        ("REPO_URL", "https://git@github.com/o/r.git", Kept, "`git` is a user name, no token"),
        ("UPSTREAM", "https://alice@example.org/r.git", Kept, "a short user name"),
        ("NOTIFY", "https://hooks.slack.com/services/T0/B0/XXXXXXXXXXXXXXXXXXXXXXXX", Scrubbed, "a Slack webhook"),
        (
            "SAS",
            "https://a.blob.core.windows.net/c?sv=2022-11-02&sig=abcDEF123%2Bxyz%2F0987654321%3D",
            Scrubbed,
            "an Azure SAS",
        ),
        ("BLOB", "https://a.blob.core.windows.net/c/f.txt", Kept, "a storage URL without a signature"),
        (
            "GIT_CONFIG_VALUE_0",
            "Authorization: Bearer CANARYHEADERTOKEN",
            Scrubbed,
            "an http.extraHeader with its token",
        ),
        ("GIT_CONFIG_VALUE_1", "Authorization: Basic dXNlcjpwYXNzd29yZA==", Scrubbed, "user:password in base64"),
        ("GIT_CONFIG_VALUE_2", "true", Kept, "a config value"),
    ];

    #[test]
    fn the_values_table_is_scrubbed_or_kept_by_what_each_value_holds() {
        let env: Vec<(String, String)> = VALUES.iter().map(|(n, v, _, _)| (n.to_string(), v.to_string())).collect();
        let p = plan(&env, &policy(&[], None));
        let mut wrong = vec![];
        for (name, value, want, why) in VALUES {
            assert!(!why.is_empty(), "{name}: say why");
            let got = match (rule(&p, name), p.vars.iter().any(|(k, v)| k == name && v == value)) {
                (Some(ScrubRule::KeyForm { .. }), false) => Scrubbed,
                (None, true) => Kept,
                (r, kept) => panic!("{name}: rule {r:?}, kept {kept}"),
            };
            if got != *want {
                wrong.push(format!("{name}: {got:?}, want {want:?} ({why})"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // `--dry-run` names the rule.
        let shown: Vec<String> = p.removed.iter().map(|r| r.to_string()).collect();
        assert!(shown.contains(&"REPO (its value holds a token as a URL's user)".to_string()), "{shown:?}");
        assert!(
            shown.contains(&"GIT_CONFIG_VALUE_0 (its value holds a credential in an Authorization header)".to_string()),
            "{shown:?}"
        );
    }

    fn policy(layers: &[(&str, Source, FileKind)], admin: Option<&str>) -> Policy {
        let builtin = include_str!("../policy/builtin.toml");
        let mut all = vec![SourcedLayer {
            layer: parse_layer(builtin, Path::new("b"), FileKind::Site).expect("built-in"),
            source: Source::Builtin,
        }];
        for (text, source, kind) in layers {
            all.push(SourcedLayer {
                layer: parse_layer(text, Path::new("l"), *kind).expect("layer"),
                source: source.clone(),
            });
        }
        let admin = admin.map(|text| SourcedLayer {
            layer: parse_layer(text, Path::new("a"), FileKind::Admin).expect("admin"),
            source: Source::Admin("/etc/agent-sandbox/admin.toml".into()),
        });
        merge(&all, admin.as_ref()).expect("merge")
    }

    fn plan(env: &[(String, String)], policy: &Policy) -> EnvPlan {
        let home = Path::new("/home/u");
        let vars = JailVars {
            user: "u",
            home,
            shell: Path::new("/bin/bash"),
            project: Path::new("/home/u/p"),
            cwd: Path::new("/home/u/p"),
            net_mode: "filtered",
            proxies: false,
            backend: "userns",
            session: "s1",
            job_endpoints: &[],
        };
        build(env, policy, &vars)
    }

    fn removed(p: &EnvPlan) -> Vec<String> {
        p.removed.iter().map(|r| r.to_string()).collect()
    }

    #[test]
    fn the_names_table_is_scrubbed_or_kept_by_what_each_name_means() {
        assert!(NAMES.len() >= 150, "{} names", NAMES.len());
        let mut seen = std::collections::BTreeSet::new();
        for (name, _, why) in NAMES {
            assert!(seen.insert(*name), "{name} twice");
            assert!(!why.is_empty(), "{name}: say why");
        }
        let env: Vec<(String, String)> = NAMES.iter().map(|(n, _, _)| (n.to_string(), "x".to_string())).collect();
        let p = plan(&env, &policy(&[], None));
        let gone = removed(&p);
        let mut wrong = vec![];
        for (name, want, why) in NAMES {
            let scrubbed = gone.iter().any(|r| r == name || r.starts_with(&format!("{name} ")));
            let kept = p.vars.iter().any(|(k, v)| k == name && v == "x");
            let got = match (scrubbed, kept) {
                (true, false) => Scrubbed,
                (false, true) => Kept,
                _ => panic!("{name}: scrubbed {scrubbed}, kept {kept}"),
            };
            if got != *want {
                wrong.push(format!("{name}: {got:?}, want {want:?} ({why})"));
            }
        }
        assert!(wrong.is_empty(), "{} of {}:\n{}", wrong.len(), NAMES.len(), wrong.join("\n"));
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn has(p: &EnvPlan, name: &str) -> bool {
        p.vars.iter().any(|(k, _)| k == name)
    }

    fn rule<'p>(p: &'p EnvPlan, name: &str) -> Option<&'p ScrubRule> {
        p.removed.iter().find(|r| r.name == name).map(|r| &r.rule)
    }

    const GHP: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";

    #[test]
    fn a_provider_key_under_a_harmless_name_is_scrubbed() {
        let p = plan(
            &env(&[
                ("NOTES", GHP),
                ("LAST_COMMAND", "curl -H 'Authorization: Bearer sk-proj-16C7e42F292c6912E7710c838347Ae17'"),
                ("XDG_SESSION_TYPE", "AKIAIOSFODNN7EXAMPLE"),
                ("LANG", "sk_SK.UTF-8"),
            ]),
            &policy(&[], None),
        );
        assert_eq!(rule(&p, "NOTES"), Some(&ScrubRule::KeyForm { form: "GitHub token" }));
        assert!(matches!(rule(&p, "LAST_COMMAND"), Some(ScrubRule::KeyForm { .. })));
        // The harmless list spares a name's words, not what it holds.
        assert_eq!(rule(&p, "XDG_SESSION_TYPE"), Some(&ScrubRule::KeyForm { form: "AWS access key" }));
        assert!(has(&p, "LANG"));
    }

    #[test]
    fn dry_run_names_the_rule_that_scrubbed_each_variable_and_never_its_value() {
        let user = Source::User("/home/u/.config/agent-sandbox/config.toml".into());
        let p = plan(
            &env(&[("GH_TOKEN", "v1"), ("API_KEY", "v2"), ("NOTES", GHP), ("LM_LICENSE_FILE", "v3")]),
            &policy(&[("[env]\nscrub = [\"LM_*\"]", user, FileKind::User)], None),
        );
        let shown: Vec<String> = p.removed.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            shown,
            [
                "API_KEY (the word `KEY` in its name)",
                "GH_TOKEN (env.scrub `*_TOKEN` [built-in])",
                "LM_LICENSE_FILE (env.scrub `LM_*` [user /home/u/.config/agent-sandbox/config.toml])",
                "NOTES (its value holds a GitHub token)",
            ]
        );
        let json = serde_json::to_string(&p.removed).expect("json");
        assert!(!json.contains("v1") && !json.contains(GHP), "{json}");
    }

    /// `env.keep` (a profile's, the user's, `--env NAME`) passes a name past the words, the
    /// built-in patterns and a key's form alike.
    #[test]
    fn a_kept_name_passes_whatever_its_words_and_value() {
        let cli = Source::Cli;
        let p = plan(
            &env(&[("API_KEY", GHP), ("GH_TOKEN", GHP), ("NOTES", GHP), ("TOKEN", "t")]),
            &policy(&[("[env]\nkeep = [\"API_KEY\", \"GH_TOKEN\", \"NOTES\"]", cli, FileKind::PolicyFile)], None),
        );
        for name in ["API_KEY", "GH_TOKEN", "NOTES"] {
            assert!(has(&p, name), "{name}");
        }
        assert!(!has(&p, "TOKEN"));
    }

    #[test]
    fn an_admin_scrub_wins_over_every_users_keep_and_set() {
        let user = Source::User("u".into());
        let p = plan(
            &env(&[("OPENAI_API_KEY", "k"), ("LM_LICENSE_FILE", "l")]),
            &policy(
                &[(
                    "[env]\nkeep = [\"OPENAI_API_KEY\", \"LM_LICENSE_FILE\"]\nset = { LM_X = \"1\" }",
                    user,
                    FileKind::User,
                )],
                Some("[env]\nscrub = [\"OPENAI_*\", \"LM_*\"]"),
            ),
        );
        assert!(!has(&p, "OPENAI_API_KEY") && !has(&p, "LM_LICENSE_FILE") && !has(&p, "LM_X"), "{:?}", p.vars);
        assert!(matches!(rule(&p, "OPENAI_API_KEY"), Some(ScrubRule::Pattern { admin: true, .. })));
        assert!(matches!(rule(&p, "LM_X"), Some(ScrubRule::Pattern { admin: true, .. })));
    }

    /// The agent profiles pass their API keys through `env.keep`: every name they keep
    /// reaches the jail, with a value of a key's form too.
    #[test]
    fn the_built_in_profiles_keys_still_pass() {
        for (name, text) in crate::policy::BUILTIN_PROFILES {
            let pol = policy(&[(text, Source::Profile(name.to_string()), FileKind::Profile)], None);
            let keep: Vec<String> = pol.env_keep.iter().map(|k| k.value.replace('*', "API_KEY")).collect();
            assert!(!keep.is_empty(), "{name}");
            let vars: Vec<(String, String)> = keep.iter().map(|k| (k.clone(), GHP.to_string())).collect();
            let p = plan(&vars, &pol);
            for k in &keep {
                assert!(has(&p, k), "profile {name}: {k} scrubbed: {:?}", rule(&p, k));
            }
        }
    }

    /// The jail's own variables are set after the scrub: `AGENT_SANDBOX_SESSION` holds the
    /// word SESSION and stays; a launcher's own copy of it never passes.
    #[test]
    fn the_jails_own_variables_are_set_after_the_scrub() {
        let p = plan(&env(&[("AGENT_SANDBOX_SESSION", "outer")]), &policy(&[], None));
        assert!(p.vars.contains(&("AGENT_SANDBOX_SESSION".into(), "s1".into())), "{:?}", p.vars);
    }

    /// A harmless name that a built-in pattern scrubs anyway would be a promise not kept.
    #[test]
    fn no_harmless_name_is_scrubbed_by_a_built_in_pattern() {
        let pol = policy(&[], None);
        for (name, _) in HARMLESS {
            let example = name.replace('*', "0");
            let p = plan(&env(&[(&example, "x")]), &pol);
            assert!(has(&p, &example), "{name}: {:?}", rule(&p, &example));
        }
    }
}
