//! Slurm from inside the jail, against the real test cluster (tests/cluster: munge, slurmctld,
//! slurmd, slurmdbd from Debian's packages; `tests/run.sh` starts it). Jobs are submitted
//! through the stubs and the chaperon, run on the node inside the re-entered jail, and are
//! checked from their output in the project.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Job ids of the test user that exist in the controller now.
fn queue_ids() -> Vec<u32> {
    queue_ids_in(None)
}

/// The same, limited to jobs whose working directory is `dir` (tests run concurrently).
fn queue_ids_in(dir: Option<&Path>) -> Vec<u32> {
    let out = Command::new("squeue").args(["-h", "-u", USER, "-o", "%A %Z"]).output().expect("squeue");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, wd)| dir.is_none_or(|d| Path::new(wd.trim()) == d))
        .filter_map(|(id, _)| id.trim().parse().ok())
        .collect()
}

/// The job id a script in the jail printed after `key` (`echo mine=$id`).
fn printed_job_id(out: &Out, key: &str) -> u32 {
    let id = out.stdout.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().parse().ok());
    id.unwrap_or_else(|| panic!("no job id: {out}"))
}

/// What every job prints about where it runs.
const PROBE: &str = "echo host=$(hostname); echo pwd=$(pwd); echo submit=$SLURM_SUBMIT_DIR; test -e ~/.ssh/id_ed25519 && echo SSH-VISIBLE; \
                     test -e /etc/munge && echo MUNGE-VISIBLE; test -S /run/munge/munge.socket.2 && echo MUNGE-SOCKET; \
                     echo job=$SLURM_JOB_ID; echo done";

#[test]
fn the_installed_stub_is_static_and_serves_slurm_calls_in_the_jail() {
    // As sites install it (tests/run.sh builds it so): the release launcher with the static
    // stub next to it, which the jail runs as every Slurm command.
    let Some(j) = slurm_jail("slurm-static-stub") else { return };
    let release = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release");
    let stub = release.join("agent-sandbox-stub");
    let headers = std::process::Command::new("readelf").arg("-lW").arg(&stub).output().unwrap();
    let headers = String::from_utf8_lossy(&headers.stdout);
    assert!(headers.contains("LOAD"), "{} is missing or no ELF (tests/run.sh builds it)", stub.display());
    assert!(!headers.contains("INTERP"), "the stub asks for a dynamic loader: {headers}");
    assert!(headers.contains("DYN"), "the stub is not position-independent (no ASLR): {headers}");
    let mut c = j.as_user(release.join("agent-sandbox"));
    // Its arguments reach the chaperon (`-o` shapes the answer), and one that is no text is
    // refused by the stub itself: its entry point reads them (under musl, std never does).
    let script = "echo size=$(stat -L -c %s \"$(command -v squeue)\"); squeue -o 'asked=%i'; echo rc=$?; \
                  squeue \"$(printf 'x\\377')\"; echo bad=$?";
    c.args(j.launcher_args(&["-q", "run", "--", "sh", "-c", script]));
    let out = c.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("asked=JOBID\nrc=0\n"), "{stdout}{stderr}");
    assert!(
        stdout.contains("bad=1") && stderr.contains("squeue: error: argument 1 is not valid UTF-8"),
        "{stdout}{stderr}"
    );
    let size = std::fs::metadata(&stub).unwrap().len();
    assert!(stdout.contains(&format!("size={size}\n")), "squeue in the jail is not the stub ({size} bytes): {stdout}");
}

#[test]
fn a_stub_started_with_its_standard_descriptors_closed_keeps_its_connection_apart() {
    // The stub's entry point is C's `main`: unless it opens /dev/null on a closed 0-2 itself,
    // its connection to the chaperon takes that number and is handed over as the command's
    // stdin, stdout or stderr. Then a refusal written to a closed stderr aborted the stub
    // (status 134), a call with stdout and stderr closed could not pass them (status 1, no
    // job), and a killed caller whose stdin was closed left its command running: the command
    // held the connection open.
    let Some(j) = slurm_jail("slurm-closed-stdio") else { return };
    let out = j.run(
        "squeue --bogus 2>&-; echo bogus=$?; \
         (sbatch --parsable --hold -J closed-stdio --wrap true >&- 2>&-); echo sb=$?; \
         squeue -h -o 'job=%j' -n closed-stdio; scancel -n closed-stdio",
    );
    assert!(out.stdout.contains("bogus=1\n"), "a refusal to a closed stderr is status 1: {out}");
    assert!(out.stdout.contains("sb=0\n") && out.stdout.contains("job=closed-stdio"), "submitted: {out}");
    // A caller with its stdin closed, killed while its `sbatch --wait` waits: the real sbatch
    // must end with it, long before the session does (which would end it anyway). Looked for
    // on the host while the session still runs; the job's name is put together inside the
    // jail, so that only the real sbatch's arguments hold it whole.
    let script = "n=closed; sbatch --wait --hold -J \"$n-wait\" --wrap true <&- & p=$!; sleep 2; kill -9 $p; \
                  wait $p; echo killed=$?; sleep 4; scancel -n \"$n-wait\"";
    let mut session = j.command(&["-q", "run", "--", "sh", "-c", script]);
    let session = session.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let session = session.spawn().expect("the session");
    let running = |pattern: &str| {
        let o = Command::new("pgrep").args(["-f", pattern]).output().expect("pgrep");
        !String::from_utf8_lossy(&o.stdout).trim().is_empty()
    };
    let started = Instant::now();
    let mut seen = false;
    while started.elapsed() < Duration::from_secs(2) && !seen {
        seen = running("closed-wait");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(seen, "the real sbatch --wait never ran");
    std::thread::sleep(Duration::from_millis(3500));
    let left = running("closed-wait");
    let out = session.wait_with_output().expect("the session ends");
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(all.contains("killed=137"), "{all}");
    assert!(!left, "the killed caller's sbatch --wait outlived it by 1.5 s: {all}");
}

#[test]
fn a_job_the_controller_forgot_leaves_squeue_answering_as_without_it() {
    // A project's record keeps its jobs after slurmctld forgot them (MinJobAge after their
    // end). Given one job id, squeue asks for that job alone and fails once it is forgotten
    // ("Invalid job id specified"); the jail's squeue, whose scope is that one job, answers
    // as squeue without -j does: nothing, status 0. (67000000: within Slurm's range, never
    // reached by the test cluster.)
    let Some(j) = slurm_jail("slurm-forgotten-job") else { return };
    let out = j.run("true");
    assert_eq!(out.code, 0, "{out}");
    let state = j.rig.home.join(".local/state/agent-sandbox");
    let entry = chaperon::scope::Entry {
        job: 67_000_000,
        session: "gone".into(),
        project: j.project.clone(),
        cluster: None,
        dir: None,
    };
    let key = std::sync::Arc::new(user_record_key(j.rig));
    chaperon::scope::Registry::with_key(&state, key).add(&entry).expect("record the job");
    let scope = state.join(chaperon::scope::DIR);
    for f in std::iter::once(scope.clone()).chain(std::fs::read_dir(&scope).unwrap().flatten().map(|e| e.path())) {
        std::os::unix::fs::chown(&f, Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    }
    let out = j.run("squeue -h; echo rc=$?; squeue -j 67000000 >/dev/null 2>&1; echo named=$?");
    assert!(out.stdout.starts_with("rc=0\n") && !out.stderr.contains("Invalid job id"), "{out}");
    assert!(out.stdout.contains("named=1"), "named, the job is answered as squeue -j answers it: {out}");
}

#[test]
fn sbatch_wrap_file_and_stdin_jobs_run_inside_the_jail_on_the_node() {
    let Some(j) = slurm_jail("slurm-submit") else { return };
    let script = format!("#!/bin/sh\n#SBATCH --job-name=probe-file\n#SBATCH -o file-%j.out\n{PROBE}\n");
    let j = j
        .project_file("job.sh", &script)
        .project_file("stdin.sh", &format!("#!/bin/sh\n#SBATCH --output=stdin-%x.out\n{PROBE}\n"));
    let out = j.run(&format!(
        "sbatch --wait -o wrap-%j.out --wrap '{PROBE}'; sbatch --wait job.sh; sbatch --wait < stdin.sh; echo rc=$?"
    ));
    assert!(out.stdout.contains("rc=0"), "{out}");
    assert_eq!(out.stdout.matches("Submitted batch job ").count(), 3, "{out}");
    let mut found = 0;
    for entry in std::fs::read_dir(&j.project).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".out") {
            continue;
        }
        found += 1;
        let text = wait_for_text(&entry.path(), "done");
        assert!(text.contains("host=agent-sandbox"), "{name} did not run in the jail: {text}");
        assert!(text.contains(&format!("pwd={}", j.project.display())), "{name}: {text}");
        // Where sbatch was called, as Slurm tells a job: not the job directory the real
        // sbatch runs in, which the job's jail does not show.
        assert!(text.contains(&format!("submit={}\n", j.project.display())), "{name}: {text}");
        assert!(!text.contains("SSH-VISIBLE") && !text.contains("MUNGE"), "{name}: {text}");
        assert!(text.contains("job=") && !text.contains("job=\n"), "{name} sees its job id: {text}");
    }
    assert_eq!(found, 3, "wrap-N.out, file-N.out, stdin-sbatch.out in the project");
    assert!(j.project.join("stdin-sbatch.out").exists(), "a script from stdin is named `sbatch` (%x), as in Slurm");
}

#[test]
fn a_job_directory_that_cannot_be_written_submits_nothing() {
    // The real sbatch starts while the chaperon writes the job's directory, and gets its
    // script only once the directory is whole: one that cannot be made leaves no job.
    use std::os::unix::fs::PermissionsExt;
    let Some(j) = slurm_jail("slurm-no-job-dir") else { return };
    let state = j.project.with_file_name("slurm-no-job-dir-state");
    let jobs = state.join("agent-sandbox/jobs");
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&jobs).unwrap();
    j.give(&[&state, &state.join("agent-sandbox"), &jobs]);
    std::fs::set_permissions(state.join("agent-sandbox"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(0o500)).unwrap();
    let name = format!("no-job-dir-{}", std::process::id());
    let script = format!("sbatch --parsable -J {name} --wrap true; echo rc=$?");
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", &script]);
    let out = j.output(c.env("XDG_STATE_HOME", &state));
    std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(0o700)).unwrap();
    let listed = Command::new("squeue").args(["-h", "-t", "all", "-o", "%i", "-n", &name]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let _ = Command::new("scancel").args(["-n", &name]).status();
    let _ = std::fs::remove_dir_all(&state);
    assert!(out.stdout.contains("rc=1") && out.stderr.contains("Permission denied"), "{out}");
    assert!(listed.trim().is_empty(), "a job was submitted without its directory: {listed}");
}

#[test]
fn jobs_the_controller_forgot_leave_squeues_list_and_held_ones_stay() {
    // A project's record keeps every job it submitted; squeue is given those the controller
    // may still hold. Once the list is long, the chaperon asks the controller which it holds
    // and marks the rest gone (here: ids that never existed, as a job MinJobAge after its end).
    let Some(j) = slurm_jail("slurm-forgotten") else { return };
    let name = format!("forgotten-{}", std::process::id());
    let out = j.run(&format!("sbatch --hold --parsable -J {name} --wrap true"));
    let held: u32 = out.stdout.trim().parse().unwrap_or_else(|_| panic!("no job id: {out}"));
    let scope_dir = j.rig.home.join(".local/state/agent-sandbox/scope");
    let needle = format!("\"project\":{}", serde_json::to_string(&j.project).unwrap());
    let record = std::fs::read_dir(&scope_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains(&needle)))
        .expect("the project's scope record");
    // The record of an earlier run of this test (same project path) is not this one's.
    let text = std::fs::read_to_string(&record).unwrap();
    let held_line = text.lines().find(|l| l.contains(&format!("\"job\":{held},"))).expect("the held job's record");
    assert!(held_line.contains("\"cluster\":"), "a job is recorded with its cluster: {held_line}");
    let entry: chaperon::scope::Entry = serde_json::from_slice(unseal_unchecked(held_line.as_bytes()).0).unwrap();
    let held_dir = entry.dir.clone().expect("a job is recorded with its directory");
    let jobs = j.rig.home.join(".local/state/agent-sandbox/jobs");
    assert!(jobs.join(&held_dir).is_dir(), "{held_dir}");
    // Each forged job with a directory of its own, which goes once the job is found gone,
    // recorded (sealed) as the chaperon records a job.
    std::fs::write(&record, format!("{held_line}\n")).unwrap();
    let state = j.rig.home.join(".local/state/agent-sandbox");
    let registry = chaperon::scope::Registry::with_key(&state, std::sync::Arc::new(user_record_key(j.rig)));
    let forged: Vec<u32> = (0..70).map(|i| 60_000_000 + i).collect();
    let forged_dir = |id: u32| format!("forged-{}-{id}", std::process::id());
    for id in &forged {
        std::fs::create_dir(jobs.join(forged_dir(*id))).unwrap();
        j.give(&[&jobs.join(forged_dir(*id))]);
        registry.add(&chaperon::scope::Entry { job: *id, dir: Some(forged_dir(*id)), ..entry.clone() }).unwrap();
    }
    // The first call finds 71 ids and asks after its answer; the session lives on meanwhile.
    let out = j.run("squeue -h -o 'first=%i'; sleep 3; squeue -h -o 'then=%i'; echo rc=$?");
    let _ = Command::new("scancel").arg(held.to_string()).status();
    assert!(
        out.stdout.contains(&format!("first={held}\n")) && out.stdout.contains(&format!("then={held}\nrc=0")),
        "{out}"
    );
    let text = std::fs::read_to_string(&record).unwrap();
    for id in &forged {
        assert!(text.contains(&format!("{{\"gone\":{id},")), "{id} is not marked gone: {text}");
    }
    assert!(!text.contains(&format!("{{\"gone\":{held},")), "a held job was marked gone: {text}");
    let left = forged.iter().filter(|id| jobs.join(forged_dir(**id)).exists()).count();
    assert_eq!(left, 0, "the forgotten jobs' directories are removed");
    assert!(jobs.join(&held_dir).is_dir(), "the held job's directory stays");
    // Named by id, a forgotten job is answered as squeue answers it: an error.
    let out = j.run(&format!("squeue -h -j {}; echo named=$?", forged[0]));
    assert!(out.stdout.contains("named=1"), "{out}");
}

#[test]
fn denied_options_and_smuggled_directives_submit_nothing() {
    let Some(j) = slurm_jail("slurm-denied") else { return };
    let j = j
        .project_file("prolog.sh", "#!/bin/sh\n#SBATCH --prolog=/tmp/x\ntrue\n")
        .project_file("clustered.sh", "#!/bin/sh\n#SBATCH   -J ok --get-user-env\ntrue\n")
        .project_file("uid.sh", "#!/bin/sh\n#SBATCH --uid=0\ntrue\n");
    let before = queue_ids_in(Some(&j.project));
    let cases = [
        "sbatch --uid=0 --wrap true",
        "sbatch --get-user-env --wrap true",
        "sbatch --chdir=/tmp --wrap true",
        "sbatch --mail-user=x@example.org --wrap true",
        "sbatch prolog.sh",
        "sbatch clustered.sh",
        "sbatch uid.sh",
        "sbatch /etc/hostname",
        "sbatch link.sh",
        "sbatch --dependency=afterok:1 --wrap true",
        "salloc --no-shell",
        "salloc --uid=0 sh",
        "sbcast x y",
    ];
    let script: Vec<String> = cases.iter().map(|c| format!("{c} 2>&1; echo \"rc=$?\"")).collect();
    let out = j.run(&format!("ln -s /etc/hostname link.sh; {}", script.join("; ")));
    // srun's --prolog is no sbatch option: sbatch's own words refuse it, with its status.
    let unrecognized =
        "sbatch: unrecognized option '--prolog=/tmp/x'\nTry \"sbatch --help\" for more information\nrc=255\n";
    assert!(out.stdout.contains(unrecognized), "{out}");
    let out = Out { stdout: out.stdout.replace(unrecognized, "rc=1\n"), ..out };
    assert_eq!(out.stdout.matches("rc=1").count(), cases.len(), "every case is refused: {out}");
    assert!(!out.stdout.contains("Submitted"), "{out}");
    for line in out.stdout.lines().filter(|l| !l.starts_with("rc=")) {
        assert!(line.contains(": error: "), "one line the agent can act on, like Slurm's: {line}");
    }
    assert_eq!(queue_ids_in(Some(&j.project)), before, "no job appeared in the queue");
    assert!(before.is_empty());
}

