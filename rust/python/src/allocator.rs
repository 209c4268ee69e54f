//! The binding's global allocator: large blocks from mimalloc, small ones from the C library.
//!
//! Reading allocates and frees each batch's Arrow buffers, megabytes at a time. The C library's
//! allocator gives blocks that large back to the kernel when they are freed, so every batch
//! faulted its pages in again: about 63,000 page faults per million Criteo-like rows. mimalloc
//! keeps freed pages for the next batch. Small blocks (connections, messages, the many little
//! objects of the control plane) stay with the C library's allocator, which packs them tighter
//! than mimalloc's per-thread pages. The examples that measure reading include this file, so
//! their figures are the wheel's.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of this size and more come from mimalloc: glibc serves them with `mmap` (its
/// threshold starts at 128 KiB) and unmaps them when they are freed.
const LARGE: usize = 128 * 1024;

/// Routes each block by its size; the size a block is freed or resized with is the one it was
/// allocated with, so every block goes back to the allocator it came from.
pub struct SplitAllocator;

/// The allocator of blocks of `size` bytes.
fn side(size: usize) -> &'static dyn GlobalAlloc {
    if size >= LARGE { &mimalloc::MiMalloc } else { &System }
}

// SAFETY: each call is forwarded to the allocator that `side` picks from the layout's size,
// which Rust guarantees is the size the block was allocated (or last resized) with; a block
// that changes sides when resized is copied into a new block and the old one freed.
unsafe impl GlobalAlloc for SplitAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { side(layout.size()).alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { side(layout.size()).alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { side(layout.size()).dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if (layout.size() >= LARGE) == (new_size >= LARGE) {
            return unsafe { side(new_size).realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller guarantees `new_size`, rounded up to the alignment, fits.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}
