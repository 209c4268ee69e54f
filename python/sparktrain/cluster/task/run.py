"""The body of one barrier task: reserve ports, register, start the trainer process and
supervise it until it ends. Runs in the executor task (Spark's Python worker), or in a thread
of the driver in local mode.

The task heart-beats to the driver a few times a second, carrying the trainer's new output
lines (within the bounds of :mod:`sparktrain.cluster.task.output`; the executor's log
keeps all of the output). The driver's reply says when the job has failed elsewhere, and then
the trainer is stopped. When the trainer ends, every queued line is sent before its exit is
reported; one that ends non-zero fails the task after its exit code and the tail of its stderr
have reached the driver. If the driver stops answering for longer than the heartbeat
time-out, the trainer is stopped too: nobody waits forever.

The trainer proves that it runs by writing to a liveness pipe a few times a second (see
:mod:`sparktrain.cluster.trainer.main`). A task heart-beats whatever its trainer does, so a trainer
stopped by SIGSTOP, or whose interpreter hangs, would look alive to the driver; when the pipe
stays silent for longer than the heartbeat time-out, the task kills the trainer and reports
it as :data:`~sparktrain.cluster.failures.UNRESPONSIVE`.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import pickle
import random
import re
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from sparktrain.cluster.failures import PEER_LOST, UNRESPONSIVE, worker_failed
from sparktrain.cluster.settings import JobSettings, TaskInfo, TrainerLaunch, role_names
from sparktrain.cluster.task.output import (
    MAX_HEARTBEAT_BYTES,
    MAX_LINES_PER_HEARTBEAT,
    READ_CHUNK_BYTES,
    STDERR,
    STDERR_TAIL_LINES,
    STDOUT,
    LineSplitter,
    OutputQueue,
    tail_text,
)
from sparktrain.errors import DriverUnreachable, JobAborted


@dataclass(frozen=True)
class TaskResult:
    """What a task returns to the driver through Spark."""

    rank: int
    #: The trainer's pickled return value.
    value: bytes


def thread_env(cpus: int) -> dict[str, str]:
    """Thread-count variables that keep a trainer within its task's ``spark.task.cpus``."""
    n = str(max(1, cpus))
    names = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"]
    names += ["CANDLE_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"]
    return dict.fromkeys(names, n)


