#!/usr/bin/env bash
# Builds sparktrain's CUDA wheel with nothing but PyPI's CUDA packages:
#
#   bash submit/build-cuda.sh            # the wheel, into target/wheels-cuda/
#   bash submit/build-cuda.sh --check    # compile the engine with CUDA, kernels included, and
#                                        # run its device tests on this machine (what CI does)
#   bash submit/build-cuda.sh --lint     # clippy over the CUDA code paths
#   bash submit/build-cuda.sh --gpu-check  # the binary tests/gpu/check.sh runs on a GPU
#                                          # machine, into target/gpu-check/
#
# NVIDIA's CUDA 13.0 compiler packages (nvcc, NVVM, the CRT and runtime headers, CCCL) are
# installed into target/cuda-toolkit (SPARKTRAIN_CUDA_TOOLKIT overrides it); no system CUDA is
# needed, only a C++ compiler for nvcc's preprocessing. The kernels become PTX for compute
# capability 8.0 (CUDA_COMPUTE_CAP), which the driver compiles for the card it finds: Ampere,
# Ada, Hopper, Blackwell. The wheel opens CUDA's libraries only when a GPU is asked for, so it
# also trains on the CPU of a machine without a driver; on a GPU host it needs NVIDIA's driver
# for CUDA 13.0 or newer (580+) and cuBLAS and cuRAND (`pip install 'sparktrain[cuda]'`).
# The virtualenv with maturin and ziglang is submit/env.sh's (.venv, made here if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-wheel}
toolkit=${SPARKTRAIN_CUDA_TOOLKIT:-$PWD/target/cuda-toolkit}
# shellcheck source=env.sh
source submit/env.sh
python=python
# The toolkit's packages, pinned: PTX from CUDA 13.0 loads on every CUDA 13 driver, where a
# later compiler's PTX would need a later driver.
packages=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)
stamp="$toolkit/.packages"
if [ "$(cat "$stamp" 2>/dev/null)" != "${packages[*]}" ]; then
    rm -rf "$toolkit"
    "$python" -m pip install -q --no-deps --target "$toolkit" "${packages[@]}"
    echo "${packages[*]}" > "$stamp"
fi
cuda="$toolkit/nvidia/cu13"
export PATH="$cuda/bin:$PATH" CUDA_HOME="$cuda" CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-80}"
nvcc --version | tail -n 2
case "$mode" in
    --check)
        # The engine's device tests, on this machine whatever it has: without a GPU, `auto` is
        # the CPU and `cuda` names the missing driver.
        cargo test -q --locked -p sparktrain-train --features cuda --lib device
        ;;
    --lint)
        cargo clippy -q --locked -p sparktrain-train -p sparktrain-python --all-targets \
            --features sparktrain-python/cuda,sparktrain-train/cuda -- -D warnings
        ;;
    --gpu-check)
        # rust/train's gpu_check example, linked against glibc 2.17 by cargo-zigbuild (zig
        # from the virtualenv's ziglang) so that it runs on whatever the GPU machine has.
        tools=target/gpu-check/tools
        if [ ! -x "$tools/bin/cargo-zigbuild" ]; then
            "$python" -m pip install -q --target "$tools" cargo-zigbuild==0.24.1
        fi
        triple="$(uname -m)-unknown-linux-gnu"
        "$tools/bin/cargo-zigbuild" zigbuild -q --locked --release -p sparktrain-train --features cuda \
            --example gpu_check --target "$triple.2.17"
        cp "${CARGO_TARGET_DIR:-target}/$triple/release/examples/gpu_check" target/gpu-check/gpu_check
        ls -l target/gpu-check/gpu_check
        ;;
    wheel)
        # As submit/install.sh builds the CPU wheel: abi3, manylinux2014 through zig.
        rm -rf target/wheels-cuda
        maturin build --release --locked -q --zig --compatibility manylinux2014 --features cuda \
            -o target/wheels-cuda
        "$python" submit/check_wheel.py target/wheels-cuda/sparktrain-*.whl "manylinux_2_17_$(uname -m)"
        ls target/wheels-cuda/sparktrain-*.whl
        ;;
    *)
        echo "usage: bash submit/build-cuda.sh [--check | --lint | --gpu-check]" >&2
        exit 2
        ;;
esac
