"""Synchronous data-parallel training with NumPy alone: logistic regression on a DataFrame,
one trainer per Spark executor, gradients averaged with ``ctx.allreduce`` every step.

Each trainer reads its partition of the DataFrame as Arrow batches (``input_mode="spark"``),
computes its gradient, and all trainers apply the same averaged gradient, so their weights stay
identical without a parameter server. The same pattern works for PyTorch or JAX tensors through
their NumPy views.

    spark-submit --master "local-cluster[2,1,1024]" examples/numpy_sgd_on_spark.py
"""

from __future__ import annotations

import argparse
import json
from typing import Any

TRUE_WEIGHTS = [2.0, -3.0, 0.5, 1.5]


def main_fun(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """One trainer: loads its partition, then runs synchronous SGD."""
    import numpy as np

    batches = list(ctx.feed())
    x = np.stack([np.concatenate([b.column(f"x{i}").to_numpy() for b in batches]) for i in range(4)], axis=1)
    y = np.concatenate([b.column("label").to_numpy() for b in batches]).astype(np.float64)
    weights = np.zeros(5)  # four features and a bias
    weights = ctx.broadcast(weights, root=0)  # everyone starts from the chief's weights
    rng = np.random.default_rng(ctx.rank)
    losses = []
    for step in range(args["steps"]):
        rows = rng.integers(0, len(y), size=args["batch_size"])
        xb = np.hstack([x[rows], np.ones((len(rows), 1))])
        p = 1.0 / (1.0 + np.exp(-(xb @ weights)))
        gradient = xb.T @ (p - y[rows]) / len(rows)
        ctx.allreduce(gradient, op="mean")  # in place: the same average on every trainer
        weights -= args["learning_rate"] * gradient
        if step % 50 == 0 or step == args["steps"] - 1:
            eps = 1e-12
            loss = -np.mean(y[rows] * np.log(p + eps) + (1 - y[rows]) * np.log(1 - p + eps))
            loss = float(ctx.allreduce(np.array([loss]), op="mean")[0])
            losses.append(loss)
            ctx.report(step=step, loss=loss)
    # Every trainer holds exactly the same weights.
    identical = len({w.tobytes() for w in ctx.allgather(weights)}) == 1
    return {"weights": weights.tolist(), "losses": losses, "identical": identical, "examples": len(y)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    options = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from sparktrain import Cluster

    spark = SparkSession.builder.appName("sparktrain-numpy-sgd").getOrCreate()
    df = spark.range(options.rows).select(*[(F.rand(seed=i) * 2 - 1).alias(f"x{i}") for i in range(4)])
    logit = sum(F.col(f"x{i}") * w for i, w in enumerate(TRUE_WEIGHTS)) + F.randn(seed=9) * 0.1
    df = df.withColumn("label", (logit > 0).cast("double"))

    args = {"steps": options.steps, "batch_size": 256, "learning_rate": 0.5}
    with Cluster.run(spark, main_fun, args, options.workers, input_mode="spark", data=df) as cluster:
        cluster.wait()
        results = cluster.results()
    chief = results[0]
    summary = {
        "examples": sum(r["examples"] for r in results),
        "workers": options.workers,
        "losses": [round(v, 4) for v in chief["losses"]],
        "weights": [round(v, 3) for v in chief["weights"]],
        "identical": all(r["identical"] and r["weights"] == chief["weights"] for r in results),
    }
    print("RESULT " + json.dumps(summary))
    spark.stop()


if __name__ == "__main__":
    main()
