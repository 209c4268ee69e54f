"""The PyTorch side of ``tests/gpu/check.sh``: the models ``gpu_check step`` times, with the same
shapes, trained the usual PyTorch way (``nn.Embedding`` tables, dense Adam), one step at a time
with each batch copied from pinned host memory, as sparktrain's step copies its batch.

Usage: python torch_peer.py DEVICE ROWS STEPS MODEL[,MODEL...]   (DEVICE: cuda or cpu; on the
CPU it uses one thread). Prints a ``RESULT`` JSON line per model. Needs only PyTorch.
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch import nn

DENSE, COLUMNS, BUCKETS, DIM, HIDDEN = 13, 26, 10_000, 16, (256, 256)


def tower(width: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in HIDDEN:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, 1))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = tower(39)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.net(dense)[:, 0]


class Embedded(nn.Module):
    """Wide&Deep, DeepFM or DCN over one table of every column's rows (column c's ids offset by
    c * BUCKETS): a wide part of one weight per id and the dense features, and a deep tower
    over the embeddings and dense features; DeepFM adds the factorization machine's pairwise
    term, DCN two DCN-v2 cross layers in front of the tower."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.wide = nn.Embedding(COLUMNS * BUCKETS, 1)
        self.wide_dense = nn.Linear(DENSE, 1)
        self.table = nn.Embedding(COLUMNS * BUCKETS, DIM)
        width = COLUMNS * DIM + DENSE
        self.cross = nn.ModuleList(nn.Linear(width, width) for _ in range(2 if kind == "dcn" else 0))
        self.deep = tower(width)
        self.register_buffer("offsets", torch.arange(COLUMNS) * BUCKETS)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        ids = ids + self.offsets
        out = self.wide(ids).sum(dim=(1, 2)) + self.wide_dense(dense)[:, 0]
        rows = self.table(ids)
        if self.kind == "deepfm":
            out = out + 0.5 * (rows.sum(1).pow(2) - rows.pow(2).sum(1)).sum(1)
        x0 = torch.cat([rows.flatten(1), dense], dim=1)
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        return out + self.deep(x)[:, 0]


def rate(device: str, rows: int, steps: int, name: str) -> float:
    torch.manual_seed(0)
    model = (Mlp() if name == "mlp" else Embedded(name)).to(device)
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = nn.BCEWithLogitsLoss()
    width = 39 if name == "mlp" else DENSE
    pin = device.startswith("cuda")
    batches = []
    for _ in range(8):
        dense = torch.rand(rows, width)
        ids = (torch.rand(rows, COLUMNS) ** 3 * BUCKETS).long()
        label = (dense[:, 0] > 0.5).float()
        batches.append(tuple(t.pin_memory() if pin else t for t in (dense, ids, label)))

    def run(n: int) -> None:
        for s in range(n):
            dense, ids, label = (t.to(device, non_blocking=True) for t in batches[s % len(batches)])
            adam.zero_grad(set_to_none=True)
            loss(model(dense, ids), label).backward()
            adam.step()

    run(max(steps // 10, 3))
    if pin:
        torch.cuda.synchronize()
    started = time.perf_counter()
    run(steps)
    if pin:
        torch.cuda.synchronize()
    return rows * steps / (time.perf_counter() - started)


def main() -> None:
    device, rows, steps, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
    if device == "cpu":
        torch.set_num_threads(1)
    for name in models:
        line = {
            "mode": "torch",
            "model": name,
            "device": device,
            "rows": rows,
            "steps": steps,
            "examples_per_sec": rate(device, rows, steps, name),
            "torch": torch.__version__,
        }
        print("RESULT " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
