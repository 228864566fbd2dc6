//! The credential catalogue (`src/policy/credentials.toml`), entry by entry, against the real
//! jail: a canary in every place the catalogue names (each default place, and where each
//! variable it honours moves a store to), and none of them readable inside in any home mode,
//! with the trees around them listed read-only or writable, under the userns and the Landlock
//! backend. A control run names every store and reads them (the probe sees what is there).
//! The user's git config is seen without its credentials; the files it and `~/.ssh/config`
//! name are unreadable.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use agent_sandbox::host::UserConfigs;
use agent_sandbox::plan::catalogue::{expand, Context, CATALOGUE};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The canaries live in the test user's one home: one test at a time plants and removes them.
static HOME: Mutex<()> = Mutex::new(());

/// Variables whose moved place is not planted: the runtime directory is the host's
/// `/run/user` (hidden whole), and the launcher keeps its own session directory there.
const NOT_MOVED: &[&str] = &["XDG_RUNTIME_DIR"];

/// Every place the catalogue names for the test user, with the variables set that move them.
struct Canaries {
    /// (entry, path, its canary text)
    places: Vec<(String, PathBuf, String)>,
    env: Vec<(String, String)>,
    /// What this test made (removed afterwards, deepest first), not what was there.
    made: Vec<PathBuf>,
}

impl Canaries {
    fn plant(rig: &Rig) -> Canaries {
        let cat = CATALOGUE;
        let home = &rig.home;
        let moved = home.join("moved");
        let mut env = vec![];
        for s in cat {
            for t in s.paths {
                let Some(var) = t.strip_prefix('$').map(|a| a.split('/').next().unwrap_or(a)) else { continue };
                if NOT_MOVED.contains(&var) || env.iter().any(|(k, _)| k == var) {
                    continue;
                }
                let place = moved.join(var).display().to_string();
                let value = match (s.list_vars.contains(&var), s.value_prefixes.first()) {
                    (true, _) => format!("{place}/a:{place}/b"),
                    (false, Some(prefix)) => format!("{prefix}{place}"),
                    (false, None) => place,
                };
                env.push((var.to_string(), value));
            }
        }
        let configs = UserConfigs::default();
        let mut places: Vec<(String, PathBuf, String)> = vec![];
        for with in [&env[..], &[]] {
            let ctx = Context { home, home_as_named: home, uid: rig.uid, user: USER, env: with, configs: &configs };
            for s in cat {
                for t in s.paths {
                    for p in expand(t, s, &ctx) {
                        if !places.iter().any(|(_, q, _)| *q == p) {
                            let canary = format!("CANARY-CRED-{}-{}", s.name, places.len());
                            places.push((s.name.to_string(), p, canary));
                        }
                    }
                }
            }
        }
        let mut c = Canaries { places: vec![], env, made: vec![] };
        for (store, p, canary) in places {
            // A place that is a directory already (`~/.ssh`, `~/.aws` of the rig) gets its
            // canary inside; one below another place makes that one a directory.
            let file = match p.is_dir() {
                true => p.join("canary"),
                false => p.clone(),
            };
            c.make(&file, &canary, rig);
            c.places.push((store, file, canary));
        }
        c
    }

    fn make(&mut self, file: &Path, text: &str, rig: &Rig) {
        let mut missing: Vec<PathBuf> =
            file.ancestors().skip(1).take_while(|a| !a.exists()).map(Path::to_path_buf).collect();
        missing.reverse();
        for d in missing {
            std::fs::create_dir(&d).unwrap();
            std::os::unix::fs::chown(&d, Some(rig.uid), Some(rig.gid)).unwrap();
            self.made.push(d);
        }
        if file.exists() {
            return;
        }
        std::fs::write(file, text).unwrap();
        std::os::unix::fs::chown(file, Some(rig.uid), Some(rig.gid)).unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
        self.made.push(file.to_path_buf());
    }

    /// A script that prints whatever of every place it can read, then `PROBED`.
    fn probe(&self) -> String {
        let quoted: Vec<String> = self.places.iter().map(|(_, p, _)| format!("'{}'", p.display())).collect();
        format!("for f in {}; do cat \"$f\" 2>/dev/null; echo; done; echo PROBED", quoted.join(" "))
    }

    fn leaked(&self, out: &Out) -> Vec<String> {
        self.places
            .iter()
            .filter(|(_, _, c)| out.stdout.contains(c.as_str()))
            .map(|(s, p, _)| format!("{s}: {}", p.display()))
            .collect()
    }

