#!/usr/bin/env bash
# The main job end to end on one machine, from a fresh clone: installs what it needs, then
# runs examples/ctr_on_spark.py through `sparktrain submit` (or the example named by EXAMPLE, e.g.
# EXAMPLE=keras_on_spark.py) to a local cluster of two executors (separate JVMs and Python
# workers) with local files under ./sparktrain-example.
# Usage: bash submit/run-example.sh [--rows N] [--epochs N] [--output DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source submit/env.sh
source submit/install.sh
# `sparktrain submit` builds the spark-submit command: one trainer per executor, the local
# cluster's executors running this environment's Python, listeners on 127.0.0.1.
exec sparktrain submit \
    --master local-cluster --workers 2 --cores-per-worker 1 --memory 1024m \
    --conf spark.ui.showConsoleProgress=false \
    --conf spark.log.level=WARN \
    --env TF_CPP_MIN_LOG_LEVEL=2 \
    "examples/${EXAMPLE:-ctr_on_spark.py}" "$@"
