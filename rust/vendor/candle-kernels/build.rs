//! Compiles the element-wise, reduction, indexing and convolution kernels to PTX, as upstream
//! does, and nothing else: no static MoE/GGUF library, so nothing links against `libcudart`
//! or `libstdc++`, and a binary needs no CUDA library until it opens a device.
//!
//! The PTX targets `CUDA_COMPUTE_CAP` (sparktrain's build script sets 80: the driver compiles
//! it for the card it finds, Ampere or newer).
use cudaforge::{KernelBuilder, Result};
use std::env;
use std::path::PathBuf;

fn main() -> Result<()> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src");
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    KernelBuilder::new()
        .source_dir("src")
        .arg("--expt-relaxed-constexpr")
        .arg("-std=c++17")
        .arg("-O3")
        .build_ptx()?
        .write(out_dir.join("ptx.rs"))?;
    Ok(())
}
