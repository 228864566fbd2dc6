//! Everyday config files that can also hold a token (red team 32, F8): cargo's
//! `config.toml` (`registries.<name>.token`), spack's `mirrors.yaml` (`access_pair`,
//! `access_token`), conda's `.condarc` (a channel URL with `/t/<token>/`), pip's `pip.conf`
//! (an index URL with a password) and npm's global `npmrc` under its prefix
//! (`//host/:_authToken`). Hiding them would break everyday work (registries, mirrors,
//! channels, indexes), so the jail sees a copy without those entries (userns: bound over the
//! file where the jail shows it; Landlock, which cannot show a copy: the file is left out,
//! with a warning). A file with nothing to leave out is shown as it is. Pure text work here;
//! the plan reads the files through `HostFs` and places the copies.

use crate::host::{HostFs, Kind};
use std::path::{Path, PathBuf};

/// A file larger than this is not read (and, holding something unreadable, left out).
const MAX_FILE: u64 = 1 << 20;

/// Where the files are, each form as `catalogue` paths are written: `~/rel`, `$VAR`,
/// `$VAR/rel` (the variable set to an absolute path).
const FILES: &[&str] = &[
    "$CARGO_HOME/config.toml",
    "$CARGO_HOME/config",
    "~/.cargo/config.toml",
    "~/.cargo/config",
    "$SPACK_USER_CONFIG_PATH/mirrors.yaml",
    "~/.spack/mirrors.yaml",
    "~/.spack/config.yaml",
    "$CONDARC",
    "~/.condarc",
    "~/.conda/.condarc",
    "~/.conda/condarc",
    "~/.config/conda/.condarc",
    "~/.config/conda/condarc",
    "$PIP_CONFIG_FILE",
    "$XDG_CONFIG_HOME/pip/pip.conf",
    "~/.config/pip/pip.conf",
    "~/.pip/pip.conf",
    "$NPM_CONFIG_GLOBALCONFIG",
    "$npm_config_globalconfig",
    "$NPM_CONFIG_PREFIX/etc/npmrc",
    "$npm_config_prefix/etc/npmrc",
    "~/.npm-global/etc/npmrc",
    // Node versions' own prefixes (nvm, volta, fnm): `npm config set --location=global` under
    // one writes its `etc/npmrc` (outside review of issue 32, R3).
    "$NVM_DIR/versions/node/*/etc/npmrc",
    "~/.nvm/versions/node/*/etc/npmrc",
    "~/.volta/tools/image/node/*/etc/npmrc",
    "~/.local/share/fnm/node-versions/*/installation/etc/npmrc",
    "~/.fnm/node-versions/*/installation/etc/npmrc",
    // spack's per-platform user scopes (`~/.spack/linux/mirrors.yaml`).
    "~/.spack/*/mirrors.yaml",
    "~/.spack/*/config.yaml",
    "$SPACK_USER_CONFIG_PATH/*/mirrors.yaml",
    // conda's own scopes beside the user's: `condarc.d/`.
    "~/.conda/condarc.d/*",
    "~/.config/conda/condarc.d/*",
    // pip's site config in each pyenv Python (`pip config --site`).
    "~/.pyenv/versions/*/pip.conf",
];

/// conda installs (their roots, and each environment in them): conda reads the root's
/// `.condarc`, `condarc` and `condarc.d/` (`conda config --system`) and the active
/// environment's, and pip reads `pip.conf` in the prefix it runs from (`pip config --site`).
/// The built-in `home.read` entries show these trees whole (outside review of issue 32, R3).
/// `~/.conda` holds the environments `conda create -n` makes where conda is a site's module
/// (second look, G5); `$CONDA_PREFIX` is the active environment.
const CONDA_ROOTS: &[&str] = &[
    "$CONDA_ROOT",
    "$MAMBA_ROOT_PREFIX",
    "$CONDA_PREFIX",
    "~/miniconda3",
    "~/miniforge3",
    "~/mambaforge",
    "~/anaconda3",
    "~/miniconda",
    "~/miniforge",
    "~/anaconda",
    "~/conda",
    "~/micromamba",
    "~/.mamba",
    "~/.local/share/mamba",
    "~/.conda",
];

