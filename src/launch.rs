//! One launch of the jail, on the login node (`agent-sandbox run`, a profile, the shell) and
//! on a compute node (`exec --job`, a job's wrapper): where the two differ is only where the
//! policy, the command and the environment come from (`Launch::for_session`, `Launch::for_job`).
//! Then the same steps for both (`Launch::run`): project checks, the session's door to its
//! chaperon, stub links, the project lock, the plan, warnings, the audit records, the jail
//! with its network supervisor and lazily started chaperon.

use crate::audit::AuditLog;
use crate::plan::{self, Plan, PlanError, RunRequest};
use crate::session::{self, Held, Prelude};
use crate::{cli, host, jail, policy, show, slurm, stub, timing};
use std::path::{Path, PathBuf};

pub use crate::session::Origin;

/// Why a launch did not run its command: one sentence, and the fix where one is known.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error(transparent)]
    Policy(#[from] policy::PolicyError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Jail(#[from] jail::JailError),
    #[error(transparent)]
    FrozenPolicy(#[from] policy::FrozenError),
    /// A step of the launch itself (the session's socket, the lock, a job's directory).
    #[error("{what}")]
    Setup { what: String, fix: Option<String> },
}

impl LaunchError {
    pub fn fix(&self) -> Option<String> {
        match self {
            LaunchError::Policy(e) => e.fix(),
            LaunchError::Plan(e) => e.fix(),
            LaunchError::Jail(e) => e.fix(),
            LaunchError::FrozenPolicy(e) => e.fix(),
            LaunchError::Setup { fix, .. } => fix.clone(),
            LaunchError::Host(_) => None,
        }
    }

    /// Something of the host the plan checked changed before the jail was built (a file of
    /// the home replaced, as `git config --global` or an editor's save does): nothing of the
    /// jail ran, and a new plan may be made.
    pub fn changed_since_the_plan(&self) -> bool {
        matches!(self, LaunchError::Jail(e) if e.changed_since_the_plan())
    }

    /// The command itself was not found in the jail (exit 127, as a shell would).
    pub fn not_found(&self) -> bool {
        matches!(self, LaunchError::Jail(jail::JailError::CommandNotFound(_)))
    }

    pub(crate) fn setup(what: impl Into<String>) -> LaunchError {
        LaunchError::Setup { what: what.into(), fix: None }
    }
}

/// What to run in a session on the login node.
#[derive(Clone)]
pub enum What {
    Command(Vec<String>),
    /// A profile's agent, with the user's extra arguments.
    Agent(Vec<String>),
    Shell,
}

/// The exit status of a session ended by its time limit (as timeout(1) uses).
pub const EXIT_TIMEOUT: i32 = 124;

/// Everything a launch needs, gathered; `run` does the rest.
pub struct Launch {
    pub facts: host::HostFacts,
    pub policy: policy::Policy,
    pub project: PathBuf,
    pub cwd: PathBuf,
    pub command: Vec<String>,
    /// Read-only files under `/run/agent-sandbox` (a job's script, as read).
    pub extra_files: Vec<(PathBuf, String)>,
    /// The jail's environment before the scrub (a job's `--export` set); None: the launcher's.
    pub env: Option<Vec<(String, String)>>,
    pub origin: Origin,
    /// The plan's view of the project and the home, read while the policy loads.
    pub ahead: plan::ahead::ReadAhead,
    /// Other work started ahead on threads of their own (the audit log's files opened), all
    /// ended before PID 1 is cloned.
    pub beside: Vec<agent_sandbox_sys::thread::Thread<()>>,
}

/// The host facts, the policy file locations, the project asked for and the cwd.
pub struct Context {
    pub facts: host::HostFacts,
    pub paths: policy::PolicyPaths,
    pub project: PathBuf,
    pub cwd: PathBuf,
}

impl Context {
    pub fn gather(opts: &cli::RunOpts) -> Result<Context, LaunchError> {
        Ok(Context::gathering(opts, false)?.0)
    }

    /// The context, and with `ahead` the plan's view of the project and the home read ahead,
    /// from as soon as the user's home is known (`plan::ahead`).
    fn gathering(opts: &cli::RunOpts, ahead: bool) -> Result<(Context, plan::ahead::ReadAhead), LaunchError> {
        timing::mark("ctx");
        let cwd = std::env::current_dir().map_err(|e| LaunchError::Setup {
            what: format!("cannot determine the current directory: {e}"),
            fix: Some("fix: cd into your project directory, or pass --project DIR".into()),
        })?;
        let project = opts.project.clone().unwrap_or_else(|| cwd.clone());
        let project = if project.is_absolute() { project } else { cwd.join(project) };
        let who = host::Who::gather()?;
        host::overlap_where(&[&who.home_canonical, &project]);
        timing::mark("who");
        let read_ahead = match ahead {
            true => {
                let xdg = std::env::var("XDG_CONFIG_HOME").ok();
                // The state directory as the environment names it (the facts resolve it later).
                let env: Vec<(String, String)> =
                    std::env::var("XDG_STATE_HOME").map(|v| ("XDG_STATE_HOME".to_string(), v)).into_iter().collect();
                let state = host::state_dir_as_named(&env, &who.home);
                let watch = session_records(state, who.home_canonical.clone());
                plan::ahead::ReadAhead::start(&who, xdg.as_deref(), &project, watch)
            }
            false => plan::ahead::ReadAhead::none(),
        };
        let facts = host::HostFacts::gather_for(who)?;
        timing::mark("facts");
        let xdg = facts.env_var("XDG_CONFIG_HOME").map(PathBuf::from);
        let paths = policy::PolicyPaths::new(&facts.home, xdg.as_deref());
        Ok((Context { facts, paths, project, cwd }, read_ahead))
    }

    /// The merged policy. `project`: the checked project, for `[projects]` tables and the
    /// in-project rule; `None` where no project is involved (`policy show` from anywhere).
    pub fn policy(
        &self,
        opts: &cli::RunOpts,
        profile: Option<&str>,
        project: Option<&Path>,
    ) -> Result<policy::Policy, LaunchError> {
        let cli_layer = cli::cli_layer(opts, &self.facts.home).map_err(LaunchError::setup)?;
        timing::mark("basics");
        Ok(policy::load(policy::LoadRequest {
            paths: &self.paths,
            home: &self.facts.home,
            uid: self.facts.uid,
            project,
            profile,
            policy_files: &opts.policy,
            cli: cli_layer,
        })?)
    }
}

/// What a view read ahead watches (`plan::ahead::Watch`): the session locks of the project and
/// of the home, whose records name the placeholders sessions made.
fn session_records(state: PathBuf, home: PathBuf) -> plan::ahead::Watch {
    Box::new(move |project: &Path| {
        vec![jail::placeholders::lock_path(&state, project), jail::placeholders::lock_path(&state, &home)]
    })
}

/// A session on the login node, from the command line: prepared, run, and recorded in the
/// audit log however it ends (a refusal too, but for a dry run, which changes nothing).
pub fn session(opts: &cli::RunOpts, profile: Option<&str>, what: What) -> Result<i32, LaunchError> {
    // One malloc arena for every thread, before the first starts: the threads that read
    // ahead end at once, but an arena of theirs would stay with the launcher through the
    // session (tests/many: 1.18 -> 1.44 MiB per idle session).
    agent_sandbox_sys::memory::one_arena();
    // The project is found from the working directory: a project renamed since the first
    // plan (by a jail that writes its parent) would be planned again under another name,
    // which another `[projects."PATH"]` table, or none, governs (outside look at stop 49,
    // B1). Planned again only where the directory is still named as it was.
    let cwd = std::env::current_dir().ok();
    let same_place = || cwd.is_some() && std::env::current_dir().ok() == cwd;
    once_more_if_changed(|| session_once(opts, profile, what.clone()), same_place)
}

/// The policy of the session's first launch, which a launch planned again must still have
/// (second outside look at stop 49, 1b: a `[projects]` key spelled through a link a jail
/// re-points, with a file replaced to force the second plan, gave it no table: a hidden file
/// shown, the network filtered instead of isolated), as its digest (`policy_digest`).
static FIRST_POLICY: std::sync::Mutex<Option<Option<u64>>> = std::sync::Mutex::new(None);

fn first_policy() -> std::sync::MutexGuard<'static, Option<Option<u64>>> {
    FIRST_POLICY.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a policy says, as one number: a hash of its JSON, written into the hasher as it is
/// made (no copy of the policy or of its text is kept: the freed pages of one stayed with
/// every idle session, tests/many). A launch planned again must have its first's.
fn policy_digest(p: &policy::Policy) -> Option<u64> {
    struct Hashing(std::collections::hash_map::DefaultHasher);
    impl std::io::Write for Hashing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            std::hash::Hasher::write(&mut self.0, buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut h = Hashing(std::collections::hash_map::DefaultHasher::new());
    serde_json::to_writer(&mut h, p).ok()?;
    Some(std::hash::Hasher::finish(&h.0))
}

/// `launch` again, once, when something of the host the plan checked changed before the jail
/// was built (`LaunchError::changed_since_the_plan`): `git config --global` or an editor
/// replacing a file of the home, another session merging its agent's files back, a canary
/// removed. Nothing of the jail ran, and the first launch's records say why it stopped; the
/// new one plans from the host as it is then, with the same checks (a link another session's
/// jail put in is judged as if it had been there first). A second change stops the launch.
fn once_more_if_changed(
    launch: impl Fn() -> Result<i32, LaunchError>,
    same_place: impl Fn() -> bool,
) -> Result<i32, LaunchError> {
    let mask = nix::sys::signal::SigSet::thread_get_mask().ok();
    match launch() {
        Err(e) if e.changed_since_the_plan() && same_place() => {
            eprintln!("agent-sandbox: the host changed while the session was set up; setting it up again ({e})");
            // The signals the first launch held back for its jail: one that came meanwhile
            // (Ctrl-C) acts now, as it would have before the jail.
            if let Some(mask) = mask {
                let _ = mask.thread_set_mask();
            }
            launch()
        }
        result => result,
    }
}

/// One launch of a session (`FIRST_POLICY` holds the digest of the first's policy).
fn session_once(opts: &cli::RunOpts, profile: Option<&str>, what: What) -> Result<i32, LaunchError> {
    let (ctx, ahead) = Context::gathering(opts, true)?;
    // A test holds the launch here, the view being read, before anything of the state
    // directory is made (tests/statedir.rs: a first session's view lacks it).
    crate::test_pause::pause_for_test("reading-ahead");
    let log = AuditLog::new(&ctx.facts.state_dir());
    // The log's files opened for the records to come (a dry run changes nothing, the log's
    // files included).
    let opening = log.clone();
    let beside = (!opts.dry_run)
        .then(|| agent_sandbox_sys::thread::spawn("audit-ahead", 256 << 10, move || opening.open_ahead()).ok())
        .flatten();
    recorded(&log, !opts.dry_run, || {
        let mut launch = Launch::for_session(opts, profile, what, ctx, ahead)?;
        let mut first = first_policy();
        let digest = policy_digest(&launch.policy);
        match *first {
            None => *first = Some(digest),
            Some(d) if d.is_none() || d != digest => {
                return Err(LaunchError::setup(
                    "the host changed while the session was set up, and the policy read again is not the one the \
                     first plan had (a config file, or a path a `[projects]` table names, changed meanwhile): the \
                     launch stops; start it again",
                ));
            }
            Some(_) => {}
        }
        drop(first);
        launch.beside.extend(beside);
        launch.run(&log)
    })
}

/// A job's task on a compute node (`exec --job DIR`), recorded in this node's audit log.
pub fn job(dir: &Path) -> Result<i32, LaunchError> {
    // Every host-side path (config dir, the admin file) comes from this process's own
    // environment and the password database: the job's `--export` set is the jail's
    // environment only, and the jail chose it. The state directory is the one the login
    // node's launcher resolved, which holds the job's directory: this node's environment
    // (Slurm's, without the user's `XDG_STATE_HOME`) may name another.
    agent_sandbox_sys::memory::one_arena();
    // A job's project is the one its spec names and identifies (`ProjectId`), whatever happens.
    once_more_if_changed(|| job_once(dir), || true)
}

fn job_once(dir: &Path) -> Result<i32, LaunchError> {
    let mut facts = host::HostFacts::gather()?;
    // Slurm starts the task in its submission directory, the project's as a rule.
    host::overlap_where(&[&facts.home_canonical, Path::new(".")]);
    let dir = match job_state_dir(dir) {
        // Used where it really is (a site's alias resolved: a bind source through an
        // absolute link would be resolved again inside the jail's staging root).
        Ok(state) => {
            let real = state.join("jobs").join(dir.file_name().unwrap_or_default());
            facts.use_state_dir(state);
            real
        }
        Err(e) => {
            let log = AuditLog::new(&facts.state_dir());
            return recorded(&log, true, || Err(LaunchError::setup(e)));
        }
    };
    let log = AuditLog::new(&facts.state_dir());
    recorded(&log, true, || Launch::for_job(&dir, facts)?.run(&log))
}

/// The state directory a job's directory is in (`STATE/jobs/NAME`), as the chaperon named it
/// in the job's wrapper from the login node's facts: a path with no symlink on the way that
/// the user could have made (a site's alias is followed), a directory of this user's that no
/// one else may write; returned where it really is.
fn job_state_dir(dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let bad = |why: &str| format!("{} is not a job directory of this user: {why}", dir.display());
    let plain = dir.is_absolute()
        && dir.components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
    let jobs = dir.parent().filter(|j| plain && j.file_name().is_some_and(|n| n == "jobs"));
    let Some(state) = jobs.and_then(Path::parent) else {
        return Err(bad("not an absolute path of the form STATE/jobs/NAME"));
    };
    // A node may reach the login node's directory by another path (`/home -> /gpfs/home`, an
    // automount alias): a link on the way is followed where only someone else could have made
    // it, in a directory this user cannot write (the site's). One this user could make or
    // change (a jail of theirs, after the login node checked the path) is refused, as is a
    // directory on the way that is not there.
    let uid = nix::unistd::getuid().as_raw();
    if let Some(link) = own_link_on_way(state, uid, 0).map_err(|e| bad(&e))? {
        return Err(bad(&format!(
            "{} is reached through the symbolic link {}, in a directory you can write",
            state.display(),
            link.display()
        )));
    }
    // `jobs/` is made 0700 by the chaperon; the state directory is the user's, whatever
    // their umask made it.
    for (d, others) in [(state, 0o002), (&state.join("jobs"), 0o022)] {
        // The state directory as reached (its links checked above); `jobs/` itself, no link.
        let m = if d == state { std::fs::metadata(d) } else { std::fs::symlink_metadata(d) };
        let m = m.map_err(|e| bad(&format!("{}: {e}", d.display())))?;
        if !m.is_dir() || m.uid() != uid || m.mode() & others != 0 {
            return Err(bad(&format!("{} is not a directory of yours that only you may write", d.display())));
        }
    }
    // Where it really is, its links (checked above) resolved.
    std::fs::canonicalize(state).map_err(|e| bad(&format!("{}: {e}", state.display())))
}

/// Before a session: the state directory can be made (a link on its way that leads nowhere
/// is named, with the fix), and the record key ring is there and current (`seal::ensure`):
/// made by the launcher, outside every jail, before any jail of the session runs, so that no
/// jail can plant a key of its own; rotated when due. What it did goes to the audit log.
fn state_dir_ready(state: &Path, log: &AuditLog) -> Result<(), LaunchError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let jobs = state.join("jobs");
    let ready = chaperon::seal::ensure(state, now, &|k| chaperon::job::sealed_with(&jobs, k));
    // Why it could not be made, looked for only then (a `stat` of each directory on the way: a
    // round trip each on NFS).
    if let Some((link, to)) = ready.as_ref().err().and_then(|_| host::dangling_link(state)) {
        let to_abs = link.parent().map_or_else(|| to.clone(), |d| d.join(&to));
        return Err(LaunchError::setup(format!(
            "the state directory {} cannot be made: {} is a symbolic link to {}, which does not exist (a scratch \
             purge?); fix: make it again (mkdir -p {}), or point XDG_STATE_HOME at a directory of yours",
            state.display(),
            link.display(),
            to.display(),
            to_abs.display()
        )));
    }
    match ready {
        Ok(Some(did)) => {
            let mut r = log.record("record_key");
            r.reason = Some(did);
            log.write(&r);
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(LaunchError::setup(e)),
    }
}

/// The first symbolic link on the way to the absolute path `p` (and to where each link leads)
/// that `uid` could have made or changed: one in a directory `uid` owns or others may write.
fn own_link_on_way(p: &Path, uid: u32, depth: u32) -> Result<Option<PathBuf>, String> {
    use std::os::unix::fs::MetadataExt;
    if depth > 40 {
        return Err(format!("{}: too many levels of symbolic links", p.display()));
    }
    let mut on_way: Vec<&Path> = p.ancestors().collect();
    on_way.reverse();
    for d in on_way.into_iter().skip(1) {
        let m = std::fs::symlink_metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if !m.file_type().is_symlink() {
            continue;
        }
        let parent = d.parent().unwrap_or(Path::new("/"));
        let pm = std::fs::metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        if pm.uid() == uid || pm.mode() & 0o022 != 0 {
            return Ok(Some(d.to_path_buf()));
        }
        let to = std::fs::read_link(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if let Some(link) = own_link_on_way(&parent.join(to), uid, depth + 1)? {
            return Ok(Some(link));
        }
    }
    Ok(None)
}

/// Whether the plan's anchor of a job's project is the directory the job was submitted from.
fn job_project_held(id: &chaperon::identity::ProjectId, plan: &Plan) -> Result<(), String> {
    let Some(a) = plan.anchors.iter().find(|a| a.path == plan.project) else {
        return Err(format!("the job's project {} was not found as the launch checked it", plan.project.display()));
    };
    let seen = chaperon::identity::ProjectId::here(a.dev, a.ino);
    if !id.is(&seen) || a.real != plan.project {
        return Err(format!(
            "the job's project {} is no longer the directory it was submitted from (inode {}, now inode {}): it was \
             replaced while the job started; the job does not run elsewhere",
            plan.project.display(),
            id.ino,
            a.ino
        ));
    }
    Ok(())
}

fn recorded(
    log: &AuditLog,
    record: bool,
    launch: impl FnOnce() -> Result<i32, LaunchError>,
) -> Result<i32, LaunchError> {
    let result = launch();
    if let (Err(e), true) = (&result, record) {
        let mut r = log.record("refused");
        r.reason = Some(e.to_string());
        log.write(&r);
    }
    if let Err(e) = &result {
        crate::status::refused(&log.session, 126, &e.to_string());
    }
    result
}

impl Launch {
    /// A session on the login node: the policy from its layers, the command asked for.
    pub fn for_session(
        opts: &cli::RunOpts,
        profile: Option<&str>,
        what: What,
        ctx: Context,
        ahead: plan::ahead::ReadAhead,
    ) -> Result<Launch, LaunchError> {
        // The project checks that need no policy come first: a bad project is reported as such.
        let project = plan::check_project_basics(&ctx.facts, &host::RealFs::default(), &ctx.project)?;
        let policy = ctx.policy(opts, profile, Some(&project))?;
        let command = match what {
            What::Command(c) => c,
            What::Agent(args) => {
                let base = policy.agent.as_ref().and_then(|a| a.value.command.clone()).unwrap_or_default();
                if base.is_empty() {
                    return Err(LaunchError::setup(format!("profile `{}` names no command", profile.unwrap_or("?"))));
                }
                base.into_iter().chain(args).collect()
            }
            What::Shell => vec![ctx.facts.shell.display().to_string()],
        };
        Ok(Launch {
            facts: ctx.facts,
            policy,
            project: ctx.project,
            cwd: ctx.cwd,
            command,
            extra_files: vec![],
            env: None,
            origin: Origin::Session { dry_run: opts.dry_run, json: opts.json, quiet: opts.quiet },
            ahead,
            beside: vec![],
        })
    }

    /// A job's task on a compute node (`exec --job DIR`): the submitting session's jail,
    /// rebuilt from the policy frozen in DIR (bounded again by this node's admin file), not
    /// from the configs, the environment or anything the jail could have written since.
    pub fn for_job(dir: &Path, facts: host::HostFacts) -> Result<Launch, LaunchError> {
        use chaperon::job::{expand_pattern, open_job};
        // Nothing of the directory is used before its spec's seal checks under the user's key.
        let key = chaperon::seal::Key::load(&facts.state_dir()).map_err(|e| LaunchError::setup(e.to_string()))?;
        let job = open_job(&facts.state_dir().join("jobs"), dir, &key).map_err(LaunchError::setup)?;
        let spec = job.spec.clone();
        let frozen = policy::Frozen::from_text(&spec.policy);
        let xdg = facts.env_var("XDG_CONFIG_HOME").map(PathBuf::from);
        // The built-in floors and this node's admin file bound it, whatever it says.
        let mut policy = policy::bound_by_admin(
            policy::with_builtin_floors(frozen.thaw()?)?,
            &policy::PolicyPaths::new(&facts.home, xdg.as_deref()),
        )?;
        // A job reaches its session's job ports (frozen with the policy); it serves none.
        policy.net_job_ports.value.clear();
        // What Slurm tells the job on this node (SLURM_JOB_ID, the node list...), for the
        // job's environment and the patterns in its file names.
        let node: Vec<(String, String)> = facts.env.clone();
        let var = |k: &str| node.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let env = spec.environment(&node);
        let expand = |p: &str| expand_pattern(p, &var, &facts.user, &spec.job_name);
        let script_inside = format!("{}/job-script", stub::STUB_DIR);
        let tasks = var("SLURM_STEP_NUM_TASKS").or_else(|| var("SLURM_NTASKS"));
        let shared = tasks.is_some_and(|n| n.trim() != "1");
        let command = chaperon::job::job_command(&spec, &expand, shared, &script_inside);
        // A batch job's script reaches the jail as the bytes read through the descriptor
        // opened without following a symlink, whatever the directory holds by the mount.
        let extra_files = match &spec.command {
            Some(argv) if !argv.is_empty() => vec![],
            _ => vec![(PathBuf::from(&script_inside), job.script)],
        };
        let job_id = var("SLURM_JOB_ID").and_then(|j| j.parse().ok());
        // The plan's view of the project read while the task's session is readied.
        let ahead = plan::ahead::ReadAhead::start_in(
            &facts.home,
            &facts.home_canonical,
            facts.env_var("XDG_CONFIG_HOME"),
            &spec.project,
            session_records(facts.state_dir(), facts.home_canonical.clone()),
        );
        Ok(Launch {
            facts,
            policy,
            project: spec.project.clone(),
            cwd: spec.cwd.clone(),
            command,
            extra_files,
            env: Some(env),
            origin: Origin::Job { job: job_id, session: spec.session.clone(), frozen, project_id: spec.project_id },
            ahead,
            beside: vec![],
        })
    }

    /// Runs the launch, its records in `log`: the prelude, what the session holds, the plan,
    /// the start's records, the jail, the end's records.
    pub fn run(self, log: &AuditLog) -> Result<i32, LaunchError> {
        let Launch { mut facts, policy, project, cwd, command, extra_files, env, origin, ahead, beside } = self;
        // One view of the host for the checks and the plan: the project resolved once (a round
        // trip a step on NFS).
        let fs = host::RealFs::default();
        let (project_dir, pre) = prelude(&facts, &fs, &project, &policy, &origin, log)?;
        // A job's task (a session id of its own in the log) spends its submitting session's
        // share of the log: an array of tasks cannot multiply it (issue 33, red team F5).
        let charged = log.charged_to(&pre.session);
        let log = &charged;
        // The session's door to its chaperon exists before the plan binds it into the jail
        // (the chaperon itself starts when the first Slurm command knocks), and so do the
        // project lock, the session network's address and the job ports. Meanwhile the mail
        // programs are found (cached in the state directory; Slurm's commands are covered in
        // every session).
        // And, for a session, the state directory is made ready (the record key ring), before
        // any jail of the session runs.
        let state = facts.state_dir();
        let ready = || match (&origin, pre.dry_run) {
            (Origin::Session { .. }, false) => state_dir_ready(&state, log),
            _ => Ok(()),
        };
        let aside = || host::together(ready, || host::existing_mailers(&state));
        let ((ready, mailers), held) =
            host::together(aside, || Held::take(&pre, &log.session, &policy, &facts, &origin, &project_dir));
        facts.mailers = mailers;
        ready?;
        let held = held.map_err(LaunchError::setup)?;

        let req = held.request(&pre, &policy, session::Command { command, project, cwd, extra_files, env });
        timing::mark("policy");
        // No other thread of the launcher may run when PID 1 is cloned: the clone copies the
        // locks such a thread holds (malloc's among them) with no one to release them. The
        // view read ahead is waited for first; it serves the plan if it read this project,
        // and no session's record of placeholders changed since it was read (taking the locks
        // empties an earlier session's once it removed what it names: `plan::ahead::Watch`).
        let view = ahead.view_of(&project_dir, host::HostFs::identity(&fs, &project_dir));
        // What the launch made since it was read (the state directory on a user's first
        // session, the sockets' directory) is there: a path the plan must hide is never taken
        // for absent (outside look at stop 47, F1: `--rw ~/.local` showed the state directory).
        if let Some(v) = &view {
            for made in [facts.state_dir(), host::state_dir_as_named(&facts.env, &facts.home), facts.sockets_dir()] {
                v.made_since(&made);
            }
        }
        for t in beside {
            let _ = t.join();
        }
        // The jail's PID 1 makes its namespaces, network and staging root while the plan is
        // made (`jail::userns::Early`). A clone that fails here is tried again once the plan
        // exists, which then reports what is wrong in its own words first.
        let early = match (pre.dry_run, plan::jail_shape(&pre.choices, &req)) {
            (false, Some((net, tun, groups))) => {
                jail::userns::Early::clone(jail::userns::shape(net, tun), facts.uid, facts.gid, groups).ok()
            }
            _ => None,
        };
        // The view read ahead serves the plan if it read this project, and the locks taken
        // removed nothing it may have seen.
        let fs = view.unwrap_or(fs);
        let plan = planned(&policy, &mut facts, fs, &req, &project_dir, &pre, &origin)?;
        let session::Planned { held, peer_claim } = held.planned(&plan);
        let Held { jobs, lock, door, door_file: _door_file, .. } = held;
        let (Some(door), Some(mut lock)) = (door, lock) else {
            // A dry run: the plan, and nothing else.
            match matches!(origin, Origin::Session { json: true, .. }) {
                true => println!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default()),
                false => print!("{}", show::plan(&plan)),
            }
            return Ok(0);
        };
        for w in &plan.warnings {
            eprintln!("agent-sandbox: warning: {w}");
        }
        // The start's record, written while PID 1 builds the root (`jail::Moments`).
        let events = Started::events(&origin);
        let started = std::cell::OnceCell::new();
        let record_start = || {
            started.get_or_init(|| Started::record(&plan, events, &facts, log));
        };
        // `agent-sandbox allow` reaches a session with a supervisor through this socket.
        let control =
            plan.net.matcher.is_some().then(|| crate::net::control::socket_path(&facts.sockets_dir(), &log.session));
        session::order_after_exit(&mut lock, &door, &peer_claim, &origin, facts.state_dir(), control.as_deref());
        let (peers, announce) = session::session_network(peer_claim, &plan, &policy, &facts, &origin);
        let quiet = !matches!(origin, Origin::Session { quiet: false, .. });
        let banner = || {
            if !quiet {
                eprintln!("{}", show::banner(&plan));
            }
        };
        // The chaperon freezes the policy into every job it submits: the job's own frozen
        // policy on a node, the session's (frozen only when Slurm is first used) on the login node.
        let frozen = match origin {
            Origin::Job { frozen, .. } => Some(frozen),
            Origin::Session { .. } => None,
        };
        let mut session = slurm::Session::new(&facts, &req.session, &plan.project, frozen);
        session.who.governor = plan.slurm;
        session.withheld = plan.net.credentials.iter().flat_map(|r| r.keys.iter().map(|k| k.env.clone())).collect();
        let net = session::SessionNet { control, jobs, peers, announce };
        let slurm = SlurmSide { door: &door, session, policy: &policy };
        let moments = jail::Moments { building: &record_start, ready: &banner };
        // A jail that could not be built leaves the start's record and the refusal's, as
        // when the start was recorded before it (the refusal: `recorded`).
        let outcome = run_jail(&plan, early, &moments, lock, slurm, net, log).inspect_err(|_| record_start())?;
        let started = started.into_inner().unwrap_or_else(|| Started::record(&plan, events, &facts, log));
        Ok(started.finish(outcome, &plan, log))
    }
}

/// The launch's first stage: the project's checks (a job's project must be the directory its
/// session ran in), the state directory made ready for a session, and what every later stage
/// reads: dry run or not, the session's id, the backend's kind of door.
fn prelude(
    facts: &host::HostFacts,
    fs: &host::RealFs,
    project: &Path,
    policy: &policy::Policy,
    origin: &Origin,
    log: &AuditLog,
) -> Result<(PathBuf, Prelude), LaunchError> {
    let project_dir = plan::check_project_basics(facts, fs, project)?;
    // A job runs in the directory its session ran in, or not at all: the project's path may
    // name another directory by now (renamed, or a symlink put in its place). The directory
    // it resolves to here is compared, not the path: a node may reach the same directory by
    // another path (a home mounted where the login node has a symlink).
    if let Origin::Job { project_id, .. } = origin {
        project_id.check(&project_dir).map_err(LaunchError::setup)?;
    }
    crate::test_pause::pause_for_test("checked");
    let (dry_run, session) = match origin {
        Origin::Session { dry_run, .. } => (*dry_run, log.session.clone()),
        Origin::Job { session, .. } => (false, session.clone()),
    };
    let choices = plan::choose(policy, facts);
    Ok((project_dir, Prelude { dry_run, session, choices }))
}

/// The plan, from one listing each of the home and the project, and what the launch stops
/// holding once it exists: the host view's cache, the user's configs as read.
fn planned(
    policy: &policy::Policy,
    facts: &mut host::HostFacts,
    fs: host::RealFs,
    req: &RunRequest,
    project_dir: &Path,
    pre: &Prelude,
    origin: &Origin,
) -> Result<Plan, LaunchError> {
    // The plan's questions about names in the home and the project are answered from one
    // listing of each, read now: after the session lock, whose taking may have removed an
    // earlier session's placeholders there. `~/.config` too: a dozen tools' credential
    // directories are asked about there (`gh`, `gcloud`, `rclone`...), most absent.
    let config = facts.home_canonical.join(".config");
    for dir in [&facts.home_canonical, &facts.home, project_dir, &config] {
        fs.list(dir);
    }
    let plan = plan::build_with(&pre.choices, policy, facts, &fs, req)?;
    // The plan's cache of every answer about the host (listings, kinds, canonical paths) is
    // not asked again: freed now, not held through the session (issue 35: about 40 KiB of
    // every idle session's launcher).
    drop(fs);
    // The token configs the plan stripped, where they really are, for the next sessions (a
    // session may remove the name that led to one: U8-2), when that changed.
    if !pre.dry_run {
        host::configs::write_stripped_record(
            &facts.state_dir(),
            &facts.user_configs.stripped_before,
            &plan.stripped_configs,
        );
    }
    // So are the user's git and ssh configs as read (the plan made its copies from them).
    facts.user_configs = Default::default();
    timing::mark("plan");
    // The project the jail binds is held to what the plan found (`plan::anchor`); for a job,
    // that must be the directory whose identity was checked above, not one put in its place
    // between that check and the plan's look (outside review F5).
    if let Origin::Job { project_id, .. } = origin {
        job_project_held(project_id, &plan).map_err(LaunchError::setup)?;
    }
    crate::test_pause::pause_for_test("planned");
    tracing::info!(
        backend = plan.backend.as_str(),
        net = plan.net.effective.as_str(),
        mounts = plan.mounts.len(),
        hidden = plan.hidden.len(),
        env = plan.env.len(),
        "plan ready (see --dry-run for the full plan)"
    );
    Ok(plan)
}

/// The records of a started session or job's task, kept for its end's.
struct Started {
    end_event: &'static str,
    job: Option<u32>,
    /// A job's project's events, marked at its start and end.
    events: Option<PathBuf>,
    /// The audit log's length at the start: the session's denials are counted after it.
    log_start: Option<u64>,
    began: std::time::Instant,
}

impl Started {
    /// The start's and the end's events, and the job's id (a job's task).
    fn events(origin: &Origin) -> (&'static str, &'static str, Option<u32>) {
        match origin {
            Origin::Session { .. } => ("session_start", "session_end", None),
            Origin::Job { job, .. } => ("job_start", "job_end", *job),
        }
    }

    /// The start's audit record and status line.
    fn record(
        plan: &Plan,
        events: (&'static str, &'static str, Option<u32>),
        facts: &host::HostFacts,
        log: &AuditLog,
    ) -> Started {
        let (start_event, end_event, job) = events;
        let log_start = crate::status::enabled().then(|| std::fs::metadata(log.path()).map(|m| m.len()).unwrap_or(0));
        let mut start = log.record(start_event);
        start.project = Some(plan.project.display().to_string());
        start.program = plan.command.first().map(|c| c.rsplit('/').next().unwrap_or(c).to_string());
        start.backend = Some(plan.backend.as_str().into());
        start.net = Some(plan.net.effective.as_str().into());
        start.warnings = plan.warnings.clone();
        start.job = job;
        log.write(&start);
        // A job's task starting and ending on a node: the governors of the project's sessions
        // reuse no answer from before (through the shared state directory, where there is one).
        let events = job.map(|_| chaperon::scope::Registry::new(&facts.state_dir()).events(&plan.project));
        if let Some(e) = &events {
            chaperon::governor::mark(e);
        }
        crate::status::started(
            &log.session,
            &plan.project.display().to_string(),
            plan.net.effective.as_str(),
            plan.backend.as_str(),
            "none",
        );
        Started { end_event, job, events, log_start, began: std::time::Instant::now() }
    }

    /// The end's audit record and status line; the exit status the launcher returns.
    fn finish(self, outcome: jail::Outcome, plan: &Plan, log: &AuditLog) -> i32 {
        let mut end = log.record(self.end_event);
        match outcome {
            jail::Outcome::Exited(c) => end.exit = Some(c),
            jail::Outcome::Signaled(s) => end.signal = Some(s),
        }
        let timed_out = jail::limits::timed_out();
        if timed_out {
            let secs = plan.limits.timeout.unwrap_or(0);
            eprintln!("agent-sandbox: the session reached its time limit ({secs} s, limits.timeout / --timeout) and was ended");
            end.reason = Some(format!("time limit of {secs} s reached"));
            (end.exit, end.signal) = (Some(EXIT_TIMEOUT), None);
        }
        end.job = self.job;
        if let Some(e) = &self.events {
            chaperon::governor::mark(e);
        }
        end.duration_ms = Some(self.began.elapsed().as_millis() as u64);
        log.write(&end);
        if let Some(from) = self.log_start {
            let denials = crate::status::count_denials(log.path(), from, &log.session);
            crate::status::ended(&log.session, end.exit, end.signal, denials, end.duration_ms.unwrap_or(0));
        }
        crate::net::supervisor::defer_teardown();
        if timed_out {
            EXIT_TIMEOUT
        } else {
            outcome.code()
        }
    }
}

/// The session's door to its chaperon, what the chaperon is started with, and the policy it
/// freezes into the session's jobs.
struct SlurmSide<'a> {
    door: &'a slurm::Chaperon,
    session: slurm::Session,
    policy: &'a policy::Policy,
}

/// Runs the jail with its network supervisor; the chaperon starts when the first Slurm
/// command connects (and again if it ends), freezing the policy then if the session had none
/// frozen yet.
fn run_jail(
    plan: &Plan,
    early: Option<jail::userns::Early>,
    moments: &jail::Moments<'_>,
    lock: jail::placeholders::ProjectLock,
    slurm: SlurmSide,
    net: session::SessionNet,
    log: &AuditLog,
) -> Result<jail::Outcome, jail::JailError> {
    let SlurmSide { door, mut session, policy } = slurm;
    let session::SessionNet { control, jobs, peers, mut announce } = net;
    // The session's jobs may reach its job ports and its jail: the listeners' addresses (on
    // the host, whatever the jail calls them) and the secret the jobs prove travel with the
    // policy.
    let services: Vec<std::net::SocketAddr> =
        jobs.as_ref().map(|j| j.endpoints().into_iter().map(|(_, a)| a).collect()).unwrap_or_default();
    let secret = plan.net.job_secret.clone();
    let mut start = |fd: std::os::fd::BorrowedFd<'_>| {
        // The session's jail says where its jobs reach it, now that it may have some.
        crate::timing::mark("first slurm call");
        // Its jobs write its share of the audit log from other nodes from now on.
        log.shared_with_other_nodes();
        if let Some(a) = announce.take() {
            let r = a.run();
            crate::timing::mark("announced");
            if let Err(why) = r {
                eprintln!(
                    "agent-sandbox: warning: the session network does not know this host's address ({why}); \
                     the session's jobs cannot reach its jail"
                );
            }
        }
        if session.who.policy.is_none() {
            match policy::Frozen::freeze_with(policy, &services, secret.as_ref()) {
                Ok(f) => session.who.policy = Some(f.text().to_string()),
                Err(e) => {
                    eprintln!("agent-sandbox: warning: {e}; Slurm is unavailable in this session");
                    return None;
                }
            }
        }
        crate::timing::mark("frozen");
        let d = door.spawn(fd, &session);
        crate::timing::mark("chaperon spawned");
        d
    };
    let lazy = door.take_door().map(|fd| jail::door::Lazy::new(fd, &mut start, door.take_jail_end()));
    let (mut jobs, mut peers) = (jobs, peers);
    let mut net_start =
        |fds| crate::net::start(&plan.net, fds, Some(log.clone()), control.clone(), jobs.take(), peers.take());
    jail::run(plan, early, moments, lock, &mut net_start, lazy, log)
}

