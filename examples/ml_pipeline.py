"""A Spark ML pipeline on sparktrain's engine, end to end on one machine:

1. Spark builds a DataFrame of synthetic purchases: two numbers, two string columns whose values
   each have a hidden effect, and a yes/no outcome.
2. A ``Pipeline`` of ``StringIndexer`` (the label), ``VectorAssembler`` (the numbers) and
   ``sparktrain.ml.Classifier`` (Wide&Deep, the strings hashed and embedded) is tuned by
   ``TrainValidationSplit`` over two learning rates. Each candidate trains on two executors in
   sync.
3. The best pipeline scores held-out rows (AUC with ``BinaryClassificationEvaluator``). It is
   saved, loaded with ``PipelineModel.load`` and scores the same rows again.
4. ``sparktrain.embeddings`` reads the model's embedding table in Spark tasks.

Run it with ``EXAMPLE=ml_pipeline.py bash submit/run-example.sh``, or with ``spark-submit
examples/ml_pipeline.py --output hdfs://...`` on a cluster with sparktrain installed. The last
line it prints starts with ``RESULT``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def purchases(spark: Any, rows: int, seed: int) -> Any:
    """``rows`` purchases. The outcome's logit is the sum of a hidden effect of each shop and
    city (a hash of the value) and of the price."""
    from pyspark.sql import functions as F

    def effect(name: str) -> Any:
        return (F.abs(F.xxhash64(F.lit(name), F.col(name))) % 2001).cast("double") / 500.0 - 2.0

    frame = spark.range(rows).select(
        F.randn(seed).alias("price"),
        F.randn(seed + 1).alias("age"),
        F.concat(F.lit("shop-"), F.floor(F.rand(seed + 2) * 50).cast("string")).alias("shop"),
        F.concat(F.lit("city-"), F.floor(F.rand(seed + 3) * 20).cast("string")).alias("city"),
    )
    logit = effect("shop") + effect("city") - 1.5 * F.col("price")
    yes = F.rand(seed + 4) < 1.0 / (1.0 + F.exp(-logit))
    return frame.withColumn("outcome", F.when(yes, "yes").otherwise("no"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20_000, help="training rows")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", default=os.path.abspath("sparktrain-ml-example"), help="any storage URL")
    args = parser.parse_args()

    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.feature import StringIndexer, VectorAssembler
    from pyspark.ml.tuning import ParamGridBuilder, TrainValidationSplit
    from pyspark.sql import SparkSession

    import sparktrain as st
    from sparktrain.ml import Classifier

    spark = SparkSession.builder.appName("sparktrain-ml-example").getOrCreate()
    train = purchases(spark, args.rows, seed=1).cache()
    test = purchases(spark, args.rows // 10, seed=2)

    classifier = Classifier(
        model="wide_deep",
        categoricalCols=["shop", "city"],
        buckets=1_000,
        hidden=[32],
        dim=8,
        batchSize=256,
        epochs=2,
        numWorkers=args.workers,
        modelDir=f"{args.output}/runs",
        trainOptions={"log": False},
    )
    pipeline = Pipeline(
        stages=[
            StringIndexer(inputCol="outcome", outputCol="label", stringOrderType="alphabetAsc"),
            VectorAssembler(inputCols=["price", "age"], outputCol="features"),
            classifier,
        ]
    )
    evaluator = BinaryClassificationEvaluator()
    grid = ParamGridBuilder().addGrid(classifier.learningRate, [0.01, 0.0001]).build()
    tuning = TrainValidationSplit(estimator=pipeline, estimatorParamMaps=grid, evaluator=evaluator, seed=7)
    tuned = tuning.fit(train)
    best = tuned.bestModel
    auc = evaluator.evaluate(best.transform(test))
    print(f"validation AUCs {tuned.validationMetrics}, held-out AUC {auc:.3f}")

    path = f"{args.output}/pipeline"
    best.write().overwrite().save(path)
    loaded = PipelineModel.load(path)
    again = evaluator.evaluate(loaded.transform(test))
    print(f"saved to {path}; the loaded pipeline's AUC {again:.3f}")

    tables = st.embeddings(spark, loaded.stages[-1].exportDir, "deep/embeddings")
    tables.where("feature = 'shop'").orderBy("bucket").show(3, truncate=60)
    result = {
        "validation_aucs": tuned.validationMetrics,
        "learning_rate": best.stages[-1].getLearningRate(),
        "test_auc": auc,
        "loaded_auc": again,
        "embedding_rows": tables.count(),
    }
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
