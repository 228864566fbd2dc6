//! The git guard (issue 13, item 4): the jail cannot make git repositories inside the project
//! or change the config and hooks of those already there, at any depth and at any time, since
//! the user's own git runs what they name outside the jail. And everything else a program does
//! with files works as before: the guard carries out the calls it traps for the caller.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::path::Path;

macro_rules! jail {
    ($name:expr) => {
        match Jail::new($name) {
            Some(j) => j,
            None => return,
        }
    };
}

/// Runs git as the test user in `dir`, outside the jail.
fn git_outside(j: &Jail, dir: &Path, args: &[&str]) -> std::process::Output {
    let mut c = j.as_user("git");
    c.current_dir(dir).args(["-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main"]);
    c.args(args).output().expect("git")
}

/// Runs git as the test user in `dir`, outside the jail, and says whether it succeeded.
fn git_ok(j: &Jail, dir: &Path, args: &[&str]) -> bool {
    git_outside(j, dir, args).status.success()
}

/// What agents do every day with repositories inside the project: each step prints
/// `<step>=<exit code>`.
const EVERYDAY_SH: &str = r##"
c() { git -c user.name=a -c user.email=a@example.org -c init.defaultBranch=main "$@"; }
step() { name=$1; shift; "$@" >/dev/null 2>step.err; echo "$name=$?"; cat step.err >&2; }
step init c init -q sub
step commit sh -c 'cd sub && echo x > f && git add f && git -c user.name=a -c user.email=b commit -qm x'
step clone c clone -q ./upstream clone
step worktree c worktree add -q wt
step worktree-of-clone c -C clone worktree add -q ../wt2
step submodule c -c protocol.file.allow=always submodule update --init -q
step npm-init sh -c 'mkdir pkg && cd pkg && npm init -y && git init -q && git add package.json && git -c user.name=a -c user.email=b commit -qm pkg'
step bare c init -q --bare bare.git
step clone-bare c clone -q bare.git frombare
step remote-add c -C sub remote add origin https://example.org/x.git
step branch-upstream c -C clone branch -q --set-upstream-to=origin/main main
step fsmonitor c -C sub config core.fsmonitor "touch $MARK"
step hookspath c -C clone config core.hooksPath .husky
step hook sh -c 'printf "#!/bin/sh\ntouch $MARK\n" > sub/.git/hooks/pre-commit'
"##;

#[test]
fn repositories_are_made_and_used_inside_the_project_and_the_user_uses_them_after() {
    let marker = format!("/tmp/asb-everyday-git-{}", std::process::id());
    let j = jail!("gitguard-everyday").project_file("upstream/README", "up\n").env("MARK", &marker);
    // The user's project: a repository with one commit and a declared submodule that is not
    // checked out, as after a fresh clone.
    let up = j.project.join("upstream");
    for args in [&["init", "-q"][..], &["add", "README"], &["commit", "-qm", "up"]] {
        assert!(git_ok(&j, &up, args), "{args:?}");
    }
    for args in [
        &["init", "-q"][..],
        &["-c", "protocol.file.allow=always", "submodule", "add", "-q", "./upstream", "lib"],
        &["commit", "-qm", "with lib"],
        &["submodule", "deinit", "-q", "-f", "lib"],
    ] {
        assert!(git_ok(&j, &j.project, args), "{args:?}");
    }
    std::fs::remove_dir_all(j.project.join(".git/modules/lib")).expect("rm modules/lib");
    let top_config = std::fs::read_to_string(j.project.join(".git/config")).expect("config");

    let out = j.run(EVERYDAY_SH);
    let rc =
        |step: &str| out.stdout.lines().find_map(|l| l.strip_prefix(&format!("{step}="))).unwrap_or("").to_string();
    for step in [
        "init",
        "commit",
        "clone",
        "worktree",
        "worktree-of-clone",
        "submodule",
        "npm-init",
        "bare",
        "clone-bare",
        "remote-add",
        "branch-upstream",
    ] {
        assert_eq!(rc(step), "0", "{step} fails inside the jail: {out}");
    }
    for step in ["fsmonitor", "hookspath", "hook"] {
        assert!(!rc(step).is_empty() && rc(step) != "0", "{step} must be refused: {out}");
    }
    assert!(out.stderr.contains("core.fsmonitor") && out.stderr.contains("agent-sandbox: "), "{out}");

    // Outside, afterwards: every repository is the user's to use, and none runs anything.
    let _ = std::fs::remove_file(&marker);
    for dir in ["sub", "clone", "wt", "wt2", "lib", "pkg", "frombare", "."] {
        let d = j.project.join(dir);
        assert!(git_ok(&j, &d, &["status", "--short"]), "git status in {dir}");
        std::fs::write(d.join("after.txt"), "after\n").expect("write");
        assert!(git_ok(&j, &d, &["add", "after.txt"]), "git add in {dir}");
        assert!(git_ok(&j, &d, &["commit", "-qm", "after"]), "git commit in {dir}");
    }
    assert!(!Path::new(&marker).exists(), "the user's git ran what the jail planted");
    let log = git_outside(&j, &j.project.join("wt"), &["log", "--format=%s"]);
    assert!(String::from_utf8_lossy(&log.stdout).contains("with lib"), "the worktree shares the project's history");
    // The user's own config kept its bytes: the submodule's entries were added after them.
    let now = std::fs::read_to_string(j.project.join(".git/config")).expect("config");
    assert!(now.starts_with(&top_config) && now.contains("[submodule \"lib\"]"), "{now}");
    let sub = std::fs::read_to_string(j.project.join("sub/.git/config")).expect("config");
    assert!(sub.contains("https://example.org/x.git") && !sub.contains("fsmonitor"), "{sub}");
}

#[test]
fn git_init_works_where_the_project_has_no_repository() {
    let j = jail!("gitguard-init-top");
    let out =
        j.run("git init -q && git -c user.name=a -c user.email=b commit -q --allow-empty -m first && echo TOP-OK");
    assert!(out.stdout.contains("TOP-OK"), "{out}");
    assert!(git_ok(&j, &j.project, &["log", "-1"]), "the user has the repository after");
}

/// What an agent turned against the user tries: each attempt prints `<case> DONE`,
/// `<case> REFUSED` (EPERM) or `<case> ERR <errno>`.
const ATTACKS_PY: &str = r#"
import errno, os, shutil, socket, subprocess

MARK = os.environ['MARK']
EVIL = '[core]\n\tfsmonitor = touch %s\n' % MARK

def attempt(name, fn):
    try:
        fn()
        print(name, 'DONE')
    except OSError as e:
        print(name, 'REFUSED' if e.errno == errno.EPERM else 'ERR %d' % e.errno)

def w(path, data='x', mode='w'):
    with open(path, mode) as f:
        f.write(data)

def git(*args):
    return subprocess.run(['git', '-c', 'user.name=a', '-c', 'user.email=b', *args], capture_output=True).returncode

def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True).returncode

