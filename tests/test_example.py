"""The examples through ``sparktrain submit`` on a local cluster: the README's main job
(``ctr_on_spark.py``, as ``submit/run-example.sh`` runs it, minus the installation that
``tests/run.sh`` has done), the Keras job under sparktrain's ``TF_CONFIG`` and the NumPy job
that trains with ``ctx.allreduce``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# spark-submit starts its own driver, outside the spark fixture.
pytestmark = pytest.mark.spark


def spark_submit(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs ``examples/<script>`` with ``sparktrain submit`` on a local cluster of two executors
    (``local-cluster[2,1,1024]``), as ``submit/run-example.sh`` does."""
    command = [sys.executable, "-m", "sparktrain", "submit", "--workers", "2", "--memory", "1024m"]
    command += ["--conf", "spark.log.level=WARN", "--time-limit", "10m"]
    command += [str(ROOT / "examples" / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=660, cwd=cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def result_of(done: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])


def test_the_main_job_writes_trains_evaluates_exports_and_scores(tmp_path):
    done = spark_submit("ctr_on_spark.py", "--rows", "30000", "--epochs", "2", cwd=tmp_path)
    result = result_of(done)
    assert result["rows"] == 30000
    assert result["steps"] == 2 * -(-30000 // 512)
    assert result["eval_auc"] > 0.65, result  # a model that learned nothing scores 0.5
    assert result["scored"] == 3000
    export = tmp_path / "sparktrain-example" / "model" / "export"
    assert sorted(p.name for p in export.iterdir()) == ["model.json", "model.safetensors"]
    assert list((tmp_path / "sparktrain-example" / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.tensorflow
def test_the_keras_job_trains_on_two_executors_and_exports(tmp_path):
    done = spark_submit(
        "keras_on_spark.py", "--rows", "8000", "--epochs", "2", "--output", str(tmp_path), cwd=tmp_path
    )
    result = result_of(done)
    assert result["examples"] == 8000
    assert result["workers"] == 2
    assert result["accuracy"][-1] > 0.9, result
    assert result["loss"][-1] < result["loss"][0], result
    assert (Path(result["export"]) / "saved_model.pb").exists()
    # Both trainers' output reached the driver, prefixed.
    assert "[chief:0] chief:0 trains on" in done.stdout
    assert "[worker:0] worker:0 trains on" in done.stdout


def test_the_numpy_job_trains_with_all_reduce_and_stays_in_sync(tmp_path):
    result = result_of(
        spark_submit("numpy_sgd_on_spark.py", "--rows", "20000", "--steps", "200", cwd=tmp_path)
    )
    assert result["examples"] == 20000
    assert result["identical"] is True
    assert result["losses"][-1] < 0.3 < result["losses"][0], result
    # The learned direction matches the true weights' signs.
    assert [w > 0 for w in result["weights"][:4]] == [True, False, True, True], result
