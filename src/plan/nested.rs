//! Sandboxes of a program's own inside the jail (bubblewrap, which codex runs every command
//! in and Claude Code's sandbox mode uses): whether one can start here, and the one line a
//! launch prints when the command is such a program and its sandbox cannot start, so that an
//! agent whose every command fails while it exits 0 is never silent about why. Pure: the
//! policy, the backend and the command line in, data and text out.

use super::{BackendKind, PlanError};
use crate::policy::Policy;

/// Whether a nested sandbox can start in this jail, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NestedSandbox {
    /// `process.nested_userns = true` on the userns backend: bubblewrap runs, inside the jail.
    Allowed,
    /// `process.nested_userns` is off; `admin`: the admin's file forbids it.
    Off { admin: bool },
    /// The Landlock backend refuses every mount a process it confines makes, whatever the key.
    Landlock,
}

impl NestedSandbox {
    pub fn of(policy: &Policy, backend: BackendKind) -> NestedSandbox {
        let key = &policy.nested_userns;
        match (backend, key.value) {
            (BackendKind::Landlock, _) => NestedSandbox::Landlock,
            (BackendKind::Userns, true) => NestedSandbox::Allowed,
            (BackendKind::Userns, false) => NestedSandbox::Off { admin: key.source.is_admin() },
        }
    }

    /// Why a nested sandbox cannot start, and how it could (nothing when it cannot at all).
    fn why_and_how(self) -> Option<(&'static str, Option<&'static str>)> {
        match self {
            NestedSandbox::Allowed => None,
            NestedSandbox::Off { admin: false } => Some((
                "nested user namespaces are off (process.nested_userns = false)",
                Some(
                    "or allow it with `nested_userns = true` under [process] and `nested_git = true` \
                     under [filesystem] (the git guard cannot serve nested namespaces) in \
                     ~/.config/agent-sandbox/config.toml",
                ),
            )),
            NestedSandbox::Off { admin: true } => {
                Some(("the site's admin forbids nested user namespaces (process.nested_userns = false)", None))
            }
            NestedSandbox::Landlock => Some(("the Landlock backend refuses the mounts it makes", None)),
        }
    }
}

/// A program whose own sandbox makes a user namespace for what it runs.
#[derive(Debug)]
pub struct NestingProgram {
    /// Its file name, as the command's first word ends.
    pub program: &'static str,
    /// What its sandbox is, as the line names it.
    pub sandbox: &'static str,
    /// Arguments that turn its sandbox off: one containing any of these and the line is not
    /// needed (`--sandbox danger-full-access`, `-c sandbox_mode="danger-full-access"`).
    pub off: &'static [&'static str],
    /// How the user turns it off.
    pub turn_off: &'static str,
}

