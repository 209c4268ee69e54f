"""Launch overhead for PyTorch DDP: sparktrain's ``TorchDistributor`` against PySpark's own, for
the same 2-process DDP function, in one run.

On ``local-cluster[2,1,1024]`` (two executors, one core each), after one warm-up job that starts
the executors' Python workers, each launcher runs ``--repeat`` times, alternating,
``TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(ddp_step, folder)``.
The function joins the gloo process group (``init_process_group("gloo")`` with no arguments),
all-reduces one tensor, leaves the group and returns. Two figures per launch, from wall-clock
stamps taken in the driver and in the processes (one machine, one clock):

  start: from the call to ``run()`` until the process group is up in every process (user code
         has run ``init_process_group``);
  exit:  from the moment the last process's function returns until ``run()`` returns.

PyTorch lives in ``.venv-torch`` (made from ``tests/bench/requirements-torch.txt`` when missing,
with the sparktrain wheel that ``tests/run.sh`` or ``submit/install.sh`` built), so the script
re-runs itself there. DDP step throughput under the two launchers is ``bench_train.py``'s
``--contenders torch,torch-sparktrain``::

    .venv/bin/python tests/bench/bench_torch_launch.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def ddp_step(folder: str) -> int:
    """One DDP process: joins the group, all-reduces a tensor, stamps and returns the sum."""
    import os
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with open(os.path.join(folder, f"start-{rank}"), "w") as f:
        f.write(repr(time.time()))
    value = torch.ones(4) * (rank + 1)
    dist.all_reduce(value)
    dist.destroy_process_group()
    with open(os.path.join(folder, f"end-{rank}"), "w") as f:
        f.write(repr(time.time()))
    return int(value[0].item())


def stamps(folder: str, prefix: str) -> list[float]:
    return [float(p.read_text()) for p in Path(folder).glob(f"{prefix}*")]


def launch(distributor: Any, folder: str) -> tuple[float, float]:
    began = time.time()
    total = distributor.run(ddp_step, folder)
    returned = time.time()
    if total != 3:  # ranks 0 and 1 contribute 1 and 2
        raise RuntimeError(f"the all-reduce gave {total}, not 3")
    starts, ends = stamps(folder, "start-"), stamps(folder, "end-")
    if len(starts) != 2 or len(ends) != 2:
        raise RuntimeError(f"expected 2 processes' stamps in {folder}, found {len(starts)} and {len(ends)}")
    return max(starts) - began, returned - max(ends)


def measure(repeat: int) -> None:
    from pyspark.ml.torch.distributor import TorchDistributor as PySparkDistributor

    from harness.spark import local_cluster_session
    from sparktrain.torch import TorchDistributor as SparktrainDistributor

    spark = local_cluster_session("bench-torch-launch")
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()  # warm-up
    contenders = {
        "sparktrain": SparktrainDistributor(num_processes=2, local_mode=False, use_gpu=False),
        "PySpark": PySparkDistributor(num_processes=2, local_mode=False, use_gpu=False),
    }
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    try:
        for _ in range(repeat):
            for name, distributor in contenders.items():
                with tempfile.TemporaryDirectory(prefix="bench-torch-launch-") as folder:
                    figures[name].append(launch(distributor, folder))
    finally:
        spark.stop()

    print(f"DDP launch overhead, 2 processes on local-cluster[2,1,1024], median of {repeat}")
    medians = {}
    for name, runs in figures.items():
        start = statistics.median(r[0] for r in runs)
        end = statistics.median(r[1] for r in runs)
        medians[name] = (start, end)
        starts = ", ".join(f"{r[0]:.2f}" for r in runs)
        ends = ", ".join(f"{r[1]:.2f}" for r in runs)
        print(f"  {name:<10} start {start:6.2f} s  [{starts}]   exit {end:6.2f} s  [{ends}]")
    ours, peer = medians["sparktrain"], medians["PySpark"]
    print(f"  ratio PySpark / sparktrain: start {peer[0] / ours[0]:.1f}x, exit {peer[1] / ours[1]:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.inside:
        measure(options.repeat)
        return
    from harness.torch_env import VENV, torch_python

    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update({"GLOO_SOCKET_IFNAME": "lo", "VIRTUAL_ENV": str(VENV), "SPARK_LOCAL_IP": "127.0.0.1"})
    command = [str(torch_python()), __file__, "--inside", "--repeat", str(options.repeat)]
    sys.exit(subprocess.run(command, env=env).returncode)


if __name__ == "__main__":
    main()
