"""The options of one ``Cluster.run``, checked on the driver before anything starts. Runs on the
driver.

:class:`JobOptions` holds ``Cluster.run``'s arguments in the form the launcher uses. Building
one checks every argument and raises :class:`~sparktrain.errors.InvalidArgumentError` naming
the parameter (``heartbeat_timeout=-1: must be > 0``), so a bad argument fails at once on the
driver, not minutes later in a Spark task or a trainer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sparktrain import _checks
from sparktrain.cluster.callbacks import JobCallback
from sparktrain.cluster.driver.restarts import DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_BACKOFF
from sparktrain.cluster.scripts import Script, script_arguments
from sparktrain.cluster.settings import DEFAULT_BARRIER_TIMEOUT

#: Where trainers take their input from: files they read themselves, or a DataFrame's partition.
INPUT_MODES: Final = ("files", "spark")
#: The default limit on a pickled return value.
MAX_RESULT_BYTES: Final = 64 << 20


@dataclass(frozen=True)
class JobOptions:
    """``Cluster.run``'s arguments, checked (see :meth:`sparktrain.cluster.Cluster.run`).

    ``data`` is None unless ``input_mode="spark"``; ``env`` is a copy; ``tls`` holds two or three
    paths (certificate, key and optionally the CA)."""

    #: A function, or the path of a ``.py`` script (loaded into a :class:`Script`).
    main_fun: Callable[[Any, Any], Any] | str | os.PathLike[str]
    name: str
    args: Any = None
    num_workers: int = 1
    num_evaluators: int = 0
    input_mode: str = "files"
    data: Any = None
    reservation_timeout: float = 120.0
    env: Mapping[str, str] = field(default_factory=dict)
    gpus_per_worker: int | None = None
    heartbeat_interval: float = 0.25
    heartbeat_timeout: float = 10.0
    max_result_bytes: int = MAX_RESULT_BYTES
    log: bool = True
    tls: tuple[str, ...] | None = None
    collective_timeout: float = 120.0
    work: str | None = None
    max_restarts: int = DEFAULT_MAX_RESTARTS
    restart_backoff: float = DEFAULT_RESTART_BACKOFF
    min_workers: int | None = None
    barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT
    #: Run the trainers on the driver's machine, started by the driver itself, instead of in
    #: a Spark stage (PySpark's ``TorchDistributor(local_mode=True)``).
    local: bool = False
    evaluator_roles: Sequence[str] | None = None
    keep_results: bool = False
    release_tf_port: bool = True
    #: The job's callbacks (:class:`~sparktrain.cluster.callbacks.JobCallback`).
    callbacks: tuple[JobCallback, ...] = ()

    def __post_init__(self) -> None:
        # Frozen: the checked, normalized values replace the given ones here, once.
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        if isinstance(self.main_fun, str | os.PathLike):
            # A script entry point: its text travels with the job, args are its command line.
            put("main_fun", Script.load(self.main_fun))
            put("args", script_arguments(self.args))
        _checks.function("main_fun", self.main_fun)
        put("name", _checks.text("name", self.name))
        put("num_workers", _checks.integer("num_workers", self.num_workers, minimum=1))
        put("num_evaluators", _checks.integer("num_evaluators", self.num_evaluators, minimum=0))
        _checks.choice("input_mode", self.input_mode, INPUT_MODES)
        if self.input_mode == "spark":
            _check_data(self.data)
        else:
            put("data", None)  # ignored, as it always was, when trainers read files themselves
        put("reservation_timeout", _checks.seconds("reservation_timeout", self.reservation_timeout))
        put("env", _checks.string_map("env", self.env))
        put("gpus_per_worker", _checks.optional_integer("gpus_per_worker", self.gpus_per_worker, minimum=0))
        put("heartbeat_interval", _checks.seconds("heartbeat_interval", self.heartbeat_interval))
        put("heartbeat_timeout", _checks.seconds("heartbeat_timeout", self.heartbeat_timeout))
        if self.heartbeat_interval >= self.heartbeat_timeout:
            raise _checks.refuse(
                "heartbeat_interval",
                self.heartbeat_interval,
                f"must be < heartbeat_timeout={self.heartbeat_timeout!r}, or every beat would time out",
            )
        put("max_result_bytes", _checks.integer("max_result_bytes", self.max_result_bytes, minimum=1))
        put("log", bool(self.log))
        put("tls", _tls_paths(self.tls))
        put("collective_timeout", _checks.seconds("collective_timeout", self.collective_timeout))
        put("work", _checks.optional_text("work", self.work))
        put("max_restarts", _checks.integer("max_restarts", self.max_restarts, minimum=0))
        put("restart_backoff", _checks.seconds("restart_backoff", self.restart_backoff, allow_zero=True))
        put("min_workers", _checks.optional_integer("min_workers", self.min_workers, minimum=1))
        _checks.check(
            self.min_workers is None or self.min_workers <= self.num_workers,
            "min_workers",
            self.min_workers,
            f"must be <= num_workers={self.num_workers}",
        )
        put("barrier_timeout", _checks.seconds("barrier_timeout", self.barrier_timeout))
        put("local", bool(self.local))
        if self.local and self.input_mode == "spark":
            raise _checks.refuse(
                "input_mode", self.input_mode, "a DataFrame feeds Spark tasks: not with local=True"
            )
        put("evaluator_roles", _evaluator_roles(self.evaluator_roles, self.num_evaluators))
        put("keep_results", bool(self.keep_results))
        put("release_tf_port", bool(self.release_tf_port))
        if self.local and self.keep_results:
            raise _checks.refuse(
                "keep_results", self.keep_results, "results stay on Spark executors: not with local=True"
            )
        put("callbacks", _callbacks(self.callbacks))

    @property
    def num_tasks(self) -> int:
        """Trainers in all: the chief, the workers and the evaluators."""
        return self.num_workers + self.num_evaluators


def _callbacks(value: Any) -> tuple[JobCallback, ...]:
    if isinstance(value, JobCallback):
        return (value,)
    given = tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else None
    if given is None or not all(isinstance(c, JobCallback) for c in given):
        need = "must be a list of JobCallback (sparktrain.cluster.callbacks), e.g. [MLflowCallback()]"
        raise _checks.refuse("callbacks", value, need)
    return given


def _check_data(data: Any) -> None:
    if data is None:
        raise _checks.refuse("data", data, "input_mode='spark' needs data=<a DataFrame>")
    from pyspark.sql import DataFrame

    _checks.instance("data", data, DataFrame, "a pyspark DataFrame for input_mode='spark'")


def _evaluator_roles(roles: object, num_evaluators: int) -> tuple[str, ...]:
    """``roles`` as a tuple of one role name per evaluator (or none at all)."""
    if roles is None:
        return ()
    if isinstance(roles, str | bytes) or not isinstance(roles, tuple | list):
        raise _checks.refuse("evaluator_roles", roles, "must be a list of role names, one per evaluator")
    names = tuple(roles)
    if names and len(names) != num_evaluators:
        raise _checks.refuse(
            "evaluator_roles", roles, f"names {len(names)} roles for num_evaluators={num_evaluators}"
        )
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise _checks.refuse("evaluator_roles", roles, f"{name!r} is not a role name such as 'ps'")
    return names


def _tls_paths(tls: object) -> tuple[str, ...] | None:
    """``(cert, key)`` or ``(cert, key, ca)`` as ``str`` paths; a None CA is left out."""
    if tls is None:
        return None
    if isinstance(tls, str | bytes) or not isinstance(tls, tuple | list) or len(tls) not in (2, 3):
        raise _checks.refuse("tls", tls, "must be (cert, key) or (cert, key, ca): paths of PEM files")
    if len(tls) == 3 and tls[2] is None:
        tls = tls[:2]
    paths = []
    for part, path in zip(("cert", "key", "ca"), tls, strict=False):
        text = os.fspath(path) if isinstance(path, str | os.PathLike) else None
        if not isinstance(text, str) or not text:
            raise _checks.refuse("tls", tls, f"its {part} must be the path of a PEM file, not {path!r}")
        paths.append(text)
    return tuple(paths)
