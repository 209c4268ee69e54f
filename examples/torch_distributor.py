"""PyTorch DistributedDataParallel on Spark through PySpark's ``TorchDistributor`` API: the same
program runs on PySpark's own distributor and on sparktrain's, which differ only in the import.

``train`` is written as PySpark's documentation writes TorchDistributor functions: it starts the
process group with no arguments (the launcher sets ``MASTER_ADDR``, ``RANK``, ...), wraps the
model in DDP and returns, on rank 0, what the driver gets back. ``torch_train_script.py`` beside
this file is the script form of the same training.

    spark-submit --master "local-cluster[2,1,1024]" examples/torch_distributor.py --processes 2
    spark-submit ... examples/torch_distributor.py --distributor pyspark    # PySpark's own
    spark-submit ... examples/torch_distributor.py --script                  # the script form

PyTorch must be installed where the processes run (the driver in local mode, the executors
otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def train(learning_rate: float, steps: int, batch_size: int = 64) -> dict[str, Any] | None:
    """Fits y = x . w with a small MLP under DDP; rank 0 returns its losses and parameters."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=learning_rate)
    data = torch.Generator().manual_seed(1000 + rank)  # each process its own shard of data
    truth = torch.linspace(-1.0, 1.0, 8)
    losses = []
    for _ in range(steps):
        x = torch.randn(batch_size, 8, generator=data)
        y = (x @ truth).unsqueeze(1)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    # Every rank's parameters, to show that DDP kept them identical.
    gathered = [torch.empty_like(params) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, params)
    world = dist.get_world_size()
    dist.destroy_process_group()
    if rank != 0:
        return None
    return {
        "world_size": world,
        "losses": losses,
        "params": params.tolist(),
        "ranks_agree": all(torch.equal(g, params) for g in gathered),
    }


def main() -> None:
    from pyspark.sql import SparkSession

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--local-mode", action="store_true", help="run the processes on the driver")
    parser.add_argument("--distributor", choices=["sparktrain", "pyspark"], default="sparktrain")
    parser.add_argument("--script", action="store_true", help="run torch_train_script.py instead")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()

    if args.distributor == "pyspark":
        from pyspark.ml.torch.distributor import TorchDistributor
    else:
        from sparktrain.torch import TorchDistributor

    spark = SparkSession.builder.getOrCreate()
    distributor = TorchDistributor(num_processes=args.processes, local_mode=args.local_mode, use_gpu=False)
    if args.script:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_train_script.py")
        distributor.run(script, "--learning-rate", "0.05", "--steps", str(args.steps))
        result: Any = {"script": "done"}
    else:
        result = distributor.run(train, 0.05, args.steps)
    print(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
