//! Curated, versioned allow-lists (`net.preset`): deny by default (`*` blocked) with the hosts
//! a coding agent on an HPC login node needs, for users who do not want to write the list.
//! A new version is a new entry here; `agents` names the newest, `agents@VERSION` pins one.
//! `agent-sandbox policy show` lists what a preset adds.

/// A preset: its name, its version, and the hosts it allows.
#[derive(Debug)]
pub struct Preset {
    pub name: &'static str,
    pub version: &'static str,
    pub hosts: &'static [&'static str],
}

/// Newest last for each name.
pub const PRESETS: &[Preset] = &[Preset { name: "agents", version: "2026.11", hosts: AGENTS_2026_11 }];

const AGENTS_2026_11: &[&str] = &[
    // Model providers (the built-in profiles' hosts, and the common others).
    "api.openai.com",
    "auth.openai.com",
    "chatgpt.com",
    "api.anthropic.com",
    "console.anthropic.com",
    "claude.ai",
    "generativelanguage.googleapis.com",
    "oauth2.googleapis.com",
    "cloudcode-pa.googleapis.com",
    "aiplatform.googleapis.com",
    "*.aiplatform.googleapis.com",
    "openrouter.ai",
    "api.mistral.ai",
    "api.deepseek.com",
    "api.groq.com",
    "api.together.xyz",
    "models.dev",
    "opencode.ai",
    "*.opencode.ai",
    // GitHub and the other forges.
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    "raw.githubusercontent.com",
    "release-assets.githubusercontent.com",
    "ghcr.io",
    "pkg-containers.githubusercontent.com",
    "gitlab.com",
    "bitbucket.org",
    // Python: PyPI, conda.
    "pypi.org",
    "files.pythonhosted.org",
    "conda.anaconda.org",
    "repo.anaconda.com",
    "anaconda.org",
    "conda-forge.org",
    "prefix.dev",
    "repo.prefix.dev",
    // Rust, npm, Go, Julia, R.
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "static.rust-lang.org",
    "registry.npmjs.org",
    "proxy.golang.org",
    "sum.golang.org",
    "pkg.julialang.org",
    "julialang-s3.julialang.org",
    "cloud.r-project.org",
    "cran.r-project.org",
    // HPC software and data: Spack, EasyBuild, Apptainer images, Hugging Face.
    "spack.io",
    "mirror.spack.io",
    "binaries.spack.io",
    "sources.easybuild.io",
    "docs.easybuild.io",
    "cloud.sylabs.io",
    "library.sylabs.io",
    "huggingface.co",
    "*.huggingface.co",
    "*.hf.co",
];

/// `agents` (the newest version) or `agents@2026.11`.
pub fn find(spec: &str) -> Result<&'static Preset, String> {
    let (name, version) = match spec.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (spec, None),
    };
    let mut found = PRESETS.iter().filter(|p| p.name == name && version.is_none_or(|v| v == p.version));
    match found.next_back() {
        Some(p) => Ok(p),
        None => {
            let known: Vec<String> = PRESETS.iter().map(|p| format!("{}@{}", p.name, p.version)).collect();
            Err(format!("unknown preset `{spec}`; known: {} (the name alone is the newest)", known.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netrules::matcher::Rule;
    use std::str::FromStr;

    #[test]
    fn presets_resolve_by_name_or_version_and_every_host_is_a_rule() {
        assert_eq!(find("agents").map(|p| p.version), Ok("2026.11"));
        assert_eq!(find("agents@2026.11").map(|p| p.version), Ok("2026.11"));
        assert!(find("agents@1999.01").unwrap_err().contains("agents@2026.11"));
        assert!(find("everything").is_err());
        for p in PRESETS {
            for h in p.hosts {
                assert!(Rule::from_str(h).is_ok(), "{}@{}: {h}", p.name, p.version);
            }
            assert!(p.hosts.contains(&"pypi.org") && p.hosts.contains(&"api.anthropic.com"));
        }
    }
}
