//! The process allocator: mimalloc for ordinary blocks, and fresh 2 MiB-
//! aligned mappings on transparent huge pages for large ones, so that the
//! tables of a million apps cost one TLB entry per 2 MiB, not per 4 KiB.
//!
//! mimalloc, not the C library's `malloc`, for the small blocks: an HTTP/2
//! stream makes about a dozen of them and a task aligned to 128 bytes,
//! which glibc serves through `posix_memalign` and its slow bins. Measured
//! with callgrind (`bench/instructions --load h2load`): 39,129 instructions
//! per stream with glibc, 35,574 with mimalloc; an HTTP/1.1 request, which
//! allocates almost nothing, 10,438 against 10,533; an idle keep-alive
//! connection 458 bytes against 210 (`bench/compare --scenarios idle15k`).
//!
//! A key lookup touches a hash bucket, the key's text and the app's record,
//! each at a random place in tables of tens of megabytes. On 4 KiB pages
//! each of those loads also misses the TLB and walks the page table; on
//! 2 MiB pages the tables fit the TLB. Advising a block that `malloc`
//! returns is not enough: the block often reuses heap pages a config parse
//! already touched, which stay 4 KiB pages. So blocks of at least
//! [`MIN_BLOCK`] get a mapping of their own, advised before first touch.
//! Where the system's THP mode is `never`, they are plain mappings.

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc as Small;
use std::ptr;

const HUGE_PAGE: usize = 2 << 20;

/// Blocks at least this large get their own huge-page mapping. The last
/// huge page of a block may be partly unused: under 2 MiB, so at most a
/// third of the mapping.
pub const MIN_BLOCK: usize = 2 * HUGE_PAGE;

/// mimalloc for small blocks; huge-page mappings for large ones.
pub struct HugePageAlloc;

fn is_large(layout: &Layout) -> bool {
    layout.size() >= MIN_BLOCK && layout.align() <= HUGE_PAGE
}

/// The length mapped for a large block of `size` bytes.
fn mapped_len(size: usize) -> usize {
    size.next_multiple_of(HUGE_PAGE)
}

