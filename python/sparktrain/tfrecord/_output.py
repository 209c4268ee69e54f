"""Writing one TFRecord dataset from many Spark tasks, with Hadoop's commit protocol. The job runs
on the driver, ``write_task`` in Spark tasks.

The driver makes a :class:`WriteJob`; each task runs :func:`write_task` on its Arrow batches,
which writes into the task attempt's own staging folder and commits it when the batches end;
the driver then publishes the committed tasks' files and writes ``_SUCCESS`` (see the Rust
``OutputJob`` for the folder layout and the guarantees). A failed or retried attempt, or a
speculative copy, leaves no partial or duplicate file; a failed job leaves nothing visible.

Exactly one attempt of each task commits, on every store: a file system renames the attempt's
folder, an object store takes the first manifest uploaded for the task (the attempt's files stay
where they are, and the job commit copies only those the manifest lists). So whichever attempt
Spark reports for a task, the driver publishes the committed attempt's files, which are whole.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from sparktrain import _native, fs
from sparktrain._partitions import split_by_partition
from sparktrain.errors import InvalidArgumentError
from sparktrain.tfrecord._types import record_type_of

_log = logging.getLogger(__name__)

_EXTENSIONS = {None: ".tfrecord", "GZIP": ".tfrecord.gz", "ZLIB": ".tfrecord.zlib"}


def compression_of(value: str | None) -> str | None:
    """``"GZIP"``, ``"ZLIB"`` or ``None`` from a user's spelling (``"gzip"``, ``"none"``, ...)."""
    if value is None or value.upper() in ("", "NONE", "UNCOMPRESSED"):
        return None
    if value.upper() in ("GZIP", "GZ"):
        return "GZIP"
    if value.upper() == "ZLIB":
        return "ZLIB"
    raise InvalidArgumentError(f"unknown compression {value!r}; use None, 'GZIP' or 'ZLIB'")


@dataclass(frozen=True)
class WriteJob:
    """What every task of one write needs to know; pickled into the Spark tasks."""

    root: str
    record_type: str = "Example"
    compression: str | None = None
    partition_by: tuple[str, ...] = ()
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: Object-store keys for the tasks' storage (:mod:`sparktrain.storage_options`); left out
    #: of the repr, which logs and tracebacks show.
    storage: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "record_type", record_type_of(self.record_type))
        object.__setattr__(self, "compression", compression_of(self.compression))

    def file_name(self, task: int, sequence: int = 0) -> str:
        """``part-<task>-<job>[-c<n>].tfrecord[.gz]``; ``sequence`` numbers the second and later
        files a task starts in one folder."""
        suffix = f"-c{sequence:03d}" if sequence else ""
        return f"part-{task:05d}-{self.job_id}{suffix}{_EXTENSIONS[self.compression]}"

    def native(self) -> _native.OutputJob:
        return _native.OutputJob(self.root, self.job_id)

    def commit(self, tasks: Iterable[int], *, overwrite: bool) -> list[str]:
        """Publishes every task's committed files and writes ``_SUCCESS``; returns the files."""
        return self.native().commit_job(sorted(set(tasks)), overwrite)

    def abort(self) -> None:
        """Removes the staging folder; never raises (it runs while another error propagates)."""
        try:
            self.native().abort_job()
        except Exception:  # the original failure matters more
            _log.warning("could not clean up the staging folder of %s", self.root, exc_info=True)


@dataclass(frozen=True)
class TaskResult:
    """What one task attempt reports to the driver."""

    task: int
    attempt: int
    rows: int
    files: int
    committed: bool


RESULT_SCHEMA = "task int, attempt int, rows long, files int, committed boolean"


def write_task(job: WriteJob, batches: Iterable[pa.RecordBatch], task: int, attempt: int) -> TaskResult:
    """Writes one task attempt's batches and commits them as the task's output.

    Rows are expected grouped by the partition columns (one open file at a time); a value that
    comes back after another starts a new file in its folder rather than failing."""
    fs.configure(dict(job.storage))
    native = job.native()
    folder_url = native.setup_task(task, attempt)
    writer: _native.ExampleWriter | None = None
    current: str | None = None
    files_in: dict[str, int] = {}
    rows = 0
    try:
        for batch in batches:
            runs: Iterable[tuple[str, pa.RecordBatch]] = (
                split_by_partition(batch, job.partition_by) if job.partition_by else [("", batch)]
            )
            for folder, rows_of in runs:
                if rows_of.num_rows == 0:
                    continue
                if writer is None or folder != current:
                    if writer is not None:
                        writer.close()
                    sequence = files_in.get(folder, 0)
                    files_in[folder] = sequence + 1
                    name = job.file_name(task, sequence)
                    url = f"{folder_url}/{folder}/{name}" if folder else f"{folder_url}/{name}"
                    writer = _native.ExampleWriter(url, job.compression, False, None, job.record_type)
                    current = folder
                writer.write_batch(rows_of)
                rows += rows_of.num_rows
        if writer is not None:
            writer.close()
            writer = None
        committed = native.commit_task(task, attempt)
    except BaseException:
        if writer is not None:
            writer.abort()
        try:
            # Keeps the attempt if its commit went through although it raised (an object
            # store's answer lost on the way): the task's retry then gives way to it.
            native.abort_task(task, attempt)
        except Exception:  # the write's own error is the one to report
            _log.warning("could not remove the staging folder of task %d attempt %d", task, attempt)
        raise
    if not committed:
        _log.info("task %d attempt %d: another attempt committed first; output dropped", task, attempt)
    return TaskResult(task, attempt, rows, sum(files_in.values()), committed)


def result_batch(result: TaskResult) -> pa.RecordBatch:
    """A task's result as the one-row batch ``mapInArrow`` returns (schema ``RESULT_SCHEMA``)."""
    return pa.RecordBatch.from_pydict(
        {
            "task": pa.array([result.task], pa.int32()),
            "attempt": pa.array([result.attempt], pa.int32()),
            "rows": pa.array([result.rows], pa.int64()),
            "files": pa.array([result.files], pa.int32()),
            "committed": pa.array([result.committed], pa.bool_()),
        }
    )


def binary_batches(records: Iterable[bytes | bytearray], chunk: int = 4096) -> Iterator[pa.RecordBatch]:
    """Serialized records (an RDD partition of bytes) as one-column binary batches."""
    pending: list[bytes | bytearray] = []
    for record in records:
        pending.append(record)
        if len(pending) == chunk:
            yield pa.RecordBatch.from_arrays([pa.array(pending, pa.binary())], names=["byteArray"])
            pending = []
    if pending:
        yield pa.RecordBatch.from_arrays([pa.array(pending, pa.binary())], names=["byteArray"])
