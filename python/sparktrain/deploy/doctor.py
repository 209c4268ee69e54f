"""``sparktrain doctor``: what would make a training job fail on this Spark application, found
before the job runs, each finding with its fix.

The checks:

- ``spark-version``: sparktrain runs on Spark 3.5 and 4.x, and sparktrain's jar on
  ``spark.jars`` must be the build for the session's Spark (Scala 2.12 for 3.5, 2.13 for 4.x).
- ``dynamic-allocation``: Spark refuses barrier stages while dynamic allocation is on.
- ``slots``: the cluster must run every trainer at once, one task slot each.
- ``task-cpus``: when ``spark.task.cpus`` lets several tasks onto one executor, trainers share
  its cores and memory.
- ``executor-versions``: the executors' Python and sparktrain must be the driver's, and
  sparktrain must be importable there at all.
- ``storage``: each given folder (local, ``file://``, ``hdfs://``, ``viewfs://``) takes a
  small probe file, which is read back and removed.
- ``kerberos``: on a Kerberos-secured Hadoop, the driver needs credentials that GSSAPI
  finds (a valid ticket, a client keytab) or delegation tokens.
- ``gpu``: GPUs asked of each task must be given to the executors, and found there.

:func:`conf_findings` runs the checks that need nothing but the conf (no Spark job, no network);
``Cluster.run`` runs them before every job and raises
:class:`~sparktrain.errors.ConfigurationError` for their errors. :func:`diagnose` runs them
all on a live session, and :func:`main` is the ``sparktrain doctor`` command (which adds a
``spark`` finding when Spark refuses to start with the given confs).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import posixpath
import re
import sys
import textwrap
import threading
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

from sparktrain._deps import require_spark
from sparktrain.cluster.conf import TASK_GPU_CONF, task_gpus
from sparktrain.deploy import kerberos
from sparktrain.errors import SparktrainError

#: How serious a finding is: ``error`` fails a training job, ``warning`` slows or endangers it.
Level = Literal["ok", "warning", "error"]

#: Spark's conf of dynamic allocation, which barrier stages cannot run under.
DYNAMIC_ALLOCATION_CONF: Final = "spark.dynamicAllocation.enabled"
#: Spark's confs of the cores each task takes, and each executor has.
TASK_CPUS_CONF: Final = "spark.task.cpus"
EXECUTOR_CORES_CONF: Final = "spark.executor.cores"
#: Spark's confs of GPUs per executor, and how an executor finds its own (per task: TASK_GPU_CONF).
EXECUTOR_GPU_CONF: Final = "spark.executor.resource.gpu.amount"
EXECUTOR_GPU_SCRIPT_CONF: Final = "spark.executor.resource.gpu.discoveryScript"
#: A plugin that finds resources instead of a discovery script (RAPIDS ships one).
DISCOVERY_PLUGIN_CONF: Final = "spark.resources.discoveryPlugin"
#: The Hadoop conf that turns Kerberos on.
HADOOP_AUTH_CONF: Final = "hadoop.security.authentication"
#: Seconds :func:`diagnose` waits by default for executors to offer the slots it needs.
DEFAULT_SLOT_WAIT: Final = 20.0
#: Seconds the Spark job that asks executors for their versions may take.
DEFAULT_PROBE_TIMEOUT: Final = 120.0
#: The most tasks that job starts: enough to reach every executor of a usual cluster.
MAX_PROBE_TASKS: Final = 256

_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")
#: How PySpark says an executor's Python is not the driver's (Spark 4 and older wordings).
_PYTHON_MISMATCH = ("PYTHON_VERSION_MISMATCH", "Python in worker has different version")
_PACK_FIX = (
    "ship the driver's environment to the executors: `sparktrain pack` it and pass the archive "
    "with --archives (spark.archives), pointing spark.pyspark.python into it; or install the "
    "same Python and sparktrain on every node"
)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One result of a check: ``check`` names the check (``"dynamic-allocation"``...),
    ``level`` says how serious it is, ``message`` what was found, and ``fix`` what to change
    (None when nothing needs to)."""

    check: str
    level: Level
    message: str
    fix: str | None = None


