"""The launcher's pure helpers, without Spark or HDFS: Spark's barrier-task failure messages,
exit codes and ``WorkerFailed``, the Spark confs, the checks of every public entry point's
arguments (each refusal names the parameter), and the error for a missing optional dependency.

Nothing here starts a JVM: every refusal tested happens before Spark is touched.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import sys
from pathlib import Path

import pytest

from sparktrain.cluster import failures
from sparktrain.cluster.driver.conf import (
    PORT_CONF,
    TASK_GPU_CONF,
    TLS_CONF,
    integer,
    port_range,
    read_conf,
    task_gpus,
    tls_files,
)
from sparktrain.cluster.driver.launcher import Cluster
from sparktrain.cluster.driver.options import JobOptions
from sparktrain.cluster.driver.restarts import Restart, backoff, describe, incurable, signature
from sparktrain.cluster.failures import (
    FAILED,
    NOT_RETRYABLE,
    ORPHANED,
    PEER_LOST,
    FailedTask,
    describe_exit,
    parse_task_failure,
    spark_error_summary,
    worker_failed,
)
from sparktrain.cluster.settings import role_names
from sparktrain.errors import (
    ClusterError,
    InvalidArgumentError,
    MissingDependencyError,
    RendezvousTimeout,
    SparktrainError,
    WorkerFailed,
)


def main_fun(args, ctx):
    return None


# --- Spark's message about a failed barrier stage -------------------------------------------
# As Spark 4.3 prints them (str() of the Py4JJavaError), Java stack traces shortened.

PYTHON_RAISED = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a \
failed barrier ResultStage. Most recent failure reason: Stage failed because barrier task \
ResultTask(0, 1) finished unsuccessfully.
org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from \
the Python worker: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", \
line 4327, in invoke_udf
    run_process()
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/serializers.py", \
line 260, in dump_stream
    vs = list(itertools.islice(iterator, batch))
         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/job.py", line 12, in raising
    raise ValueError("boom in task 1")
ValueError: boom in task 1
 SQLSTATE: 38000
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)
\tat org.apache.spark.api.python.PythonRunner$$anon$5.read(PythonRunner.scala:1642)
"""

PYTHON_WORKER_CRASHED = """An error occurred while calling z:org.apache.spark.api.python.PythonRDD.\
collectAndServe.
: org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a \
failed barrier ResultStage. Most recent failure reason: Stage failed because barrier task \
ResultTask(1, 1) finished unsuccessfully.
org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting \
'spark.sql.execution.pyspark.udf.faulthandler.enabled' or'spark.python.worker.faulthandler.enabled' \
configuration to 'true' for the better Python traceback.
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator$$anonfun$1.applyOrElse(...)
Caused by: java.io.EOFException
\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)
"""

ARROW_TASK_RAISED = """An error occurred while calling o74.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a \
failed barrier ResultStage. Most recent failure reason: Stage failed because barrier task \
ResultTask(4, 2) finished unsuccessfully.
org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from \
the Python worker: Traceback (most recent call last):
  File "/tmp/job.py", line 31, in arrow_raise
    raise ValueError("boom in arrow task 1")
ValueError: boom in arrow task 1
 SQLSTATE: 38000
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)
"""

# Built after Spark's ExecutorLostFailure.toErrorString, for an executor that died.
EXECUTOR_LOST = """: org.apache.spark.SparkException: Job aborted due to stage failure: Could not \
recover from a failed barrier ResultStage. Most recent failure reason: Stage failed because \
barrier task ResultTask(7, 0) finished unsuccessfully.
ExecutorLostFailure (executor 1 exited caused by one of the running tasks) Reason: Command exited \
with code 137
"""


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (PYTHON_RAISED, FailedTask(1, "ValueError: boom in task 1")),
        (ARROW_TASK_RAISED, FailedTask(2, "ValueError: boom in arrow task 1")),
        (EXECUTOR_LOST, FailedTask(0, EXECUTOR_LOST.splitlines()[-1])),
    ],
)
def test_the_failed_barrier_task_and_its_cause_are_read_from_sparks_message(message, expected):
    assert parse_task_failure(message) == expected


def test_a_crashed_python_worker_is_the_cause_without_javas_class_name():
    failed = parse_task_failure(PYTHON_WORKER_CRASHED)
    assert failed is not None
    assert failed.task_index == 1
    assert failed.cause.startswith("Python worker exited unexpectedly (crashed).")


def test_the_last_of_chained_python_exceptions_is_the_cause():
    message = (
        "Stage failed because barrier task ShuffleMapTask(3, 0) finished unsuccessfully.\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "a.py", line 1, in f\n'
        "KeyError: 'x'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in f\n'
        "sparktrain.errors.WorkerFailed: chief:0 (task 0 on h) has GPUs [] but the job asks for 1\n"
        "more lines of the message\n"
    )
    cause = "sparktrain.errors.WorkerFailed: chief:0 (task 0 on h) has GPUs [] but the job asks for 1"
    assert parse_task_failure(message) == FailedTask(0, cause)


def test_a_message_without_a_failed_barrier_task_names_none():
    assert parse_task_failure("Job 3 cancelled part of cancelled job group sparktrain-1") is None
    assert parse_task_failure("") is None


def test_a_long_cause_is_cut():
    message = "barrier task ResultTask(0, 0) finished unsuccessfully.\nOSError: " + "x" * 5000
    failed = parse_task_failure(message)
    assert failed is not None
    assert len(failed.cause) == failures.MAX_CAUSE_CHARS


