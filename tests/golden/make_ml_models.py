"""Writes ``ml/``: Spark ML models saved by an earlier sparktrain, which every later one must
load and score the same (Spark ML persistence stores each stage's class by its module path).

- ``ml/pipeline``: a ``PipelineModel`` of ``StringIndexer``, ``VectorAssembler`` and a
  Wide&Deep ``ClassifierModel``;
- ``ml/regressor``: an MLP ``RegressorModel`` over dense columns;
- ``ml/scores.json``: what each scored on ``frame()``'s rows when it was saved.

The files in the repository were written by sparktrain 0.1.0 as it stood before its Python
package was split into layers. Run it again only to add models, never to replace these:

    .venv/bin/python tests/golden/make_ml_models.py OUT_DIR
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROWS = 240


def rows() -> pd.DataFrame:
    """Two dense columns, a string column with an effect per value, a yes/no outcome and a
    number to regress, all learnable; ``row`` numbers them."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((ROWS, 2))
    shop = rng.integers(0, 6, ROWS)
    logit = 2.0 * x[:, 0] - x[:, 1] + np.linspace(-1.5, 1.5, 6)[shop]
    return pd.DataFrame(
        {
            "row": np.arange(ROWS),
            "x1": x[:, 0],
            "x2": x[:, 1],
            "shop": [f"shop-{s}" for s in shop],
            "outcome": np.where(rng.random(ROWS) < 1 / (1 + np.exp(-logit)), "yes", "no"),
            "amount": 3.0 * x[:, 0] - 2.0 * x[:, 1] + 0.1 * rng.standard_normal(ROWS),
        }
    )


def frame(spark):  # type: ignore[no-untyped-def]
    return spark.createDataFrame(rows()).repartition(2)


def main(out: Path) -> None:
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import StringIndexer, VectorAssembler

    from harness.spark import local_cluster_session
    from sparktrain.ml import Classifier, Regressor

    spark = local_cluster_session("sparktrain-golden-ml")
    df = frame(spark).cache()
    quiet = {"log": False}
    pipeline = Pipeline(
        stages=[
            StringIndexer(inputCol="outcome", outputCol="label", stringOrderType="alphabetAsc"),
            VectorAssembler(inputCols=["x1", "x2"], outputCol="features"),
            Classifier(
                model="wide_deep",
                categoricalCols=["shop"],
                buckets=8,
                hidden=[4],
                dim=2,
                batchSize=32,
                epochs=2,
                numWorkers=1,
                modelDir=str(out / "work" / "pipeline"),
                trainOptions=quiet,
            ),
        ]
    ).fit(df)
    regressor = Regressor(
        model="mlp",
        featuresCols=["x1", "x2"],
        labelCol="amount",
        hidden=[4],
        batchSize=32,
        epochs=2,
        numWorkers=1,
        modelDir=str(out / "work" / "regressor"),
        trainOptions=quiet,
    ).fit(df)
    pipeline.write().overwrite().save(str(out / "ml" / "pipeline"))
    regressor.write().overwrite().save(str(out / "ml" / "regressor"))
    scored = pipeline.transform(df).select("row", "probability").toPandas().sort_values("row")
    amounts = regressor.transform(df).select("row", "prediction").toPandas().sort_values("row")
    scores = {
        "probability": [float(v.toArray()[1]) for v in scored["probability"]],
        "prediction": [float(v) for v in amounts["prediction"]],
    }
    (out / "ml" / "scores.json").write_text(json.dumps(scores, indent=1) + "\n")
    shutil.rmtree(out / "work")
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
