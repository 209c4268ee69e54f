"""The exceptions sparktrain raises. Imported anywhere.

Every error that comes from bad input or a failed service names what is at fault: the file and
byte offset of a damaged record, the record and feature that does not fit a schema, the column
that cannot be converted, the path that does not exist.
"""

from __future__ import annotations


class SparktrainError(Exception):
    """Base class of every sparktrain error."""

    def __init__(self, message: str, **attrs: object) -> None:
        super().__init__(message)
        self.message = message
        for name, value in attrs.items():
            setattr(self, name, value)

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the attributes when the error crosses a process boundary (Spark pickles them).
        attrs = {k: v for k, v in self.__dict__.items() if k != "message"}
        return (_rebuild, (type(self), self.message, attrs))


def _rebuild(cls: type[SparktrainError], message: str, attrs: dict[str, object]) -> SparktrainError:
    return cls(message, **attrs)


class InvalidArgumentError(SparktrainError, ValueError):
    """An argument makes no sense (an unknown compression, a batch size of zero, ...)."""


class ClosedError(SparktrainError, ValueError):
    """A call on an object after its ``close()`` (a writer, a reader, the rendezvous)."""


class MissingDependencyError(SparktrainError, ImportError):
    """An optional dependency is not installed. ``package`` names it (``"pyspark"``) and
    ``extra`` the sparktrain extra that installs it (``"spark"``): ``sparktrain.Cluster.run
    needs pyspark: pip install 'sparktrain[spark]'``."""

    package: str
    extra: str

    def __init__(self, message: str, **attrs: object) -> None:
        super().__init__(message, **attrs)
        # ImportError's own field, for code that reads it.
        self.name = str(attrs["package"]) if "package" in attrs else None


class StorageError(SparktrainError, OSError):
    """A file-system operation failed. ``path`` names the file or folder."""

    path: str | None


class PathNotFoundError(StorageError, FileNotFoundError):
    """A file or folder does not exist, or a glob matched nothing."""


class PathExistsError(StorageError, FileExistsError):
    """A file or folder already exists where a new one was to be created."""


class TFRecordError(SparktrainError):
    """Base class of errors about TFRecord content."""


class TFRecordCorruptError(TFRecordError):
    """The framing of a TFRecord file is damaged.

    ``path`` names the file, ``offset`` the byte offset of the damaged record (in the
    decompressed stream for compressed files), and ``kind`` one of ``truncated_header``,
    ``length_crc_mismatch``, ``truncated_payload``, ``payload_crc_mismatch``, ``not_tfrecord``,
    ``record_too_long`` (a header claims more than the reader's ``max_record_bytes``) or
    ``damaged_compression`` (a GZIP or ZLIB file whose compressed bytes are damaged: nothing after
    the damage can be read, and ``offset`` is that of the first record lost).
    """

    path: str
    offset: int
    kind: str


class RecordDecodeError(TFRecordError):
    """A record is not a valid message, or a feature does not fit its column.

    ``path`` and ``record`` (zero-based index in the file) name the record; ``feature`` names the
    feature when one is at fault.
    """

    path: str
    record: int


class SchemaError(SparktrainError, TypeError):
    """A column cannot be converted to or from a feature. ``column`` names it."""


class ClusterError(SparktrainError):
    """The launcher or its control plane failed."""


class ControlPlaneError(ClusterError):
    """A control-plane call failed. ``address`` names the driver, ``code`` the gRPC status."""


class RendezvousTimeout(ClusterError, TimeoutError):
    """Not every task registered in time. ``missing`` lists their task indexes, ``total`` counts
    the job's tasks: ``1 of 4 tasks never registered: [3]``."""

    missing: list[int]
    total: int


class BarrierTimeout(ClusterError, TimeoutError):
    """Not every task reached a barrier in time; ``name``, ``missing`` and ``total`` say which."""

    name: str
    missing: list[int]
    total: int


class DriverUnreachable(ClusterError, ConnectionError):
    """A task or trainer could not reach the driver at ``address``."""

    address: str


class Unauthenticated(ClusterError, PermissionError):
    """The driver at ``address`` refused a call for a missing or wrong job secret."""

    address: str


class JobAborted(ClusterError):
    """The job failed elsewhere (another trainer died, the driver gave up); ``reason`` says why."""

    reason: str


