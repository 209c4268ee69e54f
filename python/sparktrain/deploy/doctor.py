"""``sparktrain doctor``: what would make a training job fail on this Spark application, found
before the job runs, each finding with its fix.

The checks:

- ``spark-version``: sparktrain runs on Spark 3.5 and 4.x, and sparktrain's jar on
  ``spark.jars`` must be the build for the session's Spark (Scala 2.12 for 3.5, 2.13 for 4.x).
- ``jars``: every local file on ``spark.jars`` must exist; Spark starts without a missing one.
- ``dynamic-allocation``: Spark refuses barrier stages while dynamic allocation is on.
- ``settings``: sparktrain's ``spark.sparktrain.*`` confs, as ``Cluster.run`` reads them (a
  misspelt key, a value out of range, a TLS file that cannot be read).
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
- ``gpu-runtime``: a task given GPUs must find the NVIDIA driver and the cards Spark named
  (an error otherwise), and, for sparktrain's own engine, its CUDA build and CUDA's libraries
  (a warning otherwise: frameworks a job brings do not need them).

:func:`conf_findings` runs the checks that need nothing but the conf (no Spark job, no network);
``Cluster.run`` runs them before every job and raises
:class:`~sparktrain.errors.ConfigurationError` for their errors. :func:`diagnose` runs them
all on a live session, and :func:`main` is the ``sparktrain doctor`` command (which adds a
``spark`` finding when Spark refuses to start with the given confs).
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
import time
from collections.abc import Sequence
from typing import Any, Final

from sparktrain import _spark
from sparktrain._deps import require_spark
from sparktrain.cluster.driver.conf import task_gpus
from sparktrain.cluster.driver.preflight import (
    Finding,
    Level,
    check_dynamic_allocation,
    check_gpus,
    check_settings,
    check_task_cpus,
    conf_findings,
)
from sparktrain.deploy import probes
from sparktrain.deploy.gpu_probe import gpu_runtime_finding
from sparktrain.deploy.probes import kerberos_finding, storage_findings
from sparktrain.errors import SparktrainError

#: Seconds :func:`diagnose` waits by default for executors to offer the slots it needs.
DEFAULT_SLOT_WAIT: Final = 20.0
#: Seconds the Spark job that asks executors for their versions may take.
DEFAULT_PROBE_TIMEOUT: Final = 120.0


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
    (written, read back and cleaned up from the driver), a Kerberos ticket when Hadoop
    wants one, and, when tasks ask for GPUs, what they find on them (one more small job).

    ``num_workers`` counts the trainers (workers and evaluators) the job will start."""
    sc = _spark.context(spark_or_sc, "spark_or_sc")
    conf = sc.getConf()
    master = str(sc.master)
    findings = [
        probes.spark_version_finding(str(sc.version), conf),
        probes.jars_finding(conf),
        check_dynamic_allocation(conf, master),
        check_settings(conf),
    ]

    needed = max(num_workers or 1, 1)
    # A local master's slots are fixed from the start: nothing to wait for.
    start = time.monotonic()
    deadline = start + (0.0 if _spark.is_local(master) else slot_wait)
    while True:
        slots = _spark.available_slots(sc)
        if slots >= needed or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    executors = _spark.executor_count(sc)
    # Where the conf does not tell executors' cores (standalone), count the slots they offer.
    per_executor = math.ceil(slots / executors) if executors > 0 else None
    findings.append(check_task_cpus(conf, master, num_workers, per_executor))
    gpus = check_gpus(conf, master, gpus_per_worker)
    findings.append(gpus)
    findings.append(probes.slots_finding(conf, slots, executors, num_workers, time.monotonic() - start))
    versions = probes.executor_versions_finding(sc, slots, probe_timeout)
    findings.append(versions)
    # What the tasks find on their GPUs, once Spark can give them GPUs and they can import
    # sparktrain.
    if (task_gpus(conf) > 0 or gpus_per_worker) and gpus.level != "error" and versions.level != "error":
        findings.append(gpu_runtime_finding(sc, slots, probe_timeout))
    findings += storage_findings(paths)
    kerberos = kerberos_finding(probes.hadoop_authentication(sc))
    if kerberos is not None:
        findings.append(kerberos)
    return findings


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
    from sparktrain.deploy.spec import key_value

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
    unreachable_master = probes.master_finding(args.master) if started and args.master else None
    if unreachable_master is not None:
        findings = conf_findings(confs, args.workers, args.gpus_per_worker, args.master)
        print(report([*findings, unreachable_master]))
        return 1
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
                f"Spark did not start (master {args.master or 'from the Spark conf'}): "
                f"{spark_error_summary(str(e)) or repr(e)}",
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
