"""``sparktrain doctor`` (sparktrain.deploy.doctor) and its conf checks in ``Cluster.run``.

The conf checks need no Spark: they read a dict or a SparkConf. The rest runs on real Spark:
the shared local-cluster session, and, where a check needs a SparkContext of its own (one per
process), a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from pyspark import SparkConf

from harness.processes import run_in_group
from sparktrain import fs
from sparktrain._spark import available_slots
from sparktrain.cluster.driver import preflight
from sparktrain.deploy import doctor, probes
from sparktrain.deploy.doctor import (
    Finding,
    conf_findings,
    diagnose,
    kerberos_finding,
    report,
    storage_findings,
)
from sparktrain.errors import ClusterError, ConfigurationError, StorageError

TESTS = Path(__file__).resolve().parent
#: A folder no one can create anything in, whoever runs the tests (root included).
UNWRITABLE = "/proc/sparktrain-doctor/out"


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def conf(**settings: str) -> SparkConf:
    c = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        c.set(key.replace("_", "."), value)
    return c


# --- the conf checks ---------------------------------------------------------------------------


def test_the_settings_check_finds_what_cluster_run_would_refuse():
    assert preflight.check_settings({"spark.sparktrain.collective.seal": "false"}).level == "ok"
    for conf, words in [
        ({"spark.sparktrain.collective.seel": "false"}, "did you mean spark.sparktrain.collective.seal?"),
        ({"spark.sparktrain.collective.streams": "-1"}, "streams must be an integer from 1 to 16"),
        ({"spark.sparktrain.rendezvous.port": "abc"}, "spark.sparktrain.rendezvous.port='abc'"),
    ]:
        finding = preflight.check_settings(conf)
        assert (finding.check, finding.level) == ("settings", "error")
        assert words in finding.message, finding.message


def test_dynamic_allocation_is_an_error_on_a_cluster_and_a_warning_on_a_local_master():
    on = {preflight.DYNAMIC_ALLOCATION_CONF: "true"}
    [finding] = [f for f in conf_findings(on, master="yarn") if f.check == "dynamic-allocation"]
    assert finding.level == "error"
    assert "refuses barrier stages" in finding.message
    assert finding.fix is not None
    assert "spark.dynamicAllocation.enabled=false" in finding.fix
    assert by_check(conf_findings(on, master="local[2]"))["dynamic-allocation"].level == "warning"
    off = {preflight.DYNAMIC_ALLOCATION_CONF: "false", "spark.master": "yarn"}
    assert by_check(conf_findings(off))["dynamic-allocation"].level == "ok"
    # The master comes from the conf when it is not given.
    assert by_check(conf_findings({**on, "spark.master": "k8s://https://api:6443"}))[
        "dynamic-allocation"
    ].level == ("error")


def test_several_tasks_per_executor_is_a_warning_that_names_the_fix():
    finding = by_check(conf_findings({}, num_workers=2, master="local-cluster[2,4,1024]"))["task-cpus"]
    assert finding.level == "warning"
    assert "4 tasks fit on one executor" in finding.message
    assert finding.fix == "set spark.task.cpus=4 so that each executor runs one trainer"

    settings = {"spark.executor.cores": "4", "spark.task.cpus": "4"}
    assert (
        by_check(conf_findings(settings, num_workers=2, master="spark://m:7077"))["task-cpus"].level == "ok"
    )
    # One trainer shares its executor with no other.
    assert (
        by_check(conf_findings({}, num_workers=1, master="local-cluster[2,4,1024]"))["task-cpus"].level
        == "ok"
    )
    # YARN and Kubernetes executors have one core unless told otherwise.
    assert by_check(conf_findings({}, num_workers=3, master="yarn"))["task-cpus"].level == "ok"
    # Standalone executors take a Worker's cores: the conf alone cannot tell.
    unknown = by_check(conf_findings({}, num_workers=3, master="spark://m:7077"))["task-cpus"]
    assert unknown.level == "ok"
    assert "cannot tell" in unknown.message
    assert by_check(conf_findings({}, num_workers=3, master="local[4]"))["task-cpus"].level == "ok"


def test_more_task_cpus_than_executor_cores_is_an_error():
    settings = conf(spark_executor_cores="2", spark_task_cpus="3")
    finding = by_check(conf_findings(settings, num_workers=2, master="yarn"))["task-cpus"]
    assert finding.level == "error"
    assert "spark.task.cpus=3 and 2 cores per executor: no task fits" in finding.message


def test_no_gpus_asked_for_is_fine():
    assert by_check(conf_findings(conf(), num_workers=2, master="yarn"))["gpu"] == Finding(
        "gpu", "ok", "no GPUs requested"
    )
    assert by_check(conf_findings({}, gpus_per_worker=0, master="yarn"))["gpu"].level == "ok"


def test_gpus_the_executors_are_not_given_are_an_error():
    task = {preflight.TASK_GPU_CONF: "1"}
    missing = by_check(conf_findings(task, master="yarn"))["gpu"]
    assert missing.level == "error"
    assert "spark.executor.resource.gpu.amount is not set" in missing.message
    assert missing.fix is not None
    assert "spark.executor.resource.gpu.amount to at least 1" in missing.fix

    fewer = {
        preflight.TASK_GPU_CONF: "2",
        preflight.EXECUTOR_GPU_CONF: "1",
        preflight.EXECUTOR_GPU_SCRIPT_CONF: "/gpus.sh",
    }
    finding = by_check(conf_findings(fewer, master="yarn"))["gpu"]
    assert finding.level == "error"
    assert "asks for 2 GPU(s)" in finding.message
    assert "is 1" in finding.message

    # gpus_per_worker alone, with Spark giving tasks none.
    alone = by_check(conf_findings({}, gpus_per_worker=2, master="yarn"))["gpu"]
    assert alone.level == "error"
    assert alone.fix == "set spark.task.resource.gpu.amount=2"


def test_gpus_without_a_discovery_script_depend_on_the_cluster_manager():
    given = {preflight.TASK_GPU_CONF: "1", preflight.EXECUTOR_GPU_CONF: "2"}
    for master in ("yarn", "k8s://https://api:6443"):
        finding = by_check(conf_findings(given, gpus_per_worker=1, master=master))["gpu"]
        assert finding.level == "error", master
        assert preflight.EXECUTOR_GPU_SCRIPT_CONF in finding.message
    # A standalone Worker may hand out addresses it found itself.
    assert by_check(conf_findings(given, master="spark://m:7077"))["gpu"].level == "warning"
    # Local masters need no script.
    assert by_check(conf_findings(given, master="local-cluster[2,1,1024]"))["gpu"].level == "ok"
    assert by_check(conf_findings({preflight.TASK_GPU_CONF: "1"}, master="local[2]"))["gpu"].level == "ok"
    scripted = {**given, preflight.EXECUTOR_GPU_SCRIPT_CONF: "/opt/getGpusResources.sh"}
    assert by_check(conf_findings(scripted, master="yarn"))["gpu"].level == "ok"
    plugin = {**given, preflight.DISCOVERY_PLUGIN_CONF: "com.nvidia.spark.ExclusiveModeGpuDiscoveryPlugin"}
    assert by_check(conf_findings(plugin, master="yarn"))["gpu"].level == "ok"
    # Tasks sharing a GPU each get one address.
    shared = {
        preflight.TASK_GPU_CONF: "0.25",
        preflight.EXECUTOR_GPU_CONF: "1",
        preflight.EXECUTOR_GPU_SCRIPT_CONF: "/g.sh",
    }
    assert by_check(conf_findings(shared, gpus_per_worker=1, master="yarn"))["gpu"].level == "ok"


def test_the_spark_version_and_the_build_of_the_jar_must_match():
    def spark_version(version, jars=None):
        conf = SparkConf(loadDefaults=False)
        if jars:
            conf.set("spark.jars", jars)
        return probes.spark_version_finding(version, conf)

    assert spark_version("4.1.0", "/x/other.jar,/w/sparktrain-hadoop-0.1.0.jar").level == "ok"
    assert spark_version("3.5.9", "/w/sparktrain-hadoop-0.1.0-spark3.5.jar").level == "ok"
    # Without the jar, 3.5 has no format("tfrecord"): fine for training, and said.
    assert "needs sparktrain's jar" in spark_version("3.5.9").message
    wrong = spark_version("3.5.9", "file:/w/sparktrain-hadoop-0.1.0.jar")
    assert wrong.level == "error"
    assert wrong.message == (
        "spark.jars has sparktrain-hadoop-0.1.0.jar, sparktrain's jar for Spark 4, but this is Spark 3.5.9"
    )
    assert "jar_path()" in wrong.fix
    assert spark_version("4.0.0", "/w/sparktrain-hadoop-0.1.0-spark3.5.jar").level == "error"
    old = spark_version("3.4.1")
    assert (old.level, old.message) == ("error", "this is Spark 3.4.1; sparktrain supports Spark 3.5 and 4.x")


def test_a_missing_local_file_on_spark_jars_is_an_error_naming_it(tmp_path):
    def jars(value):
        conf = SparkConf(loadDefaults=False)
        if value is not None:
            conf.set("spark.jars", value)
        return probes.jars_finding(conf)

    present = tmp_path / "present.jar"
    present.write_bytes(b"PK")
    assert jars(None).level == "ok"
    # Files elsewhere (on HDFS, on every node under local:) are not looked at.
    assert jars(f"{present}, file:{present},hdfs://nn:8020/x.jar,local:/opt/y.jar").level == "ok"
    missing = jars(f"{present},file:{tmp_path}/gone.jar,/nowhere/sparktrain-hadoop-0.1.0.jar")
    assert missing.level == "error"
    assert missing.message.startswith(
        f"spark.jars names file:{tmp_path}/gone.jar, /nowhere/sparktrain-hadoop-0.1.0.jar, not a file here"
    )
    assert "ClassNotFoundException" in missing.message


def test_the_report_has_a_block_per_finding_and_counts_them():
    text = report(
        [
            Finding("dynamic-allocation", "error", "it is on", "turn it off"),
            Finding("task-cpus", "warning", "two per executor", "one per executor"),
            Finding("storage", "ok", "/tmp/x is writable"),
        ]
    )
    assert text == textwrap.dedent(
        """\
        ERROR    dynamic-allocation
          it is on
          fix: turn it off

        WARNING  task-cpus
          two per executor
          fix: one per executor

        OK       storage
          /tmp/x is writable

        1 error, 1 warning, 1 ok"""
    )


def test_a_configuration_error_keeps_its_findings_across_pickling():
    finding = Finding("dynamic-allocation", "error", "it is on", "turn it off")
    error = ConfigurationError("the conf cannot run job", findings=[finding], checks=["dynamic-allocation"])
    assert isinstance(error, ClusterError)
    copy = pickle.loads(pickle.dumps(error))
    assert copy.findings == [finding]
    assert copy.checks == ["dynamic-allocation"]


# --- storage and Kerberos ----------------------------------------------------------------------


def test_a_writable_folder_is_probed_and_left_as_it_was(tmp_path):
    existing = tmp_path / "existing"
    existing.mkdir()
    missing = tmp_path / "a" / "b"
    [first, second] = storage_findings([str(existing), f"file://{missing}"])
    assert first == Finding("storage", "ok", f"{existing} is writable and readable")
    assert second.level == "ok"
    assert "created for the probe and removed again" in second.message
    assert list(existing.iterdir()) == []
    assert list(tmp_path.iterdir()) == [existing]


def test_a_folder_that_cannot_be_written_is_an_error_naming_it(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    [unwritable, not_a_folder] = storage_findings([UNWRITABLE, str(a_file)])
    assert unwritable.level == "error"
    assert unwritable.message.startswith(f"cannot write a file under {UNWRITABLE}: ")
    assert not_a_folder == Finding("storage", "error", f"{a_file} is a file, not a folder", "give a folder")


def test_a_probe_that_fails_half_way_leaves_nothing_behind(tmp_path, monkeypatch):
    def unreadable(path: str) -> bytes:
        raise StorageError(f"cannot read {path}: injected failure", path=path)

    monkeypatch.setattr(fs, "read_bytes", unreadable)
    [finding] = storage_findings([str(tmp_path / "new" / "models")])
    assert finding.level == "error"
    assert "injected failure" in finding.message
    # The probe file was written, and the two folders made for it: all removed again.
    assert list(tmp_path.iterdir()) == []


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


def test_an_unreachable_namenode_or_master_is_named_in_seconds():
    port = _closed_port()
    started = time.monotonic()
    [finding] = storage_findings([f"hdfs://127.0.0.1:{port}/models"])
    assert finding.level == "error"
    assert finding.message.startswith(f"cannot reach the NameNode of hdfs://127.0.0.1:{port}/models at ")
    assert "start HDFS" in finding.fix
    master = probes.master_finding(f"spark://127.0.0.1:{port}")
    assert master is not None
    assert master.message.startswith(f"cannot reach the Spark master spark://127.0.0.1:{port} (")
    assert "Connection refused" in master.message
    # The HDFS client and Spark retried such addresses for one to three minutes.
    assert time.monotonic() - started < 30
    assert probes.master_finding("local[2]") is None
    assert probes.master_finding("yarn") is None


def test_the_command_names_an_unreachable_master_without_starting_spark():
    port = _closed_port()
    done = run_in_group(
        [sys.executable, "-m", "sparktrain", "doctor", "--master", f"spark://127.0.0.1:{port}"], timeout=60
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"cannot reach the Spark master spark://127.0.0.1:{port}" in done.stdout


def test_hdfs_folders_are_probed(hdfs_url):
    folder = f"{hdfs_url}/doctor-{uuid.uuid4().hex[:8]}"
    [finding] = storage_findings([f"{folder}/models/run-1"])
    assert finding.level == "ok", finding
    assert not fs.exists(folder)


def test_kerberos_wants_credentials_that_gssapi_accepts(tmp_path, monkeypatch):
    """Without a KDC: what counts as no credentials. tests/test_kerberos.py has the credentials
    that count, from a real KDC."""
    conf_dir = tmp_path / "hadoop"
    conf_dir.mkdir()
    (conf_dir / "core-site.xml").write_text(
        "<configuration><property><name>hadoop.security.authentication</name>"
        "<value>kerberos</value></property></configuration>"
    )
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf_dir))
    for variable in ("KRB5_CLIENT_KTNAME", "HADOOP_TOKEN_FILE_LOCATION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("KRB5_CONFIG", str(tmp_path / "no-krb5.conf"))  # not this machine's realm
    cache = tmp_path / "krb5cc_test"
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{cache}")

    def assert_no_credentials() -> None:
        finding = kerberos_finding()
        assert finding is not None
        assert finding.level == "error"
        assert finding.fix is not None
        if probes.kerberos.gssapi_available():
            # GSSAPI's own words name the cache it looked at.
            assert str(cache) in finding.message
            assert "kinit" in finding.fix
            assert "--keytab" in finding.fix
        else:
            assert "libgssapi-krb5-2" in finding.fix

    assert_no_credentials()
    # A file where the cache should be is not a ticket: GSSAPI cannot use it, nor could HDFS.
    cache.write_bytes(b"ticket")
    assert_no_credentials()
    # Delegation tokens, as YARN gives a container, are credentials of their own.
    tokens = tmp_path / "container_tokens"
    tokens.write_bytes(probes.kerberos.TOKEN_STORAGE_MAGIC + b"\x00\x00")
    monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", str(tokens))
    finding = kerberos_finding()
    assert finding is not None
    assert finding.level == "ok"
    assert f"delegation tokens in {tokens}" in finding.message
    # Something else under that name is not.
    tokens.write_bytes(b"not a token file")
    assert_no_credentials()
    assert kerberos_finding("simple") is None


# --- a live session ----------------------------------------------------------------------------


def wait_for_slots(spark, count: int) -> None:
    """Waits for the shared session's executors, which may still be starting."""
    deadline = time.monotonic() + 60
    while available_slots(spark.sparkContext) < count:
        assert time.monotonic() < deadline, f"fewer than {count} task slots after 60 s"
        time.sleep(0.25)


