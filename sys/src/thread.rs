//! Threads on stacks of our own, unmapped when they are joined.
//!
//! glibc keeps the stack of every thread that ended (up to 40 MiB of them) for the next thread,
//! with the pages the thread touched: its descriptor, its thread-local data and the top of its
//! frames, 8-16 KiB each. The launcher reads a network home with a dozen short threads at the
//! start and then idles for the whole session, so glibc's cache held about 130 KiB a session
//! that no thread would use again (issue 35). A stack we map ourselves is never cached: glibc
//! puts the thread's descriptor and thread-local data in it, and once the thread is joined the
//! mapping is ours to unmap.

use crate::memory::{page_size, Pages};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// What a thread runs: the caller's work, with its lifetime erased (see `Scope::spawn`).
type Job = Box<dyn FnOnce() + Send>;

/// The answer a thread leaves: what its work returned, or the panic that ended it.
type Answer<T> = Arc<Mutex<Option<std::thread::Result<T>>>>;

/// A started thread and the stack it runs on. Joined when dropped: its stack is unmapped only
/// once nothing runs on it.
struct Raw {
    id: libc::pthread_t,
    stack: Option<Pages>,
    /// Its work panicked (the panic is in its answer).
    panicked: Arc<AtomicBool>,
    /// Its answer was taken by a `join`: a panic in it was seen there.
    claimed: bool,
}

/// A stack of `asked` bytes as glibc takes it: at least its minimum (which grows with the
/// program's thread-local data, and is 128 KiB on aarch64) on top of what was asked, in whole
/// pages. Pages never touched cost nothing.
fn stack_size(asked: usize) -> usize {
    // SAFETY: sysconf reads no memory of ours.
    let least = usize::try_from(unsafe { libc::sysconf(libc::_SC_THREAD_STACK_MIN) }).unwrap_or(0).max(16 << 10);
    let page = page_size();
    asked.saturating_add(least).div_ceil(page).saturating_mul(page)
}

impl Raw {
    /// Starts `job` on a new thread with about `asked` bytes of stack (a guard page below).
    fn start(asked: usize, job: Job, panicked: Arc<AtomicBool>) -> std::io::Result<Raw> {
        let (guard, size) = (page_size(), stack_size(asked));
        let stack = Pages::stack(guard + size)?;
        stack.guard_low(guard)?;
        let job: *mut Job = Box::into_raw(Box::new(job));
        // SAFETY: `attr` is initialised before use and destroyed after; the stack range is
        // our own mapping above its guard page, alive until the thread is joined (`join`
        // unmaps it only after pthread_join returned). `job` is a pointer from Box::into_raw
        // that the new thread takes back exactly once, or that we take back here if the thread
        // did not start.
        let id = unsafe {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            if libc::pthread_attr_init(&mut attr) != 0 {
                drop(Box::from_raw(job));
                return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
            }
            let base = (stack.addr() + guard) as *mut libc::c_void;
            let mut id: libc::pthread_t = std::mem::zeroed();
            let mut rc = libc::pthread_attr_setstack(&mut attr, base, size);
            if rc == 0 {
                rc = libc::pthread_create(&mut id, &attr, run, job.cast());
            }
            libc::pthread_attr_destroy(&mut attr);
            if rc != 0 {
                drop(Box::from_raw(job));
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            id
        };
        Ok(Raw { id, stack: Some(stack), panicked, claimed: false })
    }

    /// Waits for the thread to end, then unmaps its stack.
    fn join(&mut self) {
        let Some(stack) = self.stack.take() else { return };
        // SAFETY: `id` is a thread we started and have not joined or detached (the stack is
        // still here); after pthread_join returns the thread has exited and the kernel has
        // cleared its thread id, so nothing runs on the stack any more.
        let rc = unsafe { libc::pthread_join(self.id, std::ptr::null_mut()) };
        if rc != 0 {
            // Not known to have ended: the thread may still use its stack and what its work
            // borrows, which the caller is about to give up. Nothing safe is left to do.
            eprintln!("agent-sandbox: cannot wait for a thread (pthread_join: {rc})");
            std::process::abort();
        }
        drop(stack);
    }

    /// Lets the thread run on unwaited: its stack stays mapped for the process's life.
    fn detach(&mut self) {
        let Some(stack) = self.stack.take() else { return };
        std::mem::forget(stack);
        // SAFETY: a thread we started and have not joined or detached; its stack is never
        // unmapped now.
        unsafe { libc::pthread_detach(self.id) };
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.join();
    }
}

/// The thread's start: runs its job, which catches its own panics (`with_answer`).
extern "C" fn run(job: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `job` is the pointer `Raw::start` made with Box::into_raw and gave this thread
    // alone.
    let job = unsafe { Box::from_raw(job.cast::<Job>()) };
    job();
    std::ptr::null_mut()
}

/// `work` made into a job that leaves its answer, or its panic, in `answer`.
fn with_answer<'a, T: Send + 'a>(
    work: impl FnOnce() -> T + Send + 'a,
    answer: &Answer<T>,
    panicked: &Arc<AtomicBool>,
) -> Box<dyn FnOnce() + Send + 'a> {
    let (slot, panicked) = (Arc::clone(answer), Arc::clone(panicked));
    Box::new(move || {
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        panicked.store(got.is_err(), Ordering::Release);
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(got);
    })
}

