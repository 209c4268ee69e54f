"""``ctx``: what a trainer knows about its job, and how it talks to the others. Runs in the
trainer process.

A :class:`TrainerContext` is built in the trainer process from the cluster spec its task
received at the rendezvous, and passed to ``main_fun(args, ctx)``.
"""

from __future__ import annotations

import getpass
import math
import re
import socket
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparktrain.cluster.callbacks import JobCallback
from sparktrain.cluster.settings import DEFAULT_BARRIER_TIMEOUT, EXIT_BARRIER, TaskInfo
from sparktrain.errors import InvalidArgumentError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from sparktrain._native import Communicator, ControlClient
    from sparktrain.training.trainer import Trainer

#: The element types ``allreduce`` moves.
REDUCIBLE = ("float32", "float64", "int64")

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass
class TrainerContext:
    """The job as one trainer sees it.

    ``job_name`` is ``"chief"``, ``"worker"`` or ``"evaluator"`` and ``task_index`` the index
    within that role, as in ``TF_CONFIG``. ``rank`` (alias ``worker_num``) is the task's index in
    the whole job: 0 is the chief, then the workers, then the evaluators. ``num_workers`` counts
    the training tasks, the chief included.
    """

    job_name: str
    task_index: int
    rank: int
    num_workers: int
    num_evaluators: int
    tasks: list[TaskInfo]
    tf_config: dict[str, Any]
    default_fs: str
    working_dir: str
    executor_id: str
    gpus: tuple[str, ...]
    #: The data plane's listening socket, bound before the rendezvous (see ``tasks[i].data_port``).
    data_listener: socket.socket | None = field(default=None, repr=False)
    #: Where the task serves its input partition (``input_mode="spark"``).
    feed_path: str | None = field(default=None, repr=False)
    _client: ControlClient | None = field(default=None, repr=False)
    _barriers: Counter[str] = field(default_factory=Counter, repr=False)
    _secret: str = field(default="", repr=False)
    _collective_timeout: float = field(default=120.0, repr=False)
    _collective_streams: int = field(default=1, repr=False)
    _collective_chunk_bytes: int = field(default=1 << 20, repr=False)
    _collective_sealed: bool = field(default=True, repr=False)
    _collective_local: bool = field(default=True, repr=False)
    _ring: Communicator | None = field(default=None, repr=False)
    #: Whether a pass over the feed is being read (the task serves one at a time).
    _feed_open: bool = field(default=False, repr=False)
    #: The bound socket that holds this task's TensorFlow port (``tasks[rank].tf_port``) when
    #: the job was started with ``release_tf_port=False``, so that no other process takes the
    #: port; None once :meth:`release_tf_port` closed it (or when the launcher did).
    tf_port_socket: socket.socket | None = field(default=None, repr=False)
    #: The job's generation: 0, then one more after each restart.
    generation: int = 0
    #: A random id of the job, the same in every generation.
    job_id: str = ""
    #: The job's callbacks (``Cluster.run(..., callbacks=...)``), which ``trainer()`` hands on.
    callbacks: tuple[JobCallback, ...] = ()
    _barrier_timeout: float = field(default=DEFAULT_BARRIER_TIMEOUT, repr=False)

    def release_tf_port(self) -> None:
        """Closes :attr:`tf_port_socket`, so that a server can bind TensorFlow's port; nothing
        to do when it is already released."""
        if self.tf_port_socket is not None:
            self.tf_port_socket.close()
            self.tf_port_socket = None

    @property
    def restarts(self) -> int:
        """How many times the job was restarted before this trainer started (its generation)."""
        return self.generation

    @property
    def world_size(self) -> int:
        """PyTorch's ``WORLD_SIZE``: the training tasks (evaluators are not in the world)."""
        return self.num_workers

    @property
    def master_addr(self) -> str:
        """PyTorch's ``MASTER_ADDR``: the chief's host."""
        return self.tasks[0].host

    @property
    def master_port(self) -> int:
        """PyTorch's ``MASTER_PORT``: the chief's reserved port (TensorFlow's, on the chief)."""
        return self.tasks[0].tf_port

    @property
    def local_rank(self) -> int:
        """PyTorch's ``LOCAL_RANK``: always 0, one trainer per Spark task, whose GPUs are its
        ``CUDA_VISIBLE_DEVICES``."""
        return 0

    @property
    def jax_coordinator_address(self) -> str:
        """``host:port`` of the JAX coordinator (process 0, the chief)."""
        return f"{self.master_addr}:{self.master_port}"

    @property
    def barrier_timeout(self) -> float:
        """Seconds :meth:`barrier` waits for the others unless told otherwise (the job's
        ``barrier_timeout``)."""
        return self._barrier_timeout

    @property
    def worker_num(self) -> int:
        """TensorFlowOnSpark's name for ``rank``."""
        return self.rank

    @property
    def is_chief(self) -> bool:
        """True for the chief, the task that writes checkpoints and exports."""
        return self.job_name == "chief"

    @property
    def cluster_spec(self) -> dict[str, list[str]]:
        """Role → ``host:port`` addresses reserved for TensorFlow, as in ``TF_CONFIG``."""
        return dict(self.tf_config["cluster"])

    def absolute_path(self, path: str) -> str:
        """``path`` as a full URL, as TensorFlowOnSpark resolves it: a URL keeps its scheme,
        ``/x`` goes on ``fs.defaultFS``, and a relative path goes under the user's home on HDFS
        or under the working directory on a local default file system."""
        if _SCHEME.match(path):
            return path
        fs = self.default_fs.rstrip("/")
        if fs.startswith("file:"):
            fs = "file://"
        if path.startswith("/"):
            return f"{fs}{path}"
        if fs.startswith(("hdfs://", "viewfs://")):
            return f"{fs}/user/{getpass.getuser()}/{path}"
        if fs == "file://":
            return f"file://{self.working_dir.rstrip('/')}/{path}"
        return f"{fs}/{path}"

    def feed(self) -> Iterator[pa.RecordBatch]:
        """One pass over this trainer's partition of the job's DataFrame, as Arrow record
        batches (``input_mode="spark"``). Call it again for another epoch: later passes replay
        a local spool of the first. One pass at a time: read a pass to its end (or ``close()``
        it) before starting the next; a second open pass is refused, as it would wait for
        the first forever."""
        if self.feed_path is None:
            raise InvalidArgumentError(
                "ctx.feed() needs Cluster.run(..., input_mode='spark', data=<a DataFrame>)"
            )
        self._refuse_second_pass()
        return self._feed_pass(self.feed_path)

    def _feed_pass(self, path: str) -> Iterator[pa.RecordBatch]:
        from sparktrain.cluster.trainer.feed import read_feed

        self._refuse_second_pass()  # two passes made before either started
        self._feed_open = True
        try:
            yield from read_feed(path)
        finally:
            self._feed_open = False

    def _refuse_second_pass(self) -> None:
        if self._feed_open:
            raise InvalidArgumentError(
                "ctx.feed(): the previous pass over this trainer's partition is still being read; "
                "read it to its end or close() it before the next one (the task serves one pass "
                "at a time)"
            )

    def trainer(self, **options: Any) -> Trainer:
        """A :class:`~sparktrain.training.Trainer` on sparktrain's engine for this trainer:
        ``fit`` trains in sync with every other trainer (call it on all of them), the chief
        writes checkpoints, event files and the export. See :mod:`sparktrain.training` for
        the options (``model``, ``features``, ``optimizer``, ``batch_size``, ``model_dir``...).
        The job's :attr:`callbacks` follow its ``fit`` unless ``callbacks=`` says otherwise."""
        # The one import from the launcher up into the engine: the engine builds on the launcher,
        # and a trainer that never calls ctx.trainer() never loads it.
        from sparktrain.training.trainer import Trainer

        if self.job_name == "evaluator":
            raise InvalidArgumentError("evaluators do not train; give them their own work")
        options.setdefault("callbacks", self.callbacks)
        return Trainer(self, **options)

    def communicator(self) -> Communicator:
        """The data plane's ring over the training tasks, connected on first use; the
        collectives here and sparktrain's engine share it, one call at a time."""
        if self._ring is None:
            from sparktrain._native import Communicator

            if self.job_name == "evaluator":
                raise InvalidArgumentError(
                    "collectives run between the chief and the workers, not evaluators"
                )
            if self.data_listener is None:
                raise InvalidArgumentError("this context has no data-plane listener")
            peers = [f"{t.host}:{t.data_port}" for t in self.tasks[: self.num_workers]]
            self._ring = Communicator(
                self.data_listener.fileno(),
                self.rank,
                peers,
                self._secret,
                self._collective_timeout,
                self._collective_chunk_bytes,
                self._collective_streams,
                self._collective_sealed,
                self._collective_local,
            )
        return self._ring

    def allreduce(
        self, arrays: np.ndarray | Sequence[np.ndarray], op: str = "mean", wire: str | None = None
    ) -> Any:
        """Reduces arrays element-wise over the chief and the workers (``op``: ``"sum"``,
        ``"mean"``, ``"max"`` or ``"min"``; ``mean`` of int64 rounds down). Every trainer gets
        bit-identical values.

        A writable, C-contiguous float32, float64 or int64 NumPy array is reduced in place and
        returned; anything else is copied into a new array of such a type (other floats become
        float64, other integers int64), which is returned.

        A list or tuple of NumPy arrays (of one element type) is reduced as one fused call, one
        round of the ring for all of them, and a list is returned: hand a model's gradients
        over together rather than one by one.

        ``wire="bfloat16"`` or ``"float16"`` sends float32 values rounded to 16 bits, halving
        the traffic, while sums still accumulate in float32.

        A peer that dies or stalls raises :class:`~sparktrain.errors.PeerFailed` or
        :class:`~sparktrain.errors.CollectiveTimeout` naming it."""
        import numpy as np

        # A list of NumPy arrays is fused; a list of numbers is one array.
        many = isinstance(arrays, list | tuple) and all(isinstance(a, np.ndarray) for a in arrays)
        items = list(arrays) if many else [arrays]
        targets = [_reducible(a) for a in items]
        dtypes = sorted({t.dtype.name for t in targets})
        if len(dtypes) > 1:
            raise InvalidArgumentError(f"a fused allreduce takes one element type, not {dtypes}")
        self.communicator().allreduce_at(
            [t.__array_interface__["data"][0] for t in targets],
            [t.size for t in targets],
            dtypes[0] if dtypes else "float32",
            op,
            wire or "native",
        )
        results = [t if t is a else t.reshape(np.shape(a)) for t, a in zip(targets, items, strict=True)]
        return results if many else results[0]

    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        """Copies rank ``root``'s ``array`` to every trainer: in place for a writable
        C-contiguous NumPy array (of the same shape and type everywhere), else into a copy that
        is returned."""
        import numpy as np

        target = array
        if not (isinstance(array, np.ndarray) and array.flags.c_contiguous and array.flags.writeable):
            target = np.array(array, order="C", copy=True)
        self.communicator().broadcast_at(target.__array_interface__["data"][0], target.nbytes, root)
        return target

    def allgather(self, value: Any) -> list[Any]:
        """Every trainer's ``value``, by rank. ``bytes`` travel as they are; other values are
        pickled (the peers are this job's trainers, authenticated by the job secret)."""
        import pickle

        raw = isinstance(value, bytes | bytearray)
        data = bytes(value) if raw else pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        kinds = self.communicator().allgather(b"b" if raw else b"p")
        items = self.communicator().allgather(data)
        return [bytes(i) if k == b"b" else pickle.loads(i) for k, i in zip(kinds, items, strict=True)]

    def control_client(self) -> ControlClient:
        """This trainer's connection to the driver's rendezvous (barriers, reports and the
        dynamic-sharding work queue go through it)."""
        if self._client is None:
            raise InvalidArgumentError("this context is not connected to a running job")
        return self._client

    def barrier(self, name: str = "barrier", timeout: float | None = None) -> None:
        """Waits until every task of the job (evaluators included) has called ``barrier`` with
        the same ``name`` as many times as this one. Raises :class:`~sparktrain.errors.BarrierTimeout`
        naming the missing tasks after ``timeout`` seconds (by default the job's
        ``barrier_timeout``), and :class:`~sparktrain.errors.JobAborted` as soon as the job
        fails elsewhere."""
        if name == EXIT_BARRIER:
            raise InvalidArgumentError(f"the barrier name {EXIT_BARRIER!r} is reserved")
        self._barriers[name] += 1
        wait = self._barrier_timeout if timeout is None else timeout
        self.control_client().barrier(self.rank, f"{name}#{self._barriers[name]}", wait)

    def save_state(self, state: Any, directory: str, name: str = "state", *, pickle: bool = False) -> bool:
        """The chief writes ``state`` to ``directory`` (any storage URL, or a path resolved as
        :meth:`absolute_path` does), replacing the previous one atomically: a trainer killed
        while writing leaves the previous state readable. Other trainers write nothing.
        Returns whether this trainer wrote it. Pair it with :meth:`load_state` to resume after a
        restart.

        ``state`` is a NumPy array, a JSON value (dicts, lists, strings, numbers, booleans,
        None), or a dict whose values are either (``{"step": 5, "weights": array}``), stored in
        ``<name>.npz``, a format that runs no code when read. ``pickle=True`` stores any
        picklable value in ``<name>.pickle`` instead; read it back with ``load_state(...,
        pickle=True)``, and only where everyone who can write ``directory`` is trusted:
        unpickling runs whatever code the file holds, in every trainer."""
        from sparktrain.cluster.trainer.state import PICKLE_SUFFIX, SAFE_SUFFIX, encode

        if not self.is_chief:
            return False
        from sparktrain import fs

        data = encode(state, pickle)
        folder = self.absolute_path(directory).rstrip("/")
        written, other = (PICKLE_SUFFIX, SAFE_SUFFIX) if pickle else (SAFE_SUFFIX, PICKLE_SUFFIX)
        # Writing creates the folder when it is missing.
        fs.write_bytes(f"{folder}/{name}{written}", data, overwrite=True)
        # The other format's file would be an older state.
        if fs.exists(f"{folder}/{name}{other}"):
            fs.delete(f"{folder}/{name}{other}")
        return True

    def load_state(self, directory: str, name: str = "state", *, pickle: bool = False) -> Any:
        """The state the chief last saved with :meth:`save_state`, or None when there is none
        (the first generation). The chief reads it and every training task receives the same
        value, so only the chief needs to reach ``directory``; call it on every trainer of the
        chief and the workers alike, with the same ``pickle`` as :meth:`save_state` used.
        Without ``pickle=True`` a pickled state is refused, not run."""
        from sparktrain.cluster.trainer.state import PICKLE_SUFFIX, SAFE_SUFFIX, decode

        found: tuple[str, bytes] | None = None
        refused = ""
        if self.is_chief:
            try:
                found = self._read_state(self.absolute_path(directory).rstrip("/"), name, pickle)
            except InvalidArgumentError as e:
                refused = str(e)
        if self.num_workers > 1 and self.job_name != "evaluator":
            # Every trainer gets the chief's bytes (over the ring, authenticated by the job
            # secret), or the chief's refusal, and does as the chief does.
            suffix, data = found if found is not None else ("", b"")
            suffix = self.allgather((f"!{refused}" if refused else suffix).encode())[0].decode()
            data = self.allgather(data)[0]
            refused = suffix[1:] if suffix.startswith("!") else ""
            found = (suffix, data) if suffix and not refused else None
        if refused:
            raise InvalidArgumentError(refused)
        if found is None:
            return None
        suffix, data = found
        if suffix not in (SAFE_SUFFIX, PICKLE_SUFFIX):
            raise InvalidArgumentError(f"load_state: the chief sent state of an unknown kind {suffix!r}")
        return decode(data, suffix, f"{directory}/{name}{suffix}")

    @staticmethod
    def _read_state(folder: str, name: str, pickle: bool) -> tuple[str, bytes] | None:
        """The suffix and bytes of the state file in ``folder``, the chief's part of
        :meth:`load_state`; None when there is none."""
        from sparktrain import fs
        from sparktrain.cluster.trainer.state import PICKLE_SUFFIX, SAFE_SUFFIX
        from sparktrain.errors import PathNotFoundError

        for suffix in (PICKLE_SUFFIX, SAFE_SUFFIX) if pickle else (SAFE_SUFFIX,):
            try:
                return suffix, fs.read_bytes(f"{folder}/{name}{suffix}")
            except PathNotFoundError:
                continue
        if not pickle and fs.exists(f"{folder}/{name}{PICKLE_SUFFIX}"):
            raise InvalidArgumentError(
                f"load_state: {folder}/{name}{PICKLE_SUFFIX} is a pickle, which runs code when "
                "read; pass pickle=True if everyone who can write that folder is trusted"
            )
        return None

    def report(self, step: int | None = None, **metrics: float) -> None:
        """Sends metrics to the driver, which prints the chief's as a progress line.

        ``loss``, ``accuracy``, ``examples_per_sec`` and any other numbers are accepted; a value
        that is not a finite number is refused."""
        values = []
        for name, value in metrics.items():
            number = float(value)
            if not math.isfinite(number):
                raise InvalidArgumentError(f"metric {name!r} is {value!r}, not a finite number")
            values.append((name, number))
        self.control_client().report(self.rank, step, values, 10.0)


def _reducible(array: Any) -> np.ndarray:
    """``array`` itself when it can be reduced in place, else a contiguous copy of a type the
    data plane moves."""
    import numpy as np

    if (
        isinstance(array, np.ndarray)
        and array.dtype.name in REDUCIBLE
        and array.flags.c_contiguous
        and array.flags.writeable
    ):
        return array
    values = np.asarray(array)
    if values.dtype.name in REDUCIBLE:
        dtype = values.dtype
    elif np.issubdtype(values.dtype, np.floating):
        dtype = np.dtype("float64")
    elif np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_:
        dtype = np.dtype("int64")
    else:
        raise InvalidArgumentError(f"allreduce takes numbers, not {values.dtype}")
    return np.array(values, dtype=dtype, order="C", copy=True)
