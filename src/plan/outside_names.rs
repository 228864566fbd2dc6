//! Names in a project that programs started there outside the jail read as their settings or
//! run: agents' and editors' configuration (hooks, MCP servers, plugins, tasks) at any depth, and
//! the git hook managers' and dev containers' files at the top. Both the plan (no placeholder
//! where the git guard refuses the name) and the guard (`jail::guard::rules`, which refuses to
//! have them made, renamed onto or written) read them, so they are a leaf of their own: data
//! and pure functions over a relative path, no I/O.

use std::path::Path;

/// Directories and files in the project that agents and editors started there, outside the
/// jail, read as their settings (hooks, MCP servers, plugins, tasks) at ANY depth (a monorepo's
/// `web/.claude/settings.json`, `web/.mcp.json`, codex's `.codex/config.toml` of every directory
/// down to where it starts), and what they read them as.
const AGENT_CONFIG: &[(&str, &str)] = &[
    (".claude", "Claude Code"),
    (".mcp.json", "Claude Code"),
    (".codex", "Codex"),
    (".gemini", "Gemini CLI"),
    (".cursor", "Cursor"),
    (".continue", "Continue"),
    (".pi", "pi"),
    ("opencode.json", "opencode"),
    ("opencode.jsonc", "opencode"),
    (".aider.conf.yml", "aider"),
    (".aider.conf.yaml", "aider"),
    // Its model settings: `extra_params.api_base` sends the user's key to another host.
    (".aider.model.settings.yml", "aider"),
    (".aider.model.settings.yaml", "aider"),
    (".aider.model.metadata.json", "aider"),
    // Skills of the agents that read the shared `.agents/` (codex's `.agents/skills`).
    (".agents", "Codex (its skills)"),
    // Red team 32 R6, each from the tool's documentation: Qwen Code (a Gemini CLI fork) reads
    // `mcpServers` and hooks from `.qwen/settings.json`.
    (".qwen", "Qwen Code"),
    // Crush: MCP servers' and language servers' commands, hooks (`.crush.json` first).
    ("crush.json", "Crush"),
    (".crush.json", "Crush"),
    // Roo Code and Kilo Code (Cline forks): `.roo/mcp.json`, `.kilocode/mcp.json` start MCP
    // servers; their rules directories instruct the agent.
    (".roo", "Roo Code"),
    (".kilocode", "Kilo Code"),
    // Cline: `.clinerules/hooks/` scripts run on its tool calls (a file or a directory).
    (".clinerules", "Cline"),
    // Kiro: `.kiro/hooks/*.kiro.hook` run commands on file events, `.kiro/settings/mcp.json`
    // starts MCP servers, `.kiro/steering/` instructs it.
    (".kiro", "Kiro"),
    // Amazon Q Developer CLI: `.amazonq/mcp.json` and its agents' hooks.
    (".amazonq", "Amazon Q Developer"),
    // JetBrains Junie: `.junie/mcp/mcp.json` starts MCP servers, `.junie/guidelines.md`.
    (".junie", "Junie"),
    // OpenHands: `.openhands/setup.sh` runs at the start of every conversation.
    (".openhands", "OpenHands"),
    // Factory's Droid: `.factory/settings.json` hooks, `.factory/mcp.json`, droids, skills.
    (".factory", "Factory Droid"),
    // Amp: `.amp/settings.json` (`amp.mcpServers`, its permissions).
    (".amp", "Amp"),
];

