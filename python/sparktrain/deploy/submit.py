"""``sparktrain submit``: the ``spark-submit`` command of a training job, built and run.

A training job wants a Spark application of a particular shape: one task per executor (each
executor runs one trainer), all executors up before the gang-scheduled stage starts, no dynamic
allocation (Spark refuses barrier stages with it), thread pools sized to the executor's cores.
:class:`SubmitSpec` turns a few job-level options into that command for a *profile* (a kind of
cluster manager: ``local-cluster``, ``standalone``, ``yarn``, ``kubernetes``), and :func:`run`
runs it under an enforced time limit: at the limit the application is killed, on the cluster
too, and the command fails saying so.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final
from urllib.parse import urlsplit

from sparktrain.deploy import cluster_managers
from sparktrain.deploy.pack import PackedEnv, current_env, driver_python_confs, pack, plain_folder_name
from sparktrain.errors import ConfigurationError, InvalidArgumentError, SparktrainError

#: Exit status when the time limit ended the job (as ``timeout(1)`` uses).
TIME_LIMIT_EXIT: Final = 124
#: Seconds ``spark-submit`` gets to stop after SIGTERM before it is killed.
STOP_GRACE_S: Final = 30.0
#: Seconds between looks at a running job for a stopping signal or the time limit.
POLL_S: Final = 0.5
#: The signals that stop a running job (a scheduler's, a closed terminal's, Ctrl-C).
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
#: Thread-pool variables set to the executor's cores: the engine's and the common math
#: libraries', so a trainer uses the cores Spark gave it and no more.
THREAD_VARIABLES: Final = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "RAYON_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
)
#: The file name ``--pack`` gives the archive (each container unpacks it under the alias).
PACKED_NAME: Final = "sparktrain-env.tar.gz"
#: What stands for that archive until it is made: in ``--dry-run``'s command, and in the
#: checks that run before the pack.
PACK_PLACEHOLDER: Final = "<packed env>"
#: Where a packaged GPU discovery script ends up in each container (``--files``).
GPU_SCRIPT: Final = Path(__file__).with_name("discover_gpus.sh")
#: The same script in the Kubernetes image (submit/kubernetes/Dockerfile puts it there).
IMAGE_GPU_SCRIPT: Final = "/opt/sparktrain/discover_gpus.sh"

_LOCAL_CLUSTER = re.compile(r"^local-cluster\[(\d+),(\d+),(\d+)\]$")
_MEMORY = re.compile(r"^(\d+)([kmgt]?)(b?)$", re.IGNORECASE)
# Every part but the last carries its unit: "1h30" is not a duration (1h30m or 1h30s?).
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$|^(\d+)$")


def profile_of(master: str) -> str:
    """The profile a ``--master`` value belongs to."""
    if master.startswith("local-cluster"):
        return "local-cluster"
    if master.startswith("spark://"):
        return "standalone"
    if master == "yarn":
        return "yarn"
    if master.startswith("k8s://"):
        return "kubernetes"
    raise InvalidArgumentError(
        f"--master {master!r}: not a cluster (local-cluster[...], spark://HOST:PORT, yarn or "
        "k8s://https://HOST:PORT); a training job needs executors of its own"
    )


def local_cluster_size(master: str) -> tuple[int, int, int] | None:
    """``(workers, cores, MiB)`` of a ``local-cluster[N,C,M]`` master; None for any other."""
    match = _LOCAL_CLUSTER.match(master.replace(" ", ""))
    if match is None:
        return None
    workers, cores, memory = (int(g) for g in match.groups())
    return workers, cores, memory


def memory_mb(text: str, option: str = "--memory") -> int:
    """Spark's memory notation (``512m``, ``2g``, ``2048``: MiB; ``b`` alone: bytes) in MiB,
    rounded up; ``option`` names the option in the error."""
    match = _MEMORY.match(text.strip())
    if match is None:
        raise InvalidArgumentError(f"{option} {text!r}: use Spark's notation, e.g. 512m or 2g")
    value, unit, byte_suffix = int(match.group(1)), match.group(2).lower(), match.group(3)
    if not unit and byte_suffix:
        unit = "b"
    scale = {"b": 1 / 2**20, "k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}[unit]
    if value == 0:
        raise InvalidArgumentError(f"{option} {text!r}: must be more than 0")
    return max(1, math.ceil(value * scale))


def duration_s(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h`` or ``1h30m`` in seconds."""
    match = _DURATION.match(text.strip())
    if match is None or not any(match.groups()):
        raise InvalidArgumentError(
            f"--time-limit {text!r}: use seconds, or a unit on every part: 90s, 15m, 1h30m"
        )
    hours, minutes, seconds, bare = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds + bare
    if total <= 0:
        raise InvalidArgumentError(f"--time-limit {text!r}: must be more than 0 s")
    return float(total)


