//! The chaperon: agent-sandbox's Slurm mediator. This crate has no dependency on the jail
//! code, so its wire protocol and (later) its argument grammars can be tested and fuzzed
//! alone. For now it holds the wire protocol; the server and grammars come with the Slurm work.

pub mod wire;
