"""When the driver restarts a failed job, and what it remembers of each restart. Runs on the
driver.

A failure that a restart may cure (a trainer killed by a signal or the OOM killer, a lost
executor or Python worker, a task that stopped heart-beating, a trainer that stopped
responding, a collective that broke or timed out, a user exception seen for the first time) is
retried up to ``max_restarts`` times, after a back-off that doubles each time. A failure that
a restart cannot cure ends the job with the original error at once:

- a trainer that raised one of sparktrain's errors about its input or its arguments, or
  whose generation is lost to a newer writer of its ``model_dir`` (the trainer exits with
  :data:`~sparktrain.cluster.failures.NOT_RETRYABLE`);
- the same user exception at the same step as in the previous generation (or, for a failure
  of the Spark job that names no trainer, the same message): it is deterministic, and a third
  try would fail alike;
- tasks that never registered, and a cluster without enough task slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sparktrain._tracebacks import exception_line
from sparktrain.cluster.failures import FAILED, NOT_RETRYABLE
from sparktrain.errors import ClusterError, RendezvousTimeout, WorkerFailed

#: Restarts allowed by default: enough for a pre-empted executor or two, few enough that a
#: job failing for a cause no restart cures ends within minutes.
DEFAULT_MAX_RESTARTS: Final = 3
#: Seconds before the first restart; each further one waits twice as long as the previous.
DEFAULT_RESTART_BACKOFF: Final = 1.0
#: The longest back-off, in seconds.
MAX_BACKOFF: Final = 60.0


@dataclass(frozen=True)
class Restart:
    """One restart of a job: the generation that failed, why, when the driver detected the
    failure and when it submitted the next generation (both ``time.time()``), the failed
    generation's last reported step, and the step the next generation resumed from (None
    when no trainer said: sparktrain's engine reports both)."""

    generation: int
    cause: str
    detected_at: float
    resubmitted_at: float
    last_step: int | None
    resumed_from: int | None = None

    @property
    def steps_redone(self) -> int | None:
        """Steps trained again: from the checkpoint resumed to the last step reported."""
        if self.last_step is None or self.resumed_from is None:
            return None
        return max(0, self.last_step - self.resumed_from)

    @property
    def seconds_to_resubmit(self) -> float:
        """Seconds from the failure's detection until the next generation was submitted."""
        return self.resubmitted_at - self.detected_at


def describe(failure: ClusterError) -> str:
    """A failure in one line, for the log and :attr:`Restart.cause`: what happened to which
    trainer, and for an exception, its last line (``worker:0 (task 1 on h) exited with code 1:
    ValueError: bad row``)."""
    line = str(failure).split("\n", 1)[0].removesuffix("; the last lines of its stderr:")
    if isinstance(failure, WorkerFailed) and failure.exit_code in (FAILED, NOT_RETRYABLE):
        exception = exception_line(failure.stderr_tail.splitlines())
        if exception is not None:
            line = f"{line}: {exception}"
    return line


def signature(failure: ClusterError, step: int | None) -> tuple[str, int | None] | None:
    """What makes a failure the same one again: for a user exception, the exception line of
    the trainer's traceback and the step it failed at; for a failure of the Spark job that
    names no trainer, its message. None for the others (a signal, a lost task...), which are
    never deterministic."""
    if not isinstance(failure, WorkerFailed):
        return (str(failure).split("\n", 1)[0], None)
    if failure.exit_code != FAILED:
        return None
    line = exception_line(failure.stderr_tail.splitlines())
    return None if line is None else (line, step)


def incurable(
    failure: ClusterError, previous: tuple[str, int | None] | None, now: tuple[str, int | None] | None
) -> str | None:
    """Why no restart can cure ``failure``, or None when one may. ``previous`` and ``now`` are
    the :func:`signature` of the last generation's failure and of this one."""
    if isinstance(failure, RendezvousTimeout):
        return "the cluster could not start every task"
    # A trainer's exit code says it; a task that feeds the trainers is marked by the launcher.
    if (isinstance(failure, WorkerFailed) and failure.exit_code == NOT_RETRYABLE) or getattr(
        failure, "bad_input", False
    ):
        return "a restart cannot fix bad input or arguments"
    if now is not None and now == previous:
        return "it failed the same way before the last restart"
    return None


def backoff(restart: int, base: float) -> float:
    """Seconds to wait before restart number ``restart`` (1 for the first): ``base``, doubling,
    at most :data:`MAX_BACKOFF` or ``base`` itself when that is longer."""
    return float(min(max(MAX_BACKOFF, base), base * 2 ** (restart - 1)))
