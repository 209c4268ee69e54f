"""The ``tfrecord`` Spark data source, on PySpark's Python data source API.

In every classic session (PySpark finds it through :mod:`pyspark_sparktrain`, and
``sparktrain.tfrecord``, the name no other library claims, through
:mod:`pyspark_sparktrain_tfrecord`; :func:`register` does it by hand, for Spark Connect)::

    df = spark.read.format("tfrecord").load("hdfs://nn:9000/data/train")
    df.write.format("tfrecord").mode("overwrite").option("compression", "gzip").save(path)

Options (case-insensitive):

- ``recordType``: ``Example`` (default), ``SequenceExample`` or ``ByteArray``;
- ``compression``: ``none``, ``gzip`` or ``zlib``; when reading, the default is each file's
  extension, else its first bytes;
- ``skipCorrupt`` (read): ``true`` steps over damaged records, logging each file's count in the
  executor log; by default a damaged record fails the read naming the file and byte offset;
- one input partition per file;
- ``batchSize`` (read): rows per Arrow batch handed to Spark (32768 by default).

Spark writes Python data sources in ``append`` and ``overwrite`` mode only;
:func:`sparktrain.tfrecord.write` has all four modes.

The schema is the one given to ``spark.read.schema(...)``, or one inferred from a sample spread
over all files plus the ``col=value/`` partition columns of the folders. Only the schema's
columns are decoded: a narrower schema reads faster. The type table is in
:mod:`sparktrain.spark_types`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StructField, StructType

from sparktrain import _native, fs, partitioning, storage_options
from sparktrain.errors import InvalidArgumentError, PathNotFoundError
from sparktrain.output import WriteJob, compression_of, write_task
from sparktrain.spark_types import (
    BYTE_ARRAY_COLUMN,
    arrow_schema_of,
    check_writable,
    record_type_of,
    spark_schema_of,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger("sparktrain.tfrecord")

DEFAULT_BATCH_SIZE = 32768


class _Options:
    """The data source's options, parsed once."""

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
        #: in each worker process before it touches storage: Spark runs the source's methods
        #: in several processes, on copies unpickled without ``__init__``.
        self.storage = storage_options.from_options(options)


@dataclass(frozen=True)
class _InputFiles:
    """The input files, and the partition values their folders hold."""

    urls: list[str]
    partition_schema: pa.Schema
    partition_values: list[dict[str, str | None]]

    @classmethod
    def list(cls, path: str) -> _InputFiles:
        files = fs.expand_inputs(path)
        if not files:
            raise PathNotFoundError(f"no TFRecord files under {path}", path=path)
        base = partitioning.dataset_root(path)
        relative = [f.path[len(base) + 1 :] if f.path.startswith(base + "/") else "" for f in files]
        schema, values = partitioning.discover(relative)
        return cls([f.path for f in files], schema, values)


@dataclass
class InputFile(InputPartition):
    """One input partition: a file, and the partition values of its folders."""

    url: str
    partition_values: dict[str, str | None]


