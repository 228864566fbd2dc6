//! The option entries sbatch, srun and salloc share. Slurm reads the three commands' options with
//! one table (src/common/slurm_opt.c), and the chaperon keeps each entry the commands have alike
//! once, here, in a group per set of commands that have it: a command's `Table`
//! (`commands::sbatch`, `commands::srun`, `commands::salloc`) lists the groups it has and adds its
//! own entries. An option the commands treat differently (allowed by one, refused by another, or
//! refused in words of its own) is each command's own entry, never a shared one; "not on the
//! allow-list" is said in each command's words from a shared entry (`not_listed`). Each group is
//! an array, so that a table holds its address (`&EVERY_JOB`): a slice read out of a static
//! would be copied into every table that reads it. Data only; `table` reads it.
use crate::grammar::ValueKind::*;
use crate::release::{R23_02, R24_05, R24_11};
use crate::table::{
    allow, deny, not_listed, opt, Arity, Class, OptSpec, APPLIED_IN_JAIL, BELT_TAG, CLUSTERS, EXPORT, MAIL,
};
use crate::table::{COMPLETION, CONTAINER_ID, STEPMGR};
use Arity::{Flag, OptionalValue as Opt, Value as Val};

/// What sbatch, srun and salloc have alike: the resources a job asks for, where and when it
/// runs, the informational flags, and the later releases' options.
pub static EVERY_JOB: [OptSpec; 47] = [
    // Allowed (FEATURES C, the sbatch allow-list).
    allow("account", Some('A'), Val, Text),
    allow("partition", Some('p'), Val, Text),
    allow("qos", Some('q'), Val, Text),
    allow("time", Some('t'), Val, Time),
    allow("time-min", None, Val, Time),
    allow("nodes", Some('N'), Val, Text),
    allow("ntasks", Some('n'), Val, PositiveInt),
    allow("ntasks-per-node", None, Val, PositiveInt),
    allow("cpus-per-task", Some('c'), Val, PositiveInt),
    allow("mem", None, Val, Memory),
    allow("mem-per-cpu", None, Val, Memory),
    allow("mem-per-gpu", None, Val, Memory),
    allow("gres", None, Val, Text),
    allow("gpus", Some('G'), Val, Text),
    allow("gpus-per-node", None, Val, Text),
    allow("gpus-per-task", None, Val, Text),
    allow("cpus-per-gpu", None, Val, PositiveInt),
    allow("constraint", Some('C'), Val, Text),
    allow("exclusive", None, Opt, Choice(&["exclusive", "oversubscribe", "user", "mcs"])),
    allow("oversubscribe", Some('s'), Flag, Any),
    allow("nodelist", Some('w'), Val, NodeList),
    allow("exclude", Some('x'), Val, NodeList),
    allow("comment", None, Val, Text),
    allow("begin", Some('b'), Val, DateTime),
    allow("deadline", None, Val, DateTime),
    // Negative is valid syntax; Slurm itself refuses it from a user who is not an operator.
    allow("nice", None, Opt, Nice),
    allow("reservation", None, Val, Text),
    allow("licenses", Some('L'), Val, Text),
    allow("hint", None, Val, Text),
    allow("threads-per-core", None, Val, PositiveInt),
    allow("tmp", None, Val, Memory),
    allow("wckey", None, Val, Text),
    allow("verbose", Some('v'), Flag, Any),
    allow("quiet", Some('Q'), Flag, Any),
    allow("help", Some('h'), Flag, Any),
    allow("usage", None, Flag, Any),
    allow("version", Some('V'), Flag, Any),
    // The belt's (slurm-plugins/), where the site has it: the chaperon tags each job and step itself.
    deny("agent-sandbox", None, Val, BELT_TAG),
    // Real options not on the allow-list.
    deny("tasks-per-node", None, Val, "use --ntasks-per-node, its allowed spelling"),
    deny("nodefile", Some('F'), Val, "it names a file on the login node; use --nodelist"),
    // Added after 22.05 (`since`: the release that added each).
    deny("autocomplete", None, Val, COMPLETION).since(R23_02),
    deny("container-id", None, Val, CONTAINER_ID).since(R23_02),
    allow("extra", None, Val, Text).since(R23_02),
    allow("tres-per-task", None, Val, Text).since(R23_02),
    allow("segment", None, Val, Uint16).since(R24_05),
    deny("stepmgr", None, Flag, STEPMGR).since(R24_05),
    allow("oom-kill-step", None, Opt, Uint16).since(R24_11),
];