class SlotsUnavailable(ClusterError):
    """The cluster has fewer task slots than the job's barrier stage needs. ``needed`` and
    ``available`` count them."""

    needed: int
    available: int


class ConfigurationError(ClusterError):
    """The Spark conf cannot run a training job: dynamic allocation is on, no task fits on an
    executor, GPUs are asked of tasks but not given to executors. Raised by ``Cluster.run``
    before any Spark job starts. ``findings`` lists the
    :class:`~sparktrain.deploy.doctor.Finding` objects at fault, each with its fix, and
    ``checks`` their names (``["dynamic-allocation"]``); ``sparktrain doctor`` runs the same
    checks and more."""

    findings: list[object]
    checks: list[str]


class WorkerFailed(ClusterError):
    """A trainer failed: it exited non-zero, was killed, or its task stopped heart-beating.

    ``task_index`` (also ``rank``), ``role`` (``"chief:0"``, ``"worker:1"``...) and ``host``
    name it; ``exit_code`` is its exit code (``None`` when it was lost), ``signal`` the signal
    that killed it (or ``None``), and ``stderr_tail`` the last lines it wrote to stderr,
    traceback included. A ``sys.exit(n)`` in ``main_fun`` is exit code 1, with the status
    named in ``stderr_tail``: the trainer's own exit codes say how it failed.
    """

    task_index: int
    role: str
    host: str
    exit_code: int | None
    signal: int | None
    stderr_tail: str

    @property
    def rank(self) -> int:
        """The trainer's global rank (``RANK``, ``ctx.rank``): its task index, in the order
        chief, workers, evaluators."""
        return self.task_index


class CollectiveError(ClusterError):
    """A collective between trainers (all-reduce, broadcast, all-gather) failed."""


class PeerFailed(CollectiveError):
    """A peer's connection broke, or it called another collective: ``op`` names the operation,
    ``peer`` the peer's rank and ``address`` its data-plane address."""

    op: str
    peer: int
    address: str


class CollectiveTimeout(CollectiveError, TimeoutError):
    """A peer did not answer within the time-out; ``op``, ``peer`` and ``address`` name it."""

    op: str
    peer: int
    address: str


class TrainingError(SparktrainError):
    """The training engine failed (a tensor operation, say)."""


class InputError(TrainingError):
    """Reading training rows failed outside a TFRecord file: a Parquet file, the Spark feed or
    the driver's work queue; ``path`` names it."""

    path: str | None


class CheckpointError(TrainingError):
    """A checkpoint, event file or exported model could not be written or read, or does not
    fit the model; the message names the file or tensor."""


class CheckpointMismatch(CheckpointError):
    """A checkpoint or exported model does not fit the model that reads it: a tensor it lacks, a
    shape or optimizer state that differs (``model_dir`` holds another model's checkpoints, or
    the model's settings changed). The message names the tensor. No restart cures it: the trainer
    exits with the code of errors that are not retried; choose another ``model_dir`` or the
    settings the checkpoint was made with."""


class GenerationSuperseded(CheckpointError):
    """This trainer's generation is lost: a later generation of its job (after a restart that
    this trainer did not hear of), or another job that took the folder over, writes checkpoints
    in ``path`` now, so this trainer may no longer. ``generation`` is this trainer's,
    ``by_generation`` the writer's, and ``by_job`` the other job's id (None: the same job). No
    restart cures it: the trainer exits with the code of errors that are not retried."""

    path: str
    generation: int
    by_job: str | None
    by_generation: int


__all__ = [
    "BarrierTimeout",
    "CheckpointError",
    "CheckpointMismatch",
    "ClosedError",
    "ClusterError",
    "CollectiveError",
    "CollectiveTimeout",
    "ConfigurationError",
    "ControlPlaneError",
    "DriverUnreachable",
    "GenerationSuperseded",
    "InputError",
    "InvalidArgumentError",
    "JobAborted",
    "MissingDependencyError",
    "PathExistsError",
    "PathNotFoundError",
    "PeerFailed",
    "RecordDecodeError",
    "RendezvousTimeout",
    "SchemaError",
    "SlotsUnavailable",
    "SparktrainError",
    "StorageError",
    "TFRecordCorruptError",
    "TFRecordError",
    "TrainingError",
    "Unauthenticated",
    "WorkerFailed",
]
