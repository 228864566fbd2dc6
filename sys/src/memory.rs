//! Giving memory back: the launcher, the jail's init and the cleanup waiter live as long as
//! the session and hold what they built it with; what they freed would otherwise stay
//! resident in each of the hundreds of sessions a node may run.

use std::time::{Duration, Instant};

/// Gives the free pages of the heap back to the kernel (glibc's allocator; musl's, which the
/// stub is linked with, returns freed memory itself and has no such call).
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and releases the allocator's own free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How long a session runs before its long-lived processes trim their heaps: `malloc_trim`
/// walks the whole heap (about a millisecond), which a short command must not wait for.
pub const TRIM_AFTER: Duration = Duration::from_secs(2);

/// A heap trim due `TRIM_AFTER` from now, for a process's wait loop.
pub struct TrimLater(Option<Instant>);

impl TrimLater {
    pub fn new() -> TrimLater {
        TrimLater(Some(Instant::now() + TRIM_AFTER))
    }

    /// How long the loop may wait before the trim is due (None: it was done).
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        self.0.map(|due| due.saturating_duration_since(now))
    }

    /// Trims once, when due.
    pub fn run_if_due(&mut self, now: Instant) {
        if self.0.is_some_and(|due| now >= due) {
            trim_heap();
            self.0 = None;
        }
    }
}

impl Default for TrimLater {
    fn default() -> Self {
        TrimLater::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trim_is_due_once_after_its_delay() {
        let start = Instant::now();
        let mut t = TrimLater::new();
        assert!(t.wait(start).is_some_and(|d| d > Duration::from_millis(1900)));
        t.run_if_due(start);
        assert!(t.wait(start).is_some(), "trimmed before it was due");
        let later = Instant::now() + TRIM_AFTER;
        assert_eq!(t.wait(later), Some(Duration::ZERO), "not due after its delay");
        t.run_if_due(later);
        assert_eq!(t.wait(later), None, "not done when due");
    }
}
