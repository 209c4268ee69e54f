"""Spark DataFrames and RDDs to TFRecord datasets, and back. Runs on the driver; the functions it
hands ``mapInArrow`` run in Spark tasks.

Writing runs as Spark tasks, in one of two ways that give the same records. Where the session
has sparktrain's jar (``spark.jars``; ``sparktrain submit`` adds it), the jar's file format
encodes Spark's rows in the executors' JVMs, and the files it writes are published by the same
commit as the other way's. Otherwise ``mapInArrow`` hands each task its Arrow batches, and the
Rust writer streams them straight to the output URL (``hdfs://``, ``s3://``, ``file://``, a bare
path).
Either way no row reaches the driver. Reading goes through the format name
``sparktrain.tfrecord``: the jar's format, else the Python data source
(:mod:`sparktrain.tfrecord._source`); PySpark 3.5 has no Python data source API, so there the Python
way reads with ``mapInArrow``, one task per file (:mod:`sparktrain.tfrecord._inputs`).
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from sparktrain import _checks, _frames, _spark, fs, storage_options
from sparktrain._deps import require_spark
from sparktrain._tracebacks import raised_in_task
from sparktrain.errors import InvalidArgumentError, PathExistsError, PathNotFoundError
from sparktrain.tfrecord import _engine
from sparktrain.tfrecord._output import (
    RESULT_SCHEMA,
    WriteJob,
    binary_batches,
    compression_of,
    result_batch,
    write_task,
)
from sparktrain.tfrecord._types import check_writable, record_type_of

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

_log = logging.getLogger(__name__)

MODES = ("errorifexists", "overwrite", "append", "ignore")
#: Seconds a failed write waits for its job's other tasks to stop before cleaning up.
SETTLE_SECONDS = 30.0


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
    """The session of a DataFrame, or the active one of an RDD's context."""
    from pyspark.sql import DataFrame

    if isinstance(data, DataFrame):
        return data.sparkSession
    session: SparkSession = _spark.session(cast("RDD[Any]", data).context, "data")
    return session


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
    is in :mod:`sparktrain.tfrecord._types`. ``partition_by`` writes ``col=value/`` sub-folders, the
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
    if _engine.choose(engine, df.sparkSession, path) == "jvm":
        check_writable(df.schema, record_type, columns)
        return _write_jvm(df, job, mode, num_files)
    # Only the Python writer runs through mapInArrow, which needs pandas.
    require_spark("sparktrain.tfrecord.write", arrow_udfs=True)
    check_writable(df.schema, record_type, columns)
    if num_files:
        df = df.repartition(num_files)
    if columns:
        df = df.sortWithinPartitions(*(_frames.column(c) for c in columns))
    tasks = _frames.map_in_arrow(df, _arrow_task(job), RESULT_SCHEMA)
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
        with _spark.job_group(sc, group, f"sparktrain: write {job.root}"):
            writer.save(native.setup_task(0, 0))
        native.commit_task(0, 0)
        files = job.commit([0], overwrite=mode == "overwrite")
    except BaseException as error:
        _spark.cancel(sc, group, patience=SETTLE_SECONDS)
        job.abort()
        _raise_tasks_error(error)
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


def _raise_tasks_error(error: BaseException) -> None:
    """Raises sparktrain's error that a writing task raised (a value no feature can hold), in
    place of Spark's report of it, which buries it in a stack trace; else returns."""
    raised = raised_in_task(error) if isinstance(error, Exception) else None
    if raised is not None:
        raise raised from error


def _run(job: WriteJob, mode: str, tasks: Any, path: str, sc: Any) -> WriteResult:
    """Runs the tasks in a job group of their own, then commits the job; on any failure, waits
    for the group's remaining tasks to stop and aborts the job."""
    group = f"sparktrain-write-{job.job_id}"
    try:
        with _spark.job_group(sc, group, f"sparktrain: write {path}"):
            results = tasks()
        expected = max((r[0] for r in results), default=-1) + 1
        seen = {r[0] for r in results}
        if seen != set(range(expected)):
            missing = sorted(set(range(expected)) - seen)
            raise RuntimeError(f"tasks {missing} of the write to {path} reported no result")
        files = job.commit(seen, overwrite=mode == "overwrite")
    except BaseException as error:
        _spark.cancel(sc, group, patience=SETTLE_SECONDS)
        job.abort()
        # A killed task's Python worker can outlive its task by Spark's kill time-out (2 s)
        # and recreate its attempt folder: clean up once more after that.
        time.sleep(2.5)
        job.abort()
        _raise_tasks_error(error)
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
    schema's columns are decoded: give a schema with fewer columns to read less. A folder
    without files reads as no rows when a schema is given; without one, nothing to infer it from
    is an error, as a path that names nothing always is. ``engine`` is
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
    # The session's object-store keys travel as options, as Hadoop settings do with Spark's
    # own file sources: the Python source's workers have no other way to see them.
    options = {"recordType": record_type, **storage_options.of_session(spark)}
    if compression:
        options["compression"] = compression
    if skip_corrupt:
        options["skipCorrupt"] = "true"
    if _engine.choose(engine, spark, path) == "jvm":
        name = OWN_FORMAT  # the jar answers to its own name
    elif has_python_data_sources():
        from sparktrain.tfrecord._source import register

        register(spark)
        name = PYTHON_FORMAT
        if schema is not None:
            # With a schema, the source lists the files only when the first action plans the
            # read: a path that names nothing is refused here instead. (Without one, inferring
            # it lists them now, and its error is rebuilt below.)
            fs.expand_inputs(path)
    else:
        # PySpark 3.5 has no Python data source API: the same reader through mapInArrow.
        return _read_arrow(spark, schema, {"path": path, **options})
    reader = spark.read.format(name).options(**options)
    if schema is not None:
        reader = reader.schema(schema)
    try:
        return reader.load(path)
    except Exception as error:
        # The Python source infers the schema in a Python worker of the driver's: its error
        # (a damaged file) reaches here as Spark's AnalysisException, which buries it in a
        # stack trace. Spark's file sources say PATH_NOT_FOUND for the jar's.
        _raise_tasks_error(error)
        if "[PATH_NOT_FOUND]" in str(error):
            raise PathNotFoundError(f"not found: {path}", path=path) from error
        raise


def _read_arrow(spark: SparkSession, schema: StructType | str | None, options: dict[str, str]) -> DataFrame:
    """``read_dataframe``'s Python engine without the Python data source API (PySpark 3.5): the
    driver lists the files and finds the schema as the data source does, then a range of file
    indices, one per partition, goes through ``mapInArrow`` and each task decodes its file with
    the same code as the data source's reader. The same options, rows and errors."""
    from sparktrain.tfrecord._inputs import InputFiles, ReadOptions, dataset_schema, read_file

    require_spark("sparktrain.tfrecord.read_dataframe", arrow_udfs=True)  # mapInArrow needs pandas
    parsed = ReadOptions(options)
    files = InputFiles.list(parsed, empty_ok=schema is not None)
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
    return spark.range(0, len(urls), 1, max(len(urls), 1)).mapInArrow(read, struct)
