//! Human-readable renderings: the one-line startup banner, the plan (`--dry-run`) and the
//! effective policy with provenance (`policy show`). JSON output is serde's, elsewhere.

use crate::plan::{MountSpec, Plan};
use crate::policy::{merge::List, Policy, PolicyPaths, Sourced};
use std::fmt::Write;
use std::path::Path;

fn tilde(p: &Path, home: &Path) -> String {
    match p.strip_prefix(home) {
        Ok(rest) if rest.as_os_str().is_empty() => "~".into(),
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => p.display().to_string(),
    }
}

/// The one startup line: mode, project, backend, what is hidden.
pub fn banner(plan: &Plan) -> String {
    let hidden: Vec<String> =
        plan.hidden.iter().filter(|h| h.starts_with(&plan.home)).take(4).map(|h| tilde(h, &plan.home)).collect();
    let weaker = if plan.backend == crate::plan::BackendKind::Landlock {
        " (weaker than userns: hidden paths give EACCES, no private /proc, host processes visible, Slurm and mail stubs by name only; see `agent-sandbox doctor`)"
    } else {
        ""
    };
    format!(
        "agent-sandbox: {} · net {} · home {} · backend {}{weaker} · hidden {}{}",
        tilde(&plan.project, &plan.home),
        plan.net.effective,
        plan.home_access,
        plan.backend.as_str(),
        hidden.join(" "),
        if plan.hidden.len() > hidden.len() {
            format!(" +{} more", plan.hidden.len() - hidden.len())
        } else {
            String::new()
        }
    ) + &match plan.limits.summary().as_str() {
        "none" => String::new(),
        l => format!(" · limits {l}"),
    } + &plan.groups.summary().map(|g| format!(" · {g}")).unwrap_or_default()
        + &job_ports(plan).map(|j| format!(" · {j}")).unwrap_or_default()
}

/// `job ports 8786→203.0.113.1:40123`: where the project's jobs reach the jail's servers.
fn job_ports(plan: &Plan) -> Option<String> {
    if plan.net.job_endpoints.is_empty() {
        return None;
    }
    let each: Vec<String> = plan
        .net
        .job_endpoints
        .iter()
        .map(|(p, a)| match a.port() {
            0 => format!("{p}→(bound at start)"),
            _ => format!("{p}→{a}"),
        })
        .collect();
    Some(format!("job ports {} (nodes running the project's jobs only)", each.join(" ")))
}

pub fn plan(p: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "agent-sandbox plan (dry run: nothing was executed)");
    summary(&mut s, p);
    key_routes(&mut s, p);
    guards(&mut s, p);
    match &p.landlock {
        Some(ll) => landlock(&mut s, ll),
        None => mounts(&mut s, p),
    }
    made_for_session(&mut s, p);
    let _ = writeln!(
        s,
        "  hidden ({}): {}",
        if p.landlock.is_some() { "in no rule: EACCES inside" } else { "do not exist inside" },
        p.hidden.iter().map(|h| tilde(h, &p.home)).collect::<Vec<_>>().join(" ")
    );
    credentials(&mut s, p);
    environment(&mut s, p);
    for w in &p.warnings {
        let _ = writeln!(s, "  warning: {w}");
    }
    s
}

/// One line each: what runs, where, as whom, with which network, limits and groups.
fn summary(s: &mut String, p: &Plan) {
    let _ = writeln!(s, "  backend   {}", p.backend.as_str());
    let _ = writeln!(s, "  command   {}", shell_words_join(&p.command));
    let _ = writeln!(s, "  project   {} (read-write)", p.project.display());
    let _ = writeln!(s, "  cwd       {}", p.cwd.display());
    let _ = writeln!(s, "  user      {} (uid {}, gid {})", p.user, p.uid, p.gid);
    let _ = writeln!(s, "  home      {} ({})", p.home.display(), p.home_access);
    let _ = writeln!(s, "  hostname  {}", p.hostname);
    match &p.net.fallback {
        Some(f) => {
            let _ = writeln!(s, "  network   {} (asked {}; {f})", p.net.effective, p.net.requested);
        }
        None => {
            let _ = writeln!(s, "  network   {}", p.net.effective);
        }
    }
    let _ = writeln!(s, "  limits    {}", p.limits.summary());
    let _ = writeln!(s, "  slurm     {}", p.slurm.summary());
    if let Some(g) = p.groups.summary() {
        let _ = writeln!(s, "  groups    {g}");
    }
    if let Some(j) = job_ports(p) {
        let _ = writeln!(s, "  jobs      {j}");
    }
}