class TFRecordReader(DataSourceReader):
    """Reads the input partitions in Spark tasks, through the Rust decoder."""

    def __init__(self, options: _Options, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        storage_options.apply(self.options.storage)
        files = _InputFiles.list(self.options.path)
        return [
            InputFile(url, values) for url, values in zip(files.urls, files.partition_values, strict=True)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, InputFile)
        storage_options.apply(self.options.storage)
        names = self.schema.fieldNames()
        partition_columns = [n for n in names if n in partition.partition_values]
        data_fields = [f for f in self.schema.fields if f.name not in partition.partition_values]
        arrow = arrow_schema_of(self.schema)
        data_schema = arrow_schema_of(StructType(data_fields))
        reader = _native.ExampleReader(
            partition.url,
            schema=data_schema,
            batch_size=self.options.batch_size,
            compression=self.options.compression,
            skip_corrupt=self.options.skip_corrupt,
            record_type=self.options.record_type,
        )
        while (batch := reader.next_batch()) is not None:
            if partition_columns:
                columns = {name: batch.column(name) for name in batch.schema.names}
                for name in partition_columns:
                    columns[name] = partitioning.constant_column(
                        partition.partition_values[name], arrow.field(name).type, batch.num_rows
                    )
                batch = pa.RecordBatch.from_arrays([columns[n] for n in names], schema=arrow)
            yield batch
        skipped = reader.skipped()
        if skipped:
            _log.warning(
                "skipped %d corrupt regions (%d bytes) in %s: %s",
                len(skipped),
                sum(s.bytes for s in skipped),
                partition.url,
                ", ".join(f"{s.kind} at offset {s.offset}" for s in skipped[:10]),
            )


@dataclass
class TaskCommitted(WriterCommitMessage):
    """A write task's report to the driver."""

    task: int
    rows: int


class TFRecordWriter(DataSourceArrowWriter):
    """Writes each task's Arrow batches with the Rust writer; commits like :func:`write`."""

    def __init__(self, job: WriteJob, overwrite: bool) -> None:
        self.job = job
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskCommitted:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        result = write_task(self.job, iterator, context.partitionId(), context.attemptNumber())
        return TaskCommitted(result.task, result.rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        storage_options.apply(dict(self.job.storage))
        tasks = [m.task for m in messages if isinstance(m, TaskCommitted)]
        if len(tasks) != len(messages):
            raise RuntimeError(f"{len(messages) - len(tasks)} write tasks to {self.job.root} sent no result")
        files = self.job.commit(tasks, overwrite=self.overwrite)
        rows = sum(m.rows for m in messages if isinstance(m, TaskCommitted))
        _log.info("wrote %d rows in %d files to %s", rows, len(files), self.job.root)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        storage_options.apply(dict(self.job.storage))
        self.job.abort()


class TFRecordDataSource(DataSource):
    """``spark.read.format("tfrecord")`` and ``df.write.format("tfrecord")``."""

    @classmethod
    def name(cls) -> str:
        return "tfrecord"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = _Options(dict(options))

    def schema(self) -> StructType:
        o = self.parsed
        storage_options.apply(o.storage)
        files = _InputFiles.list(o.path)
        if o.record_type == "ByteArray":
            data = StructType([StructField(BYTE_ARRAY_COLUMN, BinaryType(), nullable=False)])
        else:
            inferred = _native.infer_example_schema(
                o.path, o.compression, skip_corrupt=o.skip_corrupt, record_type=o.record_type
            )
            data = spark_schema_of(inferred)
        partition_fields = spark_schema_of(files.partition_schema).fields
        taken = {f.name for f in partition_fields}
        return StructType([f for f in data.fields if f.name not in taken] + partition_fields)

    def reader(self, schema: StructType) -> DataSourceReader:
        return TFRecordReader(self.parsed, schema)

    def writer(self, schema: StructType, overwrite: bool) -> TFRecordWriter:
        o = self.parsed
        check_writable(schema, o.record_type)
        job = WriteJob(
            o.path.rstrip("/"), o.record_type, o.compression, storage=tuple(sorted(o.storage.items()))
        )
        return TFRecordWriter(job, overwrite)


class SparktrainTFRecordDataSource(TFRecordDataSource):
    """The same source under the name no other library claims: ``format("sparktrain.tfrecord")``."""

    @classmethod
    def name(cls) -> str:
        return OWN_FORMAT


class PythonTFRecordDataSource(TFRecordDataSource):
    """This module's source under a name the jar does not answer to, for choosing the Python
    implementation in a session that has the jar (``read_dataframe(engine="python")``)."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_FORMAT


#: The format name that is always sparktrain's: the jar's file format when the session has the
#: jar, else this module's source. ``tfrecord`` may belong to another library's jar.
OWN_FORMAT = "sparktrain.tfrecord"

#: The name of this module's source alone, registered by :func:`register`.
PYTHON_FORMAT = "sparktrain.tfrecord.python"

#: The class that makes ``format("sparktrain.tfrecord")`` resolve to the jar's file format.
JVM_FORMAT_CLASS = "sparktrain.tfrecord.DefaultSource"


def has_jvm_format(spark: SparkSession) -> bool:
    """Whether ``spark``'s driver JVM has sparktrain's TFRecord file format (the jar is on
    ``spark.jars``). False for Spark Connect sessions, which have no JVM in this process."""
    context = getattr(spark, "sparkContext", None)
    jvm = getattr(context, "_jvm", None) if context is not None else None
    if jvm is None:
        return False
    from py4j.protocol import Py4JError

    try:
        # Spark's own lookup loads data sources through the thread's context class loader,
        # which is where spark.jars lands.
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(JVM_FORMAT_CLASS, False, loader)
    except Py4JError:
        return False
    return True


def register(spark: SparkSession) -> str:
    """Makes ``format("sparktrain.tfrecord")`` resolve in ``spark``, and ``format("tfrecord")``
    unless another library's JVM source holds that name; returns ``"sparktrain.tfrecord"``.
    Also registers ``"sparktrain.tfrecord.python"``, the Python implementation alone.

    Needed only for Spark Connect and for sessions whose executors' Python lacks sparktrain: in
    classic sessions PySpark finds ``format("tfrecord")`` by itself (:mod:`pyspark_sparktrain`),
    and the jar, when loaded, provides both names."""
    from pyspark.errors import AnalysisException

    sources: tuple[type[TFRecordDataSource], ...] = (PythonTFRecordDataSource,)
    if not has_jvm_format(spark):
        sources += (SparktrainTFRecordDataSource, TFRecordDataSource)
    with _active(spark):
        for source in sources:
            if _python_source_exists(spark, source.name()):
                continue  # registering again works but logs a warning on every call
            try:
                spark.dataSource.register(source)
            except AnalysisException as e:
                if e.getCondition() != "DATA_SOURCE_ALREADY_EXISTS" or source is not TFRecordDataSource:
                    raise
                _log.info("format('tfrecord') is another library's in this session; use %r", OWN_FORMAT)
    return OWN_FORMAT


@contextlib.contextmanager
def _active(spark: SparkSession) -> Iterator[None]:
    """Makes ``spark`` the JVM's active session of this thread for the block, then restores the
    one before.

    Spark refuses to register a Python source under a name that already resolves, and asks the
    *active* session, not the one registering: a name registered in another session that
    happens to be active would make registering it in ``spark`` fail."""
    jsession = getattr(spark, "_jsparkSession", None)
    jvm = getattr(spark, "_jvm", None)
    if jsession is None or jvm is None:
        yield  # Spark Connect: registration happens on the server, in the right session
        return
    from py4j.java_gateway import JavaClass

    # The class PySpark itself sets the active session through: the classic one from Spark 4.
    sessions = getattr(jvm, "org.apache.spark.sql.classic.SparkSession")
    if not isinstance(sessions, JavaClass):
        sessions = jvm.org.apache.spark.sql.SparkSession
    before = sessions.getActiveSession()
    sessions.setActiveSession(jsession)
    try:
        yield
    finally:
        if before.isDefined():
            sessions.setActiveSession(before.get())
        else:
            sessions.clearActiveSession()


def _python_source_exists(spark: SparkSession, name: str) -> bool:
    """Whether a Python data source named ``name`` is registered in ``spark`` (statically or by
    hand); False where this process cannot ask (Spark Connect)."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return False
    return bool(jsession.sessionState().dataSourceManager().dataSourceExists(name))
