"""Spark helpers every driver-side module shares: the SparkContext and SparkSession of what a
user passed, the Spark job group a piece of work runs in, and the task slots and executors of
the cluster. Runs on the driver.

One place for each, so that every entry point refuses a Spark Connect session alike, names
the parameter alike, counts executors alike and cancels its jobs alike.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from sparktrain.errors import InvalidArgumentError

_log = logging.getLogger(__name__)

#: Spark's thread-local properties that a job group sets.
_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def context(sc_or_session: Any, parameter: str = "sc") -> Any:
    """The SparkContext of ``sc_or_session`` (a SparkContext, or a session that has one);
    anything else is refused naming ``parameter``."""
    from pyspark import SparkContext

    try:
        sc = getattr(sc_or_session, "sparkContext", sc_or_session)
    except Exception:  # a Spark Connect session refuses to hand out a SparkContext
        sc = None
    if not isinstance(sc, SparkContext):
        raise InvalidArgumentError(
            f"{parameter}={sc_or_session!r}: must be a SparkContext or a SparkSession that has one "
            "(Spark Connect sessions have none)"
        )
    return sc


def session(sc_or_session: Any, parameter: str = "sc") -> Any:
    """The SparkSession of ``sc_or_session``: the session itself, or for a SparkContext the
    active session (one made over it when there is none)."""
    from pyspark.sql import SparkSession

    if isinstance(sc_or_session, SparkSession):
        return sc_or_session
    sc = context(sc_or_session, parameter)
    return SparkSession.getActiveSession() or SparkSession(sc)


def active_session(needed_by: str) -> Any:
    """The active SparkSession; :class:`~sparktrain.errors.InvalidArgumentError` naming
    ``needed_by`` when there is none."""
    from pyspark.sql import SparkSession

    found = SparkSession.getActiveSession()
    if found is None:
        raise InvalidArgumentError(f"{needed_by} needs an active SparkSession (or spark=...)")
    return found


@contextlib.contextmanager
def job_group(sc: Any, group: str, description: str) -> Iterator[None]:
    """Runs the block's Spark jobs (of this thread) in job group ``group``, which
    :func:`cancel` stops from any thread, then restores the thread's previous group."""
    previous = {key: sc.getLocalProperty(key) for key in _GROUP_PROPERTIES}
    sc.setJobGroup(group, description, interruptOnCancel=True)
    try:
        yield
    finally:
        for key, value in previous.items():
            sc.setLocalProperty(key, value)


def cancel(sc: Any, group: str, patience: float = 0.0) -> None:
    """Cancels the jobs of ``group``; with ``patience``, waits up to that many seconds until
    none of their tasks runs (Spark reports a failed job at once, while its other tasks may
    still be writing)."""
    sc.cancelJobGroup(group)
    if patience <= 0:
        return
    tracker = sc.statusTracker()
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        stages = [
            stage
            for job_id in tracker.getJobIdsForGroup(group)
            if (info := tracker.getJobInfo(job_id)) is not None
            for stage in info.stageIds
        ]
        active = sum(s.numActiveTasks for sid in stages if (s := tracker.getStageInfo(sid)) is not None)
        if active == 0:
            return
        time.sleep(0.1)
    _log.warning("tasks of job group %s still run after %.0f s; going on anyway", group, patience)


def is_local(master: str | None) -> bool:
    """Whether ``master`` runs everything in the driver's JVM (``local``, ``local[n]``)."""
    return master is not None and (master == "local" or master.startswith("local["))


def available_slots(sc: Any) -> int:
    """How many tasks of the default resource profile the cluster can run at once."""
    jsc = sc._jsc.sc()
    profile = jsc.resourceProfileManager().defaultResourceProfile()
    return int(jsc.maxNumConcurrentTasks(profile))


def executor_count(sc: Any) -> int:
    """Executors the scheduler knows; on a local master, the driver itself."""
    if is_local(str(sc.master)):
        return 1
    # Scala-private, but public in the bytecode; unlike the block managers' list, it counts
    # an executor as soon as it offers task slots.
    return int(sc._jsc.sc().getExecutorIds().size())


#: Spark's size suffixes (``spark.executor.memory=4g``), as powers of 1024.
_UNITS = {"b": 0, "k": 1, "kb": 1, "m": 2, "mb": 2, "g": 3, "gb": 3, "t": 4, "tb": 4}


def conf_bytes(sc: Any, key: str, default_unit: str = "m") -> int | None:
    """The size the Spark conf ``key`` holds (``512m``, ``4g``; a bare number in
    ``default_unit``, as Spark reads that key), in bytes; None when it is not set or is not a
    size."""
    value = sc.getConf().get(key, None)
    if value is None:
        return None
    text = str(value).strip().lower()
    digits = text.rstrip("kmgtb")
    unit = text[len(digits) :] or default_unit
    if not digits.isdigit() or unit not in _UNITS:
        return None
    size: int = int(digits) * 1024 ** _UNITS[unit]
    return size
