//! Plan tests on a fake host: which mounts, in which order, for which policy.

use super::*;
use crate::host::{FakeFs, UsernsSupport};
use crate::policy::{merge, parse_layer, FileKind, Source, SourcedLayer};

fn facts() -> HostFacts {
    HostFacts {
        uid: 1001,
        gid: 1001,
        user: "u".into(),
        group: "u".into(),
        home: "/home/u".into(),
        home_canonical: "/home/u".into(),
        state_dir: "/home/u/.local/state/agent-sandbox".into(),
        shell: "/bin/bash".into(),
        exe: "/usr/bin/agent-sandbox".into(),
        stub_exe: "/usr/bin/agent-sandbox".into(),
        env: vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("GH_TOKEN".into(), "secret".into()),
            ("OPENAI_API_KEY".into(), "sk".into()),
            ("db_password".into(), "x".into()),
            ("TERM".into(), "xterm".into()),
        ],
        etc_passwd: "root:x:0:0::/root:/bin/bash\nu:x:1001:1001::/home/u:/bin/bash\nv:x:1002:1002::/home/v:/bin/bash\n"
            .into(),
        etc_group: "root:x:0:\nu:x:1001:\n".into(),
        etc_hosts: "127.0.0.1 localhost".into(),
        etc_tmux_conf: None,
        userns: UsernsSupport { available: true, why_not: None },
        landlock_abi: 7,
        overlay_in_userns: false,
        guard_kernel: true,
        mountpoints: vec![],
        mounts: vec![],
        mailers: vec![],
        resolv_conf: "nameserver 192.0.2.53\n".into(),
        tun_unusable: None,
        pid: 4242,
        runtime_dir: Some("/run/user/1001".into()),
        host_id: "node1-4026531836".into(),
        terminals: vec!["/dev/pts/3".into()],
        groups: vec![1001],
        etc_subgid: String::new(),
        newgidmap: None,
        user_configs: Default::default(),
    }
}

fn host() -> FakeFs {
    FakeFs::default()
        .dir("/usr/bin")
        .symlink("/bin", "usr/bin")
        .file("/etc/hosts")
        .file("/etc/resolv.conf")
        .file("/etc/passwd")
        .dir("/etc/munge")
        .file("/etc/munge/munge.key")
        .dir("/etc/ssl")
        .dir("/home/u/proj/.git/hooks")
        .file("/home/u/proj/.git/config")
        .dir("/home/u/.ssh")
        .file("/home/u/.ssh/id_ed25519")
        .file("/home/u/.bashrc")
        .dir("/home/u/.cache")
        .file("/home/u/.gitconfig")
        .dir("/home/v")
        .dir("/scratch/u/p")
}

fn policy(extra: &str) -> Policy {
    let builtin = include_str!("../policy/builtin.toml");
    let mut layers = vec![SourcedLayer {
        layer: parse_layer(builtin, Path::new("b"), FileKind::Site).unwrap(),
        source: Source::Builtin,
    }];
    layers.push(SourcedLayer {
        layer: parse_layer(extra, Path::new("u"), FileKind::User).unwrap(),
        source: Source::User("u".into()),
    });
    merge(&layers, None).unwrap()
}

fn plan_for(extra: &str, project: &str) -> Result<Plan, PlanError> {
    plan_with(facts(), extra, project)
}

/// `true` run in `project`, from `project`.
fn request(project: &str) -> RunRequest {
    RunRequest {
        command: vec!["true".into()],
        project: project.into(),
        cwd: project.into(),
        session: String::new(),
        chaperon_socket: None,
        chaperon_channel: false,
        extra_files: vec![],
        env: None,
        job_endpoints: vec![],
        job_services: vec![],
        job_secret: None,
        peer: None,
    }
}

fn plan_with(facts: HostFacts, extra: &str, project: &str) -> Result<Plan, PlanError> {
    let req = request(project);
    build(&policy(extra), &facts, &host(), &req)
}

fn has(plan: &Plan, f: impl Fn(&MountSpec) -> bool) -> bool {
    plan.mounts.iter().any(f)
}

fn pos(plan: &Plan, f: impl Fn(&MountSpec) -> bool) -> usize {
    plan.mounts.iter().position(f).expect("mount present")
}

#[test]
fn default_plan_hides_ssh_and_munge_and_binds_project_rw() {
    let p = plan_for("", "/home/u/proj").unwrap();
    assert!(!has(&p, |m| m.target().starts_with("/home/u/.ssh")), "ssh must not be mounted at all");
    assert!(!has(&p, |m| m.target().starts_with("/etc/munge")));
    assert!(has(&p, |m| matches!(m, MountSpec::Bind { target, rw: true, .. } if target == Path::new("/home/u/proj"))));
    assert!(has(&p, |m| matches!(m, MountSpec::Tmpfs { target, .. } if target == Path::new("/home/u"))));
    assert!(!has(&p, |m| m.target().starts_with("/home/v")), "other homes are absent");
}

#[test]
fn protected_paths_are_read_only_after_the_project_and_their_parents_pinned() {
    // With the git guard off; on, the guard keeps `.git/config` and `.git/hooks` (below).
    let p = plan_for("[filesystem]\nnested_git = true", "/home/u/proj").unwrap();
    let project =
        pos(&p, |m| matches!(m, MountSpec::Bind { target, rw: true, .. } if target == Path::new("/home/u/proj")));
    let hooks = pos(
        &p,
        |m| matches!(m, MountSpec::Bind { target, rw: false, .. } if target == Path::new("/home/u/proj/.git/hooks")),
    );
    let pin = pos(&p, |m| matches!(m, MountSpec::Pin { target } if target == Path::new("/home/u/proj/.git")));
    assert!(project < pin && pin < hooks);
    assert!(has(
        &p,
        |m| matches!(m, MountSpec::Bind { target, rw: false, .. } if target == Path::new("/home/u/proj/.git/config"))
    ));
}

#[test]
fn missing_protected_paths_get_placeholders() {
    let p = plan_for("[filesystem]\nnested_git = true", "/scratch/u/p").unwrap();
    let paths: Vec<_> = p.placeholders.iter().map(|ph| (ph.path.display().to_string(), ph.dir)).collect();
    assert!(paths.contains(&("/scratch/u/p/.git".into(), true)), "{paths:?}");
    assert!(paths.contains(&("/scratch/u/p/.envrc".into(), false)), "{paths:?}");
    assert!(has(
        &p,
        |m| matches!(m, MountSpec::Bind { target, rw: false, .. } if target == Path::new("/scratch/u/p/.git"))
    ));
}

/// With the git guard on, the missing names it refuses to have made (agents' settings, hook
/// managers' configs, editors' and tools' settings at the top) get no placeholder: five round
/// trips each on a network filesystem (docs/performance.md); the default list leaves none.
/// With the guard off all of them do.
#[test]
fn with_the_git_guard_on_the_names_it_refuses_get_no_placeholder() {
    let names = |p: &Plan| -> Vec<String> {
        p.placeholders.iter().filter_map(|ph| Some(ph.path.file_name()?.to_string_lossy().into_owned())).collect()
    };
    let guarded = [
        ".claude",
        ".mcp.json",
        ".codex",
        ".gemini",
        "opencode.json",
        ".pre-commit-config.yaml",
        "lefthook.yml",
        ".envrc",
        ".vscode",
        ".idea",
        ".husky",
        ".githooks",
    ];
    let on = plan_for("", "/scratch/u/p").unwrap();
    let in_project: Vec<_> = on.placeholders.iter().filter(|ph| ph.path.starts_with("/scratch/u/p")).collect();
    assert!(in_project.is_empty(), "placeholders in the project with the guard on: {in_project:?}");
    let off = names(&plan_for("[filesystem]\nnested_git = true", "/scratch/u/p").unwrap());
    for n in guarded {
        assert!(off.contains(&n.to_string()), "{n} has none with the guard off: {off:?}");
    }
}

#[test]
fn with_the_git_guard_on_the_projects_git_config_and_hooks_are_the_guards_and_every_writable_tree_is_guarded() {
    // `git init` where there is no repository, `git submodule init` and `git remote add` where
    // there is one: the guard checks what they write instead of a read-only mount refusing it.
    for project in ["/scratch/u/p", "/home/u/proj"] {
        let p = plan_for("", project).unwrap();
        assert!(!p.placeholders.iter().any(|ph| ph.path.ends_with(".git")), "{:?}", p.placeholders);
        assert!(!has(&p, |m| m.target().starts_with(Path::new(project).join(".git"))), "{project}");
        let roots = &p.git_guard.as_ref().expect("the guard is on").roots;
        assert_eq!(roots.first().map(PathBuf::as_path), Some(Path::new(project)));
        // The built-in ~/.cache too: a gitfile in the project may point at a repository there.
        assert!(roots.contains(&PathBuf::from("/home/u/.cache")), "{roots:?}");
    }
}

#[test]
fn tool_caches_go_to_the_session_where_the_home_is_not_writable_and_a_users_own_choice_stays() {
    let p = plan_for("", "/home/u/proj").unwrap();
    assert_eq!(var(&p, "npm_config_cache"), None, "the tmpwrite home is writable: npm uses ~/.npm there");
    assert!(!has(&p, |m| m.target() == Path::new("/home/u/.npm")), "~/.npm is not bound read-only");
    for mode in ["read", "restricted"] {
        let p = plan_for(&format!("[home]\naccess = \"{mode}\""), "/home/u/proj").unwrap();
        assert_eq!(var(&p, "npm_config_cache"), Some("/tmp/.npm"), "{mode}");
    }
    let mut req = request("/home/u/proj");
    req.env = Some(vec![("npm_config_cache".into(), "/scratch/u/npm".into())]);
    let p = build(&policy("[home]\naccess = \"read\""), &facts(), &host(), &req).unwrap();
    assert_eq!(var(&p, "npm_config_cache"), Some("/scratch/u/npm"), "the user's own setting");
}

#[test]
fn hidden_path_inside_the_project_is_masked_after_the_project_bind() {
    let mut fs = host();
    fs = fs.file("/home/u/proj/secrets.env");
    let req = request("/home/u/proj");
    let p = build(&policy("[filesystem]\nhide = [\"~/proj/secrets.env\"]"), &facts(), &fs, &req).unwrap();
    let project =
        pos(&p, |m| matches!(m, MountSpec::Bind { target, rw: true, .. } if target == Path::new("/home/u/proj")));
    let mask = pos(
        &p,
        |m| matches!(m, MountSpec::Mask { target, dir: false, made: false } if target == Path::new("/home/u/proj/secrets.env")),
    );
    assert!(project < mask);
}

#[test]
fn project_rules() {
    for (proj, why) in [
        ("/", "cannot be a project"),
        ("/home/u", "home directory"),
        ("/home", "home directory"),
        ("/home/u/.ssh", "hides"),
        ("/usr/bin", "install directory"),
        ("/etc/ssl", "allowed parent"),
        ("/nonexistent", "does not exist"),
    ] {
        let e = plan_for("", proj).unwrap_err().to_string();
        assert!(e.contains(why), "{proj}: {e}");
    }
}

#[test]
fn read_paths_cannot_expose_homes() {
    for bad in ["/home", "/", "~/data", "relative"] {
        let e = plan_for(&format!("[filesystem]\nread = [\"{bad}\"]"), "/home/u/proj").unwrap_err().to_string();
        assert!(e.contains("filesystem.read"), "{bad}: {e}");
    }
}

#[test]
fn environment_is_scrubbed_but_kept_names_pass() {
    let p = plan_for("[env]\nkeep = [\"OPENAI_API_KEY\"]", "/home/u/proj").unwrap();
    let names: Vec<&str> = p.env.iter().map(|(k, _)| k.as_str()).collect();
    assert!(!names.contains(&"GH_TOKEN"));
    assert!(!names.contains(&"db_password"), "case-insensitive *password*");
    assert!(names.contains(&"OPENAI_API_KEY"));
    assert!(names.contains(&"TERM"));
    assert!(p.env_removed.iter().any(|r| r.name == "GH_TOKEN"));
    assert!(p.env.contains(&("HOME".into(), "/home/u".into())));
}

#[test]
fn unavailable_net_mode_falls_back_stricter_with_a_warning() {
    let no_tun =
        || HostFacts { tun_unusable: Some("/dev/net/tun is not open to users here (mode 0600)".into()), ..facts() };
    let p = plan_with(no_tun(), "[net]\nmode = \"filtered\"\nfallback = \"stricter\"", "/home/u/proj").unwrap();
    // The next stricter mode that runs: proxied, which floors private ranges.
    assert_eq!(p.net.effective, NetMode::Proxied);
    assert!(p.net.deny_private);
    assert!(p.env.iter().any(|(k, v)| k == "https_proxy" && v == "http://127.0.0.1:3128"), "{:?}", p.env);
    assert!(p.env.iter().any(|(k, v)| k == "ALL_PROXY" && v == "socks5h://127.0.0.1:1080"));
    assert!(p.warnings.iter().any(|w| w.contains("fallback") && w.contains("0600")), "{:?}", p.warnings);
    let e = plan_with(no_tun(), "[net]\nmode = \"filtered\"\nfallback = \"strict\"", "/home/u/proj").unwrap_err();
    assert!(e.to_string().contains("cannot run here") && e.to_string().contains("0600"), "{e}");
    let p = plan_with(no_tun(), "[net]\nmode = \"filtered\"\nfallback = \"open\"", "/home/u/proj").unwrap();
    assert_eq!(p.net.effective, NetMode::Open);
}