/// What sbatch and srun have alike (salloc refuses most of these, or has them not).
pub static BATCH_AND_STEP: [OptSpec; 20] = [
    allow("ntasks-per-socket", None, Val, PositiveInt),
    allow("ntasks-per-core", None, Val, PositiveInt),
    allow("ntasks-per-gpu", None, Val, PositiveInt),
    allow("dependency", Some('d'), Val, Dependency),
    // arg_set_open_mode reads only the first letter.
    allow("open-mode", None, Val, Initial(&["append", "truncate"])).rebuilt(APPLIED_IN_JAIL),
    allow("hold", Some('H'), Flag, Any),
    allow("priority", None, Val, Text),
    allow("distribution", Some('m'), Val, Text),
    allow("mem-bind", None, Val, Text),
    allow("cpu-freq", None, Val, Text),
    allow("switches", None, Val, Text),
    allow("test-only", None, Flag, Any),
    // Recorded in the job dir and applied inside the jail (`exec --job`, the step wrapper), never outside.
    allow("export", None, Val, ExportSpec).rebuilt(EXPORT),
    opt("chdir", Some('D'), Val, Class::Rebuilt("the working directory comes from the checked request"), Path),
    deny("propagate", None, Opt, "resource limits come from the sandbox policy, not from the jail's shell"),
    deny("mail-type", None, Val, MAIL),
    deny("mail-user", None, Val, MAIL),
    deny("clusters", Some('M'), Val, CLUSTERS),
    deny("cluster", None, Val, CLUSTERS),
    deny("cluster-constraint", None, Val, CLUSTERS),
];

/// What sbatch and salloc have alike: `--resv-ports` came to both in 24.05 (srun has had it
/// from before 22.05, so its entry has no `since`).
pub static BATCH_AND_ALLOC: [OptSpec; 2] =
    [allow("resv-ports", None, Opt, Int).since(R24_05), not_listed("wait-all-nodes", None, Val)];

/// What srun and salloc have alike (sbatch has no `--immediate`).
pub static STEP_AND_ALLOC: [OptSpec; 1] = [allow("immediate", Some('I'), Opt, Int)];

/// The options none of sbatch, srun and salloc has on its allow-list: each command refuses them
/// in its own words ("not on agent-sandbox's srun allow-list..."; `table::Class::NotListed`).
pub static LISTED_BY_NONE: [OptSpec; 25] = [
    not_listed("acctg-freq", None, Val),
    not_listed("context", None, Val),
    not_listed("contiguous", None, Flag),
    not_listed("core-spec", Some('S'), Val),
    not_listed("cores-per-socket", None, Val),
    not_listed("delay-boot", None, Val),
    not_listed("extra-node-info", Some('B'), Val),
    not_listed("gpu-bind", None, Val),
    not_listed("gpu-freq", None, Val),
    not_listed("gpus-per-socket", None, Val),
    not_listed("gres-flags", None, Val),
    not_listed("mcs-label", None, Val),
    not_listed("mincpus", None, Val),
    not_listed("network", None, Val),
    not_listed("no-kill", Some('k'), Opt),
    not_listed("ntasks-per-tres", None, Val),
    not_listed("overcommit", Some('O'), Flag),
    not_listed("power", None, Val),
    not_listed("prefer", None, Val),
    not_listed("profile", None, Val),
    not_listed("reboot", None, Flag),
    not_listed("sockets-per-node", None, Val),
    not_listed("spread-job", None, Flag),
    not_listed("thread-spec", None, Val),
    not_listed("use-min-nodes", None, Flag),
];
