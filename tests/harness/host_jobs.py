"""The jobs that ``tests/test_hosts.py`` runs on :class:`harness.hosts.HostCluster`. The
functions taking ``spark`` run in the driver program (:mod:`harness.host_driver`, in the
driver host); :func:`paced_train` runs in the trainer processes.

While a job runs, its driver prints a ``STATUS {json}`` line every half second (see
:func:`status_line`), which the test reads to decide when to cut a link and what happened.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STATUS_EVERY_S = 0.5


def write_click_logs(spark: Any, out: str, rows: int, files: int) -> dict[str, Any]:
    """The README job's synthetic click logs (``examples/ctr_on_spark.py``) as TFRecords."""
    import sparktrain as st

    sys.path.insert(0, str(ROOT / "examples"))
    from ctr_on_spark import click_logs

    written = st.tfrecord.write(click_logs(spark, rows, seed=1), out, mode="overwrite", num_files=files)
    return {"rows": written.rows}


def status_line(cluster: Any, spark: Any) -> dict[str, Any]:
    """What the test watches: the job's state and generation, each role's host and latest
    step and link use, the restarts' causes, the executors the driver knows, and the straggler
    the step-time report names."""
    status = cluster.status()
    jsc = spark.sparkContext._jsc
    executors = [e for e in jsc.sc().getExecutorIds().mkString(",").split(",") if e]
    return {
        "t": time.time(),
        "state": status["state"],
        "generation": status["generation"],
        "hosts": status["hosts"],
        "steps": {role: m.get("step") for role, m in status["metrics"].items()},
        "link_busy": {role: m.get("link_busy") for role, m in status["metrics"].items()},
        "restarts": [
            {"cause": r["cause"], "detected_at": r["detected_at"], "generation": r["generation"]}
            for r in status["restarts"]
        ],
        "restarting": status["restarting"],
        "executors": len(executors),
        "straggler": status["straggler"],
        "failure": status["failure"],
    }


def _watch(cluster: Any, spark: Any, stop: threading.Event) -> None:
    from harness.host_driver import emit

    while not stop.wait(STATUS_EVERY_S):
        try:
            emit("STATUS", status_line(cluster, spark))
        except Exception as e:  # the job may be ending under it; the next poll says so
            print(f"status poll failed: {e!r}", flush=True)


def paced_train(args: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """sparktrain's engine (as ``sparktrain.train`` runs it) in rounds of ``round_steps``
    steps, a ``pause`` between rounds, until the chief finds ``stop_file`` (the test creates
    it) or ``max_steps`` are done; the chief's decision is broadcast so every trainer stops at
    the same round. Returns, on the chief, the steps taken and the last loss."""
    import numpy as np

    trainer = ctx.trainer(**args["trainer"])
    steps = 0
    while True:
        # Steps count from the start of training: after a restart, the first round may find
        # them taken already (the checkpoint had them) and train none.
        fit = trainer.fit(args["data"], epochs=1000, steps=steps + args["round_steps"])
        steps = fit.steps
        flag = np.array([float(ctx.is_chief and os.path.exists(args["stop_file"]))])
        done = ctx.broadcast(flag)[0] > 0 or steps >= args["max_steps"]
        if done:
            break
        time.sleep(args["pause"])
    trainer.close()
    if not ctx.is_chief:
        return None
    return {"steps": fit.steps, "loss": fit.loss}


def train_job(spark: Any, args: dict[str, Any], num_workers: int, options: dict[str, Any]) -> dict[str, Any]:
    """Runs :func:`paced_train` with ``Cluster.run(**options)`` while printing its status;
    returns the chief's result, the restarts and the last status."""
    from sparktrain import Cluster

    cluster = Cluster.run(spark, paced_train, args, num_workers, **options)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(cluster, spark, stop), daemon=True)
    watcher.start()
    try:
        with cluster:
            value = cluster.wait()
            last = status_line(cluster, spark)
    finally:
        stop.set()
        watcher.join()
    return {
        "value": value,
        "restarts": [
            {"generation": r.generation, "cause": r.cause, "resumed_from": r.resumed_from}
            for r in cluster.restarts
        ],
        "status": last,
    }


def tfos_all_reduce(spark: Any, out: str, workers: int) -> dict[str, Any]:
    """A TensorFlowOnSpark job through the shim (``sparktrain.tfos``): each node starts
    TensorFlow's MultiWorkerMirroredStrategy from the ``TF_CONFIG`` it is given and sums its
    rank + 1 with the others' through TensorFlow's own collectives; each writes what it saw to
    ``out`` (storage every host reaches), which this driver reads back."""
    from sparktrain import fs
    from sparktrain.tfos import TFCluster

    def map_fun(args: dict[str, Any], ctx: Any) -> None:
        import json
        import os

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        from sparktrain import fs

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        value = strategy.run(lambda: tf.constant(float(ctx.worker_num + 1)))
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
        seen = {
            "worker_num": ctx.worker_num,
            "job_name": ctx.job_name,
            "tf_config": json.loads(os.environ["TF_CONFIG"]),
            "sum": float(total.numpy()),
        }
        fs.write_bytes(f"{args['out']}/{ctx.worker_num}.json", json.dumps(seen).encode(), overwrite=True)

    cluster = TFCluster.run(
        spark.sparkContext, map_fun, {"out": out}, workers, num_ps=0,
        input_mode=TFCluster.InputMode.TENSORFLOW, master_node="chief",
    )  # fmt: skip
    cluster.shutdown(timeout=300)
    import json

    return {"nodes": [json.loads(fs.read_bytes(f"{out}/{i}.json")) for i in range(workers)]}


def torch_all_gather(spark: Any, workers: int) -> dict[str, Any]:
    """PySpark's ``TorchDistributor`` API on sparktrain's launcher (``sparktrain.torch``): each
    process forms the default gloo group with no arguments, sums a tensor with the others and
    gathers every rank's network interface and the address it reaches the master from; rank
    0's view comes back."""
    from sparktrain.torch import TorchDistributor

    def train() -> dict[str, Any]:
        import datetime
        import os
        import socket

        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        rank = dist.get_rank()
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        # The local end of a route to the master: this rank's own address on the network.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
            address = probe.getsockname()[0]
        seen: list[Any] = [None] * dist.get_world_size()
        mine = {"rank": rank, "interface": os.environ.get("GLOO_SOCKET_IFNAME"), "address": address}
        dist.all_gather_object(seen, mine)
        dist.destroy_process_group()
        return {"sum": float(total.item()), "ranks": seen}

    return TorchDistributor(num_processes=workers, local_mode=False, use_gpu=False).run(train)
