"""The CUDA wheel on a GPU, for ``tests/gpu/check.sh`` (``GPU_CHECK_WHEEL``): what a user who ran
``pip install 'sparktrain[cuda]'`` sees through the Python API on a machine with an NVIDIA GPU.

- ``gpu.cuda_report()`` finds the CUDA build, the driver, cuBLAS and cuRAND (from PyPI's
  packages on ``sys.path``, loaded by ``sparktrain.training.gpu``, not from the loader's path)
  and the card;
- ``device="auto"`` (the default) trains on ``cuda:0``; in a process that sees no card
  (``CUDA_VISIBLE_DEVICES`` empty, as in a Spark task given no GPU) it trains on the CPU, and
  ``device="cuda"`` fails naming the device;
- the MLP and Wide&Deep train on the GPU to the CPU's losses and parameters (SGD, 1e-4);
- the doctor's judgement of what a task holding this GPU reports is ``ok``.

Usage: python wheel_check.py   (the CUDA wheel importable). Prints ``RESULT`` lines and exits 1
when a check fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sparktrain.deploy.gpu_probe import judge
from sparktrain.training import Trainer, gpu

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok      " if ok else "FAILED  ") + what, flush=True)
    if not ok:
        failures.append(what)


def rows(path: Path, count: int = 4096) -> str:
    rng = np.random.default_rng(0)
    x = rng.random((count, 3), dtype=np.float32)
    shop = (rng.random(count) ** 3 * 500).astype(np.int64)
    city = rng.integers(0, 40, count)
    label = ((x[:, 0] - x[:, 1] + (shop % 2) * 0.4) > 0.2).astype(np.int64)
    table = {"label": label, "x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2], "shop": shop, "city": city}
    pq.write_table(pa.table(table), path)
    return str(path)


def trained(model: str, device: str, data: str) -> tuple[Trainer, float]:
    features = {"dense": ["x0", "x1", "x2"], "categorical": {"shop": 500, "city": 40}}
    if model == "mlp":
        features = {"dense": ["x0", "x1", "x2"]}
    trainer = Trainer(
        model=model,
        features=features,
        hidden=[32, 16],
        optimizer="sgd",
        learning_rate=0.1,
        batch_size=256,
        shuffle_buffer=0,
        device=device,
    )
    result = trainer.fit(data, epochs=2)
    assert result.loss is not None
    return trainer, float(result.loss)


def main() -> int:
    report = gpu.cuda_report()
    print("RESULT " + json.dumps({"mode": "wheel", "report": report}), flush=True)
    check(report["built"], "the wheel is the CUDA build")
    missing = [lib["name"] for lib in report["libraries"] if not lib["found"]]
    check(not missing, f"the driver and CUDA's libraries load (missing: {missing or 'none'})")
    check(bool(report["cards"]), f"the driver lists a card ({report['cards'][:1]})")
    with tempfile.TemporaryDirectory() as folder:
        data = rows(Path(folder) / "rows.parquet")
        auto = Trainer(model="mlp", features={"dense": ["x0", "x1", "x2"]}, hidden=[8], batch_size=256)
        auto.fit(data)
        check(auto.device == "cuda:0", f"device='auto' trains on {auto.device}")
        for model in ("mlp", "wide_deep"):
            try:
                (cpu, cpu_loss), (cuda, cuda_loss) = trained(model, "cpu", data), trained(model, "cuda", data)
            except Exception as e:  # every check still runs; this one fails with the reason
                check(False, f"{model}: training on cpu and cuda: {type(e).__name__}: {e}")
                continue
            check(cuda.device == "cuda:0", f"{model}: device='cuda' trains on {cuda.device}")
            loss_diff = abs(cpu_loss - cuda_loss) / abs(cpu_loss)
            on_cpu, on_gpu = np.asarray(cpu.weights()), np.asarray(cuda.weights())
            param_diff = float(np.abs(on_cpu - on_gpu).max() / np.abs(on_cpu).max())
            line = {"mode": "wheel", "model": model, "loss_rel_diff": loss_diff, "param_rel_diff": param_diff}
            print("RESULT " + json.dumps(line), flush=True)
            check(
                loss_diff <= 1e-4 and param_diff <= 1e-4,
                f"{model}: the GPU's loss and parameters are the CPU's ({loss_diff:.1e}, {param_diff:.1e})",
            )
        # A process that sees no card, as a Spark task given no GPU: auto is the CPU, cuda says why.
        code = (
            "import sys\n"
            "from sparktrain.training import Trainer\n"
            "t = Trainer(model='mlp', features={'dense': ['x0', 'x1', 'x2']}, hidden=[8], batch_size=256)\n"
            "t.fit(sys.argv[1]); print(t.device)\n"
            "try:\n"
            "    Trainer(model='mlp', features={'dense': ['x0']}, device='cuda').fit(sys.argv[1])\n"
            "except Exception as e:\n"
            "    print(type(e).__name__, e)\n"
        )
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        try:
            done = subprocess.run(
                [sys.executable, "-c", code, data], env=env, capture_output=True, text=True, timeout=120
            )
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess([], 1, "", "the process seeing no card ran over 120 s")
        lines = done.stdout.strip().splitlines()
        check(done.returncode == 0 and lines[:1] == ["cpu"], f"no visible card: auto trains on {lines[:1]}")
        said = lines[1] if len(lines) > 1 else done.stderr.strip()[-300:]
        check(
            said.split(" ")[0].endswith("Error") and "device 'cuda'" in said,
            f"no visible card: cuda says {said!r}",
        )
    finding = judge([("this-host", ["0"], report, None)])
    check(finding.level == "ok", f"the doctor's gpu-runtime finding: {finding.level}: {finding.message}")
    print("RESULT " + json.dumps({"mode": "wheel", "failures": failures}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