def test_diagnose_on_the_local_cluster(spark, tmp_path):
    wait_for_slots(spark, 4)
    out = tmp_path / "out"
    findings = diagnose(spark, num_workers=2, paths=[str(out), UNWRITABLE])
    checks = [f.check for f in findings]
    assert checks == [
        "spark-version",
        "jars",
        "dynamic-allocation",
        "settings",
        "task-cpus",
        "gpu",
        "slots",
        "executor-versions",
        "storage",
        "storage",
    ]
    found = by_check(findings[:8])
    assert found["spark-version"].level == "ok", found["spark-version"]
    assert found["jars"].level == "ok", found["jars"]
    assert found["dynamic-allocation"].level == "ok"
    assert found["settings"].level == "ok"
    # local-cluster[2,2,1024] with one CPU per task: two trainers may share an executor.
    assert found["task-cpus"].level == "warning"
    assert found["task-cpus"].fix == "set spark.task.cpus=2 so that each executor runs one trainer"
    assert found["slots"] == Finding(
        "slots", "ok", "2 trainer(s) fit: 4 task slot(s) on 2 executor(s) (spark.task.cpus=1)"
    )
    versions = found["executor-versions"]
    assert versions.level == "ok", versions
    assert f"Python {'.'.join(map(str, sys.version_info[:3]))}" in versions.message
    import sparktrain

    assert f"sparktrain {sparktrain.__version__}" in versions.message
    assert "4 task(s)" in versions.message
    assert findings[8].level == "ok"
    assert not out.exists()
    assert findings[9].level == "error"
    assert UNWRITABLE in findings[9].message


