"""``sparktrain submit``: the command it builds for each kind of cluster, its refusals, and its
time limit on a real local cluster."""

from __future__ import annotations

import errno
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from harness.processes import finish, start_in_group
from sparktrain.deploy.process import _Watch
from sparktrain.deploy.spec import GPU_SCRIPT, SubmitSpec, duration_s, memory_mb
from sparktrain.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "examples" / "ctr_on_spark.py")


def start(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m sparktrain ARGS`` in a process group of its own."""
    return start_in_group([sys.executable, "-m", "sparktrain", *args], cwd=cwd, env=env)


def sparktrain(
    *args: str, timeout: float = 60, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return finish(start(*args, cwd=cwd, env=env), timeout)


def fake_spark_submit(folder: Path, script: str) -> Path:
    """A bash script in ``folder`` standing in for spark-submit (``--spark-submit``): what
    ``sparktrain submit`` does around a job (its output, stopping it, its exit status) is
    tested with it in a second, without Spark."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spark-submit"
    path.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(script))
    path.chmod(0o755)
    return path


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


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
    # The master's and workers' INFO lines would bury the job's own output; a user's level wins.
    assert confs["spark.log.level"] == "WARN"
    assert dry_run("--conf", "spark.log.level=INFO", ENTRY)[1]["spark.log.level"] == "INFO"
    assert "spark.log.level" not in dry_run("--master", "yarn", ENTRY)[1]


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
        (["--master", "yarn", "--image", "reg/x:1"], "--image 'reg/x:1': container images are Kubernetes'"),
        (["--conf", "spark.master=local[1]"], "give the master with --master"),
        # Executors larger than the local cluster's workers would never start.
        (
            ["--conf", "spark.executor.cores=2"],
            "workers have 1 core(s) each; size them with --cores-per-worker",
        ),
        (
            ["--memory", "1g", "--conf", "spark.executor.memory=2g"],
            "workers have 1g each; size them with --memory",
        ),
        (["--master", "k8s://https://h:6443"], "--image"),
        (["--master", "k8s://https://h:6443", "--image", "i"], "spark.kubernetes.file.upload.path"),
        (["--master", "spark://h:7077", "--deploy-mode", "cluster"], "standalone"),
        (["--conf", "novalue"], "KEY=VALUE"),
        (["--master", "local-cluster[3,1,1024]", "--workers", "2"], "asks for 3 workers"),
        (["--master", "local-cluster[3,1]"], "local-cluster[WORKERS,CORES,MiB]"),
        (["--memory", "0"], "--memory '0': must be more than 0"),
        (["--driver-memory", "2 GB"], "--driver-memory '2 GB'"),
        (["--time-limit", "1h30"], "a unit on every part"),
        (["--archives", "env.tar.gz#env/sub"], "--archives 'env.tar.gz#env/sub'"),
        (["--archives", "a.tar.gz#x#y"], "takes one '#'"),
        (["--name", " "], "--name ' '"),
        (["--master", "yarn", "--principal", "alice@EXAMPLE.COM"], "--principal and --keytab go together"),
        (
            ["--master", "yarn", "--principal", "a", "--keytab", "/no/such.keytab"],
            "'/no/such.keytab': no such file",
        ),
        (["--master", "spark://h:7077", "--principal", "a", "--keytab", ENTRY], "YARN and Kubernetes only"),
        (["--principal", "a", "--keytab", ENTRY], "YARN and Kubernetes only"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(args, message):
    done = sparktrain("submit", "--dry-run", *args, ENTRY)
    assert done.returncode == 2
    assert message in done.stderr, done.stderr


def test_a_principal_and_keytab_go_to_spark_submit_and_to_a_client_mode_driver(tmp_path, monkeypatch):
    keytab = tmp_path / "alice.keytab"
    keytab.write_bytes(b"\x05\x02")  # a keytab's format version; spark-submit reads it, not us
    kerberos = ("--principal", "alice@EXAMPLE.COM", "--keytab", str(keytab))
    command, _ = dry_run("--master", "yarn", *kerberos, ENTRY)
    assert command[command.index("--principal") + 1] == "alice@EXAMPLE.COM"
    assert command[command.index("--keytab") + 1] == str(keytab)
    assert command.index("--keytab") < command.index(ENTRY)

    # spark-submit's login stays in the driver's JVM: the driver's Python, which reaches HDFS
    # through MIT krb5, gets the keytab too. In cluster mode the driver runs in a container of
    # the cluster, on the delegation tokens Spark obtained with the keytab.
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)
    client = SubmitSpec(ENTRY, master="yarn", principal="alice@EXAMPLE.COM", keytab=str(keytab))
    assert client.environment()["KRB5_CLIENT_KTNAME"] == str(keytab)
    cluster = SubmitSpec(
        ENTRY, master="yarn", deploy_mode="cluster", principal="alice@EXAMPLE.COM", keytab=str(keytab)
    )
    assert "KRB5_CLIENT_KTNAME" not in cluster.environment()
    assert "--principal" not in dry_run("--master", "yarn", ENTRY)[0]


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