/// Editors' and tools' settings that run commands, at the project's top only (as
/// `.vscode/`): repositories commit them, and a clone of one inside the project would be
/// refused at any depth. Each with who reads it and what it runs.
const TOP_SETTINGS: &[(&str, &str)] = &[
    // Language servers and formatters by command (`lsp.*.binary`, `formatter.external`), tasks.
    (".zed", "Zed (language servers, formatters, tasks)"),
    // `.helix/languages.toml`'s `language-server.*.command` and formatters (before its
    // workspace trust, every workspace's).
    (".helix", "Helix (language servers, formatters)"),
    // mise's `[tasks]`, `[hooks]` and `env._.source`: `mise run`, `mise install` and `mise exec`
    // trust the config they run by themselves.
    ("mise.toml", "mise (tasks, hooks, env scripts)"),
    (".mise.toml", "mise (tasks, hooks, env scripts)"),
    ("mise.local.toml", "mise (tasks, hooks, env scripts)"),
    (".mise.local.toml", "mise (tasks, hooks, env scripts)"),
    (".mise", "mise (tasks, hooks, env scripts)"),
    // The rest of the default protected list's top-level names (docs/policy.md): with the
    // git guard on, its refusal stands in for their placeholders, as for the names above.
    // `.vscode/tasks.json` tasks run on folder open, and its settings name programs.
    (".vscode", "VS Code (tasks run on folder open, settings that name programs)"),
    // Run configurations and startup tasks.
    (".idea", "JetBrains IDEs (run configurations, startup tasks)"),
    // Run in the user's shell on `cd`, once allowed.
    (".envrc", "direnv (runs it in your shell once allowed)"),
    // Hook scripts `core.hooksPath` points at (husky's `.husky/_` runs `.husky/<hook>`).
    (".husky", "husky (git hooks)"),
    (".githooks", "git (the hooks core.hooksPath names)"),
];

/// Entries of an `.opencode` directory opencode loads code or settings from. Not its
/// `package.json` and `node_modules`, which opencode writes there itself at start (the plan
/// binds existing ones read-only; docs/security-model.md names the limit).
const OPENCODE_LOADS: &[&str] = &["plugin", "tool", "command", "agent", "mode", "opencode.json"];

/// A name as a case-folding filesystem compares it (ext4's and f2fs's casefold directories,
/// which the jail may set on an empty directory it owns; SMB shares; vfat): lower case, after
/// upper case for what is not ASCII, so that the Kelvin sign is `k` and the long s is `s`.
/// Every comparison below is of folded names, so `.VSCODE` or `.hus\u{212A}y` is the name a
/// folding lookup outside finds as `.vscode` or `.husky` (outside review of issue 35, F1).
fn fold(s: &str) -> std::borrow::Cow<'_, str> {
    if s.is_ascii() {
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            return s.to_ascii_lowercase().into();
        }
        return s.into();
    }
    s.chars().flat_map(char::to_uppercase).flat_map(char::to_lowercase).collect::<String>().into()
}

/// lefthook's configs (lefthook.dev/configuration: `lefthook`, `.lefthook`, each with its
/// `-local` twin that it merges over the main one, in every format it reads); `name` folded.
fn lefthook_config(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else { return false };
    ["lefthook", ".lefthook", "lefthook-local", ".lefthook-local"].contains(&stem)
        && ["yml", "yaml", "toml", "json", "jsonc"].contains(&ext)
}

/// Whether the project path `rel` (relative to the project's top) is, or lies below, a name
/// that a program outside the jail reads and runs what it names: an agent's settings at any
/// depth (`AGENT_CONFIG`), and in the top directory git hook managers' configs (lefthook's,
/// with `.config/` and its scripts' directories; pre-commit's; overcommit's) and aider's tags
/// cache, whose values aider unpickles. Says who reads it. The git guard refuses making,
/// renaming onto or writing these; the plan binds the existing top-level ones read-only.
/// A directory whose entries programs outside run (`.config/lefthook*` and `.config/mise*` at
/// the top, `.github/hooks`, `.opencode/plugin` at any depth), which must not be a symbolic
/// link the jail made: through `.config -> w`, a `w/lefthook-local.yml` is lefthook's config,
/// and no name the guard sees is one of those (fourth look at issue 32, I2).
pub fn holds_runs_outside_names(rel: &Path) -> Option<&'static str> {
    let last = fold(rel.file_name()?.to_str()?);
    let top = rel.components().count() == 1;
    if last == ".github" || last == ".opencode" || (top && last == ".config") {
        return Some(
            "the programs that read the settings inside it (a symbolic link there would hand them another directory)",
        );
    }
    None
}

