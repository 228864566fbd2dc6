//! Threads on stacks of our own, unmapped when they are joined.
//!
//! glibc keeps the stack of every thread that ended (up to 40 MiB of them) for the next thread,
//! with the pages the thread touched: its descriptor, its thread-local data and the top of its
//! frames, 8-16 KiB each. The launcher reads a network home with a dozen short threads at the
//! start and then idles for the whole session, so glibc's cache held about 130 KiB a session
//! that no thread would use again (issue 35). A stack we map ourselves is never cached: glibc
//! puts the thread's descriptor and thread-local data in it, and once the thread is joined the
//! mapping is ours to unmap.

use crate::memory::Pages;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

/// The page at a stack's low end, left inaccessible: a thread that overflows faults there.
const GUARD: usize = 4096;

/// What a thread runs: the caller's work, with its lifetime erased (see `Scope::spawn`).
type Job = Box<dyn FnOnce() + Send>;

/// A started thread and the stack it runs on; joining it unmaps the stack.
struct Raw {
    id: libc::pthread_t,
    stack: Option<Pages>,
}

impl Raw {
    /// Starts `job` on a new thread with `size` bytes of stack (a guard page below them).
    fn start(size: usize, job: Job) -> std::io::Result<Raw> {
        let stack = Pages::zeroed(GUARD + size)?;
        stack.guard_low(GUARD)?;
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
            let base = (stack.addr() + GUARD) as *mut libc::c_void;
            let mut id: libc::pthread_t = 0;
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
        Ok(Raw { id, stack: Some(stack) })
    }

    /// Waits for the thread to end, then unmaps its stack.
    fn join(&mut self) {
        let Some(stack) = self.stack.take() else { return };
        // SAFETY: `id` is a thread we started and have not joined (the stack is still here);
        // after pthread_join returns the thread has exited and the kernel has cleared its
        // thread id, so nothing runs on the stack any more.
        let rc = unsafe { libc::pthread_join(self.id, std::ptr::null_mut()) };
        if rc == 0 {
            drop(stack);
        } else {
            // Not known to have ended: its stack must stay mapped.
            std::mem::forget(stack);
        }
    }
}

/// The thread's start: runs its job, which catches its own panics (`Scope::spawn`).
extern "C" fn run(job: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `job` is the pointer `Raw::start` made with Box::into_raw and gave this thread
    // alone.
    let job = unsafe { Box::from_raw(job.cast::<Job>()) };
    job();
    std::ptr::null_mut()
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
    answer: Arc<Mutex<Option<std::thread::Result<T>>>>,
    scope: &'s RefCell<Vec<Raw>>,
}

impl<T> Handle<'_, T> {
    /// Waits for the thread, and gives what it returned or the panic that ended it.
    pub fn join(self) -> std::thread::Result<T> {
        if let Some(raw) = self.scope.borrow_mut().get_mut(self.index) {
            raw.join();
        }
        let answer = self.answer.lock().unwrap_or_else(PoisonError::into_inner).take();
        answer.unwrap_or_else(|| Err(Box::new("the thread gave no answer")))
    }
}

impl<'env> Scope<'env> {
    /// Runs `work` on a new thread with `stack` bytes of stack. An error (no memory, no
    /// thread) leaves `work` unrun.
    pub fn spawn<T: Send + 'env>(
        &self,
        stack: usize,
        work: impl FnOnce() -> T + Send + 'env,
    ) -> std::io::Result<Handle<'_, T>> {
        let answer = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&answer);
        let job: Box<dyn FnOnce() + Send + 'env> = Box::new(move || {
            let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(got);
        });
        // SAFETY: only the lifetime changes. The job may borrow for 'env, and the thread
        // running it is joined before `scope` returns, which is before 'env ends ('env is a
        // lifetime of scope's caller, and the scope cannot be shortened: it is invariant).
        let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'env>, Job>(job) };
        let raw = Raw::start(stack, job)?;
        let mut started = self.started.borrow_mut();
        started.push(raw);
        Ok(Handle { index: started.len() - 1, answer, scope: &self.started })
    }
}

/// Runs `f` with a scope whose threads are all joined before this returns, even when `f`
/// panics (the panic goes on once they are).
pub fn scope<'env, R>(f: impl FnOnce(&Scope<'env>) -> R) -> R {
    let scope = Scope { started: RefCell::new(Vec::new()), _env: PhantomData };
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&scope)));
    for raw in scope.started.borrow_mut().iter_mut() {
        raw.join();
    }
    out.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// A thread that owns what it runs on (`spawn`); dropped unjoined, it is joined then.
pub struct Thread<T> {
    raw: Raw,
    answer: Arc<Mutex<Option<std::thread::Result<T>>>>,
}

/// Runs `work` on a thread of its own with `stack` bytes of stack, to be joined later (a read
/// ahead whose answer is wanted further on).
pub fn spawn<T: Send + 'static>(stack: usize, work: impl FnOnce() -> T + Send + 'static) -> std::io::Result<Thread<T>> {
    let answer = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&answer);
    let raw = Raw::start(
        stack,
        Box::new(move || {
            let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(got);
        }),
    )?;
    Ok(Thread { raw, answer })
}

impl<T> Thread<T> {
    /// Waits for the thread, and gives what it returned or the panic that ended it.
    pub fn join(mut self) -> std::thread::Result<T> {
        self.raw.join();
        let answer = self.answer.lock().unwrap_or_else(PoisonError::into_inner).take();
        answer.unwrap_or_else(|| Err(Box::new("the thread gave no answer")))
    }
}

impl<T> Drop for Thread<T> {
    fn drop(&mut self) {
        self.raw.join();
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
    fn an_owned_thread_answers_and_unmaps_its_stack_when_dropped_unjoined() {
        let t = spawn(64 << 10, || 7 * 6).unwrap();
        assert_eq!(t.join().unwrap(), 42);
        let t = spawn(64 << 10, || std::thread::sleep(std::time::Duration::from_millis(10))).unwrap();
        let addr = t.raw.stack.as_ref().map(Pages::addr).unwrap();
        drop(t);
        assert!(!mapped(addr));
    }

    #[test]
    fn a_stack_too_small_for_a_thread_is_an_error_not_a_thread() {
        // Smaller than glibc's minimum for the thread's descriptor and thread-local data.
        assert!(spawn(4096, || ()).is_err());
    }
}