@pytest.mark.skipif(
    os.environ.get("SPARKTRAIN_SKIP_JAR") == "1", reason="the fast tier builds the wheel without Maven"
)
def test_each_spark_line_gets_the_jar_built_for_its_scala(tmp_path):
    from sparktrain import jar_path

    spark35, spark4 = jar_path("3.5.1"), jar_path("4.1.0")
    assert spark35.endswith("-spark3.5.jar")
    assert not spark4.endswith("-spark3.5.jar")
    assert os.path.isfile(spark35)
    assert os.path.isfile(spark4)
    with pytest.raises(InvalidArgumentError, match=r"supports Spark 3\.5 and 4\.x, not Spark 3\.4\.1"):
        jar_path("3.4.1")
    # submit adds the build for the Spark that spark-submit runs: $SPARK_HOME's, by its jars.
    for core, expected in (("spark-core_2.12-3.5.9.jar", spark35), ("spark-core_2.13-4.0.1.jar", spark4)):
        home = tmp_path / core
        (home / "jars").mkdir(parents=True)
        (home / "jars" / core).touch()
        submit = fake_spark_submit(home / "bin", "exit 0\n")
        done = sparktrain(
            "submit",
            "--dry-run",
            "--spark-submit",
            str(submit),
            ENTRY,
            env={**os.environ, "SPARK_HOME": str(home)},
        )
        assert done.returncode == 0, done.stderr
        command = shlex.split(done.stdout.strip())
        assert command[command.index("--jars") + 1] == expected


def test_a_spark_submit_that_does_not_run_is_named(tmp_path):
    done = sparktrain("submit", "--spark-submit", str(tmp_path / "no-such-spark-submit"), ENTRY)
    assert done.returncode == 2
    assert f"cannot run {tmp_path / 'no-such-spark-submit'}" in done.stderr
    assert "Traceback" not in done.stderr


def test_kubernetes_cluster_mode_needs_an_upload_folder_for_what_is_on_this_machine():
    k8s = ["--master", "k8s://https://10.0.0.1:6443", "--image", "registry.example/sparktrain:1"]
    # --pack makes a local archive: refused before anything is packed, dry run or not.
    for dry in ([], ["--dry-run"]):
        done = sparktrain("submit", *k8s, *dry, "--pack", "local:///opt/app/train.py")
        assert done.returncode == 2, done.stderr
        assert "the --pack archive on this machine cannot reach the pods" in done.stderr
        assert "spark.kubernetes.file.upload.path" in done.stderr
        assert "Traceback" not in done.stderr
    upload = ["--conf", "spark.kubernetes.file.upload.path=s3a://bucket/uploads"]
    _, confs = dry_run(*k8s, *upload, "--pack", "local:///opt/app/train.py")
    assert confs["spark.archives"] == "<packed env>#environment"
    assert confs["spark.pyspark.python"] == "./environment/bin/python"
    assert "spark.pyspark.driver.python" not in confs  # the driver's pod has the archive's
    # In client mode the driver runs here and serves the entry point itself.
    _, confs = dry_run(*k8s, "--deploy-mode", "client", ENTRY)
    assert os.path.samefile(confs["spark.pyspark.driver.python"], sys.executable)


