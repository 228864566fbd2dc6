//! The scheduler-load governor: agents poll `squeue` and `sacct` in tight loops, and every
//! real call is an RPC that slurmctld (or slurmdbd) serves under a global lock. One per
//! session (the chaperon's), it
//!
//! - answers a repeated read-only query from the answer of the same call (same command,
//!   arguments, directory, scope and jobs in scope) made within the policy's interval;
//! - folds concurrent identical calls into one real call, whatever the interval;
//! - caps the real read-only calls per minute (a token bucket: a call over the cap waits);
//! - forgets what a change made stale: a call through this chaperon that may change a job
//!   (`note_change`), or a mark on the project's events file (a job of the project started or
//!   ended on a node, another session of the project changed one). No answer from before a
//!   change is reused; one made soon after it is reused only briefly (`Source`): the
//!   controller may record a job's end a moment after the job's last command, and the
//!   accounting database learns of every change later still.
//!
//! It decides nothing about scope: the key it is given already names the scope's jobs, and
//! what it stores is the answer the handler gave, already narrowed to them.

use crate::bounded::write_all;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// The policy's settings (`[slurm]`), as the launcher hands them over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    /// Seconds an answer is reused; 0: never (identical concurrent calls are still folded).
    pub query_interval: u64,
    /// Real read-only calls per minute, at most (at least 1).
    pub queries_per_minute: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { query_interval: 10, queries_per_minute: 30 }
    }
}

impl Settings {
    /// One line for the banner, the dry run and `policy show`.
    pub fn summary(&self) -> String {
        let reuse = match self.query_interval {
            0 => "no query answer reused".to_string(),
            s => format!("query answers reused for {s} s"),
        };
        format!("{reuse}, at most {} real queries a minute", self.queries_per_minute)
    }
}

/// An answer of the controller made less than this after a change is reused only until
/// this long after it.
pub const GRACE: Duration = Duration::from_secs(2);
/// An answer of the accounting database made soon after a change is reused for as long as
/// the change was old when it was made, at least this long (and at most the interval).
pub const SETTLING: Duration = Duration::from_secs(1);

/// Where a command's answer comes from, which says how soon after a change it is right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// slurmctld (`squeue`, `scontrol show`, `sinfo`...): it knows of a change through the
    /// chaperon when the call returns, and of a job's end within moments (`GRACE`).
    Controller,
    /// slurmdbd (`sacct`, `sreport`, `sshare`, `sacctmgr`): it learns of each change from the
    /// controller's queue, seconds later under load. Answers made soon after a change are
    /// reused for a time that doubles as the change grows older, so a loop sees the record
    /// arrive within about the time it took.
    Accounting,
}
/// The largest answer kept (a larger one is passed through, not stored).
pub const MAX_ANSWER: usize = 1 << 20;
/// What all stored answers of a session may take together, and how many there may be.
const BUDGET: usize = 8 << 20;
const MAX_ENTRIES: usize = 64;
/// Calls over the cap wait at most this long for their turn; then they are refused (with
/// the reason): however many calls a session makes at once, the cap holds.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// What a real call gave its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Answer {
    fn size(&self) -> usize {
        self.stdout.len() + self.stderr.len()
    }
}

enum Slot {
    /// A real call for this key is running; `fill` numbers it, so that those who waited for
    /// it take its answer even when answers are not otherwise reused.
    Filling {
        fill: u64,
    },
    Ready {
        answer: Arc<Answer>,
        fill: u64,
        generation: u64,
        filled: Instant,
        filled_at: SystemTime,
    },
}

/// How the governor served the session so far (for the audit log and the tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Real read-only calls made.
    pub real: u64,
    /// Calls answered from an earlier call's answer.
    pub reused: u64,
    /// Calls answered by an identical call that was running when they came.
    pub folded: u64,
}

struct State {
    slots: HashMap<String, Slot>,
    /// Bumped by every change made through this chaperon.
    generation: u64,
    /// When the last change through this chaperon was made (the events file says the same,
    /// where it can be written).
    changed_at: Option<SystemTime>,
    fills: u64,
    tokens: f64,
    refilled: Instant,
    stats: Stats,
}

