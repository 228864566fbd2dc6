//! The chaperon: agent-sandbox's Slurm mediator. This crate has no dependency on the jail
//! code, so its wire protocol and (later) its argument grammars can be tested and fuzzed
//! alone. It holds the wire protocol and the argument grammars (`grammar`, the generic parser;
//! `sbatch`, sbatch's table and `#SBATCH` reader); the server comes with the Slurm work.

pub mod grammar;
pub mod sbatch;
pub mod wire;
