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

/// What the agent tries, each attempt printing `<case> DONE`, `<case> REFUSED` (EPERM) or
/// `<case> ERR <errno>`.
const ATTACKS_PY: &str = r#"
import errno, os, subprocess

def attempt(name, fn):
    try:
        fn()
        print(name, 'DONE')
    except OSError as e:
        print(name, 'REFUSED' if e.errno == errno.EPERM else 'ERR %d' % e.errno)

def w(path, data='x', mode='w'):
    with open(path, mode) as f:
        f.write(data)

EVIL = '[core]\n\tfsmonitor = touch /tmp/asb-guard-pwned\n'
os.makedirs('sub', exist_ok=True)
os.makedirs('d', exist_ok=True)
w('plain')
attempt('mkdir-nested', lambda: os.mkdir('sub/.git'))
attempt('mkdir-nested-case', lambda: os.mkdir('sub/.GIT'))
attempt('gitfile', lambda: w('sub/.git', 'gitdir: ../elsewhere\n'))
attempt('symlink-nested', lambda: os.symlink('../elsewhere', 'sub/.git'))
attempt('rename-to-nested', lambda: os.rename('d', 'sub/.git'))
attempt('link-to-nested', lambda: os.link('plain', 'sub/.git'))
os.symlink('sub/.git', 'lnk')
attempt('create-through-symlink', lambda: w('lnk'))
# A bare repository built by hand: the mark that completes it is refused, whichever it is.
os.makedirs('bare/objects')
os.makedirs('bare/refs')
w('bare/config', EVIL)
attempt('complete-bare', lambda: w('bare/HEAD', 'ref: refs/heads/main\n'))
for args, case in [(['git', 'init', '-q', 'sub2'], 'git-init-nested'),
                   (['git', 'init', '-q', '--bare', 'bare2.git'], 'git-init-bare'),
                   (['git', '-C', 'vendor/clone', 'config', 'core.fsmonitor', 'touch /tmp/asb-guard-pwned'],
                    'git-config-nested')]:
    print(case, subprocess.run(args, capture_output=True).returncode)
# Repositories that were there before: a nested clone, a submodule's, the project's own.
for gitdir in ['vendor/clone/.git', '.git/modules/m', '.git']:
    attempt('config-append ' + gitdir, lambda: w(gitdir + '/config', EVIL, 'a'))
    attempt('config-rplus ' + gitdir, lambda: w(gitdir + '/config', EVIL, 'r+'))
    attempt('config-worktree ' + gitdir, lambda: w(gitdir + '/config.worktree', EVIL))
    attempt('hook ' + gitdir, lambda: w(gitdir + '/hooks/post-checkout', '#!/bin/sh\ntouch /tmp/asb-guard-pwned\n'))
    w('newconfig', EVIL)
    attempt('config-rename ' + gitdir, lambda: os.rename('newconfig', gitdir + '/config'))
    attempt('config-link ' + gitdir, lambda: os.link(gitdir + '/config', 'alias-' + gitdir.replace('/', '-')))
# A unix socket bound as `refs` passes git's test of `refs` (attack G1): the mark that would
# complete the repository is refused however it is made; other sockets bind as usual.
import socket
os.makedirs('sock/objects')
w('sock/HEAD', 'ref: refs/heads/main\n')
w('sock/config', EVIL)
attempt('bind-refs', lambda: socket.socket(socket.AF_UNIX).bind('sock/refs'))
attempt('bind-ordinary', lambda: socket.socket(socket.AF_UNIX).bind('ordinary.sock'))
# Past PATH_MAX the kernel cannot spell a path (attack G2): a nested clone moved that deep
# must not have its config written, nor linked out, for want of a path to check.
def too_deep():
    # A chain just short of PATH_MAX, the clone moved into it (its path still fits), then the
    # chain moved 250 bytes deeper: the clone's path is now past PATH_MAX.
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
# Ordinary work in the nested clone goes on: its files, its index, its objects.
w('vendor/clone/file.txt', 'changed\n')
r = subprocess.run(['git', '-C', 'vendor/clone', '-c', 'user.name=a', '-c', 'user.email=a@b', 'commit', '-qam',
                    'work-inside'], capture_output=True)