#[test]
fn jobs_outside_the_jail_are_invisible_and_untouchable() {
    let Some(j) = slurm_jail("slurm-scope") else { return };
    // A job of the same user, submitted outside any jail.
    let outside = j.as_user("sbatch").args(["--parsable", "--hold", "--wrap", "true"]).output().expect("sbatch");
    let outside: u32 = String::from_utf8_lossy(&outside.stdout).trim().parse().expect("outside job id");
    let out = j.run(&format!(
        "id=$(sbatch --parsable --hold --wrap true); echo mine=$id; squeue -h -o %i; \
         squeue --json | python3 -c 'import json,sys; print(\"json\", [j[\"job_id\"] for j in json.load(sys.stdin)[\"jobs\"]])'; \
         squeue --yaml | grep '\"job_id\": '; \
         scontrol update JobId={outside} TimeLimit=1; echo update=$?; scontrol release {outside}; echo release=$?; \
         scontrol show job {outside}; echo show=$?; srun --jobid={outside} true; echo attach=$?; \
         scancel {outside}; echo cancel=$?; sbatch --dependency=afterok:{outside} --wrap true; echo dep=$?; \
         scancel $id; echo own=$?"
    ));
    let mine = printed_job_id(&out, "mine=");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.contains(&mine.to_string().as_str()), "own job visible: {out}");
    assert!(!lines.contains(&outside.to_string().as_str()), "outside job invisible: {out}");
    let json = out.stdout.lines().find(|l| l.starts_with("json [")).unwrap_or_default();
    assert!(json.contains(&mine.to_string()) && !json.contains(&outside.to_string()), "JSON filtered: {out}");
    assert!(out.stdout.contains(&format!("\"job_id\": {mine}")), "YAML lists the own job: {out}");
    assert!(!out.stdout.contains(&format!("\"job_id\": {outside}")), "YAML filtered: {out}");
    for refused in ["update=1", "release=1", "show=1", "attach=1", "cancel=1", "dep=1"] {
        assert!(out.stdout.contains(refused), "{refused}: {out}");
    }
    assert!(out.stdout.contains("own=0"), "{out}");
    assert!(queue_ids().contains(&outside), "the outside job survived");
    let _ = Command::new("scancel").arg(outside.to_string()).status();
}

#[test]
fn squeue_json_lists_every_task_of_the_sessions_job_array() {
    // A task that runs gets a job id of its own; the scope holds the array's. The JSON was
    // narrowed by the record's own `job_id` alone, so running tasks vanished from
    // `squeue --json` (and `--yaml`) while the table listed them (issue 34). (The JSON also
    // holds the project's ended jobs, which the table leaves out: the array's are compared.)
    let Some(j) = slurm_jail("slurm-array-json") else { return };
    let out = j.run(
        "id=$(sbatch --parsable --array=0-1 -n1 --wrap 'sleep 60'); echo array=$id; \
         for i in $(seq 1 150); do [ \"$(squeue -h -r -t R -o %i | wc -l)\" -ge 2 ] && break; sleep 0.2; done; \
         echo table=$(squeue -h -o %A | sort | tr '\\n' ' '); \
         squeue --json | python3 -c 'import json,sys; print(\"json=\" + \" \".join(sorted(str(j[\"job_id\"]) for j in json.load(sys.stdin)[\"jobs\"] if j[\"array_job_id\"] == int(sys.argv[1]))))' $id; \
         scancel $id",
    );
    let field = |k: &str| out.stdout.lines().find_map(|l| l.strip_prefix(k)).unwrap_or_default().trim().to_string();
    let table = field("table=");
    assert_eq!(table.split_whitespace().count(), 2, "two tasks running: {out}");
    assert_eq!(field("json="), table, "the JSON lists what the table lists: {out}");
}

#[test]
fn the_jails_environment_never_reaches_the_nodes_unsandboxed_side() {
    let Some(j) = slurm_jail("slurm-env") else { return };
    let canary = j.rig.home.join("PWNED-BY-BASH_ENV");
    let _ = std::fs::remove_file(&canary);
    let j = j.project_file("evil.sh", "touch \"$HOME/PWNED-BY-BASH_ENV\"\n");
    let out = j.run(
        "export BASH_ENV=$PWD/evil.sh ENV=$PWD/evil.sh LD_PRELOAD=$PWD/nothing.so PATH=$PWD:$PATH; \
         sbatch --wait --export=ALL -o env.out --wrap 'bash -c \"echo inner=$BASH_ENV\"; echo done'; echo rc=$?",
    );
    assert!(out.stdout.contains("rc=0"), "{out}");
    let text = wait_for_text(&j.project.join("env.out"), "done");
    assert!(text.contains("inner=") && text.contains("evil.sh"), "--export=ALL applies inside the jail: {text}");
    assert!(!canary.exists(), "BASH_ENV ran outside the jail (host home written)");
}

/// `sbatch --export=NONE` makes slurmd load the user's login environment on the node (as if
/// `--get-user-env` were given): the user's login shell would run there outside the jail, its
/// output would become the wrapper's environment, and a slow or failing profile would fail the
/// job. The wrapper is submitted with the chaperon's own clean environment instead.
#[test]
fn no_login_shell_runs_outside_the_jail_on_the_node() {
    let Some(j) = slurm_jail("slurm-login-shell") else { return };
    let marker = j.rig.home.join("LOGIN-SHELL-RAN");
    let profile = j.rig.home.join(".bash_profile");
    let _ = std::fs::remove_file(&marker);
    // What ran it, if anything does: the job, the process and its parent, to tell which path.
    std::fs::write(
        &profile,
        format!(
            "echo \"job=$SLURM_JOB_ID pid=$$ parent=$(tr '\\0' ' ' < /proc/$PPID/cmdline)\" >> {}\n",
            marker.display()
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&profile, Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    let out = j.run("sbatch --wait -o login.out --wrap 'echo done'; echo rc=$?");
    let _ = std::fs::remove_file(&profile);
    assert!(out.stdout.contains("rc=0"), "{out}");
    assert!(wait_for_text(&j.project.join("login.out"), "done").contains("done"), "{out}");
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(ran.is_empty(), "a login shell of the user ran outside the jail: {ran}");
}

#[test]
fn a_script_swapped_after_submission_does_not_change_what_runs() {
    let Some(j) = slurm_jail("slurm-swap") else { return };
    let j = j.project_file("job.sh", "#!/bin/sh\necho original\n");
    let out =
        j.run("sbatch --begin=now+3 -o swap.out job.sh; printf '#!/bin/sh\\necho SWAPPED\\n' > job.sh; echo swapped");
    assert!(out.stdout.contains("Submitted") && out.stdout.contains("swapped"), "{out}");
    let text = wait_for_text(&j.project.join("swap.out"), "original");
    assert!(text.contains("original") && !text.contains("SWAPPED"), "{text}");
}

#[test]
fn two_hundred_concurrent_sbatch_calls_all_get_a_job() {
    let Some(j) = slurm_jail("slurm-200") else { return };
    let out = j.run(
        "for i in $(seq 1 200); do sbatch --parsable --hold -J many --wrap true > id.$i 2>err.$i & done; wait; \
         cat id.* | sort -u | grep -c . ; cat err.* | head -3; squeue -h -n many -o %i | grep -c .; scancel --name=many",
    );
    let counts: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(counts.first(), Some(&"200"), "200 distinct job ids: {out}");
    assert_eq!(counts.last(), Some(&"200"), "200 jobs in the queue: {out}");
}

#[test]
fn scancel_by_filter_passes_over_the_scopes_ended_jobs_as_a_direct_call_does() {
    // Given a job of the scope that has ended, the real scancel with a filter reports
    // "Invalid job id specified" and fails; a direct `scancel --name=X` says nothing.
    let Some(j) = slurm_jail("slurm-scancel-filter") else { return };
    let out = j.run(
        "ended=$(sbatch --parsable -o ended.out --wrap true); i=0; \
         while [ $i -lt 150 ] && squeue -h -j $ended 2>/dev/null | grep -q .; do sleep 0.2; i=$((i+1)); done; \
         keep=$(sbatch --parsable --hold -J keep --wrap true); \
         scancel --name=nosuch; echo none=$?; \
         scancel --me --state=PENDING --name=keep; echo keep=$?; \
         sleep 1; echo pending=$(squeue -h -n keep -t PD -o %i | grep -c .)",
    );
    assert!(out.stdout.contains("none=0") && out.stdout.contains("keep=0"), "{out}");
    assert!(out.stdout.contains("pending=0"), "the held job was cancelled: {out}");
    assert!(!out.stderr.contains("Invalid job id"), "{out}");
}

#[test]
fn srun_allocation_and_steps_inside_a_batch_job_run_in_the_jail() {
    let Some(j) = slurm_jail("slurm-srun") else { return };
    let out = j.run(
        "srun -n2 sh -c 'echo alloc=$SLURM_PROCID $(hostname)'; \
         sbatch --wait -n2 -o steps.out --wrap \"srun sh -c 'echo step=\\$SLURM_PROCID \\$(hostname); \
         test -e /etc/munge && echo MUNGE; test -e ~/.ssh/id_ed25519 && echo SSH; true'\"; echo rc=$?",
    );
    assert!(out.stdout.contains("alloc=0 agent-sandbox") && out.stdout.contains("alloc=1 agent-sandbox"), "{out}");
    assert!(out.stdout.contains("rc=0"), "{out}");
    let text = wait_for_text(&j.project.join("steps.out"), "step=1");
    assert!(text.contains("step=0 agent-sandbox") && text.contains("step=1 agent-sandbox"), "{text}");
    assert!(!text.contains("MUNGE") && !text.contains("SSH"), "{text}");
}

#[test]
fn steps_and_refused_submissions_leave_no_job_directory_behind() {
    // A step's directory (its frozen policy) is read by its tasks as they start; once srun has
    // returned, the step is over and its directory is removed, or they pile up in the state
    // directory, one per step. Likewise a submission Slurm refused, and --test-only.
    let Some(j) = slurm_jail("slurm-step-dirs") else { return };
    let out = j.run(
        "echo session=$AGENT_SANDBOX_SESSION; srun -N1 true; srun -N1 sh -c 'exit 3'; echo rc=$?; \
         sbatch -p no-such-partition --wrap true; echo refused=$?; sbatch --test-only --wrap true; echo tested=$?",
    );
    assert!(
        out.stdout.contains("rc=3") && out.stdout.contains("refused=1") && out.stdout.contains("tested=0"),
        "{out}"
    );
    let session = out.stdout.lines().find_map(|l| l.strip_prefix("session=")).expect("the session's id").to_string();
    assert!(!session.is_empty(), "{out}");
    let jobs = j.rig.home.join(".local/state/agent-sandbox/jobs");
    let left: Vec<String> = std::fs::read_dir(&jobs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{session}-")))
        .collect();
    assert!(left.is_empty(), "job directories are left: {left:?}");
}

#[test]
fn srun_output_streams_and_ctrl_c_cancels_the_step() {
    use std::io::BufRead;
    let Some(j) = slurm_jail("slurm-stream") else { return };
    let mut c = j.command(&["-q", "run", "--", "srun", "sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 1; done"]);
    let mut child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let start = Instant::now();
    let mut seen = vec![];
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines().map_while(Result::ok) {
        seen.push((line, start.elapsed()));
    }
    let _ = child.wait();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[2].1 - seen[0].1 >= Duration::from_millis(1500), "lines arrive as printed, not at the end: {seen:?}");

    // Two SIGINTs within a second: srun cancels the step (the launcher passes them to the
    // stub, the stub to the chaperon, the chaperon to the real srun).
    let mut c = j.command(&["-q", "run", "--", "srun", "sh", "-c", "echo started; sleep 60"]);
    let mut child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "started");
    let started = Instant::now();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    for _ in 0..2 {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        std::thread::sleep(Duration::from_millis(300));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = child.try_wait().unwrap();
    let _ = child.kill();
    assert!(done.is_some(), "Ctrl-C did not end srun");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn srun_pty_gives_an_interactive_shell_in_the_jail() {
    let Some(j) = slurm_jail("slurm-pty") else { return };
    let launcher = format!("{} -q run -- srun --pty sh -c 'test -t 0 && echo IS-A-TTY; hostname'", j.rig.bin.display());
    let mut cmd = j.as_user("script");
    cmd.args(["-qec", &launcher, "/dev/null"]);
    let out = j.output(&mut cmd);
    assert!(out.stdout.contains("IS-A-TTY") && out.stdout.contains("agent-sandbox"), "{out}");
}

#[test]
fn array_jobs_run_each_task_in_the_jail_with_its_own_output() {
    let Some(j) = slurm_jail("slurm-array") else { return };
    let out = j.run("sbatch --wait -a 0-2 --wrap 'echo task=$SLURM_ARRAY_TASK_ID host=$(hostname)'; echo rc=$?");
    assert!(out.stdout.contains("rc=0"), "{out}");
    let outs: Vec<String> = std::fs::read_dir(&j.project)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("slurm-") && n.ends_with(".out"))
        .collect();
    assert_eq!(outs.len(), 3, "slurm-%A_%a.out per task: {outs:?}");
    for n in outs {
        let text = wait_for_text(&j.project.join(&n), "host=");
        assert!(text.contains("host=agent-sandbox"), "{n}: {text}");
        let task = n.trim_end_matches(".out").rsplit('_').next().unwrap_or("?").to_string();
        assert!(text.contains(&format!("task={task}")), "{n}: {text}");
    }
}

#[test]
fn an_output_path_through_a_planted_symlink_stays_inside_the_jail() {
    let Some(j) = slurm_jail("slurm-symlink") else { return };
    let target = j.rig.home.join(".bashrc-canary");
    std::fs::write(&target, "original\n").unwrap();
    j.give(&[&target]);
    let out = j.run(&format!(
        "ln -s {} out.txt; sbatch --wait -o out.txt --wrap 'echo OVERWRITTEN'; echo rc=$?",
        target.display()
    ));
    assert!(out.stdout.contains("Submitted"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "original\n",
        "the job wrote through the symlink outside the jail"
    );
}

#[test]
fn a_chaperon_killed_mid_request_gives_the_stub_a_clear_error_and_the_next_call_a_new_one() {
    let Some(j) = slurm_jail("slurm-kill") else { return };
    kill_the_chaperon_mid_request(j);
}

/// Kills the session's chaperon while `srun` waits on it: the stub fails at once with a line
/// that says so, and the next Slurm call of the session starts a new chaperon and works.
fn kill_the_chaperon_mid_request(j: Jail) {
    let mut c = j.command(&[
        "-q",
        "run",
        "--",
        "sh",
        "-c",
        "echo go; srun sleep 30; echo rc=$?; timeout -s KILL 20 squeue -h -o %i; echo again=$?",
    ]);
    let mut child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    // The session's chaperon: the child of this launcher named asb-chaperon.
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid: i32 = loop {
        let kids = Command::new("pgrep").args(["-P", &child.id().to_string(), "-x", "asb-chaperon"]).output().unwrap();
        if let Ok(pid) = String::from_utf8_lossy(&kids.stdout).trim().parse() {
            break pid;
        }
        assert!(Instant::now() < deadline, "no chaperon started for srun");
        std::thread::sleep(Duration::from_millis(100));
    };
    // srun is waiting on it once its step runs.
    std::thread::sleep(Duration::from_millis(1500));
    let killed = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let _ = child.wait();
    assert!(killed.elapsed() < Duration::from_secs(15), "the stub hung after the chaperon died");
    assert!(rest.contains("rc=1"), "{rest} {err}");
    assert!(err.contains("lost contact with agent-sandbox's Slurm chaperon"), "{err}");
    assert!(rest.contains("again=0"), "the next call after the chaperon died got a new one: {rest} {err}");
}

#[test]
fn a_two_node_step_starts_every_task_in_the_jail_on_both_nodes() {
    let Some(j) = slurm_jail("slurm-two-nodes") else { return };
    let nodes = Command::new("sinfo").args(["-h", "-o", "%D"]).output().unwrap();
    let count: u32 = String::from_utf8_lossy(&nodes.stdout).trim().parse().unwrap_or(0);
    assert!(count >= 2, "the test cluster has one node: tests/cluster/start.sh --two-nodes");
    let out = j.run("srun -N2 sh -c 'echo node=$SLURMD_NODENAME host=$(hostname) $(test -e /etc/munge && echo MUNGE)'");
    let lines: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("node=")).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines.iter().any(|l| l.contains("node=n2")), "one task on the second node: {out}");
    assert!(lines.iter().all(|l| l.contains("host=agent-sandbox") && !l.contains("MUNGE")), "{out}");
}

#[test]
fn workflow_tools_calls_work_unchanged() {
    // What Snakemake's Slurm executor and submitit run, in their own spellings.
    let Some(j) = slurm_jail("slurm-workflow") else { return };
    let out = j.run(
        "id=$(sbatch --parsable --export=ALL --comment 'rule_align wildcards=1' -J wf-run-42 --hold --wrap 'true'); \
         echo id=$id; \
         for i in $(seq 50); do sacct --name wf-run-42 --parsable2 --noheader --format JobIdRaw,State | grep \"^$id|\" && break; sleep 0.2; done; \
         scontrol show job $id | grep -o 'Comment=[^ ]*'; \
         scontrol update JobId=$id TimeLimit=5 && echo updated; \
         scontrol release $id && echo released; \
         scontrol hold $id && echo held; \
         scontrol show config | grep -c ClusterName; \
         scontrol show partition | grep -c PartitionName; \
         sinfo -h -o %P; sshare -U -n >/dev/null && echo sshare-ok; \
         squeue --me -h -o '%i %j' ; scancel $id && echo cancelled",
    );
    let id =
        out.stdout.lines().find_map(|l| l.strip_prefix("id=")).unwrap_or_else(|| panic!("{out}")).trim().to_string();
    assert!(id.parse::<u32>().is_ok(), "--parsable prints the bare id: {out}");
    assert!(out.stdout.contains(&format!("{id}|PENDING")), "sacct --name --parsable2: {out}");
    assert!(out.stdout.contains("Comment=rule_align"), "the user's comment is kept: {out}");
    for word in ["updated", "released", "held", "sshare-ok", "cancelled", "debug*"] {
        assert!(out.stdout.contains(word), "{word}: {out}");
    }
    assert!(out.stdout.contains(&format!("{id} wf-run-42")), "squeue --me within scope: {out}");
}

/// Workflow tools ask `sbatch --version` with nothing on stdin: sbatch answers before it
/// reads a script, and so does the session's sbatch (it read the empty stdin as a script and
/// refused it: "Batch script is empty!").
#[test]
fn sbatch_version_help_and_usage_answer_with_nothing_on_stdin() {
    let Some(j) = slurm_jail("slurm-version") else { return };
    let out = j.run("sbatch --version </dev/null && sbatch -V </dev/null && sbatch --usage </dev/null | head -1");
    assert_eq!(out.code, 0, "{out}");
    let direct = Command::new("sbatch").arg("--version").stdin(std::process::Stdio::null()).output().unwrap();
    let version = String::from_utf8_lossy(&direct.stdout).into_owned();
    assert!(version.starts_with("slurm"), "{version}");
    assert_eq!(out.stdout.matches(version.as_str()).count(), 2, "{out}");
    assert!(out.stdout.contains("Usage: sbatch"), "{out}");
}

#[test]
fn session_scope_hides_other_sessions_of_the_same_project() {
    let Some(j) = slurm_jail("slurm-sessions") else { return };
    let first = j.run("sbatch --parsable --hold -J first-session --wrap true");
    let id = first.stdout.trim().to_string();
    assert!(id.parse::<u32>().is_ok(), "{first}");
    let out = j.run(&format!(
        "squeue -h -o %i | grep -cx {id}; SLURM_SCOPE=session squeue -h -o %i | grep -cx {id}; \
         SLURM_SCOPE=session scancel {id}; echo cancel=$?; SLURM_SCOPE=user squeue; echo user=$?; scancel {id}; echo own=$?"
    ));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"1"), "project scope sees the other session's job: {out}");
    assert_eq!(lines.get(1), Some(&"0"), "session scope does not: {out}");
    assert!(out.stdout.contains("cancel=1") && out.stdout.contains("user=1") && out.stdout.contains("own=0"), "{out}");
}

