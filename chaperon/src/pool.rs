//! Threads kept for the next piece of work: the chaperon's calls (one connection each), and
//! its tasks (`spawn`: the copies of a query's output the governor keeps, the watch of an
//! sbatch). An agent's calls come in bursts, and starting a thread for each (its stack mapped,
//! its guard page, its teardown) was a tenth of the chaperon's work for a call; a thread that
//! finished waits a while for the next instead.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The chaperon's calls served at once (any more are told the chaperon is busy); each may have
/// a query's two output copies or an sbatch's watch at work too (`spawn`).
pub const CALLS_AT_ONCE: usize = 256;

/// How long a thread without work waits for the next before it ends.
const IDLE: Duration = Duration::from_secs(10);

/// The stack of a pool's thread: the chaperon's calls parse, spawn and write files, nothing
/// deep.
const STACK: usize = 256 << 10;

/// Busy threads, and idle ones waiting for `queue`; at most `max` at work at once.
pub struct Pool<T: Send + 'static> {
    serve: Arc<dyn Fn(T) + Send + Sync>,
    max: usize,
    state: Arc<(Mutex<Crew<T>>, Condvar)>,
}

struct Crew<T> {
    queue: VecDeque<T>,
    threads: usize,
    idle: usize,
}

impl<T: Send + 'static> Pool<T> {
    pub fn new(max: usize, serve: impl Fn(T) + Send + Sync + 'static) -> Pool<T> {
        let crew = Crew { queue: VecDeque::new(), threads: 0, idle: 0 };
        Pool { serve: Arc::new(serve), max, state: Arc::new((Mutex::new(crew), Condvar::new())) }
    }

    /// Gives `work` to an idle thread or a new one; gives it back if `max` are at work, or if
    /// no thread could be started.
    pub fn hand(&self, work: T) -> Result<(), T> {
        let (lock, wake) = &*self.state;
        let mut crew = lock.lock().unwrap_or_else(|p| p.into_inner());
        if crew.idle > crew.queue.len() {
            crew.queue.push_back(work);
            wake.notify_one();
            return Ok(());
        }
        if crew.threads - crew.idle >= self.max {
            return Err(work);
        }
        crew.threads += 1;
        drop(crew);
        let (serve, state) = (self.serve.clone(), self.state.clone());
        // The work goes to the new thread through a slot of its own, not moved into its
        // closure: when the thread cannot be started, the work is still here to give back.
        let slot = Arc::new(Mutex::new(Some(work)));
        let theirs = slot.clone();
        let spawned = std::thread::Builder::new().stack_size(STACK).spawn(move || {
            let first = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(first) = first {
                run(first, &*serve, &state);
            }
        });
        if spawned.is_err() {
            lock.lock().unwrap_or_else(|p| p.into_inner()).threads -= 1;
            return match slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(work) => Err(work),
                None => Ok(()),
            };
        }
        Ok(())
    }
}

/// Work for a thread of the chaperon's own besides the calls': the copies of a query's output
/// the governor keeps (two a call) and the watch of an sbatch (one).
pub type Task = Box<dyn FnOnce() + Send>;

/// Runs `task` on a kept thread of the task pool (or a new one). Refused (given back) only if
/// no thread could be started, or if as many tasks are at work as the chaperon's calls at once
/// can make.
pub fn spawn(task: Task) -> Result<(), Task> {
    static TASKS: std::sync::OnceLock<Pool<Task>> = std::sync::OnceLock::new();
    TASKS.get_or_init(|| Pool::new(3 * CALLS_AT_ONCE, |task: Task| task())).hand(task)
}

/// A pool's thread: does `first`, then the work queued for it, until none comes for `IDLE`.
fn run<T>(first: T, serve: &(dyn Fn(T) + Send + Sync), state: &(Mutex<Crew<T>>, Condvar)) {
    let (lock, wake) = state;
    let mut next = Some(first);
    while let Some(work) = next.take() {
        // Work that panics must not take its thread's place with it: the pool would shrink
        // for good.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(work)));
        let mut crew = lock.lock().unwrap_or_else(|p| p.into_inner());
        crew.idle += 1;
        let deadline = Instant::now() + IDLE;
        loop {
            if let Some(w) = crew.queue.pop_front() {
                next = Some(w);
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            crew = wake.wait_timeout(crew, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        crew.idle -= 1;
        if next.is_none() {
            crew.threads -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_thread_does_the_next_work_and_work_at_once_gets_threads_of_its_own_up_to_the_most() {
        use std::sync::mpsc;
        let (seen_tx, seen) = mpsc::channel::<std::thread::ThreadId>();
        let (release_tx, release) = mpsc::channel::<()>();
        let release = Arc::new(std::sync::Mutex::new(release));
        let workers = Pool::new(2, move |mut conn: UnixStream| {
            let _ = seen_tx.send(std::thread::current().id());
            let mut byte = [0u8; 1];
            // A connection that sends a byte holds its worker until released.
            if matches!(std::io::Read::read(&mut conn, &mut byte), Ok(1)) {
                let _ = release.lock().unwrap().recv();
            }
        });
        let call = |hold: bool| {
            let (ours, theirs) = UnixStream::pair().unwrap();
            if hold {
                std::io::Write::write_all(&mut &theirs, b"h").unwrap();
            }
            (ours, theirs)
        };
        let wait = Duration::from_secs(5);
        // One after the other: the same thread.
        let (a, a_end) = call(false);
        assert!(workers.hand(a).is_ok());
        drop(a_end);
        let first = seen.recv_timeout(wait).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let (b, b_end) = call(false);
        assert!(workers.hand(b).is_ok());
        drop(b_end);
        assert_eq!(seen.recv_timeout(wait).unwrap(), first, "the idle thread took the next call");
        std::thread::sleep(Duration::from_millis(100));
        // Two held at once: two threads; a third is refused while they are busy.
        let (c, _c_end) = call(true);
        let (d, _d_end) = call(true);
        assert!(workers.hand(c).is_ok() && workers.hand(d).is_ok());
        let (t1, t2) = (seen.recv_timeout(wait).unwrap(), seen.recv_timeout(wait).unwrap());
        assert_ne!(t1, t2, "calls at once run on threads of their own");
        let (e, _e_end) = call(false);
        assert!(workers.hand(e).is_err(), "a third call while two are served is handed back");
        release_tx.send(()).unwrap();
        release_tx.send(()).unwrap();
    }
}
