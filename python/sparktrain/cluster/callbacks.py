"""Callbacks of a ``Cluster.run`` job: how an integration (an experiment tracker such as
:class:`sparktrain.tracking.MLflowCallback`) follows a job without the launcher knowing it.
Imported on all three sides of a job: the driver calls the job's hooks, and every trainer
process gets the callbacks as ``ctx.callbacks``, where ``ctx.trainer(...)`` hands them to the
engine (:class:`sparktrain.training.Callback` adds the training hooks).

A callback is pickled to the trainers (with cloudpickle, in the Spark task closure, as
``main_fun`` is) after :meth:`JobCallback.on_job_start` returned: what it learnt on the driver
(a run id, say) travels with it, and a restart ships the same object again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparktrain.cluster.driver.restarts import Restart


@dataclass(frozen=True)
class JobInfo:
    """What a job is, as its callbacks see it on the driver when it starts."""

    #: The job's name (``Cluster.run``'s ``name``).
    name: str
    #: Training tasks, the chief included.
    num_workers: int
    num_evaluators: int
    #: ``"files"`` or ``"spark"`` (a DataFrame's partitions feed the trainers).
    input_mode: str
    #: Restarts allowed, and the fewest training tasks a restart may go on with.
    max_restarts: int
    min_workers: int | None
    #: GPUs each training task takes (None: what Spark assigned).
    gpus_per_worker: int | None
    #: The trainers run on the driver's machine rather than in a Spark stage.
    local: bool
    #: The Spark master and application id.
    master: str
    application_id: str


class JobCallback:
    """Hooks into a job, each a no-op here: subclass and override what you need.

    On the driver, :meth:`on_job_start` runs before any Spark job (its return value is the
    callback the job uses from then on, and ships to the trainers), :meth:`trainer_env` adds to
    the trainers' environment, :meth:`on_restart` runs when a new generation starts, and
    :meth:`on_job_end` once the job has an outcome. An exception in a hook fails
    ``Cluster.run`` (from :meth:`on_job_start`) or is logged (from the others): a tracker that
    is down must not end a training job that is under way."""

    def on_job_start(self, job: JobInfo) -> JobCallback:
        """The driver calls this before the job's first Spark job; returns the callback for
        this job (``self``, or a copy bound to what this job needs, so that one callback
        object can serve jobs that run side by side)."""
        return self

    def trainer_env(self) -> dict[str, str]:
        """Environment variables every trainer of the job gets (on top of ``env=``)."""
        return {}

    def on_restart(self, restart: Restart) -> None:
        """The driver calls this when the job starts a new generation after ``restart``."""

    def on_job_end(self, error: BaseException | None) -> None:
        """The driver calls this once the job succeeded (``error`` None), failed, or was shut
        down."""


__all__ = ["JobCallback", "JobInfo"]
