#!/usr/bin/env bash
# The main job end to end on one machine, from a fresh clone: installs what it needs, then
# spark-submits examples/ctr_on_spark.py (or the example named by EXAMPLE, e.g.
# EXAMPLE=keras_on_spark.py) to a local cluster of two executors (separate JVMs and Python
# workers) with local files under ./sparktrain-example.
# Usage: bash submit/run-example.sh [--rows N] [--epochs N] [--output DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source submit/env.sh
source submit/install.sh
export PYSPARK_PYTHON="$VIRTUAL_ENV/bin/python"
exec spark-submit \
    --master "local-cluster[2,1,1024]" \
    --conf spark.driver.host=127.0.0.1 \
    --conf spark.driver.bindAddress=127.0.0.1 \
    --conf spark.ui.showConsoleProgress=false \
    --conf spark.log.level=WARN \
    --conf spark.executorEnv.TF_CPP_MIN_LOG_LEVEL=2 \
    "examples/${EXAMPLE:-ctr_on_spark.py}" "$@"
