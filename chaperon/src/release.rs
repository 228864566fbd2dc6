//! Which Slurm release a call is read with. The chaperon learns the installed release once per
//! session (`parse_version`, from the real `sbatch --version`: a local call, no controller);
//! `dispatch` puts it in effect on the call's thread (`with`) for the whole call, so every
//! table read in it (`table::parse_with`, `table::Table::resolve`) takes that release's getopt
//! set and its options. Outside a call (the unit tests) 22.05 is in effect. Pure.

use std::cell::Cell;

/// A Slurm release, `YY.MM` (24.11): what decides a command's options. Slurm releases are
/// named by year and month, so they order as numbers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub year: u16,
    pub month: u16,
}

impl Release {
    pub const fn new(year: u16, month: u16) -> Release {
        Release { year, month }
    }

    /// Which dumped getopt set a command of this release has (`slurm_22_05`, `slurm_24_11`):
    /// 24.11's for 23.02 and later (options later than the release are left out of it by their
    /// entries' `since`, `table::Table::resolve`), 22.05's before. A release after 24.11 is
    /// read with 24.11's: what it added is unknown here, refused as the real getopt refuses
    /// an unknown option, until its set is dumped.
    pub fn set(self) -> Set {
        if self >= R23_02 {
            Set::V24_11
        } else {
            Set::V22_05
        }
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:02}", self.year, self.month)
    }
}

/// The releases the option tables name: 22.05 (the oldest, Debian 12's; an entry's default
/// `since`), the ones that added options the tables know, and 24.11 (Debian 13's).
pub const R22_05: Release = Release::new(22, 5);
pub const R23_02: Release = Release::new(23, 2);
pub const R23_11: Release = Release::new(23, 11);
pub const R24_05: Release = Release::new(24, 5);
pub const R24_11: Release = Release::new(24, 11);

/// The getopt sets dumped from real binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    V22_05,
    V24_11,
}

/// The release in `sbatch --version`'s output: `slurm 24.11.5`, `slurm-wlm 22.05.8` (Debian),
/// `slurm 23.02.7-1` (a site's build). None for anything else.
pub fn parse_version(text: &str) -> Option<Release> {
    let first = text.lines().next()?.trim();
    let (name, version) = first.split_once(' ')?;
    if !name.starts_with("slurm") {
        return None;
    }
    let mut parts = version.trim().split(['.', '-']);
    let year: u16 = parts.next()?.parse().ok()?;
    let month: u16 = parts.next()?.parse().ok()?;
    ((1..=12).contains(&month) && (14..100).contains(&year)).then_some(Release::new(year, month))
}

/// The release learned once per session: the first call that needs it asks, a call arriving
/// meanwhile waits for that answer rather than asking again.
#[derive(Debug, Default)]
pub struct Learned {
    value: std::sync::OnceLock<Release>,
    asking: std::sync::Mutex<()>,
}

impl Learned {
    pub fn get(&self) -> Option<Release> {
        self.value.get().copied()
    }

    /// `ask` run by one caller at a time; its answer kept when it has one (an sbatch that did
    /// not answer is asked again by the next call).
    pub fn learn(&self, ask: impl FnOnce() -> Option<Release>) -> Option<Release> {
        if let Some(r) = self.get() {
            return Some(r);
        }
        let _one = self.asking.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = self.get() {
            return Some(r);
        }
        let r = ask()?;
        Some(*self.value.get_or_init(|| r))
    }
}

/// What names one installed `sbatch` in the release cache of the state directory: its
/// device, inode, change time and size (an upgrade replaces the file, so all change).
pub fn cache_key(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{}:{}:{}.{}:{}", meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec(), meta.size())
}

/// The release the cache's text gives for `key` (lines `KEY YY.MM`), if any.
pub fn cached(text: &str, key: &str) -> Option<Release> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| parse_version(&format!("slurm {v}"))).flatten()
    })
}

thread_local! {
    static IN_EFFECT: Cell<Release> = const { Cell::new(R22_05) };
}

/// The release the call on this thread is read with.
pub fn in_effect() -> Release {
    IN_EFFECT.with(Cell::get)
}

/// Runs `f` with `release` in effect on this thread, and puts back what was before (also when
/// `f` panics: the guard's drop does it).
pub fn with<T>(release: Release, f: impl FnOnce() -> T) -> T {
    struct Restore(Release);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_EFFECT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(IN_EFFECT.with(|c| c.replace(release)));
    f()
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn the_cache_answers_only_for_its_own_binary() {
        let text = "1:2:3.4:5 24.11\n9:9:9.9:9 22.05\ngarbage\n";
        assert_eq!(cached(text, "1:2:3.4:5"), Some(R24_11));
        assert_eq!(cached(text, "9:9:9.9:9"), Some(R22_05));
        assert_eq!(cached(text, "1:2:3.4:6"), None);
        assert_eq!(cached("1:2:3.4:5 banana\n", "1:2:3.4:5"), None);
    }

    #[test]
    fn a_release_is_asked_once_while_callers_wait_for_it() {
        let learned = std::sync::Arc::new(Learned::default());
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let (l, a) = (learned.clone(), asked.clone());
                std::thread::spawn(move || {
                    l.learn(|| {
                        a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        Some(R24_11)
                    })
                })
            })
            .collect();
        for c in callers {
            assert_eq!(c.join().unwrap(), Some(R24_11));
        }
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        // No answer: not kept, asked again.
        let l = Learned::default();
        assert_eq!(l.learn(|| None), None);
        assert_eq!(l.learn(|| Some(R22_05)), Some(R22_05));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_slurm_prints_them() {
        assert_eq!(parse_version("slurm-wlm 22.05.8\n"), Some(R22_05));
        assert_eq!(parse_version("slurm 24.11.5\n"), Some(R24_11));
        assert_eq!(parse_version("slurm 23.02.7-1.el9\n"), Some(R23_02));
        assert_eq!(parse_version("slurm 25.05.0-0rc1\n"), Some(Release::new(25, 5)));
        for bad in ["", "sbatch: error: x", "slurm", "slurm x.y", "slurm 24.13.1", "bash 24.11", "slurm 24"] {
            assert_eq!(parse_version(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn releases_order_and_pick_their_set() {
        assert!(R22_05 < R23_02 && R23_02 < R23_11 && R23_11 < R24_05 && R24_05 < R24_11);
        assert_eq!(R22_05.set(), Set::V22_05);
        assert_eq!(R23_11.set(), Set::V24_11);
        assert_eq!(Release::new(25, 11).set(), Set::V24_11);
        assert_eq!(R24_11.to_string(), "24.11");
    }

    #[test]
    fn a_release_is_in_effect_for_the_call_only() {
        assert_eq!(in_effect(), R22_05);
        assert_eq!(with(R24_11, in_effect), R24_11);
        assert_eq!(in_effect(), R22_05);
        let _ = std::panic::catch_unwind(|| with(R24_11, || panic!("inside")));
        assert_eq!(in_effect(), R22_05);
    }
}
