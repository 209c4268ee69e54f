"""The checks of the Spark conf that ``Cluster.run`` makes before every job, and that
``sparktrain doctor`` reports (:mod:`sparktrain.deploy.doctor`): dynamic allocation, task CPUs
against executor cores, and GPUs. Runs on the driver; reads nothing but the conf (no Spark job,
no network).

An error among them fails ``Cluster.run`` at once with
:class:`~sparktrain.errors.ConfigurationError`; a warning is logged once per Spark application.
Local mode's GPUs are checked here too, against the driver's own.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any, Final, Literal

from sparktrain._spark import is_local
from sparktrain.cluster.driver.conf import TASK_GPU_CONF, read_conf, task_gpus
from sparktrain.cluster.driver.options import JobOptions
from sparktrain.errors import ConfigurationError, InvalidArgumentError

_log = logging.getLogger(__name__)
#: The conf checks already warned about, as (Spark application, check): once per application
#: is enough, even where the message differs from one job to the next (its counts do).
_warned: set[tuple[str, str]] = set()

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
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")


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
    master = master or conf_value(conf, "spark.master")
    return [
        check_dynamic_allocation(conf, master),
        check_task_cpus(conf, master, num_workers),
        check_gpus(conf, master, gpus_per_worker),
    ]


def check_settings(conf: Any) -> Finding:
    """sparktrain's own ``spark.sparktrain.*`` settings, read as ``Cluster.run`` reads them
    (which raises :class:`~sparktrain.errors.InvalidArgumentError` for a bad one): a misspelt
    key, a value out of range, a TLS file that cannot be read."""
    check = "settings"
    try:
        read_conf(conf, None)
    except InvalidArgumentError as e:
        return Finding(
            check, "error", str(e), "correct or remove it (docs/deploy.md, Configuration reference)"
        )
    return Finding(check, "ok", "the spark.sparktrain.* settings are valid")


def conf_value(conf: Any, key: str) -> str | None:
    value = conf.get(key, None)
    return None if value is None else str(value).strip()


def check_dynamic_allocation(conf: Any, master: str | None) -> Finding:
    check = "dynamic-allocation"
    if (conf_value(conf, DYNAMIC_ALLOCATION_CONF) or "false").lower() != "true":
        return Finding(check, "ok", "dynamic allocation is off")
    fix = (
        f"set {DYNAMIC_ALLOCATION_CONF}=false for the training application (spark-submit --conf), "
        "or train in an application of its own and keep dynamic allocation for the others"
    )
    if is_local(master):
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
    text = conf_value(conf, EXECUTOR_CORES_CONF)
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


def check_task_cpus(
    conf: Any, master: str | None, num_tasks: int | None, tasks_per_executor: int | None = None
) -> Finding:
    """``spark.task.cpus`` against the executors' cores; ``tasks_per_executor``, counted on a
    live cluster, stands in when the conf does not say how many cores executors have."""
    check = "task-cpus"
    text = conf_value(conf, TASK_CPUS_CONF) or "1"
    try:
        task_cpus = int(text)
    except ValueError:
        return Finding(
            check, "error", f"{TASK_CPUS_CONF}={text!r} is not a whole number", f"set {TASK_CPUS_CONF}"
        )
    if is_local(master):
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
    text = conf_value(conf, key)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None  # Spark refuses such a value when the context starts


def check_gpus(conf: Any, master: str | None, gpus_per_worker: int | None) -> Finding:
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
    if is_local(master):
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
        and not conf_value(conf, EXECUTOR_GPU_SCRIPT_CONF)
        and not conf_value(conf, DISCOVERY_PLUGIN_CONF)
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


def check_conf(sc: Any, conf: Any, options: JobOptions) -> None:
    """Runs :func:`conf_findings` for the job ``options`` describes: raises
    :class:`~sparktrain.errors.ConfigurationError` for their errors and logs their warnings,
    each once per Spark application."""
    findings = conf_findings(conf, options.num_tasks, options.gpus_per_worker, sc.master)
    errors = [f for f in findings if f.level == "error"]
    if errors:
        lines = [f"- [{f.check}] {f.message}" + (f"; fix: {f.fix}" if f.fix else "") for f in errors]
        raise ConfigurationError(
            f"the Spark conf cannot run {options.name}:\n" + "\n".join(lines),
            findings=errors,
            checks=[f.check for f in errors],
        )
    for f in findings:
        key = (str(sc.applicationId), f.check)
        if f.level == "warning" and key not in _warned:
            _warned.add(key)
            _log.warning(
                "%s [%s]: %s%s", options.name, f.check, f.message, f"; fix: {f.fix}" if f.fix else ""
            )


def local_gpus(sc: Any, options: JobOptions) -> list[tuple[str, ...]]:
    """Local mode's GPUs, ``gpus_per_worker`` for each training task from the driver's own
    (``spark.driver.resource.gpu.*``); none without ``gpus_per_worker``."""
    if not options.gpus_per_worker:
        return []
    resources = sc.resources
    owned = list(resources["gpu"].addresses) if "gpu" in resources else []
    wanted = options.gpus_per_worker * options.num_workers
    if len(owned) < wanted:
        raise ConfigurationError(
            f"local mode needs {wanted} GPUs on the driver ({options.num_workers} trainers x "
            f"gpus_per_worker={options.gpus_per_worker}) but Spark gives it {owned}; "
            "set spark.driver.resource.gpu.amount and its discovery script"
        )
    k = options.gpus_per_worker
    per_task = [tuple(owned[i * k : (i + 1) * k]) for i in range(options.num_workers)]
    return per_task + [()] * options.num_evaluators
