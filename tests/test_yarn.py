"""The main job on a real YARN (Hadoop's MiniYARNCluster: a ResourceManager and two NodeManagers
whose containers are local processes) next to the MiniDFS, submitted with ``sparktrain submit``
from a user's environment that is packed and shipped with ``--archives``: TFRecords written to and
read from HDFS, training on two executors, the export on HDFS, predict; in cluster and in client
mode. And the time limit, which must kill the application on YARN, not only the local command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

import sparktrain as st
from harness.miniyarn import MiniYarn
from harness.processes import run_in_group
from sparktrain.deploy.process import YARN_CLI
from sparktrain.deploy.spark_home import spark_home

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "ctr_on_spark.py")

# One YARN for the module, on one pytest worker: a second would compete for the two cores.
pytestmark = [pytest.mark.spark, pytest.mark.hdfs, pytest.mark.yarn, pytest.mark.xdist_group("yarn")]


def _cannot_host() -> str | None:
    """Why this machine cannot start a MiniYARNCluster, or None."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} not found: the MiniYARNCluster launcher needs a JDK 17 and Maven"
    return None


# Skipped with the reason on a machine without a JDK or Maven; never in CI, which has both.
if _cannot_host() and os.environ.get("CI") != "true":
    pytestmark.append(pytest.mark.skip(reason=str(_cannot_host())))


@pytest.fixture(scope="module")
def yarn(hdfs_url: str) -> Iterator[MiniYarn]:
    with MiniYarn(hdfs_url) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's virtualenv: the sparktrain wheel and what its executors need (no pyspark, which
    Spark ships itself), plus the packer. Same versions as this environment's: pip takes them
    from its cache when it downloaded them before. Offline, point pip at a folder of their
    wheels through its own variables (PIP_NO_INDEX=1, PIP_FIND_LINKS=<folder>), which this
    install inherits."""
    wheels = sorted((ROOT / "target" / "wheels").glob("sparktrain-*.whl"))
    assert wheels, "tests/run.sh builds the wheel (submit/install.sh) before the tests"
    prefix = tmp_path_factory.mktemp("user") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True)
    pins = [f"{name}=={metadata.version(name)}" for name in ("pyarrow", "numpy", "pandas", "venv-pack")]
    subprocess.run(
        [str(prefix / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheels[-1]), *pins],
        check=True,
        timeout=600,
    )
    return prefix


def yarn_env(yarn: MiniYarn) -> dict[str, str]:
    """The environment of a submit to the mini cluster. Its NodeManagers share this machine's
    files, so PySpark's own zips are named ``local:`` as Spark's jars are: nothing to stage on
    HDFS for them. (Once, under load, YARN refused an application's containers because the
    staged py4j zip's time on HDFS no longer matched the one the client had recorded.)"""
    home = spark_home()
    assert home is not None
    lib = Path(home) / "python" / "lib"
    zips = [lib / "pyspark.zip", *sorted(lib.glob("py4j-*-src.zip"))]
    assert zips[0].is_file(), f"no pyspark.zip under {lib}"
    assert len(zips) == 2, f"one py4j zip expected under {lib}: {zips}"
    return {
        **os.environ,
        "HADOOP_CONF_DIR": str(yarn.conf_dir),
        "SPARK_HOME": home,
        "PYSPARK_ARCHIVES_PATH": ",".join(f"local:{z}" for z in zips),
    }


def submit(
    yarn: MiniYarn, python: Path, *args: str, cwd: Path, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """``sparktrain submit --master yarn`` run by ``python``, with the confs a mini cluster needs:
    Spark's jars from this machine instead of an upload per job, small containers, loopback."""
    home = spark_home()
    command = [str(python), "-m", "sparktrain", "submit", "--master", "yarn", "--queue", "default"]
    command += ["--workers", "2", "--memory", "512m", "--driver-memory", "768m"]
    command += ["--conf", f"spark.yarn.jars=local:{home}/jars/*", "--conf", "spark.log.level=WARN"]
    command += ["--env", "SPARK_LOCAL_IP=127.0.0.1", *args]
    return run_cli(command, cwd=cwd, env=yarn_env(yarn), timeout=timeout)


def run_cli(
    command: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """``command`` (the sparktrain CLI) in a process group of its own, which a test that runs
    too long stops whole: the CLI, spark-submit and a client-mode driver with its JVM."""
    return run_in_group(command, cwd=cwd, env=env, timeout=timeout)


def explain(done: subprocess.CompletedProcess[str], yarn: MiniYarn) -> str:
    """What a failing test shows: the submit's output and the containers' stderr tails."""
    logs = [p for p in yarn.container_logs() if p.name == "stderr"]
    tails = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-2000:]}" for p in logs[-4:])
    return f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}\n{tails}"


