//! Build-time tasks: `cargo run -p xtask -- dist DIR` writes the man pages and the shell
//! completions the packages hold, generated from the launcher's clap definition
//! (`agent_sandbox::cli::Cli`), so that neither can say something the parser does not do.
//!
//!   DIR/man/agent-sandbox.1, DIR/man/agent-sandbox-SUBCOMMAND.1 (one per visible subcommand)
//!   DIR/completions/agent-sandbox.bash, DIR/completions/_agent-sandbox, DIR/completions/agent-sandbox.fish
//!
//! packaging/build.sh runs it before cargo-deb and cargo-generate-rpm.

use clap_complete::Shell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const BIN: &str = "agent-sandbox";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [task, dir] if task == "dist" => dist(Path::new(dir)),
        _ => Err("usage: cargo run -p xtask -- dist DIR   (man pages and shell completions into DIR)".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dist(dir: &Path) -> Result<(), String> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    // As the launcher parses: a session option is listed only where a session starts.
    let cmd = agent_sandbox::cli::Cli::scoped_command();
    // Built, so that each subcommand's page lists the global options it takes.
    let mut pages = cmd.clone().disable_help_subcommand(true);
    pages.build();
    write_pages(&pages, &man)?;
    for (shell, name) in
        [(Shell::Bash, "agent-sandbox.bash"), (Shell::Zsh, "_agent-sandbox"), (Shell::Fish, "agent-sandbox.fish")]
    {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), BIN, &mut out);
        write(&completions.join(name), &out)?;
    }
    println!("xtask: man pages in {}, completions in {}", man.display(), completions.display());
    Ok(())
}

/// One page for `cmd` (built) and one for each visible subcommand below it, named as git
/// names its pages (`agent-sandbox-policy-check.1`, clap's display name), each listing its
/// subcommands.
fn write_pages(cmd: &clap::Command, dir: &Path) -> Result<(), String> {
    let man = clap_mangen::Man::new(cmd.clone());
    let name = man.get_filename();
    let mut page = Vec::new();
    man.render(&mut page).map_err(|e| format!("cannot render {name}: {e}"))?;
    if cmd.get_name() == BIN {
        page.extend_from_slice(files_section().as_bytes());
    }
    write(&dir.join(&name), &page)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    Ok(())
}

/// Where the launcher reads its policy: the directory compiled in (`AGENT_SANDBOX_ETC_DIR`),
/// so that the page says what this build does.
fn files_section() -> String {
    let etc = agent_sandbox::policy::ETC_DIR;
    let entries: [(PathBuf, &str); 5] = [
        (Path::new(etc).join("config.toml"), "Site defaults: a layer between the built-in policy and the user's config."),
        (
            Path::new(etc).join("admin.toml"),
            "The admin lock file, applied last; users cannot widen what it sets. Must be owned by root and not group- or world-writable, like its directory, or every launch refuses to start.",
        ),
        (Path::new(etc).join("profiles/NAME.toml"), "Site profiles (agent-sandbox NAME)."),
        (
            PathBuf::from("~/.config/agent-sandbox/config.toml"),
            "The user's config ($XDG_CONFIG_HOME/agent-sandbox), and profiles/NAME.toml beside it, which take precedence over site profiles.",
        ),
        (
            PathBuf::from("/usr/share/agent-sandbox/profiles"),
            "Copies of the profiles built into the binary (codex, claude, gemini, aider, opencode, pi), to start a site or user profile from.",
        ),
    ];
    let mut s = String::from(".SH FILES\n");
    for (path, what) in entries {
        s.push_str(&format!(".TP\n\\fI{}\\fR\n{}\n", roff_escape(&path.display().to_string()), roff_escape(what)));
    }
    s.push_str(".SH SEE ALSO\n");
    s.push_str(
        "agent-sandbox doctor checks the host. The documentation (user guide, policy reference, security model, \
         Slurm) is in /usr/share/doc/agent-sandbox and docs/ of the source.\n",
    );
    s
}

/// Text in a roff paragraph: backslashes doubled, and a line that would start with a dot or
/// an apostrophe (a request) guarded.
fn roff_escape(s: &str) -> String {
    let s = s.replace('\\', "\\\\").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut f = std::fs::File::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join("man").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn pages_and_completions_list_each_option_where_the_launcher_takes_it() {
        let dir = std::env::temp_dir().join(format!("xtask-dist-{}", std::process::id()));
        dist(&dir).unwrap();
        // roff writes a dash as \-.
        let (run, doctor) = (page(&dir, "agent-sandbox-run.1"), page(&dir, "agent-sandbox-doctor.1"));
        assert!(run.contains("\\-\\-net") && run.contains("agent\\-sandbox run"), "{run}");
        assert!(
            doctor.contains("\\-\\-json") && !doctor.contains("\\-\\-net"),
            "doctor takes no session option: {doctor}"
        );
        let (check, show) = (page(&dir, "agent-sandbox-policy-check.1"), page(&dir, "agent-sandbox-policy-show.1"));
        assert!(
            check.contains("\\-\\-kind") && !check.contains("\\-\\-mem"),
            "policy check takes no session option: {check}"
        );
        assert!(show.contains("\\-\\-mem"), "policy show shows the policy the session's options make: {show}");
        let top = page(&dir, "agent-sandbox.1");
        assert!(top.contains(".SH FILES") && top.contains("/etc/agent\\-sandbox/admin.toml"), "{top}");
        // Hidden commands (the chaperon, the job's entry) and clap's `help` get no page.
        for none in ["agent-sandbox-chaperon.1", "agent-sandbox-exec.1", "agent-sandbox-help.1"] {
            assert!(!dir.join("man").join(none).exists(), "{none}");
        }
        let bash = std::fs::read_to_string(dir.join("completions/agent-sandbox.bash")).unwrap();
        assert!(bash.contains("policy") && bash.contains("--net"), "{bash}");
        for f in ["_agent-sandbox", "agent-sandbox.fish"] {
            assert!(std::fs::read_to_string(dir.join("completions").join(f)).unwrap().contains("doctor"), "{f}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