def test_diagnose_counts_the_slots_a_job_lacks(spark):
    wait_for_slots(spark, 4)
    slots = by_check(diagnose(spark, num_workers=5, slot_wait=0))["slots"]
    assert slots.level == "error"
    assert slots.message.startswith(
        "5 trainer(s) need 5 task slot(s) at once, but the cluster has 4 task slot(s) on 2 executor(s)"
    )


def _run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a process group of its own, which a test that runs too long stops
    whole: the interpreter, its Spark JVM and a local cluster's workers and executors."""
    return run_in_group(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=TESTS,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})},
        timeout=timeout,
    )


@pytest.mark.spark
def test_cluster_run_refuses_dynamic_allocation_before_any_spark_job():
    # A SparkContext of its own, with dynamic allocation on: one process holds one context.
    result = _run_python(
        """
        import json, time
        from harness.spark import local_cluster_session
        from sparktrain import Cluster
        from sparktrain.errors import ConfigurationError

        spark = local_cluster_session("doctor-dynamic", conf={"spark.dynamicAllocation.enabled": "true"})
        started = time.monotonic()
        try:
            Cluster.run(spark, lambda args, ctx: None, num_workers=2, name="dynamic")
        except ConfigurationError as e:
            tracker = spark.sparkContext.statusTracker()
            print(json.dumps({
                "checks": e.checks,
                "message": str(e),
                "seconds": time.monotonic() - started,
                "jobs": list(tracker.getJobIdsForGroup("dynamic-g0")) + list(tracker.getJobIdsForGroup(None)),
            }))
        spark.stop()
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["checks"] == ["dynamic-allocation"]
    assert outcome["message"].startswith("the Spark conf cannot run dynamic:\n- [dynamic-allocation] ")
    assert "spark.dynamicAllocation.enabled=false" in outcome["message"]
    # Neither a Spark job nor the 20 s wait for task slots came first.
    assert outcome["jobs"] == []
    assert outcome["seconds"] < 10


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _run_python(
        f"import sys; from sparktrain.cli import main; sys.exit(main({['doctor', *args]!r}))", env=env
    )


LOOPBACK = ["--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1"]


@pytest.mark.spark
def test_the_command_exits_with_0_when_all_is_well(tmp_path):
    result = _doctor(
        "--master", "local-cluster[1,1,1024]", *LOOPBACK, "--conf", "spark.ui.enabled=false",
        "--workers", "1", "--wait", "180", "--path", f"file://{tmp_path}/out",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "OK       executor-versions" in result.stdout
    # The report wraps long lines: compare with its whitespace folded.
    assert f"file://{tmp_path}/out is writable and readable" in " ".join(result.stdout.split())
    assert result.stdout.rstrip().endswith("0 errors, 0 warnings, 9 ok")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.spark
def test_the_command_exits_with_1_on_errors_and_names_them(tmp_path):
    # Executors whose Python finds a sparktrain that cannot be imported, as where none is installed.
    shadow = tmp_path / "shadow" / "sparktrain"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named sparktrain here')\n")
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\nPYTHONPATH={shadow.parent}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    result = _doctor(
        "--master", "local[1]", *LOOPBACK, "--conf", "spark.ui.enabled=false", "--wait", "180",
        "--path", UNWRITABLE, "--conf", "spark.sparktrain.collective.seel=false",
        "--conf", "spark.jars=/nowhere/extra.jar",
        env={"PYSPARK_PYTHON": str(python)},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    assert "ERROR    executor-versions" in result.stdout
    assert "sparktrain cannot be imported on the executors of" in result.stdout
    assert "sparktrain pack" in result.stdout
    assert f"cannot write a file under {UNWRITABLE}" in result.stdout
    # A misspelt setting, which Cluster.run would refuse too.
    assert "did you mean spark.sparktrain.collective.seal?" in " ".join(result.stdout.split())
    # Spark started without the jar it could not find.
    assert "spark.jars names /nowhere/extra.jar, not a file here" in " ".join(result.stdout.split())
    assert result.stdout.rstrip().endswith("4 errors, 0 warnings, 5 ok")


def _executor_python(tmp_path: Path, interpreter: str, version: str) -> Path:
    """A PYSPARK_PYTHON that runs ``interpreter`` with a sparktrain package of its own that
    says it is ``version``: all the doctor's probe asks of the package."""
    shadow = tmp_path / "shadow" / "sparktrain"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(f"__version__ = {version!r}\n")
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\nPYTHONPATH={shadow.parent}${{PYTHONPATH:+:$PYTHONPATH}} exec {interpreter} "$@"\n'
    )
    python.chmod(0o755)
    return python