#[allow(unsafe_code)]
fn map_large(size: usize) -> *mut u8 {
    let len = mapped_len(size);
    // Map one huge page more than needed and trim, so the block starts on
    // a 2 MiB boundary (only then can its pages be huge pages).
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choice touches no existing memory; the trims unmap only the parts of
    // this mapping outside [start, start + len).
    unsafe {
        let raw = libc::mmap(
            ptr::null_mut(),
            len + HUGE_PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if raw == libc::MAP_FAILED {
            return ptr::null_mut();
        }
        let raw = raw as usize;
        let start = raw.next_multiple_of(HUGE_PAGE);
        if start > raw {
            libc::munmap(raw as *mut libc::c_void, start - raw);
        }
        let tail = raw + len + HUGE_PAGE - (start + len);
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
        // Advice only: if THP is off the block stays on normal pages.
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        start as *mut u8
    }
}

/// Resizes a large block to another large size. Shrinking unmaps the tail
/// in place; growing maps a new aligned block and moves the old pages to
/// its start with `mremap`, so no byte is copied and no page is touched
/// twice: a `Vec` of a million records doubling its way up costs the
/// zeroing of its final size, not of every size on the way.
#[allow(unsafe_code)]
fn remap_large(ptr: *mut u8, size: usize, new_size: usize) -> *mut u8 {
    let (old_len, new_len) = (mapped_len(size), mapped_len(new_size));
    // SAFETY: `ptr` is a large block of `size` bytes, so [ptr, ptr +
    // old_len) is a mapping of its own (`map_large`); only that mapping and
    // the new one are unmapped or moved, and the caller gives up `ptr` for
    // the returned block.
    unsafe {
        if new_len <= old_len {
            if new_len < old_len {
                libc::munmap(ptr.add(new_len) as *mut libc::c_void, old_len - new_len);
            }
            return ptr;
        }
        let dst = map_large(new_size);
        if dst.is_null() {
            return dst;
        }
        let moved = libc::mremap(
            ptr as *mut libc::c_void,
            old_len,
            old_len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            dst as *mut libc::c_void,
        );
        if moved == libc::MAP_FAILED {
            ptr::copy_nonoverlapping(ptr, dst, size);
            libc::munmap(ptr as *mut libc::c_void, old_len);
        }
        dst
    }
}

// SAFETY: small blocks go to mimalloc unchanged. A large block is a
// mapping of its own, at least `size` long and 2 MiB aligned (which covers
// any alignment up to 2 MiB; larger alignments go to mimalloc); fresh
// anonymous memory is zeroed; `dealloc` unmaps exactly what `alloc`
// mapped, as the layout it is given is the one the block was made with.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(&layout) {
            map_large(layout.size())
        } else {
            Small.alloc(layout)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(&layout) {
            map_large(layout.size())
        } else {
            Small.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(&layout) {
            libc::munmap(ptr as *mut libc::c_void, mapped_len(layout.size()));
        } else {
            Small.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        if !is_large(&layout) && !is_large(&new) {
            return Small.realloc(ptr, layout, new_size);
        }
        if is_large(&layout) && is_large(&new) {
            return remap_large(ptr, layout.size(), new_size);
        }
        let p = self.alloc(new);
        if !p.is_null() {
            ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The VmFlags line of the mapping that holds `addr`, from smaps.
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = (lo..hi).contains(&addr);
                        continue;
                    }
                }
            }
            if inside && line.starts_with("VmFlags:") {
                return line.to_string();
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[test]
    #[allow(unsafe_code)]
    fn large_blocks_are_aligned_advised_zeroed_and_kept_on_realloc() {
        let a = HugePageAlloc;
        let layout = Layout::from_size_align(MIN_BLOCK + 5, 8).unwrap();
        // SAFETY: each block is written within its size and freed once,
        // with the layout it has at that point.
        unsafe {
            let p = a.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % HUGE_PAGE, 0);
            assert_eq!(*p.add(layout.size() - 1), 0);
            // A kernel built without THP refuses the advice; then only
            // the alignment can be checked.
            if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
                let flags = vm_flags(p as usize);
                assert!(flags.contains(" hg"), "not advised: {flags}");
            }
            p.write_bytes(7, layout.size());
            // Within the mapped length: the same block.
            let q = a.realloc(p, layout, MIN_BLOCK + 100);
            assert_eq!(q, p);
            let l2 = Layout::from_size_align(MIN_BLOCK + 100, 8).unwrap();
            // Beyond it: its pages moved, contents kept, the new part
            // zeroed, still aligned and advised.
            let r = a.realloc(q, l2, 3 * MIN_BLOCK);
            assert!(!r.is_null());
            assert_eq!(r as usize % HUGE_PAGE, 0);
            assert_eq!(*r.add(layout.size() - 1), 7);
            assert_eq!(*r.add(3 * MIN_BLOCK - 1), 0);
            r.add(MIN_BLOCK + 100).write_bytes(9, 2 * MIN_BLOCK - 100);
            if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
                let flags = vm_flags(r as usize + 3 * MIN_BLOCK - 1);
                assert!(flags.contains(" hg"), "not advised: {flags}");
            }
            // Shrunk but still large: the same block, the tail unmapped.
            let l3 = Layout::from_size_align(3 * MIN_BLOCK, 8).unwrap();
            let r = a.realloc(r, l3, 2 * MIN_BLOCK);
            assert!(!r.is_null());
            assert_eq!(*r.add(layout.size() - 1), 7);
            assert_eq!(*r.add(2 * MIN_BLOCK - 1), 9);
            let l3 = Layout::from_size_align(2 * MIN_BLOCK, 8).unwrap();
            // Shrunk below the threshold: back to the system allocator.
            let s = a.realloc(r, l3, 64);
            assert_eq!(*s.add(63), 7);
            a.dealloc(s, Layout::from_size_align(64, 8).unwrap());
        }
    }
}
