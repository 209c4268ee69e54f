"""The launcher's pure helpers, without Spark or HDFS: Spark's barrier-task failure messages,
exit codes and ``WorkerFailed``.

Nothing here starts a JVM.
"""

from __future__ import annotations

import pickle
import signal

import pytest

from sparktrain.cluster import failures
from sparktrain.cluster.failures import (
    FAILED,
    ORPHANED,
    PEER_LOST,
    FailedTask,
    describe_exit,
    parse_task_failure,
    spark_error_summary,
    worker_failed,
)
from sparktrain.cluster.launcher import Cluster, role_names
from sparktrain.errors import ClusterError, WorkerFailed

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


# --- exit codes and WorkerFailed ------------------------------------------------------------


def test_the_trainers_exit_codes_are_distinct_and_used_by_the_trainer():
    from sparktrain.cluster import trainer

    assert len({0, FAILED, PEER_LOST, ORPHANED}) == 4
    assert (trainer.FAILED, trainer.PEER_LOST, trainer.ORPHANED) == (FAILED, PEER_LOST, ORPHANED)


@pytest.mark.parametrize(
    ("code", "described"),
    [
        (1, "exited with code 1"),
        (2, "exited with code 2"),
        (PEER_LOST, "exited with code 3 (a collective with a peer failed)"),
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
