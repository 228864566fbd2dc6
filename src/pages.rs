//! A buffer of anonymous pages mapped for it alone: a page costs memory only once something
//! was written to it. For the large buffers a session keeps for its whole life and mostly
//! does not fill (the tun device's two 64 KiB packet buffers, the launcher's terminal relay
//! buffer): allocated from the heap and zeroed, every byte would be resident in each of the
//! hundreds of sessions a node runs.

use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::ptr::NonNull;

pub struct Pages {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone, like a Vec's buffer.
unsafe impl Send for Pages {}

impl Pages {
    /// `len` zero bytes (at least one). Fails only if the kernel has no address space left.
    pub fn zeroed(len: usize) -> std::io::Result<Pages> {
        let size = NonZeroUsize::new(len.max(1)).ok_or_else(|| std::io::Error::other("empty buffer"))?;
        // SAFETY: a new private anonymous mapping, at an address the kernel picks: it aliases
        // nothing.
        let ptr =
            unsafe { mmap_anonymous(None, size, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }?;
        Ok(Pages { ptr: ptr.cast(), len: size.get() })
    }
}

impl Pages {
    /// Where the mapping starts, without a reference to its bytes (which a socket may hold).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Its length, without a reference to its bytes.
    pub fn size(&self) -> usize {
        self.len
    }

    /// Gives the pages past the first `keep` bytes back to the kernel (they read as zero
    /// again and cost nothing until written). False if the kernel refused, and the caller
    /// should not keep the buffer.
    pub fn forget_beyond(&self, keep: usize) -> bool {
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok().flatten().unwrap_or(4096) as usize;
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
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(p.len(), 70_000);
        assert!(p.iter().all(|b| *b == 0));
        p[69_999] = 7;
        p[..3].copy_from_slice(b"abc");
        assert_eq!((&p[..3], p[69_999]), (&b"abc"[..], 7));
    }
}
