"""How a trainer's failure is told: the exit codes trainers use, what an exit code means, the
:class:`~sparktrain.errors.WorkerFailed` a failed trainer becomes, and which task Spark's
message about a failed barrier stage names. Imported on all three sides of a job: the
trainer sets the exit codes, the executor task and the driver build the error, and the driver
reads Spark's messages.

The driver (from the events of its rendezvous service, or from Spark's error when no trainer
reported) and the task (when its trainer ends non-zero) build the same error here, so the
message reads the same wherever it comes from.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Final

from sparktrain import errors
from sparktrain._tracebacks import exception_line, raised_in
from sparktrain.errors import WorkerFailed

#: The trainer's exit code when ``main_fun`` (or loading it) raised; the traceback is on stderr.
FAILED: Final = 1
#: The trainer's exit code when ``main_fun`` raised because a data-plane peer broke its
#: connection or left it waiting past the collective time-out: most likely that peer failed
#: first (or its host was cut off), and its failure is the one to report.
PEER_LOST: Final = 3
#: The trainer's exit code when it raised one of sparktrain's errors that no restart can fix
#: (bad arguments, corrupt or unreadable input, a missing dependency, a generation whose
#: model_dir a newer one writes).
NOT_RETRYABLE: Final = 4
#: The trainer's exit code when the task supervising it disappeared.
ORPHANED: Final = 70
#: The exit code a task reports for a trainer it killed because the trainer stopped proving
#: that it runs (stopped by SIGSTOP, or its interpreter hung) for longer than the heartbeat
#: time-out.
UNRESPONSIVE: Final = 71

#: sparktrain's errors that mean the job itself is wrong (its arguments, its input, its
#: environment), or that its generation is lost (a newer one writes its model_dir): a restart
#: would fail alike. A trainer says so with :data:`NOT_RETRYABLE`; a Spark task that feeds the
#: trainers (its Python worker raised one of them) fails the job without a restart too.
NOT_RETRYABLE_ERRORS: Final = (
    errors.CheckpointMismatch,
    errors.GenerationSuperseded,
    errors.InvalidArgumentError,
    errors.MissingDependencyError,
    errors.PathNotFoundError,
    errors.SchemaError,
    errors.TFRecordError,
)

# Only codes that sparktrain's own trainer sets get a gloss; user code may exit with any.
_MEANINGS: Final = {
    PEER_LOST: "a collective with a peer failed or timed out",
    NOT_RETRYABLE: "an error that a restart cannot fix",
    ORPHANED: "its Spark task went away",
    UNRESPONSIVE: "it stopped responding (stopped or hung) and was killed",
}

#: What a failed task is called in Spark's message: ``ResultTask(<stage>, <partition>)``.
_FAILED_BARRIER_TASK: Final = re.compile(
    r"barrier task (?:ResultTask|ShuffleMapTask)\(\d+, (\d+)\) finished unsuccessfully\.?"
)
#: Java exception classes in front of the cause, which say nothing to a Python user.
_JAVA_PREFIX: Final = re.compile(r"^(?:[a-z][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): ")
#: The longest cause kept from Spark's message.
MAX_CAUSE_CHARS: Final = 500


def describe_exit(code: int) -> str:
    """How a process ended, from its ``Popen.returncode``: ``"exited with code 1"``, or
    ``"was killed by SIGKILL"`` for a negative code."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    meaning = _MEANINGS.get(code)
    return f"exited with code {code}" + (f" ({meaning})" if meaning else "")


def worker_failed(
    task_index: int,
    role: str,
    host: str,
    *,
    returncode: int | None = None,
    stderr_tail: str = "",
    what: str | None = None,
) -> WorkerFailed:
    """The error for the trainer of task ``task_index`` (``role`` such as ``"worker:0"``, on
    ``host``): ``"worker:0 (task 1 on h) exited with code 1; the last lines of its stderr: ..."``.

    ``returncode`` is the trainer's ``Popen.returncode`` (negative: the signal that killed it),
    or None when the trainer was lost without one; it becomes ``exit_code`` or ``signal``.
    ``what`` says what happened when there is no exit code to describe."""
    if what is None:
        what = describe_exit(returncode) if returncode is not None else "failed"
    message = f"{role} (task {task_index} on {host}) {what}"
    if stderr_tail:
        message += f"; the last lines of its stderr:\n{stderr_tail}"
    return WorkerFailed(
        message,
        task_index=task_index,
        role=role,
        host=host,
        exit_code=returncode if returncode is not None and returncode >= 0 else None,
        signal=-returncode if returncode is not None and returncode < 0 else None,
        stderr_tail=stderr_tail,
    )


@dataclass(frozen=True)
class FailedTask:
    """A barrier task that Spark's error message names: its partition (the trainer's task
    index) and the first line of why, or ``""`` when Spark gave none."""

    task_index: int
    cause: str


def parse_task_failure(message: str) -> FailedTask | None:
    """The barrier task that failed a Spark stage, from Spark's error message (``str()`` of
    the Py4J error), or None when the message names none.

    Spark 4 says ``... Stage failed because barrier task ResultTask(3, 1) finished
    unsuccessfully.`` followed by the task's error: a Java exception, often wrapping a Python
    traceback. The cause is the traceback's last exception line when there is one (``ValueError:
    bad input``), else the first line of the Java exception without its class name."""
    found = _FAILED_BARRIER_TASK.search(message)
    if found is None:
        return None
    lines = [line.rstrip() for line in message[found.end() :].splitlines()]
    cause = exception_line(lines)
    if cause is None:
        first = next((line.strip() for line in lines if line.strip()), "")
        cause = _JAVA_PREFIX.sub("", first)
    return FailedTask(int(found.group(1)), cause[:MAX_CAUSE_CHARS])


def spark_error_summary(message: str) -> str:
    """The line of a Spark error that says what went wrong: the exception a Python worker
    raised (``sparktrain.errors.InvalidArgumentError: ...``) rather than PySpark's ``An
    exception was thrown from the Python worker``; for a Py4J error, the Java exception's
    message (``Job aborted due to stage failure: ...``) rather than ``An error occurred while
    calling o74.collectToPython.``; else the first line."""
    lines = message.strip().splitlines()
    if not lines:
        return ""
    if "Python worker" in lines[0] and (raised := exception_line(lines)) is not None:
        return f"a Python worker raised {raised}"[:MAX_CAUSE_CHARS]
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        return _JAVA_PREFIX.sub("", lines[1].removeprefix(": ").strip())[:MAX_CAUSE_CHARS]
    return lines[0][:MAX_CAUSE_CHARS]


def raised_bad_input(message: str) -> bool:
    """Whether the Python exception a Spark error ends with is one of sparktrain's errors that
    a restart cannot fix (:data:`NOT_RETRYABLE_ERRORS`): a task reading the job's input met
    bad data or arguments."""
    return isinstance(raised_in(message), NOT_RETRYABLE_ERRORS)
