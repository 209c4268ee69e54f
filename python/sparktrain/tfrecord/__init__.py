"""TFRecord files to and from Arrow and Spark DataFrames, on local paths and HDFS. Its Spark
functions run on the driver; the Arrow readers and writers anywhere.

Spark: :func:`write` writes a DataFrame or RDD from Spark tasks; :func:`read_dataframe` and
``spark.read.format("tfrecord")`` read one (every session finds the format by itself;
:func:`register` adds it to a Spark Connect session). The Spark type table is in
:mod:`sparktrain.tfrecord._types`.

All work (framing, CRC-32C, compression, ``tf.train.Example`` encoding and decoding, file I/O)
happens in Rust with the GIL released; Python only hands over Arrow batches.

Arrow types are written as features like this: bool and integers become ``int64_list``;
float16/32/64 become ``float_list`` (float64 is rounded to float32, as TensorFlow stores it);
strings and binary become ``bytes_list``; lists of those become multi-valued features. A null
omits the feature unless ``defaults`` gives a value for the column.

Reading infers the schema from a sample spread over all files unless one is given: a feature is
a list when any sampled record has a number of values other than one, and kinds widen along
int64 → float → bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from sparktrain import _checks, _native
from sparktrain._deps import require_spark
from sparktrain._native import SkippedRecord
from sparktrain.tfrecord._dataframes import WriteResult, read_dataframe, write

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger(__name__)

#: What the batch writers take.
Batches: TypeAlias = "pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch]"


def _batches(data: Batches) -> Iterator[pa.RecordBatch]:
    if isinstance(data, pa.RecordBatch):
        yield data
    elif isinstance(data, pa.Table):
        yield from data.to_batches()
    else:
        yield from data


def write_batches(
    path: str,
    data: Batches,
    compression: str | None = None,
    *,
    overwrite: bool = False,
    defaults: Mapping[str, Any] | None = None,
) -> int:
    """Writes Arrow data to the TFRecord file ``path`` as ``tf.train.Example`` records.

    ``data`` is a ``pyarrow.Table``, a ``RecordBatch``, a ``RecordBatchReader`` or any iterable
    of batches of one schema. ``compression`` is ``"GZIP"``, ``"ZLIB"`` or ``None`` (then the
    file name decides: ``.gz`` is GZIP, ``.zlib`` is ZLIB, else none). The file appears under
    its name only when everything was written; on error nothing does. Returns the number of
    records written.

    >>> import pyarrow as pa
    >>> table = pa.table({"label": [0, 1], "x": [0.5, 1.5], "word": ["a", "b"]})
    >>> st.tfrecord.write_batches(f"{tmp}/train/part-0.tfrecord.gz", table)
    2
    >>> st.tfrecord.read(f"{tmp}/train").read_all().to_pydict()
    {'label': [0, 1], 'word': ['a', 'b'], 'x': [0.5, 1.5]}
    """
    writer = _native.ExampleWriter(path, compression, overwrite, dict(defaults) if defaults else None)
    try:
        for batch in _batches(data):
            writer.write_batch(batch)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


class ExampleBatches(Iterator[pa.RecordBatch]):
    """The batches of a dataset of ``tf.train.Example`` files.

    Iterate it for ``pyarrow.RecordBatch``es. ``schema`` is their schema, ``files`` the input
    files, and ``skipped`` lists the damaged regions stepped over when reading with
    ``skip_corrupt=True`` (path, offset, bytes, kind).
    """

    def __init__(self, reader: _native.ExampleReader) -> None:
        self._reader = reader
        self._reported = 0

    @property
    def schema(self) -> pa.Schema:
        return self._reader.schema

    @property
    def files(self) -> list[str]:
        return self._reader.files

    @property
    def skipped(self) -> list[SkippedRecord]:
        """Damaged regions stepped over so far (``path``, ``offset``, ``bytes``, ``kind``)."""
        return self._reader.skipped()

    def __iter__(self) -> ExampleBatches:
        return self

    def __next__(self) -> pa.RecordBatch:
        batch = self._reader.next_batch()
        self._log_skipped()
        if batch is None:
            raise StopIteration
        return batch

    def _log_skipped(self) -> None:
        skipped = self._reader.skipped()
        for region in skipped[self._reported :]:
            _log.warning(
                "skipped %d corrupt bytes (%s) at offset %d of %s",
                region.bytes,
                region.kind,
                region.offset,
                region.path,
            )
        self._reported = len(skipped)

    def read_all(self) -> pa.Table:
        """All remaining batches as one table."""
        return pa.Table.from_batches(list(self), schema=self.schema)


def read(
    path_or_glob: str,
    schema: pa.Schema | None = None,
    columns: list[str] | None = None,
    batch_size: int = 65536,
    compression: str | None = None,
    skip_corrupt: bool = False,
    max_record_bytes: int = _native.DEFAULT_MAX_RECORD_BYTES,
    threads: int = 1,
) -> ExampleBatches:
    """Reads ``tf.train.Example`` TFRecord files as Arrow record batches.

    ``path_or_glob`` is a file, a folder (its files, without ``_``/``.`` names such as
    ``_SUCCESS``) or a glob. Without ``schema`` one is inferred. ``columns`` keeps only those
    features, in that order. Each file's compression is ``compression`` when given, else what its
    name implies, else what its first bytes show. With ``skip_corrupt``, damaged records are
    stepped over, logged, and listed in the result's ``skipped``; otherwise they raise
    :class:`sparktrain.errors.TFRecordCorruptError` naming the file and offset. A record whose
    header claims more than ``max_record_bytes`` (256 MiB by default) is damage of kind
    ``record_too_long``, refused before it is read: a damaged or hostile file cannot make the
    reader hold gigabytes.

    ``threads`` read on that many cores: with at least as many files as threads, each thread
    reads whole files, that many at a time; otherwise each file's records are decoded on that
    many threads (the calling thread frames them). The batches, their order and the skip report
    are the same whatever the number.
    """
    threads = _checks.integer("threads", threads, minimum=1)
    batch_size = _checks.integer("batch_size", batch_size, minimum=1)
    max_record_bytes = _checks.integer("max_record_bytes", max_record_bytes, minimum=1)
    return ExampleBatches(
        _native.ExampleReader(
            path_or_glob,
            schema,
            columns,
            batch_size,
            compression,
            skip_corrupt,
            max_record_bytes=max_record_bytes,
            threads=threads,
        )
    )


def infer_schema(path_or_glob: str, compression: str | None = None, max_records: int = 10000) -> pa.Schema:
    """The Arrow schema of the ``tf.train.Example``s under ``path_or_glob``.

    Up to ``max_records`` records are read, an equal share from every file. The fields are sorted
    by feature name (an Example's features have no order), all nullable; int64 features become
    ``int64``, floats ``float32``, bytes ``string`` when every sampled value is UTF-8 and
    ``binary`` otherwise, each wrapped in ``list`` when any record holds other than one value.
    The records' own columns only: ``col=value/`` folders add theirs where the data is read
    (``read_dataframe``, :class:`sparktrain.data.Dataset`).
    """
    return _native.infer_example_schema(path_or_glob, compression, max_records)


class RecordWriter:
    """Writes raw byte records (any serialized protocol buffer) to one TFRecord file.

    The file appears under ``path`` on :meth:`close`; :meth:`abort`, or leaving a ``with`` block
    by an exception, leaves nothing there.
    """

    def __init__(self, path: str, compression: str | None = None, *, overwrite: bool = False) -> None:
        self._writer = _native.RecordWriter(path, compression, overwrite)

    def write(self, record: bytes) -> None:
        """Appends one record."""
        self._writer.write(record)

    def write_many(self, records: Iterable[bytes]) -> None:
        """Appends several records."""
        self._writer.write_many(list(records))

    def close(self) -> int:
        """Finishes and publishes the file; returns the number of records."""
        return self._writer.close()

    def abort(self) -> None:
        """Discards the file."""
        self._writer.abort()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class RecordReader(Iterator[bytes]):
    """Reads raw byte records from one TFRecord file.

    With ``skip_corrupt``, damaged records are stepped over and listed in :attr:`skipped`.
    """

    def __init__(
        self,
        path: str,
        compression: str | None = None,
        *,
        skip_corrupt: bool = False,
        max_record_bytes: int = _native.DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        self._reader = _native.RecordReader(path, compression, skip_corrupt, max_record_bytes)

    def __iter__(self) -> RecordReader:
        return self

    def __next__(self) -> bytes:
        record = self._reader.next_record()
        if record is None:
            raise StopIteration
        return record

    def read(self, n: int) -> list[bytes]:
        """Up to ``n`` next records (fewer at the end of the file)."""
        return self._reader.next_records(n)

    @property
    def skipped(self) -> list[SkippedRecord]:
        """Damaged regions stepped over so far (``path``, ``offset``, ``bytes``, ``kind``)."""
        return self._reader.skipped()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


def register(spark: SparkSession) -> str:
    """Makes ``format("sparktrain.tfrecord")`` (always sparktrain's) and ``format("tfrecord")``
    (unless another library's jar holds that name) resolve in ``spark``; returns the first.
    Classic sessions find both without it; Spark Connect sessions need it.

    On PySpark 3.5, which has no Python data source API, only sparktrain's jar provides the
    format: with the jar in the session this returns the name, without it it raises
    :class:`~sparktrain.errors.MissingDependencyError` naming :func:`read_dataframe` and
    :func:`write`, which work there."""
    require_spark("sparktrain.tfrecord.register")
    from sparktrain._deps import has_python_data_sources, require_python_data_sources
    from sparktrain.jvm import OWN_FORMAT, has_jvm_format

    if not has_python_data_sources():
        if has_jvm_format(spark):
            return OWN_FORMAT  # the jar answers to both names by itself
        require_python_data_sources(
            "format('tfrecord') without sparktrain's jar",
            instead="read with sparktrain.tfrecord.read_dataframe(spark, path) and write with "
            "sparktrain.tfrecord.write(df, path), or load the jar for format('tfrecord'): "
            "SparkSession.builder.config('spark.jars', sparktrain.jar_path())",
        )
    from sparktrain.tfrecord._source import register as register_source

    return register_source(spark)


__all__ = [
    "ExampleBatches",
    "RecordReader",
    "RecordWriter",
    "SkippedRecord",
    "WriteResult",
    "infer_schema",
    "read",
    "read_dataframe",
    "register",
    "write",
    "write_batches",
]
