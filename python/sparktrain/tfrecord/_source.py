"""The ``tfrecord`` Spark data source, on PySpark's Python data source API (PySpark 4.0 and
later; PySpark 3.5 has no such API, and this module does not import there: there
:func:`sparktrain.tfrecord.read_dataframe` reads through ``mapInArrow``, see
:mod:`sparktrain.tfrecord._inputs`, and ``format("tfrecord")`` needs sparktrain's jar). Runs on the
driver and in Spark tasks.

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
:mod:`sparktrain.tfrecord._types`.
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
from pyspark.sql.types import StructType

from sparktrain import fs
from sparktrain.jvm import OWN_FORMAT, PYTHON_FORMAT, has_jvm_format
from sparktrain.tfrecord._inputs import InputFiles, ReadOptions, dataset_schema, read_file
from sparktrain.tfrecord._output import WriteJob, write_task
from sparktrain.tfrecord._types import check_writable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger("sparktrain.tfrecord")


@dataclass
class InputFile(InputPartition):
    """One input partition: a file, and the partition values of its folders."""

    url: str
    partition_values: dict[str, str | None]


class TFRecordReader(DataSourceReader):
    """Reads the input partitions in Spark tasks, through the Rust decoder."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        # The schema is the caller's, or was inferred from files that exist.
        files = InputFiles.list(self.options, empty_ok=True)
        return [
            InputFile(url, values) for url, values in zip(files.urls, files.partition_values, strict=True)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, InputFile):
            # Spark reads a source without partitions in one task of its own: here, a folder
            # without files read with a schema, which has no rows.
            return
        yield from read_file(partition.url, partition.partition_values, self.schema, self.options)


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
        tasks = [m.task for m in messages if isinstance(m, TaskCommitted)]
        if len(tasks) != len(messages):
            raise RuntimeError(f"{len(messages) - len(tasks)} write tasks to {self.job.root} sent no result")
        fs.configure(dict(self.job.storage))
        files = self.job.commit(tasks, overwrite=self.overwrite)
        rows = sum(m.rows for m in messages if isinstance(m, TaskCommitted))
        _log.info("wrote %d rows in %d files to %s", rows, len(files), self.job.root)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        fs.configure(dict(self.job.storage))
        self.job.abort()


class TFRecordDataSource(DataSource):
    """``spark.read.format("tfrecord")`` and ``df.write.format("tfrecord")``."""

    @classmethod
    def name(cls) -> str:
        return "tfrecord"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = ReadOptions(dict(options))

    def schema(self) -> StructType:
        return dataset_schema(self.parsed, InputFiles.list(self.parsed))

    def reader(self, schema: StructType) -> DataSourceReader:
        return TFRecordReader(self.parsed, schema)

    def writer(self, schema: StructType, overwrite: bool) -> TFRecordWriter:
        o = self.parsed
        check_writable(schema, o.record_type)
        storage = tuple(sorted(o.storage.items()))
        job = WriteJob(o.path.rstrip("/"), o.record_type, o.compression, storage=storage)
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