print('git-commit-nested', r.returncode, r.stderr.decode().replace('\n', ' '))
r = subprocess.run('git init -q /tmp/r && git -C /tmp/r -c user.name=a -c user.email=a@b commit -q --allow-empty '
                   '-m x && git clone -q /tmp/r /tmp/c && echo cloned', shell=True, capture_output=True)
print('git-in-tmp', r.returncode)
"#;

#[test]
fn git_repositories_cannot_be_made_or_reconfigured_inside_the_project() {
    let j = jail!("gitguard").project_file("guard.py", ATTACKS_PY).project_file("vendor/clone/file.txt", "v1\n");
    // The user's project: a repository with a submodule's git directory, and a nested clone.
    for args in [&["init", "-q"][..], &["init", "-q", "--bare", ".git/modules/m"]] {
        assert!(git_outside(&j, &j.project, args).status.success());
    }
    let clone = j.project.join("vendor/clone");
    for args in [&["init", "-q"][..], &["add", "file.txt"], &["commit", "-qm", "v1"]] {
        assert!(git_outside(&j, &clone, args).status.success(), "{args:?}");
    }
    let config = |p: &str| std::fs::read_to_string(j.project.join(p)).unwrap_or_default();
    let before = [config("vendor/clone/.git/config"), config(".git/modules/m/config"), config(".git/config")];

    let out = j.run("python3 guard.py");
    let line = |case: &str| out.stdout.lines().find(|l| l.starts_with(&format!("{case} "))).unwrap_or("").to_string();
    for case in [
        "bind-refs",
        "deep-config",
        "deep-link",
        "mkdir-nested",
        "mkdir-nested-case",
        "gitfile",
        "symlink-nested",
        "rename-to-nested",
        "link-to-nested",
        "create-through-symlink",
        "complete-bare",
    ] {
        let l = line(case);
        // EPERM, or for the paths past PATH_MAX, ENAMETOOLONG: never done.
        assert!(l.ends_with("REFUSED") || (case.starts_with("deep") && l.ends_with("ERR 36")), "{case}: {out}");
    }
    for case in ["git-init-nested", "git-init-bare", "git-config-nested"] {
        assert!(!line(case).ends_with(" 0") && !line(case).is_empty(), "{case} must fail: {out}");
    }
    for gitdir in ["vendor/clone/.git", ".git/modules/m", ".git"] {
        for case in ["config-append", "config-rplus", "config-worktree", "hook", "config-rename", "config-link"] {
            let l = line(&format!("{case} {gitdir}"));
            assert!(!l.is_empty() && !l.ends_with("DONE"), "{case} {gitdir}: {out}");
        }
    }
    assert!(line("bind-ordinary").ends_with("DONE"), "{out}");
    assert!(line("git-commit-nested").starts_with("git-commit-nested 0"), "work in a nested clone goes on: {out}");
    assert!(line("git-in-tmp").ends_with(" 0"), "repositories outside the project are fine: {out}");
    // The refusal is one line the agent can act on, and a record in the audit log.
    assert!(out.stderr.contains("agent-sandbox: ") && out.stderr.contains("clone or init under /tmp"), "{out}");

    // Outside, afterwards: nothing was made, nothing was changed, and the user's git runs nothing.
    for p in ["sub/.git", "sub/.GIT", "sub2/.git", "bare/HEAD", "sub/.git/config"] {
        assert!(std::fs::symlink_metadata(j.project.join(p)).is_err(), "{p} was made: {out}");
    }
    // `git init --bare` got as far as its first marks, never to a repository git would use.
    let bare2 = j.project.join("bare2.git");
    assert!(!["HEAD", "objects", "refs"].iter().all(|m| bare2.join(m).exists()), "{out}");
    if bare2.exists() {
        let found = git_outside(&j, &bare2, &["rev-parse", "--absolute-git-dir"]);
        let found = String::from_utf8_lossy(&found.stdout).trim().to_string();
        assert!(!found.ends_with("bare2.git"), "git takes bare2.git for a repository: {found}");
    }
    let after = [config("vendor/clone/.git/config"), config(".git/modules/m/config"), config(".git/config")];
    assert_eq!(before, after, "a repository's config changed: {out}");
    for gitdir in ["vendor/clone/.git", ".git/modules/m", ".git"] {
        assert!(!j.project.join(gitdir).join("hooks/post-checkout").exists(), "{gitdir} got a hook");
    }
    let log = git_outside(&j, &clone, &["log", "--format=%s"]);
    assert!(String::from_utf8_lossy(&log.stdout).contains("work-inside"), "the commit inside landed");
    let _ = std::fs::remove_file("/tmp/asb-guard-pwned");
    for dir in [&j.project, &clone, &j.project.join("sub"), &j.project.join("bare"), &j.project.join("sock")] {
        let _ = git_outside(&j, dir, &["status"]);
    }
    assert!(!Path::new("/tmp/asb-guard-pwned").exists(), "the user's git ran the jail's command");
    let audit = std::fs::read_to_string(j.rig.home.join(".local/state/agent-sandbox/audit.jsonl")).unwrap_or_default();
    assert!(
        audit.lines().any(|l| l.contains("\"fs_denied\"") && l.contains("nested-git") && l.contains("gitguard/sub")),
        "no audit record"
    );
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
    // ...and with it, it never does.
    assert!(!attack("gitguard-fsmonitor", false), "the user's git status ran the jail's fsmonitor");
}

