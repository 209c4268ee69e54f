"""Spark DataFrames and RDDs to TFRecord datasets, and back.

Writing runs as Spark tasks, in one of two ways that give the same records. Where the session
has sparktrain's jar (``spark.jars``; ``sparktrain submit`` adds it), the jar's file format
encodes Spark's rows in the executors' JVMs, and the files it writes are published by the same
commit as the other way's. Otherwise ``mapInArrow`` hands each task its Arrow batches, and the
Rust writer streams them straight to the output URL (``hdfs://``, ``s3://``, ``file://``, a bare
path).
Either way no row reaches the driver. Reading goes through the format name
``sparktrain.tfrecord``: the jar's format, else the Python data source
(:mod:`sparktrain.datasource`); PySpark 3.5 has no Python data source API, so there the Python
way reads with ``mapInArrow``, one task per file (:mod:`sparktrain.inputs`).
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from sparktrain import _checks, fs, storage_options
from sparktrain._deps import require_spark
from sparktrain.errors import InvalidArgumentError, PathExistsError
from sparktrain.output import (
    RESULT_SCHEMA,
    WriteJob,
    binary_batches,
    compression_of,
    result_batch,
    write_task,
)
from sparktrain.spark_types import check_writable, record_type_of

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

_log = logging.getLogger(__name__)

MODES = ("errorifexists", "overwrite", "append", "ignore")
#: Which implementation ``write`` and ``read_dataframe`` use: the jar's when the session has it
#: (``auto``), or the one named.
ENGINES = ("auto", "jvm", "python")
#: The session's default for ``engine="auto"`` (``spark.conf.set(ENGINE_CONF, "python")``).
ENGINE_CONF = "spark.sparktrain.tfrecord.engine"


def _engine_of(engine: object, spark: SparkSession, path: str) -> str:
    """``"jvm"`` or ``"python"``: the implementation ``engine`` asks for in ``spark``; ``auto``
    takes the session's :data:`ENGINE_CONF`, else the jar's where the session has it and its
    Hadoop can reach ``path`` (an ``s3://`` URL needs Hadoop's S3 connector in the session,
    which sparktrain's own client does not)."""
    from sparktrain.jvm import has_jvm_format

    name = _checks.text("engine", engine).lower()
    if name == "auto":
        configured = spark.conf.get(ENGINE_CONF, "auto")
        name = (configured or "auto").lower()
        if name not in ENGINES:
            raise _checks.refuse(ENGINE_CONF, configured, f"must be one of {', '.join(ENGINES)}")
    if name not in ENGINES:
        raise _checks.refuse("engine", engine, f"must be one of {', '.join(ENGINES)}")
    if name == "python":
        return name
    if not has_jvm_format(spark):
        if name == "jvm":
            raise InvalidArgumentError(
                "engine='jvm' needs sparktrain's jar in the session: "
                "SparkSession.builder.config('spark.jars', sparktrain.jar_path())"
            )
        return "python"
    if name == "auto" and not _hadoop_reaches(spark, path):
        return "python"
    return "jvm"


def _hadoop_reaches(spark: SparkSession, path: str) -> bool:
    """Whether the session's Hadoop has a file system for ``path``'s scheme (bare paths and the
    schemes Hadoop always has are taken as reachable without asking)."""
    scheme = path.split("://", 1)[0].lower() if "://" in path else ""
    if scheme in ("", "file", "hdfs", "viewfs"):
        return True
    from py4j.protocol import Py4JError

    context = spark.sparkContext
    jvm, jsc = context._jvm, context._jsc
    if jvm is None or jsc is None:
        return False
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, jsc.hadoopConfiguration())
    except Py4JError:
        return False
    return True


@dataclass(frozen=True)
class WriteResult:
    """What :func:`write` did: the output folder, the files it published (none when
    ``mode="ignore"`` found the folder), and the rows written."""

    path: str
    files: list[str]
    rows: int


def _mode_of(mode: str) -> str:
    normalized = mode.lower().replace("_", "")
    if normalized in ("error", "errorifexists", "default"):
        return "errorifexists"
    if normalized in MODES:
        return normalized
    raise InvalidArgumentError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")


def _task_identity() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("sparktrain's writer must run inside a Spark task")
    return context.partitionId(), context.attemptNumber()