/// The table the line and its tests read.
pub const NESTING_PROGRAMS: &[NestingProgram] = &[
    NestingProgram {
        program: "codex",
        sandbox: "codex's own sandbox (bubblewrap)",
        off: &["--dangerously-bypass-approvals-and-sandbox", "--yolo", "danger-full-access"],
        turn_off:
            "run `agent-sandbox codex` (its profile turns codex's sandbox off) or pass --sandbox danger-full-access",
    },
    NestingProgram {
        program: "claude",
        sandbox: "Claude Code's sandbox mode (bubblewrap), if its settings turn it on,",
        off: &[r#""enabled":false"#],
        turn_off: concat!(
            "run `agent-sandbox claude` (its profile turns the sandbox mode off) or pass ",
            r#"--settings '{"sandbox":{"enabled":false}}'"#
        ),
    },
];

/// The line for a launch of `command`, if its program's own sandbox cannot start here.
pub fn warning(command: &[String], state: NestedSandbox) -> Option<String> {
    let (why, how) = state.why_and_how()?;
    let first = command.first()?;
    let name = first.rsplit('/').next().unwrap_or(first);
    let p = NESTING_PROGRAMS.iter().find(|p| p.program == name)?;
    if command.iter().skip(1).any(|a| p.off.iter().any(|o| a.contains(o))) {
        return None;
    }
    let how = how.map(|h| format!("; {h}")).unwrap_or_default();
    Some(format!(
        "{} cannot start in this jail: {why}, so every command {} runs fails (\"No permissions to create new \
         namespace\") while it goes on. Turn it off (this jail is the boundary): {}{how}.",
        p.sandbox, p.program, p.turn_off
    ))
}

/// `process.nested_userns = true` with the git guard on stops the launch: the guard carries
/// trapped calls out as the jail's init, which cannot write the id maps of a user namespace
/// two levels down (bubblewrap makes one to drop the uid 0 it set `/dev` up with), and a mount
/// namespace of the jail's own could bind the project at another path, where the guard's path
/// rules would not see it. The user chooses between them, as on a kernel without the guard.
pub(super) fn check_guard(policy: &Policy, guard_on: bool) -> Result<(), PlanError> {
    if !(policy.nested_userns.value && guard_on) {
        return Ok(());
    }
    let why = "the git guard cannot serve them (it carries trapped calls out as the jail's init, and a \
               mount namespace of the jail's own could show the project at a path the guard does not watch)"
        .to_string();
    let fix = match policy.nested_git.locked {
        true => "your admin keeps the git guard on (filesystem.nested_git locked): leave nested_userns off \
                 and turn the agent's own sandbox off (the agents' profiles do)"
            .to_string(),
        false => "also set `nested_git = true` under [filesystem] (the agent can then make git repositories in \
                  the project, whose hooks and config your own git runs outside the jail), or leave \
                  nested_userns off"
            .to_string(),
    };
    Err(PlanError::NestedUserns { why, fix })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    const OFF: NestedSandbox = NestedSandbox::Off { admin: false };

    #[test]
    fn the_table_names_each_program_once_with_a_way_to_turn_it_off() {
        let mut seen = std::collections::HashSet::new();
        for p in NESTING_PROGRAMS {
            assert!(seen.insert(p.program), "{} twice", p.program);
            assert!(!p.sandbox.is_empty() && !p.turn_off.is_empty(), "{}", p.program);
            assert!(!p.program.contains('/'), "a file name: {}", p.program);
        }
    }

    /// The issue's case: `codex exec --sandbox workspace-write` run without its profile gets
    /// a line saying why its commands fail and what to do, in every state it cannot start.
    #[test]
    fn codex_with_its_own_sandbox_gets_the_line_unless_it_can_start() {
        let cmd = argv("/usr/local/bin/codex exec --sandbox workspace-write fix-it");
        let line = warning(&cmd, OFF).unwrap();
        assert!(line.starts_with("codex's own sandbox (bubblewrap"), "{line}");
        assert!(line.contains("process.nested_userns = false"), "{line}");
        assert!(line.contains("agent-sandbox codex") && line.contains("--sandbox danger-full-access"), "{line}");
        assert!(line.contains("nested_userns = true") && line.contains("nested_git = true"), "{line}");
        assert!(!line.contains('\n'), "one line");
        let admin = warning(&cmd, NestedSandbox::Off { admin: true }).unwrap();
        assert!(admin.contains("admin forbids") && !admin.contains("nested_userns = true"), "{admin}");
        let landlock = warning(&cmd, NestedSandbox::Landlock).unwrap();
        assert!(landlock.contains("Landlock") && !landlock.contains("nested_userns = true"), "{landlock}");
        assert_eq!(warning(&cmd, NestedSandbox::Allowed), None, "bubblewrap starts: nothing to say");
    }

    #[test]
    fn a_command_line_that_turns_the_sandbox_off_gets_no_line() {
        for c in [
            "codex --dangerously-bypass-approvals-and-sandbox --disable plugins exec --sandbox workspace-write x",
            "codex exec --sandbox danger-full-access x",
            "codex -s danger-full-access exec x",
            "codex --yolo exec x",
            r#"codex -c sandbox_mode="danger-full-access" exec x"#,
            r#"claude --settings {"sandbox":{"enabled":false}} -p x"#,
            "python3 -c print(1)",
            "sh -c codex",
        ] {
            assert_eq!(warning(&argv(c), OFF), None, "{c}");
        }
        assert!(warning(&argv("claude -p x"), OFF).is_some());
        assert_eq!(warning(&[], OFF), None);
    }
}
