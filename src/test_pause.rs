//! A moment a test build stops at (`AGENT_SANDBOX_TEST_PAUSE`), so that tests/swap.rs swaps
//! a path between a check and its use when it means to instead of racing for it. Compiled
//! out of release builds. At the bottom of the launcher's modules: the launch and the jail
//! both stop here.

#[cfg(debug_assertions)]
use std::path::Path;

/// Debug builds only (the tests'): stops at `point` when `AGENT_SANDBOX_TEST_PAUSE` is
/// `POINT:DIR`, saying so with `DIR/POINT.reached`, until `DIR/POINT.go` exists (30 s at
/// most), so that a test swaps a path between a check and its use at a known moment
/// (tests/swap.rs) instead of racing for it. Compiled out of release builds.
#[cfg(debug_assertions)]
pub(crate) fn pause_for_test(point: &str) {
    pause_for_test_under(point, Path::new("/"))
}

/// `pause_for_test` from a process whose root is not the host's (the jail's PID 1 while it
/// builds the root: the host is at `root`). The setting is read in the launcher, before the
/// jail's init (a clone of it) clears its environment.
#[cfg(debug_assertions)]
pub(crate) fn pause_for_test_under(point: &str, root: &Path) {
    static SETTING: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let Some(v) = SETTING.get_or_init(|| std::env::var("AGENT_SANDBOX_TEST_PAUSE").ok()) else { return };
    let Some((p, dir)) = v.split_once(':') else { return };
    if p != point {
        return;
    }
    let dir = &root.join(dir.trim_start_matches('/'));
    let _ = std::fs::write(dir.join(format!("{point}.reached")), "");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir.join(format!("{point}.go")).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(not(debug_assertions))]
pub(crate) fn pause_for_test(_point: &str) {}