/// Where conda keeps the list of every environment it made, wherever it is (`/scratch/u/envs/x`).
const CONDA_ENVIRONMENTS: &str = "~/.conda/environments.txt";

/// Environments the list names, at most.
const MAX_LISTED_ENVS: usize = 1024;

/// The files of a conda prefix (a root or an environment) that can hold a token.
const CONDA_PREFIX_FILES: &[&str] = &[".condarc", "condarc", "condarc.d/*", "pip.conf"];

/// Entries one `*` stands for, at most: past them, the rest of a directory is not looked at.
const MAX_GLOB: usize = 4096;

/// Keys whose value is a secret, lower case, as the last part of a key (`registries.x.token`,
/// `//registry.npmjs.org/:_authToken`).
const SECRET_KEYS: &[&str] = &[
    "token",
    "_authtoken",
    "_auth",
    "_password",
    "password",
    "access_token",
    "refresh_token",
    "access_pair",
    "secret",
    "secret_key",
    "secret_access_key",
    "aws_secret_access_key",
    "client_secret",
    "api_key",
    "apikey",
];

/// What a file becomes inside.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    /// Its text without what is dropped (described, never the values).
    Stripped {
        text: String,
        dropped: Vec<String>,
    },
    /// Something in it could not be read surely: left out whole.
    Withheld {
        why: String,
    },
}

/// A token config found: where it really is, the name that led there, and what the jail sees.
#[derive(Debug)]
pub struct Found {
    pub real: PathBuf,
    pub named: PathBuf,
    pub outcome: Outcome,
}

/// The files of `FILES` this user has, each where it really is (a name that is a link, or
/// reached through one, `~/.condarc -> miniforge3/.condarc`, is the file it leads to: the
/// copy covers that file, so every name of it shows the copy; seventh outside look at the
/// anchors, T1 and T2), with what the jail sees of each.
/// `before`: the real paths earlier sessions stripped (`host::configs::STRIPPED_RECORD`),
/// looked at again whether or not a name of `FILES` still leads to them.
pub fn decide(fs: &dyn HostFs, home: &Path, var: &dyn Fn(&str) -> Option<String>, before: &[PathBuf]) -> Vec<Found> {
    let mut out: Vec<Found> = vec![];
    let named = FILES.iter().filter_map(|f| expand(f, home, var)).flat_map(|p| glob(fs, &p));
    let conda = conda_files(fs, home, var);
    for named in named.chain(conda).chain(before.iter().cloned()) {
        let p = crate::plan::fs::real_path(fs, &named);
        if out.iter().any(|f| f.real == p) || fs.kind(&p) != Some(Kind::File) {
            continue;
        }
        let outcome = match fs.read_small(&p, MAX_FILE) {
            Some(bytes) => match String::from_utf8(bytes) {
                Ok(text) => strip(&text),
                Err(_) => Outcome::Withheld { why: "it is not UTF-8 text".into() },
            },
            None => Outcome::Withheld { why: format!("it could not be read or is larger than {MAX_FILE} bytes") },
        };
        if outcome != Outcome::Unchanged {
            out.push(Found { real: p, named, outcome });
        }
    }
    out
}

/// The token files of every conda prefix: each root of `CONDA_ROOTS` that is a directory, and
/// each environment in its `envs/`.
fn conda_files(fs: &dyn HostFs, home: &Path, var: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = CONDA_ROOTS.iter().filter_map(|r| expand(r, home, var)).collect();
    // The install conda runs from (`$CONDA_EXE`: ROOT/bin/conda or ROOT/condabin/conda), which
    // may be anywhere (`/scratch/u/miniconda3`; second look, G6).
    for exe in ["CONDA_EXE", "MAMBA_EXE"] {
        let root = var(exe).map(PathBuf::from).and_then(|e| e.parent().and_then(Path::parent).map(Path::to_path_buf));
        roots.extend(root.filter(|r| r.is_absolute()));
    }
    let mut prefixes: Vec<PathBuf> = vec![];
    for root in roots {
        if fs.kind(&root) != Some(Kind::Dir) {
            continue;
        }
        prefixes.extend(glob(fs, &root.join("envs/*")));
        prefixes.push(root);
    }
    // Every environment conda made, wherever (`conda create -p /scratch/u/env`).
    if let Some(list) = expand(CONDA_ENVIRONMENTS, home, var).and_then(|p| fs.read_small(&p, MAX_FILE)) {
        let listed: Vec<PathBuf> = String::from_utf8_lossy(&list).lines().map(|l| PathBuf::from(l.trim())).collect();
        prefixes.extend(listed.into_iter().filter(|p| p.is_absolute()).take(MAX_LISTED_ENVS));
    }
    let mut out = vec![];
    for prefix in prefixes {
        out.extend(CONDA_PREFIX_FILES.iter().flat_map(|f| glob(fs, &prefix.join(f))));
    }
    out
}

