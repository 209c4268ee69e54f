# Sourced after submit/env.sh: builds the release wheel (incrementally) and installs it into
# .venv, the way users get sparktrain.
# The jar (jars/: the Spark TFRecord file format) travels inside the wheel. It is built here
# when missing or older than its sources, unless SPARKTRAIN_SKIP_JAR=1 (the fast test tier, which
# starts no JVM); a wheel built without it says so from sparktrain.jar_path().
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
jar="jars/target/sparktrain-hadoop-$version.jar"
if [ "${SPARKTRAIN_SKIP_JAR:-0}" != 1 ] && command -v mvn >/dev/null \
    && { [ ! -f "$jar" ] || [ -n "$(find jars/pom.xml jars/src/main -newer "$jar" -print -quit)" ]; }; then
    MAVEN_OPTS="${MAVEN_OPTS:-} -Djansi.noreset=true" mvn -q -B -f jars/pom.xml package -DskipTests -Drevision="$version"
fi
rm -rf python/sparktrain/jars
if [ -f "$jar" ]; then
    mkdir -p python/sparktrain/jars
    cp "$jar" python/sparktrain/jars/
fi
rm -rf target/wheels
maturin build --release --locked -q -o target/wheels
python -m pip install -q --force-reinstall --no-deps target/wheels/sparktrain-*.whl