    /// The home-relative directories around the places that are no place themselves: what a
    /// user lists with `--ro ~/X` or `--rw ~/X` (`~/.cargo`, `~/.config`, `~/.cache`...).
    fn trees(&self, home: &Path) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for (_, p, _) in &self.places {
            let Ok(rel) = p.strip_prefix(home) else { continue };
            let Some(top) = rel.components().next() else { continue };
            let top = home.join(top);
            let is_place =
                self.places.iter().any(|(_, q, _)| *q == top || q.parent() == Some(&top) && q.ends_with("canary"));
            let shown = format!("~/{}", top.strip_prefix(home).unwrap().display());
            if top.is_dir() && !is_place && !out.contains(&shown) && !top.ends_with(".ssh") {
                out.push(shown);
            }
        }
        out
    }
}

impl Drop for Canaries {
    fn drop(&mut self) {
        for p in self.made.iter().rev() {
            let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
        }
    }
}

fn with_env(mut j: Jail, env: &[(String, String)]) -> Jail {
    for (k, v) in env {
        j = j.env(k, v);
    }
    j
}

/// Every variant of the home a user can choose, as launcher options.
fn home_variants(trees: &[String]) -> Vec<(String, Vec<String>)> {
    let mut v: Vec<(String, Vec<String>)> = ["tmpwrite", "restricted", "read", "write"]
        .iter()
        .map(|m| (format!("--home-access {m}"), vec!["--home-access".to_string(), m.to_string()]))
        .collect();
    for flag in ["--ro", "--rw"] {
        let args = trees.iter().flat_map(|t| [flag.to_string(), t.clone()]).collect();
        v.push((format!("tmpwrite, {flag} every tree around a store"), args));
    }
    let mut read_rw = vec!["--home-access".to_string(), "read".to_string()];
    read_rw.extend(trees.iter().flat_map(|t| ["--rw".to_string(), t.clone()]));
    v.push(("read, --rw every tree around a store".into(), read_rw));
    v
}

fn every_store_is_unreadable(name: &str, backend: &[&str]) {
    let Some(j) = Jail::new(name) else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let c = Canaries::plant(j.rig);
    assert!(c.places.len() > 100, "{} places", c.places.len());
    let trees = c.trees(&j.rig.home);
    assert!(trees.contains(&"~/.cargo".to_string()) && trees.contains(&"~/.config".to_string()), "{trees:?}");
    let j = with_env(j, &c.env);
    for (what, args) in home_variants(&trees) {
        let mut opts: Vec<&str> = backend.to_vec();
        opts.extend(args.iter().map(String::as_str));
        let out = j.run_with(&opts, &c.probe());
        assert!(out.stdout.contains("PROBED"), "{what}: {out}");
        let leaked = c.leaked(&out);
        assert!(leaked.is_empty(), "{what}: readable inside:\n{}\n{out}", leaked.join("\n"));
    }
    // The control: a store the user names is shown, so the probe reads what is there.
    let mut opts: Vec<String> = backend.iter().map(|s| s.to_string()).collect();
    for named in ["~/.npmrc", "~/.cargo/credentials.toml", "~/.config/git/credentials"] {
        opts.extend(["--ro".to_string(), named.to_string()]);
    }
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let out = j.run_with(&opts, &c.probe());
    let read = c.leaked(&out);
    for named in [".npmrc", ".cargo/credentials.toml", ".config/git/credentials"] {
        assert!(read.iter().any(|r| r.ends_with(named)), "{named} named but not read: {read:?}\n{out}");
    }
    assert_eq!(read.len(), 3, "only what was named: {read:?}");
}

#[test]
fn every_store_of_the_catalogue_is_unreadable_in_every_home_mode() {
    every_store_is_unreadable("cred-userns", &[]);
}

#[test]
fn landlock_every_store_of_the_catalogue_is_unreadable_in_every_home_mode() {
    every_store_is_unreadable("cred-landlock", &["--backend", "landlock"]);
}

/// Writes `text` to `~/REL` for the test, restoring what was there when dropped (and
/// removing the directories it made).
struct Planted {
    path: PathBuf,
    before: Option<Vec<u8>>,
    made: Vec<PathBuf>,
}

