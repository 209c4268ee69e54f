"""The Spark tasks' side of :meth:`~sparktrain.ml.ClassifierModel.transform` and
:meth:`~sparktrain.ml.RegressorModel.transform`: score an Arrow batch with the exported model
and append Spark ML's output columns (a classifier's three, a regressor's prediction). Runs in Spark
tasks.

Each scorer is called on a batch (the model loaded whole in the task), or its ``finish`` is
given the batch with the engine's scores of it, which :func:`sparktrain.prediction.predict_by_lookup`
computes from the embedding rows the batch needs (a model with sharded tables).

Vectors leave as Spark ML's ``VectorUDT`` storage, ``struct<type, size, indices, values>``
(dense: type 1, values only), so the columns are real vectors for ``BinaryClassificationEvaluator``
and friends, without a second pass to convert arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparktrain import exported
from sparktrain.ml.columns import Layout

#: The smallest probability taken for a logit, so a saturated float32 probability (exactly 0
#: or 1) gives a large finite logit rather than an infinite one.
_EPS = 1e-12

#: Arrow's form of Spark ML's ``VectorUDT``.
VECTOR = pa.struct(
    [
        pa.field("type", pa.int8(), nullable=False),
        pa.field("size", pa.int32()),
        pa.field("indices", pa.list_(pa.field("element", pa.int32(), nullable=False))),
        pa.field("values", pa.list_(pa.field("element", pa.float64(), nullable=False))),
    ]
)


@dataclass(frozen=True)
class Scorer:
    """What a task needs to score: the export, the feature layout, the class count, the
    binary threshold and the output column names (raw, probability, prediction)."""

    export_dir: str
    #: The export's :func:`sparktrain.exported.version`, taken on the driver.
    version: str
    layout: Layout
    classes: int
    threshold: float
    outputs: tuple[str, str, str]

    def probabilities(self, batch: pa.RecordBatch) -> np.ndarray:
        """``rows x classes`` float64 class probabilities of ``batch``'s rows."""
        return self._probabilities(batch.num_rows, _scores(self, batch))

    def _probabilities(self, rows: int, scores: pa.Array) -> np.ndarray:
        p = scores.to_numpy(zero_copy_only=False).astype(np.float64)
        if self.classes == 2:
            return np.stack([1.0 - p, p], axis=1)
        matrix: np.ndarray = p.reshape(rows, self.classes)
        return matrix

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with the raw prediction, probability and prediction columns appended."""
        return self.finish(batch, _scores(self, batch))

    def finish(self, batch: pa.RecordBatch, scores: pa.Array) -> pa.RecordBatch:
        """``batch`` with the output columns of the engine's ``scores`` of it appended."""
        probability = self._probabilities(batch.num_rows, scores)
        if self.classes == 2:
            p = np.clip(probability[:, 1], _EPS, 1.0 - _EPS)
            logit = np.log(p) - np.log1p(-p)
            raw = np.stack([-logit, logit], axis=1)
            prediction = (probability[:, 1] > self.threshold).astype(np.float64)
        else:
            # Log-probabilities: the logits up to a constant per row, as softmax defines them.
            raw = np.log(np.clip(probability, _EPS, None))
            prediction = probability.argmax(axis=1).astype(np.float64)
        columns = [_vectors(raw), _vectors(probability), pa.array(prediction)]
        schema = batch.schema
        for name, column in zip(self.outputs, columns, strict=True):
            schema = schema.append(pa.field(name, column.type, nullable=False))
        return pa.RecordBatch.from_arrays([*batch.columns, *columns], schema=schema)


@dataclass(frozen=True)
class Regression:
    """What a task needs to score a regressor: the export, the feature layout and the name of
    the prediction column."""

    export_dir: str
    #: The export's :func:`sparktrain.exported.version`, taken on the driver.
    version: str
    layout: Layout
    output: str

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with the model's output appended as a double column."""
        return self.finish(batch, _scores(self, batch))

    def finish(self, batch: pa.RecordBatch, scores: pa.Array) -> pa.RecordBatch:
        """``batch`` with the engine's ``scores`` of it appended as a double column."""
        prediction = pa.array(scores.to_numpy(zero_copy_only=False).astype(np.float64))
        schema = batch.schema.append(pa.field(self.output, pa.float64(), nullable=False))
        return pa.RecordBatch.from_arrays([*batch.columns, prediction], schema=schema)


def _scores(scorer: Scorer | Regression, batch: pa.RecordBatch) -> pa.Array:
    """The engine's scores of ``batch``, by the export loaded whole."""
    model = exported.load(scorer.export_dir, scorer.version)
    return model.predict(scorer.layout.engine_batch(batch))


def _vectors(matrix: np.ndarray) -> pa.StructArray:
    """Dense Spark ML vectors, one per row of ``matrix``."""
    rows, width = matrix.shape
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    values = pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1)), type=VECTOR.field("values").type)
    return pa.StructArray.from_arrays(
        [
            pa.array(np.ones(rows, np.int8)),
            pa.nulls(rows, pa.int32()),
            pa.nulls(rows, VECTOR.field("indices").type),
            values,
        ],
        fields=list(VECTOR),
    )


__all__ = ["VECTOR", "Regression", "Scorer"]