/// The API keys kept outside and where the supervisor adds them.
fn key_routes(s: &mut String, p: &Plan) {
    for r in &p.net.credentials {
        let keys: Vec<&str> = r.keys.iter().map(|k| k.env.as_str()).collect();
        let _ = writeln!(
            s,
            "  key       {} stays outside: the supervisor adds it to requests for https://{}:{}{} only \
             (inside: a stand-in, and {}=http://{}:{}{})",
            keys.join(", "),
            r.host,
            r.port,
            r.path,
            r.base_url_env,
            crate::netrules::addr::GATEWAY_V4,
            r.jail_port,
            r.path
        );
    }
}

/// The seccomp filter's nested namespaces and the git guard.
fn guards(s: &mut String, p: &Plan) {
    let _ = writeln!(
        s,
        "  seccomp   deny set + foreign ABIs; nested user namespaces {}",
        match (p.seccomp.nested_userns, p.seccomp.nested_mounts) {
            (false, _) => "denied (a sandbox of the command's own, such as bubblewrap, cannot start)",
            (true, true) => {
                "allowed, with mount, umount2 and pivot_root inside them (bubblewrap starts); still denied: \
                 the new mount API, setns, netlink but route and sock_diag, raw and packet sockets, \
                 netfilter and IPsec socket options"
            }
            (true, false) => {
                "allowed (no mounts: Landlock refuses them, so bubblewrap cannot start)"
            }
        }
    );
    match &p.git_guard {
        Some(g) => {
            let roots: Vec<String> = g.roots.iter().map(|r| r.display().to_string()).collect();
            let _ = writeln!(
                s,
                "  git guard on: repositories' config, hooks and links checked (nothing they name runs outside), in {}",
                roots.join(", ")
            );
        }
        None => {
            let _ = writeln!(s, "  git guard off (filesystem.nested_git, or the Landlock backend)");
        }
    }
}

/// What the launch makes for the session: the protected placeholders and the agent's own
/// entries in your home.
fn made_for_session(s: &mut String, p: &Plan) {
    if !p.placeholders.is_empty() {
        let _ = writeln!(s, "  protected placeholders (created empty for the session, removed after if still empty):");
        for ph in &p.placeholders {
            let _ = writeln!(s, "    {}{}", ph.path.display(), if ph.dir { "/" } else { "" });
        }
    }
    if !p.home_dirs.is_empty() || !p.home_files.is_empty() {
        let _ = writeln!(
            s,
            "  made in your home before the session if missing (they stay): the agent's own entries, stores to cover:"
        );
        for d in &p.home_dirs {
            let _ = writeln!(s, "    {}/", tilde(d, &p.home));
        }
        for f in &p.home_files {
            let json = f.extension().is_some_and(|e| e == "json");
            let _ = writeln!(s, "    {} ({})", tilde(f, &p.home), if json { "holding {}" } else { "empty" });
        }
    }
}

/// The jail's variables by name, and those scrubbed with their rule.
fn environment(s: &mut String, p: &Plan) {
    let names: Vec<&str> = p.env.iter().map(|(k, _)| k.as_str()).collect();
    let _ = writeln!(s, "  environment: {} variables: {}", names.len(), names.join(" "));
    if !p.env_removed.is_empty() {
        let _ = writeln!(s, "  environment scrubbed (names and the rule that scrubbed each; values never shown):");
        for r in &p.env_removed {
            let _ = writeln!(s, "    {:<30} {}", r.name, r.rule);
        }
    }
}