impl Planted {
    fn new(rig: &Rig, rel: &str, text: &str) -> Planted {
        let path = rig.home.join(rel);
        let before = std::fs::read(&path).ok();
        let mut made: Vec<PathBuf> =
            path.ancestors().skip(1).take_while(|a| !a.exists()).map(Path::to_path_buf).collect();
        made.reverse();
        for d in &made {
            std::fs::create_dir(d).unwrap();
            std::os::unix::fs::chown(d, Some(rig.uid), Some(rig.gid)).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        std::os::unix::fs::chown(&path, Some(rig.uid), Some(rig.gid)).unwrap();
        Planted { path, before, made }
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = match &self.before {
            Some(b) => std::fs::write(&self.path, b),
            None => std::fs::remove_file(&self.path),
        };
        for d in self.made.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Makes `~/REL` a symbolic link to `to` for the test, putting back the file that was there
/// when dropped (also when the test fails before its end).
struct Linked {
    path: PathBuf,
    before: Option<Vec<u8>>,
    owner: (u32, u32),
}

impl Linked {
    fn new(rig: &Rig, rel: &str, to: &str) -> Linked {
        let path = rig.home.join(rel);
        let before = std::fs::read(&path).ok();
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink(to, &path).unwrap();
        let _ = std::os::unix::fs::lchown(&path, Some(rig.uid), Some(rig.gid));
        Linked { path, before, owner: (rig.uid, rig.gid) }
    }
}

impl Drop for Linked {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(b) = &self.before {
            let _ = std::fs::write(&self.path, b);
            let _ = std::os::unix::fs::chown(&self.path, Some(self.owner.0), Some(self.owner.1));
        }
    }
}

const TOKENED: &str = "[user]\n\tname = Canary User\n[credential]\n\thelper = store --file ~/cred-test/git-store\n\
[url \"https://x-access-token:ghs_CANARYGITTOKEN0123456789@github.com/\"]\n\tinsteadOf = https://github.com/\n\
[http]\n\textraHeader = Authorization: Bearer CANARY-HEADER-TOKEN\n";

/// The attack: the agent reads the token from its copy of your `~/.gitconfig` (a credential
/// helper, a token in an `insteadOf` URL, an `Authorization` header), or the store file the
/// helper names. Git keeps working with what is left.
fn the_git_config_is_seen_without_credentials(name: &str, backend: &[&str]) {
    let Some(j) = Jail::new(name) else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let _cfg = Planted::new(j.rig, ".gitconfig", TOKENED);
    let _store = Planted::new(j.rig, "cred-test/git-store", "https://u:CANARY-STORE-PASSWORD@github.com\n");
    let script = "git config --global user.name; cat ~/.gitconfig; git config --global --list; \
                  cat ~/cred-test/git-store; echo PROBED";
    for mode in ["tmpwrite", "read", "write"] {
        let mut opts: Vec<&str> = backend.to_vec();
        opts.extend(["--home-access", mode, "--ro", "~/cred-test"]);
        let out = j.run_with(&opts, script);
        assert!(out.stdout.contains("PROBED"), "{mode}: {out}");
        assert!(out.stdout.starts_with("Canary User\n"), "{mode}: git reads the rest of the config: {out}");
        for canary in ["CANARYGITTOKEN", "CANARY-HEADER-TOKEN", "CANARY-STORE-PASSWORD", "credential.helper"] {
            assert!(!out.stdout.contains(canary), "{mode}: {canary} inside: {out}");
        }
    }
}

#[test]
fn the_users_git_config_is_seen_without_its_credentials() {
    the_git_config_is_seen_without_credentials("cred-git", &[]);
}

#[test]
fn landlock_the_users_git_config_is_seen_without_its_credentials() {
    the_git_config_is_seen_without_credentials("cred-git-ll", &["--backend", "landlock"]);
}

/// Outside review of issue 32, R1: a credential store that appears in the writable `~/.cache`
/// while the session runs (a first `hf auth login` outside, git's credential-cache daemon
/// started outside) was read inside, and a jail could listen at the cache daemon's socket
/// before the daemon existed and take the password the user's git stores. The launcher now
/// makes the missing store before the session and covers it: what is written there outside
/// stays unseen, and the jail can make nothing there.
#[test]
fn a_store_made_outside_while_the_session_runs_is_not_seen_inside() {
    let Some(j) = Jail::new("cred-late") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let cache = j.rig.home.join(".cache");
    let (hf, git) = (cache.join("huggingface"), cache.join("git"));
    // As on a first login: neither exists before the session.
    let _ = std::fs::remove_dir_all(&hf);
    let _ = std::fs::remove_dir_all(&git);
    let (started, written) = (j.project.join("started"), j.project.join("written"));
    let rig = j.rig;
    let outside = {
        let (hf, git, started, written) = (hf.clone(), git.clone(), started.clone(), written.clone());
        std::thread::spawn(move || {
            assert!(wait_for_path(&started, std::time::Duration::from_secs(30)), "the session did not start");
            // `hf auth login` writes its token in place; git's daemon makes its directory.
            std::fs::create_dir_all(&hf).unwrap();
            std::fs::write(hf.join("token"), "hf_CANARYLATELOGIN").unwrap();
            std::fs::create_dir_all(git.join("credential")).unwrap();
            std::fs::write(git.join("credential/late-secret"), "CANARY-LATE-CACHE").unwrap();
            for p in [&hf, &hf.join("token"), &git, &git.join("credential"), &git.join("credential/late-secret")] {
                std::os::unix::fs::chown(p, Some(rig.uid), Some(rig.gid)).unwrap();
            }
            std::fs::write(&written, "").unwrap();
        })
    };
    let script = "touch started; i=0; while [ ! -e written ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
                  cat ~/.cache/huggingface/token ~/.cache/git/credential/late-secret; \
                  python3 -c 'import socket,os; s=socket.socket(socket.AF_UNIX); s.bind(os.path.expanduser(\"~/.cache/git/credential/socket\")); print(\"LISTENING\")'; \
                  echo PROBED";
    let out = j.run_with(&[], script);
    outside.join().expect("the outside side");
    assert!(out.stdout.contains("PROBED"), "{out}");
    for canary in ["CANARYLATELOGIN", "CANARY-LATE-CACHE", "LISTENING"] {
        assert!(!out.stdout.contains(canary), "{canary} inside: {out}");
    }
    // The user's own login outside is whole.
    assert_eq!(std::fs::read_to_string(hf.join("token")).unwrap(), "hf_CANARYLATELOGIN");
    let _ = std::fs::remove_dir_all(&hf);
    let _ = std::fs::remove_dir_all(&git);
}

fn wait_for_path(p: &Path, most: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + most;
    while std::time::Instant::now() < end {
        if p.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// Outside review of issue 32, R4: the file the user's git config includes holds a credential
/// (an SMTP password, a token in an `insteadOf` URL). In a git project the protection of the
/// files git's configs include bound that file read-only over its copy without the credential
/// (write home mode, userns), and gave it a Landlock rule though the plan left it out.
fn an_included_git_config_is_seen_without_its_credentials(name: &str, backend: &[&str]) {
    let Some(j) = Jail::new(name) else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let _cfg =
        Planted::new(j.rig, ".gitconfig", "[user]\n\tname = Canary User\n[include]\n\tpath = ~/.asb-gitconfig.local\n");
    let _inc = Planted::new(
        j.rig,
        ".asb-gitconfig.local",
        "[sendemail]\n\tsmtpPass = CANARY-SMTP-PASS\n\tsmtpUser = me\n\
         [url \"https://x-access-token:CANARY-INCLUDED-TOKEN@github.com/\"]\n\tinsteadOf = https://github.com/\n",
    );
    let j =
        j.project_file(".git/HEAD", "ref: refs/heads/main\n").project_file(".git/config", "[core]\n\tbare = false\n");
    for d in ["objects", "refs"] {
        std::fs::create_dir_all(j.project.join(".git").join(d)).unwrap();
        std::os::unix::fs::chown(j.project.join(".git").join(d), Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    }
    let script =
        "git config user.name; cat ~/.asb-gitconfig.local; git config --get-regexp 'sendemail|url'; echo PROBED";
    for mode in ["tmpwrite", "read", "write"] {
        let mut opts: Vec<&str> = backend.to_vec();
        opts.extend(["--home-access", mode]);
        let out = j.run_with(&opts, script);
        assert!(out.stdout.contains("PROBED"), "{mode}: {out}");
        assert!(out.stdout.starts_with("Canary User\n"), "{mode}: git reads the config: {out}");
        for canary in ["CANARY-SMTP-PASS", "CANARY-INCLUDED-TOKEN"] {
            assert!(!out.stdout.contains(canary), "{mode}: {canary} inside: {out}");
        }
    }
}

#[test]
fn an_included_git_config_is_seen_without_its_credentials_in_every_home_mode() {
    an_included_git_config_is_seen_without_its_credentials("cred-git-inc", &[]);
}

#[test]
fn landlock_an_included_git_config_is_seen_without_its_credentials_in_every_home_mode() {
    an_included_git_config_is_seen_without_its_credentials("cred-git-inc-ll", &["--backend", "landlock"]);
}

/// Fourth outside look at the anchors, U3 and U4: `~/.gitconfig` named in `home.write` (or
/// `home.read`) beside its built-in seed. The seed was written into the bound host file, so
/// the launch rewrote the user's config without its credential helper and token URL, and the
/// jail's `core.sshCommand` reached the host's file (with `home.read` the launch failed on a
/// read-only file). The session now gets a writable copy without the credentials, bound over
/// the file; the user's file keeps every byte.
#[test]
fn a_git_config_named_in_home_write_or_read_stays_the_users_and_the_session_gets_a_copy() {
    let Some(j) = Jail::new("cred-git-named") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = Planted::new(j.rig, ".gitconfig", TOKENED);
    let script = "git config --global user.name; printf '[core]\\n\\tsshCommand = evil-named\\n' >> ~/.gitconfig; \
                  git config --global core.sshCommand; cat ~/.gitconfig; echo PROBED";
    for entry in ["write", "read"] {
        let policy = std::env::temp_dir().join(format!("asb-cred-git-{entry}-{}.toml", std::process::id()));
        std::fs::write(&policy, format!("[home]\n{entry} = [\".gitconfig\"]\n")).unwrap();
        std::fs::set_permissions(&policy, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        let out = j.run_with(&["--policy", policy.to_str().unwrap()], script);
        let _ = std::fs::remove_file(&policy);
        assert!(out.stdout.contains("PROBED"), "{entry}: {out}");
        assert!(out.stdout.starts_with("Canary User\nevil-named\n"), "{entry}: a writable session copy: {out}");
        for canary in ["CANARYGITTOKEN", "CANARY-HEADER-TOKEN", "credential"] {
            assert!(!out.stdout.contains(canary), "{entry}: {canary} inside: {out}");
        }
        let host = std::fs::read_to_string(&cfg.path).unwrap();
        assert_eq!(host, TOKENED, "{entry}: the user's ~/.gitconfig was changed: {out}");
    }
}

/// Fifth outside look at the anchors, V1 and V2. A `~/.gitconfig` that is a link to a file
/// the jail shows (`~/.config/git/config`, under the default `home.read`): the file itself is
/// seen without its credentials (V1: a build that seeded links as their target left it
/// shown whole). And a seed that is a link is not followed: a jail that could change it (in
/// a dotfiles repository worked on as a project) would hand the next session a copy of a
/// file no jail is shown (V2); nor is a seed below a directory that is a link (sixth look,
/// N1: `~/.app -> dotfiles/app`, re-pointed at a directory holding a private file of the same
/// name); a warning says it is not copied in.
#[test]
fn a_linked_git_config_and_a_linked_seed_give_the_jail_nothing_it_is_not_shown() {
    let Some(j) = Jail::new("cred-git-linked") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let target = Planted::new(j.rig, ".config/git/config", TOKENED);
    let private = Planted::new(j.rig, "asb-private-notes.txt", "CANARY-PRIVATE-NOTES\n");
    let behind = Planted::new(j.rig, "asb-elsewhere/app/settings.json", "CANARY-BEHIND-A-LINKED-DIR\n");
    let links = [
        Linked::new(j.rig, ".gitconfig", ".config/git/config"),
        Linked::new(j.rig, ".asb-myrc", "asb-private-notes.txt"),
        Linked::new(j.rig, ".asb-app", "asb-elsewhere/app"),
    ];
    let policy = std::env::temp_dir().join(format!("asb-cred-linked-{}.toml", std::process::id()));
    std::fs::write(&policy, "[home]\nseed = [\".asb-myrc\", \".asb-app/settings.json\"]\n").unwrap();
    std::fs::set_permissions(&policy, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = j.run_with(
        &["--policy", policy.to_str().unwrap()],
        "git config --global user.name; cat ~/.config/git/config ~/.gitconfig ~/.asb-myrc ~/.asb-app/settings.json; \
         git config --global --list; \
         echo PROBED",
    );
    let host = std::fs::read_to_string(&target.path).unwrap();
    let _ = std::fs::remove_file(&policy);
    drop((links, private, behind));
    assert!(out.stdout.starts_with("Canary User\n") && out.stdout.contains("PROBED"), "{out}");
    for canary in ["CANARYGITTOKEN", "CANARY-HEADER-TOKEN", "credential", "CANARY-PRIVATE-NOTES", "CANARY-BEHIND"] {
        assert!(!out.stdout.contains(canary), "{canary} inside: {out}");
    }
    for seed in [".asb-myrc", ".asb-app/settings.json"] {
        assert!(out.stderr.contains(&format!("`{seed}` is reached through a symbolic link: not copied in")), "{out}");
    }
    assert_eq!(host, TOKENED, "{out}");
}

/// Seventh outside look at the anchors, T1: a config that holds a token and is a link
/// (`~/.cargo/config.toml -> main.toml`, a stow link, `~/.condarc -> miniforge3/.condarc`)
/// was never stripped: only a regular file at the name was looked at. Now the file it leads
/// to gets the copy (userns), or is left out (Landlock), so no name of it shows the token.
#[test]
fn a_token_config_that_is_a_link_is_seen_without_its_token_by_every_name() {
    let Some(j) = Jail::new("cred-token-linked") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let main = Planted::new(
        j.rig,
        ".cargo/asb-main.toml",
        "[registries.corp]\nindex = \"sparse+https://crates.corp.example/\"\ntoken = \"CANARY-LINKED-CARGO\"\n",
    );
    let link = Linked::new(j.rig, ".cargo/config.toml", "asb-main.toml");
    let script = "cat ~/.cargo/config.toml; cat ~/.cargo/asb-main.toml; echo PROBED";
    let outs: Vec<(&str, Out)> = [("userns", &[][..]), ("landlock", &["--backend", "landlock"][..])]
        .into_iter()
        .map(|(name, opts)| (name, j.run_with(opts, script)))
        .collect();
    // Eighth look, U8-2: a session that may write where the link is removes it; the next
    // sessions still strip the file it led to (the state directory remembers it).
    let _ = std::fs::remove_file(&link.path);
    let after = j.run("cat ~/.cargo/asb-main.toml; echo PROBED");
    drop((link, main));
    assert!(after.stdout.contains("sparse+https://crates.corp.example/"), "{after}");
    assert!(!after.stdout.contains("CANARY-LINKED-CARGO"), "the link removed, the token inside: {after}");
    for (name, out) in outs {
        assert!(out.stdout.contains("PROBED"), "{name}: {out}");
        assert!(!out.stdout.contains("CANARY-LINKED-CARGO"), "{name}: the token inside: {out}");
        if name == "userns" {
            assert_eq!(out.stdout.matches("sparse+https://crates.corp.example/").count(), 2, "{name}: {out}");
        }
    }
}

/// Eighth outside look at the anchors, L8-1: under Landlock, which grants the project whole, a
/// token config inside the project (`$PIP_CONFIG_FILE` there, or a link into a dotfiles
/// repository worked on as the project) cannot be left out: the warning said "not shown
/// inside" while the jail read it. It now says the jail can read it, and what to do.
#[test]
fn landlock_says_a_token_config_inside_the_project_is_readable() {
    let Some(j) = Jail::new("cred-token-project-ll") else { return };
    // Its userns session makes and removes placeholders in this project, where the sessions of
    // the tests that read the home split their Landlock rules around the config it records.
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let conf = j.project.join("pip.conf");
    std::fs::write(&conf, "[global]\nindex-url = https://u:CANARY-PIP-PW@pypi.corp.example/simple\n").unwrap();
    j.give(&[&conf]);
    let j = j.env("PIP_CONFIG_FILE", conf.to_str().unwrap());
    let out = j.run_with(&["--backend", "landlock"], "echo RAN");
    assert!(out.stdout.contains("RAN"), "{out}");
    assert!(
        out.stderr.contains("is inside the project, which the Landlock backend grants whole: the jail can read it"),
        "{out}"
    );
    assert!(!out.stderr.contains("pip.conf: not shown inside"), "{out}");
    // Under userns the copy without the password is bound over it, which makes the project's
    // file read-only inside: said (eighth look, U8-3), the password still not shown.
    let out =
        j.run_with(&["--backend", "userns"], "cat \"$PIP_CONFIG_FILE\"; echo x >> \"$PIP_CONFIG_FILE\"; echo RAN");
    assert!(out.stdout.contains("RAN") && !out.stdout.contains("CANARY-PIP-PW"), "{out}");
    assert!(out.stdout.contains("https://u@pypi.corp.example/simple"), "{out}");
    assert!(out.stderr.contains("pip.conf: shown without a credential in a URL and read-only inside"), "{out}");
}

/// Red team 32, F8: everyday configs under the built-in `home.read` entries that also hold a
/// token (cargo's registry token, npm's global npmrc, conda's channel token, spack's mirror
/// keys) are seen without it in every home mode, their other settings kept; under Landlock
/// they are not shown at all.
fn everyday_configs_are_seen_without_tokens(name: &str, backend: &[&str]) {
    let Some(j) = Jail::new(name) else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let _cargo = Planted::new(
        j.rig,
        ".cargo/config.toml",
        "[registries.corp]\nindex = \"sparse+https://crates.corp.example/\"\ntoken = \"CANARY-CARGO-TOKEN\"\n[build]\njobs = 3\n",
    );
    let _npm = Planted::new(j.rig, ".npm-global/etc/npmrc", "fund=false\n//npm.corp/:_authToken=CANARY-NPM-TOKEN\n");
    let _conda = Planted::new(j.rig, ".conda/.condarc", "channels:\n  - https://conda.anaconda.org/t/CANARY-CONDA/x\n");
    let _spack = Planted::new(
        j.rig,
        ".spack/mirrors.yaml",
        "mirrors:\n  s3:\n    url: s3://b/c\n    access_pair:\n    - CANARY-SPACK-ID\n    - CANARY-SPACK-KEY\n",
    );
    // In the trees the built-in `home.read` entries show whole (outside review of issue 32, R3):
    // a conda root's own config and pip's site config, an environment's, a Node version's
    // global npmrc under nvm, spack's per-platform scope.
    let _conda_root =
        Planted::new(j.rig, "miniconda3/.condarc", "channels:\n  - https://c.example/t/CANARY-ROOTRC/x\n");
    let _conda_pip =
        Planted::new(j.rig, "miniconda3/pip.conf", "[global]\nindex-url = https://u:CANARY-SITEPIP@p/simple\n");
    let _env_pip =
        Planted::new(j.rig, "miniconda3/envs/ml/pip.conf", "[global]\nindex-url = https://u:CANARY-ENVPIP@p/simple\n");
    let _nvm = Planted::new(j.rig, ".nvm/versions/node/v20.11.0/etc/npmrc", "//n/:_authToken=CANARY-NVMRC\n");
    let _spack_linux =
        Planted::new(j.rig, ".spack/linux/mirrors.yaml", "mirrors:\n  m:\n    access_pair: [CANARY-SPLNX, B]\n");
    let script = "cat ~/.cargo/config.toml ~/.npm-global/etc/npmrc ~/.conda/.condarc ~/.spack/mirrors.yaml \
                  ~/miniconda3/.condarc ~/miniconda3/pip.conf ~/miniconda3/envs/ml/pip.conf \
                  ~/.nvm/versions/node/v20.11.0/etc/npmrc ~/.spack/linux/mirrors.yaml; echo PROBED";
    for mode in ["tmpwrite", "read", "write"] {
        let mut opts: Vec<&str> = backend.to_vec();
        opts.extend(["--home-access", mode]);
        let out = j.run_with(&opts, script);
        assert!(out.stdout.contains("PROBED"), "{mode}: {out}");
        for canary in [
            "CANARY-CARGO-TOKEN",
            "CANARY-NPM-TOKEN",
            "CANARY-CONDA",
            "CANARY-SPACK",
            "CANARY-ROOTRC",
            "CANARY-SITEPIP",
            "CANARY-ENVPIP",
            "CANARY-NVMRC",
            "CANARY-SPLNX",
        ] {
            assert!(!out.stdout.contains(canary), "{mode}: {canary} inside: {out}");
        }
        if backend.is_empty() {
            for kept in ["sparse+https://crates.corp.example/", "jobs = 3", "fund=false", "url: s3://b/c"] {
                assert!(out.stdout.contains(kept), "{mode}: {kept} was lost: {out}");
            }
        }
    }
}

#[test]
fn everyday_configs_are_shown_without_their_tokens() {
    everyday_configs_are_seen_without_tokens("cred-everyday", &[]);
}

#[test]
fn landlock_everyday_configs_with_a_token_are_not_shown() {
    everyday_configs_are_seen_without_tokens("cred-everyday-ll", &["--backend", "landlock"]);
}

/// Keys `~/.ssh/config` names outside `~/.ssh`, and a master connection's socket directory,
/// are unreadable even where the tree around them is listed.
#[test]
fn what_the_ssh_config_names_outside_ssh_is_unreadable() {
    let Some(j) = Jail::new("cred-ssh") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let _cfg = Planted::new(
        j.rig,
        ".ssh/config",
        "Host hpc\n  IdentityFile ~/cred-keys/id_hpc\n  ControlPath ~/cred-keys/cm/%r@%h:%p\n",
    );
    let _key = Planted::new(j.rig, "cred-keys/id_hpc", "CANARY-SSH-CONFIG-KEY");
    let _plain = Planted::new(j.rig, "cred-keys/README", "not a key");
    // A master connection's socket (a file here): whoever connects to it runs commands on the
    // remote host as you.
    let _master = Planted::new(j.rig, "cred-keys/cm/asbtest@hpc:22", "CANARY-SSH-MASTER");
    for mode in
        [&["--ro", "~/cred-keys"][..], &["--home-access", "read"], &["--backend", "landlock", "--ro", "~/cred-keys"]]
    {
        let out = j.run_with(mode, "cat ~/cred-keys/id_hpc ~/cred-keys/cm/*; cat ~/cred-keys/README; echo PROBED");
        assert!(out.stdout.contains("not a key") && out.stdout.contains("PROBED"), "{mode:?}: {out}");
        assert!(!out.stdout.contains("CANARY-SSH"), "{mode:?}: {out}");
    }
}

/// Red team 32 R5: the deploy key `core.sshCommand = ssh -i KEY` names is unreadable wherever
/// the tree around it is shown; the rest of that tree is read.
#[test]
fn the_key_the_git_ssh_command_names_is_unreadable() {
    let Some(j) = Jail::new("cred-sshcmd") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let _cfg = Planted::new(
        j.rig,
        ".gitconfig",
        "[user]\n\tname = Canary User\n[core]\n\tsshCommand = ssh -i ~/cred-deploy/deploy_ed25519 -o IdentitiesOnly=yes\n",
    );
    let _key = Planted::new(j.rig, "cred-deploy/deploy_ed25519", "CANARY-GIT-SSHCOMMAND-KEY");
    let _plain = Planted::new(j.rig, "cred-deploy/README", "not a key");
    for mode in [
        &["--ro", "~/cred-deploy"][..],
        &["--home-access", "read"],
        &["--home-access", "write"],
        &["--backend", "landlock", "--home-access", "read"],
    ] {
        let out = j.run_with(mode, "cat ~/cred-deploy/deploy_ed25519; cat ~/cred-deploy/README; echo PROBED");
        assert!(out.stdout.contains("not a key") && out.stdout.contains("PROBED"), "{mode:?}: {out}");
        assert!(!out.stdout.contains("CANARY-GIT-SSHCOMMAND-KEY"), "{mode:?}: {out}");
    }
}

/// Red team 32 R5: `~/.claude.json` (Claude Code's API-key login `primaryApiKey`, its MCP
/// servers' tokens) is no file in the `read` and `write` homes of sessions of other profiles
/// or none; the claude profile's sessions keep their copy of it.
#[test]
fn claudes_state_file_is_shown_to_the_claude_profile_only() {
    let Some(j) = Jail::new("cred-claude-json") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let _state = Planted::new(j.rig, ".claude.json", "{\"primaryApiKey\": \"CANARY-CLAUDE-PRIMARYKEY\"}");
    let read = |opts: &[&str]| {
        let out = j.run_with(opts, "cat ~/.claude.json; echo PROBED");
        assert!(out.stdout.contains("PROBED"), "{opts:?}: {out}");
        out.stdout.contains("CANARY-CLAUDE-PRIMARYKEY")
    };
    for opts in [
        &["--home-access", "read"][..],
        &["--home-access", "write"],
        &["--profile", "codex", "--home-access", "read"],
        &["--backend", "landlock", "--home-access", "read"],
    ] {
        assert!(!read(opts), "{opts:?}: ~/.claude.json readable");
    }
    assert!(read(&["--profile", "claude", "--home-access", "read"]), "the claude profile keeps its copy");
}

/// An agent's own login (`codex login` in `~/.codex/auth.json`) is shown to its profile's
/// sessions, which need it, unless the profile injects the API key from outside (the key and
/// the login both stay out then); never to another profile's or a plain session, whatever the
/// home mode.
#[test]
fn an_agents_login_is_shown_to_its_own_profile_only_and_not_when_its_key_is_injected() {
    let Some(j) = Jail::new("cred-login") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let _login = Planted::new(j.rig, ".codex/auth.json", "{\"tokens\":\"CANARY-CODEX-LOGIN\"}");
    let read = |name: &str, opts: &[&str], key: Option<&str>| {
        let mut c: Vec<&str> = opts.to_vec();
        c.extend(["-q", "run", "--", "sh", "-c", "cat ~/.codex/auth.json; echo PROBED"]);
        let jail = Jail::new(name).expect("the rig is up");
        let jail = match key {
            Some(k) => jail.env("OPENAI_API_KEY", k),
            None => jail,
        };
        let out = jail.output(&mut jail.command(&c));
        assert!(out.stdout.contains("PROBED"), "{opts:?}: {out}");
        out.stdout.contains("CANARY-CODEX-LOGIN")
    };
    assert!(read("cred-login-1", &["--profile", "codex"], None), "codex's own session needs its login");
    let injected = read("cred-login-2", &["--profile", "codex"], Some("sk-test-injected"));
    assert!(!injected, "the key is injected: no login inside");
    assert!(!read("cred-login-3", &["--profile", "claude", "--home-access", "read"], None), "another agent's session");
    assert!(!read("cred-login-4", &["--home-access", "write"], None), "a plain session");
}

/// `doctor` names the stores this user has, that every session hides them, and how to show one.
#[test]
fn doctor_lists_the_stores_it_hides_from_this_users_home() {
    let Some(j) = Jail::new("cred-doctor") else { return };
    let _home = HOME.lock().unwrap_or_else(|e| e.into_inner());
    let _npmrc = Planted::new(j.rig, ".npmrc", "//registry.npmjs.org/:_authToken=CANARY");
    let _cfg = Planted::new(j.rig, ".gitconfig", TOKENED);
    let out = j.output(j.as_user(&j.rig.bin).arg("doctor"));
    assert!(out.stdout.contains("~/.npmrc (npm)"), "{out}");
    assert!(out.stdout.contains("--ro ~/PATH"), "{out}");
    assert!(out.stdout.contains("sessions see ~/.gitconfig without: credential.helper"), "{out}");
    assert!(!out.stdout.contains("CANARY"), "{out}");
}