def key_value(option: str, text: str) -> tuple[str, str]:
    """``KEY=VALUE`` split once; the key must not be empty."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InvalidArgumentError(f"{option} {text!r}: expected KEY=VALUE")
    return key.strip(), value


@dataclass(frozen=True)
class SubmitSpec:
    """One training job's submission; :meth:`command` is its ``spark-submit`` command line."""

    #: The Python file to run on the driver, and its arguments.
    entry_point: str
    entry_args: tuple[str, ...] = ()
    #: ``local-cluster`` (built from the sizes below), ``spark://...``, ``yarn`` or ``k8s://...``.
    master: str = "local-cluster"
    deploy_mode: str | None = None
    workers: int = 2
    cores_per_worker: int = 1
    memory: str = "1g"
    driver_memory: str | None = None
    gpus_per_worker: int = 0
    queue: str | None = None
    archives: tuple[str, ...] = ()
    py_files: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    conf: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    name: str | None = None
    image: str | None = None
    time_limit: float | None = None
    spark_submit: str | None = None
    #: The interpreter of a packed environment, relative to a container (``--pack``).
    python: str | None = None
    #: Kerberos: spark-submit logs in as ``principal`` with ``keytab`` and keeps the job's
    #: delegation tokens fresh (YARN and Kubernetes).
    principal: str | None = None
    keytab: str | None = None
    #: The entry point is a trainer's script, run in every trainer as ``__main__`` (as
    #: ``torchrun`` runs one), under sparktrain's own driver program.
    per_worker: bool = False

    def __post_init__(self) -> None:
        for option, value in (("--workers", self.workers), ("--cores-per-worker", self.cores_per_worker)):
            if value < 1:
                raise InvalidArgumentError(f"{option} {value}: must be at least 1")
        if self.gpus_per_worker < 0:
            raise InvalidArgumentError(f"--gpus-per-worker {self.gpus_per_worker}: must be 0 or more")
        memory_mb(self.memory)
        if self.driver_memory is not None:
            memory_mb(self.driver_memory, "--driver-memory")
        sized = local_cluster_size(self.master)
        if self.profile == "local-cluster" and self.master != "local-cluster" and sized is None:
            raise InvalidArgumentError(
                f"--master {self.master!r}: use local-cluster (sized by --workers, --cores-per-worker "
                "and --memory) or local-cluster[WORKERS,CORES,MiB]"
            )
        if sized is not None and sized != (self.workers, self.cores_per_worker, memory_mb(self.memory)):
            raise InvalidArgumentError(
                f"--master {self.master} asks for {sized[0]} workers of {sized[1]} cores and {sized[2]} MiB, "
                f"but the options say {self.workers} of {self.cores_per_worker} cores and "
                f"{memory_mb(self.memory)} MiB: give one or make them agree"
            )
        if self.deploy_mode not in (None, "client", "cluster"):
            raise InvalidArgumentError(f"--deploy-mode {self.deploy_mode!r}: use client or cluster")
        if self.profile == "local-cluster" and self.mode == "cluster":
            raise InvalidArgumentError("--deploy-mode cluster: a local cluster runs its driver here (client)")
        if self.profile == "kubernetes" and not (
            self.image or self.conf_value("spark.kubernetes.container.image")
        ):
            raise InvalidArgumentError(
                "kubernetes: --image (the container image with sparktrain) is required"
            )
        if (
            self.profile == "kubernetes"
            and self.mode == "cluster"
            and not self.conf_value("spark.kubernetes.file.upload.path")
        ):
            # The driver's pod fetches the job's files from the upload folder, where spark-submit
            # puts them; without one, Spark fails in the pod. (In client mode the driver, here,
            # serves them to the executors itself.)
            shipped = [
                self.entry_point,
                *(item.split("#", 1)[0] for item in _listed(",".join(self.archives))),
                *_listed(",".join((*self.py_files, *self.files))),
            ]
            local = [
                "the --pack archive" if path == PACK_PLACEHOLDER else path
                for path in shipped
                if urlsplit(path).scheme in ("", "file")  # as Spark decides what to upload
            ]
            if local:
                raise InvalidArgumentError(
                    f"kubernetes: {', '.join(local)} on this machine cannot reach the pods without "
                    "--conf spark.kubernetes.file.upload.path=<a folder both sides reach>; or use "
                    "local:// paths inside the image"
                )
        if self.profile == "standalone" and self.mode == "cluster":
            raise InvalidArgumentError(
                "--deploy-mode cluster: Spark's standalone master does not run Python drivers in the "
                "cluster; use client mode"
            )
        if self.queue is not None and self.profile != "yarn":
            raise InvalidArgumentError(
                f"--queue {self.queue!r}: queues are YARN's; the master is {self.master}"
            )
        for item in _listed(",".join(self.archives)):
            _, sep, alias = item.partition("#")
            if sep and not plain_folder_name(alias):
                raise InvalidArgumentError(
                    f"--archives {item!r}: ARCHIVE#ALIAS takes one '#', then a plain folder name "
                    "(no '/', '#' or ',') to unpack the archive under"
                )
        if self.name is not None and not self.name.strip():
            raise InvalidArgumentError(
                f"--name {self.name!r}: the application needs a name; leave --name out for the script's"
            )
        self._check_kerberos()
        if not self.entry_point.endswith(".py"):
            raise InvalidArgumentError(f"entry point {self.entry_point!r}: must be a Python file (.py)")
        if ":" not in self.entry_point and not os.path.isfile(self.entry_point):
            # A local file, which spark-submit reads (client mode) or uploads (cluster mode).
            raise InvalidArgumentError(f"entry point {self.entry_point!r}: no such file")

    def _check_kerberos(self) -> None:
        if self.principal is None and self.keytab is None:
            return
        if self.principal is None or self.keytab is None or not self.principal.strip():
            raise InvalidArgumentError(
                "--principal and --keytab go together: spark-submit logs in as the principal with the keytab"
            )
        if self.profile not in ("yarn", "kubernetes"):
            raise InvalidArgumentError(
                f"--principal/--keytab: Spark obtains and renews delegation tokens on YARN and Kubernetes "
                f"only, not on {self.master}; there each host needs a ticket of its own (kinit) or a keytab "
                "(--env KRB5_CLIENT_KTNAME=...)"
            )
        if urlsplit(self.keytab).scheme in ("", "file") and not os.path.isfile(urlsplit(self.keytab).path):
            raise InvalidArgumentError(f"--keytab {self.keytab!r}: no such file")

    @property
    def profile(self) -> str:
        return profile_of(self.master)

    @property
    def mode(self) -> str:
        """The deploy mode: as given, else cluster on Kubernetes and client elsewhere."""
        return self.deploy_mode or ("cluster" if self.profile == "kubernetes" else "client")

    def conf_value(self, key: str) -> str | None:
        """The last ``--conf`` value given for ``key``, or None."""
        values = [value for k, value in self.conf if k == key]
        return values[-1] if values else None

    def confs(self) -> dict[str, str]:
        """The Spark confs of the job, the user's ``--conf`` last (they win)."""
        cores = str(self.cores_per_worker)
        confs: dict[str, str] = {
            "spark.executor.cores": cores,
            # One task, so one trainer, per executor.
            "spark.task.cpus": cores,
            "spark.executor.memory": self.memory,
            # Spark refuses barrier stages under dynamic allocation.
            "spark.dynamicAllocation.enabled": "false",
            # Start the job only when every executor has registered: the training stage needs
            # a slot for each trainer at once.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
        }
        if self.name:
            confs["spark.app.name"] = self.name
        if self.driver_memory:
            confs["spark.driver.memory"] = self.driver_memory
        confs.update(cluster_managers.sizing(self.profile, self.workers, self.cores_per_worker))
        if self.profile == "local-cluster":
            # Everything on this machine: keep every listener on loopback.
            confs["spark.driver.host"] = "127.0.0.1"
            confs["spark.driver.bindAddress"] = "127.0.0.1"
        if self.queue:
            confs["spark.yarn.queue"] = self.queue
        if self.image:
            confs["spark.kubernetes.container.image"] = self.image
        if self.gpus_per_worker:
            gpus = str(self.gpus_per_worker)
            confs["spark.executor.resource.gpu.amount"] = gpus
            confs["spark.task.resource.gpu.amount"] = gpus
            confs["spark.executor.resource.gpu.discoveryScript"] = f"./{GPU_SCRIPT.name}"
            if self.profile == "kubernetes":
                # Spark runs the script before a pod fetches --files: it must be in the image.
                confs["spark.executor.resource.gpu.discoveryScript"] = IMAGE_GPU_SCRIPT
                # The device plugin's resource name, which Spark asks the pods for.
                confs["spark.executor.resource.gpu.vendor"] = "nvidia.com"
        if self.archives:
            confs["spark.archives"] = ",".join(self.archives)
        if self.python:
            confs["spark.pyspark.python"] = self.python
        for name in THREAD_VARIABLES:
            confs[f"spark.executorEnv.{name}"] = cores
        for key, value in self.env:
            confs[f"spark.executorEnv.{key}"] = value
            if self.mode == "cluster":
                confs[cluster_managers.driver_env_prefix(self.profile) + key] = value
        confs.update(self.conf)
        for key, value in driver_python_confs(self.mode).items():
            confs.setdefault(key, value)
        return confs

    def resolved_master(self) -> str:
        """The ``--master`` value: a ``local-cluster[...]`` sized from the options when the
        profile was named without one."""
        if self.master == "local-cluster":
            return f"local-cluster[{self.workers},{self.cores_per_worker},{memory_mb(self.memory)}]"
        return self.master

    def command(self) -> list[str]:
        """The ``spark-submit`` command line."""
        spark_submit = self.spark_submit or find_spark_submit()
        command = [spark_submit, "--master", self.resolved_master()]
        command += ["--deploy-mode", self.mode]
        if self.principal is not None and self.keytab is not None:
            command += ["--principal", self.principal, "--keytab", self.keytab]
        confs = self.confs()
        # --files and --jars would replace the conf of the same meaning: merge them into it.
        files = [*_listed(confs.pop("spark.files", "")), *self.files]
        if self.per_worker and self.mode == "cluster":
            files.append(self.entry_point)  # the driver's container runs it from its folder
        if self.gpus_per_worker and self.profile != "kubernetes":
            files.append(str(GPU_SCRIPT))
        if files:
            command += ["--files", ",".join(files)]
        jars = [*_listed(confs.pop("spark.jars", "")), *bundled_jar(spark_version_of(spark_submit))]
        if jars:
            command += ["--jars", ",".join(jars)]
        if self.py_files:
            command += ["--py-files", ",".join(self.py_files)]
        for key, value in confs.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, *self.program()]

    def program(self) -> list[str]:
        """What ``spark-submit`` runs: the entry point and its arguments, or, with
        ``per_worker``, sparktrain's driver program running the entry point in every trainer.
        In cluster mode the script travels with ``--files`` and is named by its file name."""
        if not self.per_worker:
            return [self.entry_point, *self.entry_args]
        from sparktrain.deploy import script_driver

        script = os.path.basename(self.entry_point) if self.mode == "cluster" else self.entry_point
        driver = [script_driver.__file__, "--workers", str(self.workers)]
        if self.gpus_per_worker:
            driver += ["--gpus-per-worker", str(self.gpus_per_worker)]
        return [*driver, "--", script, *self.entry_args]

    def environment(self) -> dict[str, str]:
        """The environment ``spark-submit`` runs with: a local cluster's executors run this
        interpreter unless a packed environment is shipped, and a client-mode driver
        authenticates to HDFS with ``keytab``."""
        env = dict(os.environ)
        if self.keytab is not None and self.mode == "client" and urlsplit(self.keytab).scheme in ("", "file"):
            # spark-submit's keytab login lives in the driver's JVM; sparktrain's own HDFS
            # client in the driver's Python process finds Kerberos credentials through MIT
            # krb5, which takes a client keytab from this variable (a ticket already in the
            # cache still comes first).
            env.setdefault("KRB5_CLIENT_KTNAME", os.path.abspath(urlsplit(self.keytab).path))
        if "SPARK_HOME" not in env:
            # The pyspark wheel's launcher scripts look for their Spark with whatever `python3`
            # is on PATH, which may not have pyspark: name the one this interpreter has.
            home = spark_home()
            if home:
                env["SPARK_HOME"] = home
        if self.profile == "local-cluster":
            # Everything on this machine: workers and executors listen on loopback too.
            env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            if not self.python:
                env.setdefault("PYSPARK_PYTHON", sys.executable)
        return env