def test_the_launcher_turns_a_failed_barrier_task_into_worker_failed():
    # A handle as far as the fallback needs it; no job is started.
    cluster = Cluster.__new__(Cluster)
    cluster.name = "job-1"
    cluster._num_tasks = 2
    cluster._roles = role_names(2, 0)
    cluster._hosts = {1: "10.0.0.2"}
    failure = cluster._spark_task_failure(RuntimeError(PYTHON_RAISED))
    assert isinstance(failure, WorkerFailed)
    assert str(failure) == "worker:0 (task 1 on 10.0.0.2) lost its Spark task: ValueError: boom in task 1"
    assert (failure.task_index, failure.exit_code, failure.signal) == (1, None, None)

    other = cluster._spark_task_failure(RuntimeError("Job aborted: something else\nmore"))
    assert type(other) is ClusterError
    assert str(other) == "the Spark job of job-1 failed: Job aborted: something else"
    # A task index beyond the job's (another stage's task) is not blamed on a trainer.
    beyond = cluster._spark_task_failure(RuntimeError(ARROW_TASK_RAISED))
    assert type(beyond) is ClusterError
    assert str(beyond).startswith(
        "the Spark job of job-1 failed: Job aborted due to stage failure: Could not recover"
    )
    assert str(cluster._spark_task_failure(KeyboardInterrupt())) == (
        "the Spark job of job-1 failed: KeyboardInterrupt()"
    )


def test_a_spark_errors_summary_is_its_java_message():
    assert spark_error_summary(PYTHON_WORKER_CRASHED).startswith("Job aborted due to stage failure: ")
    assert spark_error_summary("Job 1 cancelled\nat x") == "Job 1 cancelled"
    assert spark_error_summary("") == ""