#[test]
fn job_ports_are_named_in_the_environment_and_need_the_filtered_network() {
    let at: std::net::SocketAddr = "203.0.113.1:40123".parse().unwrap();
    let req = RunRequest { job_endpoints: vec![(8786, at)], ..request("/home/u/proj") };
    let p = build(&policy("[net]\nmode = \"filtered\""), &facts(), &host(), &req).unwrap();
    assert!(p.env.iter().any(|(k, v)| k == "AGENT_SANDBOX_JOB_PORT_8786" && v == "203.0.113.1:40123"), "{:?}", p.env);
    assert_eq!(p.net.job_endpoints, vec![(8786, at)]);
    for mode in ["isolated", "proxied", "open"] {
        let e = build(&policy(&format!("[net]\nmode = \"{mode}\"")), &facts(), &host(), &req).unwrap_err();
        assert!(e.to_string().contains("net.job_ports") && e.to_string().contains("filtered"), "{mode}: {e}");
    }
    // A job's listeners of its session: reachable in filtered mode, nothing to reach otherwise.
    let req = RunRequest { job_services: vec![at], ..request("/home/u/proj") };
    let p = build(&policy("[net]\nmode = \"filtered\""), &facts(), &host(), &req).unwrap();
    assert_eq!(p.net.job_services, vec![at]);
    let p = build(&policy("[net]\nmode = \"isolated\""), &facts(), &host(), &req).unwrap();
    assert!(p.net.job_services.is_empty());
}

#[test]
fn a_jail_has_its_session_network_address_on_tun0_only() {
    let peer = PeerPlan { address: "169.254.12.34".parse().unwrap(), registry: "/home/u/.local/state/x".into() };
    let req = RunRequest { peer: Some(peer.clone()), ..request("/home/u/proj") };
    let p = build(&policy("[net]\nmode = \"filtered\""), &facts(), &host(), &req).unwrap();
    assert_eq!(p.net.peer, Some(peer));
    assert_eq!(p.net.jail_address(), "169.254.12.34".parse::<std::net::Ipv4Addr>().unwrap());
    // No tun0, no address on the session network: the jail keeps none.
    for mode in ["isolated", "proxied", "open"] {
        let p = build(&policy(&format!("[net]\nmode = \"{mode}\"")), &facts(), &host(), &req).unwrap();
        assert_eq!(p.net.peer, None, "{mode}");
    }
    let p = build(&policy("[net]\nmode = \"filtered\""), &facts(), &host(), &request("/home/u/proj")).unwrap();
    assert_eq!(p.net.jail_address(), crate::netrules::addr::JAIL_V4);
}

#[test]
fn filtered_mode_gets_our_resolver_and_the_hosts_upstreams() {
    let p = plan_for("[net]\nmode = \"filtered\"", "/home/u/proj").unwrap();
    assert_eq!(p.net.effective, NetMode::Filtered);
    assert_eq!(p.net.upstreams, vec!["192.0.2.53:53".parse().unwrap()]);
    let resolv = p.mounts.iter().find_map(|m| match m {
        MountSpec::File { target, contents, .. } if target == Path::new("/etc/resolv.conf") => Some(contents.clone()),
        _ => None,
    });
    assert!(resolv.expect("resolv.conf synthesized").contains("nameserver 169.254.77.1"));
    let p = plan_for("[net]\nmode = \"filtered\"\ndns = [\"198.51.100.53\"]\nhost_ports = [11434]", "/home/u/proj")
        .unwrap();
    assert_eq!(p.net.upstreams, vec!["198.51.100.53:53".parse().unwrap()]);
    assert_eq!(p.net.host_ports, vec![11434]);
    assert!(!p.net.deny_private);
    // Isolated jails keep the host's resolv.conf view (nothing answers there anyway).
    let p = plan_for("[net]\nmode = \"isolated\"", "/home/u/proj").unwrap();
    assert!(!p
        .mounts
        .iter()
        .any(|m| matches!(m, MountSpec::File { target, .. } if target == Path::new("/etc/resolv.conf"))));
}

#[test]
fn home_read_mode_rebuilds_home_without_hidden_entries() {
    let p = plan_for("[home]\naccess = \"read\"", "/home/u/proj").unwrap();
    assert!(has(&p, |m| matches!(m, MountSpec::TreeBind { target, .. } if target == Path::new("/home/u/.bashrc"))));
    assert!(has(&p, |m| matches!(m, MountSpec::SealTree { target, rw: false } if target == Path::new("/home/u"))));
    assert!(!has(&p, |m| m.target().starts_with("/home/u/.ssh")));
}

#[test]
fn etc_passwd_is_synthesized() {
    let p = plan_for("", "/home/u/proj").unwrap();
    let passwd = p.mounts.iter().find_map(|m| match m {
        MountSpec::File { target, contents, .. } if target == Path::new("/etc/passwd") => Some(contents.clone()),
        _ => None,
    });
    let passwd = passwd.expect("passwd synthesized");
    assert!(passwd.contains("u:x:1001") && !passwd.contains("v:x:1002"));
}

#[test]
fn restricted_home_is_made_read_only_after_binds() {
    let p = plan_for("[home]\naccess = \"restricted\"", "/home/u/proj").unwrap();
    let ro = pos(&p, |m| matches!(m, MountSpec::ReadOnly { target } if target == Path::new("/home/u")));
    let project =
        pos(&p, |m| matches!(m, MountSpec::Bind { target, rw: true, .. } if target == Path::new("/home/u/proj")));
    assert!(project < ro);
}

#[test]
fn landlock_plan_comes_from_the_same_mounts() {
    let p = plan_for("[sandbox]\nbackend = \"landlock\"", "/home/u/proj").unwrap();
    let ll = p.landlock.expect("landlock plan");
    assert!(ll.read_write.contains(&PathBuf::from("/home/u/proj")));
    assert!(ll.read_only.contains(&PathBuf::from("/usr")));
    assert!(!ll.read_only.iter().chain(&ll.read_write).any(|r| r.starts_with("/home/u/.ssh")));
    assert!(ll.deny_tcp_connect.contains(&25));
    assert!(ll.deny_all_tcp, "isolated (fallback) denies TCP");
}

fn landlock_request(project: &str) -> RunRequest {
    RunRequest { session: "0123abcd".into(), chaperon_channel: true, ..request(project) }
}

fn var<'p>(p: &'p Plan, k: &str) -> Option<&'p str> {
    p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

/// Issue 32, F7: under Landlock the agents' configuration in a writable home is not protected
/// (no mounts): the launch says so.
#[test]
fn landlock_with_a_writable_home_warns_that_agent_configuration_is_unprotected() {
    let pol = policy("[sandbox]\nbackend = \"landlock\"\n[home]\naccess = \"write\"");
    let p = build(&pol, &facts(), &host(), &landlock_request("/home/u/proj")).unwrap();
    assert!(p.warnings.iter().any(|w| w.contains("cannot protect the agents' configuration")), "{:?}", p.warnings);
    let pol = policy("[sandbox]\nbackend = \"landlock\"");
    let p = build(&pol, &facts(), &host(), &landlock_request("/home/u/proj")).unwrap();
    assert!(!p.warnings.iter().any(|w| w.contains("agents' configuration")), "{:?}", p.warnings);
}

#[test]
fn landlock_plan_says_the_shared_temp_trees_are_denied_and_names_the_private_one() {
    let p = build(&policy("[sandbox]\nbackend = \"landlock\""), &facts(), &host(), &landlock_request("/home/u/proj"))
        .unwrap();
    let text = crate::show::plan(&p);
    assert!(text.contains("denied:     /tmp /var/tmp /dev/shm") && !text.contains("tmpfs    /tmp"), "{text}");
    let ll = p.landlock.clone().expect("landlock plan");
    let shared: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"].iter().map(PathBuf::from).collect();
    assert_eq!(ll.denied_shared, shared);
    for t in &shared {
        assert!(!ll.read_write.contains(t) && !ll.read_only.contains(t), "{t:?} has a rule");
    }
    let dir = PathBuf::from("/run/user/1001/agent-sandbox/landlock/node1-4026531836-4242-0123abcd");
    assert_eq!(ll.session.path, dir, "under the private runtime dir, named by host, launcher pid and session");
    assert!(ll.read_write.contains(&dir.join("tmp")) && ll.read_only.contains(&dir.join("bin")));
    for k in ["TMPDIR", "TMP", "TEMP"] {
        assert_eq!(var(&p, k), Some(dir.join("tmp").to_str().unwrap()), "{k}");
    }
    // No home is writable under Landlock: npm's cache is the session's (npm installs nothing
    // without one).
    assert_eq!(var(&p, "npm_config_cache"), Some(dir.join("tmp/.npm").to_str().unwrap()));
    let path = var(&p, "PATH").unwrap_or_default();
    assert!(path.starts_with(&format!("{}:", dir.join("bin").display())), "stubs first on PATH: {path}");
    assert!(ll.session.stubs.iter().any(|s| s == "sbatch") && ll.session.exe == Path::new("/usr/bin/agent-sandbox"));
    assert!(ll.read_only.contains(&PathBuf::from("/usr/bin/agent-sandbox")), "the links' target is readable");
    assert!(
        !ll.read_only.iter().chain(&ll.read_write).any(|r| r.starts_with(crate::stub::STUB_DIR)),
        "nothing of the userns jail's /run/agent-sandbox: {ll:?}"
    );
    assert_eq!((ll.slurm_fd, var(&p, SLURM_FD_VAR)), (Some(SLURM_FD), Some("1000")));
    assert_eq!(ll.sweep, Sweep::ScopedKill, "ABI 7 scopes signals");
}

#[test]
fn landlock_plan_keeps_a_shared_temp_tree_the_policy_lists_and_sweeps_by_proc_walk_below_abi_6() {
    let fs = host().dir("/tmp").dir("/var/tmp").dir("/dev/shm");
    let f = HostFacts { landlock_abi: 5, runtime_dir: None, ..facts() };
    let pol = policy("[sandbox]\nbackend = \"landlock\"\n[filesystem]\nwrite = [\"/var/tmp\"]");
    let p = build(&pol, &f, &fs, &landlock_request("/home/u/proj")).unwrap();
    let ll = p.landlock.expect("landlock plan");
    assert!(ll.read_write.contains(&PathBuf::from("/var/tmp")), "{:?}", ll.read_write);
    assert_eq!(ll.denied_shared, [PathBuf::from("/tmp"), PathBuf::from("/dev/shm")]);
    assert_eq!(ll.session.base, PathBuf::from("/home/u/.local/state/agent-sandbox/landlock"), "no private runtime dir");
    assert_eq!(ll.sweep, Sweep::ProcWalk);
}

#[test]
fn landlock_plan_puts_a_jobs_script_in_the_session_directory_and_runs_it_there() {
    let script = format!("{}/job-script", crate::stub::STUB_DIR);
    let req = RunRequest {
        command: vec![script.clone(), "arg".into()],
        extra_files: vec![(PathBuf::from(&script), "#!/bin/sh\necho hi\n".into())],
        ..landlock_request("/home/u/proj")
    };
    let p = build(&policy("[sandbox]\nbackend = \"landlock\""), &facts(), &host(), &req).unwrap();
    let ll = p.landlock.expect("landlock plan");
    let run = ll.session.path.join("run");
    assert_eq!(ll.session.files, [(run.join("job-script"), "#!/bin/sh\necho hi\n".to_string())]);
    assert_eq!(p.command, [run.join("job-script").display().to_string(), "arg".into()]);
    assert!(ll.read_only.contains(&run));
}

#[test]
fn a_slurm_channel_number_from_outside_never_reaches_a_userns_jail() {
    let mut f = facts();
    f.env.push((SLURM_FD_VAR.into(), "5".into()));
    let p = build(&policy(""), &f, &host(), &landlock_request("/home/u/proj")).unwrap();
    assert_eq!(p.backend, BackendKind::Userns);
    assert_eq!(var(&p, SLURM_FD_VAR), None);
    assert_eq!(var(&p, "TMPDIR"), Some("/tmp"));
}

#[test]
fn protected_symlink_is_refused() {
    let fs = host().symlink("/home/u/proj/.envrc", "/home/u/.ssh/id_ed25519");
    let req = request("/home/u/proj");
    let e = build(&policy(""), &facts(), &fs, &req).unwrap_err();
    assert!(matches!(e, PlanError::ProtectedSymlink { .. }));
}

