"""Running a job's ``spark-submit`` to its end: :func:`run` under an enforced time limit, the
driver-side link to a packed environment, the signals that stop a job, and killing an
application that outlives ``spark-submit`` (YARN, Kubernetes cluster mode). Runs in the
``sparktrain submit`` command, on the machine that submits.

At the time limit, or on SIGTERM, SIGHUP or SIGINT, the application is killed, on the cluster
too, and the command fails saying so.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Final

from sparktrain.deploy import cluster_managers
from sparktrain.deploy.spark_home import spark_home
from sparktrain.deploy.spec import SubmitSpec
from sparktrain.errors import ConfigurationError

#: Exit status when the time limit ended the job (as ``timeout(1)`` uses).
TIME_LIMIT_EXIT: Final = 124
#: Seconds ``spark-submit`` gets to stop after SIGTERM before it is killed.
STOP_GRACE_S: Final = 30.0
#: Seconds between looks at a running job for a stopping signal or the time limit.
POLL_S: Final = 0.5
#: The signals that stop a running job (a scheduler's, a closed terminal's, Ctrl-C).
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
#: The most of an exception's line repeated at the end of a failed job's output.
MAX_EXCEPTION_CHARS: Final = 500
#: YARN's ``yarn application`` command, a class in the Hadoop client jar Spark ships.
YARN_CLI = "org.apache.hadoop.yarn.client.cli.ApplicationCLI"
#: Seconds each attempt to kill an application may take.
KILL_TIMEOUT_S = 30.0


@dataclass
class _Watch:
    """What the submit's output told about the application: its id, for killing it at the
    limit, and the exception that ended the driver's Python, for the last line of a failure."""

    application: str | None = None
    #: The first line of the last exception a Python traceback ended with.
    exception: str | None = None
    _in_traceback: bool = False
    _in_message: bool = False

    def tee(self, source: IO[str], sink: IO[str]) -> None:
        # Reads to the end whatever happens to the sink: a reader that stopped would let the
        # pipe fill up and block spark-submit.
        for line in source:
            if self.application is None:
                self.application = cluster_managers.application_id(line)
            self._follow_tracebacks(line)
            with contextlib.suppress(OSError, ValueError):
                sink.write(line)
                sink.flush()

    def _follow_tracebacks(self, line: str) -> None:
        # A traceback's exception line is its first line back at the margin. Its message may
        # hold tracebacks of its own (WorkerFailed carries a trainer's stderr), so tracebacks
        # start again only after the blank line that separates chained exceptions.
        if not line.strip():
            self._in_message = False
        elif line.startswith("Traceback (most recent call last):"):
            self._in_traceback = not self._in_message
        elif self._in_traceback and not line[0].isspace():
            self.exception = line.rstrip()[:MAX_EXCEPTION_CHARS]
            self._in_traceback = False
            self._in_message = True


