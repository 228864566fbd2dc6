//! agent-sandbox as a library: the policy, the plan, the jail and its parts. The binary
//! (`main.rs`) is the command line over it; tests and fuzz targets link the same code.

pub mod allow;
pub mod audit;
pub mod cli;
pub mod doctor;
pub mod gitconfig;
pub mod glob;
pub mod host;
pub mod jail;
pub mod launch;
pub mod net;
pub mod netrules;
pub mod plan;
pub mod policy;
pub mod random;
pub mod secret;
pub mod session;
pub mod show;
pub mod slurm;
pub mod status;
pub mod stub;
pub mod test_pause;
pub mod timing;
