#!/usr/bin/env bash
# The test suite, from a fresh clone. Usage: bash tests/run.sh [--fast] [extra pytest arguments]
#
# Without --fast, the whole suite (what CI runs): installs what it needs (a virtualenv with the
# Python packages, the Rust build, the Maven artifacts for the MiniDFS cluster), runs the lint
# gates, starts one real HDFS (MiniDFSCluster) shared by the Rust and Python tests, then runs
# `cargo test`, `pytest`, the chaos tests on a Spark standalone cluster of their own, and a
# reduced suite on PySpark 3.5 in a second virtualenv (.venv-spark35).
#
# With --fast, the tier for everyday work: the same lint gates and release wheel, the Rust tests
# that need no HDFS, and the Python tests that need neither Spark, HDFS nor TensorFlow, nor a
# fresh virtualenv for the wheel. No Maven, no JVM.
set -euo pipefail
cd "$(dirname "$0")/.."

fast=false
if [ "${1:-}" = --fast ]; then
    fast=true
    shift
fi

# Each step says when it started and the disk left: the virtualenvs (PyTorch's above all) and
# the Rust build take many GB, and a full disk otherwise shows only as some tool's OSError.
step() { printf '\n=== %s (%ss, %s free)\n' "$1" "$SECONDS" "$(df -h --output=avail . | tail -n 1 | tr -d ' ')"; }

# CI builds from a clean clone once: cargo's incremental caches would only take disk.
if [ "${CI:-}" = true ]; then
    export CARGO_INCREMENTAL=0
fi

install_wheel() {
    step "Python package (release wheel, installed the way users get it)"
    source submit/install.sh
    python -c "import sparktrain, sys; print('sparktrain', sparktrain.__version__, 'from', sparktrain.__file__)"
    # The source distribution, next to the wheel; tests/test_wheel.py checks what it holds.
    maturin sdist -o target/wheels
    # The release build stays (about 320 MB): the README's main job, run last as documented
    # (submit/run-example.sh), installs the wheel again through submit/install.sh, which then
    # finds every crate built instead of compiling them all a second time (10 minutes on 2 cores).

    # The stub of the compiled module against the module just built, then the package against
    # the stub: neither can drift from the binding.
    step "Type check (mypy --strict, stubtest)"
    mypy
    python -m mypy.stubtest sparktrain._native --mypy-config-file pyproject.toml
}