def check_the_main_job(output: str) -> dict:
    result = json.loads(st.fs.read_bytes(f"{output}/result.json"))
    assert result["rows"] == 20000
    assert result["workers"] == 2
    assert result["steps"] == -(-20000 // 512)  # one epoch of 256-row batches on each of 2 workers
    assert result["scored"] == 2000
    assert result["export"] == f"{output}/model/export"
    assert sorted(f.path.rsplit("/", 1)[1] for f in st.fs.ls(result["export"])) == [
        "model.json",
        "model.safetensors",
    ]
    assert st.fs.glob(f"{output}/train/part-*.tfrecord")
    assert st.fs.glob(f"{output}/tensorboard/events.out.tfevents.*")
    return result


def environments_linked(yarn: MiniYarn, application: str) -> dict[str, str]:
    """For each container YARN launched for ``application``: the archive it unpacked as
    ``environment`` (its launch script links that name to the localized archive)."""
    linked = {}
    for script in yarn.work_dir.rglob(f"{application}/container_*/launch_container.sh"):
        for line in script.read_text().splitlines():
            if line.startswith("ln -sf") and line.endswith('"environment"'):
                linked[script.parent.name] = line.split('"')[1].rsplit("/", 1)[1]
    return linked


def test_cluster_mode_runs_the_main_job_from_a_packed_environment(yarn, user_env, hdfs_url, tmp_path):
    output = f"{hdfs_url}/yarn/{uuid.uuid4().hex}"
    done = submit(
        yarn, user_env / "bin" / "python", "--deploy-mode", "cluster", "--pack", "--time-limit", "12m",
        EXAMPLE, "--rows", "20000", "--epochs", "1", "--output", output, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, explain(done, yarn)
    assert "final status: SUCCEEDED" in done.stderr
    check_the_main_job(output)
    application = next(w for w in done.stderr.split() if w.startswith("application_"))
    # The driver's container and both executors' unpacked the shipped archive.
    linked = environments_linked(yarn, application)
    assert len(linked) >= 3, linked
    assert set(linked.values()) == {"sparktrain-env.tar.gz"}, linked


def test_client_mode_runs_the_main_job_with_an_archive_from_sparktrain_pack(
    yarn, user_env, hdfs_url, tmp_path
):
    archive = f"{hdfs_url}/yarn/envs/{uuid.uuid4().hex}.tar.gz"
    packed = subprocess.run(
        [str(user_env / "bin" / "sparktrain"), "pack", "--output", archive, "--compress-level", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert packed.returncode == 0, packed.stderr
    assert f"--conf spark.archives={archive}#environment" in packed.stdout
    assert st.fs.size(archive) > 1 << 20

    output = f"{hdfs_url}/yarn/{uuid.uuid4().hex}"
    # No UI for the client-mode driver: Spark 4.3 adds YARN's AM filter to the UI's handlers when
    # the AM registers, and on a loaded machine that can race with the UI attaching them during
    # SparkContext start (a ConcurrentModificationException in Jetty's ServletHandler).
    done = submit(
        yarn, user_env / "bin" / "python", "--deploy-mode", "client", "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--archives", f"{archive}#environment", "--python", "./environment/bin/python",
        EXAMPLE, "--rows", "20000", "--epochs", "1", "--output", output, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, explain(done, yarn)
    printed = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert printed == check_the_main_job(output)
    assert not os.path.lexists(tmp_path / "environment"), "the driver-side link is removed after the job"


def test_the_time_limit_kills_the_application_on_yarn(yarn, tmp_path):
    job = tmp_path / "stuck_on_yarn.py"
    job.write_text(
        "import time\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "spark.sparkContext.parallelize(range(2), 2).foreach(lambda _: time.sleep(3600))\n"
    )
    done = submit(
        yarn, Path(sys.executable), "--deploy-mode", "cluster", "--python", sys.executable,
        "--time-limit", "60s", str(job), cwd=tmp_path, timeout=400,
    )  # fmt: skip
    assert done.returncode == 124, explain(done, yarn)
    application = next(w for w in done.stderr.split() if w.startswith("application_"))
    assert f"time limit of 60 s was reached; killed application {application}" in done.stderr
    home = spark_home()
    status = subprocess.run(
        ["java", "-cp", f"{yarn.conf_dir}:{home}/jars/*", YARN_CLI, "application", "-status", application],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Final-State : KILLED" in status.stdout, status.stdout + status.stderr


def test_the_doctor_checks_a_yarn_application_and_its_hdfs_paths(yarn, hdfs_url, tmp_path):
    home = spark_home()
    blocker = f"{hdfs_url}/yarn/{uuid.uuid4().hex}"
    st.fs.write_bytes(blocker, b"a file where the job wants a folder")
    command = [sys.executable, "-m", "sparktrain", "doctor", "--master", "yarn", "--workers", "2"]
    command += ["--wait", "180"]  # executors may take long to start on a busy machine
    for conf in (
        f"spark.yarn.jars=local:{home}/jars/*",
        "spark.executor.instances=2",
        "spark.executor.memory=512m",
        "spark.driver.host=127.0.0.1",
        "spark.executorEnv.SPARK_LOCAL_IP=127.0.0.1",
    ):
        command += ["--conf", conf]
    command += ["--path", f"{hdfs_url}/yarn/doctor", "--path", f"{blocker}/models"]
    # A session built in Python (not by spark-submit) gives executors PYSPARK_PYTHON's interpreter.
    env = {**yarn_env(yarn), "PYSPARK_PYTHON": sys.executable}
    done = run_cli(command, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    report = done.stdout
    # The live application: two executors of one slot each, the same Python and sparktrain.
    for check in ("dynamic-allocation", "slots", "executor-versions"):
        assert re.search(rf"^OK +{check}$", report, re.MULTILINE), report
    # One path takes the probe and is left as it was; the one under a file is the error.
    assert re.search(r"^ERROR +storage$", report, re.MULTILINE), report
    assert f"{blocker}/models" in report, report
    assert not st.fs.exists(f"{hdfs_url}/yarn/doctor")