#[test]
fn home_write_mode_leaves_hidden_paths_out_instead_of_masking_them() {
    let p = plan_for("[home]\naccess = \"write\"", "/home/u/proj").unwrap();
    assert!(!has(&p, |m| m.target().starts_with("/home/u/.ssh")), "{:?}", p.mounts);
    assert!(has(&p, |m| matches!(m, MountSpec::SealTree { target, rw: true } if target == Path::new("/home/u"))));
}

#[test]
fn own_home_is_never_hidden_as_a_whole_even_when_it_is_root() {
    let mut f = facts();
    f.home = "/root".into();
    f.home_canonical = "/root".into();
    let fs = host().file("/root/.bashrc").dir("/root/.ssh").dir("/root/proj");
    let req = request("/root/proj");
    let p = build(&policy(""), &f, &fs, &req).unwrap();
    assert!(p.warnings.iter().all(|w| !w.contains("hidden by policy")), "{:?}", p.warnings);
    assert!(has(&p, |m| m.target() == Path::new("/root/.bashrc")));
    assert!(!has(&p, |m| m.target().starts_with("/root/.ssh")));
}

#[test]
fn mailers_are_covered_by_the_stub_through_symlinks_and_on_path() {
    let fs = host()
        .symlink("/usr/sbin/sendmail", "/usr/sbin/exim4")
        .file("/usr/sbin/exim4")
        .file("/usr/bin/mailx")
        .file("/usr/bin/sbatch");
    let req = request("/home/u/proj");
    let mut f = facts();
    f.mailers =
        vec!["/usr/sbin/sendmail".into(), "/usr/sbin/exim4".into(), "/usr/bin/mailx".into(), "/usr/bin/sbatch".into()];
    let facts = || f.clone();
    let p = build(&policy(""), &facts(), &fs, &req).unwrap();
    // Each is bound from the stub's own read-only mount, which must come first.
    let at = |pred: &dyn Fn(&MountSpec) -> bool| p.mounts.iter().position(pred);
    let own = at(&|m| {
        matches!(m, MountSpec::Bind { source, target, rw: false, .. } if source == Path::new("/usr/bin/agent-sandbox") && target == Path::new("/run/agent-sandbox/agent-sandbox"))
    })
    .unwrap();
    let stub =
        |t: &str| at(&|m| matches!(m, MountSpec::Stub { target } if target == Path::new(t))).is_some_and(|i| i > own);
    assert!(stub("/usr/sbin/exim4") && stub("/usr/bin/mailx") && stub("/usr/bin/sbatch"));
    assert!(has(
        &p,
        |m| matches!(m, MountSpec::Bind { target, dir: true, .. } if target == Path::new("/run/agent-sandbox/bin"))
    ));
    let path = &p.env.iter().find(|(k, _)| k == "PATH").unwrap().1;
    assert!(path.starts_with("/run/agent-sandbox/bin:"), "{path}");
    // mail.block = off: the mailers stay real, the Slurm commands are still the stub.
    let off = build(&policy("[mail]\nblock = \"off\""), &facts(), &fs, &req).unwrap();
    let covered = |t: &str| off.mounts.iter().any(|m| m.target() == Path::new(t));
    assert!(!covered("/usr/sbin/exim4") && !covered("/usr/bin/mailx") && covered("/usr/bin/sbatch"));
    assert!(off
        .mounts
        .iter()
        .any(|m| matches!(m, MountSpec::Bind { source, .. } if source.ends_with("stubs/slurm-bin-19"))));
}

#[test]
fn bad_network_rules_stop_the_plan_with_their_key() {
    let e = plan_for("[net]\nallow = [\"exa mple.com\"]", "/home/u/proj").unwrap_err().to_string();
    assert!(e.contains("net.block / net.allow") && e.contains("exa mple.com"), "{e}");
    let p = plan_for("[net]\nallow = [\"GitHub.com.\"]\nblock = [\"!pastebin.com\", \"*\"]", "/home/u/proj").unwrap();
    assert!(p.net.rules.iter().any(|(r, a, _)| r == "*" && *a == crate::netrules::matcher::Action::Block));
    assert!(!p.net.rules.iter().any(|(r, _, _)| r == "pastebin.com"), "a user may remove a default block");
}

#[test]
fn builtin_default_block_list_parses_as_rules() {
    let p = plan_for("", "/home/u/proj").unwrap();
    for must in ["hooks.slack.com", "dns.google", "pastebin.com", "*.webhook.office.com"] {
        assert!(p.net.rules.iter().any(|(r, _, _)| r == must), "{must}");
    }
}

/// Whole plans for a few host shapes, as `--dry-run` prints them: a change to any stage shows
/// as a diff here (review it, then `INSTA_UPDATE=always cargo test --lib plan::tests::shape`).
mod shapes {
    use super::*;

    fn shape(facts: HostFacts, fs: FakeFs, extra: &str, project: &str) -> String {
        let plan = build(&policy(extra), &facts, &fs, &request(project)).expect("plan");
        crate::show::plan(&plan)
    }

    #[test]
    fn shape_userns_default() {
        insta::assert_snapshot!(shape(facts(), host(), "", "/home/u/proj"));
    }

    #[test]
    fn shape_landlock_backend() {
        let f = HostFacts { userns: UsernsSupport { available: false, why_not: Some("off".into()) }, ..facts() };
        insta::assert_snapshot!(shape(f, host(), "[net]\nmode = \"open\"\n", "/home/u/proj"));
    }

    #[test]
    fn shape_home_on_nfs_with_site_trees() {
        // Homes and scratch are their own mounts (NFS, GPFS, Lustre on clusters): binds of
        // trees that contain other mounts must carry them.
        let f = HostFacts { mountpoints: vec!["/".into(), "/home".into(), "/scratch".into(), "/sw".into()], ..facts() };
        let fs = host().dir("/sw/apps").dir("/scratch/u/data");
        let extra = "[filesystem]\nread = [\"/sw\"]\nwrite = [\"/scratch/u/data\"]\n";
        insta::assert_snapshot!(shape(f, fs, extra, "/scratch/u/p"));
    }

    #[test]
    fn shape_project_with_every_protected_path() {
        let fs = host()
            .file("/home/u/proj/.envrc")
            .dir("/home/u/proj/.vscode")
            .dir("/home/u/proj/.idea")
            .file("/home/u/proj/.mcp.json")
            .file("/home/u/proj/.agent-sandbox.toml");
        insta::assert_snapshot!(shape(facts(), fs, "", "/home/u/proj"));
    }
}

/// GPUs: the NVIDIA nodes by default, AMD's (`/dev/kfd`, `/dev/dri/*`) when the policy lists
/// them, never what the admin denies, never a non-device or the host's `/dev/pts`.
#[test]
fn gpu_device_nodes_by_default_and_by_policy_minus_the_admins_deny_list() {
    let fs = host()
        .char_device("/dev/nvidia0")
        .char_device("/dev/nvidia1")
        .char_device("/dev/nvidiactl")
        .char_device("/dev/nvidia-uvm")
        .char_device("/dev/nvidia-caps/nvidia-cap1")
        .file("/dev/nvidia-fake-file")
        .char_device("/dev/kfd")
        .char_device("/dev/dri/renderD128")
        .char_device("/dev/dri/card0")
        .char_device("/dev/pts/0");
    let devices = |extra: &str| -> Vec<String> {
        let plan = build(&policy(extra), &facts(), &fs, &request("/home/u/proj")).unwrap();
        plan.mounts
            .iter()
            .filter_map(|m| match m {
                MountSpec::Device { target, .. } => Some(target.display().to_string()),
                _ => None,
            })
            .filter(|t| {
                !["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"]
                    .contains(&t.as_str())
            })
            .collect()
    };
    let nvidia = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm", "/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap1"];
    let default = devices("");
    for n in nvidia {
        assert!(default.contains(&n.to_string()), "{n} by default: {default:?}");
    }
    assert!(!default.iter().any(|d| d.contains("kfd") || d.contains("dri") || d.contains("fake")), "{default:?}");
    let amd = devices(
        "[filesystem]\ndevices = [\"/dev/kfd\", \"/dev/dri/*\", \"/dev/pts/*\"]\ndeny_devices = [\"/dev/nvidia1\"]\n",
    );
    assert!(amd.contains(&"/dev/kfd".into()) && amd.contains(&"/dev/dri/renderD128".into()), "{amd:?}");
    assert!(!amd.contains(&"/dev/nvidia1".into()), "the deny list wins: {amd:?}");
    assert!(!amd.iter().any(|d| d.starts_with("/dev/pts")), "never the host's terminals: {amd:?}");
}

/// A home entry that is a link: a profile's never binds (the jail of an earlier session could
/// have made it, e.g. `~/.config/opencode -> ../.ssh/id_ed25519` through `--rw ~/.config`);
/// another binds what it leads to, unless that is hidden or the home itself.
#[test]
fn home_entries_that_are_links_bind_only_checked_targets() {
    let builtin = include_str!("../policy/builtin.toml");
    let layer = |text: &str, source: Source, kind: FileKind| SourcedLayer {
        layer: parse_layer(text, Path::new("l"), kind).unwrap(),
        source,
    };
    let pol = merge(
        &[
            layer(builtin, Source::Builtin, FileKind::Site),
            layer("[home]\nwrite = [\".config/opencode/\"]\n", Source::Profile("opencode".into()), FileKind::Profile),
            layer(
                "[home]\nwrite = [\".scratchlink\", \".sshlink\", \".homelink\"]\n",
                Source::User("u".into()),
                FileKind::User,
            ),
        ],
        None,
    )
    .unwrap();
    let fs = host()
        .dir("/home/u/.config")
        .symlink("/home/u/.config/opencode", "/home/u/.ssh/id_ed25519")
        .dir("/scratch/u/cache")
        .symlink("/home/u/.scratchlink", "/scratch/u/cache")
        .symlink("/home/u/.sshlink", "/home/u/.ssh")
        .symlink("/home/u/.homelink", "/home/u");
    let plan = build(&pol, &facts(), &fs, &request("/home/u/proj")).unwrap();
    let binds: Vec<(String, String)> = plan
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountSpec::Bind { source, target, rw: true, .. } => {
                Some((source.display().to_string(), target.display().to_string()))
            }
            _ => None,
        })
        .collect();
    assert!(!binds.iter().any(|(_, t)| t.ends_with("opencode")), "a profile's link: {binds:?}");
    assert!(binds.contains(&("/scratch/u/cache".into(), "/home/u/.scratchlink".into())), "{binds:?}");
    assert!(!binds.iter().any(|(s, t)| t.ends_with("link") && s.starts_with("/home/u")), "{binds:?}");
    let w = plan.warnings.join("\n");
    assert!(w.contains("~/.config/opencode is a symbolic link: not bound"), "{w}");
    assert!(w.contains("~/.sshlink is a symbolic link to /home/u/.ssh"), "{w}");
    assert!(w.contains("~/.homelink is a symbolic link to /home/u,"), "{w}");
}

/// The jail's PID 1 is cloned before the plan is made, from `jail_shape`: it must agree with
/// the plan in every network mode, on the Landlock backend (none), with a session-network
/// address and with a mode that falls back (where the plan decides what runs).
#[test]
fn the_shape_pid_1_is_cloned_with_before_the_plan_is_the_plans() {
    let peer = PeerPlan { address: "169.254.9.7".parse().unwrap(), registry: "/home/u/.local/state/reg".into() };
    let tun_off = HostFacts { tun_unusable: Some("mode 0600".into()), ..facts() };
    let cases: Vec<(&str, HostFacts, Option<PeerPlan>)> = vec![
        ("", facts(), None),
        ("", facts(), Some(peer.clone())),
        ("[net]\nmode = \"isolated\"\n", facts(), None),
        ("[net]\nmode = \"open\"\n", facts(), None),
        ("[net]\nmode = \"proxied\"\n", facts(), Some(peer)),
        ("[net]\nfallback = \"stricter\"\n", tun_off, None),
        ("[sandbox]\nbackend = \"landlock\"\n", facts(), None),
    ];
    for (extra, facts, peer) in cases {
        let req = RunRequest { peer, ..request("/home/u/proj") };
        let pol = policy(extra);
        let plan = build(&pol, &facts, &host(), &req).unwrap();
        let shape = jail_shape(&choose(&pol, &facts), &req);
        match plan.backend {
            BackendKind::Landlock => assert_eq!(shape, None, "{extra}"),
            BackendKind::Userns => {
                assert_eq!(shape, Some((plan.net.jail, plan.net.tun_address(), plan.groups.clone())), "{extra}");
            }
        }
    }
}

/// A policy with the admin file `admin` (as `/etc/agent-sandbox/admin.toml`) over `user`.
fn policy_under_admin(user: &str, admin: &str) -> Policy {
    let builtin = include_str!("../policy/builtin.toml");
    let layer =
        |text: &str, kind, source| SourcedLayer { layer: parse_layer(text, Path::new("x"), kind).unwrap(), source };
    let layers =
        vec![layer(builtin, FileKind::Site, Source::Builtin), layer(user, FileKind::User, Source::User("u".into()))];
    let admin = layer(admin, FileKind::Admin, Source::Admin("a".into()));
    merge(&layers, Some(&admin)).unwrap()
}