def test_output_in_any_encoding_goes_through_and_never_blocks_the_job(tmp_path):
    fake = fake_spark_submit(
        tmp_path,
        r"""
        # More than a pipe holds (64 KiB) on each stream, in bytes that are not UTF-8.
        head -c 300000 /dev/zero | tr '\0' '\377'
        head -c 300000 /dev/zero | tr '\0' '\376' >&2
        echo
        echo finished
        """,
    )
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    done = sparktrain("submit", "--spark-submit", str(fake), ENTRY, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "finished"
    assert done.stdout.count("\ufffd") == 300000
    assert done.stderr.count("\ufffd") == 300000


def test_the_output_reader_drains_the_pipe_when_its_sink_fails():
    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.EPIPE, "Broken pipe")

    source = io.StringIO(
        "INFO Client: Submitted application application_1700000000000_0002\n" + "x\n" * 10000
    )
    watch = _Watch()
    watch.tee(source, Closed())
    assert source.read() == ""  # read to the end: spark-submit never blocks on a full pipe
    assert watch.application == "application_1700000000000_0002"


@pytest.mark.parametrize(("script", "status"), [("exit 3", 3), ("kill -KILL $$", 128 + signal.SIGKILL)])
def test_the_exit_status_is_spark_submits_as_a_shell_reports_it(tmp_path, script, status):
    fake = fake_spark_submit(tmp_path, script)
    done = sparktrain("submit", "--spark-submit", str(fake), ENTRY)
    assert done.returncode == status, done.stderr


FAILED_DRIVER = r"""
echo 'Traceback (most recent call last):' >&2
echo '  File "launcher.py", line 397, in _run_generations' >&2
echo 'py4j.protocol.Py4JJavaError: An error occurred while calling collectAndServe.' >&2
echo '' >&2
echo 'The above exception was the direct cause of the following exception:' >&2
echo '' >&2
echo 'Traceback (most recent call last):' >&2
echo '  File "job.py", line 7, in <module>' >&2
echo 'sparktrain.errors.WorkerFailed: worker:0 (task 1) exited with code 1; its stderr:' >&2
echo 'Traceback (most recent call last):' >&2
echo '  File "job.py", line 5, in main_fun' >&2
echo 'ValueError: bad learning rate' >&2
for i in $(seq 300); do echo "26/11/30 16:24:34 WARN Master: shutting down $i" >&2; done
exit 1
"""


def test_a_failed_job_ends_its_output_with_the_drivers_exception(tmp_path):
    fake = fake_spark_submit(tmp_path, FAILED_DRIVER)
    done = sparktrain("submit", "--spark-submit", str(fake), ENTRY)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "sparktrain submit: the job failed (exit status 1): sparktrain.errors.WorkerFailed: "
        "worker:0 (task 1) exited with code 1; its stderr:"
    )
    # A job that succeeds, or fails without a Python traceback, gets no such line.
    for script in ("echo 'Traceback (most recent call last):'; echo 'x: y'", "exit 3"):
        done = sparktrain("submit", "--spark-submit", str(fake_spark_submit(tmp_path, script)), ENTRY)
        assert "the job failed" not in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM])
def test_a_signal_to_submit_stops_spark_submit_and_its_children(tmp_path, sig):
    pids = tmp_path / "pids"
    fake = fake_spark_submit(
        tmp_path,
        f"""
        sleep 600 &
        echo "$$ $!" > {pids}.new
        mv {pids}.new {pids}
        wait
        """,
    )
    process = start("submit", "--spark-submit", str(fake), ENTRY)
    deadline = time.monotonic() + 30
    while not pids.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids.exists(), finish(process, timeout=30).stderr
    process.send_signal(sig)  # to sparktrain alone: spark-submit runs in a session of its own
    done = finish(process, timeout=60)
    assert done.returncode == 128 + sig, done.stderr
    assert f"sparktrain submit: {sig.name} received; stopped the application" in done.stderr
    assert "Traceback" not in done.stderr
    deadline = time.monotonic() + 10
    left = [int(pid) for pid in pids.read_text().split()]
    while any(running(pid) for pid in left) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in left if running(pid)]


