"""Scoring a DataFrame with an exported model, inside Spark tasks. :func:`predict` runs on the
driver, :func:`score_batch` in the tasks.

:func:`predict` runs one ``mapInArrow`` over the DataFrame: each Python worker loads the
exported model once per version of the export (the Rust engine, no TensorFlow; see
:mod:`sparktrain.exported`) and scores every Arrow batch it is handed, so rows never pass
through Python objects one by one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sparktrain import _checks, exported, fs, storage_options
from sparktrain._deps import require_spark
from sparktrain.errors import InvalidArgumentError

if TYPE_CHECKING:
    import pyarrow as pa


def score_batch(
    export_dir: str, batch: pa.RecordBatch, score_column: str = "score", version: str | None = None
) -> pa.RecordBatch:
    """``batch`` with a ``score_column`` appended: the probability of the positive class for a
    binary model, a list of class probabilities for a softmax model, or the output of a
    regression model. ``version`` is the export's :func:`sparktrain.exported.version` (looked
    up when None)."""
    import pyarrow as pa

    model = exported.load(export_dir, exported.version(export_dir) if version is None else version)
    scores = model.predict(batch)
    if model.loss == "softmax_cross_entropy" and batch.num_rows > 0:
        classes = len(scores) // batch.num_rows
        scores = pa.FixedSizeListArray.from_arrays(scores, classes)
    elif model.loss == "softmax_cross_entropy":
        scores = pa.array([], pa.list_(pa.float32()))
    if isinstance(scores, pa.FixedSizeListArray):
        scores = scores.cast(pa.list_(pa.float32()))
    return batch.append_column(score_column, scores)


def predict(spark: Any, export_dir: str, df: Any, *, score_column: str = "score") -> Any:
    """``df`` with a ``score_column`` appended (float for binary models, the probability of
    1; ``array<float>`` of class probabilities for softmax models; float for regression
    models, their output), scored by the model exported to ``export_dir``
    (any storage URL the executors can read). The features are found by name; the label
    column may be absent. The result is lazy, like any DataFrame: write it where it belongs.
    ``spark`` is the session ``df`` belongs to (taken for symmetry with :func:`sparktrain.train`)."""
    require_spark("sparktrain.predict", arrow_udfs=True)
    from pyspark.sql import DataFrame
    from pyspark.sql.types import ArrayType, FloatType, StructField, StructType

    export_dir = _checks.text("export_dir", export_dir)
    _checks.instance("df", df, DataFrame, "a DataFrame")
    storage = storage_options.of_session(df.sparkSession)
    score_column = _checks.text("score_column", score_column)
    if score_column in df.columns:
        raise InvalidArgumentError(f"the DataFrame already has a column {score_column!r}")
    # Fails early, on the driver, for a missing or damaged export; the tasks score this version.
    version = exported.version(export_dir)
    model = exported.load(export_dir, version)
    score_type = ArrayType(FloatType(), False) if model.loss == "softmax_cross_entropy" else FloatType()
    schema = StructType([*df.schema.fields, StructField(score_column, score_type, False)])

    def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs.configure(storage)
        for batch in batches:
            yield score_batch(export_dir, batch, score_column, version)

    return df.mapInArrow(score, schema)


__all__ = [
    "predict",
    "score_batch",
]
