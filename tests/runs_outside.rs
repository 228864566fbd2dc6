//! Red team 32: what the jail writes into the project that programs outside run later without
//! the user choosing to run project code: hook managers' configs (F5), husky's scripts in a
//! subdirectory (F11), files the repository's config includes (F15), agents' settings at any
//! depth (F12), what an `.envrc` loads (F6), aider's pickle cache (F4); and the project's own
//! git config holding a token (F10). Real git, real lefthook where installed; the user's side
//! runs outside the jail as the test user.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::path::{Path, PathBuf};

macro_rules! jail {
    ($name:expr) => {
        match Jail::new($name) {
            Some(j) => j,
            None => return,
        }
    };
}

/// git as the test user in the project, outside the jail.
fn git(j: &Jail, args: &[&str]) -> Out {
    let mut c = j.as_user("git");
    c.args(["-c", "user.name=U", "-c", "user.email=u@example.org", "-c", "init.defaultBranch=main"]).args(args);
    j.output(&mut c)
}

/// A repository in the project made by the user, with one commit.
fn repo(j: &Jail) {
    for a in [&["init", "-q"][..], &["add", "-A"], &["commit", "-qm", "one", "--allow-empty"]] {
        let out = git(j, a);
        assert_eq!(out.code, 0, "git {a:?}: {out}");
    }
}

