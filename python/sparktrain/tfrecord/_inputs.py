"""Reading one TFRecord dataset in many Spark tasks, on the Python side.

What the two Python readers share: PySpark 4's ``tfrecord`` data source
(:mod:`sparktrain.tfrecord._source`) and the ``mapInArrow`` reader that
:func:`sparktrain.tfrecord.read_dataframe` runs on PySpark 3.5, which has no Python data source
API. The driver lists the input files with their ``col=value/`` partition values and finds the
schema (:func:`dataset_schema`); each task decodes its files with the Rust reader
(:func:`read_file`). Nothing here imports ``pyspark.sql.datasource``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import BinaryType, StructField, StructType

from sparktrain import _native, fs, storage_options
from sparktrain import _partitions as partitioning
from sparktrain.errors import InvalidArgumentError, PathNotFoundError
from sparktrain.tfrecord._output import compression_of
from sparktrain.tfrecord._types import BYTE_ARRAY_COLUMN, arrow_schema_of, record_type_of, spark_schema_of

_log = logging.getLogger("sparktrain.tfrecord")

DEFAULT_BATCH_SIZE = 32768


class ReadOptions:
    """The reader's options (the data source's, case-insensitive), parsed once."""

    def __init__(self, options: dict[str, str]) -> None:
        lowered = {k.lower(): v for k, v in options.items()}
        path = lowered.get("path")
        if not path:
            raise InvalidArgumentError("the tfrecord data source needs a path: load(path) or save(path)")
        self.path: str = path
        self.record_type = record_type_of(lowered.get("recordtype"))
        self.compression = compression_of(lowered.get("compression"))
        self.skip_corrupt = lowered.get("skipcorrupt", "false").lower() == "true"
        self.batch_size = int(lowered.get("batchsize", DEFAULT_BATCH_SIZE))
        if self.batch_size < 1:
            raise InvalidArgumentError(f"batchSize must be positive, not {self.batch_size}")
        #: Object-store keys given as options (``.option("fs.s3a.endpoint", ...)``), applied
        #: in each worker process before it touches storage: Spark runs a source's methods in
        #: several processes, on copies unpickled without ``__init__``.
        self.storage = storage_options.from_options(options)


@dataclass(frozen=True)
class InputFiles:
    """The input files, and the partition values their folders hold."""

    urls: list[str]
    partition_schema: pa.Schema
    partition_values: list[dict[str, str | None]]

    @classmethod
    def list(cls, options: ReadOptions, *, empty_ok: bool = False) -> InputFiles:
        """The files under ``options.path``, found with the options' object-store keys.

        A path that names nothing raises :class:`PathNotFoundError`; so does a folder without
        files, unless ``empty_ok`` (a schema was given: the dataset is then empty, as Spark's
        file sources read it)."""
        fs.configure(options.storage)
        path = options.path
        files = fs.expand_inputs(path)
        if not files:
            if not fs.exists(path):
                raise PathNotFoundError(f"no TFRecord files under {path}: nothing is there", path=path)
            if empty_ok:
                return cls([], pa.schema([]), [])
            raise PathNotFoundError(
                f"no TFRecord files under {path}, so no schema to infer: give one to read it as empty",
                path=path,
            )
        base = partitioning.dataset_root(path)
        relative = [f.path[len(base) + 1 :] if f.path.startswith(base + "/") else "" for f in files]
        schema, values = partitioning.discover(relative)
        return cls([f.path for f in files], schema, values)


def dataset_schema(options: ReadOptions, files: InputFiles) -> StructType:
    """The Spark schema of the dataset: the records' (inferred from a sample spread over all
    files, or ``byteArray binary`` for ``ByteArray``), then the partition columns."""
    fs.configure(options.storage)
    if options.record_type == "ByteArray":
        data = StructType([StructField(BYTE_ARRAY_COLUMN, BinaryType(), nullable=False)])
    else:
        inferred = _native.infer_example_schema(
            options.path,
            options.compression,
            skip_corrupt=options.skip_corrupt,
            record_type=options.record_type,
        )
        data = spark_schema_of(inferred)
    partition_fields = spark_schema_of(files.partition_schema).fields
    taken = {f.name for f in partition_fields}
    return StructType([f for f in data.fields if f.name not in taken] + partition_fields)


def read_file(
    url: str, partition_values: dict[str, str | None], schema: StructType, options: ReadOptions
) -> Iterator[pa.RecordBatch]:
    """The rows of one file as Arrow batches of ``schema`` (Spark's Arrow types): the record
    columns decoded by the Rust reader, the partition columns filled from ``partition_values``.
    Damaged regions skipped with ``skipCorrupt`` are logged once per file."""
    fs.configure(options.storage)
    names = schema.fieldNames()
    partition_columns = [n for n in names if n in partition_values]
    data_fields = [f for f in schema.fields if f.name not in partition_values]
    arrow = arrow_schema_of(schema)
    data_schema = arrow_schema_of(StructType(data_fields))
    reader = _native.ExampleReader(
        url,
        schema=data_schema,
        batch_size=options.batch_size,
        compression=options.compression,
        skip_corrupt=options.skip_corrupt,
        record_type=options.record_type,
    )
    while (batch := reader.next_batch()) is not None:
        if partition_columns:
            columns = {name: batch.column(name) for name in batch.schema.names}
            for name in partition_columns:
                columns[name] = partitioning.constant_column(
                    partition_values[name], arrow.field(name).type, batch.num_rows
                )
            batch = pa.RecordBatch.from_arrays([columns[n] for n in names], schema=arrow)
        yield batch
    skipped = reader.skipped()
    if skipped:
        _log.warning(
            "skipped %d corrupt regions (%d bytes) in %s: %s",
            len(skipped),
            sum(s.bytes for s in skipped),
            url,
            ", ".join(f"{s.kind} at offset {s.offset}" for s in skipped[:10]),
        )