YARN_APPLICATION = "application_1700000000000_0042"


@pytest.mark.parametrize("killed", [True, False])
def test_at_the_time_limit_submit_says_whether_it_killed_the_yarn_application(tmp_path, killed):
    fake = fake_spark_submit(
        tmp_path,
        f"""
        echo "INFO Client: Submitted application {YARN_APPLICATION}" >&2
        exec sleep 600
        """,
    )
    # Hadoop's `yarn` command, and a `java` for the fallback through Spark's jars, that
    # record their call and succeed or fail as the test wants.
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    for tool in ("yarn", "bin/java"):
        (tools / tool).write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit {0 if killed else 1}\n')
        (tools / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "JAVA_HOME": str(tools)}
    done = sparktrain(
        "submit", "--master", "yarn", "--spark-submit", str(fake), "--time-limit", "2", ENTRY, env=env
    )
    assert done.returncode == 124, done.stderr
    said = done.stderr.splitlines()[-1]
    if killed:
        assert said == (
            "sparktrain submit: the time limit of 2 s was reached; "
            f"killed application {YARN_APPLICATION} (yarn application -kill)"
        )
        assert calls.read_text().splitlines() == [f"application -kill {YARN_APPLICATION}"]
    else:
        assert said == (
            "sparktrain submit: the time limit of 2 s was reached; could not kill application "
            f"{YARN_APPLICATION} on the cluster: stop it with yarn application -kill {YARN_APPLICATION}"
        )
        # Both ways were tried: `yarn`, then YARN's client class on java.
        [yarn_call, java_call] = calls.read_text().splitlines()
        assert yarn_call == f"application -kill {YARN_APPLICATION}"
        assert java_call.endswith(f"ApplicationCLI application -kill {YARN_APPLICATION}")


def test_at_the_time_limit_a_kubernetes_driver_is_killed_with_the_submissions_settings(tmp_path):
    kill_args = tmp_path / "kill-args"
    fake = fake_spark_submit(
        tmp_path,
        f"""
        if [[ " $* " == *" --kill "* ]]; then
            echo "$@" > {kill_args}
            exit 0
        fi
        echo "LoggingPodStatusWatcherImpl: State changed, new state: pod name: train-7-driver" >&2
        exec sleep 600
        """,
    )
    master = "k8s://https://10.0.0.1:6443"
    done = sparktrain(
        "submit", "--master", master, "--image", "registry.example/sparktrain:1",
        "--conf", "spark.kubernetes.namespace=ml", "--conf", "spark.kubernetes.context=prod",
        "--spark-submit", str(fake), "--time-limit", "2", "local:///opt/app/train.py",
    )  # fmt: skip
    assert done.returncode == 124, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "sparktrain submit: the time limit of 2 s was reached; "
        "killed application train-7-driver (spark-submit --kill)"
    )
    # The same spark-submit (the fake one recorded its arguments), master and Kubernetes confs.
    args = kill_args.read_text().split()
    assert args[:2] == ["--master", master]
    assert args[-2:] == ["--kill", "ml:train-7-driver"]
    assert "spark.kubernetes.context=prod" in args
    assert "spark.kubernetes.container.image=registry.example/sparktrain:1" in args