#[test]
fn garbage_on_the_chaperon_socket_gets_an_error_and_nothing_else() {
    let Some(j) = slurm_jail("slurm-garbage") else { return };
    let out = j.run(
        "python3 -c \"
import os, socket, struct
P = '/run/agent-sandbox/chaperon.sock'
def talk(data, fds=True):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(P)
    try:
        if fds:
            s.sendmsg([b'F'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('3i', 0, 1, 2))])
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        return s.recv(200)
    except OSError as e:
        return repr(e).encode()
print('no-fds', talk(b'hello', fds=False)[:20])
print('bad-magic', talk(b'GET / HTTP/1.1\\\\r\\\\n\\\\r\\\\n')[:40])
print('huge', talk(b'ASB\\\\x01' + struct.pack('<I', 1 << 30))[:60])
print('bad-json', talk(b'ASB\\\\x01' + struct.pack('<I', 5) + b'{{{{{')[:40])
print('unknown-field', talk(b'ASB\\\\x01' + struct.pack('<I', 60) + b'{\\\"command\\\":\\\"sbatch\\\",\\\"argv\\\":[],\\\"cwd\\\":\\\"/\\\",\\\"uid\\\":0,\\\"x\\\":[]     }')[:40])
\"; squeue -h >/dev/null && echo still-serving",
    );
    assert!(out.stdout.contains("still-serving"), "{out}");
    for case in ["bad-magic", "huge", "bad-json", "unknown-field"] {
        let line = out.stdout.lines().find(|l| l.starts_with(case)).unwrap_or_else(|| panic!("{case}: {out}"));
        assert!(line.contains(r#""kind":"error""#) && line.contains("bad r"), "an error frame: {case}: {out}");
    }
}

#[test]
fn a_running_job_in_scope_can_be_requeued() {
    let Some(j) = slurm_jail("slurm-requeue") else { return };
    let out = j.run(
        "id=$(sbatch --parsable --requeue -o rq.out --wrap 'echo run; sleep 20'); \
         for i in $(seq 100); do s=$(squeue -h -j $id -o %T); [ \"$s\" = RUNNING ] && break; sleep 0.1; done; echo state=$s; \
         scontrol requeue $id; echo requeue=$?; \
         for i in $(seq 100); do r=$(scontrol show job $id | grep -o 'Restarts=[0-9]*'); [ \"$r\" = Restarts=1 ] && break; sleep 0.1; done; echo $r; \
         scancel $id",
    );
    assert!(out.stdout.contains("state=RUNNING"), "{out}");
    assert!(out.stdout.contains("requeue=0") && out.stdout.contains("Restarts=1"), "{out}");
}

#[test]
fn a_killed_launcher_leaves_no_session_socket_behind() {
    use std::io::BufRead;
    let Some(j) = slurm_jail("slurm-socket") else { return };
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", "echo $AGENT_SANDBOX_SESSION; sleep 30"]);
    let mut child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let mut session = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut session).unwrap();
    let sock = j.rig.home.join(format!(".local/state/agent-sandbox/sessions/{}.sock", session.trim()));
    assert!(sock.exists(), "{} while the session runs", sock.display());
    child.kill().unwrap();
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    while sock.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!sock.exists(), "the socket of a killed session stays");
}

/// The job ids of the test user's jobs submitted outside any jail, held; cancelled on drop.
struct ForeignJob(u32);

impl ForeignJob {
    fn submit(j: &Jail) -> ForeignJob {
        let out = j.as_user("sbatch").args(["--parsable", "--hold", "-J", "foreign", "--wrap", "true"]).output();
        let out = out.expect("sbatch outside the jail");
        let id = String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap_or("").parse().ok();
        ForeignJob(id.unwrap_or_else(|| panic!("sbatch outside the jail: {out:?}")))
    }
}

impl Drop for ForeignJob {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(self.0.to_string()).status();
    }
}

#[test]
fn dependencies_on_foreign_jobs_are_refused_in_every_command() {
    let Some(j) = slurm_jail("slurm-deps") else { return };
    let foreign = ForeignJob::submit(&j).0;
    let out = j.run(&format!(
        "id=$(sbatch --parsable --hold -J mine --wrap true); echo id=$id; \
         scontrol update JobId=$id Dependency=afterok:{foreign}; echo update=$?; \
         scontrol update JobId=$id dependency=afterany:$id?afterok:{foreign}; echo update2=$?; \
         srun --dependency=afterok:{foreign} true; echo srun=$?; \
         sbatch -d afterok:{foreign} --wrap true; echo sbatch=$?; \
         sbatch -d singleton --wrap true; echo single=$?; \
         scontrol update JobId=$id Dependency=singleton; echo single2=$?; \
         scontrol show job $id | grep -o 'Dependency=[^ ]*'; \
         id2=$(sbatch --parsable --hold --wrap true); \
         scontrol update JobId=$id Dependency=afterany:$id2 && echo own-ok; scancel $id $id2"
    ));
    for step in ["update=", "update2=", "srun=", "sbatch=", "single=", "single2="] {
        let code = out.stdout.lines().find_map(|l| l.strip_prefix(step)).unwrap_or("?");
        assert_ne!(code, "0", "{step} reached Slurm with a foreign dependency: {out}");
    }
    assert_eq!(out.stderr.matches(&format!("job {foreign} is not one of this project's jobs")).count(), 4, "{out}");
    assert!(out.stdout.contains("own-ok"), "a dependency within scope still works: {out}");
    assert!(out.stdout.contains("Dependency=(null)"), "no dependency reached our job: {out}");
    // `singleton` waits on same-named jobs outside the scope too: refused with its reason.
    assert_eq!(out.stderr.matches("singleton is not mediated").count(), 2, "{out}");
}

#[test]
fn srun_input_from_a_hidden_file_is_read_inside_the_jail_not_on_the_host() {
    let Some(j) = slurm_jail("slurm-srun-input") else { return };
    let aws = j.rig.home.join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(aws.join("credentials"), "aws_secret_access_key=CANARY-SRUN-INPUT\n").unwrap();
    j.give(&[&aws, &aws.join("credentials")]);
    let j = j.project_file("in.txt", "from-the-project\n");
    let out = j.run(
        "srun --input=$HOME/.aws/credentials cat; echo rc=$?; srun -i ~/.aws/credentials cat; \
         srun --input=in.txt cat; srun -n2 --input=none sh -c 'cat; echo none-$SLURM_PROCID'; \
         ln -s $HOME/.aws/credentials 8; srun -n1 --input=8 cat; srun -i8 -n2 cat; echo numbered",
    );
    assert!(!out.both().contains("CANARY-SRUN-INPUT"), "srun read a hidden host file for the jail: {out}");
    assert!(!out.stdout.contains("rc=0"), "a hidden file does not exist for the step: {out}");
    assert!(out.stdout.contains("from-the-project"), "a project file is the step's input: {out}");
    assert!(out.stdout.contains("none-0") && out.stdout.contains("none-1"), "{out}");
    assert!(out.stdout.contains("numbered"), "{out}");
}