# A repository the jail made: its config changes only through the guard's check.
git('init', '-q', 'sub')
print('git-config-fsmonitor', git('-C', 'sub', 'config', 'core.fsmonitor', 'touch ' + MARK))
print('git-config-hookspath', git('-C', 'sub', 'config', 'core.hooksPath', '../hooks'))
print('git-config-alias', git('-C', 'sub', 'config', 'alias.st', '!touch ' + MARK))
print('git-config-include', git('-C', 'sub', 'config', 'include.path', '../../inc'))
attempt('config-append', lambda: w('sub/.git/config', EVIL, 'a'))
attempt('config-trunc', lambda: w('sub/.git/config', EVIL, 'w'))
attempt('config-rplus', lambda: w('sub/.git/config', EVIL, 'r+'))
attempt('config-truncate', lambda: os.truncate('sub/.git/config', 10))
w('evil.lock', open('sub/.git/config').read() + EVIL)
attempt('config-rename', lambda: os.rename('evil.lock', 'sub/.git/config'))
attempt('config-link-out', lambda: os.link('sub/.git/config', 'alias-config'))
attempt('config-symlink', lambda: (os.rename('sub/.git/config', 'moved-config'), os.symlink('../../evil.lock', 'sub/.git/config')))
attempt('config-worktree', lambda: w('sub/.git/config.worktree', EVIL))
os.rename('moved-config', 'sub/.git/config') if os.path.exists('moved-config') else None
# Hooks: git's samples only.
attempt('hook-create', lambda: w('sub/.git/hooks/pre-commit', '#!/bin/sh\ntouch %s\n' % MARK))
attempt('hook-rename', lambda: os.rename('sub/.git/hooks/pre-commit.sample', 'sub/.git/hooks/pre-commit'))
attempt('hook-link', lambda: os.link('sub/.git/hooks/pre-commit.sample', 'sub/.git/hooks/post-checkout'))
os.makedirs('myhooks')
w('myhooks/pre-commit', '#!/bin/sh\ntouch %s\n' % MARK)
os.rename('sub/.git/hooks', 'hooks-away')
attempt('hooks-symlink', lambda: os.symlink('../../myhooks', 'sub/.git/hooks'))
attempt('hooks-rename-in', lambda: os.rename('myhooks', 'sub/.git/hooks'))
# A .git that is a symlink, or a directory prepared elsewhere and renamed in.
os.makedirs('d')
attempt('dotgit-symlink', lambda: os.symlink('../prepared', 'd/.git'))
os.makedirs('prepared/objects')
os.makedirs('prepared2')
w('prepared2/config', EVIL)
attempt('dotgit-rename-in', lambda: os.rename('prepared2', 'd/.git'))
# A bare repository built by hand, its config first: the mark that completes it is refused.
os.makedirs('bare/objects')
w('bare/config', EVIL)
w('bare/HEAD', 'ref: refs/heads/main\n')
attempt('bare-last-mark', lambda: os.mkdir('bare/refs'))
# A repository made by git, then stripped of its marks: its path stays a git directory's.
git('init', '-q', '--bare', 'b2')
sh('rm -rf b2/HEAD b2/objects b2/refs')
attempt('unmarked-config', lambda: w('b2/config', EVIL, 'a'))
sh('rm -rf b2')
attempt('remade-config', lambda: (os.mkdir('b2'), w('b2/config', EVIL)))
sh('rm -rf b2')
os.makedirs('y')
w('y/config', EVIL)
attempt('swapped-in', lambda: os.rename('y', 'b2'))
# A parent swapped: what arrives where a repository was is checked.
os.makedirs('pp')
git('init', '-q', '--bare', 'pp/b3')
os.rename('pp', 'pp-old')
os.makedirs('pq/b3')
w('pq/b3/config', EVIL)
attempt('parent-swapped', lambda: os.rename('pq', 'pp'))
attempt('symlink-above', lambda: os.symlink('pq', 'pp'))
# A worktree's commondir: only git's own, and it cannot be written again.
git('init', '-q', 'base')
git('-C', 'base', 'commit', '-q', '--allow-empty', '-m', 'x')
git('-C', 'base', 'worktree', 'add', '-q', '../wt')
attempt('commondir-write', lambda: w('base/.git/worktrees/wt/commondir', '../../../../b3'))
attempt('commondir-elsewhere', lambda: w('base/.git/commondir', '../x'))
# A repository in ~/.cache (guarded too), and a gitfile in the project pointing at it.
cache = os.path.expanduser('~/.cache/evil-repo')
os.makedirs(cache, exist_ok=True)
w(cache + '/config', EVIL)
os.makedirs(cache + '/objects', exist_ok=True)
attempt('cache-last-mark', lambda: os.mkdir(cache + '/refs'))
os.makedirs('g')
attempt('gitfile', lambda: w('g/.git', 'gitdir: %s\n' % cache))
# Repositories that were there before: the user's entries stay, nothing runs.
for gitdir in ['vendor/clone/.git', '.git/modules/m', '.git']:
    attempt('old-append ' + gitdir, lambda: w(gitdir + '/config', EVIL, 'a'))
    attempt('old-hook ' + gitdir, lambda: w(gitdir + '/hooks/post-checkout', '#!/bin/sh\ntouch %s\n' % MARK))
    w('newconfig', open(gitdir + '/config').read() + EVIL)
    attempt('old-rename ' + gitdir, lambda: os.rename('newconfig', gitdir + '/config'))
# A unix socket bound as a mark: checked like any mark (attack G1).
os.makedirs('sock/objects')
w('sock/config', EVIL)
attempt('bind-mark', lambda: socket.socket(socket.AF_UNIX).bind('sock/refs'))
attempt('bind-ordinary', lambda: socket.socket(socket.AF_UNIX).bind('ordinary.sock'))
# Past PATH_MAX the kernel cannot spell a path (attack G2).
def too_deep():
    top = os.open('.', os.O_RDONLY)
    os.mkdir('deep')
    d = os.open('deep', os.O_RDONLY)
    for _ in range(19):
        os.mkdir('d' * 200, dir_fd=d)
        d = os.open('d' * 200, os.O_RDONLY, dir_fd=d)
    os.rename('vendor', 'v', src_dir_fd=top, dst_dir_fd=d)
    os.mkdir('p' * 250)
    os.rename('deep', 'p' * 250 + '/deep')
    return top, d
top, deep = too_deep()
def deep_write():
    fd = os.open('v/clone/.git/config', os.O_WRONLY | os.O_APPEND, dir_fd=deep)
    os.write(fd, EVIL.encode())
attempt('deep-config', deep_write)
attempt('deep-link', lambda: os.link('v/clone/.git/config', 'deep-alias', src_dir_fd=deep, dst_dir_fd=top))
os.rename('p' * 250 + '/deep', 'deep')
os.rename('v', 'vendor', src_dir_fd=deep, dst_dir_fd=top)
# Work in the nested clone that was there goes on.
w('vendor/clone/file.txt', 'changed\n')
print('git-commit-nested', git('-C', 'vendor/clone', 'commit', '-qam', 'work-inside'))
"#;

