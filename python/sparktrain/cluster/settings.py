"""What the driver sends every task of a job (through the Spark closure), and what a task
hands its trainer process (through a local pipe). Imported on all three sides of a job: the
driver, the executor task and the trainer process.

The job secret travels in :class:`JobSettings`, inside the closure Spark ships to the tasks: it
never crosses the control plane. Nothing read from the control plane is ever unpickled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

#: The barrier every trainer reaches after ``main_fun`` returns.
EXIT_BARRIER = "__exit__"
#: Seconds ``ctx.barrier()`` and the exit barrier wait for the others unless told otherwise.
DEFAULT_BARRIER_TIMEOUT = 600.0


@dataclass(frozen=True)
class TaskInfo:
    """One task of the cluster spec."""

    task_index: int
    role: str
    index: int
    host: str
    data_port: int
    tf_port: int
    executor_id: str
    gpus: tuple[str, ...] = ()


def role_names(num_workers: int, num_evaluators: int, evaluator_roles: Sequence[str] = ()) -> list[str]:
    """``chief:0``, ``worker:0``..., ``evaluator:0``... by task index.

    ``evaluator_roles`` names what each evaluator task plays, for logs and errors (the TFoS
    shim's parameter servers are ``ps``); each name is numbered on its own (``ps:0``, ``ps:1``,
    ``evaluator:0``). Evaluators it does not name are ``evaluator``."""
    names = ["chief:0"] + [f"worker:{i}" for i in range(num_workers - 1)]
    counts: Counter[str] = Counter()
    for i in range(num_evaluators):
        role = evaluator_roles[i] if i < len(evaluator_roles) else "evaluator"
        names.append(f"{role}:{counts[role]}")
        counts[role] += 1
    return names


@dataclass(frozen=True)
class JobSettings:
    """The job, as every task needs it."""

    #: ``host:port`` of the driver's rendezvous service.
    address: str
    #: The job secret, as hex; left out of the repr, so that no log or traceback shows it.
    secret: str = field(repr=False)
    num_workers: int
    num_evaluators: int
    #: ``(main_fun, args)``, pickled with cloudpickle on the driver.
    function: bytes
    #: Extra environment variables for the trainers.
    env: dict[str, str]
    #: Hadoop's ``fs.defaultFS`` on the driver.
    default_fs: str
    #: Seconds every task has to register.
    reservation_timeout: float
    #: Seconds between a task's heartbeats.
    heartbeat_interval: float
    #: Seconds without an answer after which either side gives the other up.
    heartbeat_timeout: float
    #: The largest pickled return value a trainer may send back.
    max_result_bytes: int
    #: GPUs each training task must have, or None to take what Spark assigned.
    gpus_per_worker: int | None = None
    #: The PEM CA that signed the driver's TLS certificate; None for a plain control plane.
    tls_ca: str | None = None
    #: The name the driver's certificate must carry; None for the driver's host (a
    #: certificate of the job's own files). A certificate the driver made names
    #: ``driver.sparktrain.invalid``: it is trusted because it is pinned, whatever the address.
    tls_domain: str | None = None
    #: Seconds a collective waits for a peer before failing, naming it.
    collective_timeout: float = 120.0
    #: Parallel rings of the data plane; large all-reduces are split across them.
    collective_streams: int = 1
    #: Bytes per chunk of the data plane's pipeline.
    collective_chunk_bytes: int = 1 << 20
    #: Whether the data plane's frames are encrypted and authenticated.
    collective_sealed: bool = True
    #: Whether trainers on one host (one network namespace) connect through unix-domain
    #: sockets, their frames unsealed, rather than TCP.
    collective_local: bool = True
    #: The job's generation: 0, then one more after each restart.
    generation: int = 0
    #: A random id of the job, the same in every generation: checkpoints tell this job's
    #: generations from an earlier job's in the same ``model_dir`` by it.
    job_id: str = ""
    #: Seconds ``ctx.barrier()`` and the exit barrier wait for the others by default.
    barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT
    #: The session's object-store keys (:mod:`sparktrain.storage_options`), for the trainers'
    #: storage; left out of the repr, like the secret.
    storage: dict[str, str] = field(default_factory=dict, repr=False)
    #: What each evaluator task plays, for logs and errors (see :func:`role_names`).
    evaluator_roles: tuple[str, ...] = ()
    #: Whether the trainer closes the socket holding TensorFlow's reserved port before
    #: ``main_fun`` starts; False leaves it to user code (``ctx.tf_port_socket``).
    release_tf_port: bool = True
    #: Whether the driver hands out HDFS delegation tokens (:mod:`sparktrain.cluster.driver.tokens`):
    #: each task then keeps them in a file its trainer's ``HADOOP_TOKEN_FILE_LOCATION`` names.
    hadoop_tokens: bool = False
    #: The job's callbacks (:mod:`sparktrain.cluster.callbacks`), pickled with cloudpickle on
    #: the driver once their job hooks started; empty without callbacks.
    callbacks: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class TrainerLaunch:
    """What a task hands its trainer once the rendezvous is complete (the trainer got the
    :class:`JobSettings` right after it started)."""

    #: The task's index in the whole job (0 is the chief).
    rank: int
    tasks: list[TaskInfo]
    tf_config: dict[str, object]
    #: The inherited file descriptor of the data plane's listening socket.
    data_fd: int
    #: The inherited file descriptor holding the port reserved for TensorFlow.
    tf_fd: int
    #: Where the trainer writes its pickled return value.
    result_path: str
    #: A local socket path that streams the task's input partition as Arrow IPC, or None.
    feed_path: str | None = None
    working_dir: str = ""
    gpus: tuple[str, ...] = field(default_factory=tuple)
    #: The task's registration token, which the driver requires of the trainer's calls too;
    #: left out of the repr.
    token: str | None = field(default=None, repr=False)
