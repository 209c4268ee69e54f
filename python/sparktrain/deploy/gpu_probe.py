"""``sparktrain doctor``'s ``gpu-runtime`` check: what a task Spark gives GPUs to finds there.

One small Spark job whose tasks take the GPUs the job's conf asks for (Spark assigns them as it
will to the trainers); each starts a Python process that sees only its task's GPUs
(``CUDA_VISIBLE_DEVICES``, as a trainer does) and reports the NVIDIA driver, CUDA's libraries
and the cards (:func:`sparktrain.training.gpu.cuda_report`). A fresh process, because the
driver reads ``CUDA_VISIBLE_DEVICES`` once per process and Spark reuses its Python workers.
Runs on the driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from sparktrain.cluster.driver.preflight import Finding
from sparktrain.deploy.probes import MAX_PROBE_TASKS, run_probe_job

#: The check's name in findings.
CHECK: Final = "gpu-runtime"
#: Seconds one task's report may take (loading CUDA's libraries, initialising the driver).
REPORT_TIMEOUT: Final = 60.0

#: What each task yields: host, the GPU addresses Spark gave it, and its report (or why there
#: is none).
_Row = tuple[str, list[str], dict[str, Any] | None, str | None]


def gpu_runtime_finding(sc: Any, slots: int, timeout: float) -> Finding:
    """Asks tasks given GPUs what they find there: an error where the driver is missing or
    lists no card, a warning where sparktrain's own engine cannot use the GPU (a build without
    CUDA, a library missing, a card too old) while frameworks a job brings still can."""
    if slots < 1:
        return Finding(CHECK, "warning", "no executor to ask what its GPUs are")
    try:
        rows = [_row(r) for r in run_probe_job(sc, min(slots, MAX_PROBE_TASKS), timeout, _probe, "GPUs")]
    except TimeoutError as e:
        return Finding(CHECK, "error", str(e), "look at the executors' logs; check that tasks can start")
    except Exception as e:
        from sparktrain.cluster.failures import spark_error_summary

        return Finding(
            CHECK,
            "error",
            f"a Spark job asking tasks for their GPUs failed: {spark_error_summary(str(e)) or e!r}",
        )
    return judge(rows)


def judge(rows: Sequence[_Row]) -> Finding:
    """The finding for what the tasks reported (one row per task)."""
    failed = sorted({(host, problem) for host, _, report, problem in rows if report is None})
    if failed:
        host, problem = failed[0]
        return Finding(CHECK, "error", f"a task on {host} could not report its GPUs: {problem}")
    reports = [(host, gpus, report) for host, gpus, report, _ in rows if report is not None]
    ungiven = sorted({host for host, gpus, _ in reports if not gpus})
    if ungiven:
        return Finding(
            CHECK,
            "error",
            f"tasks on {', '.join(ungiven)} were given no GPU",
            "set spark.task.resource.gpu.amount and give executors GPUs (see the gpu check)",
        )
    no_driver = sorted({host for host, _, r in reports if r["built"] and not r["libraries"][0]["found"]})
    if no_driver:
        return Finding(
            CHECK,
            "error",
            f"the NVIDIA driver's libcuda.so.1 cannot be loaded on {', '.join(no_driver)}",
            "install NVIDIA's driver (580 or newer for sparktrain's CUDA build) on every GPU host",
        )
    broken = sorted({(host, str(r["error"])) for host, _, r in reports if r["error"]})
    if broken:
        host, error = broken[0]
        return Finding(CHECK, "error", f"the NVIDIA driver on {host} fails: {error}")
    blind = sorted({(host, ",".join(gpus)) for host, gpus, r in reports if r["built"] and not r["cards"]})
    if blind:
        where = ", ".join(f"{host} (CUDA_VISIBLE_DEVICES={gpus})" for host, gpus in blind)
        return Finding(
            CHECK,
            "error",
            f"the driver lists no GPU for the addresses Spark gave tasks on {where}",
            "make the discovery script print the addresses nvidia-smi lists (sparktrain's "
            "discover_gpus.sh does)",
        )
    hosts = sorted({host for host, _, _ in reports})
    where = f"{len(reports)} task(s) on {len(hosts)} host(s)"
    engine_only = "frameworks a job brings (PyTorch, TensorFlow) still use the GPUs"
    unbuilt = sorted({host for host, _, r in reports if not r["built"]})
    if unbuilt:
        return Finding(
            CHECK,
            "warning",
            f"sparktrain on {', '.join(unbuilt)} is built without CUDA: its engine trains on the CPU "
            f"there (device='auto'), and device='cuda' fails; {engine_only}",
            'install sparktrain\'s CUDA build on the executors (docs/deploy.md, "GPUs")',
        )
    missing = sorted(
        {
            (host, lib["name"], lib["files"][0], lib["hint"])
            for host, _, r in reports
            for lib in r["libraries"]
            if not lib["found"]
        }
    )
    if missing:
        host, name, file, hint = missing[0]
        return Finding(
            CHECK,
            "warning",
            f"{name} ({file}) cannot be loaded on {host}: sparktrain's engine cannot use the GPU there; "
            f"{engine_only}",
            hint,
        )
    cards = sorted(
        {(c["name"], c["capability"], c["memory_bytes"]) for _, _, r in reports for c in r["cards"]}
    )
    old = [(name, cap) for name, cap, _ in cards if tuple(int(p) for p in cap.split(".")) < (8, 0)]
    if old:
        name, cap = old[0]
        return Finding(
            CHECK,
            "warning",
            f"{name} has compute capability {cap}; sparktrain's engine needs 8.0 or newer; {engine_only}",
        )
    drivers = sorted({str(r["driver"]) for _, _, r in reports})
    described = ", ".join(f"{name} ({cap}, {mem / 2**30:.0f} GiB)" for name, cap, mem in cards)
    return Finding(
        CHECK,
        "ok",
        f"{where} see {described}; driver CUDA {', '.join(drivers)}; "
        "sparktrain's CUDA build and its libraries load",
    )


def _row(raw: Any) -> _Row:
    host, gpus, report, problem = raw
    return str(host), [str(g) for g in gpus], report, problem


# Pickled by reference: executors import it from their own sparktrain (the executor-versions
# check, which comes first, names an executor without one).
def _probe(_: Iterator[int]) -> Iterator[_Row]:
    import json
    import os
    import socket
    import subprocess
    import sys

    from pyspark import TaskContext

    context = TaskContext.get()
    resources = context.resources() if context is not None else {}
    gpus = list(resources["gpu"].addresses) if "gpu" in resources else []
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(gpus))
    code = "import json, sparktrain.training.gpu as g; print(json.dumps(g.cuda_report()))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=REPORT_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        yield socket.gethostname(), gpus, None, f"its report took over {REPORT_TIMEOUT:g} s"
        return
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        yield socket.gethostname(), gpus, None, f"exit code {done.returncode}: {tail}"
        return
    yield socket.gethostname(), gpus, json.loads(done.stdout.strip().splitlines()[-1]), None
