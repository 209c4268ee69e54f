"""Training against the link: examples/s of synchronous data-parallel training on N hosts whose
links are limited to a given rate, for sparktrain's engine (gradients on the wire as float32,
and as bfloat16 with ``gradient_wire="bf16"``) and PyTorch's DistributedDataParallel over gloo
(float32, and with its ``bf16_compress_hook``), all in one run over the same hosts, with the
same model, optimizer, batch and rows.

Each host is a network namespace on a private bridge (``tests/harness/netns.py``), one trainer
per host, every link limited each way by a token bucket (``tc tbf``) to the rate, or not
limited at all ("unlimited": the veth pairs, as fast as the machine copies). The model is an
MLP over 39 float features (``--hidden``, 1024-1024 by default: about 1.1 M parameters, so
4.4 MB of float32 gradients per step), binary cross-entropy, Adam 0.001, ``--batch`` rows per
trainer and step. The rows (``harness.synthetic.dense_table``) are one Parquet file: sparktrain
reads each trainer's shard through its own input pipeline; each PyTorch rank takes every n-th
row (a shard of the same size) into a tensor before timing. sparktrain's ring is sealed (the
default). Each contender trains ``--warmup`` steps, then ``--steps`` timed ones; the figure is
the examples/s of those (every trainer's rows), timed from the end of the warm-up to the end
of the last step.

Both overlap the all-reduce with the backward pass: DDP in buckets of 25 MB as they fill,
sparktrain in buckets of about 1 MiB, last layer first (``overlap_gradients``, on by default).
"f32 1 call" is sparktrain with ``overlap_gradients=False``: one all-reduce of the whole
gradient after the backward pass, so its step is compute plus communication.

Needs root and iproute2 (network namespaces and tc) and PyTorch in ``.venv-torch``
(``python tests/harness/torch_env.py``; without it the DDP columns are left out, saying so)::

    .venv/bin/python tests/bench/bench_hosts_train.py [--hosts 3] [--rates 1 0] [--steps 60]

(a rate of 0: unlimited). A rank also runs this file, as ``bench_hosts_train.py --rank ...``,
in its host.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_hosts import PORT, RESULT, gloo_env, run_as_rank, run_ranks  # noqa: E402

CONTENDERS = ["f32", "f32-one-call", "bf16", "ddp", "ddp-bf16"]
LABELS = {
    "f32": "sparktrain f32",
    "f32-one-call": "sparktrain f32 1 call",
    "bf16": "sparktrain bf16",
    "bf16-one-call": "sparktrain bf16 1 call",
    "ddp": "DDP gloo f32",
    "ddp-bf16": "DDP gloo bf16 hook",
}
FEATURES = 39
LEARNING_RATE = 1e-3


# --- one rank, in its host ------------------------------------------------------------------------


def sparktrain_rank(spec: dict[str, Any]) -> dict[str, Any]:
    import socket

    if spec["threads"]:
        os.environ["RAYON_NUM_THREADS"] = str(spec["threads"])  # candle's matrix products

    from sparktrain import _native
    from sparktrain.training import FeatureSpec

    rank, n = spec["rank"], len(spec["peers"])
    listener = socket.create_server((spec["peers"][rank], PORT), backlog=16)
    ring = _native.Communicator(
        listener.fileno(), rank, [f"{a}:{PORT}" for a in spec["peers"]], spec["secret"], 600.0
    )
    config = _native.TrainerConfig(
        model="mlp",
        hidden=spec["hidden"],
        optimizer=("adam", LEARNING_RATE, {}),
        batch_size=spec["batch"],
        shuffle_buffer=0,
        log_every=spec["warmup"],
        gradient_wire=spec["wire"],
        overlap_gradients=spec["overlap"],
    )
    features = FeatureSpec(dense=tuple(f"f{j:02d}" for j in range(FEATURES)))
    trainer = _native.Trainer(config, features.to_native(), ring)
    total = spec["warmup"] + spec["steps"]
    summary = trainer.fit(_native.Input.files(spec["data"], n, rank, config), max_steps=total)
    # Timed from the progress line at the end of the warm-up (a Unix time) to fit's return.
    end = time.time()
    marks = {line.step: line.wall_time for line in summary.history}
    if spec["warmup"] not in marks or summary.steps != total:
        raise SystemExit(f"rank {rank}: {summary.steps} steps, progress lines at {sorted(marks)}")
    seconds = end - marks[spec["warmup"]]
    return {"examples_per_sec": spec["steps"] * spec["batch"] * n / seconds, "loss": summary.loss}


def ddp_rank(spec: dict[str, Any]) -> dict[str, Any]:
    import datetime

    os.environ.update(gloo_env(spec))
    import numpy as np
    import pyarrow.parquet as pq
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    rank, n, batch = spec["rank"], len(spec["peers"]), spec["batch"]
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    torch.manual_seed(0)
    widths = [FEATURES, *spec["hidden"]]
    layers: list[torch.nn.Module] = []
    for inputs, outputs in itertools.pairwise(widths):
        layers += [torch.nn.Linear(inputs, outputs), torch.nn.ReLU()]
    model = DistributedDataParallel(torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], 1)))
    if spec["wire"] == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    # Every n-th row, from this rank's: a shard of the same size as sparktrain's.
    table = pq.read_table(spec["data"])
    x = torch.from_numpy(np.stack([table.column(f"f{j:02d}").to_numpy() for j in range(FEATURES)], axis=1))
    y = torch.from_numpy(table.column("label").to_numpy().astype(np.float32))
    x, y = x[rank::n].contiguous(), y[rank::n].contiguous()
    total = spec["warmup"] + spec["steps"]
    loss = torch.zeros(())
    start = 0.0
    for step in range(total):
        if step == spec["warmup"]:
            dist.barrier()
            start = time.perf_counter()
        rows = slice(step * batch, (step + 1) * batch)
        optimizer.zero_grad()
        loss = loss_fn(model(x[rows]).squeeze(1), y[rows])
        loss.backward()
        optimizer.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    dist.destroy_process_group()
    return {"examples_per_sec": spec["steps"] * batch * n / seconds, "loss": float(loss)}


def rank_main(spec: dict[str, Any]) -> None:
    runners = {"sparktrain": sparktrain_rank, "ddp": ddp_rank}
    figures = runners[spec["kind"]](spec)
    if spec["rank"] == 0:
        print(RESULT + json.dumps(figures), flush=True)


# --- the driver: data, hosts, links, contenders ------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rank", help=argparse.SUPPRESS)
    parser.add_argument("--hosts", type=int, nargs="+", default=[3])
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 0.0], help="Gbit/s; 0: unlimited")
    parser.add_argument("--hidden", default="1024,1024", help="the MLP's hidden widths")
    parser.add_argument("--batch", type=int, default=256, help="rows per trainer and step")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=list(LABELS))
    parser.add_argument(
        "--threads", type=int, default=0, help="compute threads per trainer (0: each framework's default)"
    )
    parser.add_argument("--json", help="also write every figure to this file")
    options = parser.parse_args()
    if run_as_rank(options.rank, rank_main, __file__):
        return

    from harness import netns
    from harness.synthetic import dense_table
    from sparktrain._native import generate_secret

    contenders = list(options.contenders)
    torch_python = ROOT / ".venv-torch" / "bin" / "python"
    if not torch_python.exists():
        print(f"DDP left out: {torch_python} is missing (python tests/harness/torch_env.py)", file=sys.stderr)
        contenders = [c for c in contenders if not c.startswith("ddp")]
    hidden = [int(w) for w in options.hidden.split(",")]
    parameters = sum(a * b + b for a, b in zip([FEATURES, *hidden], [*hidden, 1], strict=True))
    figures: list[dict[str, Any]] = []
    print(
        f"machine: {os.cpu_count()} cores; one trainer per host; MLP {FEATURES}-{options.hidden}-1 "
        f"({parameters:,} parameters, {parameters * 4 / 1e6:.1f} MB of float32 gradients per step); "
        f"Adam; {options.batch} rows per trainer and step; {options.warmup} warm-up and "
        f"{options.steps} timed steps"
    )
    with tempfile.TemporaryDirectory(prefix="bench-hosts-train-") as work, netns.Network("10.213.10") as net:
        data = f"{work}/train.parquet"
        rows = max(options.hosts) * (options.warmup + options.steps + 1) * options.batch
        import pyarrow.parquet as pq

        pq.write_table(dense_table(rows, seed=1), data)
        hosts = [net.add_host(f"t{i}") for i in range(max(options.hosts))]
        for rate in options.rates:
            for host in hosts:
                if rate > 0:
                    host.limit(int(rate * 1e9))
                else:
                    host.unlimit()
            link = f"{rate:g} Gbit/s" if rate > 0 else "unlimited"
            for n in options.hosts:
                print(f"\nN={n} hosts, links {link}: examples/s (every trainer's), last loss")
                for name in contenders:
                    spec = {
                        "data": data,
                        "hidden": hidden,
                        "batch": options.batch,
                        "warmup": options.warmup,
                        "steps": options.steps,
                        "wire": "bf16" if "bf16" in name else "f32",
                        "threads": options.threads,
                        "overlap": not name.endswith("one-call"),
                    }
                    if name.startswith("ddp"):
                        result = run_ranks(hosts[:n], "ddp", str(torch_python), spec, __file__)
                    else:
                        spec["secret"] = generate_secret()
                        result = run_ranks(hosts[:n], "sparktrain", sys.executable, spec, __file__)
                    speed, loss = result["examples_per_sec"], result["loss"]
                    print(f"  {LABELS[name]:>20}: {speed:>9,.0f}  loss {loss:.4f}", flush=True)
                    figures.append({"hosts": n, "rate_gbit": rate, "contender": name, **result})
    if options.json:
        Path(options.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