# --- the conf-only checks --------------------------------------------------------------------


def conf_findings(
    conf: Any,
    num_workers: int | None = None,
    gpus_per_worker: int | None = None,
    master: str | None = None,
) -> list[Finding]:
    """The checks that read nothing but ``conf`` (a ``SparkConf``, or anything with
    ``.get(key, default)``): dynamic allocation, task CPUs against executor cores, and GPUs.

    ``num_workers`` counts the job's trainers (workers and evaluators), ``gpus_per_worker`` is
    ``Cluster.run``'s argument, and ``master`` the Spark master (default: ``spark.master`` in
    ``conf``). No Spark job runs and nothing is reached over the network."""
    master = master or _get(conf, "spark.master")
    return [
        _dynamic_allocation(conf, master),
        _task_cpus(conf, master, num_workers),
        _gpus(conf, master, gpus_per_worker),
    ]


def _get(conf: Any, key: str) -> str | None:
    value = conf.get(key, None)
    return None if value is None else str(value).strip()


def _is_local(master: str | None) -> bool:
    """Whether ``master`` runs every task in the driver's JVM (``local``, ``local[4]``)."""
    return master is not None and (master == "local" or master.startswith("local["))


def _dynamic_allocation(conf: Any, master: str | None) -> Finding:
    check = "dynamic-allocation"
    if (_get(conf, DYNAMIC_ALLOCATION_CONF) or "false").lower() != "true":
        return Finding(check, "ok", "dynamic allocation is off")
    fix = (
        f"set {DYNAMIC_ALLOCATION_CONF}=false for the training application (spark-submit --conf), "
        "or train in an application of its own and keep dynamic allocation for the others"
    )
    if _is_local(master):
        # Spark ignores the conf on a local master, so the job runs here; it would not on a cluster.
        return Finding(
            check,
            "warning",
            f"{DYNAMIC_ALLOCATION_CONF}=true: Spark ignores it on {master}, but on a cluster it "
            "refuses barrier stages, and so every training job",
            fix,
        )
    return Finding(
        check,
        "error",
        f"{DYNAMIC_ALLOCATION_CONF}=true: Spark refuses barrier stages under dynamic allocation, "
        "and a training job is one barrier stage",
        fix,
    )


def _executor_cores(conf: Any, master: str | None) -> int | None:
    """The cores of each executor as the conf tells them, or None when it does not."""
    text = _get(conf, EXECUTOR_CORES_CONF)
    if text is not None:
        try:
            return int(text)
        except ValueError:
            return None  # Spark refuses such a value when the context starts
    match = _LOCAL_CLUSTER.match(master or "")
    if match:
        return int(match.group(2))
    if master is not None and (master.startswith("yarn") or master.startswith("k8s://")):
        return 1  # Spark's default on YARN and Kubernetes
    return None  # standalone executors take all of a Worker's free cores


def _task_cpus(
    conf: Any, master: str | None, num_tasks: int | None, tasks_per_executor: int | None = None
) -> Finding:
    """``spark.task.cpus`` against the executors' cores; ``tasks_per_executor``, counted on a
    live cluster, stands in when the conf does not say how many cores executors have."""
    check = "task-cpus"
    text = _get(conf, TASK_CPUS_CONF) or "1"
    try:
        task_cpus = int(text)
    except ValueError:
        return Finding(
            check, "error", f"{TASK_CPUS_CONF}={text!r} is not a whole number", f"set {TASK_CPUS_CONF}"
        )
    if _is_local(master):
        return Finding(check, "ok", f"{master} runs every task in the driver's JVM; nothing to share out")
    cores = _executor_cores(conf, master)
    if cores is not None:
        fits = cores // task_cpus if task_cpus > 0 else 0
        where = f"{TASK_CPUS_CONF}={task_cpus} and {cores} cores per executor"
    elif tasks_per_executor is not None:
        fits = tasks_per_executor
        where = f"{TASK_CPUS_CONF}={task_cpus}, and the executors offer {fits} task slots each"
    else:
        return Finding(
            check,
            "ok",
            f"cannot tell from the conf how many tasks fit on an executor: {EXECUTOR_CORES_CONF} is "
            "not set, and standalone executors take all of a Worker's free cores",
        )
    if fits < 1:
        return Finding(
            check,
            "error",
            f"{where}: no task fits on an executor",
            f"set {TASK_CPUS_CONF} to at most {EXECUTOR_CORES_CONF}",
        )
    if fits > 1 and num_tasks != 1:
        cores_text = str(cores) if cores is not None else f"the executors' cores ({EXECUTOR_CORES_CONF})"
        return Finding(
            check,
            "warning",
            f"{where}: {fits} tasks fit on one executor, so trainers may share an executor's cores "
            "and memory, and run slower than one alone",
            f"set {TASK_CPUS_CONF}={cores_text} so that each executor runs one trainer",
        )
    return Finding(check, "ok", f"{where}: one trainer per executor")


