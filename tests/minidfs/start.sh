#!/usr/bin/env bash
# Starts the test-only MiniDFSCluster launcher (see MiniDfsLauncher.java),
# building it first when the build is missing or older than its sources.
#   tests/minidfs/start.sh [launcher options]   # e.g. --datanodes 3 --block-size 1048576
#   tests/minidfs/start.sh --build-only         # CI install step: fetch artifacts, compile
# Works from any cwd. Prints "MINIDFS_READY hdfs://127.0.0.1:<port>" on stdout
# when the cluster is up (with --kerberos, key=value fields follow the URL: see
# --help); stops on stdin EOF or SIGTERM/SIGINT. A background
# job started from a script gets /dev/null as stdin and would stop at once:
# give it a pipe or FIFO that stays open, or pass --ignore-stdin.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
marker="$here/target/classes/io/sparktrain/minidfs/MiniDfsLauncher.class"
# shellcheck source=../maven-launcher.sh
source "$here/../maven-launcher.sh"

if [[ "${1:-}" == "--build-only" ]]; then
  launcher_build force
  exit 0
fi
launcher_build_if_needed

# Small heap and serial GC: a test cluster holds little metadata and shares
# the cores with the tests. C1 only: on a 2-core box it halved the start time
# (about 4 s instead of 7-9 s) and did not slow a 256 MB write/read, since the
# C2 compiler threads no longer compete with the cluster and the tests.
# IPv4 stack so listeners are plain 127.0.0.1, not ::ffff:127.0.0.1.
# MINIDFS_JAVA_OPTS adds or overrides JVM flags (e.g. a bigger -Xmx).
# shellcheck disable=SC2086
exec java \
  -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Djava.net.preferIPv4Stack=true \
  ${MINIDFS_JAVA_OPTS:-} \
  -cp "$(launcher_classpath)" \
  io.sparktrain.minidfs.MiniDfsLauncher "$@"