pub struct Governor {
    settings: Settings,
    /// The project's events file (`scope::Registry::events`): its modification time is the
    /// last time a job of the project started, ended or was changed anywhere.
    events: Option<PathBuf>,
    state: Mutex<State>,
    done: Condvar,
    /// How long a call over the cap waits for its turn (`MAX_WAIT`).
    max_wait: Duration,
}

/// What a read-only call is to do.
pub enum Ticket<'a> {
    /// Answer with this, made `age` ago (`folded`: by a call that was running when this came).
    Answered { answer: Arc<Answer>, age: Duration, folded: bool },
    /// Make the real call and give its answer to `Fill::done`.
    Fill(Fill<'a>),
    /// The cap held this call for `MAX_WAIT` and it is still over: refuse it.
    Busy,
}

/// The right and the duty to make one real call for a key: until `done` (or drop), identical
/// calls wait for it.
pub struct Fill<'a> {
    gov: &'a Governor,
    key: String,
    fill: u64,
    generation: u64,
    started: Instant,
    started_at: SystemTime,
    /// How long the cap held this call before it could be made.
    pub waited: Duration,
}

impl Governor {
    pub fn new(settings: Settings, events: Option<PathBuf>) -> Governor {
        let tokens = burst(settings.queries_per_minute);
        Governor {
            settings,
            events,
            state: Mutex::new(State {
                slots: HashMap::new(),
                generation: 0,
                changed_at: None,
                fills: 0,
                tokens,
                refilled: Instant::now(),
                stats: Stats::default(),
            }),
            done: Condvar::new(),
            max_wait: MAX_WAIT,
        }
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A thread that panicked holding the lock left a consistent map (no step of ours
        // leaves it half-changed), so the session goes on.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// When a job of the project last started, ended or was changed, as far as the events file
    /// says (None: never, or no events file).
    fn last_event(&self) -> Option<SystemTime> {
        let path = self.events.as_ref()?;
        std::fs::symlink_metadata(path).ok()?.modified().ok()
    }

    /// A call that may change a job is about to be made: nothing answered before it is reused
    /// in this session (what a call running meanwhile brings back included).
    pub fn note_change(&self) {
        let mut st = self.lock();
        st.generation += 1;
        st.changed_at = Some(SystemTime::now());
        st.slots.retain(|_, s| matches!(s, Slot::Filling { .. }));
    }

    /// A call that may have changed a job went through: as `note_change`, and the project's
    /// other sessions are told through the events file. Not for a refused call: it changed
    /// nothing, and a loop of them must not make every session of the project ask again.
    pub fn note_changed(&self) {
        self.note_change();
        if let Some(path) = &self.events {
            mark(path);
        }
    }

    /// The ticket for one read-only call with this key, whose answer comes from `source`.
    pub fn query(&self, key: String, source: Source) -> Ticket<'_> {
        let marked = self.last_event();
        let interval = Duration::from_secs(self.settings.query_interval);
        let mut st = self.lock();
        let last_change = marked.max(st.changed_at);
        let mut waited_for: Option<u64> = None;
        loop {
            match st.slots.get(&key) {
                Some(Slot::Ready { answer, fill, generation, filled, filled_at }) if *generation == st.generation => {
                    let age = filled.elapsed();
                    let folded = waited_for == Some(*fill);
                    let unchanged = last_change.is_none_or(|e| holds(source, e, *filled_at, SystemTime::now()));
                    if folded || (age < interval && unchanged) {
                        let answer = answer.clone();
                        match folded {
                            true => st.stats.folded += 1,
                            false => st.stats.reused += 1,
                        }
                        return Ticket::Answered { answer, age, folded };
                    }
                    break;
                }
                Some(Slot::Filling { fill }) => {
                    waited_for = Some(*fill);
                    st = match self.done.wait_timeout(st, Duration::from_secs(1)) {
                        Ok((guard, _)) => guard,
                        Err(p) => p.into_inner().0,
                    };
                }
                _ => break,
            }
        }
        st.fills += 1;
        let fill = st.fills;
        st.slots.insert(key.clone(), Slot::Filling { fill });
        // The cap: wait (without the lock) for a token.
        let asked = Instant::now();
        let per_sec = f64::from(self.settings.queries_per_minute.max(1)) / 60.0;
        loop {
            let now = Instant::now();
            let elapsed = now.duration_since(st.refilled).as_secs_f64();
            st.tokens = (st.tokens + elapsed * per_sec).min(burst(self.settings.queries_per_minute));
            st.refilled = now;
            if st.tokens >= 1.0 {
                st.tokens -= 1.0;
                break;
            }
            if asked.elapsed() >= self.max_wait {
                // Its slot goes to the next caller of the same key, if one waits.
                st.slots.remove(&key);
                drop(st);
                self.done.notify_all();
                return Ticket::Busy;
            }
            let need = Duration::from_secs_f64(((1.0 - st.tokens) / per_sec).min(self.max_wait.as_secs_f64()));
            drop(st);
            std::thread::sleep(need.min(self.max_wait.saturating_sub(asked.elapsed())).max(Duration::from_millis(1)));
            st = self.lock();
        }
        st.stats.real += 1;
        let generation = st.generation;
        Ticket::Fill(Fill {
            gov: self,
            key,
            fill,
            generation,
            started: Instant::now(),
            started_at: SystemTime::now(),
            waited: asked.elapsed(),
        })
    }
}

/// Whether an answer from `source` whose real call started at `filled_at` still holds at
/// `now` after the last change `e` (the interval is checked apart). Never if the call started
/// before the change. From the controller: if it started within `GRACE` after the change,
/// only until the grace ends, so a polling loop makes one real call at the change and one
/// after the grace, not one per poll. From the accounting database: for as long as the change
/// was old when the call started (at least `SETTLING`).
fn holds(source: Source, e: SystemTime, filled_at: SystemTime, now: SystemTime) -> bool {
    let Ok(since) = filled_at.duration_since(e) else { return false };
    match source {
        Source::Controller => since >= GRACE || now < e + GRACE,
        Source::Accounting => now < filled_at + since.max(SETTLING),
    }
}

/// Tokens a full bucket holds: a few calls at once, then the rate.
fn burst(per_minute: u32) -> f64 {
    f64::from(per_minute.clamp(1, 10))
}

impl Fill<'_> {
    /// The real call's answer: kept for later identical calls (None: nothing to keep, e.g. a
    /// refusal or an answer too large), and given to those waiting for it.
    pub fn done(mut self, answer: Option<Answer>) {
        self.finish(answer);
    }