/// The paths a path with `*` components names: each `*` is every entry of the directory
/// before it (at most `MAX_GLOB`, in the order the directory lists them); a path without one
/// is itself.
fn glob(fs: &dyn HostFs, p: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    for c in p.components() {
        if c.as_os_str() != "*" {
            found.iter_mut().for_each(|f| f.push(c));
            continue;
        }
        found = found
            .into_iter()
            .filter(|d| fs.kind(d) == Some(Kind::Dir))
            .flat_map(|d| {
                let names = fs.read_dir(&d);
                names.iter().take(MAX_GLOB).map(|n| d.join(n)).collect::<Vec<_>>()
            })
            .collect();
    }
    found
}

fn expand(form: &str, home: &Path, var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(rest) = form.strip_prefix("~/") {
        return Some(home.join(rest));
    }
    let rest = form.strip_prefix('$')?;
    let (name, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let value = var(name)?;
    let base = match value.strip_prefix("~/") {
        Some(r) => home.join(r),
        None => PathBuf::from(value),
    };
    if !base.is_absolute() {
        return None;
    }
    Some(if tail.is_empty() { base } else { base.join(tail) })
}

/// `text` without the lines that set a secret key (a YAML key's block below it too), and
/// with the password or token taken out of every URL (`https://u:pw@h` -> `https://u@h`, a
/// token as the user part dropped, conda's `/t/<token>/` dropped).
pub fn strip(text: &str) -> Outcome {
    let mut out = String::with_capacity(text.len());
    let mut dropped: Vec<String> = vec![];
    // Lines more indented than this belong to a dropped YAML key's block.
    let mut block: Option<usize> = None;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let indent = body.len() - body.trim_start().len();
        if let Some(b) = block {
            if body.trim().is_empty() || indent > b || (indent == b && body.trim_start().starts_with('-')) {
                continue;
            }
            block = None;
        }
        if let Some((key, value)) = secret_key(body) {
            if value.starts_with("\"\"\"") || value.starts_with("'''") {
                return Outcome::Withheld { why: format!("`{key}` holds a multi-line value") };
            }
            if value.is_empty() || value == "|" || value == ">" {
                block = Some(indent);
            }
            let what = format!("`{key}`");
            if !dropped.contains(&what) {
                dropped.push(what);
            }
            continue;
        }
        let (clean, changed) = strip_urls(line);
        if changed && !dropped.iter().any(|d| d == "a credential in a URL") {
            dropped.push("a credential in a URL".into());
        }
        out.push_str(&clean);
    }
    if dropped.is_empty() {
        Outcome::Unchanged
    } else {
        Outcome::Stripped { text: out, dropped }
    }
}

/// `(key, value)` of a line setting a secret key (`key = v`, `key: v`, `key=v`), the key as
/// written; None otherwise.
fn secret_key(line: &str) -> Option<(String, String)> {
    let t = line.trim_start().trim_start_matches("- ");
    if t.starts_with('#') || t.starts_with(';') || t.starts_with('[') {
        return None;
    }
    // The first `=`, or the first `: ` / final `:` (YAML; a URL's `://` is not one).
    let eq = t.find('=');
    let colon = t.find(": ").or_else(|| t.strip_suffix(':').map(str::len));
    let at = match (eq, colon) {
        (Some(e), Some(c)) => e.min(c),
        (Some(e), None) => e,
        (None, Some(c)) => c,
        (None, None) => return None,
    };
    let key = t[..at].trim().trim_matches(['"', '\'']);
    let last = key.rsplit(['.', ':', '/']).next().unwrap_or(key).to_ascii_lowercase();
    if !SECRET_KEYS.contains(&last.as_str()) {
        return None;
    }
    let value = t[at + 1..].trim().to_string();
    Some((key.to_string(), value))
}

