"""The README's main job: ``examples/keras_on_spark.py`` through ``spark-submit`` on a local
cluster, as ``submit/run-example.sh`` runs it (minus the installation, which ``tests/run.sh``
has done)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_example_job_trains_on_two_executors_and_exports(tmp_path):
    spark_submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    assert spark_submit, "spark-submit comes with the pyspark wheel in the virtualenv"
    command = [spark_submit, "--master", "local-cluster[2,1,1024]"]
    for conf in ["spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1", "spark.log.level=WARN"]:
        command += ["--conf", conf]
    command += [str(ROOT / "examples" / "keras_on_spark.py"), "--rows", "8000", "--epochs", "2"]
    command += ["--output", str(tmp_path)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["examples"] == 8000
    assert result["workers"] == 2
    assert result["accuracy"][-1] > 0.9, result
    assert result["loss"][-1] < result["loss"][0], result
    assert (Path(result["export"]) / "saved_model.pb").exists()
    # Both trainers' output reached the driver, prefixed.
    assert "[chief:0] chief:0 trains on" in done.stdout
    assert "[worker:0] worker:0 trains on" in done.stdout
