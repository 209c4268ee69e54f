"""Launch and shutdown overhead: sparktrain's ``Cluster.run`` against TensorFlowOnSpark's
``TFCluster.run``, for the same no-op function on two workers, in one run.

On ``local-cluster[2,1,1024]`` (two executors, one core each), after one warm-up job that
starts the executors' Python workers, each contender is launched ``--repeat`` times,
alternating. Two figures per launch, from wall-clock stamps taken in the driver and in the
trainers (one machine, one clock):

  start: from the call to ``run()`` until user code runs in every trainer;
  exit:  from the moment the last trainer's function returns until ``wait()`` (sparktrain) or
         ``shutdown()`` (TFoS) returns on the driver.

TFoS runs in its TENSORFLOW input mode with ``master_node="chief"``, bound to 127.0.0.1 (its
address lookup is replaced in the driver and, through a ``sitecustomize`` module, in the
executors). It prints the medians and the ratios. TFoS must be installed::

    .venv/bin/pip install -r tests/bench/requirements-peers.txt
    .venv/bin/python tests/bench/bench_launch.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.spark import local_cluster_session

SITECUSTOMIZE = """\
try:
    import tensorflowonspark.util as _util

    _util.get_ip_address = lambda: "127.0.0.1"
except ImportError:
    pass
"""


def stamp(folder: str, name: str) -> None:
    """Writes the current time into ``folder/name`` (called inside the trainers)."""
    with open(os.path.join(folder, name), "w") as f:
        f.write(repr(time.time()))


def stamps(folder: str, prefix: str) -> list[float]:
    return [float(p.read_text()) for p in Path(folder).glob(f"{prefix}*")]


def run_sparktrain(sc: Any, folder: str) -> tuple[float, float]:
    from sparktrain import Cluster

    def main_fun(folder: str, ctx: Any) -> None:
        import os
        import time

        with open(os.path.join(folder, f"start-{ctx.rank}"), "w") as f:
            f.write(repr(time.time()))
        with open(os.path.join(folder, f"end-{ctx.rank}"), "w") as f:
            f.write(repr(time.time()))

    began = time.time()
    Cluster.run(sc, main_fun, folder, 2, log=False).wait(timeout=120)
    returned = time.time()
    return max(stamps(folder, "start-")) - began, returned - max(stamps(folder, "end-"))


def run_tfos(sc: Any, folder: str) -> tuple[float, float]:
    from tensorflowonspark import TFCluster

    def map_fun(folder: str, ctx: Any) -> None:
        import os
        import time

        with open(os.path.join(folder, f"start-{ctx.worker_num}"), "w") as f:
            f.write(repr(time.time()))
        with open(os.path.join(folder, f"end-{ctx.worker_num}"), "w") as f:
            f.write(repr(time.time()))

    began = time.time()
    cluster = TFCluster.run(
        sc, map_fun, folder, 2, num_ps=0, input_mode=TFCluster.InputMode.TENSORFLOW, master_node="chief"
    )
    cluster.shutdown()
    returned = time.time()
    return max(stamps(folder, "start-")) - began, returned - max(stamps(folder, "end-"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()

    patch_dir = tempfile.mkdtemp(prefix="bench-launch-site-")
    Path(patch_dir, "sitecustomize.py").write_text(SITECUSTOMIZE)
    os.environ["TFOS_SERVER_HOST"] = "127.0.0.1"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflowonspark.util

    tensorflowonspark.util.get_ip_address = lambda: "127.0.0.1"

    spark = local_cluster_session("bench-launch", conf={"spark.executorEnv.PYTHONPATH": patch_dir})
    sc = spark.sparkContext
    sc.parallelize(range(2), 2).map(lambda x: x).collect()  # warm-up: executors' Python workers

    contenders = {"sparktrain": run_sparktrain, "TFoS": run_tfos}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    for _ in range(options.repeat):
        for name, run in contenders.items():
            with tempfile.TemporaryDirectory(prefix="bench-launch-") as folder:
                figures[name].append(run(sc, folder))
    spark.stop()

    print(f"launch overhead, 2 workers on local-cluster[2,1,1024], median of {options.repeat}")
    medians = {}
    for name, runs in figures.items():
        start = statistics.median(r[0] for r in runs)
        end = statistics.median(r[1] for r in runs)
        medians[name] = (start, end)
        starts = ", ".join(f"{r[0]:.2f}" for r in runs)
        ends = ", ".join(f"{r[1]:.2f}" for r in runs)
        print(f"  {name:<10} start {start:6.2f} s  [{starts}]   exit {end:6.2f} s  [{ends}]")
    ours, peer = medians["sparktrain"], medians["TFoS"]
    print(f"  ratio TFoS / sparktrain: start {peer[0] / ours[0]:.1f}x, exit {peer[1] / ours[1]:.1f}x")


if __name__ == "__main__":
    main()