#[test]
fn step_and_job_output_files_never_land_outside_the_project() {
    let Some(j) = slurm_jail("slurm-srun-output") else { return };
    let target = j.rig.home.join(".bashrc-canary-append");
    std::fs::write(&target, "original\n").unwrap();
    j.give(&[&target]);
    let out = j.run(&format!(
        "ln -s {t} link.out; \
         srun --open-mode=append --output={t} echo PWNED-SRUN-O; srun --open-mode=append -e {t} sh -c 'echo PWNED-SRUN-E >&2'; \
         srun --open-mode=append -o link.out echo PWNED-LINK; \
         sbatch --wait --open-mode=append -o {t} --wrap 'echo PWNED-SBATCH'; \
         sbatch --wait --open-mode=append -o link.out -e {t} --wrap 'echo PWNED-SBATCH-E >&2'; \
         srun -n2 -o step-%t.out sh -c 'echo task=$SLURM_PROCID host=$(hostname)'; \
         srun -n2 -o shared.out sh -c 'echo shared=$SLURM_PROCID'; echo rc=$?; \
         ln -s {t} 9; ln -s {t} 12; srun -n1 --open-mode=append --output=9 echo PWNED-NUMBER; \
         srun -n2 -e 9 sh -c 'echo PWNED-NUMBER-E >&2'; \
         sbatch --wait --wrap 'srun -n1 -lo12 echo PWNED-NODE-STEP' >/dev/null; ls 7 2>/dev/null",
        t = target.display()
    ));
    assert!(out.stdout.contains("rc=0"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original\n", "a step or job wrote outside the jail: {out}");
    for t in 0..2 {
        let text = wait_for_text(&j.project.join(format!("step-{t}.out")), "host=");
        assert_eq!(text.trim(), format!("task={t} host=agent-sandbox"), "per-task output file, written in the jail");
    }
    let shared = wait_for_text(&j.project.join("shared.out"), "shared=1");
    assert!(shared.contains("shared=0") && shared.contains("shared=1"), "tasks append to a shared file: {shared}");
}

#[test]
fn the_job_environment_cannot_choose_the_nodes_host_paths() {
    // A jail that exports XDG_STATE_HOME / XDG_CONFIG_HOME pointing into the project would
    // have the node launcher read job directories, placeholder and scope records from there.
    let Some(j) = slurm_jail("slurm-xdg") else { return };
    let out = j.run(
        "mkdir -p fake/agent-sandbox/jobs fakecfg/agent-sandbox; \
         export XDG_STATE_HOME=$PWD/fake XDG_CONFIG_HOME=$PWD/fakecfg; \
         sbatch --wait -o xdg.out --wrap 'echo ran state=$XDG_STATE_HOME'; echo rc=$?; \
         find fake fakecfg -mindepth 3 | sort",
    );
    assert!(out.stdout.contains("rc=0"), "{out}");
    let text = wait_for_text(&j.project.join("xdg.out"), "ran");
    assert!(text.contains("ran state=") && text.contains("/fake"), "the job's own environment keeps them: {text}");
    assert!(!out.stdout.contains("fake/agent-sandbox/"), "the node wrote into the jail's directory: {out}");
}

#[test]
fn the_submitting_environment_reaches_steps_inside_the_job() {
    // submitit marks its tasks with a variable set where sbatch is called; srun inside the
    // batch job must pass it on (Slurm's --export=ALL), and --export=NONE stays NONE.
    let Some(j) = slurm_jail("slurm-export") else { return };
    let out = j.run(
        "export WF_MARK=from-submitter; \
         sbatch --wait -o all.out --wrap 'srun sh -c \"echo step=$WF_MARK export=${SLURM_EXPORT_ENV:-unset}\"'; \
         sbatch --wait --export=NONE -o none.out --wrap 'echo job=${WF_MARK:-unset} export=$SLURM_EXPORT_ENV'; \
         sbatch --wait --export=ALL,EXTRA=1 -o list.out --wrap 'srun sh -c \"echo step=$WF_MARK extra=$EXTRA\"'; echo rc=$?",
    );
    assert!(out.stdout.contains("rc=0"), "{out}");
    let all = wait_for_text(&j.project.join("all.out"), "step=");
    assert_eq!(all.trim(), "step=from-submitter export=unset", "{all}");
    let none = wait_for_text(&j.project.join("none.out"), "job=");
    assert_eq!(none.trim(), "job=unset export=NONE", "{none}");
    let list = wait_for_text(&j.project.join("list.out"), "step=");
    assert_eq!(list.trim(), "step=from-submitter extra=1", "{list}");
}

#[test]
fn a_script_on_a_stdin_that_never_ends_is_refused_in_bounded_time() {
    let Some(j) = slurm_jail("slurm-stdin-bound") else { return };
    let j = j.env("AGENT_SANDBOX_SLURM_STDIN_TIMEOUT", "2");
    let out = j.run("mkfifo f; sh -c 'exec 3>f; sleep 20' & sbatch < f; echo rc=$?; kill $! 2>/dev/null");
    assert!(out.stderr.contains("no end of input after 2 s"), "{out}");
    assert!(out.stdout.contains("rc=1"), "{out}");
    assert!(out.elapsed < Duration::from_secs(15), "the chaperon waited {:?}", out.elapsed);
}

#[test]
fn a_signal_to_a_job_reaches_its_program_once() {
    // Slurm signals every process of a step (proctrack): the launcher, the jail's PID 1 and
    // the program all get it. Relaying it on as well ran submitit's checkpoint handler twice.
    // `scancel -b` reaches the batch shell alone (the launcher), which must pass it on once.
    let Some(j) = slurm_jail("slurm-signal-once") else { return };
    // Python runs a handler as soon as its signal arrives (a shell's trap would merge two).
    let count = "import signal, sys, time\nwho, sig = sys.argv[1], getattr(signal, 'SIG' + sys.argv[2])\n\
                 n = []\nsignal.signal(sig, lambda *a: (n.append(1), print(f'{who}-got={len(n)}', flush=True)))\n\
                 print(f'{who}-ready', flush=True)\nend = time.time() + 10\nwhile time.time() < end: time.sleep(0.01)\n\
                 print(f'{who}-final={len(n)}', flush=True)\n";
    // The batch script counts too, and waits for its step before it ends.
    let batch = format!(
        "#!/usr/bin/python3\nimport subprocess\nstep = subprocess.Popen(['srun', 'python3', 'count.py', 'step', 'USR2'])\n\
         {}step.wait()\n",
        count.replace("sys.argv[1], getattr(signal, 'SIG' + sys.argv[2])", "'batch', signal.SIGUSR1")
    );
    let j = j.project_file("count.py", count).project_file("batch.sh", &batch);
    let out = j.run(
        "id=$(sbatch --parsable -o sig.out batch.sh); \
         for i in $(seq 100); do grep -q step-ready sig.out 2>/dev/null && grep -q batch-ready sig.out && break; sleep 0.1; done; \
         sleep 0.5; scancel -s USR2 $id; scancel -b -s USR1 $id; \
         for i in $(seq 150); do grep -q step-final sig.out 2>/dev/null && grep -q batch-final sig.out && break; sleep 0.1; done; \
         cat sig.out",
    );
    assert!(out.stdout.contains("step-final=1"), "the step's program got USR2 once: {out}");
    assert!(!out.stdout.contains("step-got=2"), "{out}");
    assert!(out.stdout.contains("batch-final=1"), "the batch script got `scancel -b` once: {out}");
}

#[test]
fn a_waiting_sbatch_ends_with_its_caller() {
    // `sbatch --wait` blocks SIGTERM while it waits: killing the caller must still end it,
    // or it would wait on the chaperon's behalf after the session is gone.
    let Some(j) = slurm_jail("slurm-wait-orphan") else { return };
    let out = j.run("timeout -s KILL 3 sbatch --wait -H -J holdme-orphan --wrap true; echo rc=$?");
    assert!(out.stdout.contains("rc=137"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let waiting = || {
        let ps = Command::new("ps").args(["-u", USER, "-o", "args="]).output().expect("ps");
        String::from_utf8_lossy(&ps.stdout).lines().any(|l| l.contains("sbatch") && l.contains("holdme-orphan"))
    };
    while waiting() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = waiting();
    let _ = Command::new("scancel").args(["--name", "holdme-orphan", "-u", USER]).status();
    assert!(!left, "a real sbatch --wait outlived its caller");
}

#[test]
fn a_script_file_is_read_as_the_jail_sees_it() {
    // dask-jobqueue writes job scripts to $TMPDIR (the jail's private /tmp); a script path
    // leading to a hidden host file must not be read on the jail's behalf.
    let Some(j) = slurm_jail("slurm-script-view") else { return };
    let secret = j.rig.home.join(".ssh-canary-script");
    std::fs::write(&secret, "#!/bin/sh\necho HOST-SECRET-SCRIPT\n").unwrap();
    j.give(&[&secret]);
    let out = j.run(&format!(
        "printf '#!/bin/sh\\necho from-tmp\\n' > /tmp/job.sh; sbatch --wait -o tmp.out /tmp/job.sh; echo tmp=$?; \
         ln -s {} secret.sh; sbatch --wait -o secret.out secret.sh; echo secret=$?",
        secret.display()
    ));
    assert!(out.stdout.contains("tmp=0"), "{out}");
    assert_eq!(wait_for_text(&j.project.join("tmp.out"), "from-tmp").trim(), "from-tmp");
    assert!(out.stdout.contains("secret=1") && out.stderr.contains("Unable to open file secret.sh"), "{out}");
    assert!(!j.project.join("secret.out").exists(), "nothing was submitted");
}

#[test]
fn read_only_views_take_the_local_cluster_or_all_and_nothing_else() {
    // Snakemake's executor asks `sacct --clusters all`; other clusters are out of scope.
    let Some(j) = slurm_jail("slurm-clusters") else { return };
    let conf = std::fs::read_to_string("/etc/slurm/slurm.conf").unwrap_or_default();
    let local = conf
        .lines()
        .find_map(|l| l.trim().strip_prefix("ClusterName="))
        .map(|n| n.trim().to_ascii_lowercase())
        .expect("ClusterName in the test cluster's slurm.conf");
    let out = j.run(&format!(
        "id=$(sbatch --parsable --hold -J clusters --wrap true); \
         for i in $(seq 50); do sacct -X -n --parsable2 --clusters all --format=JobIdRaw,State -j $id | grep . && break; sleep 0.2; done; \
         sacct -X -n --clusters all -j $id >/dev/null; echo all=$?; \
         squeue -M {local} -o '%i'; echo local=$?; \
         sinfo -M ALL -h -o %P >/dev/null; echo sinfo=$?; \
         sacct -M elsewhere -n; echo other=$?; scancel $id"
    ));
    assert!(out.stdout.contains("|PENDING") && out.stdout.contains("all=0"), "{out}");
    assert!(out.stdout.contains(&format!("CLUSTER: {local}")) && out.stdout.contains("local=0"), "{out}");
    assert!(out.stdout.contains("sinfo=0"), "{out}");
    assert!(out.stdout.contains("other=1") && out.stderr.contains("`elsewhere` is not this cluster"), "{out}");
}

#[test]
fn sreport_counts_the_projects_jobs_and_only_the_callers_usage() {
    let Some(j) = slurm_jail("slurm-sreport") else { return };
    // A job of the same user outside any jail that ran (a job that ran no second is not
    // counted in job sizes): real sreport counts it, the jail's must not.
    let outside = j.as_user("sbatch").args(["--parsable", "--wait", "--wrap", "sleep 1"]).output().expect("sbatch");
    let outside: u32 = String::from_utf8_lossy(&outside.stdout).trim().parse().expect("outside job id");
    let outside_hour = job_start_hour(&j, outside);
    // sreport rounds a report's window to whole hours, the end to the nearest one (so a job
    // of this hour may fall after it); a window of one hour, `Start=HOUR End=HOUR`, holds
    // every job that started in it. This session's jobs only: the project's scope also holds
    // what earlier runs of the test submitted.
    let sizes = "SLURM_SCOPE=session sreport -P -n job SizesByAccount PrintJobCount";
    let out = j.run(&format!(
        "id=$(sbatch --parsable --wait --wrap 'sleep 1'); echo mine=$id; \
         for i in $(seq 50); do h=$(sacct -j $id -X -n -P -o Start | cut -c1-13); [ ${{#h}} = 13 ] && break; sleep 0.2; done; \
         echo hour=$h; \
         for i in $(seq 100); do n=$({sizes} Start=$h:00:00 End=$h:00:00 | cut -d'|' -f3); [ \"$n\" = 1 ] && break; sleep 0.3; done; \
         echo count=$n; \
         echo outside-hour=$({sizes} Start={outside_hour}:00:00 End={outside_hour}:00:00 | cut -d'|' -f3); \
         {sizes} Jobs={outside},; echo foreign=$?; \
         sreport -P -n user TopUsage Start=2020-01-01 End=now | sed 's/^/top:/'; echo top=$?; \
         sreport -n -t hours cluster Utilization Start=2020-01-01 End=now | sed 's/^/util:/'; echo util=$?; \
         sreport cluster AccountUtilizationByUser Users=root; echo other-user=$?; \
         sreport -a cluster Utilization; echo all=$?; \
         sreport -M elsewhere cluster Utilization; echo elsewhere=$?; \
         sreport </dev/null; echo interactive=$?"
    ));
    printed_job_id(&out, "mine=");
    let hour = out.stdout.lines().find_map(|l| l.strip_prefix("hour=")).unwrap_or_default();
    assert!(out.stdout.contains("count=1\n"), "job sizes count the project's one job: {out}");
    // In the outside job's hour the jail counts its own job (if it ran then too) and never the
    // outside one, which the real sreport counts there (below).
    let in_that_hour = if hour == outside_hour { "1" } else { "" };
    assert!(out.stdout.contains(&format!("outside-hour={in_that_hour}\n")), "the outside job is not counted: {out}");
    assert!(out.stdout.contains("foreign=1"), "{out}");
    assert!(out.stderr.contains(&format!("job {outside} is not one of this project's jobs")), "{out}");
    for line in out.stdout.lines().filter_map(|l| l.strip_prefix("top:")) {
        assert!(line.split('|').nth(1) == Some(USER), "TopUsage shows the caller alone: {out}");
    }
    assert!(out.stdout.contains("top=0") && out.stdout.contains("util=0"), "{out}");
    // The cluster's utilization is the cluster's, as sreport outside the jail gives it (no line
    // at all until slurmdbd's first hourly roll-up of a new cluster).
    let util = j
        .as_user("sreport")
        .args(["-n", "-t", "hours", "cluster", "Utilization", "Start=2020-01-01", "End=now"])
        .output()
        .expect("sreport");
    let util = String::from_utf8_lossy(&util.stdout).into_owned();
    let jailed: Vec<&str> = out.stdout.lines().filter_map(|l| l.strip_prefix("util:")).collect();
    assert_eq!(jailed, util.lines().collect::<Vec<_>>(), "cluster utilization as it is: {out}");
    assert!(out.stderr.contains("not user root's") && out.stdout.contains("other-user=1"), "{out}");
    assert!(out.stderr.contains("sees its own cluster only") && out.stdout.contains("all=1"), "{out}");
    assert!(out.stderr.contains("`elsewhere` is not this cluster") && out.stdout.contains("elsewhere=1"), "{out}");
    assert!(
        out.stderr.contains("interactive sreport is not mediated") && out.stdout.contains("interactive=1"),
        "{out}"
    );
    // The real sreport, outside the jail, counts the outside job in its hour.
    let window =
        [format!("Start={outside_hour}:00:00"), format!("End={outside_hour}:00:00"), format!("Jobs={outside},")];
    let mut real = j.as_user("sreport");
    real.args(["-P", "-n", "job", "SizesByAccount", "PrintJobCount"]).args(&window);
    let text = String::from_utf8_lossy(&real.output().expect("sreport").stdout).into_owned();
    assert_eq!(text.split('|').nth(2), Some("1"), "sreport outside the jail counts the outside job: {text}");
}

/// The hour a job started in, as sacct (outside the jail) prints it: `2026-11-26T04`.
fn job_start_hour(j: &Jail, job: u32) -> String {
    for _ in 0..50 {
        let out = j.as_user("sacct").args(["-j", &job.to_string(), "-X", "-n", "-P", "-o", "Start"]).output();
        let start = String::from_utf8_lossy(&out.expect("sacct").stdout).trim().to_string();
        if start.len() >= 13 && start.as_bytes()[10] == b'T' {
            return start[..13].to_string();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("job {job} has no start time in sacct")
}

/// A jail for a Slurm test under the Landlock backend (the host has user namespaces: forced).
fn landlock_slurm_jail(name: &str) -> Option<Jail> {
    Some(slurm_jail(name)?.arg("--backend").arg("landlock"))
}

#[test]
fn landlock_a_chaperon_killed_mid_request_gives_the_stub_a_clear_error_and_the_next_call_a_new_one() {
    let Some(j) = landlock_slurm_jail("ll-slurm-kill") else { return };
    kill_the_chaperon_mid_request(j);
}

#[test]
fn landlock_sbatch_wrap_runs_in_the_landlock_jail_on_the_node_and_writes_into_the_project() {
    let Some(j) = landlock_slurm_jail("ll-slurm-submit") else { return };
    let out = j.run(
        "echo stub=$(command -v sbatch); \
         sbatch --wait -o wrap-%j.out --wrap 'echo backend=$AGENT_SANDBOX_BACKEND; echo job=$SLURM_JOB_ID; \
         echo pwd=$(pwd); cat ~/.ssh/id_ed25519; touch ~/escaped 2>/dev/null && echo HOME-WRITTEN; \
         echo tmpdir=$TMPDIR; echo done'; echo rc=$?",
    );
    assert!(out.stdout.contains("rc=0") && out.stdout.contains("Submitted batch job "), "{out}");
    let stub = out.stdout.lines().find_map(|l| l.strip_prefix("stub=")).unwrap_or_default();
    assert!(
        stub.contains("/agent-sandbox/landlock/") && stub.ends_with("/bin/sbatch"),
        "the stub first on PATH: {out}"
    );
    let outs: Vec<_> = std::fs::read_dir(&j.project)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("wrap-"))
        .collect();
    assert_eq!(outs.len(), 1, "the job's output in the project: {out}");
    let text = wait_for_text(&outs[0].path(), "done");
    assert!(text.contains("backend=landlock"), "the job re-entered the Landlock jail on the node: {text}");
    assert!(text.contains(&format!("pwd={}", j.project.display())), "{text}");
    assert!(!text.contains("job=\n"), "the job sees its id: {text}");
    assert!(text.contains("Permission denied") && !text.contains(SSH_CANARY), "hidden paths stay hidden: {text}");
    assert!(!text.contains("HOME-WRITTEN") && !j.rig.home.join("escaped").exists(), "{text}");
    assert!(text.contains("/agent-sandbox/landlock/") && !text.contains("tmpdir=/tmp"), "a private TMPDIR: {text}");
}

#[test]
fn landlock_squeue_and_scancel_are_scoped_like_the_userns_jails() {
    let Some(j) = landlock_slurm_jail("ll-slurm-scope") else { return };
    let outside = j.as_user("sbatch").args(["--parsable", "--hold", "--wrap", "true"]).output().expect("sbatch");
    let outside: u32 = String::from_utf8_lossy(&outside.stdout).trim().parse().expect("outside job id");
    let out = j.run(&format!(
        "id=$(sbatch --parsable --hold --wrap true); echo mine=$id; squeue -h -o %i; \
         scontrol show job {outside}; echo show=$?; scancel {outside}; echo cancel=$?; scancel $id; echo own=$?"
    ));
    let _ = Command::new("scancel").arg(outside.to_string()).status();
    let mine = out.stdout.lines().find_map(|l| l.strip_prefix("mine=")).unwrap_or_else(|| panic!("no job id: {out}"));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(mine.trim().parse::<u32>().is_ok() && lines.contains(&mine.trim()), "own job visible: {out}");
    assert!(!lines.contains(&outside.to_string().as_str()), "the outside job is invisible: {out}");
    for want in ["show=1", "cancel=1", "own=0"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
}

#[test]
fn landlock_the_real_sbatch_by_absolute_path_fails_and_submits_nothing() {
    let Some(j) = landlock_slurm_jail("ll-slurm-real") else { return };
    let real = Command::new("sh").args(["-c", "command -v sbatch"]).output().expect("sh");
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    assert!(real.starts_with('/'), "sbatch on the host's PATH");
    let out = j.run(&format!(
        "{real} --wrap 'touch escaped'; echo rc=$?; id=$(sbatch --parsable --hold --wrap true) && echo stub=ok; scancel $id"
    ));
    assert!(out.stdout.contains("stub=ok"), "sbatch on PATH is the stub, and it works: {out}");
    assert!(out.stdout.contains("rc=") && !out.stdout.contains("rc=0"), "{out}");
    assert!(!out.stdout.contains("Submitted"), "{out}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(queue_ids_in(Some(&j.project)).is_empty(), "a job appeared: {out}");
    assert!(!j.project.join("escaped").exists());
}

#[test]
fn landlock_garbage_and_foreign_descriptors_on_the_slurm_channel_are_refused_and_serving_goes_on() {
    use std::os::fd::OwnedFd;
    let Some(j) = landlock_slurm_jail("ll-slurm-garbage") else { return };
    // The jail's stdin: a unix stream socket connected to a process outside the session.
    let (outside, stdin) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let mut c = j.command(&[
        "-q",
        "run",
        "--",
        "sh",
        "-c",
        "python3 -c \"
import array, os, socket
fd = int(os.environ['AGENT_SANDBOX_SLURM_FD'])
ch = socket.socket(fileno=os.dup(fd))
ch.settimeout(10)
def send(label, data, fds):
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', fds))] if fds else []
    ch.sendmsg([data], anc)
    try:
        reply = ch.recv(65536)
    except OSError as e:
        reply = repr(e).encode()
    print(label, 'refused' if b'refused on the Slurm channel' in reply else reply)
r, w = os.pipe()
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
x, y = socket.socketpair()
send('garbage', b'GET / HTTP/1.1', [])
send('empty', b'', [])
send('pipe', b'C', [w])
send('seqpacket', b'C', [a.fileno()])
send('two', b'C', [x.fileno(), y.fileno()])
send('channel', b'C', [fd])
send('outside', b'C', [0])
# A stream pair of this session passes: garbage on it closes that connection only.
ch.sendmsg([b'C'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [x.fileno()]))])
x.close()
y.settimeout(10)
try:
    y.sendall(b'not a request')
    y.shutdown(socket.SHUT_WR)
    print('stream-garbage', 'closed' if y.recv(100) == b'' else 'answered')
except ConnectionResetError:
    print('stream-garbage', 'closed')
\"; squeue -h >/dev/null; echo squeue=$?; id=$(sbatch --parsable --hold --wrap true) && echo submitted && scancel $id",
    ]);
    c.stdin(std::process::Stdio::from(OwnedFd::from(stdin)));
    let out = c.output().expect("run the jail");
    drop(outside);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    for case in ["garbage", "empty", "pipe", "seqpacket", "two", "channel", "outside"] {
        assert!(stdout.contains(&format!("{case} refused\n")), "{case} gets an error: {all}");
    }
    assert!(stdout.contains("stream-garbage closed"), "the connection is closed, nothing run: {all}");
    assert!(stdout.contains("squeue=0") && stdout.contains("submitted"), "the chaperon keeps serving: {all}");
}

#[test]
fn landlock_a_channel_flooded_with_garbage_is_closed_and_the_log_keeps_its_bounds() {
    // Issue 33, finding 2: every bad message on the channel was audited without a limit, and
    // the session could flush every earlier record of the user's log in seconds.
    let Some(j) = landlock_slurm_jail("ll-slurm-flood") else { return };
    let log = j.rig.home.join(".local/state/agent-sandbox/audit.jsonl");
    let before = std::fs::read_to_string(&log).unwrap_or_default().lines().count();
    let out = j.run(
        "squeue -h >/dev/null; echo first=$?; python3 -c \"
import os, socket
ch = socket.socket(fileno=os.dup(int(os.environ['AGENT_SANDBOX_SLURM_FD'])))
ch.settimeout(2)
sent = 0
for i in range(5000):
    try:
        ch.sendmsg([b'x' * 60])
        sent += 1
    except OSError:
        break
print('sent', sent)
\"; sleep 1; squeue -h >/dev/null 2>&1; echo after=$?",
    );
    assert!(out.stdout.contains("first=0"), "{out}");
    assert!(!out.stdout.contains("after=0"), "the flooded channel serves no more: {out}");
    let records: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .skip(before)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let refused = records.iter().filter(|r| r["program"] == "channel" && r["decision"] == "denied").count();
    assert!(refused <= 65, "refusals audited without a bound: {refused}");
    assert!(records.iter().any(|r| r["program"] == "channel" && r["decision"] == "closed"), "{records:?}");
}

#[test]
fn landlock_a_python_subprocess_that_closed_the_channel_still_reaches_slurm() {
    // Python's subprocess closes every inherited descriptor (close_fds): the stub borrows the
    // session keeper's copy of the channel instead.
    let Some(j) = landlock_slurm_jail("ll-slurm-python") else { return };
    let out = j.run(
        "python3 -c \"
import subprocess
run = lambda *a: subprocess.run(list(a), capture_output=True, text=True)
print('fd', run('sh', '-c', 'test -e /proc/self/fd/$AGENT_SANDBOX_SLURM_FD && echo open || echo closed').stdout.strip())
r = run('sbatch', '--parsable', '--hold', '--wrap', 'true')
print('sbatch', r.returncode, r.stderr.strip())
jid = r.stdout.strip()
print('visible', jid in run('squeue', '-h', '-o', '%i').stdout.split())
print('scancel', run('scancel', jid).returncode)
\"",
    );
    for want in ["fd closed", "sbatch 0", "visible True", "scancel 0"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
}

/// Every slurmd log of the test cluster (both nodes), as one text.
fn slurmd_logs() -> String {
    let dir = Path::new("/var/log/agent-sandbox-testcluster");
    let mut text = String::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("slurmd") && name.ends_with(".log") {
            text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    text
}

/// A job's state in accounting once it ended (polled: slurmdbd learns of the end later).
fn final_state(id: u32) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new("sacct").args(["-X", "-n", "-P", "-o", "State", "-j", &id.to_string()]).output();
        let state = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
        let done = ["COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY"];
        if done.iter().any(|d| state.starts_with(d)) || Instant::now() > deadline {
            return state;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_spank_belt_refuses_a_tagged_task_that_does_not_enter_the_jail() {
    let Some(j) = slurm_jail("slurm-spank") else { return };
    let help = Command::new("sbatch").arg("--help").output().expect("sbatch --help");
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("--agent-sandbox="),
        "the SPANK plugin is not in the test cluster's plugstack.conf (tests/run.sh puts it there)"
    );
    // On the first node, whose marks are this host's /run (n2 has its own).
    let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
    let submit = |args: &[&str]| -> u32 {
        let out = j.as_user("sbatch").args(["--parsable", "-w", host.trim()]).args(args).output().expect("sbatch");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        text.parse().unwrap_or_else(|_| panic!("sbatch {args:?}: {text} {}", String::from_utf8_lossy(&out.stderr)))
    };
    let fake_dir = j.project.join("not-a-job-dir");
    let tag = format!("--agent-sandbox={}", fake_dir.display());
    // On the host, outside any jail: a job tagged as sandboxed whose script runs a command
    // directly fails closed; the same job untagged runs.
    let tagged = submit(&[&tag, "-o", "tagged.out", "--wrap", "echo RAN > tagged-ran"]);
    let plain = submit(&["-o", "plain.out", "--wrap", "echo RAN > plain-ran"]);
    assert_eq!(final_state(tagged), "FAILED", "the tagged job");
    assert_eq!(final_state(plain), "COMPLETED", "the untagged job");
    assert!(!j.project.join("tagged-ran").exists(), "the tagged job's command ran");
    assert!(j.project.join("plain-ran").exists(), "the untagged job's command did not run");
    let said = std::fs::read_to_string(j.project.join("tagged.out")).unwrap_or_default();
    assert!(said.contains("agent-sandbox (SPANK)") && said.contains("refused"), "the job's stderr: {said}");
    assert!(slurmd_logs().contains(&format!("(--agent-sandbox={})", fake_dir.display())), "slurmd's log says it");
    // A step, likewise: tagged, it is refused; untagged it runs.
    let step = j.as_user("srun").args([tag.as_str(), "-n1", "true"]).output().expect("srun");
    assert!(!step.status.success(), "a tagged step ran: {}", String::from_utf8_lossy(&step.stderr));
    let step = j.as_user("srun").args(["-n1", "true"]).output().expect("srun");
    assert!(step.status.success(), "an untagged step failed: {}", String::from_utf8_lossy(&step.stderr));
    // From the jail: the chaperon tags every job and step, the tasks enter the jail and run;
    // the jail can neither give the option itself nor drop it (its environment never reaches
    // the real sbatch).
    let out = j.run(
        "id=$(SLURM_SPANK__SLURM_SPANK_OPTION_agent_sandbox_agent_sandbox= sbatch --parsable --wait -o in.out \
           --wrap 'srun -n1 sh -c \"echo step-in-jail=$(hostname)\"; echo batch-in-jail=$(hostname)'); echo id=$id; \
         sbatch --agent-sandbox=/tmp --wrap true; echo own-tag=$?; srun --agent-sandbox=/tmp true; echo own-step-tag=$?",
    );
    let id = printed_job_id(&out, "id=");
    assert!(out.stdout.contains("own-tag=1") && out.stdout.contains("own-step-tag=1"), "{out}");
    let text = wait_for_text(&j.project.join("in.out"), "batch-in-jail");
    assert!(text.contains("step-in-jail=agent-sandbox") && text.contains("batch-in-jail=agent-sandbox"), "{text}");
    assert_eq!(final_state(id), "COMPLETED", "{out}");
    let logs = slurmd_logs();
    assert!(logs.contains(&format!("job {id}: the task enters the jail")), "the belt saw the sandboxed job's tasks");
    // A step started in a running sandboxed job from outside the jail, without the tag:
    // refused too (the job's prolog marked it on the node).
    let out = j.run("sbatch --parsable -o long.out --wrap 'sleep 60'");
    let long: u32 = out.stdout.trim().parse().unwrap_or_else(|_| panic!("{out}"));
    wait_running(long);
    let step = j.as_user("srun").args([&format!("--jobid={long}"), "--overlap", "-n1", "true"]).output().expect("srun");
    let said = String::from_utf8_lossy(&step.stderr).into_owned();
    let _ = Command::new("scancel").arg(long.to_string()).status();
    assert!(!step.status.success(), "an untagged step ran in a sandboxed job: {said}");
    assert!(said.contains("without the tag"), "the step's stderr says why: {said}");
}

/// Until the job `id` runs (60 s at most).
fn wait_running(id: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !Command::new("squeue")
        .args(["-h", "-t", "R", "-o", "%i", "-j", &id.to_string()])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == id.to_string())
    {
        assert!(Instant::now() < deadline, "job {id} never ran");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Issue 33, finding 6: the belt marks a sandboxed job on every node of it at allocation
/// (PrologFlags=Alloc, which the plugin requires on the nodes), so a step started without the
/// tag, from outside the jail, is refused on a node where none of the job's steps ran before:
/// n2 (whose marks are its own), of a two-node job whose batch script runs on the first node.
/// Without Alloc the prolog there runs with the SPANK options the step's launch request
/// carries; the real srun of Slurm 22.05 carries the job's here, so this passes without Alloc
/// too: what fails without it is `the_belt_refuses_to_run_on_a_node_without_prolog_flags_alloc`.
#[test]
fn an_untagged_first_step_on_another_node_of_a_sandboxed_job_is_refused() {
    let Some(j) = slurm_jail("slurm-spank-alloc") else { return };
    let out = j.run("sbatch --parsable -N2 -o long.out --wrap 'sleep 60'");
    let long: u32 = out.stdout.trim().parse().unwrap_or_else(|_| panic!("{out}"));
    wait_running(long);
    let step = j
        .as_user("srun")
        .args([&format!("--jobid={long}"), "--overlap", "-w", "n2", "-N1", "-n1", "sh", "-c", "echo RAN > n2-ran"])
        .output()
        .expect("srun");
    let said = String::from_utf8_lossy(&step.stderr).into_owned();
    let _ = Command::new("scancel").arg(long.to_string()).status();
    assert!(!step.status.success(), "an untagged first step on n2 ran in a sandboxed job: {said}");
    assert!(!j.project.join("n2-ran").exists(), "its command ran");
    assert!(said.contains("without the tag"), "the step's stderr says why: {said}");
}

/// Issue 33, finding 6: without `PrologFlags=Alloc` (or `Contain`) a job's prolog runs on a node
/// only with the first step there, so the belt's mark would depend on that step carrying the
/// tag: the plugin refuses to run on such a node. A slurmd of its own (this host's munge, a
/// configuration and ports of its own, no controller: slurmd loads its plugins before it calls
/// one) does not start, and says what to set; with `PrologFlags=Alloc` it starts.
#[test]
fn the_belt_refuses_to_run_on_a_node_without_prolog_flags_alloc() {
    let Some(j) = slurm_jail("slurm-spank-flags") else { return };
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm-plugins/agent_sandbox.so");
    assert!(plugin.is_file(), "the plugin is built (make -C slurm-plugins; tests/run.sh does)");
    let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
    let dir = Path::new("/tmp").join(format!("asb-spank-flags-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("spool")).unwrap();
    std::fs::write(dir.join("plugstack.conf"), format!("required {} exe={}\n", plugin.display(), j.rig.bin.display()))
        .unwrap();
    let slurmd = |flags: &str| {
        let conf = dir.join("slurm.conf");
        let d = dir.display();
        std::fs::write(
            &conf,
            format!(
                "ClusterName=spankflags\nSlurmctldHost={h}(127.0.0.1)\nSlurmctldPort=6897\nSlurmdPort=6896\n\
                 SlurmUser=root\nAuthType=auth/munge\nCredType=cred/munge\nSlurmdSpoolDir={d}/spool\n\
                 SlurmdPidFile={d}/slurmd.pid\nPlugStackConfig={d}/plugstack.conf\nProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\nSlurmdParameters=config_overrides\n{flags}\n\
                 NodeName={h} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100\nPartitionName=p Nodes={h} Default=YES\n",
                h = host.trim()
            ),
        )
        .unwrap();
        let mut child = Command::new("/usr/sbin/slurmd")
            .args(["-D", "-f", conf.to_str().unwrap(), "-N", host.trim()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("slurmd");
        // Refused within seconds (it loads its plugins before anything else); started, it
        // goes on waiting for a controller: ended here after 8 s.
        let deadline = Instant::now() + Duration::from_secs(8);
        let ended = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let out = child.wait_with_output().unwrap();
        (ended, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ended, said) = slurmd("");
    assert!(ended.is_some_and(|s| !s.success()), "a slurmd without PrologFlags=Alloc started: {said}");
    assert!(
        said.contains("agent-sandbox (SPANK): PrologFlags has neither Alloc nor Contain")
            && said.contains("set PrologFlags=Alloc (or Contain) in slurm.conf"),
        "slurmd's log says why and what to set: {said}"
    );
    let (ended, said) = slurmd("PrologFlags=Alloc");
    assert!(ended.is_none(), "a slurmd with PrologFlags=Alloc did not start: {said}");
    assert!(!said.contains("agent-sandbox (SPANK)"), "{said}");
    let (ended, said) = slurmd("PrologFlags=Contain");
    assert!(ended.is_none() && !said.contains("agent-sandbox (SPANK)"), "with Contain: {said}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 33, finding 6: a mark a missed epilog left (a job id Slurm gives again) blocks no later
/// job of that id. Each job's prolog replaces or removes the mark of its id on its nodes, and a
/// mark names its job's user: one of another user's, found in a task, neither blocks nor admits.
/// Before, a later job with that id, of any user, had every task refused.
#[test]
fn a_stale_mark_of_a_job_id_blocks_no_later_job_of_that_id() {
    let Some(j) = slurm_jail("slurm-spank-stale") else { return };
    let marks = Path::new("/run/agent-sandbox-spank");
    std::fs::create_dir_all(marks).expect("the marks' directory");
    let plant = |id: u32, uid: u32| std::fs::write(marks.join(id.to_string()), format!("{uid}\n/nowhere\n")).unwrap();
    // On the first node, whose marks are this host's /run (n2 has its own).
    let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
    let submit = |args: &[&str]| -> u32 {
        let out = j.as_user("sbatch").args(["--parsable", "-w", host.trim()]).args(args).output().expect("sbatch");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        text.parse().unwrap_or_else(|_| panic!("sbatch {args:?}: {text} {}", String::from_utf8_lossy(&out.stderr)))
    };
    // A job outside any jail, held while the mark of its id an earlier sandboxed job of the same
    // user left is planted: its prolog removes it, and the job and its step run.
    let held = submit(&["--hold", "-o", "held.out", "--wrap", "srun -n1 sh -c 'echo step-ran'; echo batch-ran"]);
    plant(held, j.rig.uid);
    assert!(Command::new("scontrol").args(["release", &held.to_string()]).status().unwrap().success());
    assert_eq!(
        final_state(held),
        "COMPLETED",
        "{}",
        std::fs::read_to_string(j.project.join("held.out")).unwrap_or_default()
    );
    let said = std::fs::read_to_string(j.project.join("held.out")).unwrap_or_default();
    assert!(said.contains("step-ran") && said.contains("batch-ran"), "{said}");
    assert!(!marks.join(held.to_string()).exists(), "the stale mark is gone");
    // Another user's mark of a running job's id, planted once its batch script runs (after
    // its prolog, which would remove it): its step runs.
    let running = submit(&[
        "-o",
        "running.out",
        "--wrap",
        "touch started; while [ ! -e go ]; do sleep 0.2; done; srun -n1 sh -c 'echo step-ran'",
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !j.project.join("started").exists() {
        assert!(Instant::now() < deadline, "job {running} never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    plant(running, 0);
    std::fs::write(j.project.join("go"), "").unwrap();
    let state = final_state(running);
    let _ = std::fs::remove_file(marks.join(running.to_string()));
    let said = std::fs::read_to_string(j.project.join("running.out")).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{said}");
    assert!(said.contains("step-ran"), "{said}");
    assert!(slurmd_logs().contains(&format!("job {running}: the mark")), "slurmd's log names the mark it ignored");
}

/// Issue 33, finding 6: the chaperon learns from `sbatch --help` whether the site has the belt
/// (and then tags every job and step). Where that fails or does not answer, nothing is
/// submitted (a job without the tag would run its tasks unchecked on the nodes): one line says
/// why and the refusal is audited. The admin's Slurm here is a root-owned directory first on
/// PATH whose sbatch fails `--help` (then never answers it) and submits otherwise, logging
/// every call; the other commands are the real ones.
#[test]
fn nothing_is_submitted_where_slurm_cannot_say_whether_it_takes_the_belt() {
    let Some(j) = slurm_jail("slurm-belt-unknown") else { return };
    let bin = Path::new("/tmp").join(format!("asb-belt-unknown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir(&bin).expect("the admin's Slurm directory");
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap();
    mode(&bin, 0o755);
    let calls = bin.join("calls");
    std::fs::write(&calls, "").unwrap();
    mode(&calls, 0o666);
    for c in ["sacct", "sacctmgr", "salloc", "sattach", "sbcast", "scancel", "scontrol", "sdiag", "sinfo", "sprio"]
        .into_iter()
        .chain(["squeue", "sreport", "srun", "sshare", "sstat", "strigger"])
    {
        std::os::unix::fs::symlink(Path::new("/usr/bin").join(c), bin.join(c)).unwrap();
    }
    let sbatch = bin.join("sbatch");
    let answer = |help: &str| {
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> {}\ncase \"$1\" in --help) {help} ;; esac\nexec /usr/bin/sbatch \"$@\"\n",
            calls.display()
        );
        std::fs::write(&sbatch, script).unwrap();
        mode(&sbatch, 0o755);
    };
    // This host's plugstack.conf names the belt, which answers without asking sbatch: the
    // cluster's slurm.conf is read from a copy beside no plugstack.conf, so only sbatch can say.
    let conf = bin.join("slurm.conf");
    std::fs::copy("/etc/slurm/slurm.conf", &conf).expect("a copy of slurm.conf");
    mode(&conf, 0o644);
    let nonce = format!("belt-unknown-{}", std::process::id());
    let j = j
        .env("PATH", &format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()))
        .env("SLURM_CONF", &conf.display().to_string());
    let line = "cannot tell whether this cluster's Slurm takes the node belt's --agent-sandbox";
    answer("exit 1");
    let out = j.run(&format!(
        "sbatch -J {nonce} -o x.out --wrap true; echo sbatch=$?; srun -J {nonce} true; echo srun=$?; \
         salloc -J {nonce} true; echo salloc=$?"
    ));
    for c in ["sbatch", "srun", "salloc"] {
        assert!(out.stdout.contains(&format!("{c}=1")), "{c} was refused: {out}");
    }
    assert_eq!(out.stderr.matches(line).count(), 3, "one line each: {out}");
    assert!(out.stderr.contains("nothing submitted"), "{out}");
    let called = std::fs::read_to_string(&calls).unwrap();
    // Asked whether it takes the belt, and which release it is (the chaperon learns it once):
    // never given a job.
    assert!(
        called.lines().all(|l| l == "--help" || l == "--version") && called.lines().any(|l| l == "--help"),
        "sbatch was only asked: {called}"
    );
    // Issue 35: the release is asked once per host and kept for this very sbatch, so a call
    // waiting for the session's own question asks nothing again, nor does the next session.
    let versions = |c: &str| c.lines().filter(|l| *l == "--version").count();
    assert_eq!(versions(&called), 1, "asked its release once: {called}");
    let out = j.run("squeue -h -j 1 >/dev/null 2>&1; echo squeue=$?");
    assert!(out.stdout.contains("squeue="), "{out}");
    let again = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(versions(&again), 1, "the next session asked again: {again}");
    let log = j.as_user(&j.rig.bin).args(["log", "--json"]).output().expect("log");
    let log = String::from_utf8_lossy(&log.stdout).into_owned();
    let refused: Vec<&str> =
        log.lines().filter(|l| l.contains(&nonce) && l.contains("\"denied\"") && l.contains(line)).collect();
    assert_eq!(refused.len(), 3, "each refusal audited: {log}");
    // An sbatch that never answers: refused once the question times out (20 s).
    answer("exec sleep 120");
    let started = Instant::now();
    let out =
        j.output_within(&mut j.command(&["-q", "run", "--", "sbatch", "--wrap", "true"]), Duration::from_secs(90));
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stderr.contains(line) && out.stderr.contains("did not finish within 20 s"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(35), "one bound of 20 s: {:?} {out}", started.elapsed());
    let called = std::fs::read_to_string(&calls).unwrap();
    assert!(called.lines().all(|l| l == "--help" || l == "--version"), "sbatch was only asked: {called}");
    let _ = std::fs::remove_dir_all(&bin);
}

#[test]
fn ten_sessions_in_sibling_projects_see_and_touch_only_their_own_jobs() {
    // Each session submits a held job, then lists what it sees and tries to cancel the job of
    // the next session (whose id it is given through a file the test relays: the jails cannot
    // read each other's projects).
    let Some(jails) = (0..10).map(|i| slurm_jail(&format!("slurm-ten-{i}"))).collect::<Option<Vec<Jail>>>() else {
        return;
    };
    let submit: Vec<std::process::Child> = jails
        .iter()
        .map(|j| {
            let mut c = j.command(&["-q", "run", "--", "sh", "-c", "sbatch --parsable --hold -J ten --wrap true > id"]);
            c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    for c in submit {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let ids: Vec<u32> = jails
        .iter()
        .map(|j| std::fs::read_to_string(j.project.join("id")).unwrap().trim().parse().expect("a job id"))
        .collect();
    let look: Vec<std::process::Child> = jails
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let other = ids[(i + 1) % ids.len()];
            let script = format!("squeue -h -o %i | sort; scancel {other}; echo cancel-other=$?");
            let mut c = j.command(&["-q", "run", "--", "sh", "-c", &script]);
            c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    for (i, c) in look.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let seen: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        assert_eq!(seen, [ids[i]], "session {i} sees its own job only: {text}");
        assert!(text.contains("cancel-other=1"), "session {i} cancelled another project's job: {text}");
    }
    let queue = queue_ids();
    assert!(ids.iter().all(|id| queue.contains(id)), "every job survived the others' cancels");
    let _ = Command::new("scancel").args(ids.iter().map(u32::to_string)).status();
}

/// `--job-port`: a server in the jail on the login node, which the project's jobs reach from
/// both nodes of the test cluster at the address the jail was given. A connection from a node
/// that runs no job of the project (n2's network with nothing of ours running there, the
/// login node itself, a job of the user's outside the project) is refused and audited, and
/// another user's from the login node is closed before the challenge; the listener closes with
/// the session.
#[test]
fn job_ports_admit_only_nodes_running_the_projects_jobs() {
    let Some(j) = slurm_jail("slurm-job-port") else { return };
    let j = j
        .project_file("echo_server.py", include_str!("slurm/echo_server.py"))
        .project_file("echo_client.py", include_str!("slurm/echo_client.py"));
    let n2_net = "/run/netns/asbtc-n2";
    assert!(Path::new(n2_net).exists(), "the test cluster has no second node: tests/cluster/start.sh --two-nodes");
    let host = String::from_utf8_lossy(&Command::new("hostname").arg("-s").output().expect("hostname").stdout)
        .trim()
        .to_string();
    // The session serves, says where, waits for the test's probes, then runs a job on each node
    // that connects to the address it was given.
    let script = format!(
        "echo $AGENT_SANDBOX_SESSION > session; python3 echo_server.py 8786 & \
         echo $AGENT_SANDBOX_JOB_PORT_8786 > addr.tmp && mv addr.tmp addr; \
         n=0; while [ ! -e go ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done; \
         for node in n2 {host}; do sbatch --wait -w $node -o job-$node.out --wrap \"python3 echo_client.py $(cat addr)\"; done; \
         sbatch -w n2 -o late.out --wrap \"while [ ! -e late-go ]; do sleep 0.2; done; python3 echo_client.py $(cat addr)\"; \
         kill %1"
    );
    let addr_file = j.project.join("addr");
    std::thread::scope(|s| {
        let session = s.spawn(|| {
            let mut c = j.command(&["-q", "--job-port", "8786", "run", "--", "sh", "-c", &script]);
            j.output_within(&mut c, Duration::from_secs(120))
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while !addr_file.exists() {
            assert!(Instant::now() < deadline && !session.is_finished(), "the session never said its address");
            std::thread::sleep(Duration::from_millis(50));
        }
        let addr = std::fs::read_to_string(&addr_file).expect("addr").trim().to_string();
        assert!(addr.starts_with("203.0.113.1:"), "the job port listens on the cluster address: {addr}");
        let client = j.project.join("echo_client.py");
        outsiders_get_nothing(&j, &client, &addr, n2_net);
        std::fs::write(j.project.join("go"), "").expect("go");
        let out = session.join().expect("session thread");
        for node in ["n2", host.as_str()] {
            let said = std::fs::read_to_string(j.project.join(format!("job-{node}.out"))).unwrap_or_default();
            assert!(said.contains("reply=echo:ping"), "the project's job on {node}: {said}\n{out}");
        }
        // Closed with the session.
        let after = Command::new("nsenter")
            .args([&format!("--net={n2_net}"), "python3"])
            .arg(&client)
            .arg(&addr)
            .output()
            .expect("nsenter");
        assert_eq!(String::from_utf8_lossy(&after.stdout).trim(), "error=ConnectionRefusedError");
        // Another user takes the address and port once the session is gone: the session's job
        // still running reaches it, and its supervisor refuses what answers (no proof).
        let impostor = std::net::TcpListener::bind(&addr).expect("the impostor binds the session's old port");
        let serve = std::thread::spawn(move || {
            use std::io::{Read, Write};
            if let Ok((mut c, _)) = impostor.accept() {
                // More than a proof's length: what a job takes for one must not pass.
                let _ = c.write_all(&b"evil-scheduler ".repeat(5));
                let mut buf = [0u8; 64];
                let _ = c.read(&mut buf);
            }
        });
        std::fs::write(j.project.join("late-go"), "").expect("late-go");
        let late = wait_for_text(&j.project.join("late.out"), "=");
        let _ = serve.join();
        assert!(!late.contains("evil") && late.contains("error="), "a job reached an impostor: {late}");
        each_refusal_is_audited(&j);
    });
}

/// Connections to the job port from where no job of the project runs (n2's network, the login
/// node as the user and as root, a job of the user's outside the project) never reach the
/// jail's server.
fn outsiders_get_nothing(j: &Jail, client: &Path, addr: &str, n2_net: &str) {
    let from_n2 = Command::new("nsenter")
        .args([&format!("--net={n2_net}"), "python3"])
        .arg(client)
        .arg(addr)
        .output()
        .expect("nsenter");
    let from_login = j.as_user("python3").arg(client).arg(addr).output().expect("python3");
    let from_root = Command::new("python3").arg(client).arg(addr).output().expect("python3");
    let foreign = j
        .as_user("sbatch")
        .args(["--wait", "-w", "n2", "-o", "foreign.out", "--wrap"])
        .arg(format!("python3 {} {addr}", client.display()))
        .output()
        .expect("sbatch");
    assert!(foreign.status.success(), "{}", String::from_utf8_lossy(&foreign.stderr));
    for (who, out) in
        [("n2 without a job", from_n2.stdout), ("the login node", from_login.stdout), ("root", from_root.stdout)]
    {
        let out = String::from_utf8_lossy(&out).into_owned();
        // At most the listener's challenge (random bytes), never the jail's server.
        assert!(!out.contains("echo:"), "{who} got through: {out}");
    }
    let foreign = std::fs::read_to_string(j.project.join("foreign.out")).unwrap_or_default();
    assert!(!foreign.contains("echo:"), "a job outside the project got through: {foreign}");
}

/// Each refusal at the job port is one audit record that says who and why.
fn each_refusal_is_audited(j: &Jail) {
    let session_id = std::fs::read_to_string(j.project.join("session")).unwrap_or_default();
    let log = j.as_user(&j.rig.bin).args(["log", "--json", "--session", session_id.trim()]).output().expect("log");
    let refusals: Vec<String> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter(|l| l.contains("\"check\":\"job_port\""))
        .map(str::to_owned)
        .collect();
    for from in ["from 203.0.113.2:", "from 203.0.113.1:"] {
        assert!(refusals.iter().any(|r| r.contains(from) && r.contains("proof")), "no refusal {from}: {refusals:#?}");
    }
    assert!(
        refusals.iter().any(|r| r.contains("from 203.0.113.1:") && r.contains("another user's connection (uid 0)")),
        "root's connection from the login node, closed before the challenge: {refusals:#?}"
    );
    assert!(refusals.len() >= 4, "n2, the login node, root and the foreign job: {refusals:#?}");
}

/// The session network: the jails of one session, on the login node and in its jobs on both
/// nodes, reach one another's ports and see one another's addresses, and nothing else reaches
/// them. `mpirun` (Open MPI) inside `salloc -N2` starts its daemons through the srun stub; they
/// call back to mpirun in the session's jail, and an MPI program's ranks on the two nodes
/// exchange 4 MiB each and reduce. A job's server answers the session (as a Dask scheduler
/// calls its workers) and another job, each seen from its own jail address; another session
/// of the same user, and a connection from the host without the session's proof, are refused
/// and audited; a job's address is given back when it ends.
#[test]
fn the_session_network_joins_one_sessions_jails_and_nothing_else() {
    let Some(j) = slurm_jail("slurm-peers") else { return };
    for tool in ["/usr/bin/mpirun", "/usr/lib/python3/dist-packages/mpi4py"] {
        assert!(Path::new(tool).exists(), "{tool} is missing: tests/run.sh installs openmpi-bin and python3-mpi4py");
    }
    let host = String::from_utf8_lossy(&Command::new("hostname").arg("-s").output().expect("hostname").stdout)
        .trim()
        .to_string();
    let j = j
        .project_file("peer_server.py", include_str!("slurm/peer_server.py"))
        .project_file("echo_client.py", include_str!("slurm/echo_client.py"))
        .project_file("mpi_ring.py", include_str!("slurm/mpi_ring.py"));
    let script = format!(
        "echo $AGENT_SANDBOX_SESSION > session; hostname -I > session-ip; \
         salloc -N2 -n4 mpirun -np 4 python3 mpi_ring.py > ring.out 2>&1; echo mpirun_rc=$? >> ring.out; \
         sbatch --wait -N2 -n4 -o ring-batch.out --wrap 'mpirun -np 4 python3 mpi_ring.py'; \
         sbatch -w n2 -o server.out --wrap 'python3 peer_server.py 7000 served' | tr -dc 0-9 > server-job; \
         n=0; while [ ! -s served ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done; \
         n=0; while [ ! -e flood-on ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done; \
         python3 echo_client.py $(cat served) > from-session.out; \
         sbatch --wait -w {host} -o from-job.out --wrap \"python3 echo_client.py $(cat served)\"; \
         python3 echo_client.py 169.254.200.200:80 > stale.out; \
         touch calls-done; n=0; while [ ! -e test-done ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done"
    );
    let p = |f: &str| j.project.join(f);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let session = s.spawn(|| {
            let mut c = j.command(&["-q", "run", "--", "sh", "-c", &script]);
            j.output_within(&mut c, Duration::from_secs(150))
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        while !p("served").exists() {
            assert!(Instant::now() < deadline && !session.is_finished(), "the job never served");
            std::thread::sleep(Duration::from_millis(100));
        }
        let session_id = std::fs::read_to_string(p("session")).unwrap_or_default().trim().to_string();
        let served = std::fs::read_to_string(p("served")).unwrap_or_default().trim().to_string();
        let (job_ip, _) = served.rsplit_once(':').unwrap_or_else(|| panic!("the job said no address: {served:?}"));
        let registry = j.rig.home.join(".local/state/agent-sandbox/net").join(&session_id);
        let job_listener: std::net::SocketAddr = std::fs::read_to_string(registry.join(job_ip))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no registry entry for {job_ip}"));
        // Both calls to the job are made under a flood of silent connections to its listener:
        // from the login node's address (the one the session's and the other job's calls come
        // from) and from eight loopback addresses (another user on the node).
        let stop = &stop;
        let flood = s.spawn(move || silent_flood(job_listener, stop));
        // An entry whose jail died with its cleanup (SIGKILL to its process group): nothing
        // listens where it says. The session's call to it fails and forgets it.
        let stale = registry.join("169.254.200.200");
        std::fs::write(&stale, "203.0.113.2:1\n").expect("a stale entry");
        std::fs::write(p("flood-on"), "").expect("flood-on");
        while !p("calls-done").exists() {
            assert!(Instant::now() < deadline && !session.is_finished(), "the session never finished its calls");
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let flooded = flood.join().expect("flood");
        assert!(flooded > 64, "the flood held its connections: {flooded} opened");
        let stale_call = std::fs::read_to_string(p("stale.out")).unwrap_or_default();
        assert!(stale_call.starts_with("error="), "a call to a dead jail's address: {stale_call}");
        assert!(!stale.exists(), "the dead jail's entry is forgotten");
        // Another session of the same user in the same project: not on this session's network.
        let other = j.run(&format!("python3 echo_client.py {served}"));
        // The host, straight to the job's listener, without the session's proof.
        let listener = job_listener;
        assert_eq!(listener.ip().to_string(), "203.0.113.2", "the job on n2 listens on n2's address");
        // The session's own jail listens on the login node's cluster address, said once it used Slurm.
        let own = std::fs::read_to_string(p("session-ip")).unwrap_or_default();
        let own = own.split_whitespace().next().unwrap_or("").to_string();
        let entry = std::fs::read_to_string(registry.join(&own)).unwrap_or_default();
        assert!(entry.starts_with("203.0.113.1:"), "the session's entry for {own}: {entry:?}");
        let raw = unproved_connection(listener);
        std::fs::write(p("stop"), "").expect("stop");
        std::fs::write(p("test-done"), "").expect("test-done");
        let out = session.join().expect("session thread");
        mpi_rings_ran_on_both_nodes(&j, &host, &out);
        calls_came_from_each_jails_own_address(&j, job_ip, &other, &raw, &out);
        session_network_refusals_are_audited(&j, job_ip);
        // The job's address goes when it does.
        let job = std::fs::read_to_string(p("server-job")).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(30);
        while registry.join(job_ip).exists() {
            assert!(Instant::now() < deadline, "job {job}'s address stayed claimed after it ended");
            std::thread::sleep(Duration::from_millis(200));
        }
    });
}

/// What the job's listener answers a connection from the host that does not prove the
/// session's secret (200 bytes of garbage).
fn unproved_connection(listener: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(listener).expect("the job's listener");
    c.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let _ = c.write_all(&[0x55; 200]);
    let mut got = vec![];
    let _ = c.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

/// Each call on the session network came from its caller's own jail address: the session's
/// to the job, one job's to another; another session of the user, and the host without the
/// session's proof, got nothing.
fn calls_came_from_each_jails_own_address(j: &Jail, job_ip: &str, other: &Out, raw: &str, out: &Out) {
    let p = |f: &str| j.project.join(f);
    let session_ip = std::fs::read_to_string(p("session-ip")).unwrap_or_default();
    let session_ip = session_ip.split_whitespace().next().unwrap_or("").to_string();
    assert!(session_ip.starts_with("169.254.") && job_ip.starts_with("169.254."), "{session_ip} {job_ip}");
    assert_ne!(session_ip, job_ip);
    let from_session = std::fs::read_to_string(p("from-session.out")).unwrap_or_default();
    assert_eq!(from_session.trim(), format!("reply=echo:ping from={session_ip}"), "the session called the job\n{out}");
    let from_job = std::fs::read_to_string(p("from-job.out")).unwrap_or_default();
    assert!(from_job.starts_with("reply=echo:ping from=169.254."), "a job called another: {from_job}");
    assert!(!from_job.contains(&session_ip) && !from_job.contains(&format!("from={job_ip}")), "{from_job}");
    assert!(other.stdout.trim().starts_with("error="), "another session reached the job: {other}");
    assert!(!raw.contains("echo:"), "the host reached the job without the proof: {raw:?}");
}

/// Open MPI's ring in `salloc -N2` and in a batch job: four ranks, two on each node, each got
/// 4 MiB from the one before it and the sum of the reduction.
fn mpi_rings_ran_on_both_nodes(j: &Jail, host: &str, out: &Out) {
    let p = |f: &str| j.project.join(f);
    let ring = std::fs::read_to_string(p("ring.out")).unwrap_or_default();
    assert!(ring.contains("mpirun_rc=0"), "mpirun in salloc -N2: {ring}\n{out}");
    let batch = std::fs::read_to_string(p("ring-batch.out")).unwrap_or_default();
    for (how, ring) in [("salloc", &ring), ("a batch job", &batch)] {
        let ranks: Vec<&str> = ring.lines().filter(|l| l.starts_with("rank=")).collect();
        assert_eq!(ranks.len(), 4, "mpirun in {how}: {ring}");
        for r in 0..4 {
            let from = (r + 3) % 4;
            let want = format!("from={from} len=4194304 sum=6");
            assert!(
                ranks.iter().any(|l| l.starts_with(&format!("rank={r}/4 ")) && l.contains(&want)),
                "mpirun in {how}: rank {r} got 4 MiB from rank {from} and the sum: {ring}"
            );
        }
        for node in ["n2", host] {
            assert!(ranks.iter().any(|l| l.contains(&format!("node={node} "))), "{how}: no rank on {node}: {ring}");
        }
    }
}

/// The session network's refusals, audited: the other session's call, the host's connection.
fn session_network_refusals_are_audited(j: &Jail, job_ip: &str) {
    let log = j.as_user(&j.rig.bin).args(["log", "--json"]).output().expect("log");
    let refusals: Vec<String> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter(|l| l.contains("\"check\":\"session_net\""))
        .map(str::to_owned)
        .collect();
    assert!(
        refusals.iter().any(|r| r.contains(&format!("{job_ip}:7000")) && r.contains("no jail of this session")),
        "the other session's call: {refusals:#?}"
    );
    assert!(
        refusals.iter().any(|r| r.contains("from 203.0.113.1:") && r.contains("proof")),
        "the host's connection: {refusals:#?}"
    );
}

/// Waits until each of `files` is in the project, while the session runs.
fn wait_for_files(j: &Jail, files: &[&str], session: &std::thread::ScopedJoinHandle<'_, Out>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !files.iter().all(|f| j.project.join(f).exists()) {
        assert!(Instant::now() < deadline && !session.is_finished(), "{what} never happened");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Where the jail at the address the project file `file` names (`hostname -I`, `IP:PORT`)
/// listens on the host, from its session's registry.
fn registry_listener(j: &Jail, session: &str, file: &str) -> std::net::SocketAddr {
    let said = std::fs::read_to_string(j.project.join(file)).unwrap_or_default();
    let ip = said.split_whitespace().next().unwrap_or("").split(':').next().unwrap_or("").to_string();
    let registry = j.rig.home.join(".local/state/agent-sandbox/net").join(session);
    let entry = std::fs::read_to_string(registry.join(&ip)).unwrap_or_default();
    entry.trim().parse().unwrap_or_else(|_| panic!("the jail at {ip} has no listener: {entry:?}"))
}

/// The session's secret, as its jobs carry it (the frozen policy in a job directory).
fn session_secret(j: &Jail, session: &str) -> String {
    let jobs = j.rig.home.join(".local/state/agent-sandbox/jobs");
    let dirs = std::fs::read_dir(&jobs).expect("the job directories");
    for d in dirs.flatten().filter(|d| d.file_name().to_string_lossy().starts_with(&format!("{session}-"))) {
        let Ok(text) = std::fs::read(d.path().join("job.json")) else { continue };
        let spec: serde_json::Value = serde_json::from_slice(unseal_unchecked(&text).0).expect("job.json");
        let policy: serde_json::Value = serde_json::from_str(spec["policy"].as_str().unwrap_or("{}")).expect("policy");
        if let Some(s) = policy["job_secret"].as_str() {
            return s.to_string();
        }
    }
    panic!("no job directory of session {session} holds its secret");
}

/// `tests/slurm/job_prover.py ADDR` as the test user, with `secret`: `admitted reply=...` or
/// `refused`.
fn prove_as_a_job(j: &Jail, addr: std::net::SocketAddr, secret: &str) -> String {
    use std::io::Write;
    let mut c = j
        .as_user("python3")
        .args(["-c", include_str!("slurm/job_prover.py")])
        .arg(addr.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    c.stdin.take().expect("stdin").write_all(secret.as_bytes()).expect("the secret");
    let out = c.wait_with_output().expect("job_prover.py");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What a connection to `to` receives when it sends 200 bytes (not a proof), as `user`:
/// `LEN ECHOES`, the bytes it got and how many of them are the jail server's `echo:`.
fn unproved(user: &str, to: std::net::SocketAddr) -> String {
    const CLIENT: &str = "import socket, sys\n\
        host, port = sys.argv[1].rsplit(':', 1)\n\
        c = socket.create_connection((host, int(port)), timeout=10)\n\
        got = b''\n\
        try:\n    c.sendall(b'U' * 200)\n    while (b := c.recv(100)):\n        got += b\n\
        except OSError:\n    pass\n\
        print(len(got), got.count(b'echo:'))\n";
    let out = Command::new("runuser")
        .args(["-u", user, "--", "python3", "-c", CLIENT])
        .arg(to.to_string())
        .current_dir("/")
        .output()
        .expect("runuser");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The audit records of `session` whose check is `check` and that say `why`.
fn audited(j: &Jail, session: &str, check: &str, why: &str) -> Vec<String> {
    let log = j.as_user(&j.rig.bin).args(["log", "--json", "--session", session]).output().expect("log");
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter(|l| l.contains(&format!("\"check\":\"{check}\"")) && l.contains(why))
        .map(str::to_owned)
        .collect()
}

/// A cluster whose controller and only node are this host, reached over loopback (a
/// workstation or a VM running Slurm, its host name resolving to 127.0.1.1): the session's
/// jail and its job's listen on loopback, and call each other there. Every user of the host
/// connects from the same loopback addresses, so who connects is asked of the kernel: another
/// user's connections (a flood from nine loopback addresses and the host's own, going on while
/// the calls are made) are closed before any challenge, and audited; the user's own process
/// without the session's proof gets the challenge and nothing else.
#[test]
fn on_a_one_host_cluster_the_session_network_listens_on_loopback_for_the_users_jails_only() {
    let Some(j) = one_host_slurm_jail("slurm-one-host-peers") else { return };
    let j = j
        .project_file("peer_server.py", include_str!("slurm/peer_server.py"))
        .project_file("echo_client.py", include_str!("slurm/echo_client.py"));
    let script = "echo $AGENT_SANDBOX_SESSION > session; hostname -I > session-ip; \
         python3 peer_server.py 7000 session-served & \
         sbatch -o server.out --wrap 'python3 peer_server.py 7001 served' > /dev/null; \
         n=0; while [ ! -e flood-on ] && [ $n -lt 900 ]; do sleep 0.1; n=$((n+1)); done; \
         python3 echo_client.py $(cat served) > from-session.out; \
         sbatch --wait -o from-job.out --wrap \"python3 echo_client.py $(cat session-served)\"; \
         touch calls-done; n=0; while [ ! -e test-done ] && [ $n -lt 900 ]; do sleep 0.1; n=$((n+1)); done; \
         touch stop; wait";
    let p = |f: &str| j.project.join(f);
    let flood_stop = std::env::temp_dir().join(format!("asb-one-host-flood-{}", std::process::id()));
    let _ = std::fs::remove_file(&flood_stop);
    std::thread::scope(|s| {
        let session = s.spawn(|| {
            let mut c = j.command(&["-q", "run", "--", "sh", "-c", script]);
            j.output_within(&mut c, Duration::from_secs(150))
        });
        wait_for_files(&j, &["session", "served", "session-served"], &session, "the session's and the job's servers");
        let session_id = std::fs::read_to_string(p("session")).unwrap_or_default().trim().to_string();
        let session_listener = registry_listener(&j, &session_id, "session-ip");
        let job_listener = registry_listener(&j, &session_id, "served");
        for (who, at) in [("session", session_listener), ("job", job_listener)] {
            assert!(at.ip().is_loopback(), "the {who}'s jail listens on loopback: {at}");
        }
        // Another user of the host keeps connecting to both listeners, from nine loopback
        // addresses and the host's own, while the session and a job call each other.
        let mut sources: Vec<String> = (1..=9).map(|i| format!("127.0.0.{i}")).collect();
        let host_ips = Command::new("hostname").arg("-I").output().expect("hostname -I");
        sources.extend(
            String::from_utf8_lossy(&host_ips.stdout)
                .split_whitespace()
                .filter(|a| a.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| !ip.is_link_local()))
                .map(str::to_owned),
        );
        let flood = Command::new("runuser")
            .args(["-u", OTHER, "--", "python3", "-c", include_str!("slurm/local_flood.py")])
            .arg(&flood_stop)
            .arg(sources.join(","))
            .args([session_listener.to_string(), job_listener.to_string()])
            .current_dir("/")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the other user's flood");
        std::thread::sleep(Duration::from_millis(500));
        // The user's own process, outside any jail, without the proof.
        let own = unproved(USER, session_listener);
        std::fs::write(p("flood-on"), "").expect("flood-on");
        wait_for_files(&j, &["calls-done"], &session, "the calls");
        std::fs::write(&flood_stop, "").expect("flood stop");
        let flooded = flood.wait_with_output().expect("flood");
        let flooded = String::from_utf8_lossy(&flooded.stdout).trim().to_string();
        std::fs::write(p("test-done"), "").expect("test-done");
        let out = session.join().expect("session thread");
        let session_ip = std::fs::read_to_string(p("session-ip")).unwrap_or_default();
        let session_ip = session_ip.split_whitespace().next().unwrap_or("").to_string();
        let served = std::fs::read_to_string(p("served")).unwrap_or_default();
        let job_ip = served.trim().rsplit_once(':').map(|(ip, _)| ip.to_string()).unwrap_or_default();
        let from_session = std::fs::read_to_string(p("from-session.out")).unwrap_or_default();
        assert_eq!(
            from_session.trim(),
            format!("reply=echo:ping from={session_ip}"),
            "the session called the job\n{out}"
        );
        let from_job = std::fs::read_to_string(p("from-job.out")).unwrap_or_default();
        assert!(
            from_job.starts_with("reply=echo:ping from=169.254.") && !from_job.trim().ends_with(&format!("={job_ip}")),
            "a job called the session's jail: {from_job}\n{out}"
        );
        assert_eq!(own, "16 0", "the user's own process without the proof: the challenge only");
        let counts: Vec<u32> = flooded.split_whitespace().filter_map(|w| w.split_once('=')?.1.parse().ok()).collect();
        let [opened, challenged] = counts[..] else { panic!("the flood said {flooded:?}") };
        assert!(opened >= 100, "the flood went on during the calls: {flooded}");
        assert_eq!(challenged, 0, "another user's connection got a challenge: {flooded}");
        assert!(!audited(&j, &session_id, "session_net", "another user").is_empty(), "the flood, audited");
        assert!(!audited(&j, &session_id, "session_net", "proof").is_empty(), "the unproved connection, audited");
    });
    let _ = std::fs::remove_file(&flood_stop);
}

/// `--job-port` on a one-host cluster: the port listens on loopback and is named to the jail
/// at its gateway (in a job's jail a loopback address is the jail's own), and a job reaches
/// the session's server there. Admission holds as elsewhere: a process of the user's with the
/// session's proof is let in while a job of the project runs on the node (at 127.0.1.1, the
/// caller at 127.0.0.1) and refused once none runs; another user's connection is closed
/// before the challenge.
#[test]
fn on_a_one_host_cluster_a_job_reaches_the_job_port_and_admission_still_holds() {
    let Some(j) = one_host_slurm_jail("slurm-one-host-job-port") else { return };
    let j = j
        .project_file("echo_server.py", include_str!("slurm/echo_server.py"))
        .project_file("echo_client.py", include_str!("slurm/echo_client.py"));
    let script = "echo $AGENT_SANDBOX_SESSION > session; hostname -I > session-ip; \
         python3 echo_server.py 8786 & server=$!; \
         echo $AGENT_SANDBOX_JOB_PORT_8786 > addr.tmp && mv addr.tmp addr; \
         sbatch -o holder.out --wrap 'touch holding; while [ ! -e stop ]; do sleep 0.2; done' > /dev/null; \
         sbatch --wait -o from-job.out --wrap \"python3 echo_client.py $(cat addr)\"; \
         touch calls-done; n=0; while [ ! -e test-done ] && [ $n -lt 900 ]; do sleep 0.1; n=$((n+1)); done; \
         touch stop; n=0; while [ ! -e all-done ] && [ $n -lt 900 ]; do sleep 0.1; n=$((n+1)); done; kill $server";
    let p = |f: &str| j.project.join(f);
    std::thread::scope(|s| {
        let session = s.spawn(|| {
            let mut c = j.command(&["-q", "--job-port", "8786", "run", "--", "sh", "-c", script]);
            j.output_within(&mut c, Duration::from_secs(150))
        });
        wait_for_files(&j, &["session", "addr", "calls-done", "holding"], &session, "the job's call");
        let session_id = std::fs::read_to_string(p("session")).unwrap_or_default().trim().to_string();
        let addr = std::fs::read_to_string(p("addr")).unwrap_or_default().trim().to_string();
        let shown: std::net::SocketAddr = addr.parse().unwrap_or_else(|_| panic!("the job port's address: {addr:?}"));
        assert_eq!(shown.ip().to_string(), "169.254.77.1", "named to the jail at its gateway: {addr}");
        // The job port listens where the session network does: the cluster address, loopback.
        let cluster_ip = registry_listener(&j, &session_id, "session-ip").ip();
        assert!(cluster_ip.is_loopback(), "the cluster address on a one-host cluster: {cluster_ip}");
        let listener = std::net::SocketAddr::new(cluster_ip, shown.port());
        let secret = session_secret(&j, &session_id);
        let while_running = prove_as_a_job(&j, listener, &secret);
        let other = unproved(OTHER, listener);
        std::fs::write(p("test-done"), "").expect("test-done");
        // The holding job ends: the same proof is refused once the node's last answer (kept
        // 5 s) is out of date.
        let deadline = Instant::now() + Duration::from_secs(30);
        let after = loop {
            let after = prove_as_a_job(&j, listener, &secret);
            if after == "refused" || Instant::now() > deadline {
                break after;
            }
            std::thread::sleep(Duration::from_secs(1));
        };
        std::fs::write(p("all-done"), "").expect("all-done");
        let out = session.join().expect("session thread");
        let from_job = std::fs::read_to_string(p("from-job.out")).unwrap_or_default();
        assert_eq!(from_job.trim(), "reply=echo:ping", "a job reached the job port\n{out}");
        assert_eq!(while_running, "admitted reply=echo:ping", "the proof while a job of the project runs\n{out}");
        assert_eq!(after, "refused", "the proof with no job of the project running\n{out}");
        assert_eq!(other, "0 0", "another user's connection: closed before the challenge");
        assert!(!audited(&j, &session_id, "job_port", "another user").is_empty(), "the other user, audited");
        assert!(!audited(&j, &session_id, "job_port", "none runs now").is_empty(), "no job running, audited");
    });
}

/// Holds silent connections open to `to` until `stop`: 16 from the host's address toward it,
/// and 8 from each of 127.0.0.2-9, each opened again as soon as the listener closes it.
/// Returns how many it opened.
fn silent_flood(to: std::net::SocketAddr, stop: &std::sync::atomic::AtomicBool) -> usize {
    use std::io::Read;
    let sources: Vec<Option<std::net::IpAddr>> = std::iter::repeat_n(None, 16)
        .chain((2..=9).flat_map(|i| std::iter::repeat_n(Some(std::net::IpAddr::from([127, 0, 0, i])), 8)))
        .collect();
    let mut held: Vec<(Option<std::net::IpAddr>, Option<std::net::TcpStream>)> =
        sources.iter().map(|f| (*f, None)).collect();
    let mut opened = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for (from, conn) in held.iter_mut() {
            let closed = match conn {
                None => true,
                Some(c) => {
                    let mut b = [0u8; 64];
                    match c.read(&mut b) {
                        Ok(0) => true,
                        Ok(_) => false,
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    }
                }
            };
            if closed {
                *conn = connect_from(*from, to);
                if let Some(c) = conn {
                    let _ = c.set_nonblocking(true);
                    opened += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    opened
}

/// A TCP connection to `to`, from the source address `from` when given (bound first).
fn connect_from(from: Option<std::net::IpAddr>, to: std::net::SocketAddr) -> Option<std::net::TcpStream> {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    let Some(std::net::IpAddr::V4(ip)) = from else {
        return std::net::TcpStream::connect_timeout(&to, Duration::from_secs(1)).ok();
    };
    let std::net::SocketAddr::V4(to) = to else { return None };
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).ok()?;
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(std::net::SocketAddrV4::new(ip, 0))).ok()?;
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to)).ok()?;
    Some(std::net::TcpStream::from(fd))
}

/// An MPI-style launch from the jail (`srun --mpi=pmi2` and `--mpi=pmix`, the plugins of
/// Debian's Slurm): every rank starts inside the jail (the jail's hostname, no `~/.ssh`, the
/// project as its directory), with its own rank; with pmi2 on both nodes of the test cluster.
/// PMIx runs on one node: the test cluster's two slurmds share one /tmp, where each node's
/// PMIx plugin makes the same per-step directory.
#[test]
fn every_rank_of_an_mpi_launch_starts_in_the_jail_on_both_nodes() {
    let Some(j) = slurm_jail("slurm-mpi") else { return };
    assert!(Path::new("/run/netns/asbtc-n2").exists(), "the test cluster has no second node: start.sh --two-nodes");
    for (mpi, nodes) in [("pmi2", 2), ("pmix", 1)] {
        let out = j.run(&format!(
            "srun --mpi={mpi} -N{nodes} -n4 sh -c \
             'echo rank=$SLURM_PROCID/$SLURM_NTASKS node=$SLURMD_NODENAME host=$(hostname) \
              ssh=$(test -e ~/.ssh && echo yes || echo no) submit=$SLURM_SUBMIT_DIR pwd=$(pwd)'; echo rc=$?"
        ));
        assert!(out.stdout.contains("rc=0"), "srun --mpi={mpi}: {out}");
        let ranks: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("rank=")).collect();
        assert_eq!(ranks.len(), 4, "four ranks with --mpi={mpi}: {out}");
        for r in 0..4 {
            assert!(ranks.iter().any(|l| l.starts_with(&format!("rank={r}/4 "))), "rank {r} with --mpi={mpi}: {out}");
        }
        for line in &ranks {
            assert!(
                line.contains(" host=agent-sandbox ") && line.contains(" ssh=no "),
                "a rank outside the jail: {line}"
            );
            assert!(line.ends_with(&format!("submit={0} pwd={0}", j.project.display())), "{line}");
        }
        let seen: std::collections::BTreeSet<&str> =
            ranks.iter().filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("node="))).collect();
        assert_eq!(seen.len(), nodes, "ranks on {nodes} node(s) with --mpi={mpi}: {out}");
    }
}

/// `salloc` in the jail: the allocation's command runs inside the jail (not on the login node
/// outside it), `srun` there joins the allocation with every task in the jail on both nodes,
/// the allocation ends with the command (relinquished, not left running), its exit status is
/// salloc's, and an allocation without a command is refused.
#[test]
fn salloc_runs_its_command_in_the_jail_and_srun_joins_the_allocation() {
    let Some(j) = slurm_jail("slurm-salloc") else { return };
    let out = j.run(
        "salloc -N2 -t 5 sh -c 'echo job=$SLURM_JOB_ID; echo host=$(hostname) ssh=$(test -e ~/.ssh && echo yes || echo no); \
           srun -N2 -n2 sh -c \"echo step=\\$(hostname)/\\$SLURMD_NODENAME\"; squeue -h -o %i'; echo rc=$?; \
         salloc -N1 -t 5 sh -c 'exit 3'; echo rc=$?; salloc --no-shell; echo no-shell=$?",
    );
    let id = printed_job_id(&out, "job=");
    assert!(out.stdout.contains("host=agent-sandbox ssh=no"), "the allocation's command ran outside the jail: {out}");
    let steps: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("step=")).collect();
    assert_eq!(steps.len(), 2, "{out}");
    assert!(steps.iter().all(|s| s.starts_with("step=agent-sandbox/")), "a step outside the jail: {out}");
    assert!(out.stdout.lines().any(|l| l.trim() == id.to_string()), "squeue in the allocation shows it: {out}");
    assert!(out.stdout.contains("rc=0") && out.stdout.contains("rc=3"), "salloc's status is its command's: {out}");
    assert!(out.stdout.contains("no-shell=1") && out.stderr.contains("--no-shell is not allowed"), "{out}");
    assert!(out.stderr.contains(&format!("Relinquishing job allocation {id}")), "{out}");
    assert_eq!(final_state(id), "COMPLETED", "the allocation ended with its command: {out}");
    // A request still pending when its stub is killed is withdrawn, and an allocation held
    // when the session ends is relinquished: neither outlives the session. The session waits
    // for the allocation's command to start (up to 30 s: a node can take seconds to be
    // configured), not a fixed 4 s, which a slow allocation outlasted in CI.
    let out = j.run(
        "salloc --begin=now+300 -N1 -t 5 true 2> pending.err & sleep 3; kill -9 $!; \
         salloc -N1 -t 5 sh -c 'echo held=$SLURM_JOB_ID > held.out; sleep 100' & \
         n=0; while [ ! -s held.out ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done; cat held.out; echo done",
    );
    let pending = std::fs::read_to_string(j.project.join("pending.err")).unwrap_or_default();
    let pending_id: u32 = pending
        .lines()
        .find_map(|l| l.strip_prefix("salloc: Pending job allocation "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pending allocation: {pending}\n{out}"));
    let held = printed_job_id(&out, "held=");
    // A request still pending when the session ends (its chaperon killed with the launcher):
    // the session's cleanup cancels it.
    let out = j.run("salloc --begin=now+300 -N1 -t 5 true 2> left.err & sleep 3; echo done");
    let left = std::fs::read_to_string(j.project.join("left.err")).unwrap_or_default();
    let left_id: u32 = left
        .lines()
        .find_map(|l| l.strip_prefix("salloc: Pending job allocation "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pending allocation: {left}\n{out}"));
    for job in [pending_id, held, left_id] {
        let state = final_state(job);
        assert!(state.starts_with("CANCELLED") || state == "COMPLETED", "job {job} outlived its caller: {state}");
    }
}

/// `sattach` from the jail to a running step of the project's job: its output streams to the
/// caller; a step of a job outside the project is refused.
#[test]
fn sattach_attaches_to_a_step_in_scope_only() {
    let Some(j) = slurm_jail("slurm-sattach") else { return };
    let outside =
        j.as_user("sbatch").args(["--parsable", "--wrap", "srun sleep 60"]).output().expect("sbatch outside the jail");
    let outside: u32 = String::from_utf8_lossy(&outside.stdout).trim().parse().expect("outside job id");
    let j = j.project_file("ticks.sh", "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo tick=$i; sleep 0.5; done\n");
    let out = j.run(
        "id=$(sbatch --parsable -o ticks.out --wrap 'srun sh ticks.sh'); echo id=$id; \
         n=0; until squeue -h -s -j $id -o %i | grep -q \"^$id.0$\" || [ $n -gt 300 ]; do sleep 0.1; n=$((n+1)); done; \
         for t in 1 2 3; do timeout 4 sattach $id.0 > attached.txt 2>&1; grep -q tick= attached.txt && break; sleep 1; done; \
         cat attached.txt; scancel $id",
    );
    let own = printed_job_id(&out, "id=");
    let _ = own;
    assert!(
        out.stdout.lines().filter(|l| l.starts_with("tick=")).count() >= 2,
        "sattach showed the step's output: {out}"
    );
    let refused = j.run(&format!("sattach {outside}.0; echo rc=$?"));
    let _ = Command::new("scancel").arg(outside.to_string()).status();
    assert!(refused.stdout.contains("rc=1") && refused.stderr.contains("sattach: error:"), "{refused}");
    assert!(!refused.stdout.contains("tick="), "{refused}");
}
