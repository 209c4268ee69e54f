# Sourced after submit/env.sh: builds the release wheel (incrementally), checks its platform tag
# (submit/check_wheel.py) and installs it into .venv, the way users get sparktrain.
# The jar (jars/: the Spark TFRecord file format) travels inside the wheel, in two builds of the
# same sources: for Spark 4.x (Scala 2.13) and for Spark 3.5 (Scala 2.12, Maven profile
# spark3.5); sparktrain.jar_path() picks the one of the running Spark. Each is built here when
# missing or older than its sources, unless SPARKTRAIN_SKIP_JAR=1 (the fast test tier, which
# starts no JVM); a wheel built without them says so from sparktrain.jar_path().
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
jars=()
for build in "" spark3.5; do
    jar="jars/target/sparktrain-hadoop-$version${build:+-$build}.jar"
    jars+=("$jar")
    if [ "${SPARKTRAIN_SKIP_JAR:-0}" != 1 ] && command -v mvn >/dev/null \
        && { [ ! -f "$jar" ] || [ -n "$(find jars/pom.xml jars/src/main -newer "$jar" -print -quit)" ]; }; then
        MAVEN_OPTS="${MAVEN_OPTS:-} -Djansi.noreset=true" mvn -q -B -f jars/pom.xml package -DskipTests \
            -Drevision="$version" ${build:+-P"$build"}
    fi
done
rm -rf python/sparktrain/jars
for jar in "${jars[@]}"; do
    if [ -f "$jar" ]; then
        mkdir -p python/sparktrain/jars
        cp "$jar" python/sparktrain/jars/
    fi
done
# The wheel users get: abi3 (CPython 3.10 and later) and manylinux2014, i.e. glibc 2.17 and
# later (CentOS 7, RHEL 8), so that it installs where Hadoop clusters run without a Rust
# toolchain. zig (the ziglang package) compiles and links against glibc 2.17's symbols without
# a manylinux container. Every dependency builds there (ring's C and assembly included); the
# one libc call newer than 2.17, renameat2, goes through syscall(2). rustc's own code
# generation is the same as a plain build (baseline x86-64, no target-cpu; the CRC-32C, AES
# and gemm paths pick their instructions at run time). This is the one release build: the
# tests install and test this very wheel, and cargo reuses its target/x86_64-unknown-linux-gnu
# from one run to the next.
platform="manylinux_2_17_$(uname -m)"
rm -rf target/wheels
maturin build --release --locked -q --zig --compatibility manylinux2014 -o target/wheels
python submit/check_wheel.py target/wheels/sparktrain-*.whl "$platform"
python -m pip install -q --force-reinstall --no-deps target/wheels/sparktrain-*.whl