    fn finish(&mut self, answer: Option<Answer>) {
        let key = std::mem::take(&mut self.key);
        let mut st = self.gov.lock();
        // Only this fill's own slot: a change may have cleared it, or a later fill taken it.
        if matches!(st.slots.get(&key), Some(Slot::Filling { fill }) if *fill == self.fill) {
            // A command killed by a signal (the caller went away, the bound ran out) gave a
            // partial answer: never kept.
            match answer.filter(|a| a.size() <= MAX_ANSWER && (0..128).contains(&a.code)) {
                Some(a) => {
                    let ready = Slot::Ready {
                        answer: Arc::new(a),
                        fill: self.fill,
                        generation: self.generation,
                        filled: self.started,
                        filled_at: self.started_at,
                    };
                    st.slots.insert(key, ready);
                    prune(&mut st.slots, Duration::from_secs(self.gov.settings.query_interval));
                }
                None => {
                    st.slots.remove(&key);
                }
            }
        }
        drop(st);
        self.gov.done.notify_all();
    }
}

impl Drop for Fill<'_> {
    /// A fill dropped without `done` (its handler panicked) frees its key for the waiters.
    fn drop(&mut self) {
        if !self.key.is_empty() {
            self.finish(None);
        }
    }
}

/// Drops answers past their interval (kept one interval more for those who folded onto
/// them), then the oldest, until the rest fits the budget.
fn prune(slots: &mut HashMap<String, Slot>, interval: Duration) {
    let keep = interval.max(Duration::from_secs(1)) * 2;
    slots.retain(|_, s| match s {
        Slot::Ready { filled, .. } => filled.elapsed() < keep,
        Slot::Filling { .. } => true,
    });
    loop {
        let ready = slots.values().filter_map(|s| match s {
            Slot::Ready { answer, filled, .. } => Some((answer.size(), *filled)),
            Slot::Filling { .. } => None,
        });
        let (bytes, count) = ready.fold((0, 0), |(b, c), (size, _)| (b + size, c + 1));
        if bytes <= BUDGET && count <= MAX_ENTRIES {
            return;
        }
        let oldest = slots
            .iter()
            .filter_map(|(k, s)| match s {
                Slot::Ready { filled, .. } => Some((k.clone(), *filled)),
                Slot::Filling { .. } => None,
            })
            .min_by_key(|(_, filled)| *filled)
            .map(|(k, _)| k);
        match oldest {
            Some(k) => slots.remove(&k),
            None => return,
        };
    }
}

