"""The PyTorch peer of ``bench_train.py``: PyTorch DDP over gloo, launched by TorchDistributor.

It runs in the virtualenv of ``requirements-torch.txt`` (``bench_train.py`` makes it and starts
this script): PyTorch's wheels cannot share ``.venv`` with TensorFlowOnSpark. ``--job`` is
``bench_train.Job`` as JSON. It starts its own ``local-cluster[2,1,1024]`` session and times
``TorchDistributor(num_processes=workers, local_mode=False, use_gpu=False).run(train, job)``;
with ``--launcher sparktrain`` the same call goes through ``sparktrain.torch.TorchDistributor``
(the drop-in on sparktrain's launcher) instead of PySpark's. With ``--single`` it calls ``train``
in this process instead (one thread, no DDP, no Spark). The last line of its output is
``RESULT`` and the figures as JSON (``bench_train.figures``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import BUCKETS, CROSS_LAYERS, EMBEDDING_DIM, figures, spark_session


def load(folder: str, job: dict[str, Any], rank: int = 0, world: int = 1) -> tuple[Any, Any, Any]:
    """Dense features, bucketed ids (column c's buckets offset by c * BUCKETS) and labels of
    this rank's share of the Parquet files in ``folder``, as tensors."""
    import torch

    files = sorted(glob.glob(f"{folder}/*.parquet"))[rank::world]
    table = pa.concat_tables(pq.read_table(f) for f in files)
    dense = np.stack([table[n].to_numpy() for n in job["dense"]], axis=1)
    ids = np.zeros((table.num_rows, 0), np.int64)
    if job["ids"]:
        raw = np.stack([table[n].to_numpy() for n in job["ids"]], axis=1)
        ids = raw % BUCKETS + np.arange(len(job["ids"])) * BUCKETS
    labels = table["label"].to_numpy().astype(np.float32)
    return torch.from_numpy(dense), torch.from_numpy(ids), torch.from_numpy(labels)


def build_model(job: dict[str, Any]) -> Any:
    """The model of ``job["model"]``, initialized as the Keras one: Glorot-uniform kernels, zero
    biases, deep embeddings uniform in ±0.05, wide weights zero. Called as ``model(dense, ids)``.
    DCN is Wide&Deep with ``CROSS_LAYERS`` DCN-v2 cross layers in front of the deep tower."""
    import torch
    from torch import nn

    def linear(n_in: int, n_out: int) -> nn.Linear:
        layer = nn.Linear(n_in, n_out)
        nn.init.xavier_uniform_(layer.weight)
        nn.init.zeros_(layer.bias)
        return layer

    n_dense, n_ids = len(job["dense"]), len(job["ids"])

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                linear(n_dense, 256), nn.ReLU(), linear(256, 256), nn.ReLU(), linear(256, 1)
            )

        def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
            return self.net(dense)[:, 0]

    class WideDeep(nn.Module):
        def __init__(self, cross_layers: int = 0) -> None:
            super().__init__()
            width = n_ids * EMBEDDING_DIM + n_dense
            self.cross = nn.ModuleList(linear(width, width) for _ in range(cross_layers))
            self.wide = nn.Embedding(n_ids * BUCKETS, 1)
            nn.init.zeros_(self.wide.weight)
            self.wide_dense = linear(n_dense, 1)
            self.embedding = nn.Embedding(n_ids * BUCKETS, EMBEDDING_DIM)
            nn.init.uniform_(self.embedding.weight, -0.05, 0.05)
            self.deep = nn.Sequential(
                linear(n_ids * EMBEDDING_DIM + n_dense, 256),
                nn.ReLU(),
                linear(256, 128),
                nn.ReLU(),
                linear(128, 1),
            )

        def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
            wide = self.wide(ids).sum(dim=(1, 2)) + self.wide_dense(dense)[:, 0]
            x0 = torch.cat([self.embedding(ids).flatten(1), dense], dim=1)
            x = x0
            for layer in self.cross:
                x = x0 * layer(x) + x
            return wide + self.deep(x)[:, 0]

    torch.manual_seed(0)
    if job["model"] == "mlp":
        return MLP()
    return WideDeep(CROSS_LAYERS if job["model"] == "dcn" else 0)


def train(job: dict[str, Any], distributed: bool = True) -> dict[str, Any] | None:
    """One rank's training (rank 0 is the chief): returns, on the chief, the step stamps and the
    final model's eval logits and labels."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    began = time.time()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    rank, world = 0, 1
    if distributed:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    dense, ids, labels = load(job["train_parquet"], job, rank, world)
    model = build_model(job)
    step_model = DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.Adam(step_model.parameters(), lr=1e-3)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    batch, start, stamps = job["batch"], 0, []
    for _ in range(job["steps"]):
        if start + batch > len(labels):
            start = 0
        end = start + batch
        optimizer.zero_grad(set_to_none=True)
        loss_fn(step_model(dense[start:end], ids[start:end]), labels[start:end]).backward()
        optimizer.step()
        stamps.append(time.time())
        start = end
    if distributed:
        dist.destroy_process_group()
    if rank != 0:
        return None
    eval_dense, eval_ids, eval_labels = load(job["eval_parquet"], job)
    model.eval()
    with torch.no_grad():
        logits = torch.cat(
            [
                model(eval_dense[i : i + 4096], eval_ids[i : i + 4096])
                for i in range(0, len(eval_labels), 4096)
            ]
        )
    return {
        "stamps": stamps,
        "logits": logits.numpy().tolist(),
        "labels": eval_labels.numpy().tolist(),
        "began": began,
        "returned": time.time(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--job", required=True, help="bench_train.Job as JSON")
    parser.add_argument("--single", action="store_true", help="one process, no Spark, no DDP")
    parser.add_argument(
        "--launcher", choices=("pyspark", "sparktrain"), default="pyspark", help="whose TorchDistributor"
    )
    args = parser.parse_args()
    job = json.loads(args.job)
    global_batch = job["batch"] * job["workers"]
    if args.single:
        out = train(job, distributed=False)
        assert out is not None
        result = figures(
            out["stamps"], out["began"], out["returned"], out["logits"], out["labels"], global_batch
        )
    else:
        if args.launcher == "sparktrain":
            from sparktrain.torch import TorchDistributor
        else:
            from pyspark.ml.torch.distributor import TorchDistributor

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        with spark_session("bench-train-torch"):
            distributor = TorchDistributor(num_processes=job["workers"], local_mode=False, use_gpu=False)
            began = time.time()
            out = distributor.run(train, job)
            returned = time.time()
        result = figures(out["stamps"], began, returned, out["logits"], out["labels"], global_batch)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