/// File work of every kind, as programs do it: each prints `<case> OK` or `<case> FAIL ...`.
const ORDINARY_PY: &str = r#"
import ctypes, errno, os, stat, subprocess, threading

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
    assert_eq!(cases, 20, "every case ran: {out}");
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
            char head[96];
            snprintf(head, sizeof head, "%s/HEAD", dir);
            close(open(head, O_CREAT | O_WRONLY, 0644));
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
            struct stat st;
            if (fstat(fd, &st) == 0 && st.st_ino == real.st_ino) opened++;
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
fn races_between_calls_cannot_complete_a_repository_or_open_a_config() {
    let j = jail!("gitguard-races").project_file("races.c", RACES_C).project_file("decoy/clone/.git/config", "decoy\n");
    let clone = j.project.join("vendor/clone");
    std::fs::create_dir_all(&clone).expect("mkdir");
    j.give(&[&j.project.join("vendor"), &clone]);
    assert!(git_outside(&j, &clone, &["init", "-q"]).status.success());
    let before = std::fs::read_to_string(clone.join(".git/config")).expect("config");
    let out = j.run("cc -O1 -pthread -o races races.c && ./races complete && ./races swap");
    let complete = out.stdout.lines().find(|l| l.starts_with("complete ")).unwrap_or_default().to_string();
    assert_eq!(complete, "complete 0", "two threads completed a repository: {out}");
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
    // name; with HEAD back, git followed it to a config the jail wrote.
    let j = jail!("gitguard-commondir");
    assert!(git_outside(&j, &j.project, &["init", "-q"]).status.success());
    let out = j.run(
        "mv .git/HEAD .git/H; echo ../evil > .git/commondir || echo COMMONDIR-REFUSED; \
         mv .git/H .git/HEAD || echo HEAD-BACK-REFUSED; echo x > .git/config.worktree || echo WORKTREE-REFUSED",
    );
    for want in ["COMMONDIR-REFUSED", "WORKTREE-REFUSED"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
    assert!(!j.project.join(".git/commondir").exists() && !j.project.join(".git/config.worktree").exists());
}

#[test]
fn extra_writable_trees_are_guarded_too_their_tops_included() {
    // Attacks G6 and G7: a gitfile at the top of a `--rw` tree, and a `--rw` tree in the home.
    let j = jail!("gitguard-rw");
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
        "echo 'gitdir: /tmp/x' > {o}/.git || echo TOP-GITFILE-REFUSED; \
         git -C {h} config core.fsmonitor 'touch /tmp/pwned' || echo HOME-CONFIG-REFUSED; echo ok > {o}/plain && echo PLAIN-OK",
        o = outside.display(),
        h = in_home.display()
    ));
    for want in ["TOP-GITFILE-REFUSED", "HOME-CONFIG-REFUSED", "PLAIN-OK"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
    assert!(!outside.join(".git").exists(), "{out}");
    assert_eq!(std::fs::read_to_string(in_home.join(".git/config")).expect("config"), before, "{out}");
    let _ = std::fs::remove_dir_all(&outside);
}