/// Nested user namespaces come with mounts in them, where the git guard's path rules and its
/// carrying out of calls fail: the plan refuses the two together, naming the key to set, or,
/// where the admin keeps the guard on, saying there is none.
#[test]
fn nested_user_namespaces_need_the_git_guard_off_and_the_refusal_names_the_way() {
    let req = request("/home/u/proj");
    let err = build(&policy("[process]\nnested_userns = true"), &facts(), &host(), &req).unwrap_err();
    assert!(matches!(err, PlanError::NestedUserns { .. }), "{err}");
    let fix = err.fix().unwrap_or_default();
    assert!(fix.contains("nested_git = true") && fix.contains("[filesystem]"), "{fix}");
    let both = "[process]\nnested_userns = true\n[filesystem]\nnested_git = true";
    let p = build(&policy(both), &facts(), &host(), &req).unwrap();
    assert!(p.seccomp.nested_userns && p.seccomp.nested_mounts && p.git_guard.is_none());
    let locked = policy_under_admin(
        "[process]\nnested_userns = true\n[filesystem]\nnested_git = true",
        "[filesystem]\nnested_git = false",
    );
    let fix = build(&locked, &facts(), &host(), &req).unwrap_err().fix().unwrap_or_default();
    assert!(fix.contains("admin keeps the git guard on") && !fix.contains("set `nested_git"), "{fix}");
    // The Landlock backend has no guard and no mounts: nothing to refuse, but bubblewrap
    // cannot start there, which the plan says.
    let ll = plan_for("[sandbox]\nbackend = \"landlock\"\n[process]\nnested_userns = true", "/home/u/proj").unwrap();
    assert!(ll.warnings.iter().any(|w| w.contains("cannot start under the Landlock backend")), "{:?}", ll.warnings);
    assert!(ll.seccomp.nested_userns && !ll.seccomp.nested_mounts, "no mount calls where nothing can mount");
}

/// The line of `nested::warning` reaches the plan's warnings (printed at every launch, and in
/// the audit log's session record) for the command as it will run, the profile's arguments
/// included.
#[test]
fn the_plan_warns_when_the_commands_own_sandbox_cannot_start() {
    let req =
        |cmd: &[&str]| RunRequest { command: cmd.iter().map(|s| s.to_string()).collect(), ..request("/home/u/proj") };
    let warned = |p: &Plan| p.warnings.iter().any(|w| w.contains("codex's own sandbox"));
    let p = build(&policy(""), &facts(), &host(), &req(&["codex", "exec", "--sandbox", "workspace-write"])).unwrap();
    assert!(warned(&p), "{:?}", p.warnings);
    let p = build(&policy(""), &facts(), &host(), &req(&["codex", "--yolo", "exec"])).unwrap();
    assert!(!warned(&p), "{:?}", p.warnings);
    let nested = "[process]\nnested_userns = true\n[filesystem]\nnested_git = true";
    let p = build(&policy(nested), &facts(), &host(), &req(&["codex", "exec"])).unwrap();
    assert!(!warned(&p), "{:?}", p.warnings);
    let admin = policy_under_admin(nested, "[process]\nnested_userns = false");
    let p = build(&admin, &facts(), &host(), &req(&["codex", "exec"])).unwrap();
    assert!(p.warnings.iter().any(|w| w.contains("admin forbids")), "{:?}", p.warnings);
}

/// The policy with a built-in profile (`profiles/NAME.toml`) as its profile layer.
fn with_profile(name: &str, text: &str) -> Policy {
    with_profile_and(name, text, "")
}

/// `with_profile`, and a user layer.
fn with_profile_and(name: &str, text: &str, user: &str) -> Policy {
    let builtin = include_str!("../policy/builtin.toml");
    let layer = |text: &str, source: Source, kind: FileKind| SourcedLayer {
        layer: parse_layer(text, Path::new("l"), kind).unwrap(),
        source,
    };
    merge(
        &[
            layer(builtin, Source::Builtin, FileKind::Site),
            layer(user, Source::User("u".into()), FileKind::User),
            layer(text, Source::Profile(name.into()), FileKind::Profile),
        ],
        None,
    )
    .unwrap()
}

fn ro_bind(plan: &Plan, p: &str) -> bool {
    has(plan, |m| matches!(m, MountSpec::Bind { target, rw: false, .. } if target == Path::new(p)))
}

/// The attack of issue 32: a jail writes hooks into ~/.claude/settings.json, an MCP server into
/// ~/.claude.json, rules into ~/.claude/rules, rewrites the user's own hook script. Allow-listed
/// (F2): ~/.claude is the session's own layer, whatever the name; what claude must keep to work
/// (its transcripts, its login) is bound writable on top, a missing entry made first; the
/// scripts it runs before each command (session-env, F1) are not among them; ~/.claude.json is a
/// copy of which only state keys go back.
#[test]
fn claudes_own_directory_is_the_sessions_own_but_for_its_state() {
    let pol = with_profile("claude", include_str!("../../profiles/claude.toml"));
    let fs = host()
        .dir("/home/u/.claude/projects")
        .dir("/home/u/.claude/session-env")
        .file("/home/u/.claude/settings.json")
        .file("/home/u/.claude/hooks/notify.sh")
        .file("/home/u/.claude/.credentials.json")
        .file("/home/u/.claude.json");
    let mut req = request("/home/u/proj");
    req.session = "s1".into();
    let layered = HostFacts { overlay_in_userns: true, ..facts() };
    let plan = build(&pol, &layered, &fs, &req).unwrap();
    let claude = Path::new("/home/u/.claude");
    let layer = pos(&plan, |m| matches!(m, MountSpec::Layer { target, .. } if target == claude));
    let rw = |p: &str| {
        has(
            &plan,
            |m| matches!(m, MountSpec::Bind { source, target, rw: true, .. } if target == Path::new(p) && source == target),
        )
    };
    assert!(
        rw("/home/u/.claude/projects/-home-u-proj") && rw("/home/u/.claude/.credentials.json"),
        "its state persists"
    );
    assert!(pos(&plan, |m| m.target() == Path::new("/home/u/.claude/projects")) > layer, "over the layer");
    assert!(rw("/home/u/.claude/todos") && plan.home_dirs.contains(&PathBuf::from("/home/u/.claude/todos")));
    assert!(plan.home_files.contains(&PathBuf::from("/home/u/.claude/history.jsonl")), "a missing state file is made");
    for not_state in ["session-env", "settings.json", "hooks", "rules", "shell-snapshots"] {
        let p = claude.join(not_state);
        assert!(!has(&plan, |m| m.target() == p), "{not_state} is the layer's");
    }
    assert!(plan.placeholders.iter().all(|p| !p.path.starts_with(claude) || p.path.ends_with("CLAUDE.md")));
    let copy = PathBuf::from("/home/u/.local/state/agent-sandbox/copies/s1/0");
    assert!(has(&plan, |m| matches!(m, MountSpec::Bind { source, target, rw: true, .. }
        if source == &copy && target == Path::new("/home/u/.claude.json"))));
    let merge = &plan.merges[0];
    assert_eq!((merge.file.as_path(), merge.copy.as_path()), (Path::new("/home/u/.claude.json"), copy.as_path()));
    assert!(merge.keys.contains(&"numStartups".to_string()));
    assert!(
        !merge.keys.iter().any(|k| k.contains("mcp")
            || k.contains("allowedTools")
            || k.contains("Trust")
            || k.contains("cached")
            || k == "installMethod"
            || k == "autoUpdates"
            || k == "oauthAccount"),
        "{:?}",
        merge.keys
    );
    assert!(merge.strip.is_empty(), "no key injected: claude keeps the key it was given");
    // The notice still goes over the instruction file, after everything else of the home.
    let notice = pos(&plan, |m| matches!(m, MountSpec::Instructions { .. }));
    assert!(notice > layer);
    // No overlay here: the directory is read-only instead, its settings a session copy and
    // the scripts' directory an empty tmpfs for the session.
    let plan = build(&pol, &facts(), &fs, &req).unwrap();
    assert!(ro_bind(&plan, "/home/u/.claude") && !has(&plan, |m| matches!(m, MountSpec::Layer { .. })));
    assert!(has(&plan, |m| matches!(m, MountSpec::SessionCopy { target } if target == &claude.join("settings.json"))));
    assert!(has(&plan, |m| matches!(m, MountSpec::Tmpfs { target, .. } if target == &claude.join("session-env"))));
    let snapshots = claude.join("shell-snapshots");
    assert!(has(&plan, |m| matches!(m, MountSpec::Tmpfs { target, .. } if target == &snapshots)), "made, then a tmpfs");
    assert!(plan.home_dirs.contains(&snapshots));
}

/// A login the policy hides inside the agent's directory stays hidden: no copy of it is bound
/// over its mask, and nothing is merged back.
#[test]
fn a_hidden_file_of_the_agents_is_neither_copied_nor_merged() {
    let hide = "[filesystem]\nhide = [\"~/.pi/agent/auth.json\"]\n";
    let pol = with_profile_and("pi", include_str!("../../profiles/pi.toml"), hide);
    let fs = host().file("/home/u/.pi/agent/auth.json").dir("/home/u/.pi/agent/sessions");
    let plan = build(&pol, &facts(), &fs, &request("/home/u/proj")).unwrap();
    assert!(plan.merges.is_empty(), "{:?}", plan.merges);
    assert!(!has(
        &plan,
        |m| matches!(m, MountSpec::Bind { target, .. } if target == Path::new("/home/u/.pi/agent/auth.json"))
    ));
    assert!(has(
        &plan,
        |m| matches!(m, MountSpec::Mask { target, .. } if target == Path::new("/home/u/.pi/agent/auth.json"))
    ));
}

/// A link in the agent's directory cannot be mounted over, and the jail could swap it for a
/// file of its own: the launch stops and says what to do.
#[test]
fn a_link_in_the_agents_directory_stops_the_launch_with_the_fix() {
    let pol = with_profile("claude", include_str!("../../profiles/claude.toml"));
    let fs = host().dir("/home/u/.claude").symlink("/home/u/.claude/settings.json", "/home/u/dotfiles/claude.json");
    let e = build(&pol, &facts(), &fs, &request("/home/u/proj")).unwrap_err();
    assert!(matches!(e, PlanError::AgentSymlink { .. }), "{e}");
    assert!(e.fix().unwrap().contains("agent.state"), "{:?}", e.fix());
}

/// codex: its databases, sessions and login stay writable; its config, environments.toml,
/// AGENTS.override.md and any other name are the layer's (F2). opencode's config directory,
/// which holds nothing of its state, is read-only whole; and its ~/.cache/opencode (with the
/// ripgrep it runs) is confined in every other session too, where ~/.cache is writable (F16),
/// and kept from being made where it is missing.
#[test]
fn codex_and_opencode_keep_their_state_and_nothing_that_runs_outside() {
    let layered = HostFacts { overlay_in_userns: true, ..facts() };
    let pol = with_profile("codex", include_str!("../../profiles/codex.toml"));
    let fs =
        host().file("/home/u/.codex/state_5.sqlite").file("/home/u/.codex/notify.py").dir("/home/u/.codex/sessions");
    let plan = build(&pol, &layered, &fs, &request("/home/u/proj")).unwrap();
    assert!(has(&plan, |m| matches!(m, MountSpec::Layer { target, .. } if target == Path::new("/home/u/.codex"))));
    assert!(has(&plan, |m| matches!(m, MountSpec::Bind { target, rw: true, .. }
        if target == Path::new("/home/u/.codex/state_5.sqlite"))));
    for name in ["notify.py", "config.toml", "environments.toml", "AGENTS.override.md", ".env"] {
        assert!(!has(&plan, |m| m.target() == Path::new("/home/u/.codex").join(name)), "{name}");
    }
    // A missing ~/.cache/opencode cannot be made by a codex session: a placeholder.
    let oc = PathBuf::from("/home/u/.cache/opencode");
    assert!(plan.placeholders.contains(&Placeholder { path: oc.clone(), dir: true, json: false }));
    assert!(ro_bind(&plan, "/home/u/.cache/opencode"));
    // An existing one is the session's own but for opencode's state.
    let fs = fs.dir("/home/u/.cache/opencode/bin").file("/home/u/.cache/opencode/models.json");
    let plan = build(&pol, &layered, &fs, &request("/home/u/proj")).unwrap();
    assert!(has(&plan, |m| matches!(m, MountSpec::Layer { target, .. } if target == &oc)));
    assert!(!has(&plan, |m| m.target() == oc.join("bin")));
    assert!(has(&plan, |m| matches!(m, MountSpec::Bind { target, rw: true, .. } if target == &oc.join("models.json"))));
    let plan = build(&policy(""), &layered, &fs, &request("/home/u/proj")).unwrap();
    assert!(has(&plan, |m| matches!(m, MountSpec::Layer { target, .. } if target == &oc)), "and without a profile");
    let pol = with_profile("opencode", include_str!("../../profiles/opencode.toml"));
    let fs = host().file("/home/u/.config/opencode/opencode.json").dir("/home/u/.local/share/opencode/storage");
    let plan = build(&pol, &layered, &fs, &request("/home/u/proj")).unwrap();
    assert!(ro_bind(&plan, "/home/u/.config/opencode"));
    assert!(has(&plan, |m| matches!(m, MountSpec::Bind { target, rw: true, .. }
        if target == Path::new("/home/u/.local/share/opencode/storage"))));
}