def _bind_address(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def reserve_ports(host: str) -> tuple[socket.socket, socket.socket]:
    """The data plane's listener (bound and listening, kept open and inherited by the trainer,
    so no other process can take its port) and a socket that holds the port reserved for
    TensorFlow until the trainer releases it just before user code starts."""
    address = _bind_address(host)
    data = socket.create_server((address, 0), backlog=128)
    tf = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tf.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _bind_outside_ephemeral_range(tf, address)
    return data, tf


def _bind_outside_ephemeral_range(sock: socket.socket, address: str) -> None:
    """Binds ``sock`` to a free port the kernel never picks for outgoing connections.

    TensorFlow binds its port itself, seconds after the trainer releases it (importing
    TensorFlow takes that long). A port from the ephemeral range could meanwhile become the
    local end of any outgoing connection on the host; a port outside it stays free."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    ports = range(20000, low) if low > 21000 else range(high + 1, 65536)
    rng = random.Random()
    for _ in range(100 if len(ports) else 0):
        with contextlib.suppress(OSError):
            sock.bind((address, rng.choice(ports)))
            return
    sock.bind((address, 0))


class _OutputPump:
    """Copies one stream of the trainer to the executor's log, every byte of it, and queues its
    lines for the driver, each cut to a bounded length (see
    :mod:`sparktrain.cluster.task.output`)."""

    def __init__(self, source: IO[bytes], stream: int, sink: IO[str], queue: OutputQueue) -> None:
        self._tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._source, self._stream, self._queue = source, stream, queue
        self._sink: IO[str] | None = sink
        self._splitter = LineSplitter(self._line)
        self.thread = threading.Thread(target=self._run, name=f"sparktrain-pump-{stream}", daemon=True)
        self.thread.start()

    def tail(self) -> str:
        """The stream's last lines, at most :data:`STDERR_TAIL_LINES` and
        :data:`~sparktrain.cluster.task.output.MAX_STDERR_TAIL_BYTES`."""
        return tail_text(list(self._tail))

    def _run(self) -> None:
        # os.read returns whatever the pipe holds, so neither a line without an end nor a
        # progress bar's redraws wait for a newline, and no more than a chunk is held at once.
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        ended = True
        fd = self._source.fileno()
        try:
            while chunk := os.read(fd, READ_CHUNK_BYTES):
                text = decoder.decode(chunk)
                if text:
                    self._copy(text)
                    ended = text.endswith("\n")
                self._splitter.feed(chunk)
        finally:
            rest = decoder.decode(b"", final=True)
            if rest or not ended:
                self._copy(rest + "\n")
            self._splitter.close()

    def _copy(self, text: str) -> None:
        """Writes to the executor's log. A log that fails is given up, not the pump: the
        trainer would block on a full pipe if nobody read it."""
        if self._sink is None:
            return
        try:
            self._sink.write(text)
            self._sink.flush()
        except (OSError, ValueError):
            self._sink = None

    def _line(self, text: str) -> None:
        self._tail.append(text)
        self._queue.put(self._stream, text)


class _Liveness:
    """Reads the trainer's liveness pipe; remembers when the trainer last wrote to it."""

    def __init__(self) -> None:
        self._read, self.write_fd = os.pipe()
        self.last = time.monotonic()
        self.thread = threading.Thread(target=self._run, name="sparktrain-liveness", daemon=True)

    def start(self) -> None:
        """Starts reading, once the trainer holds the pipe's write end (which this closes)."""
        os.close(self.write_fd)
        self.thread.start()

    def _run(self) -> None:
        try:
            while os.read(self._read, 4096):
                self.last = time.monotonic()
        finally:
            os.close(self._read)

    def silent_for(self) -> float:
        """Seconds since the trainer last proved that it runs."""
        return time.monotonic() - self.last


class _Heartbeat:
    """Sends the queued lines, a bounded batch per beat; remembers when the driver last
    answered."""

    def __init__(self, client: Any, rank: int, attempt: int, settings: JobSettings) -> None:
        self._client, self._rank, self._attempt, self._settings = client, rank, attempt, settings
        self.queue = OutputQueue()
        self.last_answer = time.monotonic()
        self.last_error: Exception | None = None
        #: Whether the last beat went unanswered.
        self.failed = False

    def beat(self) -> str | None:
        """One heartbeat; returns the driver's abort reason, if any."""
        lines = self.queue.take(MAX_LINES_PER_HEARTBEAT, MAX_HEARTBEAT_BYTES)
        try:
            timeout = self._settings.heartbeat_timeout
            reason: str | None = self._client.heartbeat(self._rank, self._attempt, lines, timeout)
        except JobAborted as e:
            return e.reason
        except Exception as e:  # any failure counts as a missed answer
            self.queue.put_back(lines)
            self.last_error = e
            self.failed = True
            return None
        self.failed = False
        self.last_answer = time.monotonic()
        return reason

    def drain(self, deadline: float) -> str | None:
        """Beats until every queued line is sent, the driver aborts the job (its reason is
        returned) or ``deadline`` (``time.monotonic()``) passes; at least once."""
        reason = self.beat()
        while reason is None and self.queue.pending() and time.monotonic() < deadline:
            if self.failed:
                time.sleep(self._settings.heartbeat_interval)
            reason = self.beat()
        if reason is None and self.queue.pending():
            print(
                "sparktrain: some of the trainer's output never reached the driver "
                f"({self.last_error}); this log has all of it",
                file=sys.stderr,
            )
        return reason

    def silent_for(self) -> float:
        """Seconds since the driver last answered."""
        return time.monotonic() - self.last_answer


#: The name of the file, in the task's working folder, that holds the driver's delegation tokens.
TOKEN_FILE = "hadoop.tokens"


class _TokenFile:
    """The trainer's Hadoop token file, rewritten whenever the driver hands out new tokens
    (:mod:`sparktrain.cluster.driver.tokens`)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def update(self, client: Any) -> None:
        """Writes the tokens the last registration or heartbeat brought, if newer ones came:
        whole, readable by this user alone, under a temporary name renamed into place, so that
        a reader never sees half a file."""
        data: bytes | None = client.take_tokens()
        if data is None:
            return
        temp = f"{self.path}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temp, self.path)


def _stop(process: subprocess.Popen[bytes], grace: float = 3.0) -> None:
    """Stops the trainer's whole process group: SIGTERM, then SIGKILL after ``grace`` seconds,
    and SIGKILL to what is left once the trainer has exited. The group outlives a trainer that
    ended on its own: trainers leave with ``os._exit``, which skips the clean-up of their
    children (multiprocessing and DataLoader workers, subprocesses), and those would keep
    GPUs and ports into the next generation. The group's id cannot name another group
    meanwhile: the kernel does not reuse a process id while a group of that id has members."""
    if process.poll() is None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _installed_pyspark_path(env: dict[str, str]) -> str | None:
    """``PYTHONPATH`` without Spark's ``pyspark.zip`` and ``py4j`` zips when this interpreter
    has the same PySpark version installed; None to keep it as it is.

    Spark puts the zips first on its Python workers' path. Modules imported from a zip are
    compiled from source every time (no bytecode cache), which makes the trainer's first
    ``import pyspark`` (needed to unpickle a cloudpickled function) take ~0.8 s instead of
    ~0.2 s. An installed copy of the very same version is equivalent and byte-compiled."""
    import pyspark

    entries = env.get("PYTHONPATH", "").split(os.pathsep)
    zips = [
        e for e in entries if os.path.basename(e) == "pyspark.zip" or os.path.basename(e).startswith("py4j-")
    ]
    if not zips:
        return None
    for folder in site.getsitepackages():
        version_file = os.path.join(folder, "pyspark", "version.py")
        if not os.path.exists(version_file):
            continue
        with open(version_file) as f:
            installed = re.search(r"__version__[^=]*=\s*[\"']([^\"']+)", f.read())
        if installed and installed.group(1) == pyspark.__version__:
            return os.pathsep.join(e for e in entries if e not in zips)
    return None


def _send(process: subprocess.Popen[bytes], message: object) -> None:
    assert process.stdin is not None
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    process.stdin.write(len(payload).to_bytes(8, "little") + payload)
    process.stdin.flush()


def _start_trainer(
    settings: JobSettings, env: dict[str, str], fds: tuple[int, ...], queue: OutputQueue, liveness: _Liveness
) -> tuple[subprocess.Popen[bytes], tuple[_OutputPump, _OutputPump]]:
    """Starts the trainer process and sends it the job, so that it loads the user's function
    and connects to the driver while this task registers. Returns it with its stdout and
    stderr pumps."""
    env = dict(env, SPARKTRAIN_ALIVE_FD=str(liveness.write_fd))
    try:
        process = subprocess.Popen(
            [sys.executable, "-u", "-m", "sparktrain.cluster.trainer"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(*fds, liveness.write_fd),
            env=env,
            start_new_session=True,
        )
    finally:
        liveness.start()
    assert process.stdout is not None
    assert process.stderr is not None
    out = _OutputPump(process.stdout, STDOUT, sys.stdout, queue)
    err = _OutputPump(process.stderr, STDERR, sys.stderr, queue)
    # stdin stays open: the trainer exits when it sees end-of-file, i.e. when this task dies.
    _send(process, settings)
    return process, (out, err)


@dataclass(frozen=True)
class TaskIdentity:
    """Where a task runs and what it was given: from Spark's barrier task context on an
    executor, or made by the driver for a task it runs itself (local mode)."""

    rank: int
    attempt: int
    #: ``host:port`` of the executor (Spark's task info), or of the driver.
    executor_address: str
    cpus: int
    gpus: tuple[str, ...]

    @property
    def host(self) -> str:
        return self.executor_address.rsplit(":", 1)[0]

    @classmethod
    def of_spark_task(cls) -> TaskIdentity:
        """The barrier task this code runs in."""
        from pyspark import BarrierTaskContext

        spark_ctx = BarrierTaskContext.get()
        rank = spark_ctx.partitionId()
        resources = spark_ctx.resources()
        return cls(
            rank=rank,
            attempt=spark_ctx.attemptNumber(),
            executor_address=spark_ctx.getTaskInfos()[rank].address,
            cpus=spark_ctx.cpus(),
            gpus=tuple(resources["gpu"].addresses) if "gpu" in resources else (),
        )


def run_task(
    settings: JobSettings,
    feed: tuple[Iterator[Any], Any] | None = None,
    identity: TaskIdentity | None = None,
) -> TaskResult:
    """Runs one task of the job on this executor (or, given its ``identity``, wherever this
    runs); returns the trainer's pickled result.

    ``feed`` is the task's input partition (Arrow batches and their schema) in
    ``input_mode="spark"``; the trainer reads it through ``ctx.feed()``.

    Raises :class:`~sparktrain.errors.WorkerFailed` when the trainer fails, and
    :class:`~sparktrain.errors.JobAborted` or :class:`~sparktrain.errors.DriverUnreachable`
    when the job ends elsewhere."""
    from sparktrain._native import ControlClient

    me = identity if identity is not None else TaskIdentity.of_spark_task()
    rank, attempt, executor_address, host, gpus = me.rank, me.attempt, me.executor_address, me.host, me.gpus
    if settings.gpus_per_worker is not None and len(gpus) < settings.gpus_per_worker:
        role = role_names(settings.num_workers, settings.num_evaluators, settings.evaluator_roles)[rank]
        what = (
            f"has GPUs {list(gpus)} but the job asks for {settings.gpus_per_worker}; "
            "set spark.task.resource.gpu.amount"
        )
        raise worker_failed(rank, role, host, what=what)

    env = dict(os.environ)
    env.update(thread_env(me.cpus))
    env.update(settings.env)
    env["SPARKTRAIN_SUPERVISOR_PID"] = str(os.getpid())
    pythonpath = _installed_pyspark_path(env)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    data_sock, tf_sock = reserve_ports(host)
    workdir = tempfile.mkdtemp(prefix=f"sparktrain-task{rank}-")
    tokens = _TokenFile(os.path.join(workdir, TOKEN_FILE)) if settings.hadoop_tokens else None
    if tokens is not None:
        # HDFS clients read the file at each new connection: renewed tokens written there
        # reach the trainer and every process it starts.
        env["HADOOP_TOKEN_FILE_LOCATION"] = tokens.path
    client = ControlClient(
        settings.address, settings.secret, settings.heartbeat_timeout, settings.tls_ca, settings.tls_domain
    )
    heartbeat = _Heartbeat(client, rank, attempt, settings)
    # The trainer inherits both sockets under the same descriptor numbers.
    fds = (data_sock.fileno(), tf_sock.fileno())
    liveness = _Liveness()
    process, pumps = _start_trainer(settings, env, fds, heartbeat.queue, liveness)
    feed_server = None
    try:
        registered, tf_config_json = client.register(
            rank,
            attempt,
            host,
            process.pid,
            executor_address,
            data_sock.getsockname()[1],
            tf_sock.getsockname()[1],
            list(gpus),
            settings.reservation_timeout + settings.heartbeat_timeout,
        )
        if tokens is not None:
            # Before the trainer learns the spec, and so before its user code runs.
            tokens.update(client)
        # The trainer holds both sockets now; the task's copies would keep TensorFlow's port
        # reserved after the trainer released it.
        data_sock.close()
        tf_sock.close()
        tasks = [
            TaskInfo(
                task_index=t.task_index,
                role=t.role,
                index=t.index,
                host=t.host,
                data_port=t.data_port,
                tf_port=t.tf_port,
                executor_id=t.executor_id,
                gpus=tuple(t.gpus),
            )
            for t in registered
        ]
        if feed is not None:
            from sparktrain.cluster.task.feed import FeedServer

            feed_server = FeedServer(feed[0], feed[1], workdir)
        launch = TrainerLaunch(
            rank=rank,
            tasks=tasks,
            tf_config=json.loads(tf_config_json),
            data_fd=fds[0],
            tf_fd=fds[1],
            result_path=os.path.join(workdir, "result.pickle"),
            feed_path=feed_server.path if feed_server is not None else None,
            working_dir=os.getcwd(),
            gpus=gpus,
            token=client.token,
        )
        _send(process, launch)
        return _supervise(
            process, pumps, launch, settings, heartbeat, liveness, client, tasks[rank], attempt, tokens
        )
    finally:
        _stop(process)
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        if feed_server is not None:
            feed_server.close()
        data_sock.close()
        tf_sock.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _supervise(
    process: subprocess.Popen[bytes],
    pumps: tuple[_OutputPump, _OutputPump],
    launch: TrainerLaunch,
    settings: JobSettings,
    heartbeat: _Heartbeat,
    liveness: _Liveness,
    client: Any,
    me: TaskInfo,
    attempt: int,
    tokens: _TokenFile | None = None,
) -> TaskResult:
    role = role_names(settings.num_workers, settings.num_evaluators, settings.evaluator_roles)[launch.rank]
    unresponsive = None
    while process.poll() is None:
        reason = heartbeat.beat()
        if tokens is not None:
            tokens.update(client)
        if reason is not None:
            _stop(process)
            raise JobAborted(f"{role}: stopped because the job was aborted: {reason}", reason=reason)
        if heartbeat.silent_for() > settings.heartbeat_timeout:
            _stop(process)
            raise DriverUnreachable(
                f"{role}: the driver at {settings.address} did not answer heartbeats for "
                f"{heartbeat.silent_for():.1f} s ({heartbeat.last_error}); the trainer was stopped",
                address=settings.address,
            )
        if liveness.silent_for() > settings.heartbeat_timeout:
            unresponsive = liveness.silent_for()
            _stop(process, grace=0.0)
            # Tell the driver this task is alive: it is about to report why its trainer died.
            heartbeat.beat()
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(settings.heartbeat_interval)
    code = process.returncode if unresponsive is None else UNRESPONSIVE
    # What the trainer left running holds its output pipes open: stop it before draining them.
    _stop(process)
    for pump in pumps:
        pump.thread.join(5.0)
    tail = pumps[1].tail()
    if unresponsive is not None:
        note = (
            f"sparktrain: the trainer (pid {process.pid}) gave no sign of life for {unresponsive:.1f} s "
            "(stopped by a signal such as SIGSTOP, or its interpreter hung); it was killed"
        )
        print(note, file=sys.stderr)
        heartbeat.queue.put(STDERR, note)
        tail = f"{tail}\n{note}" if tail else note
    # The driver must have every line before it learns of the exit: a failure's error is
    # raised on the exit, and output arriving after it would be lost or out of place.
    reason = heartbeat.drain(time.monotonic() + settings.heartbeat_timeout)
    if code == PEER_LOST:
        # A broken ring fails every trainer at once; give the driver time to learn which peer
        # died first, so the job's error names it rather than this bystander.
        deadline = time.monotonic() + settings.heartbeat_timeout
        while reason is None and time.monotonic() < deadline:
            time.sleep(settings.heartbeat_interval)
            reason = heartbeat.beat()
    try:
        client.exit(launch.rank, attempt, code, tail, settings.heartbeat_timeout)
    except Exception as e:  # the failure below is the one to report
        print(f"sparktrain: could not report the trainer's exit to the driver: {e}", file=sys.stderr)
    if code == PEER_LOST and reason is not None:
        raise JobAborted(
            f"{role}: its collective failed because the job was aborted: {reason}", reason=reason
        )
    if code != 0:
        raise worker_failed(launch.rank, role, me.host, returncode=code, stderr_tail=tail)
    with open(launch.result_path, "rb") as f:
        return TaskResult(rank=launch.rank, value=f.read())
