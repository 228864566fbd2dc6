//! Memory that costs nothing until used, and giving memory back: the launcher, the jail's
//! init and the cleanup waiter live as long as the session and hold what they built it
//! with; what they freed or never filled would otherwise stay resident in each of the
//! hundreds of sessions a node may run.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// A buffer of anonymous pages mapped for it alone: a page costs memory only once something
/// was written to it. For the large buffers a session keeps for its whole life and mostly
/// does not fill (the tun device's two 64 KiB packet buffers, the launcher's terminal relay
/// buffer, a child's stack): allocated from the heap and zeroed, every byte would be resident.
pub struct Pages {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone, like a Vec's buffer.
unsafe impl Send for Pages {}

/// The size of a page, as the kernel says (4 KiB if it does not).
pub fn page_size() -> usize {
    // SAFETY: sysconf reads no memory of ours.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}

impl Pages {
    /// `len` zero bytes (at least one). Fails only if the kernel has no address space left.
    pub fn zeroed(len: usize) -> std::io::Result<Pages> {
        Pages::mapped(len, 0)
    }

    /// `zeroed`, marked as a thread's stack (`MAP_STACK`: the kernel backs it with no huge
    /// pages, as glibc's own stacks).
    pub fn stack(len: usize) -> std::io::Result<Pages> {
        Pages::mapped(len, libc::MAP_STACK)
    }

    fn mapped(len: usize, flags: libc::c_int) -> std::io::Result<Pages> {
        let len = len.max(1);
        // SAFETY: a new private anonymous mapping, at an address the kernel picks: it aliases
        // nothing. The result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                -1,
                0,
            )
        };
        match NonNull::new(ptr.cast::<u8>()) {
            Some(ptr) if ptr.as_ptr() != libc::MAP_FAILED.cast() => Ok(Pages { ptr, len }),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Where the mapping starts, without a reference to its bytes (which a socket may hold).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Its length, without a reference to its bytes.
    pub fn size(&self) -> usize {
        self.len
    }

    /// Makes the first `len` bytes (whole pages) inaccessible: a stack growing down into them
    /// faults instead of writing past its end. They must not be read or written after.
    pub fn guard_low(&self, len: usize) -> std::io::Result<()> {
        if !len.is_multiple_of(page_size()) || len > self.len {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the range is whole pages at the start of our own mapping; the caller uses
        // them no more.
        if unsafe { libc::mprotect(self.ptr.as_ptr().cast(), len, libc::PROT_NONE) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Gives the pages past the first `keep` bytes back to the kernel (they read as zero
    /// again and cost nothing until written). False if the kernel refused, and the caller
    /// should not keep the buffer.
    pub fn forget_beyond(&self, keep: usize) -> bool {
        let page = page_size();
        let start = keep.div_ceil(page) * page;
        if start >= self.len {
            return true;
        }
        // SAFETY: the range lies inside this mapping, which is private and anonymous;
        // MADV_DONTNEED only drops its pages' contents, it does not unmap.
        unsafe { libc::madvise(self.ptr.as_ptr().add(start).cast(), self.len - start, libc::MADV_DONTNEED) == 0 }
    }
}

impl std::ops::Deref for Pages {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` readable bytes are mapped at `ptr` for as long as self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Pages {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `zeroed` with this length and is not used after.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// One malloc arena for every thread of the process (glibc's allocator; musl's has no
/// arenas): threads that live as long as the session would each keep an arena of their own.
/// Called before the threads exist. True if the allocator took it.
pub fn one_arena() -> bool {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator tuning.
    return unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) } == 1;
    #[cfg(not(target_env = "gnu"))]
    false
}

/// Allocations of `bytes` and more are mapped pages of their own, and the threshold stays
/// fixed (glibc's allocator would raise it after the first free of one, which leaves the next
/// ones in the heap, zeroed whole and resident). Called before those allocations exist. True
/// if the allocator took it.
pub fn fixed_mmap_threshold(bytes: libc::c_int) -> bool {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator tuning.
    return unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) } == 1;
    #[cfg(not(target_env = "gnu"))]
    {
        let _ = bytes;
        false
    }
}

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

    #[test]
    fn pages_past_what_is_kept_read_as_zero_again() {
        let mut p = Pages::zeroed(1 << 20).unwrap();
        p[..].fill(9);
        assert!(p.forget_beyond(64 << 10));
        assert!(p[..64 << 10].iter().all(|b| *b == 9), "the kept part keeps its bytes");
        assert!(p[64 << 10..].iter().all(|b| *b == 0), "the rest is zero again");
        assert!(p.forget_beyond(2 << 20), "nothing past the end to give back");
    }

    #[test]
    fn pages_read_as_zero_and_hold_what_is_written() {
        let mut p = Pages::zeroed(70_000).unwrap();
        assert_eq!((p.len(), p.size()), (70_000, 70_000));
        assert!(p.iter().all(|b| *b == 0));
        p[69_999] = 7;
        p[..3].copy_from_slice(b"abc");
        assert_eq!((&p[..3], p[69_999]), (&b"abc"[..], 7));
        assert_eq!(p.addr() % page_size(), 0);
    }

    /// The guarded page faults when touched (in a forked child, which dies of SIGSEGV); the
    /// rest of the mapping is still the caller's.
    #[test]
    fn a_guarded_page_faults_and_the_rest_stays_usable() {
        let page = page_size();
        let mut p = Pages::zeroed(4 * page).unwrap();
        assert!(p.guard_low(page + 1).is_err(), "not whole pages");
        p.guard_low(page).unwrap();
        p[page] = 1;
        let low = p.addr() as *mut u8;
        let status = crate::signal::tests::child_status(|| {
            // SAFETY: a write the guard must stop (the point of the test): it kills the child.
            unsafe { low.write_volatile(1) };
            0
        });
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV, "status {status}");
    }

    /// The tunings are taken, and the threshold stays where it was put: a large block is
    /// mapped again after one was freed (glibc's own threshold would have risen past it).
    /// glibc marks a mapped chunk in the size word before it (bit 1, IS_MMAPPED).
    #[cfg(target_env = "gnu")]
    #[test]
    fn the_allocator_tunings_are_taken_and_the_threshold_stays() {
        assert!(one_arena());
        assert!(fixed_mmap_threshold(128 * 1024));
        let mapped = |size: usize| {
            // SAFETY: a block of our own, whose header word glibc writes before it; freed at once.
            unsafe {
                let p = libc::malloc(size);
                assert!(!p.is_null());
                let m = *p.cast::<usize>().sub(1) & 2 != 0;
                libc::free(p);
                m
            }
        };
        assert!(mapped(200 << 10) && mapped(200 << 10), "a block past the threshold was not mapped");
        assert!(!mapped(1 << 10));
    }
}
