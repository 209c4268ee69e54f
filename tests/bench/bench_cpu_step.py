"""One trainer's step on one CPU thread: sparktrain's engine against PyTorch, the same MLP,
batch, loss and optimizer, in one run.

    .venv/bin/python tests/bench/bench_cpu_step.py
    .venv/bin/python tests/bench/bench_cpu_step.py --cases 4096:256,256 --steps 200

Each case is ``rows:hidden`` (an MLP of 39 inputs, ReLU layers of the ``hidden`` widths and one
logit; binary cross-entropy on the logits; Adam 0.001). sparktrain's side is the engine's own
step (``DataParallel::step``: forward, backward, the flat gradient, Adam) in the release build
of ``rust/train/examples/step_speed.rs``, which cargo builds first; PyTorch's is ``zero_grad``,
forward, ``backward`` and ``Adam.step`` in ``.venv-torch`` (``python
tests/harness/torch_env.py`` makes it), with ``torch.set_num_threads(1)``. Both use one thread
(``RAYON_NUM_THREADS=1`` for candle), the same rows, a twentieth of the steps as warm-up,
and report examples/s over the timed steps.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TORCH_PYTHON = ROOT / ".venv-torch" / "bin" / "python"
CASES = "256:256,256 4096:256,256 256:1024,1024"

# The same step in PyTorch: the inputs are step_speed.rs's, value for value.
TORCH_STEP = """
import sys, time, torch
torch.set_num_threads(1)
rows, hidden, steps = int(sys.argv[1]), [int(h) for h in sys.argv[2].split(",")], int(sys.argv[3])
x = torch.tensor([((i * 7919) % 1000) / 1000.0 for i in range(rows * 39)]).reshape(rows, 39)
y = torch.tensor([float(i % 2) for i in range(rows)])
layers, width = [], 39
for h in hidden:
    layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
    width = h
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
adam = torch.optim.Adam(model.parameters(), lr=1e-3)
loss = torch.nn.BCEWithLogitsLoss()
def step():
    adam.zero_grad(set_to_none=True)
    loss(model(x).squeeze(1), y).backward()
    adam.step()
for _ in range(max(3, steps // 20)):
    step()
start = time.perf_counter()
for _ in range(steps):
    step()
print(f"examples/s {rows * steps / (time.perf_counter() - start):.0f}")
"""


def sparktrain_rate(rows: int, hidden: str, steps: int) -> float:
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    command = ["cargo", "run", "--release", "-q", "-p", "sparktrain-train", "--example", "step_speed"]
    out = subprocess.run(
        [*command, "--", str(rows), hidden, str(steps)],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=1800,  # cargo may build the release example first
        capture_output=True,
        text=True,
    ).stdout
    found = re.search(r"([0-9.]+) examples/s", out)
    if found is None:
        raise RuntimeError(f"step_speed printed no examples/s: {out!r}")
    return float(found.group(1))


def torch_rate(rows: int, hidden: str, steps: int) -> float:
    out = subprocess.run(
        [str(TORCH_PYTHON), "-c", TORCH_STEP, str(rows), hidden, str(steps)],
        check=True,
        timeout=600,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.split()[-1])


def default_steps(rows: int, hidden: str) -> int:
    """About four seconds of steps at 50 GFLOP/s (a step is 6 flops per parameter and row),
    and at least 200."""
    widths = [39, *(int(h) for h in hidden.split(",")), 1]
    parameters = sum((a + 1) * b for a, b in itertools.pairwise(widths))
    return int(min(4000, max(200, 4 * 50e9 / (6 * rows * parameters))))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=CASES, help="space-separated rows:hidden,... cases")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (default: about 4 s a case)")
    args = parser.parse_args()
    if not TORCH_PYTHON.exists():
        sys.exit(f"{TORCH_PYTHON} is missing: run python tests/harness/torch_env.py first")
    torch_version = subprocess.run(
        [str(TORCH_PYTHON), "-c", "import torch; print(torch.__version__)"],
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    ).stdout.strip()
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown CPU",
    )
    print(f"one thread of {cpu}; PyTorch {torch_version}")
    print("| MLP | rows | steps | sparktrain examples/s | PyTorch examples/s | sparktrain / PyTorch |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in args.cases.split():
        rows_text, _, hidden = case.partition(":")
        rows = int(rows_text)
        steps = args.steps or default_steps(rows, hidden)
        ours = sparktrain_rate(rows, hidden, steps)
        theirs = torch_rate(rows, hidden, steps)
        shape = "-".join(["39", *hidden.split(","), "1"])
        print(
            f"| {shape} | {rows} | {steps} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}x |", flush=True
        )


if __name__ == "__main__":
    main()