def test_client_mode_links_the_shipped_environment_only_where_nothing_else_is(tmp_path):
    fake = fake_spark_submit(
        tmp_path / "tools",
        """
        readlink environment || echo "not a link"
        if [[ -x environment/bin/python ]]; then echo "has python"; fi
        exit 0
        """,
    )
    job = tmp_path / "job"
    job.mkdir()
    shipped = ["--master", "yarn", "--spark-submit", str(fake), "--python", "./environment/bin/python"]
    shipped += ["--archives", "hdfs:///envs/train.tar.gz#environment", ENTRY]
    link = job / "environment"

    done = sparktrain("submit", *shipped, cwd=job)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [sys.prefix, "has python"]  # while the job ran
    assert f"linked ./environment to {sys.prefix}" in done.stderr
    assert not os.path.lexists(link)  # removed afterwards

    # A link to this environment left by a submit that was killed: reused, then removed.
    link.symlink_to(sys.prefix)
    done = sparktrain("submit", *shipped, cwd=job)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [sys.prefix, "has python"]
    assert not os.path.lexists(link)

    # Anything else is the user's: left alone, with a warning that says what follows.
    link.mkdir()
    (link / "data.txt").write_text("mine")
    done = sparktrain("submit", *shipped, cwd=job)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["not a link"]
    assert "warning: ./environment exists and is not a link to" in done.stderr
    assert "which has no bin/python" in done.stderr
    assert (link / "data.txt").read_text() == "mine"

    # A working folder where no link can be made (not even by root): named, and nothing runs.
    done = sparktrain("submit", *shipped, cwd=Path("/proc"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"sparktrain submit: cannot link ./environment to {sys.prefix}")
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("listing", "visible", "addresses"),
    [
        ('printf "0\\n1\\n"', None, ["0", "1"]),
        ('printf "0\\n1\\n"', "1", ["1"]),
        ('echo "No devices were found"; exit 6', None, []),  # a driver, but no GPU
        ("true", None, []),
    ],
)
def test_the_gpu_discovery_script_prints_sparks_resource_json(tmp_path, listing, visible, addresses):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{listing}\n")
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = f"{tmp_path}:{env['PATH']}"
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    done = subprocess.run(["bash", str(GPU_SCRIPT)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"name": "gpu", "addresses": addresses}


def test_a_missing_entry_point_is_named():
    done = sparktrain("submit", "--dry-run", "no/such/job.py")
    assert done.returncode == 2
    assert "no/such/job.py" in done.stderr


def test_sizes_and_durations_parse_as_spark_and_users_write_them():
    assert [memory_mb(t) for t in ("512m", "2g", "2gb", "2048", "1t")] == [512, 2048, 2048, 2048, 1 << 20]
    assert [memory_mb(t) for t in ("3145728b", "512b")] == [3, 1]  # bytes, rounded up to MiB
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
        "submit", "--time-limit", "60s", "--memory", "512m", str(job), str(marker), cwd=tmp_path, env=env
    )
    done = finish(process, timeout=400)
    elapsed = time.monotonic() - started
    assert marker.exists(), done.stderr[-3000:]  # the job really ran before the limit
    assert done.returncode == 124, done.stderr[-3000:]
    assert "time limit of 60 s was reached; stopped the application" in done.stderr
    assert elapsed < 60 + 60
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


PER_WORKER_SCRIPT = """
import json, os, sys
with open(os.path.join(sys.argv[1], "rank-" + os.environ["RANK"]), "w") as f:
    json.dump({"argv": sys.argv[2:], "world": os.environ["WORLD_SIZE"]}, f)
"""


def test_a_per_worker_script_runs_under_sparktrains_driver(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PER_WORKER_SCRIPT)
    command, _ = dry_run("--workers", "3", "--per-worker", str(script), "--lr", "0.1")
    driver = next(i for i, arg in enumerate(command) if arg.endswith("script_driver.py"))
    assert command[driver + 1 :] == ["--workers", "3", "--", str(script), "--lr", "0.1"]
    # In cluster mode the driver's container gets the script with --files and runs it by name.
    command, _ = dry_run(
        "--master", "yarn", "--deploy-mode", "cluster", "--per-worker", str(script), "--lr", "0.1"
    )
    assert str(script) in command[command.index("--files") + 1].split(",")
    assert command[-3:] == ["train.py", "--lr", "0.1"]


@pytest.mark.spark
def test_a_per_worker_script_runs_in_every_trainer_of_a_local_cluster(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PER_WORKER_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    done = sparktrain(
        "submit", "--workers", "2", "--memory", "512m", "--per-worker", str(script), str(out), "--lr", "0.1",
        timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = {p.name: json.loads(p.read_text()) for p in out.iterdir()}
    assert runs == {f"rank-{r}": {"argv": ["--lr", "0.1"], "world": "2"} for r in range(2)}
