"""The main job, end to end on one machine, on sparktrain's own engine (no TensorFlow):

1. Spark builds a Criteo-like DataFrame of click logs (13 counts, 26 categorical ids, a click
   label) and writes it as TFRecord files (``sparktrain.tfrecord.write``).
2. Two Spark executors train a Wide&Deep model on those files in sync
   (``sparktrain.train``): the chief checkpoints, writes TensorBoard event files, evaluates on
   held-out rows across both workers and exports the model.
3. ``sparktrain.predict`` scores the held-out rows inside Spark tasks and the scores are
   written as Parquet.

Run it with ``bash submit/run-example.sh`` (which installs what it needs and calls
``spark-submit``), or with ``spark-submit examples/ctr_on_spark.py --output hdfs://...`` on a
cluster with sparktrain installed (``sparktrain submit`` builds that command, see
docs/deploy.md). The last line it prints starts with ``RESULT``; the same summary is written to
``<output>/result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

DENSE = [f"i{k:02d}" for k in range(1, 14)]
SPARSE = [f"c{k:02d}" for k in range(1, 27)]


def click_logs(spark: Any, rows: int, seed: int) -> Any:
    """``rows`` synthetic click logs: each id has a hidden effect on the click rate (a hash of
    the column and the id), a few columns interact, and counts matter a little."""
    from pyspark.sql import functions as F

    def effect(*columns: Any) -> Any:
        """A fixed pseudo-random effect in [-1, 1) per value (tuple) of ``columns``."""
        return (F.abs(F.xxhash64(*columns)) % 2001).cast("double") / 1000.0 - 1.0

    frame = spark.range(rows).select(
        *[F.floor(F.exp(F.randn(seed + k) + 1.0)).cast("float").alias(name) for k, name in enumerate(DENSE)],
        # Zipf-like ids: a few are frequent. Vocabularies grow from 10 to about 5,000 ids.
        *[
            F.floor(F.pow(F.rand(seed + 100 + k), 3) * int(10 * 1.28**k)).cast("long").alias(name)
            for k, name in enumerate(SPARSE)
        ],
    )
    logit = sum(effect(F.lit(name), F.col(name)) * 0.8 for name in SPARSE)
    logit += effect(F.col("c01"), F.col("c02")) * 1.5 + effect(F.col("c03"), F.col("c06")) * 1.5
    logit += F.log1p(F.col("i01")) * 0.3 - 2.0
    click = F.rand(seed + 999) < 1.0 / (1.0 + F.exp(-logit))
    return frame.withColumn("label", click.cast("long"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="training rows")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", default="sparktrain-example", help="a local folder or storage URL")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    import sparktrain as st

    spark = SparkSession.builder.appName("sparktrain-ctr").getOrCreate()
    out = args.output if "://" in args.output else os.path.abspath(args.output)
    started = time.time()
    train = st.tfrecord.write(
        click_logs(spark, args.rows, seed=1), f"{out}/train", mode="overwrite", num_files=8
    )
    held_out = click_logs(spark, max(args.rows // 10, 1000), seed=2)
    evaluation = st.tfrecord.write(held_out, f"{out}/eval", mode="overwrite", num_files=2)
    print(f"wrote {train.rows} training and {evaluation.rows} held-out rows as TFRecords", flush=True)

    for stale in ("model", "tensorboard"):  # a rerun starts afresh instead of resuming
        if st.fs.exists(f"{out}/{stale}"):
            st.fs.delete(f"{out}/{stale}", recursive=True)
    result = st.train(
        spark,
        f"{out}/train",
        model="wide_deep",
        features={"dense": DENSE, "categorical": {name: 10_000 for name in SPARSE}},
        num_workers=args.workers,
        epochs=args.epochs,
        batch_size=256,
        model_dir=f"{out}/model",
        eval_data=f"{out}/eval",
        tensorboard_dir=f"{out}/tensorboard",
        optimizer="adam",
        wide_optimizer="ftrl",
        checkpoint_every=500,
        log_every=100,
    )
    fit = result.fit
    print(f"trained {fit.steps} steps ({fit.examples} examples) in {fit.seconds:.1f} s", flush=True)
    for step, metrics in fit.evaluations:
        print(f"step {step}: eval loss {metrics.loss:.4f}, AUC {metrics.auc:.4f}", flush=True)

    scores = st.predict(spark, result.export_dir, st.tfrecord.read_dataframe(spark, f"{out}/eval"))
    scores.select("label", "score").write.mode("overwrite").parquet(f"{out}/scores")
    scored = spark.read.parquet(f"{out}/scores").count()
    summary = {
        "rows": train.rows,
        "workers": args.workers,
        "steps": fit.steps,
        "examples_per_sec": round(fit.examples_per_sec),
        "eval_loss": result.metrics.loss,
        "eval_auc": result.metrics.auc,
        "export": result.export_dir,
        "scored": scored,
        "seconds": round(time.time() - started, 1),
    }
    print("RESULT " + json.dumps(summary), flush=True)
    # Also next to the data: in YARN's cluster mode this driver's stdout stays in the cluster.
    st.fs.write_bytes(f"{out}/result.json", json.dumps(summary).encode(), overwrite=True)
    spark.stop()


if __name__ == "__main__":
    main()
