"""GPUs without a GPU: what a user sees on a machine with no driver, and Spark's GPU scheduling
end to end with GPU addresses from a discovery script.

- ``device="auto"`` (the default) trains on the CPU where no GPU is usable, and on the CPU in
  a Spark task that Spark gave no GPU; ``device="cuda"`` says exactly what is missing: the
  CUDA build, or the driver's or a library's file.
- PyPI's CUDA libraries are loaded from ``site-packages/nvidia/cu13/lib`` before a device opens.
- On a real local-cluster whose workers offer GPUs, each trainer gets the address Spark
  assigned its task as ``ctx.gpus`` and ``CUDA_VISIBLE_DEVICES``, and ``sparktrain doctor``
  asks those tasks what they find on their GPUs.

The same on a real GPU runs in ``tests/gpu/check.sh`` on a machine that has one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparktrain import _native
from sparktrain.deploy.gpu_probe import judge
from sparktrain.errors import InvalidArgumentError, MissingDependencyError
from sparktrain.training import Trainer, gpu

HERE = Path(__file__).resolve().parent
REPORT = gpu.cuda_report()
NO_GPU = not REPORT["cards"]
needs_no_gpu = pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU: tests/gpu/check.sh covers it")
needs_gpu = pytest.mark.skipif(
    NO_GPU or not REPORT["built"],
    reason="needs the CUDA wheel and a GPU (this process: "
    + ("CUDA build" if REPORT["built"] else "CPU build")
    + f", {len(REPORT['cards'])} GPU(s))",
)


def _rows(path: Path, rows: int = 512) -> str:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 4)).astype(np.float32)
    label = (x[:, 0] - x[:, 1] > 0).astype(np.int64)
    pq.write_table(pa.table({"label": label, **{f"x{i}": x[:, i] for i in range(4)}}), path)
    return str(path)


@needs_no_gpu
def test_auto_trains_on_the_cpu_where_no_gpu_is_usable(tmp_path):
    trainer = Trainer(model="mlp", hidden=[8], batch_size=64)
    assert trainer.config.device == trainer.device == "auto"
    result = trainer.fit(_rows(tmp_path / "rows.parquet"))
    assert result.examples == 512
    assert trainer.device == "cpu"  # what auto chose


@needs_no_gpu
def test_cuda_names_what_is_missing(tmp_path):
    trainer = Trainer(model="mlp", hidden=[8], batch_size=64, device="cuda:0")
    with pytest.raises((MissingDependencyError, InvalidArgumentError)) as raised:
        trainer.fit(_rows(tmp_path / "rows.parquet"))
    message = str(raised.value)
    assert message.startswith("device 'cuda:0': "), message
    if not REPORT["built"]:
        # The CPU build: the fix is the CUDA build.
        assert type(raised.value) is InvalidArgumentError
        assert raised.value.parameter == "device"
        assert "built without CUDA" in message
        assert "GPUs" in message
    elif not REPORT["libraries"][0]["found"]:
        # The CUDA build on a host without NVIDIA's driver: its library, by file name.
        assert type(raised.value) is MissingDependencyError
        assert raised.value.package == "libcuda.so.1"
        assert "NVIDIA driver (libcuda.so.1) cannot be loaded" in message
    else:
        missing = next(lib for lib in REPORT["libraries"] if not lib["found"])
        assert raised.value.package == missing["files"][0]


@needs_gpu
def test_a_gpu_trains_to_the_cpus_parameters(tmp_path):
    data = _rows(tmp_path / "rows.parquet", rows=2048)
    weights = {}
    for device in ("cpu", "cuda"):
        trainer = Trainer(model="mlp", hidden=[16], batch_size=128, shuffle_buffer=0, device=device)
        trainer.fit(data, epochs=2)
        assert trainer.device == ("cpu" if device == "cpu" else "cuda:0")
        weights[device] = np.asarray(trainer.weights())
    scale = np.abs(weights["cpu"]).max()
    assert np.abs(weights["cpu"] - weights["cuda"]).max() <= 1e-4 * scale


def test_a_bad_device_name_is_refused_before_training():
    with pytest.raises(InvalidArgumentError, match=r"device 'gpu0': use cpu, auto, cuda or cuda:<n>"):
        Trainer(model="mlp", device="gpu0")


def test_auto_in_a_spark_task_without_gpus_is_the_cpu():
    assert gpu.resolve_device("auto", ()) == "cpu"
    assert gpu.resolve_device("auto", ("1",)) == "auto"
    assert gpu.resolve_device("auto", None) == "auto"  # outside Spark: the engine decides
    assert gpu.resolve_device("cuda:0", ()) == "cuda:0"  # asked for: the engine says why not


def test_pypi_cuda_libraries_are_loaded_from_site_packages(tmp_path, monkeypatch):
    # Any shared library stands in for PyPI's file: what matters is where it is looked for.
    real = next(
        p
        for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1")
        if Path(p).exists()
    )
    lib = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(real, lib / "libcurand.so.10")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), str(tmp_path / "site")])
    assert gpu.load_pypi_libraries() == [str(lib / "libcurand.so.10")]
    maps = Path("/proc/self/maps").read_text()
    assert str(lib / "libcurand.so.10") in maps


def test_the_report_says_what_the_build_has():
    report = _native.cuda_report()
    assert set(report) == {"built", "toolkit", "libraries", "driver", "cards", "error"}
    if report["built"]:
        assert [lib["name"] for lib in report["libraries"]] == [
            "the NVIDIA driver",
            "cuBLASLt",
            "cuBLAS",
            "cuRAND",
        ]
        assert report["libraries"][0]["files"][0] == "libcuda.so.1"
    else:
        assert report["libraries"] == []
        assert report["cards"] == []
        assert report["toolkit"] == ""


def _report(*, built=True, driver=True, cublas=True, cards=(("NVIDIA H100 80GB HBM3", "9.0"),)):
    libraries = [
        {
            "name": "the NVIDIA driver",
            "files": ["libcuda.so.1"],
            "found": driver,
            "hint": "install the driver",
        },
        {
            "name": "cuBLAS",
            "files": ["libcublas.so.13"],
            "found": cublas,
            "hint": "pip install 'sparktrain[cuda]'",
        },
    ]
    return {
        "built": built,
        "toolkit": "13.0" if built else "",
        "libraries": libraries if built else [],
        "driver": "13.0" if built and driver else None,
        "cards": [
            {"ordinal": i, "name": name, "capability": cap, "memory_bytes": 80 * 2**30}
            for i, (name, cap) in enumerate(cards if built and driver else ())
        ],
        "error": None,
    }


def test_the_doctor_weighs_what_tasks_find_on_their_gpus():
    ok = judge([("h1", ["0"], _report(), None), ("h2", ["1"], _report(), None)])
    assert ok.level == "ok"
    assert ok.message.startswith(
        "2 task(s) on 2 host(s) see NVIDIA H100 80GB HBM3 (9.0, 80 GiB); driver CUDA 13.0"
    )
    no_driver = judge([("h1", ["0"], _report(), None), ("h2", ["0"], _report(driver=False), None)])
    assert (no_driver.level, no_driver.message) == (
        "error",
        "the NVIDIA driver's libcuda.so.1 cannot be loaded on h2",
    )
    blind = judge([("h1", ["3"], _report(cards=()), None)])
    assert blind.level == "error"
    assert "h1 (CUDA_VISIBLE_DEVICES=3)" in blind.message
    ungiven = judge([("h1", [], _report(), None)])
    assert ungiven.level == "error"
    assert "spark.task.resource.gpu.amount" in (ungiven.fix or "")
    unbuilt = judge([("h1", ["0"], _report(built=False), None)])
    assert unbuilt.level == "warning"
    assert "built without CUDA" in unbuilt.message
    assert "frameworks a job brings" in unbuilt.message
    no_cublas = judge([("h1", ["0"], _report(cublas=False), None)])
    assert no_cublas.level == "warning"
    assert no_cublas.message.startswith("cuBLAS (libcublas.so.13) cannot be loaded on h1")
    assert no_cublas.fix == "pip install 'sparktrain[cuda]'"
    old = judge([("h1", ["0"], _report(cards=(("Tesla T4", "7.5"),)), None)])
    assert old.level == "warning"
    assert "Tesla T4 has compute capability 7.5" in old.message
    failed = judge([("h1", ["0"], None, "exit code 1: ImportError: boom")])
    assert failed.level == "error"
    assert failed.message.endswith("h1 could not report its GPUs: exit code 1: ImportError: boom")


# --- Spark's GPU scheduling on a real local-cluster ------------------------------------------

_SPARK_JOB = """
import json, os, sys
from harness.spark import local_cluster_session
from sparktrain import Cluster
from sparktrain.deploy.doctor import diagnose