def _arrow_task(job: WriteJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task, attempt = _task_identity()
        yield result_batch(write_task(job, batches, task, attempt))

    return run


def _bytes_task(job: WriteJob) -> Callable[[Iterable[bytes]], Iterable[tuple[int, int, int, int, bool]]]:
    def run(records: Iterable[bytes]) -> Iterator[tuple[int, int, int, int, bool]]:
        task, attempt = _task_identity()
        r = write_task(job, binary_batches(records), task, attempt)
        yield (r.task, r.attempt, r.rows, r.files, r.committed)

    return run


def _session_of(data: object) -> SparkSession:
    """The session of a DataFrame, or the active one for an RDD."""
    from pyspark.sql import DataFrame, SparkSession

    if isinstance(data, DataFrame):
        return data.sparkSession
    return SparkSession.builder.getOrCreate()


def _is_rdd(data: object) -> bool:
    from pyspark import RDD

    return isinstance(data, RDD)


def _partition_columns(partition_by: object) -> tuple[str, ...]:
    """``partition_by`` (a column, or a sequence of them) as a tuple of column names."""
    if partition_by is None:
        return ()
    if isinstance(partition_by, str):
        return (partition_by,)
    if isinstance(partition_by, Sequence) and all(isinstance(c, str) for c in partition_by):
        return tuple(partition_by)
    raise _checks.refuse("partition_by", partition_by, "must be a column name or a sequence of them")


def _check_data(data: object) -> None:
    from pyspark import RDD
    from pyspark.sql import DataFrame

    _checks.instance("data", data, (DataFrame, RDD), "a DataFrame or an RDD")


def write(
    data: DataFrame | RDD[Any],
    path: str,
    mode: str = "errorifexists",
    compression: str | None = None,
    record_type: str = "Example",
    partition_by: str | Sequence[str] | None = None,
    num_files: int | None = None,
    engine: str = "auto",
) -> WriteResult:
    """Writes a DataFrame (or an RDD) as a folder of TFRecord files, from Spark tasks.

    ``path`` is a folder URL: ``hdfs://nn:port/...``, ``s3://bucket/...`` (or ``gs://``,
    ``abfs://``), ``file:///...`` or a local path seen by every executor. ``mode`` is
    ``errorifexists`` (the default: an existing ``path`` raises :class:`PathExistsError`),
    ``overwrite`` (the old content is replaced when the job commits,
    so a failed job keeps it), ``append`` or ``ignore`` (do nothing if ``path`` exists).
    ``compression`` is ``None``, ``"GZIP"`` or ``"ZLIB"``. ``record_type`` is ``"Example"``,
    ``"SequenceExample"`` (array-of-array columns become feature lists, the others context
    features) or ``"ByteArray"`` (one binary column, each value one raw record); the type table
    is in :mod:`sparktrain.spark_types`. ``partition_by`` writes ``col=value/`` sub-folders, the
    columns leaving the records. ``num_files`` repartitions to that many tasks (one file each,
    per partition folder) first; otherwise each input partition writes one file.

    ``data`` may also be an RDD: of ``Row``s or dicts (converted through a DataFrame), or of
    serialized records (``bytes``, e.g. ``tf.train.Example.SerializeToString()``), which are
    written as they are.

    ``engine`` is ``"auto"`` (the jar's format where the session has the jar, else the Python
    writer), ``"jvm"`` or ``"python"``; both write the same records, and both publish only when
    every task succeeded, so a failed job leaves no file and, with ``overwrite``, the old ones.

    The files are ``part-<task>-<job id>.tfrecord[.gz]`` (the Python writer) or Spark's
    ``part-<task>-<uuid>-c000.tfrecord[.gz]`` (the jar's); ``_SUCCESS`` is written after every
    task succeeded. Returns the files written and the row count.
    """
    require_spark("sparktrain.tfrecord.write")
    path = _checks.text("path", path)
    mode = _mode_of(_checks.text("mode", mode))
    record_type = record_type_of(_checks.optional_text("record_type", record_type))
    if compression is not None:
        _checks.instance("compression", compression, str, "None, 'GZIP' or 'ZLIB'")
    columns = _partition_columns(partition_by)
    num_files = _checks.optional_integer("num_files", num_files, minimum=1)
    _check_data(data)
    spark = _session_of(data)
    storage = tuple(sorted(storage_options.of_session(spark).items()))
    job = WriteJob(path.rstrip("/") or path, record_type, compression, columns, storage=storage)

    if fs.exists(path):
        if mode == "errorifexists":
            raise PathExistsError(f"{path} already exists (use mode='overwrite' or 'append')", path=path)
        if mode == "ignore":
            _log.info("%s exists; mode='ignore' writes nothing", path)
            return WriteResult(path, [], 0)
        if not fs.status(path).is_dir:
            raise PathExistsError(f"{path} is a file, not a folder", path=path)

    if _is_rdd(data):
        records = cast("RDD[Any]", data)
        sample = records.take(1)
        if sample and isinstance(sample[0], bytes | bytearray):
            if columns:
                raise InvalidArgumentError("partition_by needs columns; an RDD of bytes has none")
            rdd = records.repartition(num_files) if num_files else records
            raw = WriteJob(job.root, "ByteArray", job.compression, (), job.job_id, storage)
            written = rdd.mapPartitions(_bytes_task(raw))
            return _run(raw, mode, written.collect, path, rdd.context)
        data = spark.createDataFrame(records)

    df = cast("DataFrame", data)
    if _engine_of(engine, df.sparkSession, path) == "jvm":
        check_writable(df.schema, record_type, columns)
        return _write_jvm(df, job, mode, num_files)
    # Only the Python writer runs through mapInArrow, which needs pandas.
    require_spark("sparktrain.tfrecord.write", arrow_udfs=True)
    check_writable(df.schema, record_type, columns)
    if num_files:
        df = df.repartition(num_files)
    if columns:
        df = df.sortWithinPartitions(*columns)
    tasks = df.mapInArrow(_arrow_task(job), RESULT_SCHEMA)
    return _run(job, mode, tasks.collect, path, df.sparkSession.sparkContext)


def _write_jvm(df: DataFrame, job: WriteJob, mode: str, num_files: int | None) -> WriteResult:
    """Writes ``df`` with the jar's file format into a private folder of ``job``'s staging
    area, as the output of one task, then publishes it with the same job commit as the Python
    writer: the root sees the files only when the whole write succeeded."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from sparktrain.jvm import OWN_FORMAT

    observation = Observation(f"sparktrain-write-{job.job_id}")
    df = df.observe(observation, F.count(F.lit(1)).alias("rows"))
    if num_files:
        df = df.repartition(num_files)
    writer = (
        df.write.format(OWN_FORMAT)
        .mode("overwrite")  # of the private folder alone
        .option("recordType", job.record_type)
        # The job commit below writes the root's _SUCCESS; a second one would collide with it.
        .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
    )
    if job.compression:
        writer = writer.option("compression", job.compression)
    if job.partition_by:
        writer = writer.partitionBy(*job.partition_by)
    native = job.native()
    sc = df.sparkSession.sparkContext
    group = f"sparktrain-write-{job.job_id}"
    try:
        with _job_group(sc, group, job.root):
            writer.save(native.setup_task(0, 0))
        native.commit_task(0, 0)
        files = job.commit([0], overwrite=mode == "overwrite")
    except BaseException:
        _settle(sc, group)
        job.abort()
        raise
    # Hadoop's local file system writes a hidden checksum file beside each file, which the
    # Python writer does not; dropping them makes the two writers' folders alike.
    checksums = [f for f in files if posixpath.basename(f).startswith(".") and f.endswith(".crc")]
    for checksum in checksums:
        fs.delete(checksum)
    files = [f for f in files if f not in set(checksums)]
    rows = int(observation.get["rows"])
    _log.info("wrote %d rows in %d files to %s (JVM)", rows, len(files), job.root)
    return WriteResult(job.root, files, rows)


#: Spark's thread-local properties that a job group sets, restored after the write.
_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


@contextlib.contextmanager
def _job_group(sc: Any, group: str, path: str) -> Iterator[None]:
    """Runs the block's Spark jobs in job group ``group`` (which :func:`_settle` can cancel),
    then restores the thread's previous group."""
    previous = {key: sc.getLocalProperty(key) for key in _GROUP_PROPERTIES}
    sc.setJobGroup(group, f"sparktrain: write {path}", interruptOnCancel=True)
    try:
        yield
    finally:
        for key, value in previous.items():
            sc.setLocalProperty(key, value)


def _settle(sc: Any, group: str, patience: float = 30.0) -> None:
    """Cancels what is left of the job group and waits until none of its tasks runs: when a
    job fails, Spark reports it at once while other tasks may still be writing."""
    sc.cancelJobGroup(group)
    tracker = sc.statusTracker()
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        stages = [
            stage
            for job_id in tracker.getJobIdsForGroup(group)
            if (info := tracker.getJobInfo(job_id)) is not None
            for stage in info.stageIds
        ]
        active = sum(s.numActiveTasks for sid in stages if (s := tracker.getStageInfo(sid)) is not None)
        if active == 0:
            return
        time.sleep(0.1)
    _log.warning("tasks of job group %s still run after %.0f s; cleaning up anyway", group, patience)


def _run(job: WriteJob, mode: str, tasks: Any, path: str, sc: Any) -> WriteResult:
    """Runs the tasks in a job group of their own, then commits the job; on any failure, waits
    for the group's remaining tasks to stop and aborts the job."""
    group = f"sparktrain-write-{job.job_id}"
    try:
        with _job_group(sc, group, path):
            results = tasks()
        expected = max((r[0] for r in results), default=-1) + 1
        seen = {r[0] for r in results}
        if seen != set(range(expected)):
            missing = sorted(set(range(expected)) - seen)
            raise RuntimeError(f"tasks {missing} of the write to {path} reported no result")
        files = job.commit(seen, overwrite=mode == "overwrite")
    except BaseException:
        _settle(sc, group)
        job.abort()
        # A killed task's Python worker can outlive its task by Spark's kill time-out (2 s)
        # and recreate its attempt folder: clean up once more after that.
        time.sleep(2.5)
        job.abort()
        raise
    rows = sum(r[2] for r in results)
    _log.info("wrote %d rows in %d files to %s", rows, len(files), path)
    return WriteResult(path, files, rows)


def read_dataframe(
    spark: SparkSession,
    path: str,
    schema: StructType | str | None = None,
    *,
    record_type: str = "Example",
    compression: str | None = None,
    skip_corrupt: bool = False,
    engine: str = "auto",
) -> DataFrame:
    """Reads a TFRecord folder, file or glob as a DataFrame, through the ``tfrecord`` data
    source (``spark.read.format("tfrecord")``). Without ``schema`` one is inferred from a sample
    spread over all files, plus the ``col=value/`` partition columns of the folders. Only the
    schema's columns are decoded: give a schema with fewer columns to read less. ``engine`` is
    ``"auto"`` (the jar's format where the session has the jar, else the Python source),
    ``"jvm"`` or ``"python"``. On PySpark 3.5, which has no Python data source API, the Python
    engine reads the same rows through ``mapInArrow``, one task per file."""
    require_spark("sparktrain.tfrecord.read_dataframe")
    from sparktrain._deps import has_python_data_sources
    from sparktrain.jvm import OWN_FORMAT, PYTHON_FORMAT

    if not hasattr(spark, "read"):
        raise _checks.refuse("spark", spark, "must be a SparkSession")
    path = _checks.text("path", path)
    record_type = record_type_of(_checks.optional_text("record_type", record_type))
    if compression is not None:
        compression_of(_checks.instance("compression", compression, str, "None, 'GZIP' or 'ZLIB'"))
    storage = storage_options.of_session(spark)
    if has_python_data_sources():
        from sparktrain.datasource import register

        own = register(spark)
        python = _engine_of(engine, spark, path) == "python"
    else:
        # PySpark 3.5: the jar answers to its format name by itself, and nothing can register
        # the Python source.
        own = OWN_FORMAT
        if _engine_of(engine, spark, path) == "python":
            options = {"path": path, "recordType": record_type, **storage}
            if compression:
                options["compression"] = compression
            if skip_corrupt:
                options["skipCorrupt"] = "true"
            return _read_arrow(spark, schema, options)
        python = False
    # The session's object-store keys travel as options, as Hadoop settings do with Spark's
    # own file sources: the Python source's workers have no other way to see them.
    reader = spark.read.format(PYTHON_FORMAT if python else own).options(**storage)
    reader = reader.option("recordType", record_type)
    if compression:
        reader = reader.option("compression", compression)
    if skip_corrupt:
        reader = reader.option("skipCorrupt", "true")
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(path)


def _read_arrow(spark: SparkSession, schema: StructType | str | None, options: dict[str, str]) -> DataFrame:
    """``read_dataframe``'s Python engine without the Python data source API (PySpark 3.5): the
    driver lists the files and finds the schema as the data source does, then a range of file
    indices, one per partition, goes through ``mapInArrow`` and each task decodes its file with
    the same code as the data source's reader. The same options, rows and errors."""
    from sparktrain.inputs import InputFiles, ReadOptions, dataset_schema, read_file

    require_spark("sparktrain.tfrecord.read_dataframe", arrow_udfs=True)  # mapInArrow needs pandas
    parsed = ReadOptions(options)
    files = InputFiles.list(parsed)
    if schema is None:
        struct = dataset_schema(parsed, files)
    elif isinstance(schema, str):
        struct = spark.createDataFrame([], schema).schema  # a DDL string, parsed by Spark itself
    else:
        struct = schema
    urls, values = files.urls, files.partition_values

    def read(indices: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in indices:
            for index in batch.column(0).to_pylist():
                yield from read_file(urls[index], values[index], struct, parsed)

    # spark.range with one partition per element: task i reads file i.
    return spark.range(0, len(urls), 1, len(urls)).mapInArrow(read, struct)
