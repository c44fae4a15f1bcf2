//! The worker's receive buffers: a page-aligned ring of entries the
//! kernel takes buffers from (a provided-buffer ring), and their memory.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types;

/// Provided receive buffers per worker, and their size.
/// Small buffers, many of them: one receive completion holds one buffer
/// until its connection's task reads it, and at c1000 a turn's enter runs
/// about as many receives as connections became ready, so the count is
/// what runs out (512 of 16 KiB ran dry at c1000: half the receives fell
/// back to `recv`). A request head or a small reply fits one; a larger
/// read takes several completions, never a system call more.
pub(super) const BUFS: u16 = 2048;
pub(super) const BUF_SIZE: usize = 4 * 1024;
/// The buffer group of the worker's receive buffers.
pub(super) const BGID: u16 = 0;
/// The receive buffers: a page-aligned ring of entries the kernel takes
/// from, and the memory they point into.
pub(super) struct BufRing {
    pub(super) entries: *mut types::BufRingEntry,
    layout: std::alloc::Layout,
    mem: Box<[u8]>,
    tail: Cell<u16>,
}

impl BufRing {
    pub(super) fn new() -> io::Result<BufRing> {
        let layout = std::alloc::Layout::from_size_align(
            BUFS as usize * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) } as *mut types::BufRingEntry;
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let ring = BufRing {
            entries,
            layout,
            mem: vec![0u8; BUFS as usize * BUF_SIZE].into_boxed_slice(),
            tail: Cell::new(0),
        };
        for bid in 0..BUFS {
            ring.put(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// Hands buffer `bid` back to the kernel (seen at the next
    /// [`BufRing::publish`]).
    pub(super) fn put(&self, bid: u16) {
        let tail = self.tail.get();
        let i = (tail & (BUFS - 1)) as usize;
        // SAFETY: `i` is within the ring; the kernel reads only entries
        // up to the published tail, and this one is past it.
        let e = unsafe { &mut *self.entries.add(i) };
        e.set_addr(self.buf(bid).as_ptr() as u64);
        e.set_len(BUF_SIZE as u32);
        e.set_bid(bid);
        self.tail.set(tail.wrapping_add(1));
    }

    pub(super) fn publish(&self) {
        // SAFETY: the tail field of the ring's first entry, shared with
        // the kernel: written atomically with release ordering so that it
        // sees the entries written before.
        unsafe {
            let t = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*t).store(self.tail.get(), Ordering::Release);
        }
    }

    pub(super) fn buf(&self, bid: u16) -> &[u8] {
        let start = bid as usize * BUF_SIZE;
        &self.mem[start..start + BUF_SIZE]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.entries as *mut u8, self.layout) };
    }
}
