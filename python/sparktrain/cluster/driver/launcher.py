"""``Cluster.run``: the driver's side of a training job. Runs on the driver.

The driver hosts the rendezvous service, submits one barrier-mode Spark stage with a task per
trainer, and watches the job: it prints the trainers' output, turns the first failure (a
trainer that exits non-zero, is killed, stops responding, or whose task stops heart-beating)
into :class:`~sparktrain.errors.WorkerFailed`, and stops the stage at once (the trainers are
told through their heartbeats, and the Spark job group is cancelled).

A failure that a restart may cure (see :mod:`sparktrain.cluster.driver.restarts`) starts a new
generation of the job: once the old stage has ended and the cluster has a slot for every task
again, the stage is submitted anew, with a fresh secret that the old generation's stragglers
do not know. Trainers resume from the chief's latest checkpoint. ``wait()`` hands back the
chief's return value when every trainer of a generation has returned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import ipaddress
import logging
import os
import pickle
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from sparktrain import _spark, storage_options
from sparktrain._deps import SPARK_EXTRA, require, require_spark
from sparktrain._native import Event
from sparktrain.cluster.callbacks import JobCallback
from sparktrain.cluster.driver.conf import read_conf
from sparktrain.cluster.driver.console import Console
from sparktrain.cluster.driver.hooks import JobHooks
from sparktrain.cluster.driver.options import MAX_RESULT_BYTES, JobOptions
from sparktrain.cluster.driver.preflight import check_conf, local_gpus
from sparktrain.cluster.driver.restarts import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_RESTART_BACKOFF,
    Restart,
    backoff,
    describe,
    incurable,
    signature,
)
from sparktrain.cluster.driver.slots import ensure_slots
from sparktrain.cluster.driver.stage import run_fed_stage, run_stage
from sparktrain.cluster.driver.stragglers import METRIC as LINK_BUSY
from sparktrain.cluster.driver.stragglers import Straggler, slow_link
from sparktrain.cluster.driver.tokens import DelegationTokens
from sparktrain.cluster.failures import (
    parse_task_failure,
    raised_bad_input,
    spark_error_summary,
    worker_failed,
)
from sparktrain.cluster.settings import DEFAULT_BARRIER_TIMEOUT, JobSettings, role_names
from sparktrain.cluster.task.run import TaskIdentity, TaskResult, run_task
from sparktrain.errors import (
    ClosedError,
    ClusterError,
    InvalidArgumentError,
    RendezvousTimeout,
    SlotsUnavailable,
    WorkerFailed,
)

#: Seconds the driver waits for executors to offer enough task slots.
SLOT_GRACE_SECONDS = 20.0
#: How users call the launcher, for messages about a missing dependency.
_ENTRY_POINT = "sparktrain.Cluster.run"
#: Seconds the watcher waits for the rendezvous service's events at a time.
WATCH_POLL_SECONDS = 0.2
#: Polls of the rendezvous service that fail in a row before the watcher gives the job up:
#: about five seconds of a service that cannot be read.
MAX_WATCH_FAILURES = 25
#: Distinct watcher errors logged with their traceback; more of them are logged at DEBUG.
MAX_LOGGED_WATCH_ERRORS = 20

_log = logging.getLogger(__name__)
#: The addresses whose plain control plane was warned about; once per address is enough.
_warned_plain: set[str] = set()


class State(enum.Enum):
    """Where a job stands."""

    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SHUT_DOWN = "shut down"


def _reachable_from_other_hosts(ip: str) -> bool:
    """Whether a service bound to ``ip`` can be reached from other hosts (it is not loopback)."""
    try:
        return not ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return True


def warn_if_plain(ip: str, tls: bool) -> None:
    """Warns, once per address in this driver's log, that the control plane listens on a
    non-loopback ``ip`` without TLS: its traffic (registrations, heartbeats, trainer output)
    crosses the network unencrypted."""
    if tls or not _reachable_from_other_hosts(ip) or ip in _warned_plain:
        return
    _warned_plain.add(ip)
    _log.warning(
        "sparktrain's control plane listens on %s without TLS: its traffic crosses the network "
        "unencrypted (spark.sparktrain.tls.auto=false), and the job secret travels in the Spark "
        "task closure. On an untrusted network set spark.network.crypto.enabled=true and leave "
        "the control plane's TLS on.",
        ip,
    )


class Cluster:
    """A running job: ``wait()`` for the chief's return value, ``shutdown()`` to stop it,
    ``status()`` to look at it. Use it as a context manager to shut it down on the way out."""

    @classmethod
    def run(
        cls,
        sc: Any,
        main_fun: Callable[[Any, Any], Any] | str | os.PathLike[str],
        args: Any = None,
        num_workers: int = 1,
        *,
        num_evaluators: int = 0,
        input_mode: str = "files",
        data: Any = None,
        reservation_timeout: float = 120.0,
        env: dict[str, str] | None = None,
        gpus_per_worker: int | None = None,
        name: str | None = None,
        heartbeat_interval: float = 0.25,
        heartbeat_timeout: float = 10.0,
        max_result_bytes: int = MAX_RESULT_BYTES,
        log: bool = True,
        tls: tuple[str, ...] | None = None,
        collective_timeout: float = 120.0,
        work: str | None = None,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        restart_backoff: float = DEFAULT_RESTART_BACKOFF,
        min_workers: int | None = None,
        barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT,
        local: bool = False,
        evaluator_roles: Sequence[str] | None = None,
        keep_results: bool = False,
        release_tf_port: bool = True,
        callbacks: Sequence[JobCallback] = (),
    ) -> Cluster:
        """Starts ``main_fun(args, ctx)`` on ``num_workers`` training tasks (task 0 is the
        chief) and ``num_evaluators`` evaluators, one per Spark task slot, and returns at once.

        ``main_fun`` may also be the path of a ``.py`` file on the driver, run as ``__main__``
        in every trainer with ``args`` (a list of strings) as its command line, as ``torchrun``
        runs a script (:mod:`sparktrain.cluster.scripts`). Every trainer's environment holds
        ``TF_CONFIG`` and PyTorch's and JAX's variables, so that
        ``torch.distributed.init_process_group("gloo")`` and ``jax.distributed.initialize()``
        need no arguments (:mod:`sparktrain.cluster.trainer.frameworks`).

        ``sc`` is a SparkContext or SparkSession. ``input_mode="files"`` leaves input to the
        trainers (they read files themselves); ``input_mode="spark"`` feeds each trainer one
        partition of the DataFrame ``data`` as Arrow batches through ``ctx.feed()``.

        The control plane runs over TLS: by default with a certificate the driver makes for the
        job, which the tasks pin (it travels in the closure with the job secret), so no name
        or address needs to be known beforehand; ``spark.sparktrain.tls.auto=false`` turns
        that off. ``tls=(cert, key[, ca])`` (PEM files on the driver; or the
        ``spark.sparktrain.tls.*`` confs) serves it with the job's own certificate, which must
        name ``spark.driver.host``. Only public certificates travel to the tasks.

        ``work`` (a path or glob) makes the driver hand out its files one at a time, each epoch,
        to whichever trainer asks first (``ctx.trainer(...).fit(path, sharding="dynamic")``):
        fast trainers read more, and an epoch ends when its files are all taken.

        Recovery: a failure that a restart may cure (a trainer or executor that dies, a task
        that stops heart-beating, a trainer that stops responding, a broken collective, a user
        exception seen once) restarts the whole stage as a new generation, up to
        ``max_restarts`` times, after ``restart_backoff`` seconds (doubling each time). The new
        generation waits up to ``reservation_timeout`` for a task slot per trainer; with
        ``min_workers`` it starts with fewer training tasks (at least ``min_workers``) when the
        slots do not come back. Trainers see ``ctx.generation`` and resume from the chief's
        latest checkpoint (sparktrain's engine does it by itself). Errors no restart can fix
        end the job at once: see :mod:`sparktrain.cluster.driver.restarts`.

        ``ctx.barrier()`` and the barrier every trainer reaches after ``main_fun`` returns
        wait at most ``barrier_timeout`` seconds for the others.

        ``local=True`` runs the trainers on the driver's machine, started by the driver
        itself rather than by a Spark stage, with everything else the same (the rendezvous,
        the heartbeats, the output on the driver, restarts); ``gpus_per_worker`` then takes
        the driver's GPUs (``spark.driver.resource.gpu.*``).

        ``evaluator_roles`` names the part each evaluator task plays in logs and errors (one
        name per evaluator, e.g. ``["ps", "evaluator"]``: ``ps:0``, ``evaluator:0``); the
        trainers see them as evaluators all the same.

        ``keep_results=True`` leaves every task's return value on its executor instead of
        bringing it to the driver: :meth:`result_rdd` is then an RDD of them, one partition per
        task, and :meth:`wait` returns None. Use it for large results (predictions); they stay
        in the executors' block managers (memory, then local disk) while the RDD is referenced,
        and are lost with an executor that is lost.

        The port reserved for TensorFlow (``ctx.tasks[ctx.rank].tf_port``) is released just
        before ``main_fun`` starts. ``release_tf_port=False`` keeps it bound while
        ``main_fun`` runs, held by ``ctx.tf_port_socket``, so that no other process can take
        it meanwhile; ``main_fun`` calls ``ctx.release_tf_port()`` before its server binds it.

        ``callbacks`` (:class:`~sparktrain.cluster.callbacks.JobCallback`, such as
        :class:`sparktrain.tracking.MLflowCallback`) follow the job: their job hooks run on the
        driver, and every trainer gets them as ``ctx.callbacks`` (``ctx.trainer(...)`` hands
        them to the engine's ``fit``).

        Every argument is checked here, on the driver, before any Spark job starts:
        :class:`~sparktrain.errors.InvalidArgumentError` names the one at fault,
        :class:`~sparktrain.errors.MissingDependencyError` says when pyspark (or pandas, for
        ``input_mode="spark"``) is not installed, and
        :class:`~sparktrain.errors.ConfigurationError` says when the Spark conf cannot run the job
        (dynamic allocation on, GPUs the executors are not given; see ``sparktrain doctor``).
        """
        require_spark(_ENTRY_POINT, arrow_udfs=input_mode == "spark")
        options = JobOptions(
            main_fun=main_fun,
            name=name or f"sparktrain-{uuid.uuid4().hex[:8]}",
            args=args,
            num_workers=num_workers,
            num_evaluators=num_evaluators,
            input_mode=input_mode,
            data=data,
            reservation_timeout=reservation_timeout,
            env={} if env is None else env,
            gpus_per_worker=gpus_per_worker,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            max_result_bytes=max_result_bytes,
            log=log,
            tls=tls,
            collective_timeout=collective_timeout,
            work=work,
            max_restarts=max_restarts,
            restart_backoff=restart_backoff,
            min_workers=min_workers,
            barrier_timeout=barrier_timeout,
            local=local,
            evaluator_roles=evaluator_roles,
            keep_results=keep_results,
            release_tf_port=release_tf_port,
            callbacks=tuple(callbacks),
        )
        return cls(_spark.context(sc), options)

    def __init__(self, sc: Any, options: JobOptions) -> None:
        """Starts the job described by ``options`` on ``sc``; use :meth:`run`."""
        cloudpickle = require("pyspark.cloudpickle", extra=SPARK_EXTRA, needed_by=_ENTRY_POINT)

        from sparktrain._native import Rendezvous, generate_secret, job_certificate

        self.name = options.name
        self._sc = sc
        self._options = options
        self._num_tasks = options.num_tasks
        self._roles = role_names(options.num_workers, options.num_evaluators, options.evaluator_roles or ())
        # A bad conf fails at once, not after the wait for slots.
        spark_conf = sc.getConf()
        # Local mode's GPUs are the driver's, checked below, not those Spark gives its tasks.
        conf = read_conf(spark_conf, options.tls, None if options.local else options.gpus_per_worker)
        self._local_gpus: list[tuple[str, ...]] = []
        if options.local:
            self._local_gpus = local_gpus(sc, options)
        else:
            check_conf(sc, spark_conf, options)
            ensure_slots(sc, self._num_tasks, SLOT_GRACE_SECONDS)

        host = conf.host or socket.gethostname()
        secret = generate_secret()
        cert_pem, key_pem, ca_pem = conf.tls
        tls_domain = None
        if cert_pem is None and conf.auto_tls:
            # A certificate of this job's own, which its tasks pin: they get it in the closure.
            cert_pem, key_pem, tls_domain = job_certificate()
            ca_pem = cert_pem
        bind_ip = socket.gethostbyname(host)
        warn_if_plain(bind_ip, tls=cert_pem is not None)
        self._server = Rendezvous(
            bind_ip,
            conf.ports[0],
            conf.ports[1],
            secret,
            options.num_workers,
            options.num_evaluators,
            options.reservation_timeout,
            options.heartbeat_timeout,
            cert_pem,
            key_pem,
        )
        # Before the settings: they say whether the trainers get the driver's tokens.
        try:
            self._tokens = DelegationTokens.start(sc, self._server.set_tokens)
        except BaseException:
            self._server.close()
            raise
        # The session's object-store keys, applied here first: the work list below is read
        # by this process.
        storage = storage_options.of_session(sc)
        if options.work is not None:
            from sparktrain.fs import expand_inputs

            self._server.set_work([(f.path, f.size) for f in expand_inputs(options.work)])
        port = self._server.address.rsplit(":", 1)[1]
        self._settings = JobSettings(
            address=f"{host}:{port}",
            secret=secret,
            num_workers=options.num_workers,
            num_evaluators=options.num_evaluators,
            function=cloudpickle.dumps((options.main_fun, options.args)),
            env=dict(options.env),
            default_fs=sc._jsc.hadoopConfiguration().get("fs.defaultFS") or "file:///",
            reservation_timeout=options.reservation_timeout,
            heartbeat_interval=options.heartbeat_interval,
            heartbeat_timeout=options.heartbeat_timeout,
            max_result_bytes=options.max_result_bytes,
            gpus_per_worker=options.gpus_per_worker,
            tls_ca=ca_pem,
            tls_domain=tls_domain,
            collective_timeout=options.collective_timeout,
            collective_streams=conf.collective_streams,
            collective_chunk_bytes=conf.collective_chunk_bytes,
            collective_sealed=conf.collective_sealed,
            collective_local=conf.collective_local,
            barrier_timeout=options.barrier_timeout,
            storage=storage,
            evaluator_roles=tuple(options.evaluator_roles or ()),
            job_id=uuid.uuid4().hex,
            release_tf_port=options.release_tf_port,
            hadoop_tokens=self._tokens is not None,
        )
        try:
            # The callbacks' driver hooks run from here on; what they learn travels to the trainers.
            self._hooks = JobHooks.start(options, sc)
            self._settings = self._hooks.bind(self._settings, cloudpickle)
        except BaseException:
            self._stop_tokens()
            self._server.close()
            raise
        self._deadline = time.monotonic() + options.reservation_timeout
        self._console = Console(self._roles, enabled=options.log)
        self._lock = threading.Lock()
        self._state = State.STARTING
        #: The job's final failure.
        self._failure: ClusterError | None = None
        #: The current generation's first failure, and when it was detected (``time.time()``).
        self._cause: ClusterError | None = None
        self._cause_at = 0.0
        self._restarts: list[Restart] = []
        self._last_signature: tuple[str, int | None] | None = None
        self._results: list[Any] | None = None
        #: The tasks' ``(rank, pickled value)`` pairs left on the executors (``keep_results``).
        self._kept: Any = None
        self._hosts: dict[int, str] = {}
        self._exits: dict[int, int] = {}
        self._exit_times: dict[int, float] = {}
        self._metrics: dict[int, dict[str, Any]] = {}
        #: The task the step-time report last named as holding the ring back (logged once).
        self._named_straggler: int | None = None
        self._finished = threading.Event()
        self._stage_done = threading.Event()
        self._shut_down = threading.Event()
        self._watch_errors: set[tuple[str, str]] = set()
        name = options.name
        self._stage = threading.Thread(
            target=self._run_generations, args=(options.data,), name=name, daemon=True
        )
        self._watch = threading.Thread(target=self._watch_events, name=f"{name}-watch", daemon=True)
        self._stage.start()
        self._watch.start()

    @property
    def generation(self) -> int:
        """The generation running now: 0, then one more after each restart."""
        return self._settings.generation

    def _job_group(self) -> str:
        """The Spark job group of the current generation's stage."""
        return f"{self.name}-g{self._settings.generation}"

    # --- the Spark stage, generation after generation ---------------------------------

    def _run_generations(self, data: Any) -> None:
        """Runs the stage until it succeeds, the job is shut down, or it fails in a way no
        restart cures (or no restart is left)."""
        try:
            while True:
                try:
                    results = self._run_stage(data)
                except BaseException as e:  # reported through wait(), or restarted
                    failure = self._generation_failure(e)
                    if self._shut_down.is_set() or not self._try_restart(failure):
                        self._set_failed(failure, e)
                        return
                    continue
                if self._options.keep_results:
                    self._kept = results
                    self._set_results([None] * self._num_tasks)
                    return
                by_rank = sorted(results, key=lambda r: r.rank)
                self._set_results([pickle.loads(r.value) for r in by_rank])
                return
        finally:
            self._stage_done.set()
            self._stop_tokens()
            self._hooks.on_job_end(self._outcome_error())
            self._finished.set()

    def _outcome_error(self) -> BaseException | None:
        """The job's failure as its callbacks are told it: None once it succeeded."""
        if self._failure is None and self._state is State.SHUT_DOWN:
            return ClusterError(f"{self.name} was shut down before it finished")
        return self._failure

    def _run_stage(self, data: Any) -> Any:
        """Runs the current generation's stage; returns the tasks' results, or with
        ``keep_results`` an RDD of ``(rank, pickled value)`` checkpointed on the executors."""
        settings = self._settings
        keep = self._options.keep_results
        if self._options.local:
            return self._run_local_stage()
        with _spark.job_group(self._sc, self._job_group(), f"sparktrain job {self.name}"):
            if data is not None:
                return run_fed_stage(data, self._num_tasks, settings, keep=keep)
            return run_stage(self._sc, self._num_tasks, settings, keep=keep)

    def _run_local_stage(self) -> list[TaskResult]:
        """Local mode: the driver runs every task itself, one thread each, with the same task
        body as an executor's (registration, trainer process, heartbeats, supervision). The
        first task to fail aborts the others, as Spark does with a barrier stage."""
        settings = self._settings
        n = self._num_tasks
        host = settings.address.rsplit(":", 1)[0]
        cpus = max(1, (os.cpu_count() or 1) // n)
        results: list[TaskResult | None] = [None] * n
        errors: list[BaseException] = []

        def one(rank: int) -> None:
            gpus = self._local_gpus[rank] if self._local_gpus else ()
            identity = TaskIdentity(rank=rank, attempt=0, executor_address=f"{host}:0", cpus=cpus, gpus=gpus)
            try:
                results[rank] = run_task(settings, identity=identity)
            except BaseException as e:
                with self._lock:
                    errors.append(e)
                first_line = str(e).split("\n", 1)[0] or repr(e)
                with contextlib.suppress(Exception):
                    self._server.abort(f"{self._roles[rank]} failed: {first_line}")

        threads = [
            threading.Thread(target=one, args=(rank,), name=f"{self.name}-task{rank}", daemon=True)
            for rank in range(n)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]

    def _set_results(self, results: list[Any]) -> None:
        with self._lock:
            self._results = results
            if self._state in (State.STARTING, State.RUNNING):
                self._state = State.SUCCEEDED

    def _set_failed(self, failure: ClusterError, error: BaseException) -> None:
        with self._lock:
            if self._state is State.SHUT_DOWN:
                return
            self._failure = failure
            if failure is not error and failure.__cause__ is None:
                failure.__cause__ = error
            self._state = State.FAILED

    def _generation_failure(self, error: BaseException) -> ClusterError:
        """Why the current generation's stage failed: the failure the watcher detected, or,
        when no trainer reported one, Spark's error."""
        # The watcher usually has the real cause already (the trainer's exit arrives before
        # the task fails); give it a moment before falling back to Spark's error.
        patience = time.monotonic() + 2.0
        while self._cause is None and time.monotonic() < patience and not self._shut_down.is_set():
            time.sleep(0.05)
        with self._lock:
            if self._cause is None and isinstance(error, ClusterError):
                self._cause = error  # a local task's own failure, already in sparktrain's terms
            elif self._cause is None:
                self._cause = self._spark_task_failure(error)
                self._cause.__cause__ = error
                self._cause_at = time.time()
            return self._cause

    def _try_restart(self, failure: ClusterError) -> bool:
        """:meth:`_restart`, where an error while restarting (Spark or the rendezvous service
        failing) ends the job with ``failure`` rather than leaving it without an outcome."""
        try:
            return self._restart(failure)
        except Exception:
            _log.exception("%s could not be restarted; it fails with its generation's failure", self.name)
            return False

    def _restart(self, failure: ClusterError) -> bool:
        """Starts the next generation after ``failure`` when a restart may cure it and one is
        left; False when the job must fail with it."""
        options = self._options
        step = self._last_step()
        now = signature(failure, step)
        why_not = incurable(failure, self._last_signature, now)
        if why_not is None and not self._watch.is_alive():
            why_not = "the driver no longer watches the job (see the error above)"
        if why_not is None and len(self._restarts) >= options.max_restarts:
            why_not = f"its {options.max_restarts} restarts (max_restarts) are used up"
        cause = describe(failure)
        if why_not is not None:
            if options.max_restarts > 0:
                _log.error("%s failed and is not restarted (%s): %s", self.name, why_not, cause)
            return False
        self._last_signature = now
        number = len(self._restarts) + 1
        _log.warning(
            "%s: generation %d failed: %s; restart %d of %d",
            self.name,
            self._settings.generation,
            cause,
            number,
            options.max_restarts,
        )
        with self._lock:
            if self._state is State.SHUT_DOWN:
                return False
            self._state = State.RESTARTING
        if self._shut_down.wait(backoff(number, options.restart_backoff)):
            return False
        num_workers = self._await_slots()
        if num_workers is None or self._shut_down.is_set():
            return False
        from sparktrain._native import generate_secret

        secret = generate_secret()
        generation = self._server.new_generation(secret, num_workers, options.num_evaluators)
        restart = Restart(
            generation=self._settings.generation,
            cause=cause,
            detected_at=self._cause_at,
            resubmitted_at=time.time(),
            last_step=step,
        )
        self._hooks.on_restart(restart)
        with self._lock:
            self._restarts.append(restart)
            self._settings = dataclasses.replace(
                self._settings, secret=secret, generation=generation, num_workers=num_workers
            )
            self._num_tasks = num_workers + options.num_evaluators
            self._roles = role_names(num_workers, options.num_evaluators, options.evaluator_roles or ())
            self._console.roles = self._roles
            self._hosts, self._exits, self._exit_times, self._metrics = {}, {}, {}, {}
            self._named_straggler = None
            self._cause = None
            self._deadline = time.monotonic() + options.reservation_timeout
            self._state = State.STARTING
        return True

    def _await_slots(self) -> int | None:
        """Waits up to ``reservation_timeout`` for a task slot per trainer of the original
        job; returns how many training tasks the next generation has: all of them, or, with
        ``min_workers``, as many as the free slots allow (at least ``min_workers``). None when
        the slots do not come back (the job then fails with the generation's failure)."""
        options = self._options
        if options.local:
            return options.num_workers  # the driver runs the trainers itself
        try:
            ensure_slots(self._sc, options.num_tasks, options.reservation_timeout)
            return options.num_workers
        except SlotsUnavailable as e:
            if options.min_workers is None:
                _log.error("%s cannot restart: %s", self.name, e)
                return None
            fits = e.available - options.num_evaluators
            if fits < options.min_workers:
                _log.error("%s cannot restart with min_workers=%d: %s", self.name, options.min_workers, e)
                return None
            _log.warning(
                "%s restarts with %d of its %d training tasks (min_workers=%d): only %d task slots came back",
                self.name,
                fits,
                options.num_workers,
                options.min_workers,
                fits + options.num_evaluators,
            )
            return fits

    def _last_step(self) -> int | None:
        """The latest step any trainer of this generation reported."""
        # A copy taken in one go: the watcher thread adds entries meanwhile.
        reported = list(self._metrics.values())
        steps = [m["step"] for m in reported if m.get("step") is not None]
        return max(steps) if steps else None

    def _spark_task_failure(self, error: BaseException) -> ClusterError:
        """The error for a stage that Spark failed before any trainer reported: WorkerFailed
        naming the task when Spark's message names a failed barrier task (its Python worker or
        executor died), else the Spark error itself."""
        text = str(error)
        task = parse_task_failure(text)
        if task is None or task.task_index >= self._num_tasks:
            summary = spark_error_summary(text) or repr(error)
            # A task feeding the trainers that met bad input: no restart reads it otherwise.
            return ClusterError(
                f"the Spark job of {self.name} failed: {summary}", bad_input=raised_bad_input(text)
            )
        what = "lost its Spark task" + (f": {task.cause}" if task.cause else "")
        return self._worker_failed(task.task_index, None, "", what)

    # --- watching the job ------------------------------------------------------------

    def _watch_events(self) -> None:
        """Handles the rendezvous service's events until the job ends or is shut down.
        Failure detection depends on it, so it never stops silently: an error handling an
        event is logged and the next event handled, and a service that cannot be read
        :data:`MAX_WATCH_FAILURES` times in a row fails the job with a ClusterError."""
        failures = 0
        try:
            while True:
                try:
                    if self._watch_once():
                        return
                    failures = 0
                except Exception as e:
                    failures += 1
                    self._watch_error(e)
                    if failures >= MAX_WATCH_FAILURES:
                        self._fail(
                            ClusterError(
                                f"the driver lost track of {self.name}: its rendezvous service "
                                f"failed {failures} times in a row ({e!r}); see the driver's log"
                            )
                        )
                        return
                    time.sleep(WATCH_POLL_SECONDS)
        finally:
            try:
                self._console.done()
            except Exception as e:
                self._watch_error(e)

    def _watch_once(self) -> bool:
        """One poll of the rendezvous service; True when there is nothing left to watch."""
        generation, events = self._server.poll(WATCH_POLL_SECONDS)
        self._handle(generation, events)
        if self._state is State.STARTING and time.monotonic() > self._deadline:
            missing = self._server.missing()
            if missing:
                total = self._num_tasks
                self._fail(
                    RendezvousTimeout(
                        f"{len(missing)} of {total} tasks never registered: {missing}",
                        missing=missing,
                        total=total,
                    )
                )
        if self._stage_done.is_set():
            # Every task sent its last output and exit before its Spark task ended.
            while True:
                generation, events = self._server.poll(0.0)
                if not events:
                    return True
                self._handle(generation, events)
        return self._state is State.SHUT_DOWN

    def _handle(self, generation: int, events: list[Event]) -> None:
        """Handles each event of ``generation``; one that fails is logged and does not keep
        the others (an exit among them, perhaps) from being handled. Events of a generation
        the driver has moved past are dropped."""
        if generation != self._settings.generation:
            return
        for event in events:
            try:
                self._on_event(event)
            except Exception as e:
                self._watch_error(e)

    def _watch_error(self, error: Exception) -> None:
        """Logs an error of the watcher: with its traceback the first time, at DEBUG after
        that, so a failing console does not flood the log with one error per line."""
        key = (type(error).__name__, str(error)[:200])
        if key in self._watch_errors or len(self._watch_errors) >= MAX_LOGGED_WATCH_ERRORS:
            _log.debug("the watcher of %s failed again; it goes on", self.name, exc_info=error)
            return
        self._watch_errors.add(key)
        _log.error("the watcher of %s failed; it goes on watching the job", self.name, exc_info=error)

    def _on_event(self, event: Event) -> None:
        match event:
            case Event.Registered(task_index=rank, host=host):
                if rank in self._hosts:
                    # Spark retried the task: its first attempt (executor, Python worker,
                    # trainer) died without a word.
                    what = "lost its Spark task (the executor or its Python worker died) and Spark retried it"
                    self._fail(self._worker_failed(rank, None, "", what))
                self._hosts[rank] = host
            case Event.Ready():
                with self._lock:
                    if self._state is State.STARTING:
                        self._state = State.RUNNING
            case Event.Log(task_index=rank, stream=stream, text=text):
                self._console.line(rank, stream, text)
            case Event.Metrics(task_index=rank, step=step, metrics=pairs):
                metrics = dict(pairs)
                if "resumed_from" in metrics:
                    self._resumed(int(metrics.pop("resumed_from")))
                    if not metrics:
                        return
                self._metrics[rank] = {"step": step, **metrics}
                self._console.metrics(rank, step, metrics)
                if LINK_BUSY in metrics:
                    self._log_straggler()
            case Event.Exited(task_index=rank, exit_code=code, stderr_tail=tail):
                self._exits[rank] = code
                self._exit_times[rank] = time.time()
                if code != 0:
                    self._fail(self._worker_failed(rank, code, tail))
            case Event.Lost(task_index=rank, silent_for=silent):
                what = f"stopped heart-beating ({silent:.1f} s without a word)"
                self._fail(self._worker_failed(rank, None, "", what))

    def _straggler(self) -> Straggler | None:
        """The training task whose host holds the ring back, if one stands out (see
        :mod:`sparktrain.cluster.driver.stragglers`)."""
        reported = list(self._metrics.items())
        busy = {rank: float(m[LINK_BUSY]) for rank, m in reported if LINK_BUSY in m}
        return slow_link(busy, self._settings.num_workers)

    def _log_straggler(self) -> None:
        """Logs the straggler when the report first names it (or names another)."""
        found = self._straggler()
        if found is None or found.task_index == self._named_straggler:
            return
        self._named_straggler = found.task_index
        host = self._hosts.get(found.task_index, "an unknown host")
        _log.warning("%s: %s", self.name, found.describe(self._roles[found.task_index], host))

    def _resumed(self, step: int) -> None:
        """Records the step the current generation resumed from, on the restart before it."""
        with self._lock:
            if self._restarts and self._restarts[-1].resumed_from is None:
                self._restarts[-1] = dataclasses.replace(self._restarts[-1], resumed_from=step)

    def _worker_failed(self, rank: int, code: int | None, tail: str, what: str | None = None) -> WorkerFailed:
        """The error for task ``rank``'s trainer (see :func:`~sparktrain.cluster.failures.worker_failed`)."""
        host = self._hosts.get(rank, "an unknown host")
        return worker_failed(rank, self._roles[rank], host, returncode=code, stderr_tail=tail, what=what)

    def _fail(self, failure: ClusterError) -> None:
        """Records the current generation's first failure and stops its stage; the stage
        thread then restarts the job or fails it."""
        with self._lock:
            if self._cause is not None or self._state in (State.SUCCEEDED, State.SHUT_DOWN, State.FAILED):
                return
            self._cause = failure
            self._cause_at = time.time()
        self._stop_tasks(str(failure).split("\n", 1)[0])

    def _stop_tasks(self, reason: str) -> None:
        """Tells the trainers to stop and cancels the Spark stage; either failing is logged and
        does not keep the other from being tried."""
        stops: list[tuple[str, Callable[[], object]]] = [
            ("abort the trainers", lambda: self._server.abort(reason)),
            ("cancel the Spark stage", lambda: _spark.cancel(self._sc, self._job_group())),
        ]
        for what, stop in stops:
            try:
                stop()
            except Exception:
                _log.exception("could not %s of %s after it failed", what, self.name)

    # --- the public handle -----------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` of the job's rendezvous service."""
        return self._settings.address

    def wait(self, timeout: float | None = None) -> Any:
        """Waits for the job; returns the chief's return value.

        Raises :class:`~sparktrain.errors.WorkerFailed` (or another
        :class:`~sparktrain.errors.ClusterError`) when the job failed, and ``TimeoutError``
        when ``timeout`` seconds pass first (the job keeps running)."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"{self.name} is still running after {timeout} s")
        # Let Spark wind the stage down, so the next job finds free slots.
        self._stage.join(30.0)
        self._watch.join(5.0)
        if self._failure is not None:
            raise self._failure
        if self._state is State.SHUT_DOWN:
            raise ClusterError(f"{self.name} was shut down before it finished")
        assert self._results is not None
        if not self._results:
            # Spark gives a DataFrame with no rows no partition to feed, so no task ran.
            raise ClusterError(
                f"{self.name} ran no task: the data it was fed (DataFrame or RDD) holds no rows"
            )
        return self._results[0]

    def results(self) -> list[Any]:
        """Every task's return value by task index, once the job has succeeded."""
        self.wait()
        if self._options.keep_results:
            raise InvalidArgumentError(
                "keep_results=True left the results on the executors: use result_rdd()"
            )
        assert self._results is not None
        return list(self._results)

    def result_rdd(self) -> Any:
        """With ``keep_results=True``: an RDD of every task's return value, partition ``i``
        holding task ``i``'s, read where the tasks left them (nothing passes through the
        driver). Waits for the job like :meth:`wait`."""
        self.wait()
        if not self._options.keep_results:
            raise InvalidArgumentError("result_rdd() needs Cluster.run(..., keep_results=True)")
        return self._kept.map(lambda pair: pickle.loads(pair[1]), preservesPartitioning=True)

    def shutdown(self) -> None:
        """Stops the job (if it still runs): trainers are stopped and the stage cancelled."""
        with self._lock:
            running = self._state in (State.STARTING, State.RUNNING, State.RESTARTING)
            if running:
                self._state = State.SHUT_DOWN
        if running:
            self._shut_down.set()
            self._server.abort(f"{self.name} was shut down by the driver")
            _spark.cancel(self._sc, self._job_group())
            self._finished.set()
            self._stage.join(30.0)
        self._watch.join(5.0)
        self._stop_tokens()
        self._server.close()

    def _stop_tokens(self) -> None:
        """Stops renewing the trainers' delegation tokens: the job is over."""
        if self._tokens is not None:
            self._tokens.stop()

    @property
    def restarts(self) -> list[Restart]:
        """The restarts so far, oldest first: which generation failed, why, and when."""
        with self._lock:
            return list(self._restarts)

    def status(self) -> dict[str, Any]:
        """The job's state and generation, its restarts, which tasks of the current generation
        registered and exited, each task's latest metrics, the straggler (the trainer whose
        host holds the ring back, when one stands out: its ``role``, ``host``, ``link_busy``
        and the other hosts' ``others``; see :mod:`sparktrain.cluster.driver.stragglers`), and
        the calls the control plane refused (the latest ones, and how many in all). While a
        restart waits for its back-off or its task slots, ``restarting`` holds its ``cause``
        and when it was ``detected_at``; otherwise it is None."""
        with self._lock:
            straggler = self._straggler()
            return {
                "name": self.name,
                "state": self._state.value,
                "generation": self._settings.generation,
                "restarts": [
                    dict(dataclasses.asdict(r), steps_redone=r.steps_redone) for r in self._restarts
                ],
                # A restart waiting keeps its generation's failure as the cause until it starts.
                "restarting": {"cause": describe(self._cause), "detected_at": self._cause_at}
                if self._state is State.RESTARTING and self._cause is not None
                else None,
                "registered": sorted(self._hosts),
                "hosts": {self._roles[r]: h for r, h in self._hosts.items()},
                "exit_codes": dict(self._exits),
                "exited_at": dict(self._exit_times),
                "metrics": {self._roles[r]: dict(m) for r, m in self._metrics.items()},
                "straggler": None
                if straggler is None
                else {
                    "role": self._roles[straggler.task_index],
                    "host": self._hosts.get(straggler.task_index),
                    "link_busy": straggler.link_busy,
                    "others": straggler.others,
                },
                "failure": str(self._failure) if self._failure else None,
                "refused": self._refused(),
                "refused_total": self._refused_total(),
            }

    def _refused(self) -> list[str]:
        try:
            return self._server.refused()
        except ClosedError:
            return []

    def _refused_total(self) -> int:
        try:
            return self._server.refused_total()
        except ClosedError:
            return 0

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
