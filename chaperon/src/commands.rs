//! One module per Slurm command the chaperon handles.

pub mod sacct;
pub mod sacctmgr;
pub mod sbatch;
pub mod scancel;
pub mod scontrol;
pub mod sdiag;
pub mod sinfo;
pub mod sprio;
pub mod squeue;
pub mod srun;
pub mod sshare;
pub mod sstat;
