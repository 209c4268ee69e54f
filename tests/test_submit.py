"""``sparktrain submit``: the command it builds for each kind of cluster, its refusals, and its
time limit on a real local cluster."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sparktrain.deploy.submit import SubmitSpec, duration_s, memory_mb
from sparktrain.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "examples" / "ctr_on_spark.py")


def start(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m sparktrain ARGS`` in a process group of its own, so that a test that fails
    can stop it and everything it started."""
    return subprocess.Popen(
        [sys.executable, "-m", "sparktrain", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def finish(process: subprocess.Popen[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"sparktrain ran past {timeout} s; its stderr ends with:\n{err[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def sparktrain(*args: str, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return finish(start(*args, cwd=cwd), timeout)


def processes_with(marker: str) -> list[str]:
    """The command lines of the processes whose environment holds ``marker``: a job's driver,
    workers, executors and Python workers all inherit the submit's environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue  # gone, or not ours to read
    return found


STUCK_JOB = (
    "import pathlib, sys, time\n"
    "from pyspark.sql import SparkSession\n"
    "spark = SparkSession.builder.getOrCreate()\n"
    "pathlib.Path(sys.argv[1]).touch()\n"
    "spark.sparkContext.parallelize(range(2), 2).foreach(lambda _: time.sleep(3600))\n"
)


def dry_run(*args: str) -> tuple[list[str], dict[str, str]]:
    """The command ``--dry-run`` prints, and its ``--conf`` values."""
    done = sparktrain("submit", "--dry-run", *args)
    assert done.returncode == 0, done.stderr
    command = shlex.split(done.stdout.strip())
    confs = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")
    return command, confs


def test_a_local_cluster_is_sized_from_the_options_and_bound_to_loopback():
    command, confs = dry_run(
        "--workers", "3", "--cores-per-worker", "2", "--memory", "2g", ENTRY, "--rows", "9"
    )
    assert command[command.index("--master") + 1] == "local-cluster[3,2,2048]"
    assert command[command.index("--deploy-mode") + 1] == "client"
    assert command[-3:] == [ENTRY, "--rows", "9"]
    assert confs["spark.task.cpus"] == confs["spark.executor.cores"] == "2"  # one trainer per executor
    assert confs["spark.dynamicAllocation.enabled"] == "false"
    assert confs["spark.scheduler.minRegisteredResourcesRatio"] == "1.0"
    assert confs["spark.driver.host"] == "127.0.0.1"
    assert confs["spark.executorEnv.OMP_NUM_THREADS"] == confs["spark.executorEnv.RAYON_NUM_THREADS"] == "2"


def test_yarn_gets_executors_a_queue_and_the_environment_in_both_containers():
    _, confs = dry_run(
        "--master", "yarn", "--deploy-mode", "cluster", "--workers", "4", "--queue", "training",
        "--env", "NCCL_DEBUG=INFO", "--conf", "spark.sparktrain.collective.seal=false", ENTRY,
    )  # fmt: skip
    assert confs["spark.executor.instances"] == "4"
    assert confs["spark.yarn.queue"] == "training"
    assert confs["spark.executorEnv.NCCL_DEBUG"] == "INFO"
    assert confs["spark.yarn.appMasterEnv.NCCL_DEBUG"] == "INFO"  # the driver's container too
    assert confs["spark.sparktrain.collective.seal"] == "false"


def test_kubernetes_defaults_to_cluster_mode_with_the_image_and_gpus():
    command, confs = dry_run(
        "--master", "k8s://https://10.0.0.1:6443", "--image", "registry.example/sparktrain:1",
        "--workers", "8", "--gpus-per-worker", "1", "local:///opt/job/train.py",
    )  # fmt: skip
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    assert confs["spark.kubernetes.container.image"] == "registry.example/sparktrain:1"
    assert confs["spark.executor.instances"] == "8"
    assert confs["spark.executor.resource.gpu.amount"] == confs["spark.task.resource.gpu.amount"] == "1"
    # In the image (the Dockerfile puts it there): pods run it before fetching --files.
    assert confs["spark.executor.resource.gpu.discoveryScript"] == "/opt/sparktrain/discover_gpus.sh"
    assert confs["spark.executor.resource.gpu.vendor"] == "nvidia.com"
    assert "--files" not in command


def test_standalone_asks_for_cores_and_a_user_conf_wins():
    _, confs = dry_run(
        "--master", "spark://10.0.0.2:7077", "--workers", "3", "--cores-per-worker", "4",
        "--conf", "spark.task.cpus=2", ENTRY,
    )  # fmt: skip
    assert confs["spark.cores.max"] == "12"
    assert confs["spark.task.cpus"] == "2"


def test_a_shipped_interpreter_keeps_the_client_drivers_own():
    _, confs = dry_run(
        "--master", "yarn", "--archives", "hdfs:///envs/train.tar.gz#environment",
        "--python", "./environment/bin/python", ENTRY,
    )  # fmt: skip
    assert confs["spark.archives"] == "hdfs:///envs/train.tar.gz#environment"
    assert confs["spark.pyspark.python"] == "./environment/bin/python"
    assert os.path.samefile(confs["spark.pyspark.driver.python"], sys.executable)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--master", "local[4]"], "not a cluster"),
        (["--master", "yarn", "--workers", "0"], "--workers 0"),
        (["--memory", "lots"], "--memory 'lots'"),
        (["--time-limit", "soon"], "--time-limit 'soon'"),
        (["--queue", "q"], "queues are YARN's"),
        (["--master", "k8s://https://h:6443"], "--image"),
        (["--master", "k8s://https://h:6443", "--image", "i"], "spark.kubernetes.file.upload.path"),
        (["--master", "spark://h:7077", "--deploy-mode", "cluster"], "standalone"),
        (["--conf", "novalue"], "KEY=VALUE"),
        (["--master", "local-cluster[3,1,1024]", "--workers", "2"], "asks for 3 workers"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(args, message):
    done = sparktrain("submit", "--dry-run", *args, ENTRY)
    assert done.returncode == 2
    assert message in done.stderr, done.stderr


def test_a_local_cluster_master_gives_the_sizes_and_the_files_and_jars_add_up(tmp_path):
    extra = tmp_path / "lookup.csv"
    extra.write_text("a,b\n")
    command, confs = dry_run(
        "--master", "local-cluster[3,2,1536]", "--python", sys.executable, "--files", str(extra),
        "--conf", "spark.files=hdfs:///shared/vocab.txt", "--conf", "spark.jars=hdfs:///jars/udfs.jar", ENTRY,
    )  # fmt: skip
    assert command[command.index("--master") + 1] == "local-cluster[3,2,1536]"
    assert confs["spark.task.cpus"] == "2"
    assert confs["spark.executor.memory"] == "1536m"
    assert confs["spark.cores.max"] == "6"  # what minRegisteredResourcesRatio waits for
    # --files and --jars would replace the confs of the same meaning: both are kept.
    assert command[command.index("--files") + 1] == f"hdfs:///shared/vocab.txt,{extra}"
    jars = command[command.index("--jars") + 1].split(",")
    assert jars[0] == "hdfs:///jars/udfs.jar"
    assert "spark.files" not in confs
    assert "spark.jars" not in confs
    # The client-mode driver runs this interpreter, and the local cluster stays on loopback.
    assert os.path.samefile(confs["spark.pyspark.driver.python"], sys.executable)
    spec = SubmitSpec(entry_point=ENTRY, python=sys.executable)
    assert spec.environment()["SPARK_LOCAL_IP"] == "127.0.0.1"


@pytest.mark.skipif(
    os.environ.get("SPARKTRAIN_SKIP_JAR") == "1", reason="the fast tier builds the wheel without Maven"
)
def test_the_wheel_jar_goes_with_every_job():
    from sparktrain import jar_path

    jar = jar_path()
    assert jar.endswith(".jar")
    assert os.path.isfile(jar)
    command, _ = dry_run(ENTRY)
    assert command[command.index("--jars") + 1] == jar


def test_a_spark_submit_that_does_not_run_is_named(tmp_path):
    done = sparktrain("submit", "--spark-submit", str(tmp_path / "no-such-spark-submit"), ENTRY)
    assert done.returncode == 2
    assert f"cannot run {tmp_path / 'no-such-spark-submit'}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_entry_point_is_named():
    done = sparktrain("submit", "--dry-run", "no/such/job.py")
    assert done.returncode == 2
    assert "no/such/job.py" in done.stderr


def test_sizes_and_durations_parse_as_spark_and_users_write_them():
    assert [memory_mb(t) for t in ("512m", "2g", "2048", "1t", "3145728b")] == [512, 2048, 2048, 1 << 20, 3]
    assert [duration_s(t) for t in ("90", "90s", "15m", "2h", "1h30m")] == [90, 90, 900, 7200, 5400]
    with pytest.raises(InvalidArgumentError, match="time-limit"):
        duration_s("0s")
    with pytest.raises(InvalidArgumentError, match="a unit on every part"):
        duration_s("1h30")  # 1h30m or 1h30s?
    with pytest.raises(InvalidArgumentError, match="more than 0"):
        memory_mb("0")
    with pytest.raises(InvalidArgumentError, match="--driver-memory 'lots'"):
        SubmitSpec(entry_point=ENTRY, driver_memory="lots")
    with pytest.raises(InvalidArgumentError, match="cluster"):
        SubmitSpec(entry_point=ENTRY, deploy_mode="cluster")


@pytest.mark.spark
def test_the_time_limit_stops_a_job_that_runs_too_long(tmp_path):
    marker, job, env = tmp_path / "started", tmp_path / "stuck_job.py", marked_environment()
    job.write_text(STUCK_JOB)
    started = time.monotonic()
    process = start(
        "submit", "--time-limit", "90s", "--memory", "512m", str(job), str(marker), cwd=tmp_path, env=env
    )
    done = finish(process, timeout=400)
    elapsed = time.monotonic() - started
    assert marker.exists(), done.stderr[-3000:]  # the job really ran before the limit
    assert done.returncode == 124, done.stderr[-3000:]
    assert "time limit of 90 s was reached; stopped the application" in done.stderr
    assert elapsed < 90 + 60
    # Nothing of the job is left: no driver, worker, executor or Python worker still sleeping.
    assert processes_with(env["SPARKTRAIN_TEST_MARKER"]) == []


@pytest.mark.spark
def test_sigterm_to_submit_stops_the_whole_job(tmp_path):
    marker, job, env = tmp_path / "started", tmp_path / "stuck_job.py", marked_environment()
    job.write_text(STUCK_JOB)
    process = start("submit", "--memory", "512m", str(job), str(marker), cwd=tmp_path, env=env)
    deadline = time.monotonic() + 240
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert marker.exists(), finish(process, timeout=30).stderr[-3000:]
    process.send_signal(signal.SIGTERM)  # to sparktrain alone, as a scheduler or `kill` would
    done = finish(process, timeout=120)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    assert "SIGTERM received; stopped the application" in done.stderr
    assert processes_with(env["SPARKTRAIN_TEST_MARKER"]) == []


def marked_environment() -> dict[str, str]:
    """This environment plus a variable unique to one test, which every process of its job
    inherits (see :func:`processes_with`)."""
    return {**os.environ, "SPARKTRAIN_TEST_MARKER": f"job-{uuid.uuid4().hex}"}


@pytest.mark.spark
def test_a_standalone_master_runs_a_job_with_one_trainer_per_worker(tmp_path):
    from harness.standalone import StandaloneCluster

    with StandaloneCluster(workers=2, cores_per_worker=2) as cluster:
        done = sparktrain(
            "submit", "--master", cluster.master_url, "--workers", "2", "--cores-per-worker", "2",
            "--memory", "768m", "--python", sys.executable, "--conf", "spark.driver.host=127.0.0.1",
            "--time-limit", "5m", str(ROOT / "examples" / "numpy_sgd_on_spark.py"), "--rows", "4000",
            "--steps", "50", timeout=400, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["workers"] == 2
    assert result["identical"] is True
