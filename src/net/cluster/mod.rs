//! The network's wing for the session's Slurm jobs: the job ports (`jobs`: a server in the
//! login node's jail that the project's jobs call, admitted by their running jobs and the
//! session's typed secret), the session network between one session's jails (`peers`), and
//! whose a connection from this host is (`local_peer`). The supervisors of `filtered` serve
//! them; nothing here decides a rule of the policy.

pub mod jobs;
pub mod local_peer;
pub mod peers;
