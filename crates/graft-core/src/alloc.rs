//! A global allocator that puts every large block on a cache-line boundary.
//!
//! Tensor storage is a `Vec` of its element type, so the system allocator
//! decides where it lands: glibc serves large blocks with `mmap` and
//! returns the page start plus its 16-byte header, so every 64-byte vector
//! load of a kernel straddles two cache lines. Measured on the AVX-512
//! machine of docs/PERFORMANCE.md (session 20), the chain benchmark's fused
//! kernel runs about 7 % slower on such buffers than on 64-byte aligned
//! ones; XLA aligns its CPU buffers to 64 bytes for the same reason.
//!
//! [`CacheAligned`] asks the system allocator for 64-byte alignment for
//! every block of [`LARGE`] bytes or more (smaller ones keep their own
//! alignment: they are not what kernels stream over, and over-aligning them
//! would waste memory). Alignment is derived from the size alone, so
//! `dealloc` recomputes the layout `alloc` used. A library cannot choose
//! the process's allocator, so binaries opt in:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: graft_core::alloc::CacheAligned = graft_core::alloc::CacheAligned;
//!
//! fn main() {}
//! ```
//!
//! (the `graft` CLI, the Python module and the benchmarks do). Results do
//! not depend on it: only where buffers start.

// The one unsafe thing here is the allocator itself; each block says why it holds.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of at least this many bytes are 64-byte aligned.
pub const LARGE: usize = 4096;

/// The alignment of large blocks: one cache line (and one AVX-512 vector).
pub const LINE: usize = 64;

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheAligned;

/// The layout a block of `layout` is allocated with.
fn widened(layout: Layout) -> Layout {
    if layout.size() >= LARGE && layout.align() < LINE {
        // Invariant: LINE is a power of two, and a size that was valid for a
        // smaller power-of-two alignment stays valid when rounded up to LINE
        // unless it is within LINE of isize::MAX, which no allocation reaches
        // (the system allocator would refuse it first); keep the caller's
        // layout in that case.
        Layout::from_size_align(layout.size(), LINE).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: every block is allocated and freed by `System` with the layout
// `widened` derives from the caller's layout, a pure function of its size
// and alignment, so `dealloc` and `realloc` always pass `System` the layout
// the block was allocated with. Blocks are at least as aligned as asked.
unsafe impl GlobalAlloc for CacheAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `widened` keeps the size (non-zero, per the caller's contract).
        unsafe { System.alloc(widened(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(widened(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc`/`realloc` with `widened(layout)`.
        unsafe { System.dealloc(ptr, widened(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = widened(layout);
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = widened(new_layout);
        if new.align() == old.align() {
            // SAFETY: `ptr` was allocated with `old`; the block keeps its alignment.
            return unsafe { System.realloc(ptr, old, new_size) };
        }
        // The block changes alignment class: move it.
        // SAFETY: `new` has a non-zero size (new_size > 0 per the contract).
        let moved = unsafe { System.alloc(new) };
        if !moved.is_null() {
            // SAFETY: both blocks are valid for the smaller of the two sizes
            // and distinct; the old one was allocated with `old`.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                System.dealloc(ptr, old);
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_line_aligned_and_small_ones_keep_their_alignment() {
        let a = CacheAligned;
        for size in [1usize, 15, 64, 4095, 4096, 100_000, 3 << 20] {
            for align in [1usize, 4, 8, 16, 128] {
                let layout = Layout::from_size_align(size, align).expect("valid test layout");
                // SAFETY: non-zero sizes; every block is freed with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    let want = if size >= LARGE { align.max(LINE) } else { align };
                    assert_eq!(p as usize % want, 0, "size {size} align {align}");
                    p.write_bytes(7, size);
                    a.dealloc(p, layout);
                    let z = a.alloc_zeroed(layout);
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    assert_eq!(z as usize % want, 0);
                    a.dealloc(z, layout);
                }
            }
        }
    }

    #[test]
    fn realloc_across_the_threshold_keeps_contents_and_alignment() {
        let a = CacheAligned;
        let sizes = [100usize, 5000, 70_000, 200, 4096, 4095, 1 << 20, 8];
        let layout = Layout::from_size_align(sizes[0], 4).expect("valid test layout");
        // SAFETY: every step reallocates the live block with its current layout.
        unsafe {
            let mut p = a.alloc(layout);
            let mut size = sizes[0];
            for (k, b) in (0..size).map(|i| (i, i as u8)) {
                p.add(k).write(b);
            }
            for &next in &sizes[1..] {
                p = a.realloc(p, Layout::from_size_align(size, 4).expect("valid"), next);
                assert!(!p.is_null());
                if next >= LARGE {
                    assert_eq!(p as usize % LINE, 0, "{size} -> {next}");
                }
                let kept = size.min(next);
                for k in 0..kept {
                    assert_eq!(p.add(k).read(), (k % 100) as u8, "{size} -> {next} at {k}");
                }
                for k in kept..next {
                    p.add(k).write((k % 100) as u8);
                }
                size = next;
            }
            a.dealloc(p, Layout::from_size_align(size, 4).expect("valid"));
        }
    }
}
