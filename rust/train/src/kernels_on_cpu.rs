//! The CUDA kernels of `kernels/` compiled for the CPU, for tests that hold them to the CPU's
//! operations bit for bit on a machine without a GPU.
//!
//! A test's C++ program defines CUDA's few names a kernel uses (`__global__`, the thread
//! indices, the rounding intrinsics as the single operations they round like), includes the
//! kernel's file, runs each thread of a small grid in turn, and talks over its standard input
//! and output.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `program` (C++ that includes the macro `define`, set to `kernels/<file>`'s path), compiled
/// into `dir`: the path of the program to [`run`].
pub(crate) fn compile(dir: &Path, program: &str, define: &str, file: &str) -> PathBuf {
    let source = dir.join(format!("{file}.cpp"));
    std::fs::write(&source, program).unwrap();
    let binary = dir.join(file.replace('.', "_"));
    let define = format!("-D{define}=\"{}/kernels/{file}\"", env!("CARGO_MANIFEST_DIR"));
    // No fused multiply-adds: the CPU operations round each product alone.
    let compiled = Command::new("c++")
        .args(["-std=c++17", "-O2", "-ffp-contract=off", &define, "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("a C++ compiler (c++) compiles the kernel's source for the CPU");
    assert!(compiled.status.success(), "{}", String::from_utf8_lossy(&compiled.stderr));
    binary
}

/// Runs `program` with `input` on its standard input: its output, as 32-bit words.
pub(crate) fn run(program: &Path, input: &[u8]) -> Vec<u32> {
    let mut child = Command::new(program).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the kernel's program failed: {}", out.status);
    out.stdout.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}