def _amount(conf: Any, key: str) -> float | None:
    text = _get(conf, key)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None  # Spark refuses such a value when the context starts


def _gpus(conf: Any, master: str | None, gpus_per_worker: int | None) -> Finding:
    check = "gpu"
    task_amount = _amount(conf, TASK_GPU_CONF) or 0.0
    wanted = gpus_per_worker or 0
    if task_amount <= 0 and wanted == 0:
        return Finding(check, "ok", "no GPUs requested")
    per_task = task_gpus(conf)
    if wanted > per_task:
        return Finding(
            check,
            "error",
            f"gpus_per_worker={wanted}, but {TASK_GPU_CONF}={task_amount:g} gives each task {per_task}",
            f"set {TASK_GPU_CONF}={wanted}",
        )
    if _is_local(master):
        return Finding(
            check,
            "ok",
            f"{per_task} GPU(s) per task; on {master} tasks get the driver's GPUs "
            "(spark.driver.resource.gpu.*), not the executors'",
        )
    needed = max(per_task, wanted)
    executor_amount = _amount(conf, EXECUTOR_GPU_CONF)
    if executor_amount is None or executor_amount < needed:
        found = "is not set" if executor_amount is None else f"is {executor_amount:g}"
        return Finding(
            check,
            "error",
            f"each task asks for {needed} GPU(s) but {EXECUTOR_GPU_CONF} {found}: "
            "no executor can run a training task",
            f"set {EXECUTOR_GPU_CONF} to at least {needed} (the GPUs of each executor)",
        )
    if (
        master is not None
        and not master.startswith("local-cluster")
        and not _get(conf, EXECUTOR_GPU_SCRIPT_CONF)
        and not _get(conf, DISCOVERY_PLUGIN_CONF)
    ):
        fix = (
            f"set {EXECUTOR_GPU_SCRIPT_CONF} to a script that prints the executor's GPU addresses "
            "(Spark ships examples/src/main/scripts/getGpusResources.sh) and send it along with --files"
        )
        if master.startswith("spark://"):
            # A standalone Worker may hand its executors GPU addresses it found itself.
            return Finding(
                check,
                "warning",
                f"{EXECUTOR_GPU_SCRIPT_CONF} is not set: executors find GPUs only if their Worker "
                "was started with spark.worker.resource.gpu.amount and a discovery script",
                fix,
            )
        return Finding(
            check,
            "error",
            f"{EXECUTOR_GPU_SCRIPT_CONF} is not set: executors on {master} cannot find their GPUs "
            "and fail to start",
            fix,
        )
    return Finding(check, "ok", f"{needed} GPU(s) per task, {executor_amount:g} per executor")


# --- the checks of a live session ------------------------------------------------------------


