"""What a training job's ``spark-submit`` command is: :class:`SubmitSpec`, built from a few
job-level options, and the parsers of those options' values (sizes, durations, ``key=value``).
Runs in the ``sparktrain submit`` command, on the machine that submits.

A training job wants a Spark application of a particular shape: one task per executor (each
executor runs one trainer), all executors up before the gang-scheduled stage starts, no dynamic
allocation (Spark refuses barrier stages with it), thread pools sized to the executor's cores.
:class:`SubmitSpec` turns the options into that command for a *profile* (a kind of cluster
manager: ``local-cluster``, ``standalone``, ``yarn``, ``kubernetes``).
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from sparktrain.deploy import cluster_managers
from sparktrain.deploy.pack import driver_python_confs, plain_folder_name
from sparktrain.deploy.spark_home import bundled_jar, find_spark_submit, spark_home, spark_version_of
from sparktrain.errors import InvalidArgumentError

#: Thread-pool variables set to the executor's cores: the engine's and the common math
#: libraries', so a trainer uses the cores Spark gave it and no more.
THREAD_VARIABLES: Final = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "RAYON_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
)
#: What stands for the ``--pack`` archive until it is made: in ``--dry-run``'s command, and in
#: the checks that run before the pack.
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
        if self.conf_value("spark.master") is not None:
            # spark-submit's own --master wins over the conf: the job would run elsewhere.
            raise InvalidArgumentError(
                f"--conf spark.master={self.conf_value('spark.master')}: give the master with --master"
            )
        if self.image is not None and self.profile != "kubernetes":
            raise InvalidArgumentError(
                f"--image {self.image!r}: container images are Kubernetes'; the master is {self.master}"
            )
        if self.profile == "local-cluster":
            self._check_local_executors()
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

    def _check_local_executors(self) -> None:
        """Refuses executors larger than the local cluster's workers (``--cores-per-worker``,
        ``--memory``): none would start, and the job would wait for them until Spark gives up."""
        cores = self.conf_value("spark.executor.cores")
        if cores is not None and (not cores.isdigit() or int(cores) > self.cores_per_worker):
            raise InvalidArgumentError(
                f"--conf spark.executor.cores={cores}: the local cluster's workers have "
                f"{self.cores_per_worker} core(s) each; size them with --cores-per-worker instead"
            )
        memory = self.conf_value("spark.executor.memory")
        if memory is not None and memory_mb(memory, "--conf spark.executor.memory") > memory_mb(self.memory):
            raise InvalidArgumentError(
                f"--conf spark.executor.memory={memory}: the local cluster's workers have {self.memory} "
                "each; size them with --memory instead"
            )

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
            # The master and workers run in the driver's JVM and log there: at INFO their
            # hundreds of lines (an executor's launch command each) bury the job's own.
            confs["spark.log.level"] = "WARN"
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


__all__ = [
    "GPU_SCRIPT",
    "SubmitSpec",
    "duration_s",
    "key_value",
    "local_cluster_size",
    "memory_mb",
    "profile_of",
]