/// The line with the credential of each URL in it taken out; whether anything was.
fn strip_urls(line: &str) -> (String, bool) {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    let mut changed = false;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        let end = rest.find(|c: char| c.is_whitespace() || "/\"'<>,;]}".contains(c)).unwrap_or(rest.len());
        let authority = &rest[..end];
        if let Some((user, host)) = authority.rsplit_once('@') {
            if user.contains(':') || user.len() >= 20 {
                changed = true;
                let name = user.split_once(':').map(|(n, _)| n).filter(|n| !n.is_empty() && n.len() < 20);
                if let Some(n) = name {
                    out.push_str(n);
                    out.push('@');
                }
            } else {
                out.push_str(user);
                out.push('@');
            }
            out.push_str(host);
        } else {
            out.push_str(authority);
        }
        rest = &rest[end..];
        // conda: `https://conda.anaconda.org/t/<token>/channel`.
        if let Some(after) = rest.strip_prefix("/t/") {
            let tok_end = after.find('/').unwrap_or(after.len());
            if tok_end > 0 {
                rest = &after[tok_end..];
                changed = true;
            }
        }
    }
    out.push_str(rest);
    (out, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::FakeFs;

    fn stripped(text: &str) -> (String, Vec<String>) {
        match strip(text) {
            Outcome::Stripped { text, dropped } => (text, dropped),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn cargos_registry_tokens_go_and_its_registries_stay() {
        let (t, d) = stripped(
            "[registries.corp]\nindex = \"sparse+https://crates.corp/\"\ntoken = \"cio_SECRET\"\n\
             [registry]\ntoken = \"cio_OTHER\"\nglobal-credential-providers = [\"cargo:token\"]\n\
             [http]\nproxy = \"http://me:PW@proxy:3128\"\n[source.crates-io]\nreplace-with = \"vendored\"\n",
        );
        assert!(!t.contains("SECRET") && !t.contains("OTHER") && !t.contains("PW"), "{t}");
        assert!(
            t.contains("index = \"sparse+https://crates.corp/\"") && t.contains("proxy = \"http://me@proxy:3128\"")
        );
        assert!(t.contains("replace-with") && t.contains("global-credential-providers"), "{t}");
        assert_eq!(d, ["`token`", "a credential in a URL"]);
    }

    #[test]
    fn spack_mirrors_conda_channels_pip_indexes_and_npmrc_lose_their_secrets_only() {
        let (t, _) = stripped(
            "mirrors:\n  s3:\n    url: s3://bucket/cache\n    access_pair:\n    - AKIAID\n    - SECRETKEY\n    \
             access_token: TOK\n  plain: https://mirror.example/spack\n",
        );
        assert!(!t.contains("SECRETKEY") && !t.contains("TOK") && !t.contains("AKIAID"), "{t}");
        assert!(t.contains("url: s3://bucket/cache") && t.contains("plain: https://mirror.example/spack"), "{t}");
        let (t, _) = stripped("channels:\n  - https://conda.anaconda.org/t/tk-123-abc/private\n  - conda-forge\n");
        assert_eq!(t, "channels:\n  - https://conda.anaconda.org/private\n  - conda-forge\n");
        let (t, _) = stripped("[global]\nindex-url = https://user:S3CRET@pypi.corp/simple\ntimeout = 60\n");
        assert_eq!(t, "[global]\nindex-url = https://user@pypi.corp/simple\ntimeout = 60\n");
        let (t, _) = stripped("registry=https://npm.corp/\n//npm.corp/:_authToken=npm_SECRET\nfund=false\n");
        assert_eq!(t, "registry=https://npm.corp/\nfund=false\n");
        let (t, _) = stripped("[global]\nindex-url = https://ghp_0123456789abcdefghij@host/simple\n");
        assert_eq!(t, "[global]\nindex-url = https://host/simple\n");
        assert_eq!(strip("[build]\njobs = 4\n[net]\ngit-fetch-with-cli = true\n"), Outcome::Unchanged);
        assert!(matches!(strip("token = \"\"\"\nx\n\"\"\"\n"), Outcome::Withheld { .. }));
    }

    /// Outside review of issue 32, R3: the built-in `home.read` entries show conda roots,
    /// nvm's Node versions and spack's platform scopes whole; their token files are found.
    #[test]
    fn token_files_in_conda_roots_and_environments_node_versions_and_spack_scopes_are_found() {
        let tok = "//r/:_authToken=z\n";
        let fs = FakeFs::default()
            .content("/home/u/miniconda3/.condarc", "channels:\n  - https://c.example/t/tk-1/x\n")
            .content("/home/u/miniconda3/pip.conf", "[global]\nindex-url = https://u:pw@p.example/simple\n")
            .content("/home/u/miniconda3/condarc.d/corp.yml", "channels:\n  - https://c.example/t/tk-2/x\n")
            .content("/home/u/miniconda3/envs/ml/pip.conf", "[global]\nindex-url = https://u:pw@q.example/simple\n")
            .content("/home/u/miniconda3/envs/ml/bin/python", "")
            .content("/home/u/.nvm/versions/node/v20.11.0/etc/npmrc", tok)
            .content("/home/u/.spack/linux/mirrors.yaml", "mirrors:\n  m:\n    access_pair: [A, B]\n")
            .content("/home/u/.spack/linux/packages.yaml", "packages: {}\n")
            .content("/home/u/.pyenv/versions/3.12.1/pip.conf", "[global]\nindex-url = https://u:pw@r.example/simple\n")
            .content("/home/u/.conda/envs/site/pip.conf", "[global]\nindex-url = https://u:pw@s.example/simple\n")
            .content("/home/u/.conda/environments.txt", "/scratch/u/envs/big\n/home/u/miniconda3\n")
            .content("/scratch/u/envs/big/.condarc", "channels:\n  - https://c.example/t/tk-3/x\n")
            .content("/scratch/u/mc3/.condarc", "channels:\n  - https://c.example/t/tk-4/x\n")
            .file("/scratch/u/mc3/bin/conda");
        let var = |n: &str| (n == "CONDA_EXE").then(|| "/scratch/u/mc3/bin/conda".to_string());
        let found: Vec<PathBuf> = decide(&fs, Path::new("/home/u"), &var, &[]).into_iter().map(|f| f.real).collect();
        for want in [
            "/home/u/miniconda3/.condarc",
            "/home/u/miniconda3/pip.conf",
            "/home/u/miniconda3/condarc.d/corp.yml",
            "/home/u/miniconda3/envs/ml/pip.conf",
            "/home/u/.nvm/versions/node/v20.11.0/etc/npmrc",
            "/home/u/.spack/linux/mirrors.yaml",
            "/home/u/.pyenv/versions/3.12.1/pip.conf",
            // Second look, G5 and G6: `~/.conda/envs`, every environment conda lists, and the
            // install conda runs from.
            "/home/u/.conda/envs/site/pip.conf",
            "/scratch/u/envs/big/.condarc",
            "/scratch/u/mc3/.condarc",
        ] {
            assert!(found.contains(&PathBuf::from(want)), "{want} not found in {found:?}");
        }
        assert_eq!(found.len(), 10, "{found:?}");
    }

    #[test]
    fn the_files_are_found_where_variables_and_the_home_put_them() {
        let fs = FakeFs::default()
            .content("/home/u/.cargo/config.toml", "[registry]\ntoken = \"x\"\n")
            .content("/opt/c/config.toml", "[registry]\ntoken = \"y\"\n")
            .content("/home/u/.npm-global/etc/npmrc", "//r/:_authToken=z\n")
            .content("/home/u/.config/pip/pip.conf", "[global]\ntimeout = 1\n");
        let var = |n: &str| (n == "CARGO_HOME").then(|| "/opt/c".to_string());
        let found: Vec<PathBuf> = decide(&fs, Path::new("/home/u"), &var, &[]).into_iter().map(|f| f.real).collect();
        assert_eq!(
            found,
            [
                PathBuf::from("/opt/c/config.toml"),
                PathBuf::from("/home/u/.cargo/config.toml"),
                PathBuf::from("/home/u/.npm-global/etc/npmrc")
            ]
        );
    }
}
