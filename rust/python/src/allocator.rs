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

fn is_large(size: usize) -> bool {
    size >= LARGE
}

// SAFETY: each call is forwarded to the allocator that `is_large` picks from the layout's size,
// which Rust guarantees is the size the block was allocated (or last resized) with; a block
// that changes sides when resized is copied into a new block and the old one freed.
unsafe impl GlobalAlloc for SplitAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(layout.size()) {
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        } else {
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(layout.size()) {
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout.size()) {
            unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (is_large(layout.size()), is_large(new_size)) {
            (true, true) => unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) },
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            _ => {
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
    }
}
