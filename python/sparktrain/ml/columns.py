"""How a DataFrame's columns become the engine's features, on the driver and in Spark tasks. Runs on
the driver and in Spark tasks.

The engine reads scalar columns: dense ones as floats, categorical ones hashed into ids. A
Spark ML vector column (``VectorAssembler``'s output, dense or sparse) or an ``array<numeric>``
column is spread into one dense column per value, named ``<featuresCol>_<i>``; those names are
what the exported model's feature spec holds. The spreading happens on Arrow batches inside
``mapInArrow`` (a vector travels there as its ``struct<type, size, indices, values>``), so no
row passes through Python objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sparktrain import _checks, _frames
from sparktrain.training import FeatureSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType


@dataclass(frozen=True)
class Layout:
    """Where the model's features come from: a vector column ``vector`` of ``width`` values,
    or the scalar ``dense`` columns; the ``categorical`` columns and the ``label``. ``spec``
    is the engine's feature spec, whose names the batches handed to the engine carry."""

    vector: str | None
    width: int
    dense: tuple[str, ...]
    categorical: tuple[str, ...]
    label: str
    spec: FeatureSpec

    @classmethod
    def of(
        cls,
        vector: str | None,
        width: int,
        dense: list[str],
        categorical: list[str],
        label: str,
        buckets: int,
    ) -> Layout:
        """The layout of a new model, whose engine names are the columns' own (a vector's
        values: ``<vector>_<i>``)."""
        names = tuple(f"{vector}_{i}" for i in range(width)) if vector is not None else tuple(dense)
        spec = FeatureSpec(dense=names, categorical=tuple((c, buckets) for c in categorical), label=label)
        return cls(vector, len(names), tuple(dense), tuple(categorical), label, spec)

    def reading(self, vector: str | None, dense: list[str], categorical: list[str], label: str) -> Layout:
        """This model's layout reading other columns, matched by position (a model's column
        params may be set after it was fitted)."""
        if vector is None:
            takes = f"the model takes {self.width} columns"
            _checks.check(len(dense) == self.width, "featuresCols", dense, takes)
        _checks.check(
            len(categorical) == len(self.spec.categorical),
            "categoricalCols",
            categorical,
            f"the model takes {len(self.spec.categorical)} columns",
        )
        return Layout(vector, self.width, tuple(dense), tuple(categorical), label, self.spec)

    def engine_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The columns of ``batch`` the engine reads (the label, if ``batch`` has it), under
        the spec's names, a vector spread into scalar float32 columns."""
        if self.vector is None:
            columns = [batch.column(n) for n in self.dense]
        else:
            matrix = dense_matrix(batch.column(self.vector), self.width, self.vector)
            columns = [pa.array(matrix[:, i]) for i in range(self.width)]
        sources = list(self.categorical)
        names = [*self.spec.dense, *(name for name, _ in self.spec.categorical)]
        if self.label in batch.schema.names:
            sources.append(self.label)
            names.append(self.spec.label)
        columns += [batch.column(n) for n in sources]
        return pa.RecordBatch.from_arrays(columns, names=names)


