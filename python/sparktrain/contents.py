"""An exported model's embedding tables as a Spark DataFrame, read in Spark tasks. Runs on the
driver and in Spark tasks.

Wide&Deep, DeepFM and DCN hash every categorical (crossed, multi-hot) column into a range of
one shared id space and keep two tables over it: ``deep/embeddings`` (``dim`` values per id) and
``wide/ids`` (the wide part's one weight per id). :func:`embeddings` gives one row per id:
the table, the column the id belongs to, the id within that column's buckets (``bucket``), the
id in the shared space (``id``, the table's row) and the row's values (``vector``).

The driver reads only ``model.json`` (and ``tables.json`` for sharded tables); each
``.safetensors`` file of the export is read by one Spark task (through sparktrain's storage
layer, so any storage URL works), which parses the safetensors header and streams the table's
rows out as Arrow batches: the weights never pass through the driver. An export holds one
weights file, or, when its tables are sharded, a file (or several) of each trainer that owned
rows: the owner ``r`` of ``n`` held ids ``r, r + n, r + 2n...``, and its files' rows are those,
in order, from its ``first`` local row (``tables.json``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sparktrain import _checks, fs, storage_options
from sparktrain._deps import require_spark
from sparktrain.errors import CheckpointError
from sparktrain.training import FeatureSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The embedding tables of the models that have them, by model kind.
TABLES: dict[str, tuple[str, ...]] = {
    "wide_deep": ("deep/embeddings", "wide/ids"),
    "deep_fm": ("deep/embeddings", "wide/ids"),
    "dcn": ("deep/embeddings", "wide/ids"),
}
#: The schema of :func:`embeddings`' DataFrame.
SCHEMA = "table string, feature string, bucket long, id long, vector array<float>"


def _ranges(spec: FeatureSpec) -> tuple[list[str], np.ndarray]:
    """The feature owning each range of the shared id space, and each range's first id
    (categorical columns first, then crossed ones, then multi-hot ones, as the engine lays
    them out)."""
    names = [name for name, _ in spec.categorical] + [f"cross({','.join(n)})" for n, _ in spec.crossed]
    names += [name for name, _, _ in spec.multi_hot]
    buckets = (
        [b for _, b in spec.categorical] + [b for _, b in spec.crossed] + [b for _, b, _ in spec.multi_hot]
    )
    return names, np.concatenate([[0], np.cumsum(buckets, dtype=np.int64)[:-1]]).astype(np.int64)


def read_tables(
    path: str,
    tables: tuple[str, ...],
    spec: FeatureSpec,
    rows_per_batch: int,
    owner: tuple[int, int, int] = (0, 0, 1),
) -> Iterator[pa.RecordBatch]:
    """The rows of ``tables`` held by the safetensors file ``path``, ``rows_per_batch`` at a
    time (in a Spark task). ``owner`` is ``(r, first, n)`` for a sharded table's file: its row
    ``k`` is id ``r + (first + k) * n``; the default reads a whole table, row ``k`` as id ``k``."""
    data = fs.read_bytes(path)
    header, size = _safetensors_header(path, data)
    names, starts = _ranges(spec)
    features = np.array(names, dtype=object)
    rank, first_row, workers = owner
    for table in tables:
        entry = header.get(table)
        if entry is None:
            continue
        if entry["dtype"] != "F32" or len(entry["shape"]) != 2:
            found = f"{entry['dtype']} {entry['shape']}"
            raise _checks.refuse("table", table, f"{path} holds it as {found}, not as a table")
        rows, dim = entry["shape"]
        begin, end = entry["data_offsets"]
        if end - begin != rows * dim * 4 or 8 + size + end > len(data):
            raise CheckpointError(
                f"{path}: table {table!r} ({rows} x {dim} floats) does not fit the file's "
                f"{len(data)} bytes at offsets {begin}..{end}: the file is damaged or cut short",
                path=path,
            )
        matrix = np.frombuffer(data, np.float32, rows * dim, 8 + size + begin).reshape(rows, dim)
        for first in range(0, rows, rows_per_batch):
            local = np.arange(first, min(rows, first + rows_per_batch), dtype=np.int64)
            ids = rank + (first_row + local) * workers
            column = np.searchsorted(starts, ids, side="right") - 1
            values = pa.array(matrix[local].reshape(-1))
            offsets = pa.array(np.arange(0, len(ids) * dim + 1, dim, dtype=np.int32))
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([table] * len(ids), pa.string()),
                    pa.array(features[column], pa.string()),
                    pa.array(ids - starts[column]),
                    pa.array(ids),
                    pa.ListArray.from_arrays(offsets, values),
                ],
                names=["table", "feature", "bucket", "id", "vector"],
            )


def _safetensors_header(path: str, data: bytes) -> tuple[dict[str, Any], int]:
    """The header of the safetensors file ``path`` (its bytes ``data``) and its length; a
    :class:`~sparktrain.errors.CheckpointError` naming the file when it is not one."""
    if len(data) < 8:
        raise CheckpointError(f"{path}: {len(data)} bytes, too short for a safetensors header", path=path)
    (size,) = struct.unpack_from("<Q", data, 0)
    if size > len(data) - 8:
        raise CheckpointError(
            f"{path}: the header claims {size} bytes, the file has {len(data) - 8} after its length: "
            "the file is damaged or cut short",
            path=path,
        )
    try:
        header = json.loads(data[8 : 8 + size])
    except ValueError as e:
        raise CheckpointError(f"{path}: the safetensors header is not JSON: {e}", path=path) from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the safetensors header is not a JSON object", path=path)
    return header, size


def _table_files(export_dir: str) -> list[tuple[str, tuple[int, int, int]]]:
    """The files holding the export's tables, each with its ``owner`` (see
    :func:`read_tables`): every ``.safetensors`` file of an export whose tables are whole,
    the owners' files that ``tables.json`` lists when they are sharded."""
    manifest = f"{export_dir}/tables.json"
    if not fs.exists(manifest):
        files = sorted(e.path for e in fs.ls(export_dir) if not e.is_dir and e.path.endswith(".safetensors"))
        return [(path, (0, 0, 1)) for path in files]
    layout = json.loads(fs.read_bytes(manifest))
    workers = int(layout["workers"])
    return [
        (f"{export_dir}/{f['file']}", (rank, int(f["first"]), workers))
        for rank, owned in enumerate(layout["owners"])
        for f in owned
    ]


