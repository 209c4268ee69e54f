//! Generates the ONNX protobuf messages from `proto/onnx.proto` with a vendored `protoc`, so that
//! building needs no system protobuf compiler; with the `cuda` feature, also compiles
//! `kernels/*.cu` to PTX as candle's kernels are (nvcc from `submit/build-cuda.sh`'s toolkit,
//! `CUDA_COMPUTE_CAP`), one `<name>.ptx` each in `OUT_DIR`.
//!
//! `proto/onnx.proto` is the ONNX project's own definition, copied unchanged from the `onnx`
//! 1.23.2 release (Apache-2.0); a newer one replaces it as a whole.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("PROTOC", protoc) };
    prost_build::Config::new().compile_protos(&["proto/onnx.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    #[cfg(feature = "cuda")]
    {
        println!("cargo:rerun-if-changed=kernels");
        cudaforge::KernelBuilder::new().source_dir("kernels").arg("-std=c++17").arg("-O3").build_ptx()?;
    }
    Ok(())
}