script = sys.argv[1]
data = sys.argv[2]
conf = {
    # Each worker offers two GPUs, each executor takes one, each task one: Spark names them.
    "spark.worker.resource.gpu.amount": "2",
    "spark.worker.resource.gpu.discoveryScript": script,
    "spark.executor.resource.gpu.amount": "1",
    "spark.executor.resource.gpu.discoveryScript": script,
    "spark.task.resource.gpu.amount": "1",
}
spark = local_cluster_session("gpu-scheduling", conf=conf)
findings = {f.check: [f.level, f.message] for f in diagnose(spark, num_workers=2, gpus_per_worker=1)}

def main_fun(args, ctx):
    from sparktrain import _native
    trainer = ctx.trainer(model="mlp", hidden=[8], batch_size=64)
    trainer.fit(args)
    return {
        "gpus": list(ctx.gpus),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "asked": trainer.config.device,
        "device": trainer.device,
        "built": _native.cuda_report()["built"],
    }

cluster = Cluster.run(spark, main_fun, data, 2, gpus_per_worker=1, name="gpu-auto")
cluster.wait(timeout=240)
print(json.dumps({"findings": findings, "trainers": cluster.results()}))
spark.stop()
"""


@pytest.mark.spark
def test_spark_gives_each_trainer_its_gpu_and_the_doctor_asks_what_it_finds(tmp_path):
    script = tmp_path / "gpus.sh"
    script.write_text('#!/usr/bin/env bash\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    script.chmod(0o755)
    (tmp_path / "rows").mkdir()
    _rows(tmp_path / "rows" / "part-0.parquet")
    _rows(tmp_path / "rows" / "part-1.parquet")
    data = str(tmp_path / "rows")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SPARK_JOB), str(script), data],
        cwd=HERE,
        capture_output=True,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(HERE)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    for trainer in outcome["trainers"]:
        # Spark's address for the task, as the trainer and everything it starts see it.
        assert len(trainer["gpus"]) == 1
        assert trainer["gpus"][0] in ("0", "1")
        assert trainer["visible"] == trainer["gpus"][0]
        # Spark gave the task a GPU, so the engine decided; with no usable GPU here, the CPU.
        assert trainer["asked"] == "auto"
        assert trainer["device"] == "cpu"
    findings = outcome["findings"]
    assert findings["gpu"][0] == "ok"
    level, message = findings["gpu-runtime"]
    if not REPORT["built"]:
        assert (level, "is built without CUDA" in message) == ("warning", True), message
    elif not REPORT["libraries"][0]["found"]:
        assert (level, message.startswith("the NVIDIA driver's libcuda.so.1 cannot be loaded on ")) == (
            "error",
            True,
        ), message
