//! Generates the ONNX protobuf messages from `proto/onnx.proto` with a vendored `protoc`, so that
//! building needs no system protobuf compiler.
//!
//! `proto/onnx.proto` is the ONNX project's own definition, copied unchanged from the `onnx`
//! 1.23.2 release (Apache-2.0); a newer one replaces it as a whole.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("PROTOC", protoc) };
    prost_build::Config::new().compile_protos(&["proto/onnx.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    Ok(())
}