def embeddings(
    spark: Any, export_dir: str, table: str | None = None, *, rows_per_batch: int = 8192
) -> DataFrame:
    """A DataFrame of ``table``, ``feature``, ``bucket``, ``id`` and ``vector`` (``array<float>``)
    with one row per id of each embedding table of the model exported to ``export_dir`` (or of
    ``table`` alone: ``"deep/embeddings"`` or ``"wide/ids"``), read in Spark tasks.

    ``feature`` names the categorical column an id belongs to (``cross(a,b)`` for a crossed
    one) and ``bucket`` the id within that column's buckets, which the column's values are
    hashed into. Models without embeddings (logistic regression, MLP) raise
    :class:`~sparktrain.errors.InvalidArgumentError`, as does an unknown ``table``."""
    require_spark("sparktrain.embeddings", arrow_udfs=True)
    export_dir = _checks.text("export_dir", export_dir).rstrip("/")
    rows_per_batch = _checks.integer("rows_per_batch", rows_per_batch, minimum=1)
    storage = storage_options.of_session(spark)
    config = json.loads(fs.read_bytes(f"{export_dir}/model.json"))
    kind = config["model"]["kind"]
    known = TABLES.get(kind, ())
    if not known:
        raise _checks.refuse("export_dir", export_dir, f"holds a {kind} model, which has no embedding tables")
    tables = known if table is None else (_checks.choice("table", table, known),)
    spec = FeatureSpec.from_json(json.dumps(config["features"]))
    files = _table_files(export_dir)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs.configure(storage)
        for batch in batches:
            for index in batch.column(0).to_pylist():
                path, owner = files[index]
                yield from read_tables(path, tables, spec, rows_per_batch, owner)

    frame: DataFrame = spark.range(0, len(files), 1, max(1, len(files))).mapInArrow(read, SCHEMA)
    return frame


__all__ = ["SCHEMA", "TABLES", "embeddings", "read_tables"]