def diagnose(
    spark_or_sc: Any,
    *,
    num_workers: int | None = None,
    paths: Sequence[str] = (),
    gpus_per_worker: int | None = None,
    slot_wait: float = DEFAULT_SLOT_WAIT,
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT,
) -> list[Finding]:
    """Every check, on a live SparkSession or SparkContext: the conf's, then the task slots
    (waiting up to ``slot_wait`` seconds for executors to register), the executors' Python and
    sparktrain (one small Spark job, at most ``probe_timeout`` seconds), each of ``paths``
    (written, read back and cleaned up from the driver) and a Kerberos ticket when Hadoop
    wants one.

    ``num_workers`` counts the trainers (workers and evaluators) the job will start."""
    from sparktrain.cluster.launcher import spark_context
    from sparktrain.cluster.slots import available_slots

    sc = spark_context(spark_or_sc)
    conf = sc.getConf()
    master = str(sc.master)
    findings = [_spark_version(str(sc.version), conf), _dynamic_allocation(conf, master)]

    needed = max(num_workers or 1, 1)
    # A local master's slots are fixed from the start: nothing to wait for.
    start = time.monotonic()
    deadline = start + (0.0 if _is_local(master) else slot_wait)
    while True:
        slots = available_slots(sc)
        if slots >= needed or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    executors = _executor_count(sc)
    # Where the conf does not tell executors' cores (standalone), count the slots they offer.
    per_executor = math.ceil(slots / executors) if executors > 0 else None
    findings.append(_task_cpus(conf, master, num_workers, per_executor))
    findings.append(_gpus(conf, master, gpus_per_worker))
    findings.append(_slots(conf, slots, executors, num_workers, time.monotonic() - start))
    findings.append(_executor_versions(sc, slots, probe_timeout))
    findings += storage_findings(paths)
    kerberos = kerberos_finding(_hadoop_authentication(sc))
    if kerberos is not None:
        findings.append(kerberos)
    return findings


def _spark_version(version: str, conf: Any) -> Finding:
    """Whether sparktrain supports Spark ``version``, and whether the sparktrain jar on
    ``spark.jars`` (if any) is the build for it: the other build fails in every task that
    touches the JVM TFRecord format, with errors that do not say why."""
    from sparktrain.errors import InvalidArgumentError
    from sparktrain.jvm import SPARK35_JAR_SUFFIX, spark_line

    check = "spark-version"
    try:
        line = spark_line(version)
    except InvalidArgumentError:
        return Finding(
            check,
            "error",
            f"this is Spark {version}; sparktrain supports Spark 3.5 and 4.x",
            "run on Spark 3.5 or 4.x",
        )
    jars = [
        name
        for name in (posixpath.basename(j.strip()) for j in (_get(conf, "spark.jars") or "").split(","))
        if name.startswith("sparktrain-hadoop-") and name.endswith(".jar")
    ]
    for name in jars:
        built_for = "3.5" if name.endswith(SPARK35_JAR_SUFFIX) else "4"
        if built_for != line:
            return Finding(
                check,
                "error",
                f"spark.jars has {name}, sparktrain's jar for Spark {built_for}, but this is Spark {version}",
                f"use sparktrain.jar_path() with this Spark's pyspark (the build for Spark {line}); "
                "`sparktrain submit` adds the right one by itself",
            )
    if line == "4":
        return Finding(check, "ok", f"Spark {version}")
    tfrecord = (
        "format('tfrecord') is sparktrain's jar"
        if jars
        else "format('tfrecord') needs sparktrain's jar on spark.jars here; tfrecord.write and "
        "read_dataframe do not"
    )
    return Finding(
        check,
        "ok",
        f"Spark {version}: all of sparktrain but the Python data source API (Spark 4); {tfrecord}",
    )


def _executor_count(sc: Any) -> int:
    """Executors the scheduler knows; on a local master, the driver itself."""
    if _is_local(str(sc.master)):
        return 1
    # Scala-private, but public in the bytecode; unlike the block managers' list, it counts
    # an executor as soon as it offers task slots.
    return int(sc._jsc.sc().getExecutorIds().size())