/// Every name is compared folded (`fold`): what a folding filesystem outside takes for one
/// of these is one.
pub fn runs_outside_name(rel: &Path) -> Option<&'static str> {
    let parts: Vec<std::borrow::Cow<'_, str>> = rel.iter().map(|c| fold(c.to_str().unwrap_or(""))).collect();
    for (i, c) in parts.iter().enumerate() {
        // Every name of the lists starts with `.`, `opencode` or `crush`: most components are
        // none.
        if !c.starts_with('.') && !c.starts_with("opencode") && !c.starts_with("crush") {
            continue;
        }
        if let Some((_, who)) = AGENT_CONFIG.iter().find(|(n, _)| c == n) {
            return Some(who);
        }
        let next = parts.get(i + 1).map(|n| n.as_ref());
        // GitHub Copilot CLI loads command hooks from `.github/hooks/*.json` of the directory
        // it starts in.
        if c == ".github" && next == Some("hooks") {
            return Some("GitHub Copilot CLI (its hooks)");
        }
        if c == ".opencode" && next.is_some_and(|n| OPENCODE_LOADS.iter().any(|l| n.starts_with(l))) {
            return Some("opencode");
        }
    }
    let top = parts.first()?.as_ref();
    let second = parts.get(1).map(|n| n.as_ref());
    let hook_manager = lefthook_config(top)
        || top == ".lefthook"
        || top == ".lefthook-local"
        || (top == ".config" && second.is_some_and(lefthook_config));
    if hook_manager {
        return Some("lefthook (git hooks)");
    }
    if top == ".pre-commit-config.yaml" || top == ".pre-commit-config.yml" {
        return Some("pre-commit (git hooks)");
    }
    if top == ".overcommit.yml" {
        return Some("overcommit (git hooks)");
    }
    // A dev container's `initializeCommand` runs on the host when an editor opens the project.
    if top == ".devcontainer" || top == ".devcontainer.json" {
        return Some("VS Code and the devcontainer CLI (initializeCommand runs on the host)");
    }
    if let Some((_, who)) = TOP_SETTINGS.iter().find(|(n, _)| top == *n) {
        return Some(who);
    }
    // mise's configs under `.config/` (`.config/mise.toml`, `.config/mise/config.toml`).
    if top == ".config" && second.is_some_and(|n| n == "mise" || n == "mise.toml") {
        return Some("mise (tasks, hooks, env scripts)");
    }
    if parts.len() == 1 && top.starts_with(".aider.tags.cache.v") {
        return Some("aider (its tags cache is unpickled)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables are written folded (lower case ASCII), as every name is compared.
    #[test]
    fn the_tables_are_folded() {
        let names = AGENT_CONFIG.iter().chain(TOP_SETTINGS).map(|(n, _)| *n).chain(OPENCODE_LOADS.iter().copied());
        for n in names {
            assert_eq!(fold(n), n, "{n}");
        }
    }

    /// What a case-folding filesystem takes for a name is that name: ASCII case, and the
    /// letters that fold to ASCII ones (the Kelvin sign, the long s).
    #[test]
    fn names_are_matched_as_a_folding_filesystem_matches_them() {
        for (rel, who) in [
            (".VSCODE/tasks.json", "VS Code"),
            (".ENVRC", "direnv"),
            (".hus\u{212A}y/pre-commit", "husky"),
            (".githook\u{17F}/pre-commit", "git"),
            (".Pre-Commit-Config.yaml", "pre-commit"),
            ("LEFTHOOK.YML", "lefthook"),
            ("sub/.CLAUDE/settings.json", "Claude Code"),
            (".GitHub/Hooks/x.json", "GitHub Copilot CLI"),
            ("OpenCode.json", "opencode"),
        ] {
            let said = runs_outside_name(Path::new(rel));
            assert!(said.is_some_and(|w| w.starts_with(who)), "{rel}: {said:?}");
        }
        assert!(holds_runs_outside_names(Path::new(".CONFIG")).is_some());
        for rel in ["src/main.rs", "sub/.vscode/settings.json", ".vscodex", "README.md", "k\u{212A}"] {
            assert_eq!(runs_outside_name(Path::new(rel)), None, "{rel}");
        }
    }
}