#[test]
fn nothing_the_jail_writes_into_a_repository_runs_outside() {
    let marker = format!("/tmp/asb-guard-pwned-{}", std::process::id());
    let j = jail!("gitguard")
        .project_file("guard.py", ATTACKS_PY)
        .project_file("vendor/clone/file.txt", "v1\n")
        .env("MARK", &marker);
    // `~/.cache` is a writable tree (and so guarded) where the host has it; a fresh home has
    // none until a tool makes it, so the case in it must not hang on the tests run before.
    let made = j.as_user("mkdir").arg("-p").arg(j.rig.home.join(".cache")).status();
    assert!(made.is_ok_and(|s| s.success()), "mkdir ~/.cache as the test user");
    // The user's project: a repository with a submodule's git directory, and a nested clone.
    for args in [&["init", "-q"][..], &["init", "-q", "--bare", ".git/modules/m"]] {
        assert!(git_ok(&j, &j.project, args));
    }
    let clone = j.project.join("vendor/clone");
    for args in [&["init", "-q"][..], &["add", "file.txt"], &["commit", "-qm", "v1"]] {
        assert!(git_ok(&j, &clone, args), "{args:?}");
    }
    let config = |p: &str| std::fs::read_to_string(j.project.join(p)).unwrap_or_default();
    let before = [config("vendor/clone/.git/config"), config(".git/modules/m/config"), config(".git/config")];

    let out = j.run("python3 guard.py");
    let line = |case: &str| out.stdout.lines().find(|l| l.starts_with(&format!("{case} "))).unwrap_or("").to_string();
    for case in ["git-config-fsmonitor", "git-config-hookspath", "git-config-alias", "git-config-include"] {
        assert!(!line(case).ends_with(" 0") && !line(case).is_empty(), "{case} must fail: {out}");
    }
    let refused = refused_cases();
    for case in &refused {
        assert!(line(case).ends_with("REFUSED"), "{case}: {out}");
    }
    for case in ["deep-config", "deep-link"] {
        // ENAMETOOLONG: the guard cannot tell where such a path is, so it refuses.
        assert!(line(case).ends_with("ERR 36") || line(case).ends_with("REFUSED"), "{case}: {out}");
    }
    assert!(line("gitfile").ends_with("DONE"), "a gitfile is a pointer, not a repository: {out}");
    // Written directly, a config goes through the guard: the write is taken, the command left
    // out (one line says so), the user's own entries kept.
    for case in
        ["config-append", "config-trunc", "config-worktree", "unmarked-config", "remade-config", "commondir-write"]
            .into_iter()
            .map(String::from)
            .chain(["vendor/clone/.git", ".git/modules/m", ".git"].map(|g| format!("old-append {g}")))
    {
        assert!(line(&case).ends_with("DONE"), "{case}: {out}");
    }
    assert!(!config("sub/.git/config").contains("fsmonitor"), "{}", config("sub/.git/config"));
    assert!(!config("sub/.git/config.worktree").contains("fsmonitor"), "{}", config("sub/.git/config.worktree"));
    assert_eq!(
        config("base/.git/worktrees/wt/commondir").trim(),
        "../..",
        "a commondir written again is left as git made it"
    );
    assert!(line("bind-ordinary").ends_with("DONE"), "{out}");
    assert!(line("git-commit-nested").ends_with(" 0"), "work in a nested clone goes on: {out}");
    // One line the agent can act on (at most ten a second: the first of them).
    assert!(out.stderr.contains("agent-sandbox: ") && out.stderr.contains("changes only through git"), "{out}");

    // Outside, afterwards: the user's repositories kept their config, and the user's git, in
    // every directory the jail worked in, runs nothing.
    let after = [config("vendor/clone/.git/config"), config(".git/modules/m/config"), config(".git/config")];
    assert_eq!(before, after, "a repository's config changed: {out}");
    users_git_runs_nothing(&j, &marker, &out);
    let audit = std::fs::read_to_string(j.rig.home.join(".local/state/agent-sandbox/audit.jsonl")).unwrap_or_default();
    assert!(
        audit.lines().any(|l| l.contains("\"fs_denied\"") && l.contains("git-config") && l.contains("gitguard/sub")),
        "no audit record"
    );
}