def _listed(value: str) -> list[str]:
    return [item for item in value.split(",") if item.strip()]


def bundled_jar(spark_version: str | None = None) -> list[str]:
    """sparktrain's jar (the JVM TFRecord format) for ``spark_version`` (default: this
    interpreter's pyspark) as a one-item list, or an empty one when this build has none; every
    job gets it."""
    from sparktrain.errors import PathNotFoundError
    from sparktrain.jvm import jar_path

    try:
        return [jar_path(spark_version)]
    except PathNotFoundError:
        return []


def spark_version_of(spark_submit: str) -> str | None:
    """The version of the Spark that ``spark_submit`` runs, from the name of the ``spark-core``
    jar of its Spark home: ``$SPARK_HOME``, else the one :meth:`SubmitSpec.environment` sets
    (this interpreter's pyspark), else the folder above ``spark_submit``'s ``bin/``. None when
    it has no such jar. sparktrain's jar must be the build for that Spark's Scala."""
    home = os.environ.get("SPARK_HOME") or spark_home() or os.path.dirname(os.path.dirname(spark_submit))
    for path in sorted(glob.glob(os.path.join(home, "jars", "spark-core_*.jar"))):
        match = re.fullmatch(r"spark-core_[\d.]+-(\d+\.\d+\S*)\.jar", os.path.basename(path))
        if match:
            return match.group(1)
    return None