def _slots(conf: Any, slots: int, executors: int, num_workers: int | None, waited: float) -> Finding:
    check = "slots"
    cpus = _get(conf, TASK_CPUS_CONF) or "1"
    have = f"{slots} task slot(s) on {executors} executor(s) ({TASK_CPUS_CONF}={cpus})"
    if num_workers is None:
        if slots == 0:
            return Finding(
                check,
                "warning",
                f"no executor offered a task slot within {waited:.0f} s",
                "start executors (spark.executor.instances), or wait for them before training",
            )
        return Finding(check, "ok", have)
    if slots < num_workers:
        return Finding(
            check,
            "error",
            f"{num_workers} trainer(s) need {num_workers} task slot(s) at once, but the cluster has {have} "
            f"after waiting {waited:.0f} s",
            "add executors (spark.executor.instances) or cores, lower spark.task.cpus, or train "
            "fewer workers",
        )
    return Finding(check, "ok", f"{num_workers} trainer(s) fit: {have}")


def _executor_versions(sc: Any, slots: int, timeout: float) -> Finding:
    """Asks the executors, in one small Spark job, which Python and sparktrain they run."""
    check = "executor-versions"
    if slots < 1:
        return Finding(check, "warning", "no executor to ask for its Python and sparktrain versions")
    driver = (tuple(sys.version_info[:3]), _driver_version(), sys.executable)
    try:
        rows = _probe_executors(sc, min(slots, MAX_PROBE_TASKS), timeout)
    except TimeoutError as e:
        return Finding(check, "error", str(e), "look at the executors' logs; check that tasks can start")
    except Exception as e:
        from sparktrain.cluster.failures import spark_error_summary

        text = str(e)
        if any(marker in text for marker in _PYTHON_MISMATCH):
            return Finding(
                check,
                "error",
                f"the executors run another Python than the driver's {_dotted(driver[0])}: "
                f"{spark_error_summary(text)}",
                _PACK_FIX,
            )
        return Finding(
            check,
            "error",
            f"a Spark job asking executors for their versions failed: {spark_error_summary(text) or e!r}",
            _PACK_FIX,
        )
    broken = sorted({(host, exe, problem) for host, _, version, exe, problem in rows if version is None})
    if broken:
        where = ", ".join(sorted({f"{host} ({exe})" for host, exe, _ in broken}))
        return Finding(
            check,
            "error",
            f"sparktrain cannot be imported on the executors of {where}: {broken[0][2]}",
            _PACK_FIX,
        )
    seen = sorted({(tuple(py), str(version), exe) for _, py, version, exe, _ in rows})
    hosts = sorted({row[0] for row in rows})
    where = f"{len(rows)} task(s) on {len(hosts)} host(s)"
    described = "; ".join(f"Python {_dotted(py)}, sparktrain {v} ({exe})" for py, v, exe in seen)
    driver_text = f"Python {_dotted(driver[0])}, sparktrain {driver[1]}"
    if any(py[:2] != driver[0][:2] or v != driver[1] for py, v, _ in seen):
        return Finding(check, "error", f"{where} run {described}; the driver runs {driver_text}", _PACK_FIX)
    if any(py != driver[0] for py, _, _ in seen):
        return Finding(
            check,
            "warning",
            f"{where} run {described}; the driver runs {driver_text}: another patch release of Python",
            _PACK_FIX,
        )
    return Finding(check, "ok", f"{where} run {described}, as the driver does")


def _driver_version() -> str:
    import sparktrain

    return str(sparktrain.__version__)


def _dotted(version: Sequence[int]) -> str:
    return ".".join(str(part) for part in version)


#: What each probe task reports: host, Python version, sparktrain version (None when it cannot
#: be imported), interpreter, and why sparktrain could not be imported.
_ProbeRow = tuple[str, tuple[int, ...], str | None, str, str | None]