# Without SPARKTRAIN_TEST_HDFS, a Rust test that needs HDFS starts a MiniDFS of its own (Maven, a
# JVM). Left out here: rust/storage/tests/hdfs.rs by target, and the cases named for HDFS in the
# other integration tests (train's checkpoint, export and tensorboard) by name. The name filter
# stays off the unit tests: storage's URL parsing test `hdfs_urls` needs no cluster. Every call
# selects the packages the full run selects, so cargo unifies features alike and shares its build.
rust_tests_without_hdfs() {
    local cargo_test=(cargo test --workspace --exclude sparktrain-python --locked)
    local integration=() file
    for file in rust/*/tests/*.rs; do
        if [ "$file" != rust/storage/tests/hdfs.rs ]; then
            integration+=(--test "$(basename "$file" .rs)")
        fi
    done
    "${cargo_test[@]}" --lib --bins
    "${cargo_test[@]}" "${integration[@]}" -- --skip hdfs
    "${cargo_test[@]}" --doc
}

# Background work (a process group each, its output in $work/NAME.log) and the MiniDFS cluster,
# stopped on every way out.
work=$(mktemp -d)
declare -A background=()
minidfs=
cleanup() {
    local group
    for group in "${background[@]}"; do
        kill -- -"$group" 2>/dev/null || true
    done
    if [ -n "$minidfs" ]; then
        exec 3>&- || true
        wait "$minidfs" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
# start_background NAME COMMAND...: runs COMMAND in a process group of its own.
start_background() {
    local name=$1
    shift
    setsid "$@" >"$work/$name.log" 2>&1 &
    background[$name]=$!
}
# finish_background NAME: waits for it, prints its output, and stops the run if it failed. Its
# group is forgotten: once ended, its number may be reused.
finish_background() {
    local name=$1 status=0
    wait "${background[$name]}" || status=$?
    unset "background[$name]"
    cat "$work/$name.log"
    if [ "$status" -ne 0 ]; then
        echo "the background step $name failed with status $status (its output is above)" >&2
        exit "$status"
    fi
}

# pip installs on one core (unpacking and byte-compiling about 4 GB of packages) and clippy
# compiles on two: the virtualenv is made while clippy runs (from a fresh clone here: 174 s and
# 179 s one after the other, 264 s side by side). clippy needs none of it: pyo3's build script
# asks the interpreter the virtualenv is made from.
step "Python environment (made in the background) and Rust lint"
start_background venv bash -c 'set -euo pipefail; source submit/env.sh'
cargo fmt --all -- --check
PYO3_PYTHON="${PYTHON:-python3}" cargo clippy --workspace --all-targets --locked -- -D warnings
step "Lint (Python; after the virtualenv)"
finish_background venv
source submit/env.sh # its packages are in place: this puts .venv first on PATH
ruff check python tests examples docs/conf.py
ruff format --check python tests examples docs/conf.py
# The package's layers (pyproject.toml): no import back up, no driver module in a task or trainer.
PYTHONPATH=python lint-imports

if $fast; then
    export SPARKTRAIN_SKIP_JAR=1 # no Maven here: the wheel carries the jar only if one was built
    step "Rust tests without HDFS"
    rust_tests_without_hdfs

    install_wheel

    step "API reference (Sphinx, warnings as errors, docstring examples run)"
    bash docs/build.sh

    step "Python tests without Spark, HDFS or TensorFlow"
    # In one process: starting xdist workers takes longer than these tests do.
    pytest -q -p no:cacheprovider \
        -m "not spark and not hdfs and not tensorflow and not wheel and not azure and not mlflow" "$@"

    step "Done"
    exit 0
fi

step "Azurite, the Azure Blob Storage emulator (npm, into .azurite)"
python tests/harness/azurite.py install

step "MiniDFS and MiniYARN builds (Maven)"
bash tests/minidfs/start.sh --build-only
bash tests/miniyarn/start.sh --build-only

step "JVM jar: Hadoop TFRecord formats (Maven, Surefire)"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
MAVEN_OPTS="${MAVEN_OPTS:-} -Djansi.noreset=true" mvn -q -B -f jars/pom.xml verify -Drevision="$version"
ls "jars/target/sparktrain-hadoop-$version.jar"
# The same sources and tests against Spark 3.5 (Scala 2.12): the jar the wheel carries for 3.5.
MAVEN_OPTS="${MAVEN_OPTS:-} -Djansi.noreset=true" mvn -q -B -f jars/pom.xml verify -Drevision="$version" -Pspark3.5
ls "jars/target/sparktrain-hadoop-$version-spark3.5.jar"

# Every JVM from here on (HDFS, YARN, Spark's drivers, executors and workers, the chaos and
# many-host clusters) is short-lived and moves little data: C2's compilations would cost more
# CPU than they return. Compiling with C1 alone and collecting with one GC thread, as the MiniDFS
# and MiniYARN launchers already do, took the training tests and a standalone-master job, run one
# at a time on 2 cores, from 164 s to 133 s (user CPU from 105 s to 68 s); in the parallel run of
# the whole suite the gain is smaller. Each JVM says on its stderr that it picked these up.
export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:+$JAVA_TOOL_OPTIONS }-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

step "Start one MiniDFS cluster for all tests"
mkfifo "$work/stdin"
bash tests/minidfs/start.sh <"$work/stdin" >"$work/stdout" 2>"$work/stderr" &
minidfs=$!
exec 3>"$work/stdin" # holding the pipe open keeps the cluster up; closing it stops the cluster
for _ in $(seq 1 360); do
    if grep -q '^MINIDFS_READY ' "$work/stdout"; then break; fi
    if ! kill -0 "$minidfs" 2>/dev/null; then break; fi
    sleep 0.5
done
if ! grep -q '^MINIDFS_READY ' "$work/stdout"; then
    echo "MiniDFS did not start; its stderr ends with:" >&2
    tail -n 40 "$work/stderr" >&2
    exit 1
fi
SPARKTRAIN_TEST_HDFS=$(sed -n 's/^MINIDFS_READY //p' "$work/stdout" | head -n 1)
export SPARKTRAIN_TEST_HDFS
echo "HDFS at $SPARKTRAIN_TEST_HDFS"

step "Rust tests"
cargo test --workspace --exclude sparktrain-python --locked

# The CUDA variant keeps building without a GPU: PyPI's CUDA 13.0 compiler turns the kernels
# into PTX, and the engine's device tests run here (no driver: `auto` trains on the CPU and
# `cuda` names libcuda.so.1).
step "CUDA build (kernels with PyPI's nvcc; device tests without a GPU)"
bash submit/build-cuda.sh --check
if [ "${CI:-}" = true ]; then
    # Nothing after this point uses the test build (the wheel is a release build of its own):
    # its GBs go before the PyTorch environment needs them.
    cargo clean --profile dev
fi

# PyTorch's wheels (several GB with their CUDA libraries) and the setuptools they need cannot
# share .venv with TensorFlowOnSpark, nor can the MLflow server's pins or PySpark 3.5: their
# virtualenvs (tests/environments.sh) are made while the wheel compiles: their downloads and
# unpacking overlap the compiler's work instead of following it. In a process group of its own,
# so that a failed step stops all of it.
start_background environments bash tests/environments.sh

install_wheel

step "PyTorch, MLflow server and PySpark 3.5 environments (made during the wheel's build)"
finish_background environments
# The wheel just built, into .venv-torch: a job run by its interpreter has it as driver and
# executors.
python tests/harness/torch_env.py

step "API reference (Sphinx, warnings as errors, docstring examples run)"
bash docs/build.sh

step "Python tests"
# loadgroup: the tests of one xdist_group (the YARN module) share one worker and one cluster.
# The slowest tests are listed at the end: where this step's time goes.
pytest -q -rs -n 2 --dist loadgroup -p no:cacheprovider --durations=30 -m "not chaos and not hosts" "$@"

# A Spark cluster and HDFS over network-namespace hosts, whose links the tests cut and slow
# down: alone, so that the other tests' load cannot stretch the time-outs they measure. Skipped,
# with the reason, where namespaces cannot be made (not root, no iproute2).
step "Many hosts (network namespaces: 3 hosts, a head and a driver)"
status=0
pytest -q -rs -p no:cacheprovider -m hosts tests/test_hosts.py "$@" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then # 5: extra arguments deselected them all
    exit "$status"
fi

# A process holds one SparkContext: the chaos tests' is on a standalone master of their own.
step "Chaos tests (Spark standalone master, 3 workers)"
export SPARKTRAIN_CHAOS_REPORT="$work/chaos.jsonl"
status=0
pytest -q -p no:cacheprovider -m chaos tests/test_chaos.py "$@" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then # 5: extra arguments deselected them all
    exit "$status"
fi
echo "Time to detect a fault and to resume training (seconds):"
cat "$SPARKTRAIN_CHAOS_REPORT" 2>/dev/null || true

# PySpark 3.5, the LTS line, in a second virtualenv with the same wheel: a reduced suite. First
# the tests that need neither Spark, HDFS nor TensorFlow (the fast tier: the type table against
# 3.5's Arrow conversion, the launcher's helpers, submit's choice of jar, the public API). Then
# the Spark-side tests of the launcher, tfrecord.write and read_dataframe (both engines: the
# jar's Spark 3.5 build and mapInArrow), training and predict, the TFoS shim and its streams
# (Spark Streaming's DStreams and Structured Streaming) and Spark ML's scoring of sharded
# tables, less those that need TensorFlow, the HDFS cases and the compressed variants of the
# type round trip (storage and compression are sparktrain's own, the same on every Spark line;
# they would double the step's time). The tests of the Python data source API (4.x only) are
# skipped with the reason (tests/conftest.py). The doctor's and `sparktrain submit`'s Spark tests, which take minutes,
# run on 4.x only.
step "PySpark 3.5: launcher, tfrecord.write and read_dataframe, training and predict (.venv-spark35)"
venv=.venv-spark35 # made by tests/environments.sh
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps target/wheels/sparktrain-*.whl
"$venv/bin/python" -c "import pyspark, sparktrain; print('pyspark', pyspark.__version__, 'jar', sparktrain.jar_path())"
# Executors and trainers run this interpreter, whatever the caller's environment says.
spark35_pytest() {
    local status=0
    PATH="$PWD/$venv/bin:$PATH" VIRTUAL_ENV="$PWD/$venv" PYSPARK_PYTHON="$PWD/$venv/bin/python" \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs "$@" || status=$?
    if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then # 5: extra arguments deselected them all
        return "$status"
    fi
}
spark35_pytest -m "not spark and not hdfs and not tensorflow and not azure and not mlflow" "$@"
# With them, Spark ML's transform of a model with sharded tables: 3.5 cogroups through pandas,
# where the vectors travel as their storage.
spark35_pytest -n 2 -m "not tensorflow and not hdfs" -k "not GZIP and not ZLIB" \
    tests/test_cluster.py tests/test_spark_dataframes.py tests/test_spark_tfrecord_jvm.py \
    tests/test_tfrecord_format_names.py tests/test_training.py tests/test_tfos_shim.py \
    tests/test_tfos_streaming.py \
    tests/test_ml.py::test_a_model_with_sharded_tables_scores_by_lookup_as_its_replicated_twin_does "$@"

# The README's and docs' commands, as written: the cheap ones (tests/docs_commands.py --list
# says which run here, which on demand, and which need a cluster of another kind), less the
# reference's build, which ran as written above (bash docs/build.sh): Sphinx builds it once.
step "Documented commands (tests/docs_commands.py)"
python tests/docs_commands.py --skip "bash docs/build.sh"

step "Done"