def _doctor_with_executor_python(python: Path) -> subprocess.CompletedProcess[str]:
    return _doctor(
        "--master", "local[1]", *LOOPBACK, "--conf", "spark.ui.enabled=false", "--wait", "180",
        env={"PYSPARK_PYTHON": str(python)},
    )  # fmt: skip


@pytest.mark.spark
def test_executors_with_another_sparktrain_version_are_an_error_naming_both(tmp_path):
    import sparktrain

    python = _executor_python(tmp_path, sys.executable, "0.0.1.dev0")
    result = _doctor_with_executor_python(python)
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    report = " ".join(result.stdout.split())
    assert "ERROR executor-versions" in report
    assert f"sparktrain 0.0.1.dev0 ({sys.executable})" in report  # the wrapper execs it
    assert f"the driver runs Python {'.'.join(map(str, sys.version_info[:3]))}" in report
    assert f"sparktrain {sparktrain.__version__}" in report
    assert "sparktrain pack" in report


def _python_of_another_minor_release() -> str | None:
    """An interpreter on this machine (PATH or pyenv) of a newer minor release than this one's,
    which can start PySpark's worker."""
    import glob
    import shutil

    minor = sys.version_info[1]
    candidates = [shutil.which(f"python3.{m}") for m in range(minor + 1, minor + 4)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    for candidate in candidates:
        if not candidate:
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[1])"], capture_output=True
        )
        if probe.returncode == 0 and int(probe.stdout) > minor:
            return candidate
    return None


