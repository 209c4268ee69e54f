"""A real Spark standalone cluster for chaos tests: one Master and N Worker JVMs on 127.0.0.1.

``local-cluster[...]`` hides its Master and Workers inside the driver JVM, so a test cannot kill
a Worker or watch the Master replace a lost executor. This harness starts them as separate
processes from the pyspark wheel's ``bin/spark-class`` instead, each in its own process group,
and finds the executor JVMs (and anything they start, such as trainer processes) through
``/proc``, so a test can SIGKILL exactly the processes of its own cluster::

    with StandaloneCluster(workers=3) as cluster:
        spark = cluster.session("chaos")
        ...
        os.kill(cluster.executor_pids()[0], signal.SIGKILL)
        cluster.wait_for_executors(spark, 3)

Everything (logs, the Workers' directories, the executors' local dirs) lives under ``work_dir``;
a temporary one is removed by :meth:`StandaloneCluster.stop` unless the ``with`` block failed,
so the logs of a failed test stay behind for a look (:meth:`StandaloneCluster.log_tail`).
Linux only: processes are found through ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING

from harness.spark import sparktrain_jar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# What the Master logs once it accepts Workers, and what each Worker logs once it is accepted.
_MASTER_URL_LINE = "Starting Spark master at "
_MASTER_READY_LINE = "I have been elected leader"
_WORKER_READY_LINE = "Successfully registered with master"

_LOG_TAIL_LINES = 40
_STOP_GRACE_S = 15.0
_POLL_S = 0.2


def _free_port() -> int:
    """A port nothing listens on right now; the JVM binds it a moment later (a small race, but
    the Master's actual port is read back from its log, so only the web UI ports could collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _argv(pid: int) -> list[str]:
    """``pid``'s command line; empty for a vanished process, a zombie or a kernel thread."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")[:-1]


def _cmdline(pid: int) -> str:
    return " ".join(_argv(pid))


def _stat(pid: int) -> tuple[int, int, int] | None:
    """``(ppid, start time, process group)`` of ``pid``, or None once it is gone or a zombie (a
    SIGKILLed child of a dead Worker stays one until init reaps it). The start time tells a
    process from a later one that reused its pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[19]), int(fields[2])


def _alive(pid: int, start: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] == start


def _wait_gone(procs: dict[int, int], deadline: float) -> None:
    """Waits until none of ``{pid: start time}`` runs any more, or until ``deadline``."""
    while any(_alive(pid, start) for pid, start in procs.items()) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


def _group_members(pgid: int) -> dict[int, int]:
    """``{pid: start time}`` of the live processes in process group ``pgid``."""
    members: dict[int, int] = {}
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None and stat[2] == pgid:
            members[pid] = stat[1]
    return members


def _arg(cmdline: list[str], flag: str) -> str | None:
    """The value after ``flag`` in a split command line, if there is one."""
    if flag in cmdline[:-1]:
        return cmdline[cmdline.index(flag) + 1]
    return None


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