def run(spec: SubmitSpec, *, stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    """Runs the job; returns ``spark-submit``'s exit status (128 + N when a signal N ended it),
    :data:`TIME_LIMIT_EXIT` after stopping the job at the time limit, or 128 + N after stopping
    it for a signal N (SIGTERM, SIGHUP, SIGINT) to this process; each stop says on ``stderr``
    what it did."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    command = spec.command()
    with _driver_side_environment(spec, err):
        return _run(spec, command, out, err)


@contextlib.contextmanager
def _driver_side_environment(spec: SubmitSpec, err: IO[str]) -> Iterator[None]:
    """In client mode, makes the shipped interpreter's path (``./environment/bin/python``)
    resolve on this machine too, for as long as the job runs.

    Spark runs Python on the driver's side with the executors' interpreter when it plans a
    Python data source (``spark.read.format("tfrecord")``), from the driver's working folder,
    where no archive is unpacked. A link from the archive's folder name to this environment
    makes that path work here. Only a link to this environment is made, reused or removed:
    anything else already there is left alone, with a warning."""
    python = spec.confs().get("spark.pyspark.python", "")
    alias, _, inside = python.removeprefix("./").partition("/") if python.startswith("./") else ("", "", "")
    if spec.mode != "client" or not alias or not inside:
        yield
        return
    if os.path.lexists(alias) and not _our_link(alias):
        broken = "" if os.path.exists(python) else f", which has no {inside}: they will fail to start"
        _say(
            err,
            f"warning: ./{alias} exists and is not a link to {sys.prefix}, so it is left as it is; Python "
            f"data sources planned on the driver's side run {python} from it{broken}",
        )
        yield
        return
    if not os.path.lexists(alias):
        if not os.path.exists(os.path.join(sys.prefix, inside)):
            _say(
                err,
                f"warning: {sys.prefix} has no {inside}, so ./{alias} is not linked to it; Python data "
                f"sources planned on the driver's side, which run {python}, will fail to start",
            )
            yield
            return
        try:
            os.symlink(sys.prefix, alias)
        except OSError as e:
            raise ConfigurationError(
                f"cannot link ./{alias} to {sys.prefix} for the driver's side of {python}: {e}"
            ) from e
        _say(err, f"linked ./{alias} to {sys.prefix} for the driver's side while the job runs")
    # else: the link an earlier submit left when it was killed before removing it, reused.
    try:
        yield
    finally:
        # Only a link to this environment: something else may have replaced it meanwhile.
        with contextlib.suppress(OSError):
            if _our_link(alias):
                os.unlink(alias)


def _our_link(path: str) -> bool:
    """Whether ``path`` is the link :func:`_driver_side_environment` makes."""
    return os.path.islink(path) and os.readlink(path) == sys.prefix


def _say(err: IO[str], message: str) -> None:
    # The job's own output goes to the same stream: a closed one must not stop the stop.
    with contextlib.suppress(OSError, ValueError):
        err.write(f"sparktrain submit: {message}\n")
        err.flush()


class _StopSignals:
    """While the job runs, records SIGTERM, SIGHUP and SIGINT instead of letting them end this
    process: the job runs in a process group of its own, which a signal to this one does not
    reach, so it must be stopped before this process exits. The first signal is the one the
    exit status reports; more of them (a second Ctrl-C) do not cut short the stop, which is
    bounded. Only the main thread can set handlers: elsewhere nothing is recorded, and the
    caller's own handling applies."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *_: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _record(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signum


def _run(spec: SubmitSpec, command: list[str], out: IO[str], err: IO[str]) -> int:
    # The handlers are in place from before spark-submit starts until the job is stopped: a
    # signal in between must not end this process and leave the job running.
    with _StopSignals() as signals:
        try:
            process = subprocess.Popen(
                command,
                env=spec.environment(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # Spark's and the job's output may be in any encoding: never fail on it.
                encoding="utf-8",
                errors="replace",
                bufsize=1,
                start_new_session=True,  # its own process group: stopping it stops its children too
            )
        except OSError as e:
            raise ConfigurationError(
                f"cannot run {command[0]}: {e.strerror or e}; name a spark-submit that runs with "
                "--spark-submit or SPARK_HOME"
            ) from e
        assert process.stdout is not None
        assert process.stderr is not None
        watch = _Watch()
        readers = [
            threading.Thread(target=watch.tee, args=(process.stdout, out), daemon=True),
            threading.Thread(target=watch.tee, args=(process.stderr, err), daemon=True),
        ]
        for reader in readers:
            reader.start()
        deadline = None if spec.time_limit is None else time.monotonic() + spec.time_limit
        try:
            while True:
                try:
                    status = process.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
                else:
                    for reader in readers:
                        reader.join(timeout=5)
                    if status != 0 and watch.exception:
                        # Spark's shutdown logs follow the driver's traceback: say it last.
                        _say(err, f"the job failed (exit status {status}): {watch.exception}")
                    # A negative status is the signal that ended spark-submit: as a shell says it.
                    return status if status >= 0 else 128 - status
                if signals.received is not None:
                    name = signal.Signals(signals.received).name
                    _stop_job(spec, command[0], process, watch, err, f"{name} received")
                    return 128 + signals.received
                if deadline is not None and time.monotonic() >= deadline:
                    why = f"the time limit of {spec.time_limit:g} s was reached"
                    _stop_job(spec, command[0], process, watch, err, why)
                    return TIME_LIMIT_EXIT
        finally:
            for reader in readers:
                reader.join(timeout=5)


def _stop_job(
    spec: SubmitSpec, spark_submit: str, process: subprocess.Popen[str], watch: _Watch, err: IO[str], why: str
) -> None:
    """Kills the application on its cluster (where it runs beyond spark-submit) and stops the
    submit's process group, then says on ``err`` what was done, or what is left to do."""
    killed = kill(spec, watch.application, spark_submit)
    _stop(process)
    what = f"application {watch.application}" if watch.application else "the application"
    if killed:
        done = f"killed {what} ({killed})"
    elif not runs_outside_submit(spec):
        done = f"stopped {what}"
    elif watch.application:
        done = (
            f"could not kill {what} on the cluster: stop it with "
            f"{manual_kill(spec, watch.application, spark_submit)}"
        )
    else:
        done = (
            "stopped spark-submit before it named the application: if it had reached the cluster, "
            "it may still run there"
        )
    _say(err, f"{why}; {done}")


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the submit's process group (the driver's shutdown hooks stop the
    SparkContext), then SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def runs_outside_submit(spec: SubmitSpec) -> bool:
    """Whether the application outlives a stopped ``spark-submit``: on YARN (whose client may
    have returned after submitting) and in Kubernetes cluster mode."""
    return spec.profile == "yarn" or (spec.profile == "kubernetes" and spec.mode == "cluster")


def kill(spec: SubmitSpec, application: str | None, spark_submit: str) -> str | None:
    """Kills ``application`` on its cluster; returns how, or None when nothing outside
    ``spark-submit`` needed killing or it could not be done (the caller stops the submit's
    process group either way). ``spark_submit`` is the one that submitted it."""
    if application is None or not runs_outside_submit(spec):
        return None
    if spec.profile == "yarn":
        return _kill_yarn(application)
    done = _quiet(_kubernetes_kill_command(spec, application, spark_submit), spec.environment())
    return "spark-submit --kill" if done else None


def manual_kill(spec: SubmitSpec, application: str, spark_submit: str) -> str:
    """The command a user runs to kill ``application`` by hand; ``spark_submit`` is the one
    that submitted it."""
    if spec.profile == "yarn":
        return f"yarn application -kill {application}"
    return shlex.join(_kubernetes_kill_command(spec, application, spark_submit))


def _kubernetes_kill_command(spec: SubmitSpec, application: str, spark_submit: str) -> list[str]:
    # The same Kubernetes client settings as the submission (context, namespace, credentials).
    submitted = spec.confs()
    confs = [
        arg
        for key, value in submitted.items()
        if key.startswith("spark.kubernetes.")
        for arg in ("--conf", f"{key}={value}")
    ]
    namespace = submitted.get("spark.kubernetes.namespace", "default")
    return [spark_submit, "--master", spec.master, *confs, "--kill", f"{namespace}:{application}"]


def _kill_yarn(application: str) -> str | None:
    """Through Hadoop's ``yarn`` command when there is one, else through the same YARN client
    class run from Spark's own jars: it reads ``HADOOP_CONF_DIR`` (HA, Kerberos) as Spark does."""
    yarn = shutil.which("yarn")
    if yarn and _quiet([yarn, "application", "-kill", application]):
        return "yarn application -kill"
    home = os.environ.get("SPARK_HOME") or spark_home()
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    if home is None:
        return None
    confs = [os.environ[v] for v in ("YARN_CONF_DIR", "HADOOP_CONF_DIR") if os.environ.get(v)]
    classpath = os.pathsep.join([*confs, os.path.join(home, "jars", "*")])
    command = [java, "-cp", classpath, YARN_CLI, "application", "-kill", application]
    return "YARN's application client" if _quiet(command) else None


def _quiet(command: list[str], env: dict[str, str] | None = None) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, timeout=KILL_TIMEOUT_S, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


__all__ = ["TIME_LIMIT_EXIT", "YARN_CLI", "kill", "manual_kill", "run", "runs_outside_submit"]