def spark_home() -> str | None:
    """The Spark of the pyspark package this interpreter imports, if any."""
    try:
        import pyspark
    except ImportError:
        return None
    return os.path.dirname(pyspark.__file__)


def find_spark_submit() -> str:
    """``$SPARK_HOME/bin/spark-submit``, else the one next to this interpreter (the pyspark
    wheel's), else the first on ``PATH``."""
    home = os.environ.get("SPARK_HOME")
    candidates = [os.path.join(home, "bin", "spark-submit")] if home else []
    candidates.append(os.path.join(os.path.dirname(sys.executable), "spark-submit"))
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("spark-submit")
    if found is None:
        raise InvalidArgumentError(
            "spark-submit not found: set SPARK_HOME, or pip install 'sparktrain[spark]' into this environment"
        )
    return found


@dataclass
class _Watch:
    """What the submit's output told about the application, for killing it at the limit."""

    application: str | None = None

    def tee(self, source: IO[str], sink: IO[str]) -> None:
        # Reads to the end whatever happens to the sink: a reader that stopped would let the
        # pipe fill up and block spark-submit.
        for line in source:
            if self.application is None:
                self.application = cluster_managers.application_id(line)
            with contextlib.suppress(OSError, ValueError):
                sink.write(line)
                sink.flush()


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
                    # A negative status is the signal that ended spark-submit: as a shell says it.
                    return status if status >= 0 else 128 - status
                except subprocess.TimeoutExpired:
                    pass
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
    killed = cluster_managers.kill(spec, watch.application, spark_submit)
    _stop(process)
    what = f"application {watch.application}" if watch.application else "the application"
    if killed:
        done = f"killed {what} ({killed})"
    elif not cluster_managers.runs_outside_submit(spec):
        done = f"stopped {what}"
    elif watch.application:
        done = (
            f"could not kill {what} on the cluster: stop it with "
            f"{cluster_managers.manual_kill(spec, watch.application, spark_submit)}"
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


def parser() -> argparse.ArgumentParser:
    """The ``sparktrain submit`` command line."""
    p = argparse.ArgumentParser(
        prog="sparktrain submit",
        description="spark-submit a training job (a Python entry point) with the confs it needs: one "
        "trainer per executor, dynamic allocation off, thread pools sized to the cores, an enforced "
        "time limit.",
    )
    p.add_argument(
        "entry_point", help="the job's Python file (the driver's; with --per-worker, each trainer's)"
    )
    p.add_argument("entry_args", nargs=argparse.REMAINDER, help="its arguments")
    p.add_argument(
        "--master", default="local-cluster", help="local-cluster (default), spark://, yarn, k8s://"
    )
    p.add_argument("--deploy-mode", choices=("client", "cluster"))
    # No defaults here: a local-cluster[N,C,M] master gives them (spec_from_args).
    p.add_argument("--workers", type=int, help="trainers, one per executor (default 2)")
    p.add_argument("--cores-per-worker", type=int, help="executor cores = task cpus (default 1)")
    p.add_argument("--memory", help="executor memory (default 1g)")
    p.add_argument("--driver-memory")
    p.add_argument("--gpus-per-worker", type=int, default=0)
    p.add_argument("--queue", help="YARN queue")
    p.add_argument("--archives", action="append", default=[], help="ARCHIVE[#ALIAS], repeatable")
    p.add_argument("--pack", action="store_true", help="pack this environment and run Python from it")
    p.add_argument("--python", help="the executors' Python, e.g. ./environment/bin/python of an archive")
    p.add_argument("--py-files", action="append", default=[])
    p.add_argument("--files", action="append", default=[])
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="trainers' environment")
    p.add_argument("--name", help="the application's name")
    p.add_argument("--image", help="Kubernetes: the container image with sparktrain")
    p.add_argument("--time-limit", help="kill the application after this long: 3600, 90m, 1h30m")
    p.add_argument("--principal", help="Kerberos principal spark-submit logs in as (with --keytab)")
    p.add_argument(
        "--keytab",
        help="keytab of --principal: Spark renews the job's delegation tokens with it (YARN, Kubernetes)",
    )
    p.add_argument("--spark-submit", help="the spark-submit to run (default: $SPARK_HOME's, then PATH's)")
    p.add_argument(
        "--per-worker",
        action="store_true",
        help="run the entry point in every trainer as __main__, as torchrun does (a PyTorch, JAX or "
        "TensorFlow script), under sparktrain's own driver",
    )
    p.add_argument("--dry-run", action="store_true", help="print the command and exit")
    return p


