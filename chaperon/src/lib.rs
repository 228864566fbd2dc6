//! The chaperon: agent-sandbox's Slurm mediator, outside the jail. It has no dependency on
//! the jail code, so its protocol, grammars and server can be tested and fuzzed alone.
//!
//! ```text
//! server      the transport: socket or Landlock channel, peer checks, stdio in, a thread a call
//! commands    COMMANDS (every Slurm command: handled here or refused) and dispatch; under it one
//!             module per command: sbatch srun squeue scancel scontrol sacct sacctmgr sinfo sstat
//!             sprio sshare sdiag sreport (option table, parser, handler)
//! governor    spares the scheduler: repeated read-only calls answered from one, a cap per minute
//! call        one call being carried out: its stdio, its signals, a real command run for it
//! checks      shared checks: paths in the project, jobs in scope, own user, the local cluster
//! export      what --export gives a job or step inside the jail
//! forgotten   which recorded jobs the controller no longer holds: out of the views and actions, dirs removed
//! identity    which directory a project is (device, inode): a job runs in that one
//! job         the job directory: its format, written here, opened by `exec --job` on the node
//! session     the session served (Config), the audit record, real commands' clean environment
//! refusal     why a call was refused, one line each
//! job_options the option entries sbatch, srun and salloc have alike, each kept once (data)
//! table       option tables: entries, the getopt-compatible parser, what reaches Slurm as written
//! slurm_22_05 every Slurm 22.05 command's options as its getopt_long is handed them (data)
//! slurm_24_11 the same of Slurm 24.11 (data)
//! release     the installed Slurm release, in effect for a call: which set a table is read with
//! getopt      glibc's getopt_long: a prefix resolved as it resolves one, its errors in its words
//! grammar     value grammars, as Slurm 22.05 reads each value
//! jobid       job id spellings
//! scope       which jobs a session may see (the registry of submitted jobs)
//! seal        the user's record key: job specs and scope records sealed against forgery
//! removeat    a job directory removed through descriptors, below `jobs/`, never through a symlink
//! wire        the framed stub <-> chaperon protocol
//! bounded     reads, writes and captured calls with a size and a time bound
//! yaml        JSON written as YAML (squeue --yaml)
//! spawn       real commands started without a copy of the chaperon, dying with it
//! ```
//!
//! No two modules import each other, directly or around a circle, and nothing uses `server` or
//! `commands` but the launcher and the stubs (`tests::modules_import_no_circle` checks both):
//! `server` uses `commands`, a command uses `call`, `checks`, `table`..., never the reverse.

pub mod bounded;
pub mod call;
pub mod checks;
pub mod commands;
pub mod export;
pub mod forgotten;
pub mod getopt;
pub mod governor;
pub mod grammar;
pub mod identity;
pub mod job;
pub mod job_options;
pub mod jobid;
pub mod nodes;
pub mod pool;
pub mod refusal;
pub mod release;
pub mod removeat;
pub mod scope;
pub mod scoped_json;
pub mod seal;
pub mod server;
pub mod session;
pub mod slurm_22_05;
pub mod slurm_24_11;
pub mod slurm_conf;
pub mod spawn;
pub mod table;
pub mod wire;
pub mod yaml;

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// Each module of the crate and the modules it names (`crate::x`, `use crate::{x, y}`; a
    /// command module is `commands::name`), read from the sources.
    fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![];
        for dir in [src.clone(), src.join("commands")] {
            for f in std::fs::read_dir(&dir).unwrap().flatten() {
                files.push(f.path());
            }
        }
        let module = |path: &Path| {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            match path.parent().and_then(|p| p.file_name()).is_some_and(|d| d == "commands") {
                true => format!("commands::{stem}"),
                false => stem,
            }
        };
        let names: BTreeSet<String> = files.iter().map(|f| module(f)).collect();
        let mut graph = BTreeMap::new();
        for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "rs")) {
            let text = std::fs::read_to_string(f).unwrap();
            let me = module(f);
            let mut uses = BTreeSet::new();
            let mut named = |path: &str| {
                let mut parts = path.split("::").map(|p| p.trim_matches(|c: char| !c.is_alphanumeric() && c != '_'));
                let first = parts.next().unwrap_or_default().to_string();
                let sub = parts.next().map(|s| format!("{first}::{s}"));
                let name = sub.filter(|s| names.contains(s)).unwrap_or(first);
                if names.contains(&name) && name != me && name != "lib" {
                    uses.insert(name);
                }
            };
            for (i, _) in text.match_indices("crate::") {
                let rest = &text[i + "crate::".len()..];
                if let Some(list) = rest.strip_prefix('{') {
                    list[..list.find('}').unwrap_or(0)].split(',').for_each(|p| named(p.trim()));
                } else {
                    named(
                        rest.split(|c: char| !c.is_alphanumeric() && c != '_' && c != ':').next().unwrap_or_default(),
                    );
                }
            }
            // The parent declares its children.
            if me == "commands" {
                names.iter().filter(|n| n.starts_with("commands::")).for_each(|n| {
                    uses.insert(n.clone());
                });
            }
            graph.insert(me, uses);
        }
        graph
    }

    #[test]
    fn modules_import_no_circle() {
        let graph = module_graph();
        assert!(graph.contains_key("server") && graph.contains_key("commands::sbatch"), "{graph:?}");
        // Depth-first; a module met again while it is on the path closes a circle.
        fn visit<'a>(
            m: &'a str,
            graph: &'a BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) {
            if done.contains(m) {
                return;
            }
            if let Some(at) = path.iter().position(|p| *p == m) {
                panic!("import circle: {} -> {m}", path[at..].join(" -> "));
            }
            path.push(m);
            for d in graph.get(m).into_iter().flatten() {
                visit(d, graph, path, done);
            }
            path.pop();
            done.insert(m);
        }
        let mut done = BTreeSet::new();
        for m in graph.keys() {
            visit(m, &graph, &mut vec![], &mut done);
        }
        // Nothing below the dispatcher uses it or the transport.
        for (m, uses) in &graph {
            if m != "server" {
                assert!(!uses.contains("server"), "{m} uses the transport");
            }
            if m.starts_with("commands::") || !["server", "commands"].contains(&m.as_str()) {
                assert!(!uses.contains("commands"), "{m} uses the dispatcher");
            }
        }
    }
}
