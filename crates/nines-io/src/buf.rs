//! Aligned I/O buffers.
//!
//! O_DIRECT needs the memory of every I/O aligned to the device's DMA alignment (at most the
//! logical block size, which is at most the page size on Linux), so buffers are page-aligned heap
//! allocations made through `std::alloc` with an explicit `Layout`. A `BufPool` allocates one
//! buffer per in-flight slot up front: the I/O loop never allocates.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// Alignment of every buffer: the page size on every Linux platform nines targets, and a
/// multiple of every logical block size (512 or 4096).
pub const BUF_ALIGN_BYTES: usize = 4096;

/// A zero-initialised, page-aligned heap buffer with a fixed length.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads (as_slice).
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len_bytes` (rounded up to a whole number of pages for the allocation; `len()`
    /// stays `len_bytes`). Panics only on allocation failure, like `Vec`.
    pub fn new(len_bytes: usize) -> AlignedBuf {
        let alloc_bytes = len_bytes.max(1).next_multiple_of(BUF_ALIGN_BYTES);
        let layout = Layout::from_size_align(alloc_bytes, BUF_ALIGN_BYTES)
            .expect("buffer size overflows the address space");
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        assert!((ptr.as_ptr() as usize).is_multiple_of(BUF_ALIGN_BYTES));
        AlignedBuf {
            ptr,
            len: len_bytes,
            layout,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (allocated zeroed, so initialised).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// One buffer per in-flight slot, all allocated at construction. Slot `i` always gets the same
/// buffer, so a worker that tracks its free slots needs no other bookkeeping.
#[derive(Debug)]
pub struct BufPool {
    bufs: Vec<AlignedBuf>,
    size_bytes: usize,
}

impl BufPool {
    /// `count` buffers of `size_bytes` each.
    pub fn new(count: usize, size_bytes: usize) -> BufPool {
        let bufs = (0..count).map(|_| AlignedBuf::new(size_bytes)).collect();
        BufPool { bufs, size_bytes }
    }

    pub fn count(&self) -> usize {
        self.bufs.len()
    }

    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    pub fn get(&self, slot: usize) -> &AlignedBuf {
        &self.bufs[slot]
    }

    pub fn get_mut(&mut self, slot: usize) -> &mut AlignedBuf {
        &mut self.bufs[slot]
    }

    /// The raw pointer of slot `slot`'s buffer, for an `IoDesc`. The pointer stays valid as long
    /// as the pool lives (buffers never move or get reallocated).
    pub fn ptr(&mut self, slot: usize) -> *mut u8 {
        self.bufs[slot].as_mut_ptr()
    }

    /// All buffers, e.g. to register them with an io_uring.
    pub fn iter(&self) -> impl Iterator<Item = &AlignedBuf> {
        self.bufs.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [1usize, 512, 4096, 4097, 131072] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % BUF_ALIGN_BYTES, 0);
            assert!(b.as_slice().iter().all(|&x| x == 0));
            b.as_mut_slice()[len - 1] = 7;
            assert_eq!(b.as_slice()[len - 1], 7);
        }
    }

    #[test]
    fn pool_gives_distinct_stable_buffers() {
        let mut p = BufPool::new(8, 4096);
        assert_eq!(p.count(), 8);
        let ptrs: Vec<_> = (0..8).map(|i| p.ptr(i) as usize).collect();
        let mut sorted = ptrs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 8);
        assert_eq!(p.ptr(3) as usize, ptrs[3]);
        p.get_mut(2).as_mut_slice()[0] = 9;
        assert_eq!(p.get(2).as_slice()[0], 9);
        assert_eq!(p.get(1).as_slice()[0], 0);
    }
}
