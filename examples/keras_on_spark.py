"""The main job, end to end on one machine: a DataFrame becomes TFRecord files, then two Spark
executors train a Keras model on them together (MultiWorkerMirroredStrategy under the
TF_CONFIG sparktrain writes), and the chief exports the model.

A trainer or executor lost mid-training restarts the job (``Cluster.run``'s ``max_restarts``);
Keras's ``BackupAndRestore`` callback then resumes from the last finished epoch rather than
from the start.

Run it with ``bash submit/run-example.sh`` (which installs what it needs and calls
``spark-submit``), or with ``spark-submit examples/keras_on_spark.py`` on a cluster that has
sparktrain, TensorFlow and tf-keras installed (and ``TF_USE_LEGACY_KERAS=1`` on executors).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

#: The true weights of the synthetic problem: label = 1 when x · w > 0.
WEIGHTS = [1.5, -2.0, 0.7, 0.0, 3.0, -1.0, 0.4, 2.2]
BATCH = 64


def make_data(spark: Any, rows: int, path: str) -> int:
    """Writes ``rows`` synthetic examples (8 float features and a 0/1 label) as TFRecords."""
    from pyspark.sql import functions as F

    from sparktrain import tfrecord

    features = [(F.rand(seed=i) * 2 - 1).cast("float").alias(f"x{i}") for i in range(len(WEIGHTS))]
    df = spark.range(rows).select(*features)
    score = sum(F.col(f"x{i}") * w for i, w in enumerate(WEIGHTS))
    df = df.withColumn("label", (score > 0).cast("long"))
    return tfrecord.write(df, path, mode="overwrite", num_files=4).rows


def main_fun(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """One trainer: reads its share of the files, trains in sync with the others, exports."""
    import tempfile

    import numpy as np
    import tensorflow as tf

    from sparktrain import fs, tfrecord

    files = sorted(f.path for f in fs.glob(args["data"] + "/part-*"))[ctx.rank :: ctx.num_workers]
    batches = [b for path in files for b in tfrecord.read(path, batch_size=65536)]
    x = np.stack([np.concatenate([b.column(f"x{i}").to_numpy() for b in batches]) for i in range(8)], axis=1)
    y = np.concatenate([b.column("label").to_numpy() for b in batches]).astype("float32")
    print(f"{ctx.job_name}:{ctx.task_index} trains on {len(y)} examples from {len(files)} files", flush=True)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(8,)),
                tf.keras.layers.Dense(16, activation="relu"),
                tf.keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"]
        )
    options = tf.data.Options()
    # Each trainer already holds its own files: no further sharding.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=ctx.rank).repeat()
    data = data.batch(BATCH).with_options(options)

    class Report(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
            logs = logs or {}
            ctx.report(step=epoch + 1, loss=logs.get("loss", 0.0), accuracy=logs.get("accuracy", 0.0))

    # After a restart (ctx.generation > 0) this resumes from the last epoch every worker
    # finished. Every worker names the same folder (shared storage on a real cluster): TF lets
    # the chief write there, the others under temporary subfolders, and all read the chief's.
    backup = tf.keras.callbacks.BackupAndRestore(backup_dir=args["backup"])
    history = model.fit(
        data,
        epochs=args["epochs"],
        steps_per_epoch=args["steps_per_epoch"],
        callbacks=[backup, Report()],
        verbose=0,
    )
    # Under MultiWorkerMirroredStrategy every worker saves; only the chief's copy is kept.
    target = args["export"] if ctx.is_chief else os.path.join(tempfile.mkdtemp(), "model")
    model.save(target)
    return {"loss": history.history["loss"], "accuracy": history.history["accuracy"], "export": target}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", default="sparktrain-example", help="local folder for data and model")
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    options = parser.parse_args()

    from pyspark.sql import SparkSession

    from sparktrain import Cluster

    output = os.path.abspath(options.output)
    spark = SparkSession.builder.appName("sparktrain-example").getOrCreate()
    rows = make_data(spark, options.rows, f"file://{output}/data")
    print(f"wrote {rows} examples to {output}/data")

    args = {
        "data": f"file://{output}/data",
        "export": f"{output}/model",
        "backup": f"{output}/backup",
        "epochs": options.epochs,
        # Every worker must run the same number of steps per epoch; one pass over its share.
        "steps_per_epoch": max(1, rows // (options.workers * BATCH)),
    }
    env = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    with Cluster.run(spark, main_fun, args, options.workers, env=env) as cluster:
        result = cluster.wait()
    summary = {
        "examples": rows,
        "workers": options.workers,
        "loss": [round(v, 4) for v in result["loss"]],
        "accuracy": [round(v, 4) for v in result["accuracy"]],
        "export": result["export"],
    }
    print("RESULT " + json.dumps(summary))
    spark.stop()


if __name__ == "__main__":
    main()