/// F7: with the whole home writable, every agent's configuration is still protected: each
/// built-in agent's directory is the session's own but for its state, ~/.claude.json is a copy
/// whose state keys alone go back, a missing agent directory or file a placeholder.
/// Review of the agents' homes, A5/A6: Claude Code's `projects/` and Gemini CLI's `tmp/` and
/// `history/` show the session this project's entry only, writable; the rest is the
/// session's own empty directory.
#[test]
fn only_this_projects_entry_of_the_agents_per_project_state_is_shown() {
    let layered = HostFacts { overlay_in_userns: true, ..facts() };
    let fs = host()
        .dir("/home/u/.claude/projects/-home-u-other")
        .dir("/home/u/.gemini/tmp/other")
        .dir("/home/u/.gemini/tmp/bin")
        .file("/home/u/.gemini/tmp/other/.project_root")
        .dir("/home/u/.gemini/history")
        .dir("/home/u/proj.x");
    let mut req = request("/home/u/proj.x");
    req.session = "s1".into();
    let claude =
        build(&with_profile("claude", include_str!("../../profiles/claude.toml")), &layered, &fs, &req).unwrap();
    let tmpfs = |p: &Plan, t: &str| has(p, |m| matches!(m, MountSpec::Tmpfs { target, .. } if target == Path::new(t)));
    let rw =
        |p: &Plan, t: &str| has(p, |m| matches!(m, MountSpec::Bind { target, rw: true, .. } if target == Path::new(t)));
    assert!(tmpfs(&claude, "/home/u/.claude/projects"));
    assert!(rw(&claude, "/home/u/.claude/projects/-home-u-proj-x"), "{:#?}", claude.mounts);
    assert!(claude.home_dirs.contains(&PathBuf::from("/home/u/.claude/projects/-home-u-proj-x")));
    assert!(!rw(&claude, "/home/u/.claude/projects/-home-u-other") && !rw(&claude, "/home/u/.claude/projects"));
    assert!(claude.links.state.contains(&PathBuf::from("/home/u/.claude/projects/-home-u-proj-x")));
    let gemini =
        build(&with_profile("gemini", include_str!("../../profiles/gemini.toml")), &layered, &fs, &req).unwrap();
    for d in ["/home/u/.gemini/tmp", "/home/u/.gemini/history"] {
        assert!(tmpfs(&gemini, d), "{d}");
        assert!(rw(&gemini, &format!("{d}/proj-x")), "{d}: {:#?}", gemini.mounts);
        let mark = PathBuf::from(format!("{d}/proj-x/.project_root"));
        assert!(gemini.home_texts.contains(&(mark.clone(), "/home/u/proj.x".into())));
        assert!(has(&gemini, |m| matches!(m, MountSpec::Bind { target, rw: false, .. } if *target == mark)));
    }
    assert!(has(&gemini, |m| matches!(m, MountSpec::Bind { target, rw: false, .. }
        if target == Path::new("/home/u/.gemini/tmp/bin"))));
}

