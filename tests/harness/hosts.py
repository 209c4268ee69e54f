"""A Spark cluster over several hosts of one machine: each host a network namespace of a
:class:`harness.netns.Network`. Runs in the test process.

::

    with HostCluster(hosts=3) as cluster:
        driver = cluster.driver_process("harness.host_jobs", "main_job", {"rows": 3000})
        driver.wait_for(lambda status: status.get("step", 0) > 10, 120, "training to start")
        cluster.hosts[2].cut()
        ...
        result = driver.result(300)

- ``head`` runs the Spark standalone Master (port 7077) and HDFS (a MiniDFS whose NameNode and
  DataNode listen on the head's address);
- ``host0`` ... run one Spark Worker each, offering ``cores`` cores;
- ``driver`` runs the Spark driver programs, one subprocess per job
  (:meth:`HostCluster.driver_process`), so that a test can cut the driver off the others too.

Every process listens on its own host's address and finds the others by theirs: no program
here is told 127.0.0.1, and none of the hosts' names resolves to anything but loopback (every
namespace shares the machine's ``/etc/hosts`` and hostname), so a component that picks its
address from the hostname, instead of from Spark or the address it was given, is caught out.

Spark's own failure detection is shortened (``spark.network.timeout``, executor heartbeats
and the Master's worker time-out, see :data:`SPARK_CONF` and :meth:`HostCluster.start`), so a
cut host's executor is written off in seconds, not minutes.

:meth:`HostCluster.stop` (also on leaving the ``with`` block) stops the sessions' programs,
the Workers, the Master and HDFS, and removes the namespaces; the network's reaper does it when
the test process dies first (see :mod:`harness.netns`). The work folder (logs, the Workers'
folders with each executor's stdout and stderr) is kept after a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from harness.minidfs import MiniDfs
from harness.netns import Host, Network

ROOT = Path(__file__).resolve().parents[2]
MASTER_PORT = 7077

#: Seconds without a heartbeat after which the Master writes a Worker off (Spark's
#: ``spark.worker.timeout``, 60 s by default; Workers beat every quarter of it).
WORKER_TIMEOUT_S = 15
#: Spark confs of every job: failure detection in seconds rather than minutes.
#: ``spark.network.timeout`` bounds how long the driver keeps a silent executor (the default,
#: 120 s, would keep the next generation waiting for a lost host's slot); executors heart-beat
#: every second so that the shorter time-out is still safe on a busy machine.
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.dynamicAllocation.enabled": "false",
    "spark.network.timeout": "20s",
    "spark.network.timeoutInterval": "2s",
    "spark.executor.heartbeatInterval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "2s",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    "spark.executorEnv.TF_CPP_MIN_LOG_LEVEL": "2",
    "spark.log.level": "WARN",
}

_MASTER_READY = "I have been elected leader"
_WORKER_READY = "Successfully registered with master"
_STATUS = "STATUS"
_RESULT = "RESULT"
_EXIT = "EXIT"
_TAIL_LINES = 60


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class DriverProcess:
    """A driver program running in the ``driver`` host (see :mod:`harness.host_driver`): it
    writes ``STATUS {json}`` lines while its job runs and one ``RESULT {json}`` (or ``ERROR
    {json}``) line at the end, on a pipe of their own; what it prints (the JVM's log, the
    trainers' output) is kept in :attr:`lines` and in ``log``."""

    def __init__(self, process: subprocess.Popen[str], protocol: int, log: Path) -> None:
        self.process = process
        self.log = log
        self.lines: list[str] = []
        self.statuses: list[dict[str, Any]] = []
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._outcome: tuple[str, Any] | None = None
        self._output = threading.Thread(target=self._read_output, name="driver-output", daemon=True)
        self._output.start()
        self._protocol = threading.Thread(
            target=self._read_protocol, args=(protocol,), name="driver-protocol", daemon=True
        )
        self._protocol.start()

    def _read_output(self) -> None:
        assert self.process.stdout is not None
        with self.log.open("a") as log:
            for line in self.process.stdout:
                log.write(line)
                log.flush()
                self.lines.append(line.rstrip("\n"))

    def _read_protocol(self, fd: int) -> None:
        with os.fdopen(fd, "r") as channel:
            for line in channel:
                kind, _, text = line.partition(" ")
                value = json.loads(text)
                if kind == _STATUS:
                    self.statuses.append(value)
                self._events.put((kind, value))
        self._events.put((_EXIT, None))

    def _next_event(self, deadline: float, late: str) -> tuple[str, Any] | None:
        """The program's next event, or None when a second passes without one; once
        ``deadline`` (``time.monotonic()``) has passed, AssertionError: ``late`` and its output."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{late}\n{self.tail()}")
        try:
            event: tuple[str, Any] = self._events.get(timeout=min(left, 1.0))
        except queue.Empty:
            return None
        return event

    def tail(self, lines: int = _TAIL_LINES) -> str:
        return "\n".join(self.lines[-lines:])

    def wait_for(
        self, condition: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        """Waits for a status line that satisfies ``condition``; returns it. Raises
        AssertionError naming ``what`` with the driver's output if the job ends first or
        ``timeout`` seconds pass."""
        for status in self.statuses:
            if condition(status):
                return status
        deadline = time.monotonic() + timeout
        while True:
            event = self._next_event(deadline, f"no {what} within {timeout:.0f} s; the driver printed:")
            if event is None:
                continue
            kind, value = event
            if kind == _STATUS and condition(value):
                return dict(value)
            if kind != _STATUS:
                self._outcome = (kind, value)
                raise AssertionError(f"the job ended before {what}; the driver printed:\n{self.tail()}")

    def outcome(self, timeout: float) -> tuple[bool, dict[str, Any]]:
        """``(True, result)`` or ``(False, error)`` once the program has ended; raises
        AssertionError with its output if it does not end within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self._outcome is None:
            event = self._next_event(deadline, f"the driver did not finish within {timeout:.0f} s:")
            if event is not None and event[0] != _STATUS:
                self._outcome = event
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        kind, value = self._outcome
        if kind == _EXIT:
            raise AssertionError(
                f"the driver exited ({self.process.poll()}) without a result:\n{self.tail()}"
            )
        return kind == _RESULT, value

    def result(self, timeout: float) -> dict[str, Any]:
        """The program's result; AssertionError with its output if it failed."""
        ok, value = self.outcome(timeout)
        if not ok:
            raise AssertionError(f"the job failed: {value.get('error')}\n{self.tail()}")
        return value

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class HostCluster:
    """Context manager for a Spark standalone cluster and HDFS over ``hosts`` worker hosts, a
    head host and a driver host (see the module notes)."""

    def __init__(
        self,
        hosts: int = 3,
        cores: int = 1,
        memory_mb: int = 1024,
        *,
        hdfs: bool = True,
        spark: bool = True,
        subnet: str = "10.213.7",
        start_timeout: float = 120.0,
    ) -> None:
        self.host_count = hosts
        self.cores = cores
        self.memory_mb = memory_mb
        self.with_hdfs = hdfs
        self.with_spark = spark
        self.subnet = subnet
        self.start_timeout = start_timeout
        self.network: Network | None = None
        self.head: Host | None = None
        self.driver: Host | None = None
        self.hosts: list[Host] = []
        self.hdfs: MiniDfs | None = None
        self.work_dir = Path(tempfile.mkdtemp(prefix="sparktrain-hosts-"))
        self._daemons: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._logs: list[IO[bytes]] = []
        self._drivers: list[DriverProcess] = []

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> HostCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(keep_logs=exc is not None)

    @property
    def master_url(self) -> str:
        assert self.head is not None
        return f"spark://{self.head.address}:{MASTER_PORT}"

    @property
    def hdfs_url(self) -> str:
        if self.hdfs is None:
            raise RuntimeError("this cluster runs no HDFS")
        return self.hdfs.url

    def start(self) -> None:
        """Builds the network, then starts HDFS, the Master and the Workers; returns once every
        Worker has registered. Anything that fails stops what was started."""
        try:
            self.network = Network(self.subnet)
            self.head = self.network.add_host("head")
            self.driver = self.network.add_host("driver")
            self.hosts = [self.network.add_host(f"host{i}") for i in range(self.host_count)]
            deadline = time.monotonic() + self.start_timeout
            if self.with_hdfs:
                self.hdfs = MiniDfs(host=self.head.address, wrapper=tuple(self.head.argv([])))
                self.hdfs.start()
            if self.with_spark:
                self._start_spark(deadline)
        except BaseException:
            self.stop(keep_logs=True)
            raise

    def _start_spark(self, deadline: float) -> None:
        assert self.head is not None
        env = self._spark_env()
        master_args = ["org.apache.spark.deploy.master.Master", "--host", self.head.address]
        master_args += ["--port", str(MASTER_PORT), "--webui-port", "8080"]
        master = self._spawn("master", self.head, master_args, env)
        self._wait_line("master", master, _MASTER_READY, deadline)
        workers = []
        for i, host in enumerate(self.hosts):
            folder = self.work_dir / f"worker-{i}"
            folder.mkdir()
            args = ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", host.address]
            args += ["--cores", str(self.cores), "--memory", f"{self.memory_mb}m"]
            args += ["--webui-port", "8081", "--work-dir", str(folder)]
            local = self.work_dir / f"local-{i}"
            local.mkdir()
            workers.append(
                (
                    f"worker-{i}",
                    self._spawn(f"worker-{i}", host, args, {**env, "SPARK_LOCAL_DIRS": str(local)}),
                )
            )
        for name, proc in workers:
            self._wait_line(name, proc, _WORKER_READY, deadline)

    def stop(self, keep_logs: bool = False) -> None:
        """Stops every driver program, the Workers, the Master and HDFS, and removes the network.
        Idempotent; with ``keep_logs`` the work folder stays (its path is printed)."""
        for driver in self._drivers:
            with contextlib.suppress(Exception):
                driver.stop()
        self._drivers.clear()
        if self.hdfs is not None:
            with contextlib.suppress(Exception):
                self.hdfs.stop()
            self.hdfs = None
        # The network's close stops whatever runs in its hosts, daemons and their children alike.
        if self.network is not None:
            self.network.close()
            self.network = None
        for _, proc in self._daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._daemons.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()
        if keep_logs:
            print(f"the host cluster's logs stay in {self.work_dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # -- drivers ----------------------------------------------------------------------------------

    def spark_conf(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The confs of a job on this cluster: the master, one executor of ``cores`` cores per
        Worker, the executors on this interpreter, :data:`SPARK_CONF`, then ``extra``."""
        conf = {
            "spark.master": self.master_url,
            "spark.executor.cores": str(self.cores),
            "spark.task.cpus": str(self.cores),
            "spark.cores.max": str(self.cores * len(self.hosts)),
            "spark.executor.memory": "512m",
            "spark.pyspark.python": sys.executable,
            **SPARK_CONF,
        }
        conf.update(extra or {})
        return conf

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver program: the test's, with Spark's home and an empty conf
        folder, and the tests' folder importable (for :mod:`harness.host_jobs`)."""
        env = self._spark_env()
        env.pop("SPARK_LOCAL_IP", None)
        tests = str(ROOT / "tests")
        env["PYTHONPATH"] = os.pathsep.join([tests, *filter(None, [env.get("PYTHONPATH")])])
        return env

    def driver_process(
        self,
        module: str,
        function: str,
        kwargs: dict[str, Any],
        conf: dict[str, str] | None = None,
        python: str | None = None,
        env: dict[str, str] | None = None,
    ) -> DriverProcess:
        """Runs ``module.function(spark, **kwargs)`` as a driver program in the driver host
        (``python -m harness.host_driver``), on a session with :meth:`spark_conf` plus
        ``conf``, under ``python`` (this interpreter by default)."""
        assert self.driver is not None
        interpreter = python or sys.executable
        spec = {"module": module, "function": function, "kwargs": kwargs, "conf": self.spark_conf(conf)}
        env = dict(env or {})
        if python is not None:
            spec["conf"]["spark.pyspark.python"] = python
            # A driver program that is not spark-submit takes its executors' interpreter from
            # PYSPARK_PYTHON alone (PySpark's SparkContext ignores the conf).
            env["PYSPARK_PYTHON"] = python
        log = self.work_dir / f"driver-{len(self._drivers)}.log"
        read, write = os.pipe()
        try:
            process = self.driver.popen(
                [interpreter, "-u", "-m", "harness.host_driver", json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**self.driver_env(), **env, "HOSTS_PROTOCOL_FD": str(write)},
                cwd=self.work_dir,
                pass_fds=(write,),
            )
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        driver = DriverProcess(process, read, log)
        self._drivers.append(driver)
        return driver

    # -- inspection -------------------------------------------------------------------------------

    def host_of(self, address: str) -> Host:
        """The host at ``address`` (an IP, or ``ip:port``)."""
        ip = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
        for host in [*self.hosts, *(h for h in (self.head, self.driver) if h is not None)]:
            if host.address == ip:
                return host
        raise KeyError(address)

    def trainers(self) -> dict[str, list[int]]:
        """``{host name: trainer process ids}`` of every worker host now."""
        return {h.name: h.processes("sparktrain.cluster.trainer") for h in self.hosts}

    def log_tail(self, name: str, lines: int = _TAIL_LINES) -> str:
        path = self.work_dir / f"{name}.log"
        try:
            with path.open(encoding="utf-8", errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except OSError as e:
            return f"<cannot read {path}: {e}>"

    def executor_logs(self) -> str:
        """Every executor's stderr, for a failed test's message."""
        parts = []
        for path in sorted(self.work_dir.glob("worker-*/app-*/*/stderr")):
            parts.append(
                f"--- {path.relative_to(self.work_dir)}\n"
                + "".join(deque(path.open(errors="replace"), maxlen=40))
            )
        return "\n".join(parts)

    # -- internals --------------------------------------------------------------------------------

    def _spark_env(self) -> dict[str, str]:
        conf_dir = self.work_dir / "conf"
        conf_dir.mkdir(exist_ok=True)
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(_spark_home()),
            # Empty: a spark-defaults.conf or spark-env.sh on this machine cannot leak in.
            SPARK_CONF_DIR=str(conf_dir),
            SPARK_LOG_DIR=str(self.work_dir),
            SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
            # The Master and the Workers must agree on it.
            SPARK_DAEMON_JAVA_OPTS=f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}",
            PYSPARK_PYTHON=sys.executable,
        )
        # Each daemon finds its address from --host; nothing is told 127.0.0.1.
        env.pop("SPARK_LOCAL_IP", None)
        return env

    def _spawn(self, name: str, host: Host, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.work_dir / f"{name}.log").open("ab")
        self._logs.append(log)
        proc = host.popen(
            [str(_spark_home() / "bin" / "spark-class"), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.work_dir,
            start_new_session=True,
        )
        self._daemons.append((name, proc))
        return proc

    def _wait_line(self, name: str, proc: subprocess.Popen[bytes], line: str, deadline: float) -> None:
        path = self.work_dir / f"{name}.log"
        while line not in path.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited ({proc.returncode}) before logging {line!r}:\n{self.log_tail(name)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not log {line!r} in time:\n{self.log_tail(name)}")
            time.sleep(0.2)