/// Marks the events file: a job of the project started, ended or was changed now. Errors
/// are ignored: a mark that cannot be made leaves answers to their interval.
pub fn mark(path: &std::path::Path) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
    if let Ok(f) = f {
        if f.metadata().is_ok_and(|m| m.is_file()) {
            let _ = f.set_modified(SystemTime::now());
        }
    }
}

/// A real call's output on its way to the caller, with a copy kept: the handler writes to the
/// two pipes `new` gives; two threads pass what arrives on to the caller's descriptors as
/// it comes (so a long answer streams as before) and keep up to `MAX_ANSWER` bytes of it.
/// The threads are the task pool's (`pool::spawn`), kept for the next query: starting two
/// threads for every query cost it some 40 µs on a 2-core node.
pub struct Tee {
    copies: [std::sync::mpsc::Receiver<Option<Vec<u8>>>; 2],
}

impl Tee {
    /// The tee, and the write ends of its stdout and stderr pipes.
    pub fn new(to_stdout: OwnedFd, to_stderr: OwnedFd, timeout: Duration) -> std::io::Result<(Tee, OwnedFd, OwnedFd)> {
        let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let pass = |from: OwnedFd, to: OwnedFd| {
            let (done, copy) = std::sync::mpsc::sync_channel(1);
            let task = Box::new(move || {
                let _ = done.send(pass_on(from, to, timeout));
            });
            match crate::pool::spawn(task) {
                Ok(()) => Ok(copy),
                Err(_) => Err(std::io::Error::other("no thread to pass the output on")),
            }
        };
        let out = pass(out_r, to_stdout)?;
        let err = pass(err_r, to_stderr)?;
        Ok((Tee { copies: [out, err] }, out_w, err_w))
    }

    /// Waits until both pipes ended (every writer closed them) and gives the copies: None if
    /// the output was too large to keep, or did not reach the caller whole.
    pub fn finish(self) -> Option<(Vec<u8>, Vec<u8>)> {
        let [out, err] = self.copies;
        // A copy whose thread panicked never sends: its sender is dropped, and that is None.
        let out = out.recv().ok().flatten();
        let err = err.recv().ok().flatten();
        Some((out?, err?))
    }
}