@pytest.mark.spark
def test_executors_on_another_python_are_an_error_naming_it(tmp_path):
    other = _python_of_another_minor_release()
    if other is None:
        pytest.skip("no Python of a newer minor release than the driver's on this machine")
    import sparktrain

    result = _doctor_with_executor_python(_executor_python(tmp_path, other, sparktrain.__version__))
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    report = " ".join(result.stdout.split())
    assert "ERROR executor-versions" in report
    driver = ".".join(map(str, sys.version_info[:2]))
    assert f"the executors run another Python than the driver's {driver}" in report
    assert "sparktrain pack" in report


def test_bad_options_exit_with_2_before_spark_starts(capsys):
    assert doctor.main(["--workers", "0"]) == 2
    assert "0 is less than 1" in capsys.readouterr().err
    assert doctor.main(["--conf", "spark.master"]) == 2
    assert "--conf 'spark.master': expected KEY=VALUE" in capsys.readouterr().err
    assert doctor.main(["--wait", "-1"]) == 2
    assert "'-1': must be 0 seconds or more, and finite" in capsys.readouterr().err


def test_without_pyspark_the_command_says_what_to_install():
    # An interpreter where `import pyspark` fails, as where it is not installed.
    result = _run_python(
        "import sys; sys.modules['pyspark'] = None\n"
        "from sparktrain.cli import main; sys.exit(main(['doctor', '--workers', '2']))"
    )
    assert result.returncode == 2, result.stderr
    assert "sparktrain doctor needs pyspark: pip install 'sparktrain[spark]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_cluster_run_warns_of_each_conf_check_once_per_application(caplog):
    from types import SimpleNamespace

    from sparktrain.cluster.driver.options import JobOptions
    from sparktrain.cluster.driver.preflight import check_conf

    # Four cores per executor and one per task: trainers may share an executor (a warning).
    sc = SimpleNamespace(applicationId=f"app-{uuid.uuid4().hex}", master="local-cluster[2,4,1024]")
    for workers in (2, 3):
        options = JobOptions(main_fun=lambda args, ctx: None, name=f"job{workers}", num_workers=workers)
        check_conf(sc, {}, options)
    assert [r.getMessage().split(":", 1)[0] for r in caplog.records] == ["job2 [task-cpus]"]
    # Another application is warned again.
    check_conf(SimpleNamespace(applicationId="app-other", master=sc.master), {}, options)
    assert len(caplog.records) == 2
