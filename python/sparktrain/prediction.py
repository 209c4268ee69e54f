"""Scoring a DataFrame with an exported model, inside Spark tasks. :func:`predict` runs on the
driver, :func:`score_batch` and the cogrouped scoring of :func:`predict_by_lookup` in the
tasks.

A model whose embedding tables fit a Python worker is scored with one ``mapInArrow`` over the
DataFrame: each Python worker loads the exported model once per version of the export (the
Rust engine, no TensorFlow; see :mod:`sparktrain.exported`) and scores every Arrow batch it is
handed, so rows never pass through Python objects one by one.

A model trained with sharded tables may have tables larger than any one scorer. It is scored
where its rows are: each input partition's distinct ids are joined against the tables as a
DataFrame (:func:`sparktrain.embeddings`, read from the owners' files in Spark tasks), and the
rows each partition needs are cogrouped with the partition's own rows, which are scored with
the model's other weights and those rows alone (``ExportedModel.predict_with_rows``). No
process ever holds a whole table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sparktrain import _checks, _frames, exported, fs, storage_options
from sparktrain._deps import require_spark
from sparktrain.errors import InvalidArgumentError
from sparktrain.training.results import FeatureSpec

if TYPE_CHECKING:
    import pyarrow as pa


#: How a model's embedding rows are found when it is scored: ``load`` (every Python worker
#: loads the whole model), ``lookup`` (rows joined to the partitions that need them), or
#: ``auto``: ``lookup`` for an export whose tables are sharded, ``load`` otherwise.
TABLES = ("auto", "load", "lookup")
#: The column that names an input partition while it is scored by lookup.
_GROUP = "_sparktrain_partition"

#: A batch of the scored DataFrame's rows from a batch of the input's and the engine's scores
#: of it (one per row, or one per class and row for a softmax model).
Finish = Callable[["pa.RecordBatch", "pa.Array"], "pa.RecordBatch"]
#: The engine's input (the columns the model was trained on, by name) from a batch of rows.
Engine = Callable[["pa.RecordBatch"], "pa.RecordBatch"]


def score_batch(
    export_dir: str, batch: pa.RecordBatch, score_column: str = "score", version: str | None = None
) -> pa.RecordBatch:
    """``batch`` with a ``score_column`` appended: the probability of the positive class for a
    binary model, a list of class probabilities for a softmax model, or the output of a
    regression model. ``version`` is the export's :func:`sparktrain.exported.version` (looked
    up when None)."""
    model = exported.load(export_dir, exported.version(export_dir) if version is None else version)
    return _with_scores(batch, model.predict(batch), model.loss, score_column)


def _with_scores(batch: pa.RecordBatch, scores: pa.Array, loss: str, score_column: str) -> pa.RecordBatch:
    """``batch`` with the engine's ``scores`` appended as ``score_column`` (a list per row for a
    softmax model)."""
    import pyarrow as pa

    if loss == "softmax_cross_entropy" and batch.num_rows > 0:
        classes = len(scores) // batch.num_rows
        scores = pa.FixedSizeListArray.from_arrays(scores, classes)
    elif loss == "softmax_cross_entropy":
        scores = pa.array([], pa.list_(pa.float32()))
    if isinstance(scores, pa.FixedSizeListArray):
        scores = scores.cast(pa.list_(pa.float32()))
    return batch.append_column(score_column, scores)


def predict(
    spark: Any, export_dir: str, df: Any, *, score_column: str = "score", tables: str = "auto"
) -> Any:
    """``df`` with a ``score_column`` appended (float for binary models, the probability of
    1; ``array<float>`` of class probabilities for softmax models; float for regression
    models, their output), scored by the model exported to ``export_dir``
    (any storage URL the executors can read). The features are found by name; the label
    column may be absent. The result is lazy, like any DataFrame: write it where it belongs.
    ``spark`` is the session ``df`` belongs to (taken for symmetry with :func:`sparktrain.train`).

    ``tables`` says how the embedding rows are found: ``"load"`` loads the whole model in
    every Python worker; ``"lookup"`` joins each partition's ids against the tables where
    they are stored, so that no process holds a whole table (for tables larger than a scorer's
    memory; it shuffles the tables once per call); ``"auto"`` (the default) looks up the rows
    of an export whose tables are sharded, and loads any other."""
    require_spark("sparktrain.predict", arrow_udfs=True)
    from pyspark.sql import DataFrame
    from pyspark.sql.types import ArrayType, FloatType, StructField, StructType

    export_dir = _checks.text("export_dir", export_dir)
    _checks.instance("df", df, DataFrame, "a DataFrame")
    tables = _checks.choice("tables", _checks.text("tables", tables), TABLES)
    storage = storage_options.of_session(df.sparkSession)
    score_column = _checks.text("score_column", score_column)
    if score_column in df.columns:
        raise InvalidArgumentError(f"the DataFrame already has a column {score_column!r}")
    if _GROUP in df.columns:
        raise InvalidArgumentError(f"the DataFrame has a column {_GROUP!r}, which predict uses itself")
    # Fails early, on the driver, for a missing or damaged export (its tables are not read
    # here); the tasks score this version.
    version = exported.version(export_dir)
    model = exported.load(export_dir, version, tables=False)
    spec = FeatureSpec.from_native(model.features)
    spec.check_columns(df.columns, "df", label=False)
    key_kinds = json.loads(exported.config(export_dir)).get("key_kinds", {})
    spec.check_types(df.schema, "df", label=False, key_kinds=key_kinds)
    score_type = ArrayType(FloatType(), False) if model.loss == "softmax_cross_entropy" else FloatType()
    schema = StructType([*df.schema.fields, StructField(score_column, score_type, False)])
    if tables == "lookup" or (tables == "auto" and model.sharded_tables):
        loss = model.loss

        def finish(batch: pa.RecordBatch, scores: pa.Array) -> pa.RecordBatch:
            return _with_scores(batch, scores, loss, score_column)

        return predict_by_lookup(df, export_dir, version, schema, storage, finish=finish)

    def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs.configure(storage)
        for batch in batches:
            yield score_batch(export_dir, batch, score_column, version)

    return _frames.map_in_arrow(df, score, schema)


def predict_by_lookup(
    df: Any,
    export_dir: str,
    version: str,
    schema: Any,
    storage: dict[str, str],
    *,
    finish: Finish,
    engine: Engine | None = None,
) -> Any:
    """``df`` scored with its embedding rows looked up where they are (see the module's notes),
    into ``schema``: ``finish`` makes each scored batch from a batch of ``df``'s rows and the
    engine's scores of it; ``engine`` gives the engine's input of a batch of ``df``'s rows (the
    batch itself when None). :func:`predict` and the transform of :mod:`sparktrain.ml`'s models
    score through it."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from sparktrain.contents import embeddings

    def engine_input(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch if engine is None else engine(batch)

    # The batches of `keyed` come under positional names where a user's would not resolve
    # (`_frames.plain_names`); the functions below put the real ones back.
    names = list(df.columns)
    keyed = _frames.plain_names(df).withColumn(_GROUP, F.spark_partition_id())

    def ids_of(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs.configure(storage)
        model = exported.load(export_dir, version, tables=False)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            group = batch.column(_GROUP)[0].as_py()
            rows = batch.drop_columns([_GROUP]).rename_columns(names)
            ids = model.ids(engine_input(rows)).cast(pa.int64())
            yield pa.RecordBatch.from_arrays(
                [pa.array([group] * len(ids), pa.int32()), ids], names=[_GROUP, "id"]
            )

    wanted = keyed.mapInArrow(ids_of, f"{_GROUP} int, id long").distinct()
    rows = embeddings(df.sparkSession, export_dir).select("id", "table", "vector")
    needed = wanted.join(rows, "id")
    arrow_schema = _arrow_schema(df.schema)
    target = _arrow_schema(schema)

    def score(scored: pa.Table, looked_up: pa.Table) -> pa.Table:
        fs.configure(storage)
        model = exported.load(export_dir, version, tables=False)
        ids, given = _rows_by_table(looked_up, model.tables)
        batches = [
            finish(b, model.predict_with_rows(engine_input(b), ids, given))
            for b in scored.drop_columns([_GROUP]).rename_columns(names).cast(arrow_schema).to_batches()
        ]
        if not batches:
            return target.empty_table()
        # The scores come out non-null; the schema Spark is given may say otherwise.
        return pa.Table.from_batches(batches).cast(target)

    cogrouped = keyed.groupBy(_GROUP).cogroup(needed.groupBy(_GROUP))
    if hasattr(cogrouped, "applyInArrow"):
        return cogrouped.applyInArrow(score, schema)

    # PySpark 3.5 cogroups through pandas only. A user-defined type (Spark ML's vectors) goes
    # there and back as its storage, a dict per value, as mapInArrow hands it.
    def score_pandas(scored: Any, looked_up: Any) -> Any:
        left = pa.Table.from_pandas(scored, preserve_index=False)
        right = pa.Table.from_pandas(looked_up, preserve_index=False)
        return score(left, right).to_pandas()

    return cogrouped.applyInPandas(score_pandas, schema)


def _arrow_schema(schema: Any) -> pa.Schema:
    from sparktrain.tfrecord._types import arrow_schema_of

    return arrow_schema_of(schema)


def _rows_by_table(
    looked_up: pa.Table, tables: list[tuple[str, int, int]]
) -> tuple[pa.UInt32Array, dict[str, pa.Float32Array]]:
    """The ids of ``looked_up`` (``id``, ``table``, ``vector`` rows), distinct and ascending,
    and each table's rows of them, row after row, as ``predict_with_rows`` takes them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pc.unique(looked_up.column("id")).sort()
    given: dict[str, pa.Float32Array] = {}
    for name, _, width in tables:
        rows = looked_up.filter(pc.equal(looked_up.column("table"), name)).sort_by("id")
        if rows.num_rows != len(ids):
            raise InvalidArgumentError(
                f"table {name!r} holds {rows.num_rows} of the {len(ids)} rows a partition needs"
            )
        values = pc.list_flatten(rows.column("vector")).cast(pa.float32()).combine_chunks()
        if len(values) != len(ids) * width:
            raise InvalidArgumentError(f"table {name!r} has rows of another width than {width}")
        given[name] = values
    return ids.cast(pa.uint32()), given


__all__ = [
    "TABLES",
    "Engine",
    "Finish",
    "predict",
    "predict_by_lookup",
    "score_batch",
]