/// The credential catalogue's part: how many of its paths are hidden, those shown and why,
/// and the git configs shown without their credentials.
fn credentials(s: &mut String, p: &Plan) {
    let c = &p.credentials;
    let _ = writeln!(
        s,
        "  credential stores: {} paths of the catalogue hidden wherever their tree is shown (`agent-sandbox doctor` lists those you have)",
        c.hidden.len()
    );
    for e in &c.exposed {
        let _ = writeln!(s, "    shown: {} ({}): {}", tilde(&e.path, &p.home), e.store, e.why);
    }
    for l in &c.refused {
        let via = l.via.as_deref().unwrap_or("the catalogue");
        let _ = writeln!(
            s,
            "    not hidden: {} ({via}, {}): a top-level tree, the home, the project or a parent of one",
            tilde(&l.path, &p.home),
            l.store
        );
    }
    for (file, dropped) in &c.stripped {
        let _ = writeln!(s, "    {} shown without: {}", tilde(file, &p.home), dropped.join(" "));
    }
}

/// The Landlock backend mounts nothing: its plan is path rules, the session directory that
/// stands in for the userns jail's private trees, and how the session ends.
fn landlock(s: &mut String, ll: &crate::plan::LandlockPlan) {
    use crate::plan::Sweep;
    let paths = |v: &[std::path::PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ");
    let _ = writeln!(s, "  landlock rules (no mounts: the mount list becomes path rules; everything else EACCES):");
    let _ = writeln!(s, "    read-only:  {}", paths(&ll.read_only));
    let _ = writeln!(s, "    read-write: {}", paths(&ll.read_write));
    if !ll.denied_shared.is_empty() {
        let _ = writeln!(s, "    denied:     {} (the host's shared temp trees)", paths(&ll.denied_shared));
    }
    let _ = writeln!(
        s,
        "    tcp:        {}",
        if ll.deny_all_tcp {
            "connect and bind denied".to_string()
        } else {
            format!("connect denied to the port floor {:?}", ll.deny_tcp_connect)
        }
    );
    let d = &ll.session;
    let _ = writeln!(s, "  session directory {} (0700, removed at exit):", d.path.display());
    let _ = writeln!(s, "    {} read-write, empty: TMPDIR, TMP, TEMP", d.tmp.display());
    let _ = writeln!(
        s,
        "    {} read-only, first on PATH: {} stubs -> {} (an absolute /usr/bin/sbatch is the real one: no munge, it fails)",
        d.bin.display(),
        d.stubs.len(),
        d.exe.display()
    );
    for (f, _) in &d.files {
        let _ = writeln!(s, "    {} read-only file", f.display());
    }
    if let Some(fd) = ll.slurm_fd {
        let _ = writeln!(
            s,
            "  slurm: the command inherits the chaperon's channel at descriptor {fd} ({}); a keeper process holds it \
             too, for stubs whose parent closed it ({}: its pid)",
            crate::plan::SLURM_FD_VAR,
            crate::plan::SLURM_KEEPER_VAR
        );
    }
    let _ = writeln!(
        s,
        "  at exit: {}",
        match ll.sweep {
            Sweep::ScopedKill => {
                "a sweeper left in the session's Landlock domain kills every process of the session (kill(-1) under signal scoping)"
            }
            Sweep::ProcWalk =>
                "the launcher walks /proc for its descendants (no signal scoping: a fast re-forking process can escape)",
        }
    );
}

fn mounts(s: &mut String, p: &Plan) {
    let _ = writeln!(s, "  mounts, in order:");
    for m in &p.mounts {
        let line = match m {
            MountSpec::Tmpfs { target, mode } => {
                format!("tmpfs    {} (mode {mode:o})", target.display())
            }
            MountSpec::Bind { source, target, rw, .. } => {
                let what = if *rw { "rw" } else { "ro" };
                if source == target {
                    format!("{what}       {}", target.display())
                } else {
                    format!("{what}       {} <- {}", target.display(), source.display())
                }
            }
            MountSpec::Overlay { target, whiteouts, files, .. } => format!(
                "overlay  {} (read-only; {} hidden entries removed, {} files synthesized)",
                target.display(),
                whiteouts.len(),
                files.len()
            ),
            MountSpec::TreeBind { target, .. } => format!("  tree   {}", target.display()),
            MountSpec::SealTree { target, rw } => format!(
                "seal     {} ({}nosuid, nodev, recursively)",
                target.display(),
                if *rw { "" } else { "read-only, " }
            ),
            MountSpec::Stub { target } => format!("stub     {} (the chaperon's client, read-only)", target.display()),
            MountSpec::Device { target, .. } => format!("device   {}", target.display()),
            MountSpec::Symlink { target, link } => {
                format!("symlink  {} -> {}", target.display(), link.display())
            }
            MountSpec::File { target, .. } => {
                format!("file     {} (synthesized)", target.display())
            }
            MountSpec::Instructions { target, .. } => {
                format!("notice   {} (the agent's own text + the sandbox notice, read-only)", target.display())
            }
            MountSpec::Copy { target, .. } => {
                format!("copy     {} (writable session copy)", target.display())
            }
            MountSpec::SessionCopy { target } => {
                format!("copy     {} (writable for the session; your file never changes)", target.display())
            }
            MountSpec::Layer { target, .. } => {
                format!(
                    "layer    {} (writable for the session; nothing written there reaches your files)",
                    target.display()
                )
            }
            MountSpec::Stripped { target, seed, .. } => format!(
                "stripped {} ({}, without the entries that hand out a credential)",
                target.display(),
                if *seed { "writable session copy" } else { "read-only copy" }
            ),
            MountSpec::Proc { target } => format!("proc     {}", target.display()),
            MountSpec::Devpts { target } => format!("devpts   {} (new instance)", target.display()),
            MountSpec::Mask { target, .. } => {
                format!("mask     {} (hidden inside a writable tree: empty, read-only)", target.display())
            }
            MountSpec::Pin { target } => format!("pin      {} (cannot be renamed or removed)", target.display()),
            MountSpec::ReadOnly { target } => format!("readonly {}", target.display()),
        };
        let _ = writeln!(s, "    {line}");
    }
}

fn shell_words_join(v: &[String]) -> String {
    v.iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn scalar<T: std::fmt::Display>(s: &mut String, key: &str, v: &Sourced<T>) {
    let _ = writeln!(
        s,
        "  {key:<24} {:<12} [{}{}]",
        v.value.to_string(),
        v.source,
        if v.locked { ", locked by admin" } else { "" }
    );
}

fn list(s: &mut String, key: &str, l: &List) {
    let _ = writeln!(s, "  {key}:");
    if l.is_empty() {
        let _ = writeln!(s, "    (empty)");
    }
    for e in l {
        let _ = writeln!(s, "    {:<40} [{}{}]", e.value, e.source, if e.locked { ", locked by admin" } else { "" });
    }
}

/// The built-in half of the scrub, which no list shows: by a name's words, by a value's form.
fn env_meaning(s: &mut String) {
    use crate::plan::env::{
        HARMLESS, KEY_FORMS, SECRET_ENDINGS, SECRET_LAST_WORDS, SECRET_PAIRS, SECRET_WORDS, VALUE_FORMS,
    };
    let mut forms: Vec<&str> = KEY_FORMS.iter().map(|f| f.provider).collect();
    forms.dedup();
    forms.extend(VALUE_FORMS);
    let pairs: Vec<String> = SECRET_PAIRS.iter().map(|(a, b)| format!("{a}_{b}")).collect();
    let harmless: Vec<&str> = HARMLESS.iter().map(|(n, _)| *n).collect();
    let _ = writeln!(s, "  env.scrub by meaning [built-in] (env.keep passes these; values are never shown):");
    let _ = writeln!(s, "    names with the word:       {}", SECRET_WORDS.join(" "));
    let _ = writeln!(s, "    or a word ending in:       {}", SECRET_ENDINGS.join(" "));
    let _ = writeln!(s, "    or ending with the word:   {}", SECRET_LAST_WORDS.join(" "));
    let _ = writeln!(s, "    or the words in a row:     {}", pairs.join(" "));
    let _ = writeln!(s, "    but these harmless names:  {}", harmless.join(" "));
    let _ = writeln!(s, "    values holding a key:      {}", forms.join(", "));
}

pub fn policy(p: &Policy, paths: &PolicyPaths) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "effective policy (lowest layer first: built-in, {}, {}, profile, project tables, --policy, command line; admin {} last)", paths.site_config().display(), paths.user_config.display(), paths.admin_file().display());
    scalar(&mut s, "sandbox.backend", &p.backend);
    scalar(&mut s, "sandbox.hostname", &p.hostname);
    scalar(&mut s, "sandbox.hide_with", &p.hide_with);
    scalar(&mut s, "net.mode", &p.net_mode);
    scalar(&mut s, "net.fallback", &p.net_fallback);
    if let Some(preset) = &p.net_preset {
        scalar(&mut s, "net.preset", preset);
        if let Ok(found) = crate::policy::presets::find(&preset.value) {
            let _ = writeln!(s, "    blocks `*` and allows {} hosts: {}", found.hosts.len(), found.hosts.join(" "));
        }
    }
    scalar(&mut s, "home.access", &p.home_access);
    scalar(&mut s, "mail.block", &p.mail_block);
    scalar(&mut s, "process.nested_userns", &p.nested_userns);
    scalar(&mut s, "process.unix_sockets", &p.unix_sockets);
    scalar(&mut s, "process.host_terminals", &p.host_terminals);
    scalar(&mut s, "filesystem.nested_git", &p.nested_git);
    for (key, v) in [
        ("limits.mem", p.limits.mem.as_ref().map(|l| (format!("{}M", l.value >> 20), l))),
        ("limits.pids", p.limits.pids.as_ref().map(|l| (l.value.to_string(), l))),
        ("limits.timeout", p.limits.timeout.as_ref().map(|l| (format!("{}s", l.value), l))),
    ] {
        if let Some((value, l)) = v {
            scalar(&mut s, key, &Sourced { value, source: l.source.clone(), locked: l.locked });
        }
    }
    if let Some(c) = &p.limits.cpus {
        scalar(&mut s, "limits.cpus", c);
    }
    let interval = &p.slurm.query_interval;
    let interval =
        Sourced { value: format!("{}s", interval.value), source: interval.source.clone(), locked: interval.locked };
    scalar(&mut s, "slurm.query_interval", &interval);
    scalar(&mut s, "slurm.queries_per_minute", &p.slurm.queries_per_minute);
    if let Some(a) = &p.agent {
        let _ =
            writeln!(s, "  agent                    {:?} [{}]", a.value.command.clone().unwrap_or_default(), a.source);
    }
    list(&mut s, "sandbox.project_parents", &p.project_parents);
    list(&mut s, "filesystem.read", &p.fs_read);
    list(&mut s, "filesystem.write", &p.fs_write);
    list(&mut s, "filesystem.hide (floor)", &p.hide);
    list(&mut s, "filesystem.hide_files (floor)", &p.hide_files);
    list(&mut s, "filesystem.protected", &p.protected);
    list(&mut s, "filesystem.devices", &p.devices);
    list(&mut s, "filesystem.deny_devices (floor)", &p.deny_devices);
    list(&mut s, "home.read", &p.home_read);
    list(&mut s, "home.write", &p.home_write);
    list(&mut s, "home.seed", &p.home_seed);
    list(&mut s, "env.keep", &p.env_keep);
    list(&mut s, "env.scrub (floor)", &p.env_scrub);
    env_meaning(&mut s);
    let _ = writeln!(s, "  env.set:");
    for (k, v) in &p.env_set {
        let _ = writeln!(s, "    {k}={} [{}{}]", v.value, v.source, if v.locked { ", locked by admin" } else { "" });
    }
    list(&mut s, "net.allow", &p.net_allow);
    list(&mut s, "net.block (floor)", &p.net_block);
    for w in &p.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