def _probe_executors(sc: Any, tasks: int, timeout: float) -> list[_ProbeRow]:
    """Runs ``tasks`` tasks that report what their Python worker runs; raises TimeoutError
    (after cancelling the job) when they do not finish within ``timeout`` seconds."""

    # Defined here so that cloudpickle ships the function itself: a module-level function
    # travels as a reference to this module, which an executor without sparktrain cannot load.
    def probe(_: Iterator[int]) -> Iterator[_ProbeRow]:
        import socket
        import sys

        version: str | None = None
        problem: str | None = None
        try:
            import sparktrain

            version = str(sparktrain.__version__)
        except Exception as e:  # not installed, or its native module does not load there
            problem = f"{type(e).__name__}: {e}"
        yield socket.gethostname(), tuple(sys.version_info[:3]), version, sys.executable, problem

    group = f"sparktrain-doctor-{uuid.uuid4().hex[:8]}"
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            sc.setJobGroup(group, "sparktrain doctor: executor versions", interruptOnCancel=True)
            outcome["rows"] = sc.parallelize(range(tasks), tasks).mapPartitions(probe).collect()
        except BaseException as e:  # handed to the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name=group, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        sc.cancelJobGroup(group)
        thread.join(10.0)
        raise TimeoutError(
            f"a Spark job of {tasks} task(s) asking executors for versions took over {timeout:g} s"
        )
    if "error" in outcome:
        raise outcome["error"]
    return [(str(h), tuple(py), v, str(exe), p) for h, py, v, exe, p in outcome["rows"]]


# --- storage ---------------------------------------------------------------------------------


def storage_findings(paths: Sequence[str]) -> list[Finding]:
    """For each folder in ``paths``: writes a small probe file into it, reads it back and
    removes it. A folder that does not exist yet is created for the probe and removed again,
    as far as it was created. Runs on the driver, with its network and credentials."""
    return [_probe_path(path) for path in paths]


def _parent(path: str) -> str:
    """The folder holding ``path``; the root is its own parent."""
    parts = urlsplit(path)
    if parts.scheme:
        folder = posixpath.dirname(parts.path.rstrip("/")) or "/"
        return urlunsplit(parts._replace(path=folder))
    return os.path.dirname(path.rstrip("/")) or "/"


def _probe_path(path: str) -> Finding:
    from sparktrain import fs

    check = "storage"
    folder = path.rstrip("/") or "/"
    if not urlsplit(folder).scheme:
        folder = os.path.abspath(folder)  # so that its parents can be walked up to the root
    fix = "use a folder the job's user may write, or give that user write permission on it"
    try:
        if fs.exists(folder):
            if not fs.status(folder).is_dir:
                return Finding(check, "error", f"{path} is a file, not a folder", "give a folder")
            created: list[str] = []
        else:
            # The folders write_bytes is about to create, deepest first, to remove them again.
            created = [folder]
            while (parent := _parent(created[-1])) != created[-1] and not fs.exists(parent):
                created.append(parent)
    except SparktrainError as e:
        return Finding(check, "error", f"cannot look at {path}: {e}", fix)
    probe = f"{folder.rstrip('/')}/.sparktrain-doctor-{uuid.uuid4().hex}"
    data = b"sparktrain doctor probe\n"
    failure: SparktrainError | None = None
    read = b""
    try:
        fs.write_bytes(probe, data)
        read = fs.read_bytes(probe)
    except SparktrainError as e:
        failure = e
    # Whatever failed, what the probe made is removed: the file, and the folders it created.
    leftovers = _remove_probe([probe, *created])
    left = f"; it could not remove {', '.join(leftovers)}" if leftovers else ""
    if failure is not None:
        return Finding(check, "error", f"cannot write a file under {path}: {failure}{left}", fix)
    if read != data:
        return Finding(
            check, "error", f"{path}: a probe file read back differs from what was written{left}", fix
        )
    if leftovers:
        return Finding(
            check,
            "warning",
            f"{path} is writable, but the probe could not remove {', '.join(leftovers)}",
            "remove them by hand",
        )
    made = " (created for the probe and removed again)" if created else ""
    return Finding(check, "ok", f"{path} is writable and readable{made}")


def _remove_probe(targets: Sequence[str]) -> list[str]:
    """Removes each of ``targets`` (the probe file, then the folders made for it, deepest
    first) that exists; returns those that could not be removed."""
    from sparktrain import fs

    leftovers = []
    for target in targets:
        try:
            fs.delete(target, recursive=False)  # a folder that is not empty stays, and is named
        except SparktrainError:
            # Someone else's files appeared there meanwhile, or no right to remove it; or it
            # was never made. Named unless it is known not to be there.
            try:
                still_there = fs.exists(target)
            except SparktrainError:
                still_there = True
            if still_there:
                leftovers.append(target)
    return leftovers