#: PySpark's message when a task that feeds the trainers (mapInArrow) raised.
FEED_TASK_RAISED = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "sparktrain/ml/columns.py", line 136, in dense_matrix
    raise _checks.refuse(
sparktrain.errors.InvalidArgumentError: featuresCol='features': row 1 of a batch does not hold 1 values"""


def test_a_python_workers_exception_is_the_summary_and_bad_input_is_not_retried():
    raised = FEED_TASK_RAISED.splitlines()[-1]
    assert raised.startswith("sparktrain.errors.InvalidArgumentError: featuresCol='features'")
    assert spark_error_summary(FEED_TASK_RAISED) == f"a Python worker raised {raised}"
    cluster = Cluster.__new__(Cluster)
    cluster.name, cluster._num_tasks = "job-1", 2
    failure = cluster._spark_task_failure(RuntimeError(FEED_TASK_RAISED))
    assert str(failure) == f"the Spark job of job-1 failed: a Python worker raised {raised}"
    assert incurable(failure, None, signature(failure, None)) == "a restart cannot fix bad input or arguments"
    # Any other exception of a feeding task is retried once, as before.
    other = cluster._spark_task_failure(RuntimeError(FEED_TASK_RAISED.replace(raised, "MemoryError: out")))
    assert str(other) == "the Spark job of job-1 failed: a Python worker raised MemoryError: out"
    assert incurable(other, None, signature(other, None)) is None


# --- exit codes and WorkerFailed ------------------------------------------------------------


def test_the_trainers_exit_codes_are_distinct_and_used_by_the_trainer():
    from sparktrain.cluster.trainer import main as trainer

    assert len({0, FAILED, PEER_LOST, ORPHANED}) == 4
    assert (trainer.FAILED, trainer.PEER_LOST, trainer.ORPHANED) == (FAILED, PEER_LOST, ORPHANED)


@pytest.mark.parametrize(
    ("code", "described"),
    [
        (1, "exited with code 1"),
        (2, "exited with code 2"),
        (PEER_LOST, "exited with code 3 (a collective with a peer failed or timed out)"),
        (ORPHANED, "exited with code 70 (its Spark task went away)"),
        (-signal.SIGKILL, "was killed by SIGKILL"),
        (-signal.SIGTERM, "was killed by SIGTERM"),
        (-200, "was killed by signal 200"),
    ],
)
def test_describe_exit(code, described):
    assert describe_exit(code) == described


def test_worker_failed_tells_an_exit_code_from_a_signal():
    exited = worker_failed(1, "worker:0", "h1", returncode=1, stderr_tail="Traceback\nValueError: x")
    assert (exited.task_index, exited.role, exited.host) == (1, "worker:0", "h1")
    assert (exited.exit_code, exited.signal) == (1, None)
    assert exited.stderr_tail == "Traceback\nValueError: x"
    assert str(exited) == (
        "worker:0 (task 1 on h1) exited with code 1; the last lines of its stderr:\nTraceback\nValueError: x"
    )

    killed = worker_failed(2, "evaluator:0", "h2", returncode=-9)
    assert (killed.exit_code, killed.signal, killed.stderr_tail) == (None, 9, "")
    assert str(killed) == "evaluator:0 (task 2 on h2) was killed by SIGKILL"

    lost = worker_failed(0, "chief:0", "h0", what="stopped heart-beating (10.2 s without a word)")
    assert (lost.exit_code, lost.signal) == (None, None)
    assert str(lost) == "chief:0 (task 0 on h0) stopped heart-beating (10.2 s without a word)"


def test_worker_failed_keeps_its_attributes_through_pickle():
    # Spark pickles a task's exception on its way to the driver.
    e = pickle.loads(pickle.dumps(worker_failed(1, "worker:0", "h", returncode=-15, stderr_tail="t")))
    assert isinstance(e, WorkerFailed)
    assert (e.task_index, e.role, e.host, e.exit_code, e.signal, e.stderr_tail) == (
        1,
        "worker:0",
        "h",
        None,
        15,
        "t",
    )


@pytest.mark.parametrize(
    ("workers", "evaluators", "names"),
    [
        (1, 0, ["chief:0"]),
        (3, 0, ["chief:0", "worker:0", "worker:1"]),
        (2, 2, ["chief:0", "worker:0", "evaluator:0", "evaluator:1"]),
    ],
)
def test_role_names_by_task_index(workers, evaluators, names):
    assert role_names(workers, evaluators) == names


def test_role_names_number_each_evaluator_role_on_its_own():
    names = role_names(2, 3, ("ps", "ps", "evaluator"))
    assert names == ["chief:0", "worker:0", "ps:0", "ps:1", "evaluator:0"]


# --- Spark confs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ports"),
    [("0", (0, 0)), ("40000", (40000, 40000)), ("40000-40100", (40000, 40100)), ("0-65535", (0, 65535))],
)
def test_port_range(value, ports):
    assert port_range(value) == ports


@pytest.mark.parametrize("value", ["", "abc", "1-2-3", "40100-40000", "70000", "-1"])
def test_a_bad_port_range_names_the_conf(value):
    with pytest.raises(InvalidArgumentError, match=PORT_CONF):
        port_range(value)


def test_integer_confs():
    conf = {"a": "4", "zero": "0", "negative": "-2", "word": "four", "big": "17"}
    assert integer(conf, "a", 1, (1, 16)) == 4
    assert integer(conf, "unset", 7, (1, 16)) == 7
    for key in ("zero", "negative", "word", "big"):
        with pytest.raises(InvalidArgumentError, match=f"^{key} must be an integer from 1 to 16, not '"):
            integer(conf, key, 1, (1, 16))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.sparktrain.collective.streams", "17"),
        ("spark.sparktrain.collective.chunkBytes", "10"),
        ("spark.sparktrain.collective.chunkBytes", str(2**32)),
    ],
)
def test_the_rings_limits_are_refused_on_the_driver_naming_the_conf(key, value):
    # The data plane refuses them too, but only in the trainers, once the job runs.
    with pytest.raises(InvalidArgumentError, match=f"^{key} must be an integer from .* not '{value}'"):
        read_conf({key: value}, None)


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("spark.sparktrain.collective.seel", "spark.sparktrain.collective.seal"),
        ("spark.sparktrain.colective.streams", "spark.sparktrain.collective.streams"),
        ("spark.sparktrain.tls.certificate", "spark.sparktrain.tls.cert"),
    ],
)
def test_a_misspelt_setting_is_refused_naming_the_one_meant(key, meant):
    with pytest.raises(
        InvalidArgumentError, match=rf"^{key} is not a sparktrain setting \(did you mean {meant}\?\)"
    ):
        read_conf({key: "false"}, None)


def test_every_key_the_package_reads_is_a_known_setting():
    from sparktrain.cluster.driver.conf import KNOWN_KEYS
    from sparktrain.tfrecord._engine import ENGINE_CONF

    assert ENGINE_CONF in KNOWN_KEYS
    # The launcher passes over a setting another part of the package reads.
    assert read_conf({ENGINE_CONF: "python"}, None).collective_streams == 1


@pytest.fixture
def pem_files(tmp_path):
    from sparktrain._native import job_certificate

    cert, key, _ = job_certificate()
    ca, _, _ = job_certificate()
    paths = {}
    for name, text in (("cert", cert), ("key", key), ("ca", ca)):
        path = tmp_path / f"{name}.pem"
        path.write_text(text)
        paths[name] = str(path)
    return paths


def test_tls_files_are_read_and_the_ca_defaults_to_the_certificate(pem_files):
    cert, key, ca = (Path(pem_files[n]).read_text() for n in ("cert", "key", "ca"))
    assert tls_files({}, None) == (None, None, None)
    assert tls_files({}, (pem_files["cert"], pem_files["key"])) == (cert, key, cert)
    assert tls_files({}, (pem_files["cert"], pem_files["key"], pem_files["ca"])) == (cert, key, ca)
    conf = dict(zip(TLS_CONF, (pem_files["cert"], pem_files["key"], pem_files["ca"]), strict=True))
    assert tls_files(conf, None) == (cert, key, ca)
    # The argument wins over the confs.
    assert tls_files(conf, (pem_files["ca"], pem_files["key"])) == (ca, key, ca)


def test_tls_files_refuse_a_missing_key_or_an_unreadable_file(pem_files, tmp_path):
    with pytest.raises(InvalidArgumentError, match="TLS needs a certificate and a key") as info:
        tls_files({TLS_CONF[0]: pem_files["cert"]}, None)
    assert "set spark.sparktrain.tls.key too" in str(info.value)
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(
        InvalidArgumentError, match=r"cannot read the control plane's TLS file .*missing\.pem"
    ):
        tls_files({}, (pem_files["cert"], missing))


def test_tls_files_that_hold_no_pem_of_their_kind_are_refused_naming_them(pem_files, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("this is not a certificate\n")
    with pytest.raises(
        InvalidArgumentError, match=r"TLS certificate .*garbage\.pem holds no PEM CERTIFICATE"
    ):
        tls_files({}, (str(garbage), pem_files["key"]))
    # A key given as the certificate, and the other way round.
    with pytest.raises(InvalidArgumentError, match=r"TLS certificate .*key\.pem .*blocks are PRIVATE KEY"):
        tls_files({}, (pem_files["key"], pem_files["key"]))
    with pytest.raises(InvalidArgumentError, match=r"TLS key .*cert\.pem holds no PEM PRIVATE KEY"):
        tls_files(dict(zip(TLS_CONF, (pem_files["cert"], pem_files["cert"]), strict=False)), None)
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n")
    with pytest.raises(
        InvalidArgumentError, match=r"TLS CA .*broken\.pem: its CERTIFICATE block is not base64"
    ):
        tls_files({}, (pem_files["cert"], pem_files["key"], str(broken)))
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_text("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")
    with pytest.raises(InvalidArgumentError, match=r"TLS key .*encrypted\.pem is encrypted"):
        tls_files({}, (pem_files["cert"], str(encrypted)))


@pytest.mark.parametrize(
    ("amount", "gpus"), [(None, 0), ("0", 0), ("0.25", 1), ("1", 1), ("2", 2), ("2.0", 2)]
)
def test_task_gpus(amount, gpus):
    assert task_gpus({} if amount is None else {TASK_GPU_CONF: amount}) == gpus


def test_gpus_per_worker_beyond_the_tasks_gpus_is_refused_before_the_job():
    assert read_conf({TASK_GPU_CONF: "0.5"}, None, gpus_per_worker=1).ports == (0, 0)
    assert read_conf({}, None, gpus_per_worker=0).ports == (0, 0)
    expected = r"^gpus_per_worker=2: Spark gives each task 1 GPU; set spark.task.resource.gpu.amount to 2$"
    with pytest.raises(InvalidArgumentError, match=expected):
        read_conf({TASK_GPU_CONF: "1"}, None, gpus_per_worker=2)
    with pytest.raises(InvalidArgumentError, match=r"^gpus_per_worker=1: Spark gives each task 0 GPUs"):
        read_conf({}, None, gpus_per_worker=1)


def test_read_conf_takes_every_conf(pem_files):
    conf = {
        "spark.driver.host": "10.0.0.1",
        PORT_CONF: "41000-41010",
        "spark.sparktrain.collective.streams": "2",
        "spark.sparktrain.collective.chunkBytes": "65536",
        "spark.sparktrain.collective.seal": "False",
        "spark.sparktrain.collective.local": "false",
    }
    read = read_conf(conf, (pem_files["cert"], pem_files["key"]))
    assert (read.host, read.ports, read.collective_streams, read.collective_chunk_bytes) == (
        "10.0.0.1",
        (41000, 41010),
        2,
        65536,
    )
    assert read.collective_sealed is False
    assert read.collective_local is False
    assert read.tls[0] == read.tls[2] == Path(pem_files["cert"]).read_text()
    defaults = read_conf({}, None)
    assert (defaults.host, defaults.ports, defaults.tls) == (None, (0, 0), (None, None, None))
    assert (defaults.collective_streams, defaults.collective_chunk_bytes) == (1, 1 << 20)
    assert defaults.collective_sealed is True
    assert defaults.collective_local is True
    assert defaults.auto_tls is True
    assert read_conf({"spark.sparktrain.tls.auto": "False"}, None).auto_tls is False
    with pytest.raises(
        InvalidArgumentError, match=r"^spark.sparktrain.collective.seal must be true or false, not 'no'$"
    ):
        read_conf({"spark.sparktrain.collective.seal": "no"}, None)


# --- Cluster.run's arguments ----------------------------------------------------------------


def test_job_options_keep_good_arguments_and_normalize_them(pem_files):
    import numpy as np

    options = JobOptions(
        main_fun=main_fun,
        name="job",
        num_workers=np.int64(3),
        num_evaluators=1,
        reservation_timeout=30,
        env={"A": "1"},
        gpus_per_worker=0,
        heartbeat_interval=1,
        heartbeat_timeout=5,
        tls=[pem_files["cert"], pem_files["key"], None],
        work="hdfs://nn/data/*.tfrecord",
        data="ignored when trainers read files",
    )
    assert (options.num_workers, options.num_tasks) == (3, 4)
    assert type(options.num_workers) is int
    assert (options.reservation_timeout, options.heartbeat_interval) == (30.0, 1.0)
    assert type(options.reservation_timeout) is float
    assert options.tls == (pem_files["cert"], pem_files["key"])
    assert options.data is None
    assert options.env == {"A": "1"}


@pytest.mark.parametrize(
    ("parameter", "value", "requirement"),
    [
        ("main_fun", 3, "must be callable"),
        ("main_fun", "missing_train.py", "cannot read the script"),
        ("main_fun", "train.sh", "a script entry point must be a .py file"),
        ("name", "", "must not be empty"),
        ("name", 7, "must be a str"),
        ("num_workers", 0, "must be >= 1"),
        ("num_workers", 2.0, "must be an integer >= 1"),
        ("num_workers", "2", "must be an integer >= 1"),
        ("num_evaluators", -1, "must be >= 0"),
        ("input_mode", "tensorflow", "use one of 'files', 'spark'"),
        ("reservation_timeout", 0, "must be > 0"),
        ("reservation_timeout", float("inf"), "must be finite"),
        ("reservation_timeout", "120", "must be a number of seconds > 0"),
        ("heartbeat_interval", -0.5, "must be > 0"),
        ("heartbeat_timeout", -1, "must be > 0"),
        ("heartbeat_timeout", float("nan"), "must be > 0"),
        ("heartbeat_interval", 10.0, "must be < heartbeat_timeout=10.0"),
        ("collective_timeout", 0.0, "must be > 0"),
        ("max_result_bytes", 0, "must be >= 1"),
        ("gpus_per_worker", -1, "must be >= 0"),
        ("gpus_per_worker", 0.5, "must be an integer >= 0"),
        ("env", ["A=1"], "must be a mapping of str to str"),
        ("env", {"OMP_NUM_THREADS": 4}, "must map str to str, but 'OMP_NUM_THREADS' maps to 4"),
        ("env", {1: "x"}, "must map str to str, but 1 maps to 'x'"),
        ("tls", "cert.pem", "must be (cert, key) or (cert, key, ca)"),
        ("tls", ("cert.pem",), "must be (cert, key) or (cert, key, ca)"),
        ("tls", ("cert.pem", None), "its key must be the path of a PEM file"),
        ("tls", ("cert.pem", "key.pem", 3), "its ca must be the path of a PEM file"),
        ("work", 3, "must be a str"),
        ("evaluator_roles", "ps", "must be a list of role names"),
        ("evaluator_roles", ["ps"], "names 1 roles for num_evaluators=0"),
    ],
)
def test_each_bad_argument_is_named(parameter, value, requirement):
    arguments = {"main_fun": main_fun, "name": "job", parameter: value}
    with pytest.raises(InvalidArgumentError) as refused:
        JobOptions(**arguments)
    message = str(refused.value)
    assert message.startswith(f"{parameter}={value!r}: "), message
    assert requirement in message


def test_spark_input_needs_a_dataframe():
    with pytest.raises(
        InvalidArgumentError, match=r"^data=None: input_mode='spark' needs data=<a DataFrame>"
    ):
        JobOptions(main_fun=main_fun, name="job", input_mode="spark")
    with pytest.raises(InvalidArgumentError, match=r"^data=\[1, 2\]: must be a pyspark DataFrame"):
        JobOptions(main_fun=main_fun, name="job", input_mode="spark", data=[1, 2])


def test_kept_results_need_spark_executors():
    # Local mode runs the tasks on the driver: there are no executors to keep results on.
    with pytest.raises(InvalidArgumentError, match=r"^keep_results=True: results stay on Spark executors"):
        JobOptions(main_fun=main_fun, name="job", local=True, keep_results=True)
    assert JobOptions(main_fun=main_fun, name="job", keep_results=True).keep_results is True


def test_the_restart_options_are_checked():
    with pytest.raises(InvalidArgumentError, match=r"^max_restarts=-1: must be >= 0"):
        JobOptions(main_fun=main_fun, name="job", max_restarts=-1)
    with pytest.raises(InvalidArgumentError, match=r"^restart_backoff=-0.5: must be >= 0"):
        JobOptions(main_fun=main_fun, name="job", restart_backoff=-0.5)
    with pytest.raises(InvalidArgumentError, match=r"^min_workers=3: must be <= num_workers=2"):
        JobOptions(main_fun=main_fun, name="job", num_workers=2, min_workers=3)
    with pytest.raises(InvalidArgumentError, match=r"^barrier_timeout=0: must be > 0"):
        JobOptions(main_fun=main_fun, name="job", barrier_timeout=0)
    assert JobOptions(main_fun=main_fun, name="job", restart_backoff=0).restart_backoff == 0.0


def test_cluster_run_checks_its_arguments_before_touching_spark():
    # No SparkContext at all: every refusal comes before Spark would be used.
    with pytest.raises(InvalidArgumentError, match=r"^heartbeat_timeout=-1: must be > 0"):
        Cluster.run(None, main_fun, heartbeat_timeout=-1)
    with pytest.raises(InvalidArgumentError, match=r"^num_workers=0: must be >= 1"):
        Cluster.run(None, main_fun, None, 0)
    with pytest.raises(InvalidArgumentError, match=r"^sc=None: must be a SparkContext or a SparkSession"):
        Cluster.run(None, main_fun, None, 2)


# --- the TFoS shim's and the DataFrame functions' arguments ---------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"map_fun": None}, r"^map_fun=None: must be callable"),
        ({"num_executors": 0}, r"^num_executors=0: must be >= 1"),
        ({"num_executors": "2"}, r"^num_executors='2': must be an integer"),
        ({"num_ps": -1}, r"^num_ps=-1: must be >= 0"),
        ({"reservation_timeout": -5}, r"^reservation_timeout=-5: must be > 0"),
        (
            {"num_ps": 1, "input_mode": 1},
            r"^num_ps=1: parameter servers need input_mode=InputMode.TENSORFLOW",
        ),
        ({"eval_node": True, "input_mode": 1}, r"^eval_node=True: an evaluator needs"),
        ({"driver_ps_nodes": True}, r"^driver_ps_nodes=True: parameter servers run as tasks"),
        ({"num_ps": 1, "eval_node": True}, r"^num_executors=2 leaves no training node"),
        ({"eval_grace_secs": -1}, r"^eval_grace_secs=-1: must be"),
        ({"log_dir": 5}, r"^log_dir=5: must be a str"),
        ({"master_node": "boss"}, r"^master_node='boss': use None, 'chief' or 'master'"),
        ({"input_mode": 2}, r"^input_mode=2: use InputMode"),
        ({"eval_node": True, "num_executors": 1}, r"^num_executors=1 leaves no training node"),
        ({}, r"^sc=None: must be a SparkContext"),
    ],
)
def test_tfcluster_run_names_a_bad_argument(arguments, message):
    from sparktrain.tfos import TFCluster

    call = {"sc": None, "map_fun": main_fun, "tf_args": None, "num_executors": 2, **arguments}
    with pytest.raises(InvalidArgumentError, match=message):
        TFCluster.run(**call)


def test_tfcluster_feeds_only_rdds_and_dataframes():
    from sparktrain.tfos._node import NodePlan
    from sparktrain.tfos.TFCluster import InputMode, TFCluster

    # In InputMode.SPARK nothing starts before train or inference.
    cluster = TFCluster(None, NodePlan(main_fun, None, None), 2, 0, 0, InputMode.SPARK, 60.0)
    with pytest.raises(InvalidArgumentError, match=r"^dataRDD=\[1, 2\]: must be an RDD or a DataFrame"):
        cluster.train([1, 2])
    with pytest.raises(InvalidArgumentError, match=r"^dataRDD='rows': must be an RDD or a DataFrame"):
        cluster.inference("rows")


def test_tfparallel_run_names_a_bad_argument():
    from sparktrain.tfos import TFParallel

    with pytest.raises(InvalidArgumentError, match=r"^map_fn=3: must be callable"):
        TFParallel.run(None, 3, None, 2)
    with pytest.raises(InvalidArgumentError, match=r"^num_executors=0: must be >= 1"):
        TFParallel.run(None, main_fun, None, 0)


class _FedContext:
    """What a FeedManager reads from a trainer's context: its partition, as Arrow batches."""

    def __init__(self, rows):
        self._rows = rows

    def feed(self):
        import pyarrow as pa

        from sparktrain.tfos._feed import INDEX_COLUMN

        positions = list(range(len(self._rows)))
        columns = [
            pa.array(positions, pa.int64()),
            *(pa.array(list(c)) for c in zip(*self._rows, strict=True)),
        ]
        names = [INDEX_COLUMN] + [f"c{i}" for i in range(len(columns) - 1)]
        yield pa.record_batch(columns, names=names)


def _manager(rows, epochs=1, inference=False):
    from sparktrain.tfos._feed import FeedManager

    return FeedManager(_FedContext(rows), epochs, pickled_rows=False, inference=inference)


def test_datafeed_names_a_bad_argument():
    from sparktrain.tfos.TFNode import DataFeed

    with pytest.raises(InvalidArgumentError, match=r"^input_mapping=\['x'\]: must be a dict"):
        DataFeed(_manager([("a", 1), ("b", 2)]), input_mapping=["x"])
    feed = DataFeed(_manager([("a", 1), ("b", 2)]), input_mapping={"a": "x", "b": "y"})
    with pytest.raises(InvalidArgumentError, match=r"^batch_size=0: must be >= 1"):
        feed.next_batch(0)
    assert feed.next_batch(5) == {"x": ["a", "b"], "y": [1, 2]}
    assert feed.should_stop()
    with pytest.raises(InvalidArgumentError, match=r"exists only in InputMode\.SPARK"):
        DataFeed(None)


def test_the_feeds_of_a_node_share_its_rows_for_every_epoch_and_terminate_together():
    from sparktrain.tfos import TFNode
    from sparktrain.tfos.TFNode import DataFeed

    mgr = _manager([(i,) for i in range(5)], epochs=2)
    first, second = DataFeed(mgr), DataFeed(mgr)
    assert first.next_batch(3) == [(0,), (1,), (2,)]
    assert second.next_batch(3) == [(3,), (4,), (0,)]  # the second epoch follows the first
    assert TFNode.next_batch(mgr, 2) == [(1,), (2,)]
    assert not first.should_stop()
    first.terminate()
    assert mgr.get("state") == "terminating"
    assert second.next_batch(10) == []
    assert second.should_stop()
    # Results in training are dropped, as TFoS drops them.
    second.batch_results(["ignored"])
    assert mgr.results == []


def test_inference_pairs_results_with_the_rows_read_in_order():
    from sparktrain.tfos import TFNode

    mgr = _manager([(i,) for i in range(4)], inference=True)
    feed = mgr.default_feed()
    assert feed.next_batch(3) == [(0,), (1,), (2,)]
    TFNode.batch_results(mgr, ["r0", "r1"])
    with pytest.raises(InvalidArgumentError, match="1 rows were read but got no result"):
        mgr.check_answered()
    with pytest.raises(InvalidArgumentError, match="batch_results got 2 results for 1 rows"):
        feed.batch_results(["r2", "extra"])
    feed.batch_results(["r2"])
    assert TFNode.next_batch(mgr, 3) == [(3,)]
    TFNode.batch_results(mgr, ["r3"])
    mgr.check_answered()
    assert mgr.results == [(0, "r0"), (1, "r1"), (2, "r2"), (3, "r3")]


def test_inference_that_returns_before_reading_its_share_fails_unless_terminated():
    mgr = _manager([(i,) for i in range(40)], inference=True)
    feed = mgr.default_feed()
    feed.batch_results([f"r{x}" for (x,) in feed.next_batch(3)])
    with pytest.raises(InvalidArgumentError, match="37 rows of its share never read"):
        mgr.check_answered()

    mgr = _manager([(i,) for i in range(40)], inference=True)
    feed = mgr.default_feed()
    feed.batch_results([f"r{x}" for (x,) in feed.next_batch(3)])
    feed.terminate()  # the rest dropped on purpose, as TFoS's terminate does
    mgr.check_answered()
    assert len(mgr.results) == 3


def test_tf_config_names_nodes_as_tfos_does():
    from types import SimpleNamespace

    from sparktrain.cluster.settings import TaskInfo
    from sparktrain.tfos._node import NodePlan, tfos_tf_config

    tasks = [TaskInfo(i, "x", 0, f"h{i}", 1000 + i, 2000 + i, str(i)) for i in range(5)]
    # sparktrain's job: the chief, two workers, then three evaluator tasks for 2 ps and an evaluator.
    ctx = SimpleNamespace(tasks=tasks[:5], num_workers=2, num_evaluators=3, rank=3)
    plan = NodePlan(main_fun, None, "chief", num_ps=2)
    assert tfos_tf_config(ctx, plan) == {
        "cluster": {
            "chief": ["h0:2000"],
            "worker": ["h1:2001"],
            "ps": ["h2:2002", "h3:2003"],
            "evaluator": ["h4:2004"],
        },
        "task": {"type": "ps", "index": 1},
        "environment": "cloud",
    }
    ctx.rank = 1
    assert tfos_tf_config(ctx, NodePlan(main_fun, None, None, num_ps=2))["task"] == {
        "type": "worker",
        "index": 1,
    }
    assert tfos_tf_config(ctx, NodePlan(main_fun, None, "master", num_ps=2))["cluster"]["master"] == [
        "h0:2000"
    ]


def test_parameter_server_jobs_get_inter_op_threads_for_remote_calls(monkeypatch):
    # One inter-op thread (the launcher's default for spark.task.cpus=1) deadlocks a
    # ParameterServerStrategy job; a larger value set for the job is kept.
    from sparktrain.tfos._node import _allow_remote_calls

    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "1")
    _allow_remote_calls(4)
    assert os.environ["TF_NUM_INTEROP_THREADS"] == "5"
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "16")
    _allow_remote_calls(4)
    assert os.environ["TF_NUM_INTEROP_THREADS"] == "16"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"path": 5}, r"^path=5: must be a str"),
        ({"path": ""}, r"^path='': must not be empty"),
        ({"mode": None}, r"^mode=None: must be a str"),
        ({"mode": "replace"}, r"^unknown mode 'replace'"),
        ({"record_type": "Proto"}, r"^unknown record type 'Proto'"),
        ({"compression": 9}, r"^compression=9: must be None, 'GZIP' or 'ZLIB'"),
        ({"partition_by": 3}, r"^partition_by=3: must be a column name"),
        ({"num_files": 0}, r"^num_files=0: must be >= 1"),
        ({}, r"^data=\[\{'a': 1\}\]: must be a DataFrame or an RDD, not list"),
    ],
)
def test_tfrecord_write_names_a_bad_argument(arguments, message):
    from sparktrain import tfrecord

    call = {"data": [{"a": 1}], "path": "/tmp/sparktrain-never-written", **arguments}
    with pytest.raises(InvalidArgumentError, match=message):
        tfrecord.write(**call)
    assert not os.path.exists("/tmp/sparktrain-never-written")