def training_frame(df: DataFrame, layout: Layout) -> DataFrame:
    """``df`` narrowed to what the engine reads, the vector spread into scalar columns, for
    :func:`sparktrain.train` to feed the trainers."""
    from pyspark.sql.types import FloatType, StructField, StructType

    names = [*layout.categorical, layout.label]
    if layout.vector is None:
        return df.select(*(_frames.column(n) for n in [*layout.dense, *names]))
    narrow = df.select(*(_frames.column(n) for n in [layout.vector, *names]))
    fields = [StructField(n, FloatType(), False) for n in layout.spec.dense]
    schema = StructType([*fields, *(narrow.schema[n] for n in names)])

    def spread(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield layout.engine_batch(batch)

    spread_out: DataFrame = _frames.map_in_arrow(narrow, spread, schema)
    return spread_out


def dense_matrix(column: pa.Array | pa.ChunkedArray, width: int, name: str) -> np.ndarray:
    """``rows x width`` float32 values of a vector column (Spark ML's ``struct<type, size,
    indices, values>``: type 1 dense, 0 sparse) or of a list column; a null row is zeros.
    ``name`` is the column, named in the error for a row of another width."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    rows = len(column)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_struct(column.type):
        kinds = column.field("type").to_numpy(zero_copy_only=False)
        values, indices = column.field("values"), column.field("indices")
    else:
        kinds, values, indices = np.ones(rows, np.int8), column, None
    valid &= values.is_valid().to_numpy(zero_copy_only=False)
    parent, within, flat = _items(values, valid)
    sparse = valid & (kinds == 0)
    position = within
    if indices is not None and sparse.any():
        # A sparse vector's indices and values have the same length, row by row.
        _, _, index = _items(indices, sparse)
        position = within.copy()
        position[sparse[parent]] = index
    lengths = np.bincount(parent, minlength=rows)
    wrong = np.flatnonzero(valid & (kinds == 1) & (lengths != width))
    beyond = np.flatnonzero(position >= width)
    if len(wrong) or len(beyond):
        row = int(wrong[0]) if len(wrong) else int(parent[beyond[0]])
        held = f"holds {int(lengths[row])} values" if len(wrong) else "has an index beyond them"
        raise _checks.refuse(
            "featuresCol",
            name,
            f"row {row} of a batch {held}, where the model takes {width} (every row's vector "
            "must have the same size)",
        )
    matrix = np.zeros((rows, width), np.float32)
    matrix[parent, position] = flat
    return matrix


def _items(lists: pa.Array, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The items of the list array ``lists`` in the rows where ``rows`` is true: for each item
    its row, its position in the row and its value (the offsets are read directly, so a null or
    sliced list is taken as Arrow defines it)."""
    offsets = lists.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    starts = offsets[:-1]
    lengths = np.where(rows, offsets[1:] - starts, 0)
    total = int(lengths.sum())
    parent = np.repeat(np.arange(len(lengths)), lengths)
    within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    child = lists.values.to_numpy(zero_copy_only=False)
    return parent, within, child[starts[parent] + within]


def _is_vector(t: DataType | None) -> bool:
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import ArrayType, NumericType

    return isinstance(t, VectorUDT) or (isinstance(t, ArrayType) and isinstance(t.elementType, NumericType))


def check_columns(
    schema: StructType, vector: str | None, dense: list[str], categorical: list[str], label: str | None
) -> None:
    """Refuses, naming the param, a column that ``schema`` lacks or whose type cannot feed the
    model; ``label`` None for scoring, where the label may be absent."""
    from pyspark.sql.types import BinaryType, IntegralType, NumericType, StringType

    types = {f.name: f.dataType for f in schema.fields}

    def column(param: str, name: str, ok: bool, need: str) -> None:
        if name not in types:
            raise _checks.refuse(param, name, f"no such column (columns: {', '.join(types)})")
        if not ok:
            raise _checks.refuse(param, name, f"column of type {types[name].simpleString()}: {need}")

    if vector is not None:
        column("featuresCol", vector, _is_vector(types.get(vector)), "give a vector or array<numeric> column")
    for name in dense:
        column("featuresCols", name, isinstance(types.get(name), NumericType), "give numeric columns")
    for name in categorical:
        kind = types.get(name)
        column(
            "categoricalCols",
            name,
            isinstance(kind, (IntegralType, StringType, BinaryType)),
            "give integer, string or binary columns",
        )
    if label is not None:
        column("labelCol", label, isinstance(types.get(label), NumericType), "give a numeric label")


def vector_width(df: DataFrame, column: str) -> int:
    """How many values the vector column holds: from its ML attributes (``VectorAssembler``
    writes them), else from its first row."""
    from pyspark.ml.linalg import Vector

    attributes: Any = df.schema[column].metadata.get("ml_attr", {})
    if isinstance(attributes.get("num_attrs"), int):
        return int(attributes["num_attrs"])
    first = df.select(_frames.column(column)).dropna().first()
    if first is None:
        raise _checks.refuse("featuresCol", column, "has no rows to tell how many values it holds")
    value = first[0]
    return len(value.toArray()) if isinstance(value, Vector) else len(value)


__all__ = ["Layout", "check_columns", "dense_matrix", "training_frame", "vector_width"]
