//! What the jail's PID 1 builds and runs: the part of the plan that crosses into the jail,
//! and how it crosses. PID 1 is cloned before the plan exists (`userns::Early`), so that it
//! makes the namespaces, the network and its staging root while the launcher plans; the
//! blueprint follows in a sealed memfd, whatever its size (a job's script rides in it).

use crate::plan::anchor::Anchor;
use crate::plan::{GitGuardPlan, LimitsPlan, MountSpec, Plan};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blueprint {
    pub hostname: String,
    pub mounts: Vec<MountSpec>,
    /// What the plan checked of the mounts' sources (`plan::anchor`).
    pub anchors: Vec<Anchor>,
    /// The launcher's own trees, used by name (`Plan::own`).
    #[serde(with = "crate::plan::os_path::vec")]
    pub own: Vec<PathBuf>,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    #[serde(with = "crate::plan::os_path")]
    pub cwd: PathBuf,
    pub limits: LimitsPlan,
    pub git_guard: Option<GitGuardPlan>,
}

impl Blueprint {
    /// `anchors`: the plan's, with those of what the launcher made since (`jail::run`).
    pub fn of(plan: &Plan, anchors: &[crate::plan::anchor::Anchor]) -> Blueprint {
        Blueprint {
            hostname: plan.hostname.clone(),
            mounts: plan.mounts.clone(),
            anchors: anchors.to_vec(),
            own: plan.own.clone(),
            command: plan.command.clone(),
            env: plan.env.clone(),
            cwd: plan.cwd.clone(),
            limits: plan.limits.clone(),
            git_guard: plan.git_guard.clone(),
        }
    }

    /// The blueprint in a memfd sealed against any change, at offset 0.
    pub fn to_fd(&self) -> std::io::Result<OwnedFd> {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let fd = memfd_create(c"agent-sandbox-blueprint", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
        let mut file = std::fs::File::from(fd);
        file.write_all(&serde_json::to_vec(self).map_err(std::io::Error::other)?)?;
        file.rewind()?;
        let seals = SealFlag::F_SEAL_SEAL | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_WRITE;
        fcntl(&file, FcntlArg::F_ADD_SEALS(seals))?;
        Ok(file.into())
    }

    /// Reads a blueprint `to_fd` made.
    pub fn from_fd(fd: OwnedFd) -> Result<Blueprint, String> {
        let mut text = vec![];
        std::fs::File::from(fd).read_to_end(&mut text).map_err(|e| format!("cannot read the jail's blueprint: {e}"))?;
        serde_json::from_slice(&text).map_err(|e| format!("the jail's blueprint does not parse: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of mount, a script-sized file, paths that are not UTF-8 and the guard cross
    /// whole, and the memfd cannot be changed once made.
    #[test]
    fn a_blueprint_crosses_whole_in_a_sealed_memfd() {
        use std::os::unix::ffi::OsStrExt;
        let odd = PathBuf::from(std::ffi::OsStr::from_bytes(b"/home/u/proj-\xff"));
        let big = "x".repeat(3 << 20);
        let bp = Blueprint {
            hostname: "agent-sandbox".into(),
            mounts: vec![
                MountSpec::Proc { target: "/proc".into() },
                MountSpec::Bind { source: "/usr".into(), target: "/usr".into(), rw: false, dir: true },
                MountSpec::Bind { source: odd.clone(), target: odd.clone(), rw: true, dir: true },
                MountSpec::File { target: "/run/agent-sandbox/job-script".into(), contents: big, mode: 0o444 },
                MountSpec::Overlay {
                    target: "/etc".into(),
                    source: "/etc".into(),
                    whiteouts: vec!["/etc/shadow".into(), odd.join("x")],
                    files: vec![crate::plan::fs::OverlayFile {
                        path: "/etc/passwd".into(),
                        contents: "u:x:1:1::/h:/bin/sh\n".into(),
                        mode: 0o644,
                    }],
                },
            ],
            anchors: vec![Anchor { path: odd.clone(), real: odd.join("r"), dev: 1 << 40, ino: u64::MAX }],
            own: vec![odd.join("state")],
            command: vec!["sh".into(), "-c".into(), "echo \u{e9}".into()],
            env: vec![("PATH".into(), "/usr/bin".into())],
            cwd: odd.join("d\u{e9}"),
            limits: LimitsPlan { mem: Some(1 << 30), pids: Some(64), ..Default::default() },
            git_guard: Some(GitGuardPlan {
                roots: vec![odd.clone(), "/scratch".into()],
                links: crate::plan::LinkPlan {
                    state: vec![odd.join("s")],
                    hidden: vec![odd.join("h")],
                    trees: vec![],
                    real: vec![crate::plan::RealRoot { name: odd.join("n"), real: odd.join("r") }],
                },
            }),
        };
        let fd = bp.to_fd().unwrap();
        let mut file = std::fs::File::from(fd.try_clone().unwrap());
        assert!(file.write_all(b"{}").is_err(), "the memfd is sealed against writes");
        assert_eq!(Blueprint::from_fd(fd).unwrap(), bp);
    }

    #[test]
    fn a_blueprint_that_does_not_parse_is_an_error_not_a_panic() {
        use nix::sys::memfd::{memfd_create, MFdFlags};
        let fd = memfd_create(c"garbage", MFdFlags::MFD_CLOEXEC).unwrap();
        std::fs::File::from(fd.try_clone().unwrap()).write_all(b"{\"hostname\": 3").unwrap();
        let mut f = std::fs::File::from(fd);
        f.rewind().unwrap();
        assert!(Blueprint::from_fd(f.into()).unwrap_err().contains("does not parse"));
    }
}
