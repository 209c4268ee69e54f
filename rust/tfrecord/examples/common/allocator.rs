//! The Python binding's global allocator (`rust/python/src/allocator.rs`), so the examples'
//! figures are what the wheel gets.

#[path = "../../../python/src/allocator.rs"]
mod split;

#[global_allocator]
static ALLOCATOR: split::SplitAllocator = split::SplitAllocator;