# --- Kerberos --------------------------------------------------------------------------------


def _hadoop_authentication(sc: Any | None = None) -> str | None:
    """``hadoop.security.authentication`` from ``$HADOOP_CONF_DIR/core-site.xml``, else from
    the Hadoop conf of ``sc``'s JVM; None when neither says."""
    conf_dir = os.environ.get("HADOOP_CONF_DIR")
    if conf_dir:
        site = Path(conf_dir) / "core-site.xml"
        try:
            for prop in ElementTree.parse(site).getroot().iter("property"):
                if (prop.findtext("name") or "").strip() == HADOOP_AUTH_CONF:
                    return (prop.findtext("value") or "").strip() or None
        except (OSError, ElementTree.ParseError):
            pass  # the JVM's conf below, or none
    if sc is not None:
        try:
            value = sc._jsc.hadoopConfiguration().get(HADOOP_AUTH_CONF)
        except Exception:  # no JVM to ask: nothing known
            return None
        return str(value) if value else None
    return None


def kerberos_finding(authentication: str | None = None) -> Finding | None:
    """Whether the driver can authenticate to a Kerberized Hadoop, when ``authentication``
    (default: the value of ``hadoop.security.authentication`` in
    ``$HADOOP_CONF_DIR/core-site.xml``) is ``kerberos``; None otherwise.

    It looks where sparktrain's HDFS client looks (:mod:`sparktrain.deploy.kerberos`): the
    default credentials of MIT's GSSAPI library (a valid ticket in the cache ``KRB5CCNAME``
    names, or a client keytab in ``KRB5_CLIENT_KTNAME``), else delegation tokens in
    ``HADOOP_TOKEN_FILE_LOCATION`` (as YARN gives its containers). A ticket that expires
    within the hour is a warning unless a client keytab can renew it."""
    if authentication is None:
        authentication = _hadoop_authentication()
    if (authentication or "").lower() != "kerberos":
        return None
    check = "kerberos"
    fix = (
        "run `kinit <principal>` (or `kinit -kt <keytab> <principal>`) before starting the job, or "
        "set KRB5_CLIENT_KTNAME to a keytab; for jobs that outlive a ticket pass --principal and "
        "--keytab to sparktrain submit (or spark-submit) so that Spark renews its own delegation tokens"
    )
    try:
        credentials = kerberos.default_credentials()
    except kerberos.NoCredentials as e:
        tokens = kerberos.token_file()
        if tokens is not None:
            return Finding(
                check,
                "ok",
                f"Hadoop uses Kerberos; no ticket, but delegation tokens in {tokens} "
                "(HADOOP_TOKEN_FILE_LOCATION), as YARN gives its containers",
            )
        if not kerberos.gssapi_available():
            return Finding(
                check,
                "error",
                f"Hadoop uses Kerberos, but {kerberos.GSSAPI_LIBRARY} (MIT Kerberos), which "
                "sparktrain's HDFS client authenticates with, cannot be loaded",
                "install libgssapi-krb5-2 (Debian, Ubuntu) or krb5-libs (RHEL, CentOS)",
            )
        return Finding(
            check, "error", f"Hadoop uses Kerberos, but there are no Kerberos credentials: {e}", fix
        )
    left = credentials.lifetime_s
    valid = "" if left is None else f", valid for {_duration(left)}"
    message = f"Hadoop uses Kerberos, and GSSAPI finds credentials for {credentials.principal}{valid}"
    if left is not None and left < 3600 and not os.environ.get("KRB5_CLIENT_KTNAME"):
        return Finding(check, "warning", f"{message}: a job that runs longer loses access to HDFS then", fix)
    return Finding(check, "ok", message)


