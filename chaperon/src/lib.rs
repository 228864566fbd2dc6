//! The chaperon: agent-sandbox's Slurm mediator. This crate has no dependency on the jail
//! code, so its protocol, grammars and server can be tested and fuzzed alone: `wire` (the
//! framed protocol), `grammar` (the generic Slurm option parser) and one module per command
//! (`sbatch`, `srun`, `squeue`, ...: option tables and typed requests), `server` (the socket,
//! peer check, fd passing), `dispatch` (deciding and running a request), `job` (the job
//! directory `agent-sandbox exec --job` reads) and `scope` (which jobs a session may see).

pub mod bounded;
pub mod call;
pub mod checks;
pub mod commands;
pub mod export;
pub mod grammar;
pub mod job;
pub mod jobid;
pub mod refusal;
pub mod scope;
pub mod server;
pub mod session;
pub mod table;
pub mod wire;
pub mod yaml;
