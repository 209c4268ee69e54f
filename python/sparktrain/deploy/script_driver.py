"""The driver program of ``sparktrain submit --per-worker train.py ARGS``: a Spark session, and
``train.py`` run as ``__main__`` in every trainer with ``ARGS`` as its command line (as
``torchrun`` runs a script; see :mod:`sparktrain.cluster.scripts`). ``spark-submit`` runs this
file; the user's script reaches the driver beside it (``--files`` in cluster mode). Runs on the
driver.

    python -m sparktrain.deploy.script_driver --workers 2 [--gpus-per-worker 1] -- train.py ARGS
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the job; returns 0 when every trainer's script exited with 0."""
    p = argparse.ArgumentParser(prog="sparktrain per-worker driver")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--gpus-per-worker", type=int, default=0)
    p.add_argument("script")
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    from pyspark.sql import SparkSession

    from sparktrain.cluster import Cluster

    spark = SparkSession.builder.getOrCreate()
    try:
        gpus = args.gpus_per_worker or None
        with Cluster.run(spark, args.script, args.script_args, args.workers, gpus_per_worker=gpus) as cluster:
            cluster.wait()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