/// Whether `p` is gone within two seconds (a placeholder is removed as the session ends).
fn gone_soon(p: &Path) -> bool {
    for _ in 0..200 {
        if !p.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

fn chmod_x(p: &Path) {
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// `lefthook` on this host, if any (the test rig installs none by default): `$ASB_TEST_LEFTHOOK`
/// or on `PATH`.
fn lefthook() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("ASB_TEST_LEFTHOOK").map(PathBuf::from).into_iter().collect();
    candidates.extend(
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join("lefthook")).collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    candidates.into_iter().find(|p| p.is_file())
}

/// F5: every name lefthook reads (lefthook.dev/configuration: `lefthook`, `.lefthook`, their
/// `-local` twins, each format, and `.config/`), pre-commit's and overcommit's, cannot be
/// made or changed inside; with lefthook installed, the user's next commit runs only theirs.
#[test]
fn every_config_name_of_the_hook_managers_is_refused_and_the_users_commit_runs_only_theirs() {
    let j = jail!("rt32-lefthook")
        .project_file("lefthook.yml", "pre-commit:\n  commands:\n    mine:\n      run: touch user-hook-ran\n");
    repo(&j);
    let lh = lefthook();
    if let Some(lh) = &lh {
        let mut c = j.as_user(lh);
        c.arg("install");
        let out = j.output(&mut c);
        assert_eq!(out.code, 0, "lefthook install: {out}");
    }
    let mut names = vec![];
    for stem in ["lefthook-local", ".lefthook-local", "lefthook", ".lefthook"] {
        for ext in ["yml", "yaml", "toml", "json", "jsonc"] {
            names.push(format!("{stem}.{ext}"));
            names.push(format!(".config/{stem}.{ext}"));
        }
    }
    names.extend([
        ".lefthook-local/pre-commit/x.sh".into(),
        ".pre-commit-config.yaml".into(),
        ".overcommit.yml".into(),
    ]);
    let payload = "pre-commit:\n  commands:\n    pwn:\n      run: touch pwned-lefthook\n";
    let script = names
        .iter()
        .map(|n| {
            format!(
                "mkdir -p \"$(dirname {n})\" 2>/dev/null; printf '{}' > {n} 2>/dev/null || echo REFUSED {n};",
                payload.replace('\n', "\\n")
            )
        })
        .collect::<String>();
    let out = j.run(&script);
    for n in &names {
        assert!(out.stdout.contains(&format!("REFUSED {n}\n")), "{n} was written: {out}");
        if n != "lefthook.yml" {
            assert!(gone_soon(&j.project.join(n)), "{n} exists on the host: {out}");
        }
    }
    assert!(out.stderr.contains("lefthook (git hooks) outside the jail reads this"), "the denial says why: {out}");
    assert!(!std::fs::read_to_string(j.project.join("lefthook.yml")).unwrap().contains("pwn"));
    if let Some(lh) = &lh {
        std::fs::write(j.project.join("f"), "x\n").unwrap();
        j.give(&[&j.project.join("f")]);
        assert_eq!(git(&j, &["add", "f"]).code, 0);
        // The user's shell finds lefthook where it is installed.
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", lh.parent().unwrap().display());
        let mut c = j.as_user("git");
        c.env("PATH", path).args(["-c", "user.name=U", "-c", "user.email=u@example.org", "commit", "-qm", "two"]);
        let out = j.output(&mut c);
        assert_eq!(out.code, 0, "the user's commit: {out}");
        assert!(j.project.join("user-hook-ran").exists(), "the user's own hook ran: {out}");
        assert!(!j.project.join("pwned-lefthook").exists(), "the jail's hook ran at the user's commit: {out}");
    }
}

/// The default protected list's editors' and tools' names, missing from the project: with the
/// git guard on none gets a placeholder (no round trips for them on a network filesystem), and
/// the guard refuses each, saying who reads it, so nothing is made on the host either.
#[test]
fn missing_editor_and_hook_names_are_the_guards_to_refuse_and_get_no_placeholder() {
    let j = jail!("rt35-top-names");
    let names = [
        (".envrc", "direnv"),
        (".vscode/tasks.json", "VS Code"),
        (".idea/workspace.xml", "JetBrains IDEs"),
        (".husky/pre-commit", "husky (git hooks)"),
        (".githooks/pre-commit", "git (the hooks core.hooksPath names)"),
    ];
    // A session each; the guard says why on the caller's stderr.
    for (n, who) in names {
        let top = n.split('/').next().unwrap_or(n);
        let out = j.run(&format!(
            "test -e {top} && echo PRESENT; mkdir -p \"$(dirname {n})\"; \
             echo 'touch pwned' > {n} 2>/dev/null || echo REFUSED"
        ));
        assert!(!out.stdout.contains("PRESENT"), "{top} has a placeholder: {out}");
        assert!(out.stdout.contains("REFUSED"), "{n} was written: {out}");
        assert!(out.stderr.contains(who) && out.stderr.contains("outside the jail reads this"), "{n}: {out}");
        assert!(gone_soon(&j.project.join(top)), "{top} exists on the host: {out}");
    }
}

/// F11: husky in a subdirectory (`core.hooksPath = web/.husky/_`): the scripts `_/h` runs,
/// `web/.husky/<hook>`, and what they name, are read-only inside; the user's commit runs theirs.
#[test]
fn huskys_scripts_in_a_subdirectory_and_what_they_run_cannot_be_changed() {
    let j = jail!("rt32-husky")
        .project_file(
            "web/.husky/_/h",
            "#!/bin/sh\nn=$(basename \"$0\")\nsh -e \"$(dirname \"$(dirname \"$0\")\")/$n\" \"$@\"\n",
        )
        .project_file("web/.husky/_/pre-commit", "#!/bin/sh\n. \"$(dirname \"$0\")/h\"\n")
        .project_file("web/.husky/pre-commit", "sh web/scripts/check.sh\n")
        .project_file("web/scripts/check.sh", "touch user-hook-ran\n");
    chmod_x(&j.project.join("web/.husky/_/pre-commit"));
    repo(&j);
    assert_eq!(git(&j, &["config", "core.hooksPath", "web/.husky/_"]).code, 0);
    let out = j.run(
        "echo 'touch pwned-husky' >> web/.husky/pre-commit || echo HOOK-RO; \
         echo 'touch pwned-check' >> web/scripts/check.sh || echo CHECK-RO; \
         echo 'touch pwned-new' > web/.husky/pre-push || echo NEW-RO",
    );
    for want in ["HOOK-RO", "CHECK-RO", "NEW-RO"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    let out = git(&j, &["commit", "-qm", "two", "--allow-empty"]);
    assert_eq!(out.code, 0, "the user's commit: {out}");
    assert!(j.project.join("user-hook-ran").exists(), "the user's own hook ran: {out}");
    assert!(!j.project.join("pwned-husky").exists() && !j.project.join("pwned-check").exists(), "{out}");
}

/// Outside review of issue 32, R2: the project is a workspace (`~/work`) holding another
/// repository. That repository's `core.hooksPath` scripts (husky's `.husky/_`) and the file
/// its `.envrc` loads were writable inside; git ran the hook at the user's next commit there,
/// direnv the loaded file at the next `cd`. Both are read-only inside now, and the user's
/// commit runs their own hook.
#[test]
fn a_nested_repositorys_hooks_path_and_what_its_envrc_loads_cannot_be_changed() {
    let j = jail!("rt32-workspace")
        .project_file(
            "sub/.husky/_/pre-commit",
            "#!/bin/sh\ntouch \"$(git rev-parse --show-toplevel)/user-hook-ran\"\n",
        )
        .project_file("sub/.envrc", "source_env_if_exists .envrc.local\nexport FOO=1\n")
        .project_file("sub/.envrc.local", "export BAR=1\n");
    chmod_x(&j.project.join("sub/.husky/_/pre-commit"));
    let sub = j.project.join("sub");
    let in_sub = |args: &[&str]| {
        let mut c = j.as_user("git");
        c.current_dir(&sub);
        c.args(["-c", "user.name=U", "-c", "user.email=u@example.org", "-c", "init.defaultBranch=main"]).args(args);
        j.output(&mut c)
    };
    for a in [&["init", "-q"][..], &["config", "core.hooksPath", ".husky/_"], &["add", "-A"]] {
        assert_eq!(in_sub(a).code, 0, "git {a:?}");
    }
    let out = j.run(
        "echo 'touch pwned-envrc-local' >> sub/.envrc.local || echo LOCAL-RO; \
         printf '#!/bin/sh\\ntouch pwned-hook\\n' > sub/.husky/_/pre-commit || echo HOOK-RO",
    );
    for want in ["LOCAL-RO", "HOOK-RO"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    let out = in_sub(&["commit", "-qm", "one"]);
    assert_eq!(out.code, 0, "the user's commit: {out}");
    assert!(sub.join("user-hook-ran").exists(), "the user's own hook ran: {out}");
    assert!(!sub.join("pwned-hook").exists() && !j.project.join("pwned-hook").exists(), "{out}");
    let local = std::fs::read_to_string(sub.join(".envrc.local")).unwrap();
    assert_eq!(local, "export BAR=1\n", "what the nested .envrc loads was changed");
}

/// Third look at issue 32, H1: the guard judged a directory's new name only, not what its
/// entries come to be: `mkdir y; echo .. > y/lefthook-local.yml; mv y .config` made
/// `.config/lefthook-local.yml` (the user's next `git commit` ran it), and `x/hooks/x.json`
/// moved to `.github` made GitHub Copilot CLI's hooks. Each such move is refused now; an
/// ordinary directory still moves.
#[test]
fn a_directory_moved_so_that_its_entries_become_settings_that_run_outside_is_refused() {
    let j = jail!("rt32-moved-names");
    repo(&j);
    let out = j.run(
        "mkdir y && echo 'pre-commit: {commands: {x: {run: touch pwned}}}' > y/lefthook-local.yml && \
         { mv y .config 2>/dev/null && echo MOVED-CONFIG || echo REFUSED-CONFIG; }; \
         mkdir -p x/hooks && echo '{}' > x/hooks/x.json && \
         { mv x .github 2>/dev/null && echo MOVED-GITHUB || echo REFUSED-GITHUB; }; \
         mkdir -p web/z/hooks && echo '{}' > web/z/hooks/a.json && \
         { mv web/z web/.github 2>/dev/null && echo MOVED-DEEP || echo REFUSED-DEEP; }; \
         mkdir -p src/old && echo 'x' > src/old/a.c && { mv src/old src/new && echo MOVED-ORDINARY; }; \
         mkdir u && echo 'pre-commit: {}' > u/lefthook-local.yml && chmod 000 u && \
         { mv u .config && echo MOVED-UNREADABLE || echo REFUSED-UNREADABLE; }; chmod 755 u .config 2>/dev/null; \
         mkdir -p w g/hooks && echo 'pre-commit: {}' > w/lefthook-local.yml && echo '{}' > g/hooks/x.json && \
         { ln -s w .config 2>/dev/null && echo LINKED-CONFIG || echo REFUSED-LINK-CONFIG; }; \
         { ln -s ../g web/.github 2>/dev/null && echo LINKED-GITHUB || echo REFUSED-LINK-GITHUB; }; \
         { ln -s w .opencode 2>/dev/null && echo LINKED-OPENCODE || echo REFUSED-LINK-OPENCODE; }; \
         { ln -s w notes-link && echo LINKED-ORDINARY; }",
    );
    // Fourth look, I1 (a directory the guard cannot read is refused) and I2 (a link standing
    // for the directory that holds such names).
    for want in [
        "REFUSED-CONFIG",
        "REFUSED-GITHUB",
        "REFUSED-DEEP",
        "MOVED-ORDINARY",
        "REFUSED-UNREADABLE",
        "REFUSED-LINK-CONFIG",
        "REFUSED-LINK-GITHUB",
        "REFUSED-LINK-OPENCODE",
        "LINKED-ORDINARY",
    ] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    // The refusal says why, in its own words (fifth look, J2).
    assert!(
        out.stderr.contains("could not be read, so what the move makes") && !out.stderr.contains("a repository here"),
        "{out}"
    );
    for planted in [".config/lefthook-local.yml", ".github/hooks/x.json", "web/.github/hooks/a.json"] {
        assert!(!j.project.join(planted).exists(), "{planted} was made: {out}");
    }
    assert!(j.project.join("src/new/a.c").exists(), "{out}");
}

/// F15: a file the repository's config includes (`include.path = ../.gitconfig`, and one that
/// does not exist yet) is protected like the config; the guard refuses writing include keys.
#[test]
fn files_the_repositorys_config_includes_are_protected_like_the_config() {
    let j = jail!("rt32-include").project_file(".gitconfig", "[alias]\n\tst = status\n");
    repo(&j);
    assert_eq!(git(&j, &["config", "--local", "include.path", "../.gitconfig"]).code, 0);
    assert_eq!(git(&j, &["config", "--local", "--add", "include.path", "../team.inc"]).code, 0);
    let out = j.run(
        "printf '[core]\\n\\tfsmonitor = touch pwned-include; false\\n' >> .gitconfig || echo INCLUDED-RO; \
         printf '[core]\\n\\tfsmonitor = touch pwned-missing; false\\n' > team.inc || echo MISSING-RO; \
         git config --local include.path ../other.inc || echo INCLUDE-KEY-REFUSED",
    );
    for want in ["INCLUDED-RO", "MISSING-RO", "INCLUDE-KEY-REFUSED"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    let out = git(&j, &["status", "--short"]);
    assert_eq!(out.code, 0, "the user's status: {out}");
    assert!(!j.project.join("pwned-include").exists() && !j.project.join("pwned-missing").exists(), "{out}");
    assert!(gone_soon(&j.project.join("team.inc")), "the placeholder stayed: {out}");
}

/// F12: agents' settings at any depth: an existing `web/.claude/settings.json` cannot be
/// changed, and none can be made anywhere (`web/.mcp.json`, `web/.codex/config.toml`,
/// `a/b/.gemini`, `.cursor`, `opencode.json`, an `.opencode/plugin`), each refusal one line.
#[test]
fn agent_settings_at_any_depth_cannot_be_made_or_changed() {
    let j = jail!("rt32-nested").project_file("web/.claude/settings.json", "{}\n").project_file("web/src/a.ts", "x\n");
    let out = j.run(
        "echo '{\"hooks\":{}}' > web/.claude/settings.json || echo SETTINGS-RO; \
         cp -r web/.claude /tmp/c && echo COPIED; \
         echo '{}' > web/.mcp.json || echo MCP-REFUSED; \
         mkdir -p web/.codex || echo CODEX-REFUSED; \
         mkdir -p a/b && mkdir a/b/.gemini || echo GEMINI-REFUSED; \
         mkdir web/x && echo '{}' > web/x/s.json && mv web/x web/.cursor || echo RENAME-REFUSED; \
         echo '{}' > web/src/opencode.json || echo OPENCODE-REFUSED; \
         mkdir -p web/.opencode && mkdir web/.opencode/plugin || echo PLUGIN-REFUSED; \
         echo ok > web/src/a.ts && echo ORDINARY-WRITABLE",
    );
    for want in [
        "SETTINGS-RO",
        "COPIED",
        "MCP-REFUSED",
        "CODEX-REFUSED",
        "GEMINI-REFUSED",
        "RENAME-REFUSED",
        "OPENCODE-REFUSED",
        "PLUGIN-REFUSED",
        "ORDINARY-WRITABLE",
    ] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    assert_eq!(std::fs::read_to_string(j.project.join("web/.claude/settings.json")).unwrap(), "{}\n");
    for p in
        ["web/.mcp.json", "web/.codex", "a/b/.gemini", "web/.cursor", "web/src/opencode.json", "web/.opencode/plugin"]
    {
        assert!(!j.project.join(p).exists(), "{p} was made: {out}");
    }
    // The guard's line comes from a thread of its own: before or after the shell's.
    let line = out.stderr.lines().find(|l| l.starts_with("agent-sandbox: ") && l.contains("web/.mcp.json"));
    assert!(line.unwrap_or_default().contains("Claude Code outside the jail reads this"), "one line says why: {out}");
}

/// Red team 32 R6: other agent CLIs' and editors' project settings that run commands, each
/// the reviewer's plant: none can be made (agents' at any depth, editors' and mise's at the
/// top), an existing one cannot be changed, and the same editor names deeper in the project
/// (a cloned repository's own) stay writable.
#[test]
fn other_agents_and_editors_settings_cannot_be_made_or_changed() {
    let j = jail!("rt32-r6").project_file(".zed/settings.json", "{}\n").project_file("web/src/a.ts", "x\n");
    let planted = [
        ".github/hooks/x.json",
        ".qwen/settings.json",
        ".crush.json",
        "crush.json",
        ".roo/mcp.json",
        ".kilocode/mcp.json",
        ".kiro/hooks/x.kiro.hook",
        ".kiro/settings/mcp.json",
        ".amazonq/mcp.json",
        ".junie/mcp/mcp.json",
        ".clinerules/hooks/PreToolUse",
        ".openhands/setup.sh",
        ".zed/tasks.json",
        ".helix/languages.toml",
        "mise.toml",
        ".mise.toml",
        ".factory/settings.json",
        ".amp/settings.json",
        "web/.qwen/settings.json",
        "web/.github/hooks/y.json",
    ];
    let mut script = String::new();
    for p in planted {
        let dir = Path::new(p).parent().map(|d| d.display().to_string()).unwrap_or_default();
        let mk = if dir.is_empty() { String::new() } else { format!("mkdir -p '{dir}' 2>/dev/null; ") };
        script.push_str(&format!("{mk}echo '{{\"x\":1}}' > '{p}' 2>/dev/null && echo 'MADE {p}'; "));
    }
    script.push_str(
        "echo '{\"lsp\":{}}' > .zed/settings.json 2>/dev/null && echo 'MADE .zed/settings.json'; \
         mkdir -p .github/workflows && echo ci > .github/workflows/ci.yml && echo WORKFLOW-WRITABLE; \
         mkdir -p vendor/lib/.zed && echo '{}' > vendor/lib/.zed/settings.json && echo '[tools]' > vendor/lib/mise.toml \
           && echo DEEP-EDITOR-WRITABLE; \
         echo ok > web/src/a.ts && echo ORDINARY-WRITABLE",
    );
    let out = j.run(&script);
    let made: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("MADE ")).collect();
    assert!(made.is_empty(), "written inside: {made:?}\n{out}");
    for want in ["WORKFLOW-WRITABLE", "DEEP-EDITOR-WRITABLE", "ORDINARY-WRITABLE"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    for p in planted {
        assert!(!j.project.join(p).exists(), "{p} stays on the host: {out}");
    }
    assert_eq!(std::fs::read_to_string(j.project.join(".zed/settings.json")).unwrap(), "{}\n");
    let line = out.stderr.lines().find(|l| l.starts_with("agent-sandbox: ") && l.contains("/crush.json"));
    assert!(
        line.unwrap_or_default().contains("Crush outside the jail reads this"),
        "one line says who reads it: {out}"
    );
}

/// F6: the forms of loading the `.envrc` reader missed: `source "$PWD/..."`, a `source` after
/// `then`, `PATH_add`, `layout`/`use` (`.direnv/`), a `bin/activate`, a command run by path.
#[test]
fn what_an_envrc_loads_in_any_form_is_read_only_inside() {
    let j = jail!("rt32-envrc")
        .project_file(
            ".envrc",
            "source \"$PWD/scripts/env.sh\"\nif [ -f .envrc.local ]; then source .envrc.local; fi\nPATH_add bin\n\
             layout python3\nsource .venv/bin/activate\n./tools/setup --quiet\n",
        )
        .project_file("scripts/env.sh", "export A=1\n")
        .project_file("bin/tool", "#!/bin/sh\n")
        .project_file(".venv/bin/activate", "PATH=$VIRTUAL_ENV/bin:$PATH\n")
        .project_file("tools/setup", "#!/bin/sh\n")
        .project_file("src/main.py", "print(1)\n");
    let out = j.run(
        "echo 'touch pwned' >> scripts/env.sh || echo PWD-RO; \
         echo 'touch pwned' > .envrc.local || echo THEN-RO; \
         printf '#!/bin/sh\\ntouch pwned\\n' > bin/git || echo PATHADD-RO; \
         mkdir -p .direnv/python-3/bin || echo DIRENV-RO; \
         printf '#!/bin/sh\\n' > .venv/bin/ls || echo VENV-BIN-RO; \
         echo 'touch pwned' >> tools/setup || echo RUN-RO; \
         echo 'print(2)' > src/main.py && echo SOURCE-WRITABLE",
    );
    for want in ["PWD-RO", "THEN-RO", "PATHADD-RO", "DIRENV-RO", "VENV-BIN-RO", "RUN-RO", "SOURCE-WRITABLE"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    for p in [".envrc.local", ".direnv", "bin/git", ".venv/bin/ls"] {
        assert!(gone_soon(&j.project.join(p)), "{p} exists on the host: {out}");
    }
}

/// F4: aider's tags cache (a pickle store aider loads outside): the session writes its own,
/// empty copy over an existing one, which stays as it was on the host; aider's cache library
/// works inside; a missing one cannot be made.
#[test]
fn aiders_tags_cache_is_the_sessions_own_and_the_users_stays_as_it_was() {
    let py = Path::new("/opt/agent-sandbox-test/aider-venv/bin/python");
    let j = jail!("rt32-aider").project_file(".aider.tags.cache.v4/cache.db", "users cache\n");
    let script = if py.exists() {
        format!(
            "ls .aider.tags.cache.v4; echo planted > .aider.tags.cache.v4/cache.db && echo WROTE-COPY; \
             rm .aider.tags.cache.v4/cache.db; {} -c \"import diskcache; c = diskcache.Cache('.aider.tags.cache.v4'); \
             c['k'] = 1; print('CACHE-WORKS', c['k'])\"; mkdir .aider.tags.cache.v3 || echo NEW-REFUSED",
            py.display()
        )
    } else {
        "ls .aider.tags.cache.v4; echo planted > .aider.tags.cache.v4/cache.db && echo WROTE-COPY CACHE-WORKS; \
         mkdir .aider.tags.cache.v3 || echo NEW-REFUSED"
            .into()
    };
    let out = j.run(&script);
    for want in ["WROTE-COPY", "CACHE-WORKS", "NEW-REFUSED"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    assert!(!out.stdout.contains("cache.db\n"), "the session saw the user's cache: {out}");
    assert_eq!(std::fs::read_to_string(j.project.join(".aider.tags.cache.v4/cache.db")).unwrap(), "users cache\n");
    assert!(!j.project.join(".aider.tags.cache.v3").exists());
}

/// F10: a token in the project's own git config (a remote URL's, an extraheader) is named in
/// one line at launch, without its value.
#[test]
fn a_token_in_the_projects_git_config_is_named_at_launch_never_shown() {
    let j = jail!("rt32-token");
    repo(&j);
    let token = "ghp_rt32CANARYtokenVALUE0123456789";
    let url = format!("https://x-access-token:{token}@github.com/o/r.git");
    assert_eq!(git(&j, &["remote", "add", "origin", &url]).code, 0);
    let mut c = j.command(&["run", "--", "true"]);
    let out = j.output(&mut c);
    assert_eq!(out.code, 0, "{out}");
    let line = out.stderr.lines().find(|l| l.contains("holds a credential")).unwrap_or_default();
    assert!(line.contains("remote\"origin\".url"), "one line naming the entry: {out}");
    assert!(!out.stderr.contains(token), "the value was shown: {out}");
}
