"""``sparktrain pack`` (sparktrain.deploy.pack): its refusals and the confs it prints. Packing a
whole environment is slow; tests/test_yarn.py packs one and runs a job from it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparktrain.deploy.pack import PackedEnv, pack
from sparktrain.errors import ConfigurationError, InvalidArgumentError


def sparktrain_pack(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "sparktrain", "pack", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"sparktrain pack ran past 120 s; its stderr ends with:\n{err[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # spark.archives is a comma-separated list of ARCHIVE#ALIAS: neither may hold , or #.
        (["--output", "train,v2.tar.gz"], "--output): a '#' or ',' in it would break spark.archives"),
        (["--output", "train#2.tar.gz"], "--output): a '#' or ',' in it would break spark.archives"),
        (["--output", "train.zip"], "must end with .tar.gz or .tgz"),
        (["--alias", "env/sub"], "alias='env/sub' (--alias): must be a plain folder name"),
        (["--alias", "a,b"], "alias='a,b' (--alias): must be a plain folder name"),
    ],
)
def test_bad_options_exit_with_2_before_anything_is_packed(tmp_path, args, message):
    done = sparktrain_pack(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_packer_failure_names_the_environment(tmp_path):
    pytest.importorskip("venv_pack")
    # Looks like an environment with sparktrain, but is no virtualenv (no pyvenv.cfg).
    prefix = tmp_path / "not-a-venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").touch()
    site = prefix / "lib" / "python3.11" / "site-packages" / "sparktrain"
    site.mkdir(parents=True)
    (site / "__init__.py").touch()
    with pytest.raises(ConfigurationError, match=rf"venv_pack could not pack {prefix}: .*not a valid"):
        pack(str(tmp_path / "env.tar.gz"), prefix=str(prefix))


def test_a_prefix_without_sparktrain_is_refused(tmp_path):
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").touch()
    with pytest.raises(InvalidArgumentError, match="does not have sparktrain installed"):
        pack(str(tmp_path / "env.tar.gz"), prefix=str(prefix))


def test_the_confs_ship_the_archive_and_keep_a_client_drivers_interpreter():
    packed = PackedEnv("hdfs:///envs/train.tar.gz", "venv")
    assert packed.shipped == "hdfs:///envs/train.tar.gz#environment"
    assert packed.confs("cluster") == {
        "spark.archives": "hdfs:///envs/train.tar.gz#environment",
        "spark.pyspark.python": "./environment/bin/python",
    }
    assert packed.confs("client") == {
        **packed.confs("cluster"),
        "spark.pyspark.driver.python": sys.executable,
    }