def _duration(seconds: int) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{max(seconds // 60, 1)} min"


# --- the report and the command ------------------------------------------------------------


def report(findings: Sequence[Finding]) -> str:
    """``findings`` as text: a block per finding (level, check, what was found, the fix),
    then a line counting them by level."""
    blocks = []
    for f in findings:
        lines = [f"{f.level.upper():8} {f.check}"]
        lines.append(
            textwrap.fill(f.message, 100, initial_indent="  ", subsequent_indent="  ", break_long_words=False)
        )
        if f.fix:
            lines.append(
                textwrap.fill(
                    f"fix: {f.fix}",
                    100,
                    initial_indent="  ",
                    subsequent_indent="       ",
                    break_long_words=False,
                )
            )
        blocks.append("\n".join(lines))
    counts = {level: sum(f.level == level for f in findings) for level in ("error", "warning", "ok")}
    blocks.append(
        ", ".join(f"{n} {level}{'' if n == 1 or level == 'ok' else 's'}" for level, n in counts.items())
    )
    return "\n\n".join(blocks)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparktrain doctor",
        description="Checks a Spark application and its storage for what would make a training job "
        "fail, and says how to fix each finding. Exits with 1 when any check finds an error, 2 when "
        "the options are refused.",
    )
    parser.add_argument("--master", help="Spark master URL (default: spark-defaults, as pyspark picks it)")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark conf (repeatable)"
    )
    parser.add_argument("--workers", type=_count(1), metavar="N", help="trainers the job will start")
    parser.add_argument(
        "--path", action="append", default=[], metavar="URL", help="a folder the job writes (repeatable)"
    )
    parser.add_argument("--gpus-per-worker", type=_count(0), metavar="N", help="GPUs each trainer needs")
    parser.add_argument("--name", default="sparktrain-doctor", help="the Spark application's name")
    parser.add_argument(
        "--wait",
        type=_seconds,
        default=DEFAULT_SLOT_WAIT,
        metavar="SECONDS",
        help=f"how long to wait for executors to register (default {DEFAULT_SLOT_WAIT:g})",
    )
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < math.inf:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 seconds or more, and finite")
    return value


def _count(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value

    return parse


def main(argv: Sequence[str]) -> int:
    """``sparktrain doctor [options]``: starts (or joins) a SparkSession with the options,
    prints :func:`report` of :func:`diagnose`, stops the session if it started it, and returns
    1 when any finding is an error, else 0 (2 for bad options)."""
    parser = _parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:  # --help, or options argparse refused (it printed why)
        return e.code if isinstance(e.code, int) else 2
    from sparktrain.deploy.submit import key_value

    try:
        confs = dict(key_value("--conf", item) for item in args.conf)
        require_spark("sparktrain doctor")
    except SparktrainError as e:
        parser.print_usage(sys.stderr)
        print(f"sparktrain doctor: {e}", file=sys.stderr)
        return 2

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    started = SparkContext._active_spark_context is None
    builder = SparkSession.builder.appName(args.name)
    if args.master:
        builder = builder.master(args.master)
    for key, value in confs.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as e:
        from sparktrain.cluster.failures import spark_error_summary

        # Spark refused the conf itself: say what the conf checks see in it, and why Spark stopped.
        findings = conf_findings(confs, args.workers, args.gpus_per_worker, args.master)
        findings.append(
            Finding(
                "spark",
                "error",
                f"Spark did not start: {spark_error_summary(str(e)) or repr(e)}",
                "correct the setting Spark names; the findings above may point at it",
            )
        )
        print(report(findings))
        return 1
    try:
        if started:
            session.sparkContext.setLogLevel("ERROR")
        findings = diagnose(
            session,
            num_workers=args.workers,
            paths=args.path,
            gpus_per_worker=args.gpus_per_worker,
            slot_wait=args.wait,
        )
    finally:
        if started:
            session.stop()
    print(report(findings))
    return 1 if any(f.level == "error" for f in findings) else 0


__all__ = [
    "DEFAULT_PROBE_TIMEOUT",
    "DEFAULT_SLOT_WAIT",
    "Finding",
    "Level",
    "conf_findings",
    "diagnose",
    "kerberos_finding",
    "main",
    "report",
    "storage_findings",
]