class StandaloneCluster:
    """Context manager for one standalone Master and ``workers`` Workers on 127.0.0.1.

    Each Worker offers ``cores_per_worker`` cores and ``memory_mb`` MiB; :meth:`session` asks
    for one executor of ``cores_per_worker`` cores per Worker, so with the defaults every Worker
    runs exactly one executor and a lost executor is relaunched on the same Worker.
    """

    def __init__(
        self,
        workers: int = 3,
        cores_per_worker: int = 1,
        memory_mb: int = 1024,
        work_dir: Path | None = None,
        *,
        start_timeout: float = 60.0,
        separate_hosts: bool = False,
    ) -> None:
        self.workers = workers
        #: Each Worker (and its executors) on an address of its own, 127.0.0.2, 127.0.0.3, ...:
        #: to Spark they are different hosts, which speculation needs (it never runs a copy
        #: of a task on the host of the original attempt). All of 127.0.0.0/8 is loopback.
        self.separate_hosts = separate_hosts
        self.cores_per_worker = cores_per_worker
        self.memory_mb = memory_mb
        self.start_timeout = start_timeout
        self._own_work_dir = work_dir is None
        self._work_dir = work_dir
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes] | None] = []
        self._logs: list[IO[bytes]] = []
        self._master_url: str | None = None
        self._sessions: list[SparkSession] = []

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Keep the logs of a failed test; a passing one leaves nothing behind.
        self.stop(remove_work_dir=exc is None)

    @property
    def work_dir(self) -> Path:
        """Logs (``master.log``, ``worker-<i>.log``), Worker dirs (``worker-<i>/``, which hold
        each executor's stdout and stderr) and the executors' local dirs (``local/``)."""
        if self._work_dir is None:
            raise RuntimeError("StandaloneCluster is not started")
        return self._work_dir

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, as the Master itself reports it."""
        if self._master_url is None:
            raise RuntimeError("StandaloneCluster is not started")
        return self._master_url

    def start(self) -> None:
        """Starts the Master, then all Workers, and returns once every Worker is registered;
        raises RuntimeError with the log's tail if that takes longer than ``start_timeout``."""
        if self._master is not None:
            raise RuntimeError("StandaloneCluster already started")
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="sparktrain-standalone-"))
        self._work_dir.mkdir(parents=True, exist_ok=True)
        try:
            env = self._env()
            deadline = time.monotonic() + self.start_timeout
            args = [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(_free_port())]
            args += ["--webui-port", str(_free_port())]
            self._master = self._spawn("master", args, env)
            self._wait_for_line("master", self._master, _MASTER_READY_LINE, deadline)
            self._master_url = self._read_master_url()
            # All Workers start at once: each JVM takes seconds to come up, and they are independent.
            for i in range(self.workers):
                worker_dir = self._work_dir / f"worker-{i}"
                worker_dir.mkdir(exist_ok=True)
                host = f"127.0.0.{i + 2}" if self.separate_hosts else "127.0.0.1"
                args = [WORKER_CLASS, self._master_url, "--host", host]
                args += ["--cores", str(self.cores_per_worker), "--memory", f"{self.memory_mb}m"]
                args += ["--webui-port", str(_free_port()), "--work-dir", str(worker_dir)]
                # Executors inherit it, and bind and report that address.
                self._workers.append(self._spawn(f"worker-{i}", args, {**env, "SPARK_LOCAL_IP": host}))
            for i, proc in enumerate(self._workers):
                assert proc is not None
                self._wait_for_line(f"worker-{i}", proc, _WORKER_READY_LINE, deadline)
        except BaseException:
            # Nobody will use a half-started cluster; keep its logs for the error message reader.
            self.stop(remove_work_dir=False)
            raise

    def stop(self, remove_work_dir: bool = True) -> None:
        """Stops this cluster's sessions, then SIGTERMs every process group it started, SIGKILLs
        what is left after a grace period, and also SIGKILLs descendants that had left those
        groups (trainer processes start their own sessions). Idempotent."""
        for session in self._sessions:
            with contextlib.suppress(Exception):
                session.stop()
        self._sessions.clear()
        # Taken before anything dies: once an executor is gone its children are reparented and
        # can no longer be told apart from other tests' processes.
        strays = self._descendant_stats(lambda _cmd: True)
        procs = [p for p in [*self._workers, self._master] if p is not None]
        # All at once: a Worker whose Master went first would only log reconnection attempts.
        for proc in procs:
            self._signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal_group(proc, signal.SIGKILL)
                proc.wait()
        for pid, start in strays.items():
            # Only the very process seen above, never one that reused its pid since.
            if _alive(pid, start):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        # An orphaned executor (its Worker gone first) may take a moment to exit.
        _wait_gone(strays, time.monotonic() + _STOP_GRACE_S)
        for log in self._logs:
            log.close()
        self._logs.clear()
        self._master = None
        self._workers = []
        self._master_url = None
        if remove_work_dir and self._own_work_dir and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None

    # -- sessions ---------------------------------------------------------------------------------

    def session(self, app_name: str, conf: dict[str, str] | None = None) -> SparkSession:
        """A new session on this cluster: one executor of ``cores_per_worker`` cores and 512 MiB
        per Worker, the sparktrain jar on the classpath, executors running this interpreter.
        ``conf`` comes last and so overrides any of these. Returns once every executor has
        registered, so a barrier job can be scheduled at once. :meth:`stop` stops it."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        active = SparkContext._active_spark_context
        if active is not None:
            # getOrCreate() would hand back the old context, on whatever master it runs.
            raise RuntimeError(f"a SparkContext on {active.master} is still running; stop it first")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings = {
            "spark.jars": str(sparktrain_jar()),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.cores": str(self.cores_per_worker),
            "spark.cores.max": str(self.workers * self.cores_per_worker),
            "spark.executor.memory": "512m",
            "spark.executorEnv.TF_CPP_MIN_LOG_LEVEL": "2",
            **(conf or {}),
        }
        builder = SparkSession.builder.master(self.master_url).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        self._sessions.append(session)
        session.sparkContext.setLogLevel("ERROR")
        cores = int(settings["spark.cores.max"]) // int(settings["spark.executor.cores"])
        self.wait_for_executors(session, min(cores, self.workers))
        return session

    def wait_for_executors(self, session: SparkSession, count: int, timeout: float = 60.0) -> None:
        """Waits until the driver knows ``count`` executors or more, all of them live JVMs here.

        A JVM in :meth:`executor_pids` is not yet an executor the scheduler can use, and after a
        SIGKILL the driver keeps counting the dead executor until it notices the lost connection;
        a barrier stage submitted meanwhile fails its slot check and retries only every 15 s
        (``spark.scheduler.barrier.maxConcurrentTasksCheck.interval``)."""
        deadline = time.monotonic() + timeout
        while True:
            registered = self.registered_executors(session)
            live = set(self.executors(session))
            if len(registered) >= count and registered <= live:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"after {timeout:.0f}s the driver knows executors {sorted(registered)}, "
                    f"the live ones are {sorted(live)}, {count} wanted; master log:\n"
                    f"{self.log_tail('master')}"
                )
            time.sleep(_POLL_S)

    @staticmethod
    def registered_executors(session: SparkSession) -> set[str]:
        """IDs of the executors the driver currently knows of (live or not yet noticed dead)."""
        jsc = session.sparkContext._jsc
        assert jsc is not None
        # private[spark] in Scala, but public in the bytecode, and so to py4j.
        return {i for i in jsc.sc().getExecutorIds().mkString(",").split(",") if i}

    def executors(self, session: SparkSession) -> dict[str, int]:
        """``{executor ID: PID}`` of ``session``'s executor JVMs running on this cluster; the IDs
        are those Spark uses in its logs and in ``registered_executors``."""
        app_id = session.sparkContext.applicationId
        found: dict[str, int] = {}
        for pid in self.executor_pids():
            args = _argv(pid)
            executor_id = _arg(args, "--executor-id")
            if executor_id is not None and _arg(args, "--app-id") == app_id:
                found[executor_id] = pid
        return found

    # -- processes --------------------------------------------------------------------------------

    def worker_pids(self) -> list[int]:
        """PIDs of the Worker JVMs still running (``spark-class`` execs the JVM, so the PID is
        the JVM's), in Worker order, killed ones left out."""
        return [p.pid for p in self._workers if p is not None and p.poll() is None]

    def executor_pids(self) -> list[int]:
        """PIDs of the executor JVMs running under this cluster's Workers, whatever the app."""
        return self.descendants(EXECUTOR_CLASS)

    def descendants(self, pattern: str) -> list[int]:
        """PIDs of processes under this cluster's Workers whose command line contains ``pattern``,
        e.g. ``"sparktrain.cluster.trainer"``. A trainer process starts its own session, but its
        parent chain still leads through the Python worker to the executor JVM and its Worker;
        once a process in that chain dies, the trainer is reparented (to init or a subreaper)
        and is no longer found here, so look trainers up before killing their executor."""
        return sorted(self._descendant_stats(lambda cmd: pattern in cmd))

    def kill_worker(self, i: int) -> None:
        """SIGKILLs Worker ``i``'s process group: the Worker JVM and its executors (and their
        Python workers, but not trainer processes, which have their own sessions). The Master
        drops the Worker when its connection closes, so its executors are lost for good."""
        proc = self._workers[i]
        if proc is None:
            raise RuntimeError(f"worker {i} is already killed")
        # Reaping the Worker is not enough: its orphaned executors are gone only once init has
        # reaped them too, and a test that looks right away must not find them still running.
        group = _group_members(proc.pid)
        self._signal_group(proc, signal.SIGKILL)
        proc.wait()
        self._workers[i] = None
        _wait_gone(group, time.monotonic() + _STOP_GRACE_S)

    def log_tail(self, name: str, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of ``master`` or ``worker-<i>``'s log."""
        path = self.work_dir / f"{name}.log"
        try:
            with path.open(encoding="utf-8", errors="replace") as f:
                return "".join(deque(f, maxlen=lines)) or "<empty>"
        except OSError as e:
            return f"<cannot read {path}: {e}>"

    # -- internals --------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        assert self._work_dir is not None
        local_dir = self._work_dir / "local"
        local_dir.mkdir(exist_ok=True)
        # An empty conf dir, so a spark-defaults.conf or spark-env.sh on this machine cannot leak in.
        conf_dir = self._work_dir / "conf"
        conf_dir.mkdir(exist_ok=True)
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(_spark_home()),
            SPARK_CONF_DIR=str(conf_dir),
            # Workers pass their environment on to the executors they launch: all on loopback.
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_DIRS=str(local_dir),
            SPARK_WORKER_DIR=str(self._work_dir),
            SPARK_LOG_DIR=str(self._work_dir),
            # An app's files must stay for a test to inspect them after its executors died.
            SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
            PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        )
        return env

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        assert self._work_dir is not None
        log = (self._work_dir / f"{name}.log").open("ab")
        self._logs.append(log)
        return subprocess.Popen(
            [str(_spark_home() / "bin" / "spark-class"), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self._work_dir,
            # Own process group: the executors a Worker launches join it, so one killpg reaches
            # them all, and a Ctrl-C on the test run does not hit the JVMs before stop() does.
            start_new_session=True,
        )

    def _wait_for_line(self, name: str, proc: subprocess.Popen[bytes], line: str, deadline: float) -> None:
        path = self.work_dir / f"{name}.log"
        while True:
            if line in path.read_text(errors="replace"):
                return
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with status {proc.returncode} before logging {line!r}; "
                    f"last lines of {path}:\n{self.log_tail(name)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{name} did not log {line!r} within {self.start_timeout:.0f}s; "
                    f"last lines of {path}:\n{self.log_tail(name)}"
                )
            time.sleep(_POLL_S)

    def _read_master_url(self) -> str:
        # The Master moves to the next port if ours was taken meanwhile: trust its log, not us.
        for text in (self.work_dir / "master.log").read_text(errors="replace").splitlines():
            if _MASTER_URL_LINE in text:
                return text.split(_MASTER_URL_LINE, 1)[1].split()[0]
        raise RuntimeError(f"master logged no URL:\n{self.log_tail('master')}")

    def _descendant_stats(self, match: Callable[[str], bool]) -> dict[int, int]:
        """``{pid: start time}`` of the processes below a live Worker whose command line
        satisfies ``match``."""
        roots = set(self.worker_pids())
        if not roots:
            return {}
        parents: dict[int, int] = {}
        starts: dict[int, int] = {}
        for pid in _all_pids():
            stat = _stat(pid)
            if stat is not None:
                parents[pid], starts[pid], _ = stat
        found: dict[int, int] = {}
        for pid in parents:
            ancestor = parents[pid]
            # Bounded walk: the table is a snapshot, so a racing pid reuse cannot make it loop.
            for _ in range(len(parents)):
                if ancestor in roots:
                    if match(_cmdline(pid)):
                        found[pid] = starts[pid]
                    break
                if ancestor not in parents:
                    break
                ancestor = parents[ancestor]
        return found

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
