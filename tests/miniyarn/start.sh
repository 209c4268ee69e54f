#!/usr/bin/env bash
# Starts the test-only MiniYARNCluster launcher (see MiniYarnLauncher.java), building it first
# when the build is missing or older than its sources.
#   tests/miniyarn/start.sh --default-fs hdfs://127.0.0.1:PORT --conf-dir DIR [options]
#   tests/miniyarn/start.sh --build-only   # CI install step: fetch artifacts, compile
# Prints "MINIYARN_READY <conf dir>" on stdout when the cluster is up; stops on stdin EOF or
# SIGTERM/SIGINT. The NodeManagers keep their folders under ./target of the working directory.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
marker="$here/target/classes/io/sparktrain/miniyarn/MiniYarnLauncher.class"
# shellcheck source=../maven-launcher.sh
source "$here/../maven-launcher.sh"

if [[ "${1:-}" == "--build-only" ]]; then
  launcher_build force
  exit 0
fi
launcher_build_if_needed

# Containers start their JVMs from {{JAVA_HOME}}, which the NodeManager fills in from its own
# environment.
if [[ -z "${JAVA_HOME:-}" ]]; then
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
  export JAVA_HOME
fi

# The same lean JVM as the MiniDFS launcher: the containers need the cores more. The web
# applications of the ResourceManager and NodeManagers build classes with Guice's cglib, which
# Java 17 allows only into opened packages.
# shellcheck disable=SC2086
exec java \
  -Xms64m -Xmx768m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  --add-opens=java.base/java.lang=ALL-UNNAMED \
  --add-opens=java.base/java.util=ALL-UNNAMED \
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED \
  --add-opens=java.base/java.net=ALL-UNNAMED \
  --add-opens=java.base/java.io=ALL-UNNAMED \
  --add-opens=java.base/java.nio=ALL-UNNAMED \
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
  -Djava.net.preferIPv4Stack=true \
  ${MINIYARN_JAVA_OPTS:-} \
  -cp "$(launcher_classpath)" \
  io.sparktrain.miniyarn.MiniYarnLauncher "$@"