/// The cases of guard.py the guard refuses outright: in the session's repositories, and the
/// hooks of each repository that was there before it.
fn refused_cases() -> Vec<String> {
    let mut refused: Vec<String> = [
        "config-rplus",
        "config-truncate",
        "config-rename",
        "config-link-out",
        "config-symlink",
        "hook-create",
        "hook-rename",
        "hook-link",
        "hooks-symlink",
        "hooks-rename-in",
        "dotgit-symlink",
        "dotgit-rename-in",
        "bare-last-mark",
        "swapped-in",
        "parent-swapped",
        "symlink-above",
        "commondir-elsewhere",
        "cache-last-mark",
        "bind-mark",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for gitdir in ["vendor/clone/.git", ".git/modules/m", ".git"] {
        refused.extend(["old-hook", "old-rename"].map(|c| format!("{c} {gitdir}")));
    }
    refused
}

/// Outside, afterwards: the user's git, in every directory the jail worked in, runs nothing
/// of what the jail wrote (the command it planted would make `marker`).
fn users_git_runs_nothing(j: &Jail, marker: &str, out: &Out) {
    let _ = std::fs::remove_file(marker);
    for dir in
        [".", "sub", "d", "bare", "b2", "pp", "pp/b3", "pq", "base", "wt", "g", "sock", "vendor/clone", "prepared"]
    {
        let d = j.project.join(dir);
        if d.is_dir() {
            let _ = git_outside(j, &d, &["status"]);
            let _ = git_outside(j, &d, &["commit", "-q", "--allow-empty", "-m", "user"]);
        }
    }
    assert!(!Path::new(marker).exists(), "the user's git ran the jail's command: {out}");
}

#[test]
fn the_issue_attack_core_fsmonitor_in_a_staged_nested_repository_never_runs_outside() {
    // As reported: make sub/, give it a repository with core.fsmonitor, stage it in the
    // project's index, and wait for the user's next `git status`.
    let attack = |name: &str, guard_off: bool| -> bool {
        let Some(j) = Jail::new(name) else { return false };
        assert!(git_outside(&j, &j.project, &["init", "-q"]).status.success());
        let j = if guard_off {
            let policy = j.rig.home.join(format!("t/{name}-policy.toml"));
            std::fs::write(&policy, "[filesystem]\nnested_git = true\n").expect("policy");
            j.give(&[&policy]);
            j.arg("--policy").arg(policy.to_str().expect("utf-8"))
        } else {
            j
        };
        let marker = format!("/tmp/asb-fsmonitor-{name}-{}", std::process::id());
        let _ = std::fs::remove_file(&marker);
        let script = format!(
            "mkdir -p sub && cd sub && git init -q; git config core.fsmonitor 'touch {marker}'; \
             echo x > f && git add f && git -c user.name=a -c user.email=b commit -qm x; cd .. && git add sub; \
             echo tried"
        );
        let out = j.run(&script);
        assert!(out.stdout.contains("tried"), "{out}");
        // The jail's /tmp is its own: only the user's git, outside, can make the marker here.
        let _ = git_outside(&j, &j.project, &["status"]);
        let _ = git_outside(&j, &j.project.join("sub"), &["status"]);
        let ran = Path::new(&marker).exists();
        let _ = std::fs::remove_file(&marker);
        ran
    };
    if Jail::new("gitguard-probe").is_none() {
        return;
    }
    // The attack is real: with the guard off, the user's own git status runs the command...
    assert!(attack("gitguard-fsmonitor-off", true), "the attack did not work even without the guard");
    // ...and with it, it never does, though the repository is made and staged.
    assert!(!attack("gitguard-fsmonitor", false), "the user's git status ran the jail's fsmonitor");
}

/// The jail attacks in a loop while the user's git runs in the same directories in another
/// terminal: a git that resolved a repository's path must never read a config the jail
/// swapped in there meanwhile.
const RACE_SH: &str = r#"
end=$(( $(date +%s) + 4 ))
evil="[core]
	fsmonitor = touch $MARK"
n=0
while [ "$(date +%s)" -lt "$end" ]; do
  n=$((n+1))
  # swap a prepared directory in where the repository was
  mkdir -p prep && printf '%s\n' "$evil" > prep/config 2>/dev/null
  mv r/.git r/.git-old 2>/dev/null; mv prep r/.git 2>/dev/null; rm -rf r/.git-old prep
  # unmark, rewrite, mark again
  rm -f r/.git/HEAD; printf '%s\n' "$evil" >> r/.git/config 2>/dev/null
  printf 'ref: refs/heads/main\n' > r/.git/HEAD 2>/dev/null
  # remove and make again
  rm -rf b && mkdir -p b/objects b/refs && printf '%s\n' "$evil" > b/config 2>/dev/null; printf 'ref: refs/heads/main\n' > b/HEAD 2>/dev/null
  git init -q r >/dev/null 2>&1; git init -q --bare b >/dev/null 2>&1
done
echo "rounds=$n"
"#;

#[test]
fn a_users_git_running_while_the_jail_swaps_repositories_never_runs_what_it_planted() {
    // Returns (whether the user's git ran the plant, the jail's rounds, the user's runs).
    let race = |name: &str, guard_off: bool| -> Option<(bool, String, usize)> {
        let marker = format!("/tmp/asb-guard-race-{name}-{}", std::process::id());
        let mut j = Jail::new(name)?.env("MARK", &marker);
        if guard_off {
            let policy = j.rig.home.join(format!("t/{name}-policy.toml"));
            std::fs::write(&policy, "[filesystem]\nnested_git = true\n").expect("policy");
            j.give(&[&policy]);
            j = j.arg("--policy").arg(policy.to_str().expect("utf-8"));
        }
        for args in [&["init", "-q", "r"][..], &["init", "-q", "--bare", "b"]] {
            assert!(git_ok(&j, &j.project, args));
        }
        let _ = std::fs::remove_file(&marker);
        let session = j
            .command(&["-q", "run", "--", "sh", "-c", RACE_SH])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("jail");
        // The other terminal: the user's git, over and over, in both repositories (from the
        // project, as the directories come and go).
        let t0 = std::time::Instant::now();
        let mut runs = 0;
        while t0.elapsed() < std::time::Duration::from_secs(4) {
            for d in ["r", "b"] {
                let mut c = j.as_user("git");
                c.current_dir(&j.project).args(["-C", d, "status", "--short"]);
                if c.output().is_ok() {
                    runs += 1;
                }
            }
        }
        let out = session.wait_with_output().expect("jail");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let ran = Path::new(&marker).exists();
        let _ = std::fs::remove_file(&marker);
        Some((ran, stdout, runs))
    };
    let Some((ran_off, _, _)) = race("gitguard-race-off", true) else { return };
    assert!(ran_off, "the attack did not work even without the guard: the test shows nothing");
    let (ran, stdout, runs) = race("gitguard-race", false).expect("the rig is up");
    assert!(stdout.contains("rounds=") && runs > 20, "{stdout}, the user's git ran {runs} times");
    assert!(!ran, "the user's git ran what the jail planted ({stdout}, {runs} runs)");
}

/// The outside review of this guard (issue 31): each attack made the user's git, outside,
/// run a planted command; each must now be refused or left harmless. `$MARK` is the host file
/// the planted command would make.
const REVIEW_SH: &str = r##"
evil() { printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "touch %s; false"\n' "$MARK"; }
hook() { printf '#!/bin/sh\ntouch %s\n' "$MARK"; }
stage() { git update-index --add --cacheinfo "160000,1111111111111111111111111111111111111111,$1" 2>/dev/null; }
# A1: a symlink as the mark that completes a repository.
mkdir -p stash/objects; echo 'ref: refs/heads/main' > stash/HEAD; evil > stash/config
ln -s objects stash/refs && echo A1-LINKED || echo A1-REFUSED
mkdir sub1; echo 'gitdir: ../stash' > sub1/.git; stage sub1
# A2: a worktree's directory filled while its repository was not one, then completed.
mkdir -p a/worktrees/w/hooks; echo 'ref: refs/heads/main' > a/worktrees/w/HEAD; evil > a/worktrees/w/config
hook > a/worktrees/w/hooks/pre-commit; chmod +x a/worktrees/w/hooks/pre-commit
echo 'ref: refs/heads/main' > a/HEAD; mkdir a/objects && mkdir a/refs && echo A2-COMPLETED || echo A2-REFUSED
mkdir -p a/worktrees/w/objects a/worktrees/w/refs 2>/dev/null
mkdir sub2; echo 'gitdir: ../a/worktrees/w' > sub2/.git; stage sub2
# A3: a name that is not UTF-8, where a repository was.
X=$(printf 'r\377')
mkdir "$X"; echo 'ref: refs/heads/main' > "$X/HEAD"; mkdir "$X/objects" "$X/refs"
mv "$X" gone3; mkdir -p T/hooks; echo 'ref: refs/heads/main' > T/HEAD; evil > T/config
mv T "$X" && echo A3-MOVED || echo A3-REFUSED
mkdir -p "$X/objects" "$X/refs" 2>/dev/null
mkdir sub3; printf 'gitdir: ../%s\n' "$X" > sub3/.git; stage sub3
# A4: a directory renamed to .git by one thread while another makes its config.
cc -O1 -pthread -o race race.c && ./race && echo A4-RAN
# A7: PID 1's own /proc entries through the guard.
cat /proc/1/maps >/dev/null 2>&1 && echo A7-DIRECT
python3 -c "import os; os.open('/proc/1/maps', os.O_RDONLY | os.O_CREAT)" 2>/dev/null && echo A7-OPENED || echo A7-REFUSED
python3 -c "import os; os.open('/proc/self/../1/maps', os.O_RDONLY | os.O_CREAT)" 2>/dev/null && echo A7B-OPENED || echo A7B-REFUSED
python3 -c "import os; os.open('/proc/self/status', os.O_RDONLY | os.O_CREAT)" 2>/dev/null && echo A7-OWN-OPENED
echo review-done
"##;

/// Attack A4: thread B renames a directory to `x/.git` (its large allowed config.worktree holds
/// the guard's lock while it is checked) while thread A makes `config` in it by its old path.
const REVIEW_RACE_C: &str = r#"
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static char plain[64], dotgit[64];
static void *renamer(void *a) { (void)a; rename(plain, dotgit); return 0; }
int main(void) {
    static char big[1000000]; size_t n = sprintf(big, "[user]\n");
    while (n + 32 < sizeof big) n += sprintf(big + n, "\tname = aaaaaaaaaaaaaaaaaaaa\n");
    const char *mark = getenv("MARK");
    for (int i = 0; i < 60; i++) {
        snprintf(plain, sizeof plain, "plain%d", i);
        snprintf(dotgit, sizeof dotgit, "x%d/.git", i);
        mkdir(plain, 0755);
        char p[128]; snprintf(p, sizeof p, "%s/HEAD", plain);
        FILE *f = fopen(p, "w"); fputs("ref: refs/heads/main\n", f); fclose(f);
        snprintf(p, sizeof p, "%s/config.worktree", plain);
        f = fopen(p, "w"); fwrite(big, 1, n, f); fclose(f);
        snprintf(p, sizeof p, "x%d", i); mkdir(p, 0755);
        pthread_t t; pthread_create(&t, 0, renamer, 0);
        usleep((i * 37) % 4000);
        snprintf(p, sizeof p, "plain%d/config", i);
        int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0644);
        if (fd >= 0) { dprintf(fd, "[core]\n\tfsmonitor = \"touch %s; false\"\n", mark); close(fd); }
        pthread_join(t, 0);
        usleep(2000);
        snprintf(p, sizeof p, "x%d/.git/objects", i); mkdir(p, 0755);
        snprintf(p, sizeof p, "x%d/.git/refs", i); mkdir(p, 0755);
        char info[128]; snprintf(info, sizeof info, "git update-index --add --cacheinfo 160000,1111111111111111111111111111111111111111,x%d 2>/dev/null", i);
        if (system(info)) {}
    }
    return 0;
}
"#;

#[test]
fn the_outside_reviews_attacks_leave_nothing_that_runs_outside() {
    let marker = format!("/tmp/asb-guard-review-{}", std::process::id());
    let j = jail!("gitguard-review").project_file("race.c", REVIEW_RACE_C).env("MARK", &marker);
    for args in [&["init", "-q"][..], &["commit", "-q", "--allow-empty", "-m", "x"]] {
        assert!(git_ok(&j, &j.project, args));
    }
    let out = j.output_within(
        &mut j.command(&["-q", "run", "--", "bash", "-c", REVIEW_SH]),
        std::time::Duration::from_secs(120),
    );
    assert!(out.stdout.contains("review-done"), "{out}");
    for refused in ["A1-REFUSED", "A2-REFUSED", "A3-REFUSED", "A7-REFUSED", "A7B-REFUSED"] {
        assert!(out.stdout.contains(refused), "{refused}: {out}");
    }
    assert!(out.stdout.contains("A7-OWN-OPENED"), "a process's own /proc entries stay its own: {out}");
    assert!(!out.stdout.contains("A7-DIRECT"), "PID 1 is not readable directly either: {out}");
    // Outside: the user's git status recurses into every staged repository.
    let _ = std::fs::remove_file(&marker);
    let status = git_outside(&j, &j.project, &["status", "--short"]);
    let _ = git_outside(&j, &j.project.join("sub2"), &["commit", "-q", "--allow-empty", "-m", "u"]);
    assert!(
        !Path::new(&marker).exists(),
        "the user's git ran a planted command: {out}\n{}",
        String::from_utf8_lossy(&status.stdout)
    );
}

#[test]
fn a_repository_copied_into_the_project_works_and_keeps_only_what_may_be_kept() {
    // cp -r, tar x and Python's copytree write a repository's config directly: the guard
    // installs what they wrote, checked, and the copy is a working repository.
    let marker = format!("/tmp/asb-guard-copy-{}", std::process::id());
    let j = jail!("gitguard-copy").env("MARK", &marker);
    let src = j.project.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    j.give(&[&src]);
    for args in
        [&["init", "-q"][..], &["commit", "-q", "--allow-empty", "-m", "original"], &["worktree", "add", "-q", "../wt"]]
    {
        assert!(git_ok(&j, &src, args), "{args:?}");
    }
    let out = j.run(
        "cp -r src cp1 && echo CP-OK; tar cf t.tar src && mkdir tx && tar xf t.tar -C tx && echo TAR-OK; \
         python3 -c 'import shutil; shutil.copytree(\"src\", \"py\")' && echo PY-OK; \
         for d in cp1 tx/src py; do git -C $d log --format=%s; done; \
         printf '[core]\\n\\tfsmonitor = touch %s\\n' \"$MARK\" >> cp1/.git/config; echo APPENDED=$?",
    );
    for want in ["CP-OK", "TAR-OK", "PY-OK", "APPENDED=0"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
    assert_eq!(out.stdout.matches("original").count(), 3, "each copy is a repository with its history: {out}");
    assert!(out.stderr.contains("written without `core.fsmonitor`"), "one line says what was left out: {out}");
    let _ = std::fs::remove_file(&marker);
    for d in ["cp1", "tx/src", "py"] {
        assert!(git_ok(&j, &j.project.join(d), &["status", "--short"]), "{d}");
    }
    assert!(!Path::new(&marker).exists(), "{out}");
    let cfg = std::fs::read_to_string(j.project.join("cp1/.git/config")).expect("config");
    assert!(!cfg.contains("fsmonitor") && cfg.contains("repositoryformatversion"), "{cfg}");
    // A copy made as the session's last act is whole too: PID 1 waits for what is written.
    let out = j.run("cp -r src last");
    assert_eq!(out.code, 0, "{out}");
    let cfg = std::fs::read_to_string(j.project.join("last/.git/config")).unwrap_or_default();
    assert!(cfg.contains("repositoryformatversion"), "the last copy's config was lost: {cfg:?} {out}");
}

#[test]
fn a_config_replaced_by_a_rename_while_open_for_writing_keeps_what_was_renamed_in() {
    // libgit2 (`cargo new`, pygit2) makes a repository's config with an empty
    // `open(O_TRUNC)`, then sets each entry through `config.lock` and a rename. With a plain
    // file the writes of the first open went into a file the rename replaced; the guard's
    // install of them, done when the writer closes, must not put them back over the entries
    // renamed in since (the CI failure of stop 40: `user.name` and the remote's URL lost).
    // Here the first descriptor stays open across the rename, so its install comes last.
    let j = jail!("gitguard-replaced");
    let out = j.run(
        "git -c init.defaultBranch=main init -q r && exec 3>r/.git/config && \
         git -C r config user.name Late && git -C r remote add origin https://example.org/r.git && \
         exec 3>&- && sleep 1 && git -C r config user.name && git -C r remote get-url origin",
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("Late\nhttps://example.org/r.git"), "{out}");
    let cfg = std::fs::read_to_string(j.project.join("r/.git/config")).expect("config");
    assert!(cfg.contains("Late") && cfg.contains("https://example.org/r.git"), "{cfg}");
}

#[test]
fn the_guard_opens_proc_entries_as_the_callers_own_only() {
    // Issue 33, finding 4: the guard rewrote `/proc/self` by prefix and followed `..` and magic
    // links, so `/proc/self/../1/fd/N` was PID 1's descriptor (the `--json-status` pipe: a
    // forged "exit 0" line) and `//proc/self` the guard's own.
    let j = jail!("gitguard-proc");
    let script = "exec 3>own.txt
python3 - <<'PY'
import os
def tryopen(name, path, flags):
    try:
        fd = os.open(path, flags, 0o600)
        os.write(fd, b'') if flags & os.O_WRONLY else None
        print(name, 'OPENED')
    except OSError as e:
        print(name, 'ERR', e.errno)
W = os.O_WRONLY | os.O_CREAT
tryopen('dotdot-fd', '/proc/self/../1/fd/9', W)
tryopen('dotdot-fd-inner', '/proc/self/fd/../../1/fd/9', W)
tryopen('pid1-fd', '/proc/1/fd/9', W)
tryopen('pid1-maps', '/proc/1/maps', os.O_RDONLY | os.O_CREAT)
tryopen('double-slash-own', '//proc/self/fd/3', W)
tryopen('dot-own', '/proc/./self/fd/3', W)
PY
printf 'forged\\n' > /proc/self/../1/fd/9 2>/dev/null && echo FORGED-WRITE
";
    let j = j.project_file("probe.sh", script);
    // The orchestrator's status pipe is descriptor 9 of the launcher, and PID 1 inherits it.
    let status = j.project.join("status.jsonl");
    let args: Vec<String> = j
        .launcher_args(&["-q", "--json-status", "9", "run", "--", "sh", "probe.sh"])
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut c = j.as_user("sh");
    c.arg("-c").arg(format!("exec 9>{}; exec {} {}", status.display(), j.rig.bin.display(), args.join(" ")));
    let out = j.output(&mut c);
    let line = |case: &str| out.stdout.lines().find(|l| l.starts_with(&format!("{case} "))).unwrap_or("").to_string();
    for case in ["dotdot-fd", "dotdot-fd-inner", "pid1-fd", "pid1-maps"] {
        assert!(line(case).starts_with(&format!("{case} ERR")), "{case}: {out}");
    }
    for case in ["double-slash-own", "dot-own"] {
        assert_eq!(line(case), format!("{case} OPENED"), "the caller's own descriptor, spelled otherwise: {out}");
    }
    assert!(!out.stdout.contains("FORGED-WRITE"), "{out}");
    let lines = std::fs::read_to_string(&status).unwrap_or_default();
    // The launcher writes a start and an exit line; nothing else reaches the pipe.
    assert!(!lines.contains("forged") && lines.lines().count() == 2, "only the launcher's status lines: {lines}");
}

#[test]
fn a_repository_the_jail_broke_keeps_its_protection_for_the_session() {
    // Issue 33, finding 5: with `refs` moved out, `config` was no repository's and could be
    // hard-linked away; once the user repaired the repository, a later session wrote
    // core.fsmonitor through the link.
    let j = jail!("gitguard-broken");
    let bare = j.project.join("b.git");
    std::fs::create_dir_all(&bare).expect("mkdir");
    j.give(&[&bare]);
    assert!(git_ok(&j, &bare, &["init", "-q", "--bare"]));
    assert!(git_ok(&j, &j.project, &["init", "-q", "nested"]));
    let out = j.run(
        "mv b.git/refs refs-aside && ln b.git/config cfg-link && echo BARE-LINKED; \
         mv nested/.git/refs refs-aside2 && ln nested/.git/config cfg-link2 && echo NESTED-LINKED; \
         mv b.git/HEAD head-aside; ln b.git/config cfg-link3 && echo UNMARKED-LINKED; echo done",
    );
    assert!(out.stdout.contains("done"), "{out}");
    for case in ["BARE-LINKED", "NESTED-LINKED", "UNMARKED-LINKED"] {
        assert!(!out.stdout.contains(case), "{case}: {out}");
    }
}

/// File work of every kind, as programs do it: each prints `<case> OK` or `<case> FAIL ...`.
const ORDINARY_PY: &str = r#"
import ctypes, errno, os, shutil, stat, subprocess, threading

def ok(name, fn):
    try:
        r = fn()
        print(name, 'OK' if r in (None, True) else 'FAIL %r' % (r,))
    except Exception as e:
        print(name, 'FAIL', repr(e))

def w(path, data='x', mode='w'):
    with open(path, mode) as f:
        f.write(data)
    return True

def raises(fn, code):
    try:
        fn()
    except OSError as e:
        return e.errno == code or e.errno
    return 'no error'

def umask_applies():
    old = os.umask(0o077)
    w('u-file')
    os.mkdir('u-dir')
    os.umask(old)
    return (stat.S_IMODE(os.stat('u-file').st_mode), stat.S_IMODE(os.stat('u-dir').st_mode)) == (0o600, 0o700)

def dangling_symlink_creates_its_target():
    os.symlink('made-through-link', 'dangling')
    w('dangling', 'via link')
    return open('made-through-link').read() == 'via link'

def tmpfile_then_link():
    # The usual idiom: an unnamed file, named once complete with linkat(AT_SYMLINK_FOLLOW).
    fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o600)
    os.write(fd, b'anonymous')
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.linkat(-100, b'/proc/self/fd/%d' % fd, -100, b'named-later', 0x400) != 0:
        return 'linkat errno %d' % ctypes.get_errno()
    os.close(fd)
    return open('named-later').read() == 'anonymous'

def fifo():
    os.mkfifo('ff')
    reader = subprocess.Popen(['cat', 'ff'], stdout=subprocess.PIPE)
    w('ff', 'through the fifo')
    return reader.communicate()[0] == b'through the fifo'

def dir_fd():
    os.mkdir('dfd')
    d = os.open('dfd', os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open('inner', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d)
    os.write(fd, b'in dir')
    os.mkdir('innerdir', dir_fd=d)
    os.rename('inner', 'innerdir/moved', src_dir_fd=d, dst_dir_fd=d)
    return open('dfd/innerdir/moved').read() == 'in dir'

def threads():
    os.mkdir('many')
    def work(t):
        for i in range(50):
            w('many/%d-%d' % (t, i), str(i))
    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return len(os.listdir('many')) == 400

def cwd_relative():
    os.makedirs('deep/er/still', exist_ok=True)
    here = os.getcwd()
    os.chdir('deep/er')
    w('still/rel')
    os.chdir(here)
    return os.path.exists('deep/er/still/rel')

def replace_and_append():
    w('atomic.tmp', 'new')
    w('atomic', 'old')
    os.replace('atomic.tmp', 'atomic')
    w('atomic', '+more', 'a')
    fd = os.open('atomic', os.O_RDWR)
    os.write(fd, b'N')
    os.close(fd)
    return open('atomic').read() == 'New+more'

ok('umask', umask_applies)
ok('exclusive', lambda: w('once', 'x', 'x') and raises(lambda: w('once', 'x', 'x'), errno.EEXIST) is True)
ok('dangling-symlink', dangling_symlink_creates_its_target)
ok('tmpfile-link', tmpfile_then_link)
ok('fifo', fifo)
ok('dir-fd', dir_fd)
ok('threads', threads)
ok('cwd-relative', cwd_relative)
ok('replace-append-rdwr', replace_and_append)
ok('hardlink', lambda: os.link('atomic', 'atomic-2') or os.stat('atomic-2').st_nlink == 2)
ok('symlink', lambda: os.symlink('atomic', 'atomic-ln') or os.readlink('atomic-ln') == 'atomic')
ok('enoent', lambda: raises(lambda: w('no/such/dir/f'), errno.ENOENT) is True)
ok('eexist-mkdir', lambda: raises(lambda: os.mkdir('many'), errno.EEXIST) is True)
ok('eisdir', lambda: raises(lambda: w('many'), errno.EISDIR) is True)
ok('erofs', lambda: raises(lambda: w('/usr/guard-test'), errno.EROFS) is True)
ok('dev-null', lambda: w('/dev/null', 'gone'))
ok('tmp-and-home', lambda: w('/tmp/t1') and w(os.path.expanduser('~/h1')))
ok('stdout-by-path', lambda: subprocess.run("sh -c 'echo piped > /dev/stdout; echo err > /dev/stderr' 2>&1 | cat",
                                            shell=True, capture_output=True).stdout == b'piped\nerr\n')
ok('cp-and-tar', lambda: subprocess.run('cp -r many many2 && tar cf t.tar many && mkdir untar && tar xf t.tar -C untar '
                                        '&& ls untar/many | wc -l', shell=True, capture_output=True).stdout.strip() == b'400')
ok('truncate', lambda: os.truncate('atomic-2', 3) or open('atomic').read() == 'New')
ok('rmtree', lambda: shutil.rmtree('many2') or not os.path.exists('many2'))
ok('rmdir-notempty', lambda: raises(lambda: os.rmdir('many'), errno.ENOTEMPTY) is True)
ok('git-commit-top', lambda: subprocess.run('git add atomic && git -c user.name=a -c user.email=a@b commit -qm top',
                                            shell=True).returncode == 0)
"#;

#[test]
fn ordinary_file_work_is_unchanged_under_the_git_guard() {
    let j = jail!("gitguard-ordinary").project_file("ordinary.py", ORDINARY_PY);
    assert!(git_outside(&j, &j.project, &["init", "-q"]).status.success());
    let out = j.run("python3 ordinary.py");
    let cases = out.stdout.lines().filter(|l| l.split(' ').nth(1) == Some("OK")).count();
    assert!(!out.stdout.contains(" FAIL"), "{out}");
    assert_eq!(cases, 23, "every case ran: {out}");
    assert!(out.stderr.is_empty(), "no refusal line for ordinary work: {out}");
    // And through a terminal: /dev/tty is the caller's own.
    let launcher = format!("{} -q run -- sh -c 'echo to-the-tty > /dev/tty'", j.rig.bin.display());
    let mut cmd = j.as_user("script");
    cmd.args(["-qec", &launcher, "/dev/null"]);
    let out = j.output(&mut cmd);
    assert!(out.stdout.contains("to-the-tty"), "{out}");
}

#[test]
fn nested_git_true_turns_the_guard_off_and_the_plan_says_which() {
    let j = jail!("gitguard-off");
    let policy = j.rig.home.join("t/gitguard-off-policy.toml");
    std::fs::write(&policy, "[filesystem]\nnested_git = true\n").expect("policy");
    j.give(&[&policy]);
    let j = j.arg("--policy").arg(policy.to_str().expect("utf-8"));
    let out = j.run("git init -q sub && echo INIT-OK");
    assert!(out.stdout.contains("INIT-OK") && j.project.join("sub/.git/HEAD").exists(), "{out}");
    let shown = j.output(&mut j.command(&["policy", "show"]));
    assert!(shown.stdout.contains("filesystem.nested_git"), "{shown}");
    let dry = j.output(&mut j.command(&["run", "--dry-run", "--", "true"]));
    assert!(dry.stdout.contains("git guard off"), "{dry}");
    let dry = Jail::new("gitguard-on").map(|k| k.output(&mut k.command(&["run", "--dry-run", "--", "true"])));
    if let Some(dry) = dry {
        assert!(dry.stdout.contains("git guard on"), "the plan says the guard is on: {dry}");
    }
}

/// Races (attacks G3, G4): two threads completing one repository at once; and a directory
/// swapped back and forth while the nested clone's config in it is opened for writing. Each
/// prints its count of wins for the attacker.
const RACES_C: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/fs.h>

static volatile int stop;
static pthread_barrier_t bar;
static char dir[64];
static int made[2];

static void *mark(void *arg) {
    long which = (long)arg;
    char p[96];
    snprintf(p, sizeof p, "%s/%s", dir, which ? "refs" : "objects");
    pthread_barrier_wait(&bar);
    made[which] = mkdir(p, 0755) == 0;
    return 0;
}

static void *swapper(void *arg) {
    (void)arg;
    while (!stop)
        syscall(SYS_renameat2, AT_FDCWD, "vendor", AT_FDCWD, "decoy", RENAME_EXCHANGE);
    return 0;
}

int main(int argc, char **argv) {
    (void)argc;
    if (argv[1][0] == 'c') {
        int complete = 0;
        for (int i = 0; i < 300; i++) {
            snprintf(dir, sizeof dir, "race/r%d", i);
            mkdir("race", 0755);
            mkdir(dir, 0755);
            char cfg[96];
            snprintf(cfg, sizeof cfg, "%s/config", dir);
            int fd = open(cfg, O_CREAT | O_WRONLY, 0644);
            dprintf(fd, "[core]\n\tfsmonitor = touch /tmp/race\n");
            close(fd);
            pthread_t t[2];
            pthread_barrier_init(&bar, 0, 2);
            for (long k = 0; k < 2; k++) pthread_create(&t[k], 0, mark, (void *)k);
            for (int k = 0; k < 2; k++) pthread_join(t[k], 0);
            complete += made[0] && made[1];
        }
        printf("complete %d\n", complete);
        return 0;
    }
    struct stat real;
    if (stat("vendor/clone/.git/config", &real) != 0) return 2;
    pthread_t t;
    pthread_create(&t, 0, swapper, 0);
    long tries = 0, opened = 0;
    time_t end = time(0) + 3;
    while (time(0) < end) {
        int fd = open("vendor/clone/.git/config", O_WRONLY | O_APPEND);
        tries++;
        if (fd >= 0) {
            /* A config opened for writing is a pipe the guard reads (or, while another write
               replaces it, a file with no name left): never the file git reads. */
            struct stat st;
            if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink > 0) opened++;
            close(fd);
        }
    }
    stop = 1;
    pthread_join(t, 0);
    printf("tries %ld opened %ld\n", tries, opened);
    return 0;
}
"#;

#[test]
fn races_between_calls_cannot_complete_an_unchecked_repository_or_open_a_config() {
    let j = jail!("gitguard-races").project_file("races.c", RACES_C).project_file("decoy/clone/.git/config", "decoy\n");
    let clone = j.project.join("vendor/clone");
    std::fs::create_dir_all(&clone).expect("mkdir");
    j.give(&[&j.project.join("vendor"), &clone]);
    assert!(git_outside(&j, &clone, &["init", "-q"]).status.success());
    let before = std::fs::read_to_string(clone.join(".git/config")).expect("config");
    let out = j.run("cc -O1 -pthread -o races races.c && ./races complete && ./races swap");
    // Two threads making the marks that complete a directory at once, its config written
    // before: whichever comes second is checked and refused; neither can pass on the state
    // before the other acted.
    let complete = out.stdout.lines().find(|l| l.starts_with("complete ")).unwrap_or_default().to_string();
    assert_eq!(complete, "complete 0", "two threads completed a repository past the check of its config: {out}");
    let swap = out.stdout.lines().find(|l| l.starts_with("tries ")).unwrap_or_default().to_string();
    assert!(swap.ends_with(" opened 0") && !swap.starts_with("tries 0 "), "{out}");
    // The swaps leave the two directories either way round: the real config is one of them,
    // unchanged, and the decoy's the other.
    let mut both: Vec<String> = ["vendor", "decoy"]
        .iter()
        .map(|d| std::fs::read_to_string(j.project.join(d).join("clone/.git/config")).unwrap_or_default())
        .collect();
    both.sort();
    let mut want = vec![before, "decoy\n".to_string()];
    want.sort();
    assert_eq!(both, want, "{out}");
}

#[test]
fn the_projects_own_repository_cannot_get_a_commondir_even_with_its_marks_moved_away() {
    // Attack G5: with HEAD moved aside `.git` is no repository, so `commondir` was an ordinary
    // name; with HEAD back, git followed it to a config the jail wrote. A commondir is made
    // only in a worktree's directory now; and a worktree's own cannot be rewritten.
    let j = jail!("gitguard-commondir");
    assert!(git_outside(&j, &j.project, &["init", "-q"]).status.success());
    assert!(git_outside(&j, &j.project, &["commit", "-q", "--allow-empty", "-m", "x"]).status.success());
    let out = j.run(
        "mv .git/HEAD .git/H; echo ../evil > .git/commondir || echo COMMONDIR-REFUSED; \
         mv .git/H .git/HEAD; echo x > .git/config.worktree; \
         git worktree add -q w && echo WORKTREE-ADDED; echo ../../../evil > .git/worktrees/w/commondir; \
         mv .git/worktrees/w/HEAD .git/worktrees/w/H; echo ../../../evil > .git/worktrees/w/commondir; \
         mv .git/worktrees/w/H .git/worktrees/w/HEAD",
    );
    // A commondir where git makes none is refused; config.worktree and a worktree's commondir
    // written directly go through the guard and are left as they were (written, refused in
    // one line each).
    for want in ["COMMONDIR-REFUSED", "WORKTREE-ADDED"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
    assert!(!j.project.join(".git/commondir").exists() && !j.project.join(".git/config.worktree").exists());
    let common = std::fs::read_to_string(j.project.join(".git/worktrees/w/commondir")).unwrap_or_default();
    assert_eq!(common.trim(), "../..", "{out}");
}

#[test]
fn extra_writable_trees_are_guarded_too_their_tops_included() {
    // Attacks G6 and G7: a gitfile at the top of a `--rw` tree (a pointer: what it points at
    // must be a repository the guard checked, or the user's), and a `--rw` tree in the home.
    let j = jail!("gitguard-rw");
    let marker = format!("/tmp/asb-gitguard-rw-{}", std::process::id());
    let outside = std::path::PathBuf::from(format!("/srv/asb-gitguard-{}", std::process::id()));
    let in_home = j.rig.home.join("t/gitguard-rw-home");
    for d in [&outside, &in_home] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).expect("mkdir");
        j.give(&[d]);
    }
    assert!(git_outside(&j, &in_home, &["init", "-q"]).status.success());
    let before = std::fs::read_to_string(in_home.join(".git/config")).expect("config");
    let j = j.arg("--rw").arg(outside.to_str().expect("utf-8")).arg("--rw").arg(in_home.to_str().expect("utf-8"));
    let out = j.run(&format!(
        "mkdir -p {o}/r/objects {o}/r/refs; printf '[core]\\n\\tfsmonitor = touch {m}\\n' > {o}/r/config; \
         echo 'gitdir: {o}/r' > {o}/.git && echo TOP-GITFILE-MADE; \
         git -C {h} config core.fsmonitor 'touch {m}' || echo HOME-CONFIG-REFUSED; echo ok > {o}/plain && echo PLAIN-OK",
        m = marker,
        o = outside.display(),
        h = in_home.display()
    ));
    for want in ["TOP-GITFILE-MADE", "HOME-CONFIG-REFUSED", "PLAIN-OK"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
    let bare = std::fs::read_to_string(outside.join("r/config")).unwrap_or_default();
    assert!(!bare.contains("fsmonitor"), "the bare repository's config was written without it: {bare}");
    let _ = std::fs::remove_file(&marker);
    let _ = git_outside(&j, &outside, &["status"]);
    assert!(!Path::new(&marker).exists(), "the gitfile led the user's git to a config the jail wrote: {out}");
    assert_eq!(std::fs::read_to_string(in_home.join(".git/config")).expect("config"), before, "{out}");
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn a_flood_of_refusals_is_each_written_or_counted_in_the_audit_log() {
    // Issue 33, red team F6: the guard reported 50 refusals a second and dropped the rest
    // before anything counted them (18 766 refusals, 300 records, no count).
    let j = jail!("gitguard-flood-counted");
    let out = j.run(
        "git init -q r && echo SESSION=$AGENT_SANDBOX_SESSION && i=0; \
         while [ $i -lt 400 ]; do i=$((i+1)); true 2>/dev/null > r/.git/hooks/h$i; done; \
         ls r/.git/hooks | grep -c '^h[0-9]' ; echo FLOOD-DONE",
    );
    assert!(out.stdout.contains("FLOOD-DONE"), "{out}");
    assert!(out.stdout.lines().any(|l| l.trim() == "0"), "every hook refused: {out}");
    let session = out.stdout.lines().find_map(|l| l.strip_prefix("SESSION=")).expect("session id").trim().to_string();
    let dir = j.rig.home.join(".local/state/agent-sandbox");
    let mut text = String::new();
    for f in ["audit.jsonl.3", "audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"] {
        text.push_str(&String::from_utf8_lossy(&std::fs::read(dir.join(f)).unwrap_or_default()));
    }
    let mine: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["session"] == session.as_str())
        .collect();
    let written = mine
        .iter()
        .filter(|r| r["event"] == "fs_denied" && r["path"].as_str().is_some_and(|p| p.contains("/hooks/h")))
        .count() as u64;
    let counted: u64 = mine
        .iter()
        .filter(|r| r["event"] == "audit_suppressed")
        .flat_map(|r| ["fs_denied/git-guard", "fs_denied/git-hook"].map(|k| r["counts"][k].as_u64().unwrap_or(0)))
        .sum();
    assert!(written > 0 && written < 400, "{written} written");
    assert_eq!(written + counted, 400, "each refusal written or counted: {written} + {counted}");
}