def test_read_dataframe_and_predict_name_a_bad_argument():
    from sparktrain import predict, tfrecord

    with pytest.raises(InvalidArgumentError, match=r"^spark=None: must be a SparkSession"):
        tfrecord.read_dataframe(None, "/data")
    with pytest.raises(InvalidArgumentError, match=r"^export_dir=None: must be a str"):
        predict(None, None, None)
    with pytest.raises(InvalidArgumentError, match=r"^df='table': must be a DataFrame"):
        predict(None, "/models/m", "table")


# --- missing optional dependencies ----------------------------------------------------------


def test_missing_dependency_error_is_an_import_error_naming_the_extra():
    from sparktrain._deps import require

    assert require("json", extra="spark", needed_by="x").dumps([]) == "[]"
    with pytest.raises(MissingDependencyError) as missing:
        require("sparktrain_no_such_module.sub", extra="spark", needed_by="sparktrain.something")
    e = missing.value
    assert isinstance(e, ImportError)
    assert isinstance(e, SparktrainError)
    assert str(e) == "sparktrain.something needs sparktrain_no_such_module: pip install 'sparktrain[spark]'"
    assert (e.package, e.extra, e.name) == ("sparktrain_no_such_module", "spark", "sparktrain_no_such_module")
    assert isinstance(e.__cause__, ModuleNotFoundError)
    copy = pickle.loads(pickle.dumps(e))
    assert (str(copy), copy.package, copy.extra, copy.name) == (str(e), e.package, e.extra, e.name)