/// Copies `from` to `to` until `from` ends (or `timeout` passes without an end); the copy
/// kept, unless it grew past `MAX_ANSWER` or the caller stopped taking it.
fn pass_on(from: OwnedFd, to: OwnedFd, timeout: Duration) -> Option<Vec<u8>> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = Instant::now() + timeout;
    let mut kept = Some(Vec::new());
    let mut delivering = true;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::ZERO);
        match poll(&mut [PollFd::new(from.as_fd(), PollFlags::POLLIN)], wait) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(_) => return None,
        }
        let n = match nix::unistd::read(&from, &mut buf) {
            Ok(0) => return kept,
            Ok(n) => n,
            Err(nix::Error::EINTR | nix::Error::EAGAIN) => continue,
            Err(_) => return None,
        };
        // A caller that stopped reading loses the rest; the pipe is still drained, so the
        // real command is not held.
        if delivering && write_all(to.as_fd(), &buf[..n], left).is_err() {
            delivering = false;
            kept = None;
        }
        if let Some(k) = kept.as_mut() {
            if k.len() + n > MAX_ANSWER {
                kept = None;
            } else {
                k.extend_from_slice(&buf[..n]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Answer {
        Answer { code: 0, stdout: text.as_bytes().to_vec(), stderr: vec![] }
    }

    const CTLD: Source = Source::Controller;

    fn fill(g: &Governor, key: &str, text: &str) {
        match g.query(key.into(), CTLD) {
            Ticket::Fill(f) => f.done(Some(answer(text))),
            Ticket::Answered { .. } | Ticket::Busy => panic!("{key}: not filled"),
        }
    }

    fn reused(g: &Governor, key: &str) -> Option<String> {
        match g.query(key.into(), CTLD) {
            Ticket::Answered { answer, .. } => Some(String::from_utf8_lossy(&answer.stdout).into_owned()),
            Ticket::Fill(f) => {
                f.done(None);
                None
            }
            Ticket::Busy => None,
        }
    }

    fn governor(interval: u64, per_minute: u32, events: Option<PathBuf>) -> Governor {
        Governor::new(Settings { query_interval: interval, queries_per_minute: per_minute }, events)
    }

    #[test]
    fn a_repeated_query_is_answered_from_the_first_until_a_change() {
        let g = governor(60, 600, None);
        fill(&g, "squeue", "1 R");
        assert_eq!(reused(&g, "squeue").as_deref(), Some("1 R"));
        assert_eq!(reused(&g, "squeue -l"), None, "another call is another key");
        g.note_change();
        assert_eq!(reused(&g, "squeue"), None, "a change through the chaperon: asked again");
        assert_eq!(g.stats(), Stats { real: 3, reused: 1, folded: 0 });
    }

    #[test]
    fn an_answer_is_reused_within_the_interval_only() {
        let g = governor(1, 600, None);
        fill(&g, "q", "a");
        assert!(reused(&g, "q").is_some());
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(reused(&g, "q"), None);
        let off = governor(0, 600, None);
        fill(&off, "q", "a");
        assert_eq!(reused(&off, "q"), None, "interval 0: never reused");
    }

    #[test]
    fn a_mark_of_the_events_file_makes_earlier_answers_stale() {
        let dir = std::env::temp_dir().join(format!("governor-{}", std::process::id()));
        let events = dir.join("p.events");
        let g = governor(60, 600, Some(events.clone()));
        // Marked long ago: answers are reused.
        mark(&events);
        let old = SystemTime::now() - Duration::from_secs(30);
        std::fs::File::options().write(true).open(&events).unwrap().set_modified(old).unwrap();
        fill(&g, "q", "a");
        assert!(reused(&g, "q").is_some());
        // A job started or ended on a node: the next call is real; its answer is reused until
        // the grace after the mark ends, and then asked again once.
        mark(&events);
        fill(&g, "q", "b");
        assert_eq!(reused(&g, "q").as_deref(), Some("b"), "within the grace");
        std::thread::sleep(GRACE + Duration::from_millis(100));
        assert_eq!(reused(&g, "q"), None, "filled within the grace: asked again after it");
        fill(&g, "q", "c");
        assert_eq!(reused(&g, "q").as_deref(), Some("c"), "filled after the grace: reused for the interval");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_answer_from_before_a_change_never_holds() {
        let t = SystemTime::now();
        let s = Duration::from_secs;
        for source in [Source::Controller, Source::Accounting] {
            assert!(!holds(source, t, t - s(1), t), "started before the change");
        }
        let c = Source::Controller;
        assert!(holds(c, t, t + s(1), t + s(1)), "within the grace, while it lasts");
        assert!(!holds(c, t, t + s(1), t + GRACE), "within the grace, after it");
        assert!(holds(c, t, t + GRACE, t + s(3600)), "after the grace: the interval decides");
        let a = Source::Accounting;
        let ms = Duration::from_millis;
        assert!(holds(a, t, t + ms(100), t + ms(900)) && !holds(a, t, t + ms(100), t + ms(1200)), "at least SETTLING");
        assert!(holds(a, t, t + s(4), t + s(7)) && !holds(a, t, t + s(4), t + s(8)), "as old as the change was");
        assert!(holds(a, t, t + s(60), t + s(119)), "long after: the interval decides");
    }

    #[test]
    fn concurrent_identical_calls_are_one_real_call() {
        let g = Arc::new(governor(0, 600, None));
        let first = match g.query("q".into(), CTLD) {
            Ticket::Fill(f) => f,
            Ticket::Answered { .. } | Ticket::Busy => panic!("not a fill"),
        };
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || matches!(g.query("q".into(), CTLD), Ticket::Answered { folded: true, .. }))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        first.done(Some(answer("x")));
        for w in waiters {
            assert!(w.join().unwrap(), "folded onto the running call, though answers are not reused (interval 0)");
        }
        assert_eq!(g.stats(), Stats { real: 1, reused: 0, folded: 8 });
    }

    #[test]
    fn a_fill_dropped_without_an_answer_lets_a_waiter_make_the_call() {
        let g = Arc::new(governor(60, 600, None));
        let first = match g.query("q".into(), CTLD) {
            Ticket::Fill(f) => f,
            Ticket::Answered { .. } | Ticket::Busy => panic!("not a fill"),
        };
        let g2 = g.clone();
        let waiter = std::thread::spawn(move || matches!(g2.query("q".into(), CTLD), Ticket::Fill(_)));
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn real_calls_over_the_cap_wait_for_their_turn() {
        // 120 a minute: a burst of 10, then one every 0.5 s.
        let g = governor(0, 120, None);
        let t = Instant::now();
        for i in 0..12 {
            if let Ticket::Fill(f) = g.query(format!("q{i}"), CTLD) {
                f.done(None);
            }
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn calls_at_once_cannot_get_past_the_cap() {
        // 60 a minute, a burst of 10; 40 callers at once, each waiting at most 300 ms: about
        // 10 go through, the rest are refused, and the bucket never goes below empty.
        let mut g = governor(0, 60, None);
        g.max_wait = Duration::from_millis(300);
        let g = Arc::new(g);
        let callers: Vec<_> = (0..40)
            .map(|i| {
                let g = g.clone();
                std::thread::spawn(move || match g.query(format!("q{i}"), CTLD) {
                    Ticket::Fill(f) => {
                        f.done(None);
                        true
                    }
                    _ => false,
                })
            })
            .collect();
        let through = callers.into_iter().map(|c| c.join().unwrap_or(false)).filter(|t| *t).count();
        assert!((10..=11).contains(&through), "{through} of 40 went through a cap of a burst of 10 then 1/s");
        assert!(g.lock().tokens > -0.001, "the bucket went below empty");
    }

    #[test]
    fn a_partial_answer_is_never_kept() {
        let g = governor(60, 600, None);
        match g.query("q".into(), CTLD) {
            Ticket::Fill(f) => f.done(Some(Answer { code: 137, stdout: b"JOBID\n".to_vec(), stderr: vec![] })),
            _ => panic!("not a fill"),
        }
        assert_eq!(reused(&g, "q"), None, "killed by SIGKILL: asked again");
    }

    #[test]
    fn the_store_stays_within_its_budget() {
        let g = governor(600, 100_000, None);
        for i in 0..200 {
            fill(&g, &format!("q{i}"), &"x".repeat(200 << 10));
        }
        let st = g.lock();
        let bytes: usize = st
            .slots
            .values()
            .map(|s| match s {
                Slot::Ready { answer, .. } => answer.size(),
                Slot::Filling { .. } => 0,
            })
            .sum();
        assert!(bytes <= BUDGET && st.slots.len() <= MAX_ENTRIES, "{bytes} bytes in {}", st.slots.len());
        assert!(st.slots.contains_key("q199"), "the newest answer is kept");
    }

    #[test]
    fn the_tee_passes_output_on_and_keeps_a_copy() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let (er, ew) = nix::unistd::pipe().unwrap();
        let (tee, out_w, err_w) = Tee::new(w, ew, Duration::from_secs(5)).unwrap();
        nix::unistd::write(&out_w, b"JOBID\n1\n").unwrap();
        nix::unistd::write(&err_w, b"warn\n").unwrap();
        drop((out_w, err_w));
        let (out, err) = tee.finish().unwrap();
        assert_eq!((out.as_slice(), err.as_slice()), (&b"JOBID\n1\n"[..], &b"warn\n"[..]));
        let mut got = vec![0u8; 64];
        let n = nix::unistd::read(&r, &mut got).unwrap();
        assert_eq!(&got[..n], b"JOBID\n1\n");
        let n = nix::unistd::read(&er, &mut got).unwrap();
        assert_eq!(&got[..n], b"warn\n");
    }
}