#[test]
fn claude_and_gemini_name_a_projects_entry_as_they_do() {
    use crate::plan::agent_home::{claude_slug, gemini_slug};
    assert_eq!(claude_slug(Path::new("/home/u/my_repo.v2")).as_deref(), Some("-home-u-my-repo-v2"));
    assert_eq!(claude_slug(Path::new("/home/u/d\u{e9}j\u{e0}")).as_deref(), Some("-home-u-d-j-"));
    assert_eq!(claude_slug(&PathBuf::from(format!("/{}", "a".repeat(240)))), None, "hashed past 200");
    // Gemini: the registry's entry when the marks agree; else an entry marked for it; else new.
    let fs = host()
        .content("/home/u/.gemini/projects.json", r#"{"projects":{"/home/u/p":"p","/home/u/q":"my-proj"}}"#)
        .content("/home/u/.gemini/tmp/p/.project_root", "/home/u/p")
        .content("/home/u/.gemini/tmp/zz/.project_root", "/home/u/r")
        .content("/home/u/.gemini/tmp/my-proj/.project_root", "/home/u/other");
    let home = Path::new("/home/u");
    assert_eq!(gemini_slug(&fs, home, Path::new("/home/u/p")).as_deref(), Some("p"));
    assert_eq!(gemini_slug(&fs, home, Path::new("/home/u/r")).as_deref(), Some("zz"));
    assert_eq!(gemini_slug(&fs, home, Path::new("/home/u/x/My Proj")).as_deref(), Some("my-proj-1"), "taken");
    assert_eq!(gemini_slug(&fs, home, Path::new("/home/u/q")).as_deref(), Some("q"), "its mark names another");
}

#[test]
fn with_the_home_writable_every_agents_configuration_is_still_protected() {
    let layered = HostFacts { overlay_in_userns: true, ..facts() };
    let fs = host()
        .file("/home/u/.claude/settings.json")
        .dir("/home/u/.claude/projects")
        .file("/home/u/.claude.json")
        .file("/home/u/.gemini/settings.json");
    let mut req = request("/home/u/proj");
    req.session = "s1".into();
    let plan = build(&policy("[home]\naccess = \"write\""), &layered, &fs, &req).unwrap();
    for d in ["/home/u/.claude", "/home/u/.gemini"] {
        assert!(has(&plan, |m| matches!(m, MountSpec::Layer { target, .. } if target == Path::new(d))), "{d}");
    }
    assert!(has(&plan, |m| matches!(m, MountSpec::Bind { target, rw: true, .. }
        if target == Path::new("/home/u/.claude/projects/-home-u-proj"))));
    // Without the claude profile, Claude Code's state file (its API-key login, MCP servers'
    // tokens) is hidden, not copied (red team 32 R5).
    assert!(!plan.merges.iter().any(|m| m.file == Path::new("/home/u/.claude.json")));
    assert!(plan.credentials.hidden.iter().any(|l| l.path == Path::new("/home/u/.claude.json")));
    for missing in ["/home/u/.codex", "/home/u/.pi"] {
        assert!(plan.placeholders.contains(&Placeholder { path: missing.into(), dir: true, json: false }), "{missing}");
    }
    let aider = Placeholder { path: "/home/u/.aider.conf.yml".into(), dir: false, json: false };
    assert!(plan.placeholders.contains(&aider), "{:?}", plan.placeholders);
}

/// husky's `core.hooksPath = .husky/_` is covered by the list; a team's own hooks directory
/// named only in the repository's config, and the files the `.envrc` loads, are found at plan
/// time and protected too (a missing one gets a placeholder).
#[test]
fn the_repositorys_hooks_path_and_what_the_envrc_loads_are_protected() {
    let fs = host()
        .dir("/home/u/proj/.git")
        .content("/home/u/proj/.git/config", "[core]\n\thooksPath = tools/hooks\n")
        .file("/home/u/proj/tools/hooks/pre-commit")
        .content("/home/u/proj/.envrc", "dotenv .env.local\nsource_env_if_exists .envrc.private\n")
        .file("/home/u/proj/.env.local");
    let plan = build(&policy(""), &facts(), &fs, &request("/home/u/proj")).unwrap();
    assert!(ro_bind(&plan, "/home/u/proj/tools/hooks"), "the hooks directory");
    assert!(has(&plan, |m| matches!(m, MountSpec::Pin { target } if target == Path::new("/home/u/proj/tools"))));
    assert!(ro_bind(&plan, "/home/u/proj/.env.local"), "what .envrc loads");
    let private = PathBuf::from("/home/u/proj/.envrc.private");
    assert!(
        plan.placeholders.contains(&Placeholder { path: private, dir: false, json: false }),
        "{:?}",
        plan.placeholders
    );
    // A `.env` no `.envrc` loads is everyday data: writable.
    let fs = host().file("/home/u/proj/.env");
    let plan = build(&policy(""), &facts(), &fs, &request("/home/u/proj")).unwrap();
    assert!(!has(&plan, |m| m.target() == Path::new("/home/u/proj/.env")));
}

/// Outside review of issue 32, R2: a workspace project (`~/work`) holding other repositories:
/// each one's `core.hooksPath` (husky's `.husky/_` and the scripts above it) and what its
/// `.envrc` loads are protected as the project's are, one and two levels down; a directory
/// without a `.git` or `.envrc`, a hidden one and a dependency tree are not walked.
#[test]
fn a_workspaces_nested_repositories_hooks_and_envrc_loads_are_protected() {
    let fs = host()
        .dir("/home/u/work/sub/.git")
        .content("/home/u/work/sub/.git/config", "[core]\n\thooksPath = .husky/_\n")
        .file("/home/u/work/sub/.husky/_/pre-commit")
        .file("/home/u/work/sub/.husky/pre-commit")
        .content("/home/u/work/sub/.envrc", "source_env_if_exists .envrc.local\nexport FOO=1\n")
        .file("/home/u/work/sub/.envrc.local")
        .dir("/home/u/work/group/deep/.git")
        .content("/home/u/work/group/deep/.git/config", "[core]\n\thooksPath = githooks\n")
        .file("/home/u/work/group/deep/githooks/pre-push")
        .content("/home/u/work/node_modules/pkg/.envrc", "dotenv evil.env\n")
        .file("/home/u/work/node_modules/pkg/evil.env");
    let plan = build(&policy(""), &facts(), &fs, &request("/home/u/work")).unwrap();
    assert!(ro_bind(&plan, "/home/u/work/sub/.husky/_"), "{:#?}", plan.mounts);
    assert!(ro_bind(&plan, "/home/u/work/sub/.husky"), "husky's scripts above its `_`");
    assert!(ro_bind(&plan, "/home/u/work/sub/.envrc.local"), "what the nested .envrc loads");
    assert!(ro_bind(&plan, "/home/u/work/group/deep/githooks"), "two levels down");
    assert!(!has(&plan, |m| m.target().starts_with("/home/u/work/node_modules")), "a dependency tree");
    assert_eq!(
        super::runs_outside::nested_dirs(&fs, Path::new("/home/u/work")),
        (vec![PathBuf::from("/home/u/work/sub"), PathBuf::from("/home/u/work/group/deep")], None)
    );
    // A jail that filled the walk with directories of its own (second look, G3): said.
    let mut fs = fs;
    for i in 0..600 {
        fs = fs.dir(&format!("/home/u/work/decoy{i:03}"));
    }
    let plan = build(&policy(""), &facts(), &fs, &request("/home/u/work")).unwrap();
    assert!(plan.warnings.iter().any(|w| w.contains("stopped at")), "{:?}", plan.warnings);
}

/// Red team 32: with the git guard on, what the guard does not keep inside a `.git` (a
/// `core.hooksPath` of `.git/my-hooks`, an included `.git/extra.inc`) is bound read-only; an
/// included file of the project too, husky's scripts above its `_`, and aider's tags cache is
/// the session's own tmpfs.
#[test]
fn includes_husky_scripts_and_what_the_guard_does_not_keep_in_a_git_dir_are_protected() {
    let fs = host()
        .dir("/home/u/proj/.git/my-hooks")
        .content(
            "/home/u/proj/.git/config",
            "[core]\n\thooksPath = web/.husky/_\n\thooksPath = .git/my-hooks\n[include]\n\tpath = extra.inc\n\tpath = ../team.gitconfig\n",
        )
        .file("/home/u/proj/.git/extra.inc")
        .file("/home/u/proj/team.gitconfig")
        .dir("/home/u/proj/web/.husky/_")
        .file("/home/u/proj/web/.husky/pre-commit")
        .file("/home/u/proj/.aider.tags.cache.v4/cache.db");
    let plan = build(&policy(""), &facts(), &fs, &request("/home/u/proj")).unwrap();
    assert!(plan.git_guard.is_some());
    for p in [
        "/home/u/proj/.git/my-hooks",
        "/home/u/proj/.git/extra.inc",
        "/home/u/proj/team.gitconfig",
        "/home/u/proj/web/.husky",
    ] {
        assert!(ro_bind(&plan, p), "{p}");
    }
    assert!(!has(&plan, |m| m.target() == Path::new("/home/u/proj/.git/config")), "the guard's");
    assert!(has(
        &plan,
        |m| matches!(m, MountSpec::Tmpfs { target, .. } if target == Path::new("/home/u/proj/.aider.tags.cache.v4"))
    ));
}

/// The credential catalogue in plans: every store absent wherever its tree is shown, in every
/// home mode and under both backends; naming one shows it; the user's git config loses what
/// hands out a credential.
mod credential_stores {
    use super::*;
    use crate::host::{GitConfigFile, UserConfigs};

    /// Stores a user has, next to what the same trees hold that is no credential.
    const STORES: &[&str] = &[
        "/home/u/.config/git/credentials",
        "/home/u/.cargo/credentials.toml",
        "/home/u/.cargo/credentials",
        "/home/u/.cache/huggingface/token",
        "/home/u/.npmrc",
        "/home/u/.pypirc",
        "/home/u/.local/share/keyrings/login.keyring",
        "/home/u/.bash_history",
        "/home/u/.python_history",
        "/home/u/.codex/auth.json",
        "/home/u/keys/id_hpc",
    ];

    fn stores_host() -> FakeFs {
        let mut fs = host()
            .file("/home/u/.config/git/config")
            .dir("/home/u/.cargo/bin")
            .dir("/home/u/.cache/pip")
            .dir("/home/u/.cache/huggingface/hub")
            .file("/home/u/.local/share/man/index")
            .file("/home/u/.codex/config.toml");
        for s in STORES {
            fs = fs.file(s);
        }
        fs
    }

    fn stores_facts() -> HostFacts {
        let ssh = ("/home/u/.ssh/config".into(), "Host hpc\n\tIdentityFile ~/keys/id_hpc\n".to_string());
        HostFacts { user_configs: UserConfigs { git: vec![], ssh: vec![ssh], stripped_before: vec![] }, ..facts() }
    }

    fn plan_on(fs: &FakeFs, f: HostFacts, extra: &str) -> Plan {
        build(&policy(extra), &f, fs, &request("/home/u/proj")).unwrap()
    }

    /// Whether the jail shows `p` with the host's contents: the last mount at `p` or around
    /// it decides (a later mount covers what an earlier one put below it).
    fn shows(plan: &Plan, p: &Path) -> bool {
        let mut shown = false;
        for m in &plan.mounts {
            if !fs::under(p, m.target()) {
                continue;
            }
            shown = match m {
                MountSpec::Bind { .. } | MountSpec::TreeBind { .. } | MountSpec::Layer { .. } => true,
                MountSpec::Copy { target, .. } | MountSpec::SessionCopy { target } => target == p,
                MountSpec::Overlay { whiteouts, .. } => !whiteouts.iter().any(|w| fs::under(p, w)),
                MountSpec::Pin { .. } | MountSpec::SealTree { .. } | MountSpec::ReadOnly { .. } => shown,
                _ => false,
            };
        }
        shown
    }

    fn landlock_shows(plan: &Plan, p: &Path) -> bool {
        let ll = plan.landlock.as_ref().expect("landlock plan");
        ll.read_only.iter().chain(&ll.read_write).any(|r| fs::under(p, r))
    }

    const MODES: &[&str] = &[
        "",
        "[home]\naccess = \"restricted\"",
        "[home]\naccess = \"read\"",
        "[home]\naccess = \"write\"",
        // Every tree around a store listed, read-only and writable.
        "[home]\nread = [\".local\", \".config\", \"keys\"]\nwrite = [\".codex\"]",
        "[home]\naccess = \"read\"\nwrite = [\".codex\", \".local\", \"keys\"]",
    ];

    #[test]
    fn every_store_is_absent_in_every_home_mode() {
        let fs = stores_host();
        for extra in MODES {
            let p = plan_on(&fs, stores_facts(), extra);
            for s in STORES {
                assert!(!shows(&p, Path::new(s)), "{s} shown with `{extra}`:\n{:#?}", p.mounts);
            }
            // What is around them still is.
            for around in ["/home/u/.cargo/bin", "/home/u/.cache/pip", "/home/u/.cache/huggingface/hub"] {
                assert!(shows(&p, Path::new(around)), "{around} with `{extra}`");
            }
        }
    }

    #[test]
    fn every_store_is_in_no_landlock_rule_in_every_home_mode() {
        let fs = stores_host().dir("/home/u/.cache/new-tool-cache");
        let f = HostFacts { userns: UsernsSupport { available: false, why_not: Some("off".into()) }, ..stores_facts() };
        for extra in MODES {
            let p = plan_on(&fs, f.clone(), extra);
            for s in STORES {
                assert!(!landlock_shows(&p, Path::new(s)), "{s} in a rule with `{extra}`: {:#?}", p.landlock);
            }
            // The writable ~/.cache is split around its token: its other entries keep their
            // rule; only the token and the directories on the way to it have none.
            let ll = p.landlock.as_ref().expect("landlock");
            if !extra.contains("access = \"write\"") {
                assert!(ll.read_write.contains(&PathBuf::from("/home/u/.cache/pip")), "{extra}: {:?}", ll.read_write);
                assert!(ll.read_write.contains(&PathBuf::from("/home/u/.cache/huggingface/hub")), "{extra}");
                assert!(!ll.read_write.contains(&PathBuf::from("/home/u/.cache")), "{extra}");
            }
            assert!(ll.read_write.contains(&PathBuf::from("/home/u/proj")));
        }
    }

    #[test]
    fn a_store_inside_a_writable_tree_is_masked_and_its_parents_pinned() {
        let p = plan_on(&stores_host(), stores_facts(), "");
        let mask = pos(
            &p,
            |m| matches!(m, MountSpec::Mask { target, dir: false, made: true } if target == Path::new("/home/u/.cache/huggingface/token")),
        );
        let bind =
            pos(&p, |m| matches!(m, MountSpec::Bind { target, rw: true, .. } if target == Path::new("/home/u/.cache")));
        assert!(bind < mask);
        assert!(has(
            &p,
            |m| matches!(m, MountSpec::Pin { target } if target == Path::new("/home/u/.cache/huggingface"))
        ));
    }

    /// Startup cost: a store that does not exist rebuilds nothing (the default `~/.cargo` and
    /// `~/.cache` stay one bind each) and is looked at only under a tree the jail shows.
    #[test]
    fn a_missing_store_costs_no_rebuild() {
        let fs = host().dir("/home/u/.cargo/bin").dir("/home/u/.cache/pip");
        let p = plan_on(&fs, facts(), "");
        assert!(has(
            &p,
            |m| matches!(m, MountSpec::Bind { target, rw: false, .. } if target == Path::new("/home/u/.cargo"))
        ));
        assert!(has(
            &p,
            |m| matches!(m, MountSpec::Bind { target, rw: true, .. } if target == Path::new("/home/u/.cache"))
        ));
        // Masks only over the stores the launcher makes to cover them (the next test).
        let made = [
            "/home/u/.cache/git/credential",
            "/home/u/.cache/huggingface/token",
            "/home/u/.cache/huggingface/stored_tokens",
        ];
        assert!(
            !has(&p, |m| matches!(m, MountSpec::Mask { target, .. } if !made.iter().any(|t| target == Path::new(t)))),
            "{:#?}",
            p.mounts
        );
        assert!(p.credentials.hidden.len() > 100, "every path is hidden, present or not");
    }

    /// Outside review of issue 32, R1: a store that is missing where the writable `~/.cache`
    /// would show it (git's credential-cache directory, the Hugging Face token) is made by the
    /// launcher and covered like a present one, so one a tool makes outside during the session
    /// is not seen inside; not in the project, not where no writable tree shows it, and not
    /// under Landlock.
    #[test]
    fn a_missing_store_in_a_writable_tree_is_made_and_covered_from_the_start() {
        let fs = host().dir("/home/u/.cache/pip");
        let p = plan_on(&fs, facts(), "");
        let masked = |t: &str, d: bool| {
            has(&p, |m| matches!(m, MountSpec::Mask { target, dir, made: true } if target == Path::new(t) && *dir == d))
        };
        assert!(masked("/home/u/.cache/git/credential", true), "{:#?}", p.mounts);
        assert!(masked("/home/u/.cache/huggingface/token", false));
        assert!(masked("/home/u/.cache/huggingface/stored_tokens", false));
        assert!(p.home_dirs.contains(&PathBuf::from("/home/u/.cache/git/credential")));
        assert!(p.home_files.contains(&PathBuf::from("/home/u/.cache/huggingface/token")));
        assert!(has(
            &p,
            |m| matches!(m, MountSpec::Pin { target } if target == Path::new("/home/u/.cache/huggingface"))
        ));
        // Not in the home's own top (no writable tree shows `~/.git-credential-cache`).
        assert!(!p.home_dirs.contains(&PathBuf::from("/home/u/.git-credential-cache")));
        // A present one is covered as before, and not made.
        let fs = host().content("/home/u/.cache/huggingface/token", "hf_x");
        let p = plan_on(&fs, facts(), "");
        assert!(!p.home_files.contains(&PathBuf::from("/home/u/.cache/huggingface/token")));
        assert!(has(
            &p,
            |m| matches!(m, MountSpec::Mask { target, .. } if target == Path::new("/home/u/.cache/huggingface/token"))
        ));
        // Landlock: nothing made.
        let p = plan_on(&host().dir("/home/u/.cache/pip"), facts(), "[sandbox]\nbackend = \"landlock\"\n");
        assert!(p.home_dirs.is_empty() && p.home_files.is_empty(), "{:?} {:?}", p.home_dirs, p.home_files);
        // A `~/.cache` that is a link to scratch (second look, G1): covered where the jail
        // sees the tree, made where it really is.
        let fs = host().dir("/scratch/u/cache/pip").symlink("/home/u/.cache", "/scratch/u/cache");
        let p = plan_on(&fs, facts(), "");
        let masked = |t: &str| has(&p, |m| matches!(m, MountSpec::Mask { target, .. } if target == Path::new(t)));
        assert!(
            masked("/home/u/.cache/huggingface/token") || masked("/scratch/u/cache/huggingface/token"),
            "{:#?}",
            p.mounts
        );
        assert!(p.home_files.contains(&PathBuf::from("/home/u/.cache/huggingface/token")), "{:?}", p.home_files);
        // The same store under both names the jail shows it at (third look at stop 49: with
        // `--rw /scratch/u` beside `~/.cache -> /scratch/u/cache`, one name was left bare), and
        // the present one too.
        for fs in [
            fs,
            host().content("/scratch/u/cache/huggingface/token", "hf_x").symlink("/home/u/.cache", "/scratch/u/cache"),
        ] {
            let p = plan_on(&fs, facts(), "[filesystem]\nwrite = [\"/scratch/u\"]\n");
            let masked = |t: &str| has(&p, |m| matches!(m, MountSpec::Mask { target, .. } if target == Path::new(t)));
            for t in ["/home/u/.cache/huggingface/token", "/scratch/u/cache/huggingface/token"] {
                assert!(masked(t), "{t}: {:#?}", p.mounts);
            }
        }
        // A hidden directory holding a store: the store gets no cover of its own inside the
        // directory's (it would find no target there, and a made one no place to be made).
        let fs = host().content("/home/u/.cache/huggingface/stored_tokens", "x").dir("/home/u/.cache/pip");
        let p = plan_on(&fs, facts(), "[filesystem]\nhide = [\"~/.cache/huggingface\"]\n");
        let masks: Vec<&Path> = p
            .mounts
            .iter()
            .filter_map(|m| match m {
                MountSpec::Mask { target, .. } => Some(target.as_path()),
                _ => None,
            })
            .collect();
        assert!(masks.contains(&Path::new("/home/u/.cache/huggingface")), "{masks:?}");
        let hf = masks.iter().position(|t| *t == Path::new("/home/u/.cache/huggingface")).unwrap_or(usize::MAX);
        assert!(
            !masks.iter().skip(hf.saturating_add(1)).any(|t| t.starts_with("/home/u/.cache/huggingface")),
            "a cover inside the hidden directory after it: {masks:?}"
        );
        // A link on the way that leads out of every writable tree (second look, G2): said.
        let fs = host().dir("/home/u/.cache/pip").symlink("/home/u/.cache/huggingface", "/opt/elsewhere");
        let p = plan_on(&fs, facts(), "");
        assert!(p.warnings.iter().any(|w| w.contains("huggingface/token: not covered")), "{:?}", p.warnings);
    }

    #[test]
    fn naming_a_store_shows_it_in_every_home_mode() {
        let fs = stores_host();
        for access in ["tmpwrite", "read", "write"] {
            let extra = format!("[home]\naccess = \"{access}\"\nread = [\".npmrc\", \".cargo/credentials.toml\"]\n");
            let p = plan_on(&fs, stores_facts(), &extra);
            assert!(shows(&p, Path::new("/home/u/.npmrc")), "{access}");
            assert!(shows(&p, Path::new("/home/u/.cargo/credentials.toml")), "{access}: {:#?}", p.mounts);
            assert!(!shows(&p, Path::new("/home/u/.cargo/credentials")), "{access}: the other one stays hidden");
            let why: Vec<&str> = p.credentials.exposed.iter().map(|e| e.why.as_str()).collect();
            assert!(why.contains(&"home.read names `.npmrc`"), "{why:?}");
        }
    }

    #[test]
    fn a_variable_that_moves_a_store_moves_what_is_hidden() {
        let fs = stores_host().dir("/scratch/u/hf").file("/scratch/u/hf/token").dir("/scratch/u/data");
        let mut f = stores_facts();
        f.env.push(("HF_HOME".into(), "/scratch/u/hf".into()));
        let p = plan_on(&fs, f.clone(), "[filesystem]\nwrite = [\"/scratch/u\"]");
        assert!(has(&p, |m| matches!(m, MountSpec::Mask { target, .. } if target == Path::new("/scratch/u/hf/token"))));
        assert!(!shows(&p, Path::new("/home/u/.cache/huggingface/token")), "the default place stays hidden");
        // A variable naming the project or the home hides nothing, and says so.
        f.env.push(("GNUPGHOME".into(), "/home/u".into()));
        let p = plan_on(&fs, f, "");
        assert!(p.credentials.refused.iter().any(|l| l.path == Path::new("/home/u")));
        assert!(shows(&p, Path::new("/home/u/proj")));
    }

    /// The attack: a store that is a link (a dotfile manager's `~/.npmrc -> dotfiles/npmrc`)
    /// is read where it leads.
    #[test]
    fn a_store_that_is_a_link_is_hidden_where_it_leads() {
        let fs = host().file("/home/u/dotfiles/npmrc").symlink("/home/u/.npmrc", "/home/u/dotfiles/npmrc");
        for extra in
            ["[home]\naccess = \"read\"", "[home]\naccess = \"write\"", "[home]\nread = [\"dotfiles\", \".npmrc\"]"]
        {
            let p = plan_on(&fs, facts(), extra);
            let named = extra.contains(".npmrc");
            assert_eq!(shows(&p, Path::new("/home/u/dotfiles/npmrc")), named, "{extra}: {:#?}", p.mounts);
        }
    }

    fn with_profile(profile: &str, extra: &str) -> Policy {
        let builtin = include_str!("../policy/builtin.toml");
        let text = crate::policy::BUILTIN_PROFILES.iter().find(|(n, _)| *n == profile).expect("profile").1;
        let layers = vec![
            SourcedLayer {
                layer: parse_layer(builtin, Path::new("b"), FileKind::Site).unwrap(),
                source: Source::Builtin,
            },
            SourcedLayer {
                layer: parse_layer(text, Path::new("p"), FileKind::Profile).unwrap(),
                source: Source::Profile(profile.into()),
            },
            SourcedLayer {
                layer: parse_layer(extra, Path::new("u"), FileKind::User).unwrap(),
                source: Source::User("u".into()),
            },
        ];
        merge(&layers, None).unwrap()
    }

    /// The codex profile's agent needs its login, unless its key is injected from outside (then
    /// the key stays out of the jail and the login file with it); no other session shows it.
    #[test]
    fn an_agents_login_is_shown_to_its_profile_only_and_not_when_its_key_is_injected() {
        let fs = stores_host();
        let no_key = HostFacts { env: vec![("PATH".into(), "/usr/bin".into())], ..stores_facts() };
        let req = request("/home/u/proj");
        let codex = build(&with_profile("codex", ""), &no_key, &fs, &req).unwrap();
        assert!(shows(&codex, Path::new("/home/u/.codex/auth.json")), "{:#?}", codex.credentials.exposed);
        let injected = build(&with_profile("codex", ""), &stores_facts(), &fs, &req).unwrap();
        assert!(!injected.net.credentials.is_empty(), "OPENAI_API_KEY is set: injected");
        assert!(!shows(&injected, Path::new("/home/u/.codex/auth.json")));
        let claude = build(&with_profile("claude", "[home]\nwrite = [\".codex/\"]"), &no_key, &fs, &req).unwrap();
        assert!(!shows(&claude, Path::new("/home/u/.codex/auth.json")), "another agent's login");
        assert!(shows(&claude, Path::new("/home/u/.codex/config.toml")));
    }

    /// Eighth outside look, U8-4: a token config whose name the jail shows but that leads
    /// where the jail shows nothing (a dotfile linked into a scratch tree) was silently
    /// missing inside; it is named now. One the jail shows gets its copy, and says nothing.
    #[test]
    fn a_token_config_leading_where_the_jail_shows_nothing_is_named() {
        let token = "[registries.c]\nindex = \"sparse+https://c/\"\ntoken = \"T\"\n";
        let fs = host()
            .dir("/scratch/u")
            .file("/scratch/u/cargo.toml")
            .content("/scratch/u/cargo.toml", token)
            .dir("/home/u/.cargo")
            .symlink("/home/u/.cargo/config.toml", "/scratch/u/cargo.toml");
        let p = build(&policy(""), &facts(), &fs, &request("/home/u/proj")).unwrap();
        let w = p.warnings.join("\n");
        assert!(
            w.contains("/home/u/.cargo/config.toml: it leads to /scratch/u/cargo.toml, which the jail does not show"),
            "{w}"
        );
        assert!(!shows(&p, Path::new("/scratch/u/cargo.toml")));
        let shown =
            build(&policy("[filesystem]\nread = [\"/scratch/u\"]"), &facts(), &fs, &request("/home/u/proj")).unwrap();
        assert!(!shown.warnings.join("\n").contains("which the jail does not show"), "{:?}", shown.warnings);
        assert!(has(
            &shown,
            |m| matches!(m, MountSpec::Stripped { target, .. } if target == Path::new("/scratch/u/cargo.toml"))
        ));
    }

    fn gitconfig_facts(text: &str) -> HostFacts {
        let git = GitConfigFile {
            path: "/home/u/.gitconfig".into(),
            bytes: Some(text.as_bytes().to_vec()),
            role: crate::host::configs::GitRole::Global,
        };
        HostFacts { user_configs: UserConfigs { git: vec![git], ssh: vec![], stripped_before: vec![] }, ..facts() }
    }

    const TOKENED: &str = "[user]\n\tname = U\n[credential]\n\thelper = store --file ~/.my-git-creds\n\
[url \"https://x-access-token:ghs_abcdefghijklmnopqrst@github.com/\"]\n\tinsteadOf = https://github.com/\n";

    /// Seventh outside look, P1: a global git config kept in the project (a dotfiles
    /// repository worked on as the project, `~/.config/git/config` a link into it) got its
    /// copy without credentials under the project's bind, which covered it: the raw file
    /// showed. The copy comes after the project now.
    #[test]
    fn a_global_git_config_kept_in_the_project_is_shown_without_its_credentials() {
        let real = "/home/u/proj/dot/gitconfig";
        let fs = host()
            .dir("/home/u/proj/dot")
            .file(real)
            .content(real, TOKENED)
            .dir("/home/u/.config/git")
            .symlink("/home/u/.config/git/config", real);
        let git = GitConfigFile {
            path: real.into(),
            bytes: Some(TOKENED.as_bytes().to_vec()),
            role: crate::host::configs::GitRole::Global,
        };
        let f =
            HostFacts { user_configs: UserConfigs { git: vec![git], ssh: vec![], stripped_before: vec![] }, ..facts() };
        let p = build(&policy(""), &f, &fs, &request("/home/u/proj")).unwrap();
        let at = |want: &dyn Fn(&MountSpec) -> bool| p.mounts.iter().rposition(want);
        let copy = at(&|m| matches!(m, MountSpec::Stripped { target, .. } if target == Path::new(real)));
        let project = at(&|m| matches!(m, MountSpec::Bind { target, .. } if target == Path::new("/home/u/proj")));
        let (copy, project) = (copy.expect("a copy without credentials"), project.expect("the project's bind"));
        assert!(copy > project, "the copy is under the project's bind: {:#?}", p.mounts);
    }

    #[test]
    fn the_seeded_gitconfig_loses_its_credentials_and_the_file_its_helper_names_is_hidden() {
        let fs = host().file("/home/u/.my-git-creds");
        for extra in ["", "[home]\naccess = \"read\"", "[home]\naccess = \"write\""] {
            let p = build(&policy(extra), &gitconfig_facts(TOKENED), &fs, &request("/home/u/proj")).unwrap();
            let copy = p.mounts.iter().find_map(|m| match m {
                MountSpec::Stripped { target, contents, seed } if target == Path::new("/home/u/.gitconfig") => {
                    Some((contents.clone(), *seed))
                }
                _ => None,
            });
            let (text, seed) = copy.unwrap_or_else(|| panic!("`{extra}`: no stripped copy: {:#?}", p.mounts));
            assert_eq!(seed, extra.is_empty(), "{extra}");
            assert!(text.contains("name = U") && !text.contains("ghs_") && !text.contains("helper"), "{text}");
            assert!(!has(
                &p,
                |m| matches!(m, MountSpec::Copy { target, .. } if target == Path::new("/home/u/.gitconfig"))
            ));
            assert!(!shows(&p, Path::new("/home/u/.my-git-creds")), "{extra}");
            assert_eq!(
                p.credentials.stripped[0].1,
                vec!["credential.helper", "url.<a URL with credentials>.insteadof"]
            );
        }
        // A config with nothing to take out is copied as it is.
        let p = build(&policy(""), &gitconfig_facts("[user]\n\tname = U\n"), &fs, &request("/home/u/proj")).unwrap();
        assert!(has(&p, |m| matches!(m, MountSpec::Copy { target, .. } if target == Path::new("/home/u/.gitconfig"))));
    }

    #[test]
    fn under_landlock_git_reads_a_stripped_copy_and_the_real_config_is_in_no_rule() {
        let f = HostFacts {
            userns: UsernsSupport { available: false, why_not: Some("off".into()) },
            ..gitconfig_facts(TOKENED)
        };
        let p = build(&policy(""), &f, &host(), &landlock_request("/home/u/proj")).unwrap();
        assert!(!landlock_shows(&p, Path::new("/home/u/.gitconfig")));
        let ll = p.landlock.as_ref().expect("landlock");
        let global = var(&p, "GIT_CONFIG_GLOBAL").expect("git pointed at the copy");
        let (_, text) =
            ll.session.files.iter().find(|(f, _)| f == Path::new(global)).expect("in the session directory");
        assert!(text.contains("name = U") && !text.contains("ghs_") && !text.contains("helper"), "{text}");
    }

    #[test]
    fn a_gitconfig_that_cannot_be_read_as_git_reads_it_is_not_shown() {
        let p = build(&policy(""), &gitconfig_facts("[user\n"), &host(), &request("/home/u/proj")).unwrap();
        assert!(!shows(&p, Path::new("/home/u/.gitconfig")));
        assert!(!has(&p, |m| m.target() == Path::new("/home/u/.gitconfig")));
        assert!(p.warnings.iter().any(|w| w.contains("~/.gitconfig: not shown inside")), "{:?}", p.warnings);
    }
}

/// Hidden paths where they really are: `~/.local` a link elsewhere (common on small HPC
/// homes) puts the state directory there, which a jail granted that tree would reach.
mod real_locations {
    use super::*;

    /// `~/.local` a link to `target`, the state directory resolved through it (as the facts
    /// resolve it on the host), which exists there.
    fn linked_local(target: &str) -> (FakeFs, HostFacts) {
        let state = format!("{target}/state/agent-sandbox");
        let fs = host().dir("/scratch/u/data").dir("/home/u/proj/local").symlink("/home/u/.local", target).dir(&state);
        (fs, HostFacts { state_dir: state.into(), ..facts() })
    }

    fn plan_on(fs: &FakeFs, f: &HostFacts, extra: &str) -> Result<Plan, PlanError> {
        build(&policy(extra), f, fs, &request("/home/u/proj"))
    }

    fn masked(p: &Plan, target: &str) -> bool {
        has(p, |m| matches!(m, MountSpec::Mask { target: t, dir: true, .. } if t == Path::new(target)))
    }

    #[test]
    fn the_state_directory_inside_the_project_through_a_linked_local_is_masked_there() {
        let (fs, f) = linked_local("/home/u/proj/local");
        let p = plan_on(&fs, &f, "").unwrap();
        assert!(masked(&p, "/home/u/proj/local/state/agent-sandbox"), "{:#?}", p.mounts);
        assert!(has(&p, |m| matches!(m, MountSpec::Pin { target } if target == Path::new("/home/u/proj/local/state"))));
        assert!(p.hidden.contains(&PathBuf::from("/home/u/proj/local/state/agent-sandbox")));
    }

    /// No Landlock rule grants `p` or a tree around it.
    fn in_no_rule(p: &Plan, path: &str) -> bool {
        let ll = p.landlock.as_ref().expect("landlock plan");
        !ll.read_write.iter().chain(&ll.read_only).any(|r| fs::under(Path::new(path), r))
    }

    #[test]
    fn the_state_directory_inside_a_write_tree_is_masked_under_userns_and_left_out_of_landlocks_rules() {
        let (fs, f) = linked_local("/scratch/u/local");
        let fs = fs.dir("/scratch/u/local/state/agent-sandbox/jobs").dir("/scratch/u/local/lib");
        let write = "[filesystem]\nwrite = [\"/scratch/u\"]\n";
        let p = plan_on(&fs, &f, write).unwrap();
        assert!(masked(&p, "/scratch/u/local/state/agent-sandbox"), "{:#?}", p.mounts);
        // Landlock: one rule per entry around it, as for a credential store.
        let p = plan_on(&fs, &f, &format!("[sandbox]\nbackend = \"landlock\"\n{write}")).unwrap();
        assert!(in_no_rule(&p, "/scratch/u/local/state/agent-sandbox"), "{:?}", p.landlock);
        let rw = &p.landlock.as_ref().unwrap().read_write;
        assert!(rw.contains(&PathBuf::from("/scratch/u/data")) && rw.contains(&PathBuf::from("/scratch/u/local/lib")));
        // The project, which Landlock grants whole: refused, with the way out.
        let (fs, f) = linked_local("/home/u/proj/local");
        let e = plan_on(&fs, &f, "[sandbox]\nbackend = \"landlock\"").unwrap_err();
        let text = format!("{e} {}", e.fix().unwrap_or_default());
        assert!(matches!(e, PlanError::Unhidable { .. }), "{text}");
        for part in [
            "state directory",
            "/home/u/proj/local/state/agent-sandbox",
            "inside the project /home/u/proj",
            "XDG_STATE_HOME",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
    }

    #[test]
    fn a_store_below_a_linked_directory_is_hidden_where_it_really_is() {
        // `~/.local` a link into a granted scratch tree: its keyring is there too.
        let (fs, f) = linked_local("/scratch/u/local");
        let fs = fs.file("/scratch/u/local/share/keyrings/login.keyring");
        let write = "[filesystem]\nwrite = [\"/scratch/u\"]\n";
        let p = plan_on(&fs, &f, write).unwrap();
        assert!(masked(&p, "/scratch/u/local/share/keyrings"), "{:#?}", p.mounts);
        let p = plan_on(&fs, &f, &format!("[sandbox]\nbackend = \"landlock\"\n{write}")).unwrap();
        assert!(in_no_rule(&p, "/scratch/u/local/share/keyrings/login.keyring"), "{:?}", p.landlock);
    }

    #[test]
    fn a_floor_path_reached_through_a_link_is_hidden_where_the_jail_sees_it() {
        // `~/.ssh` a link into a scratch tree the policy grants, and that tree itself reached
        // through a link (`/scratch` -> `/lustre`): the mask goes where the jail sees it.
        let fs = host()
            .dir("/lustre/u/ssh")
            .file("/lustre/u/ssh/id_ed25519")
            .symlink("/scratch/u", "/lustre/u")
            .symlink("/home/u/.ssh", "/lustre/u/ssh");
        let write = "[filesystem]\nwrite = [\"/scratch/u\"]\n";
        let p = plan_on(&fs, &facts(), write).unwrap();
        assert!(masked(&p, "/scratch/u/ssh"), "{:#?}", p.mounts);
        let p = plan_on(&fs, &facts(), &format!("[sandbox]\nbackend = \"landlock\"\n{write}")).unwrap();
        assert!(in_no_rule(&p, "/lustre/u/ssh") && in_no_rule(&p, "/scratch/u/ssh"), "{:?}", p.landlock);
        // In the project: refused.
        let fs = host().dir("/home/u/proj/ssh").symlink("/home/u/.ssh", "/home/u/proj/ssh");
        let e = plan_on(&fs, &facts(), "[sandbox]\nbackend = \"landlock\"").unwrap_err();
        assert!(
            e.to_string().contains("filesystem.hide `~/.ssh`") && e.to_string().contains("/home/u/proj/ssh"),
            "{e}"
        );
        // A hidden path of the user's own (not a floor) is masked under userns, as before, and
        // left out of Landlock's rules (it was in the tree's one rule before).
        let fs = host().dir("/scratch/u/notes");
        let own = "[filesystem]\nwrite = [\"/scratch/u\"]\nhide = [\"/scratch/u/notes\"]\n";
        assert!(masked(&plan_on(&fs, &facts(), own).unwrap(), "/scratch/u/notes"));
        let p = plan_on(&fs, &facts(), &format!("[sandbox]\nbackend = \"landlock\"\n{own}")).unwrap();
        assert!(in_no_rule(&p, "/scratch/u/notes"), "{:?}", p.landlock);
    }
}

/// Issue 32 under Landlock: claude's own directory and `~/.claude.json` have no writable rule;
/// each state entry has its own; claude is pointed (`CLAUDE_CONFIG_DIR`) at a session
/// directory in the state directory of links to its state (written through) and to the rest
/// (read-only), copies of the settings it rewrites, an empty `session-env/`, and the copy of
/// `.claude.json` whose listed keys go back.
#[test]
fn landlock_points_claude_at_a_session_directory_and_grants_only_its_state() {
    use crate::plan::agent_home::landlock::HomeEntry;
    let pol =
        with_profile_and("claude", include_str!("../../profiles/claude.toml"), "[sandbox]\nbackend = \"landlock\"");
    let fs = host()
        .dir("/home/u/.claude/projects")
        .dir("/home/u/.claude/hooks")
        .file("/home/u/.claude/settings.json")
        .file("/home/u/.claude/hooks/notify.sh")
        .file("/home/u/.claude/.credentials.json")
        .file("/home/u/.claude.json");
    let mut req = landlock_request("/home/u/proj");
    req.session = "s1".into();
    let plan = build(&pol, &facts(), &fs, &req).unwrap();
    let ll = plan.landlock.clone().expect("landlock plan");
    let root = PathBuf::from("/home/u/.local/state/agent-sandbox/copies/s1-claude");
    for p in ["/home/u/.claude", "/home/u/.claude.json", "/home/u/.claude/hooks", "/home/u/.claude/settings.json"] {
        assert!(!ll.read_write.contains(&PathBuf::from(p)), "{p} is writable: {:?}", ll.read_write);
    }
    assert!(ll.read_only.contains(&PathBuf::from("/home/u/.claude")));
    for p in ["/home/u/.claude/projects", "/home/u/.claude/.credentials.json", "/home/u/.claude/history.jsonl"] {
        assert!(ll.read_write.contains(&PathBuf::from(p)), "{p} is state: {:?}", ll.read_write);
    }
    assert!(ll.read_write.contains(&root));
    assert_eq!(var(&plan, "CLAUDE_CONFIG_DIR"), Some(root.to_str().unwrap()));
    let home = &plan.session_homes[0];
    assert_eq!(home.root, root);
    let entry = |n: &str| home.entries.iter().find(|(p, _)| *p == root.join(n)).map(|(_, e)| e.clone());
    assert_eq!(entry("projects"), Some(HomeEntry::Link("/home/u/.claude/projects".into())));
    assert_eq!(entry("hooks"), Some(HomeEntry::Link("/home/u/.claude/hooks".into())));
    assert_eq!(entry("settings.json"), Some(HomeEntry::Copy("/home/u/.claude/settings.json".into())));
    assert_eq!(entry("session-env"), Some(HomeEntry::Dir));
    assert_eq!(entry(".claude.json"), None, "the merged copy is made by agent_copies");
    let merge = &plan.merges[0];
    assert_eq!(
        (merge.file.as_path(), merge.copy.as_path()),
        (Path::new("/home/u/.claude.json"), root.join(".claude.json").as_path())
    );
    assert!(!plan.warnings.iter().any(|w| w.contains("cannot keep the agent's settings")), "{:?}", plan.warnings);
}

/// Read-only trees are compared with the hidden paths in one spelling and where they really
/// are (outside review of the state directory, F4): `//`, `/.`, a trailing `/`, a link above
/// the entry (to scratch, or back into the home) show no hidden path, in either backend.
mod read_trees {
    use super::*;

    /// `~/.local` a link to `/scratch/u/local` (the state directory there), `~/sc` a link to
    /// `/scratch/u`, `~/data/abs` a link back to the home, and a hidden `/scratch/u/secret`.
    fn layout() -> (FakeFs, HostFacts) {
        let state = "/scratch/u/local/state/agent-sandbox";
        let fs = host()
            .dir(state)
            .file(&format!("{state}/audit.jsonl"))
            .dir("/scratch/u/local/lib")
            .file("/scratch/u/secret/f")
            .symlink("/home/u/.local", "/scratch/u/local")
            .symlink("/home/u/sc", "/scratch/u")
            .dir("/home/u/data")
            .symlink("/home/u/data/abs", "/home/u");
        (fs, HostFacts { state_dir: state.into(), ..facts() })
    }

    /// What the jail could read at `path`: a bind (or overlay without a whiteout over it) of
    /// a tree holding it, or a Landlock rule on one.
    fn shows(p: &Plan, path: &str) -> bool {
        let path = Path::new(path);
        if let Some(ll) = &p.landlock {
            return ll.read_write.iter().chain(&ll.read_only).any(|r| fs::under(path, r));
        }
        p.mounts.iter().any(|m| match m {
            MountSpec::Bind { source, .. } | MountSpec::TreeBind { source, .. } => fs::under(path, source),
            MountSpec::Overlay { source, whiteouts, .. } => {
                fs::under(path, source) && !whiteouts.iter().any(|w| fs::under(path, w))
            }
            _ => false,
        })
    }

    #[test]
    fn no_spelling_or_link_of_a_read_entry_shows_a_hidden_path_in_either_backend() {
        let (fs, f) = layout();
        let hide = "hide = [\"/scratch/u/secret\"]\n";
        for backend in ["", "[sandbox]\nbackend = \"landlock\"\n"] {
            let mut entries: Vec<String> = ["/scratch//u", "/scratch/u/.", "/scratch/u/", "/scratch/./u//local/"]
                .iter()
                .map(|e| format!("[filesystem]\nread = [\"{e}\"]\n{hide}"))
                .collect();
            for e in ["sc", "sc/local", "data/abs/.ssh", "data/abs/.local", "data/abs/.local/state", "data/abs/.ssh/."]
            {
                entries.push(format!("[filesystem]\n{hide}[home]\nread = [\"{e}\"]\n"));
            }
            for entry in entries {
                let p = build(&policy(&format!("{backend}{entry}")), &f, &fs, &request("/home/u/proj")).unwrap();
                for hidden in [
                    "/scratch/u/local/state/agent-sandbox/audit.jsonl",
                    "/scratch/u/secret/f",
                    "/home/u/.ssh/id_ed25519",
                ] {
                    assert!(
                        !shows(&p, hidden),
                        "{backend}{entry}: {hidden} is shown: {:#?} {:?}",
                        p.mounts,
                        p.landlock
                    );
                }
            }
            // What is not hidden stays shown, at its real place.
            let p =
                build(&policy(&format!("{backend}[home]\nread = [\"sc/local\"]\n")), &f, &fs, &request("/home/u/proj"))
                    .unwrap();
            assert!(shows(&p, "/scratch/u/local/lib"), "{backend}: {:#?} {:?}", p.mounts, p.landlock);
        }
    }

    /// A site's Slurm commands in a read tree spelled otherwise (`/cluster//slurm/bin`) or reached
    /// through a link are covered by the stub as in the tree spelled plainly.
    #[test]
    fn a_slurm_command_in_a_read_tree_spelled_otherwise_is_still_the_stub() {
        let fs = host().file("/cluster/slurm/bin/sbatch").symlink("/site", "/cluster");
        for tree in ["/cluster//slurm/bin", "/cluster/slurm/./bin/", "/site/slurm/bin"] {
            let f = HostFacts { mailers: vec!["/cluster/slurm/bin/sbatch".into()], ..facts() };
            let p = build(&policy(&format!("[filesystem]\nread = [\"{tree}\"]\n")), &f, &fs, &request("/home/u/proj"))
                .unwrap();
            assert!(
                has(
                    &p,
                    |m| matches!(m, MountSpec::Stub { target } if target == Path::new("/cluster/slurm/bin/sbatch"))
                ),
                "{tree}: {:#?}",
                p.mounts
            );
        }
    }

    #[test]
    fn a_hidden_path_spelled_with_a_double_slash_or_a_dot_is_hidden_all_the_same() {
        let (fs, f) = layout();
        for hide in ["/scratch//u/secret", "/scratch/u/./secret/", "/scratch/u/secret/."] {
            let p = plan_with_fs(&fs, &f, &format!("[filesystem]\nread = [\"/scratch/u\"]\nhide = [\"{hide}\"]\n"));
            assert!(!shows(&p, "/scratch/u/secret/f"), "{hide}: {:#?}", p.mounts);
        }
    }

    fn plan_with_fs(fs: &FakeFs, f: &HostFacts, extra: &str) -> Plan {
        build(&policy(extra), f, fs, &request("/home/u/proj")).unwrap()
    }

    #[test]
    fn a_home_entry_through_a_link_to_a_hidden_path_or_the_home_is_not_bound_and_says_why() {
        let (fs, f) = layout();
        for (key, entry) in [("read", "data/abs/.ssh"), ("write", "data/abs/.ssh")] {
            let p = plan_with_fs(&fs, &f, &format!("[home]\n{key} = [\"{entry}\"]\n"));
            assert!(!shows(&p, "/home/u/.ssh/id_ed25519"), "{key} {entry}: {:#?}", p.mounts);
            let w = p.warnings.join("\n");
            assert!(w.contains(&format!("home.{key}: `{entry}` is /home/u")) && w.contains("not bound"), "{w}");
        }
    }
}