def spec_from_args(
    args: argparse.Namespace, archives: Sequence[str] = (), python: str | None = None
) -> SubmitSpec:
    """The :class:`SubmitSpec` of parsed ``sparktrain submit`` arguments. The sizes not given
    come from a ``local-cluster[N,C,M]`` master, else from the defaults (2 workers, 1 core, 1g)."""
    sized = local_cluster_size(args.master)
    workers, cores, memory = (sized[0], sized[1], f"{sized[2]}m") if sized else (2, 1, "1g")
    return SubmitSpec(
        entry_point=args.entry_point,
        entry_args=tuple(args.entry_args),
        master=args.master,
        deploy_mode=args.deploy_mode,
        workers=workers if args.workers is None else args.workers,
        cores_per_worker=cores if args.cores_per_worker is None else args.cores_per_worker,
        memory=memory if args.memory is None else args.memory,
        driver_memory=args.driver_memory,
        gpus_per_worker=args.gpus_per_worker,
        queue=args.queue,
        archives=(*args.archives, *archives),
        py_files=tuple(args.py_files),
        files=tuple(args.files),
        conf=tuple(key_value("--conf", c) for c in args.conf),
        env=tuple(key_value("--env", e) for e in args.env),
        name=args.name,
        image=args.image,
        time_limit=None if args.time_limit is None else duration_s(args.time_limit),
        spark_submit=args.spark_submit,
        python=python or args.python,
        principal=args.principal,
        keytab=args.keytab,
        per_worker=args.per_worker,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``sparktrain submit``; returns the job's exit status, or 2 when sparktrain refused the
    options or could not pack the environment or start ``spark-submit``."""
    args = parser().parse_args(argv)
    try:
        if not args.pack:
            spec = spec_from_args(args)
        else:
            # Until the archive is made its placeholder stands in, so that every check (the
            # Kubernetes upload folder's too) runs before the slow pack.
            _, kind = current_env()
            placeholder = PackedEnv(PACK_PLACEHOLDER, kind)
            spec = spec_from_args(args, [placeholder.shipped], placeholder.python)
        if args.dry_run:
            print(shlex.join(spec.command()))
            return 0
        if not args.pack:
            return run(spec)
        with tempfile.TemporaryDirectory(prefix="sparktrain-submit-") as scratch:
            packed = pack(os.path.join(scratch, PACKED_NAME), overwrite=True)
            return run(spec_from_args(args, [packed.shipped], packed.python))
    except SparktrainError as e:
        print(f"sparktrain submit: {e}", file=sys.stderr)
        return 2


__all__ = [
    "TIME_LIMIT_EXIT",
    "SubmitSpec",
    "bundled_jar",
    "duration_s",
    "find_spark_submit",
    "key_value",
    "local_cluster_size",
    "main",
    "memory_mb",
    "parser",
    "profile_of",
    "run",
    "spark_home",
    "spark_version_of",
    "spec_from_args",
]