/// Takes a thread's answer once it has ended.
fn taken<T>(answer: &Answer<T>) -> std::thread::Result<T> {
    let got = answer.lock().unwrap_or_else(PoisonError::into_inner).take();
    got.unwrap_or_else(|| Err(Box::new("the thread gave no answer")))
}

/// Threads that borrow from the caller, all joined before `scope` returns (`std::thread::scope`,
/// on stacks of our own).
pub struct Scope<'env> {
    started: RefCell<Vec<Raw>>,
    // Invariant in 'env: the scope cannot be taken for one over a shorter lifetime, so a
    // thread never borrows what ends before the scope joins it.
    _env: PhantomData<fn(&'env ()) -> &'env ()>,
}

/// A thread of a `Scope`, whose answer `join` gives.
pub struct Handle<'s, T> {
    index: usize,
    answer: Answer<T>,
    scope: &'s RefCell<Vec<Raw>>,
}

impl<T> Handle<'_, T> {
    /// Waits for the thread, and gives what it returned or the panic that ended it.
    pub fn join(self) -> std::thread::Result<T> {
        if let Some(raw) = self.scope.borrow_mut().get_mut(self.index) {
            raw.join();
            raw.claimed = true;
        }
        taken(&self.answer)
    }
}

impl<'env> Scope<'env> {
    /// Runs `work` on a new thread with `stack` bytes of stack (and glibc's minimum). An
    /// error (no memory, no thread) leaves `work` unrun.
    pub fn spawn<T: Send + 'env>(
        &self,
        stack: usize,
        work: impl FnOnce() -> T + Send + 'env,
    ) -> std::io::Result<Handle<'_, T>> {
        let answer: Answer<T> = Arc::new(Mutex::new(None));
        let panicked = Arc::new(AtomicBool::new(false));
        let job = with_answer(work, &answer, &panicked);
        // SAFETY: only the lifetime changes. The job may borrow for 'env, and the thread
        // running it is joined before `scope` returns, which is before 'env ends ('env is a
        // lifetime of scope's caller, and the scope cannot be shortened: it is invariant).
        let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'env>, Job>(job) };
        let raw = Raw::start(stack, job, panicked)?;
        let mut started = self.started.borrow_mut();
        started.push(raw);
        Ok(Handle { index: started.len() - 1, answer, scope: &self.started })
    }
}

/// Runs `f` with a scope whose threads are all joined before this returns, even when `f`
/// panics (the panic goes on once they are). As with `std::thread::scope`, a thread that
/// panicked and was not joined by hand makes this panic: its work did not all get done.
pub fn scope<'env, R>(f: impl FnOnce(&Scope<'env>) -> R) -> R {
    let scope = Scope { started: RefCell::new(Vec::new()), _env: PhantomData };
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&scope)));
    let mut unseen = false;
    for raw in scope.started.borrow_mut().iter_mut() {
        raw.join();
        unseen |= !raw.claimed && raw.panicked.load(Ordering::Acquire);
    }
    let out = out.unwrap_or_else(|p| std::panic::resume_unwind(p));
    assert!(!unseen, "a thread of the scope panicked");
    out
}

/// A thread that owns what it runs on (`spawn`). Dropped unjoined, it is let run on (an error
/// path of the launch does not wait for a read ahead on a stuck network filesystem), and its
/// stack stays mapped.
pub struct Thread<T> {
    raw: Raw,
    answer: Answer<T>,
}

/// Runs `work` on a thread named `name` with `stack` bytes of stack (and glibc's minimum), to
/// be joined later (a read ahead whose answer is wanted further on).
pub fn spawn<T: Send + 'static>(
    name: &str,
    stack: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<Thread<T>> {
    let answer: Answer<T> = Arc::new(Mutex::new(None));
    let panicked = Arc::new(AtomicBool::new(false));
    // Named as std names its threads (in panics' messages, `comm` of the task), by the
    // thread itself before its work: named from here, it could run (and be seen) unnamed
    // first. A name longer than the kernel keeps (15 bytes) is left off.
    let name = std::ffi::CString::new(name).ok().filter(|n| n.as_bytes().len() < 16);
    let named = move || {
        if let Some(n) = &name {
            // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which
            // `n` is, and changes only this thread's name.
            unsafe { libc::prctl(libc::PR_SET_NAME, n.as_ptr()) };
        }
        work()
    };
    let raw = Raw::start(stack, with_answer(named, &answer, &panicked), panicked)?;
    Ok(Thread { raw, answer })
}