#[cfg(test)]
mod tests {
    use super::job_state_dir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_jobs_state_directory_is_the_real_one_its_directory_is_in_and_only_the_users() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let state = root.join("state/agent-sandbox");
        std::fs::create_dir_all(state.join("jobs/s-1-0")).unwrap();
        std::fs::set_permissions(state.join("jobs"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let job = state.join("jobs/s-1-0");
        assert_eq!(job_state_dir(&job).unwrap(), state);
        // Not of the form STATE/jobs/NAME, or with `..`: refused.
        for bad in [state.join("s-1-0"), state.join("jobs/../jobs/s-1-0"), "jobs/s-1-0".into()] {
            assert!(job_state_dir(&bad).is_err(), "{}", bad.display());
        }
        // Reached through a link: refused (what is checked is what is used).
        std::os::unix::fs::symlink(root.join("state"), root.join("link")).unwrap();
        let e = job_state_dir(&root.join("link/agent-sandbox/jobs/s-1-0")).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        // A `jobs/` others may write: refused.
        std::fs::set_permissions(state.join("jobs"), std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = job_state_dir(&job).unwrap_err();
        assert!(e.contains("only you may write"), "{e}");
    }

    /// A node that reaches the state directory by another path than the login node (a site's
    /// alias, `/home -> /gpfs/home`) runs the job: a link in a directory the user cannot
    /// write is followed, one in a directory the user owns, or others may write, is not,
    /// wherever it is on the way (outside review of the state directory, F7).
    #[test]
    fn a_link_on_the_way_counts_only_where_the_user_could_not_have_made_it() {
        use super::own_link_on_way;
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        std::fs::create_dir_all(root.join("gpfs/home/u/state")).unwrap();
        std::fs::create_dir_all(root.join("site")).unwrap();
        std::fs::set_permissions(root.join("site"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(root.join("gpfs/home"), root.join("site/home")).unwrap();
        std::os::unix::fs::symlink("../gpfs", root.join("site/rel")).unwrap();
        let me = nix::unistd::getuid().as_raw();
        // Another user's view of these directories: the site's, which `me` cannot write.
        let other = me.wrapping_add(4242);
        for (p, link) in [("site/home/u/state", "site/home"), ("site/rel/home/u/state", "site/rel")] {
            assert_eq!(own_link_on_way(&root.join(p), other, 0).unwrap(), None, "{p}");
            assert_eq!(own_link_on_way(&root.join(p), me, 0).unwrap(), Some(root.join(link)), "{p}");
        }
        // A directory others may write, though not the user's: its link is refused too.
        std::fs::set_permissions(root.join("site"), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(own_link_on_way(&root.join("site/home/u/state"), other, 0).unwrap(), Some(root.join("site/home")));
        // A link of the user's further on the way (in the site link's target), by its name on
        // the way.
        std::fs::set_permissions(root.join("site"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(root.join("gpfs/home/u"), root.join("gpfs/home/v")).unwrap();
        std::fs::set_permissions(root.join("gpfs/home"), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(own_link_on_way(&root.join("site/home/v/state"), other, 0).unwrap(), Some(root.join("site/home/v")));
        assert!(own_link_on_way(&root.join("site/home/none/state"), other, 0).is_err(), "not there");
    }

    /// A launch stopped by a change since its plan is made once more, and only once: a second
    /// change stops it, with its own error; any other error is not tried again.
    #[test]
    fn a_launch_is_planned_again_once_after_a_change_and_only_then() {
        use super::{jail::JailError, once_more_if_changed, LaunchError};
        let changed = |n: usize| Err(LaunchError::Jail(JailError::Changed(format!("change {n}"))));
        // The answer and the number of launches, the n-th launch answering `answer(n)`.
        let run = |answer: &dyn Fn(usize) -> Result<i32, LaunchError>, same_place: bool| {
            let tries = std::cell::Cell::new(0);
            let r = once_more_if_changed(
                || {
                    tries.set(tries.get() + 1);
                    answer(tries.get())
                },
                || same_place,
            );
            (r, tries.get())
        };
        let (r, tries) = run(&|n| if n == 1 { changed(1) } else { Ok(7) }, true);
        assert_eq!((r.ok(), tries), (Some(7), 2));
        let (r, tries) = run(&changed, true);
        assert_eq!(tries, 2);
        assert!(r.unwrap_err().to_string().contains("change 2"));
        let (r, tries) = run(&|_| Err(LaunchError::Jail(JailError::Build("no".into()))), true);
        assert_eq!(tries, 1);
        assert!(!r.unwrap_err().changed_since_the_plan());
        // The project renamed meanwhile (the working directory is named otherwise): not again.
        let (r, tries) = run(&changed, false);
        assert_eq!(tries, 1);
        assert!(r.unwrap_err().to_string().contains("change 1"));
    }
}
