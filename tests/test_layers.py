"""The package's layers as the processes of a job see them: an executor task and a trainer
import none of the driver's modules (the import contracts in pyproject.toml say the same
statically, and ``lint-imports`` runs in both test tiers), and the public names resolve
lazily from the modules that define them."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sparktrain as st
from harness.synthetic import dense_table, write_tfrecords

#: Modules only the driver (or the ``sparktrain`` command) may load.
DRIVER_SIDE = (
    "sparktrain._spark",
    "sparktrain.cli",
    "sparktrain.cluster.driver",
    "sparktrain.deploy",
    "sparktrain.ml",
    "sparktrain.prediction",
    "sparktrain.tfos",
    "sparktrain.torch",
    "sparktrain.tracking.models",
    "sparktrain.training.driver",
)


def driver_side(modules: list[str]) -> list[str]:
    return sorted(m for m in modules for p in DRIVER_SIDE if m == p or m.startswith(p + "."))


def test_an_executor_task_imports_none_of_the_drivers_modules():
    # What Spark's Python worker loads to run one task of a job's stage: the partition
    # functions the stage is built around, which Spark ships by name.
    code = (
        "import sys, sparktrain.cluster.task.stages, sparktrain.cluster.task.feed\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = loaded.stdout.split()
    assert "sparktrain.cluster.task.run" in modules
    assert driver_side(modules) == []


def test_a_trainer_imports_none_of_the_drivers_modules(spark, tmp_path):
    """The trainer process, through the path ``sparktrain.train`` takes (the engine's
    ``train_main``: the launcher, ``ctx.trainer``, fit and export), loads nothing of the
    driver's side."""
    data = write_tfrecords(f"{tmp_path}/data", dense_table(256, seed=1, features=4), files=2)

    def main_fun(args, ctx):
        import sys

        from sparktrain.training.trainer import train_main

        train_main(args, ctx)
        return sorted(m for m in sys.modules if m.startswith("sparktrain"))

    args = {
        "trainer": {"model": "mlp", "hidden": [4], "batch_size": 32},
        "data": data,
        "fit": {"epochs": 1},
        "export_dir": str(tmp_path / "export"),
    }
    with st.Cluster.run(spark, main_fun, args, 2, log=False) as cluster:
        loaded = cluster.results()
    for modules in loaded:
        assert "sparktrain.cluster.trainer.context" in modules
        assert "sparktrain.training.trainer" in modules
        assert driver_side(modules) == []


def test_public_names_resolve_from_their_modules():
    from sparktrain.cluster.driver.launcher import Cluster
    from sparktrain.training.driver import TrainResult, train

    assert st.Cluster is Cluster
    assert st.train is train
    assert st.training.TrainResult is TrainResult
    assert st.cluster.TrainerContext.__module__ == "sparktrain.cluster.trainer.context"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = st.nothing  # type: ignore[attr-defined]