impl<T> Thread<T> {
    /// Waits for the thread, and gives what it returned or the panic that ended it.
    pub fn join(mut self) -> std::thread::Result<T> {
        self.raw.join();
        taken(&self.answer)
    }
}

impl<T> Drop for Thread<T> {
    fn drop(&mut self) {
        // Joined already by `join` (then nothing is left to do), or let run on.
        self.raw.detach();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed setup is a failed test
mod tests {
    use super::*;

    /// Mappings of this process with that start address.
    fn mapped(addr: usize) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().any(|l| l.split('-').next().and_then(|a| usize::from_str_radix(a, 16).ok()) == Some(addr))
    }

    #[test]
    fn scoped_threads_borrow_answer_and_leave_no_stack_behind() {
        let words = ["a", "bb", "ccc"];
        let (lens, addrs) = scope(|s| {
            let hs: Vec<_> = words.iter().map(|w| s.spawn(64 << 10, move || w.len()).unwrap()).collect();
            let addrs: Vec<usize> =
                s.started.borrow().iter().map(|r| r.stack.as_ref().map(Pages::addr).unwrap_or(0)).collect();
            assert!(addrs.iter().all(|&a| a != 0 && mapped(a)));
            (hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>(), addrs)
        });
        assert_eq!(lens, vec![1, 2, 3]);
        // The stacks are unmapped once joined, guard page and all: nothing for glibc to keep.
        assert!(addrs.iter().all(|&a| !mapped(a)), "a stack is still mapped");
    }

    #[test]
    fn a_panic_in_a_thread_is_its_join_answer_and_unjoined_threads_are_joined_at_the_end() {
        let done = std::sync::atomic::AtomicUsize::new(0);
        let panicked = scope(|s| {
            let bad = s.spawn(64 << 10, || -> u8 { panic!("on purpose") }).unwrap();
            for _ in 0..3 {
                // Never joined by hand: the scope waits for them.
                s.spawn(64 << 10, || {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                })
                .unwrap();
            }
            bad.join().is_err()
        });
        assert!(panicked);
        assert_eq!(done.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[test]
    fn a_panic_no_join_saw_makes_the_scope_panic() {
        // As std's scope: work left undone is not taken for done (a listing answered by
        // its default would read as "absent").
        let r = std::panic::catch_unwind(|| {
            scope(|s| {
                s.spawn(64 << 10, || panic!("on purpose")).unwrap();
                5
            })
        });
        assert!(r.is_err());
    }

    #[test]
    fn a_panic_in_the_scope_waits_for_its_threads_first() {
        let done = std::sync::atomic::AtomicBool::new(false);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope(|s| {
                s.spawn(64 << 10, || {
                    std::thread::sleep(std::time::Duration::from_millis(30));
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                })
                .unwrap();
                panic!("in the scope");
            })
        }));
        assert!(r.is_err());
        assert!(done.load(std::sync::atomic::Ordering::SeqCst), "the scope returned before its thread ended");
    }

    #[test]
    fn an_owned_thread_answers_is_named_and_unmaps_its_stack_when_joined() {
        let t = spawn("asb-test-name", 64 << 10, || {
            std::fs::read_to_string("/proc/thread-self/comm").unwrap().trim().to_string()
        })
        .unwrap();
        let addr = t.raw.stack.as_ref().map(Pages::addr).unwrap();
        assert_eq!(t.join().unwrap(), "asb-test-name");
        assert!(!mapped(addr));
        // Dropped unjoined: it runs on, on a stack left mapped.
        let (tx, rx) = std::sync::mpsc::channel();
        let t = spawn("asb-test", 64 << 10, move || {
            std::thread::sleep(std::time::Duration::from_millis(30));
            tx.send(7).unwrap();
        })
        .unwrap();
        let addr = t.raw.stack.as_ref().map(Pages::addr).unwrap();
        drop(t);
        assert_eq!(rx.recv().unwrap(), 7);
        assert!(mapped(addr));
    }

    #[test]
    fn a_stack_asked_smaller_than_glibc_takes_gets_its_minimum_on_top() {
        assert_eq!(scope(|s| s.spawn(0, || 3).unwrap().join().unwrap()), 3);
        assert!(stack_size(0) >= 16 << 10);
        assert_eq!(stack_size(64 << 10) % page_size(), 0);
        assert!(stack_size(64 << 10) >= 64 << 10);
    }
}