def _entry_point_calls():
    """Each Spark-side entry point, called with arguments it would otherwise accept this far."""
    from sparktrain import predict, tfrecord
    from sparktrain.tfos import TFCluster, TFParallel

    return {
        "sparktrain.Cluster.run": lambda: Cluster.run(None, main_fun),
        "sparktrain.tfrecord.write": lambda: tfrecord.write([], "/x"),
        "sparktrain.tfrecord.read_dataframe": lambda: tfrecord.read_dataframe(None, "/x"),
        "sparktrain.tfrecord.register": lambda: tfrecord.register(None),
        "sparktrain.predict": lambda: predict(None, "/m", None),
        "sparktrain.tfos.TFCluster.run": lambda: TFCluster.run(None, main_fun, None, 2),
        "sparktrain.tfos.TFParallel.run": lambda: TFParallel.run(None, main_fun, None, 2),
    }


@pytest.mark.parametrize(
    "entry_point",
    [
        "sparktrain.Cluster.run",
        "sparktrain.tfrecord.write",
        "sparktrain.tfrecord.read_dataframe",
        "sparktrain.tfrecord.register",
        "sparktrain.predict",
        "sparktrain.tfos.TFCluster.run",
        "sparktrain.tfos.TFParallel.run",
    ],
)
def test_an_entry_point_without_pyspark_names_the_extra(monkeypatch, entry_point):
    call = _entry_point_calls()[entry_point]  # imported while pyspark is there, as users would
    # A None entry makes `import pyspark` fail as if it were not installed.
    for name in [m for m in sys.modules if m.startswith("pyspark.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(MissingDependencyError) as missing:
        call()
    assert str(missing.value) == f"{entry_point} needs pyspark: pip install 'sparktrain[spark]'"
    assert missing.value.package == "pyspark"


def test_spark_input_without_pandas_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    needs_pandas = r"^sparktrain.Cluster.run needs pandas: pip install 'sparktrain\[spark\]'$"
    with pytest.raises(MissingDependencyError, match=needs_pandas):
        Cluster.run(None, main_fun, input_mode="spark")
    # Files input does not need pandas: the next refusal is about the missing SparkContext.
    with pytest.raises(InvalidArgumentError, match=r"^sc=None"):
        Cluster.run(None, main_fun)


# --- restarts ---------------------------------------------------------------------------------


def _raised(line: str, code: int = 1) -> WorkerFailed:
    tail = f'Traceback (most recent call last):\n  File "main.py", line 3, in main_fun\n{line}'
    return worker_failed(1, "worker:0", "h1", returncode=code, stderr_tail=tail)


def test_a_user_exception_is_retried_once_then_the_same_one_again_is_not():
    first = _raised("ValueError: bad row")
    now = signature(first, 40)
    assert now == ("ValueError: bad row", 40)
    assert incurable(first, None, now) is None
    again = signature(_raised("ValueError: bad row"), 40)
    assert (
        incurable(_raised("ValueError: bad row"), now, again)
        == "it failed the same way before the last restart"
    )
    # Another step, or another exception, is another failure.
    assert incurable(first, now, signature(first, 50)) is None
    assert incurable(first, now, signature(_raised("KeyError: 'x'"), 40)) is None


def test_signals_lost_tasks_and_broken_rings_are_always_retried():
    killed = worker_failed(1, "worker:0", "h1", returncode=-9)
    lost = worker_failed(0, "chief:0", "h0", what="stopped heart-beating (10.2 s without a word)")
    peer = worker_failed(2, "worker:1", "h2", returncode=PEER_LOST, stderr_tail="PeerFailed: ...")
    for failure in (killed, lost, peer):
        assert signature(failure, 7) is None
        assert incurable(failure, None, None) is None


def test_errors_no_restart_fixes_are_never_retried():
    bad_input = _raised("sparktrain.errors.TFRecordCorruptError: part-1 at offset 12", code=NOT_RETRYABLE)
    assert (
        incurable(bad_input, None, signature(bad_input, None))
        == "a restart cannot fix bad input or arguments"
    )
    missing = RendezvousTimeout("1 of 2 tasks never registered: [1]", missing=[1], total=2)
    assert incurable(missing, None, signature(missing, None)) == "the cluster could not start every task"
    # A Spark failure naming no trainer is retried once, like a user exception.
    spark = ClusterError("the Spark job of j failed: Job aborted")
    first = signature(spark, None)
    assert incurable(spark, None, first) is None
    assert incurable(spark, first, signature(spark, None)) is not None


def test_a_restart_is_described_in_one_line_and_backs_off_exponentially():
    assert (
        describe(_raised("ValueError: bad row"))
        == "worker:0 (task 1 on h1) exited with code 1: ValueError: bad row"
    )
    assert (
        describe(worker_failed(1, "worker:0", "h1", returncode=-9))
        == "worker:0 (task 1 on h1) was killed by SIGKILL"
    )
    assert [backoff(n, 1.0) for n in (1, 2, 3, 10)] == [1.0, 2.0, 4.0, 60.0]
    restart = Restart(generation=0, cause="c", detected_at=10.0, resubmitted_at=12.5, last_step=50)
    assert restart.seconds_to_resubmit == 2.5
    assert restart.steps_redone is None
    assert dataclasses.replace(restart, resumed_from=40).steps_redone == 10


def test_a_trainer_tells_errors_no_restart_fixes_by_its_exit_code():
    from sparktrain.cluster.trainer.main import exit_code_for
    from sparktrain.errors import CollectiveTimeout, InvalidArgumentError, PeerFailed, TFRecordCorruptError

    assert exit_code_for(InvalidArgumentError("x")) == NOT_RETRYABLE
    assert exit_code_for(TFRecordCorruptError("bad", path="p", offset=3)) == NOT_RETRYABLE
    assert exit_code_for(PeerFailed("gone", op="allreduce", peer=1, address="a")) == PEER_LOST
    # A peer that went silent (its host cut off) is as much the peer's failure as one that died.
    assert exit_code_for(CollectiveTimeout("silent", op="allreduce", peer=1, address="a")) == PEER_LOST
    assert exit_code_for(ValueError("x")) == 1


# --- ctx.save_state's files ---------------------------------------------------------------


def test_state_round_trips_arrays_and_json_values_in_a_format_that_runs_no_code():
    import numpy as np

    from sparktrain.cluster.trainer.state import PICKLE_SUFFIX, SAFE_SUFFIX, decode, encode

    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    for state in (weights, {"step": 3, "w": weights, "names": ["a"]}, {"step": 3}, [1, 2.5, None], None):
        data = encode(state, use_pickle=False)
        assert data.startswith(b"PK")  # a NumPy .npz archive
        back = decode(data, SAFE_SUFFIX, "state.npz")
        if isinstance(state, np.ndarray):
            np.testing.assert_array_equal(back, state)
            assert back.dtype == np.float32
        elif isinstance(state, dict) and "w" in state:
            np.testing.assert_array_equal(back.pop("w"), weights)
            assert back == {"step": 3, "names": ["a"]}
        else:
            assert back == state
    # Anything else needs the explicit opt-in, which the message names.
    for value in ({"model": object()}, np.array([object()]), {"w": weights, "when": object()}):
        with pytest.raises(InvalidArgumentError, match=r"pass pickle=True to save_state and load_state"):
            encode(value, use_pickle=False)
    assert decode(encode({1, 2}, use_pickle=True), PICKLE_SUFFIX, "state.pickle") == {1, 2}
    with pytest.raises(InvalidArgumentError, match=r"not state that ctx\.save_state wrote"):
        decode(b"not an archive", SAFE_SUFFIX, "dir/state.npz")
