"""Checks that the cluster has a task slot for every task of a barrier stage. Runs on the
driver.

Spark's own check waits ``spark.scheduler.barrier.maxConcurrentTasksCheck.interval`` (15 s)
times ``...maxFailures`` (40) before it gives up, ten minutes of silence by default. This check
gives executors that are still starting a short grace period, then fails with the numbers.
"""

from __future__ import annotations

import time
from typing import Any

from sparktrain import _spark
from sparktrain.errors import SlotsUnavailable


def ensure_slots(sc: Any, needed: int, grace: float) -> None:
    """Waits up to ``grace`` seconds for ``needed`` slots; raises
    :class:`~sparktrain.errors.SlotsUnavailable` saying how many there are."""
    deadline = time.monotonic() + grace
    while True:
        available = _spark.available_slots(sc)
        if available >= needed:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    executors = _spark.executor_count(sc)
    cpus = sc.getConf().get("spark.task.cpus", "1")
    raise SlotsUnavailable(
        f"the job needs {needed} task slots at once (one per trainer, gang-scheduled), but the "
        f"cluster has {available} ({executors} executors, spark.task.cpus={cpus}) after waiting "
        f"{grace:.0f} s; add executors or cores, or run fewer trainers (num_workers; num_executors "
        "in TFCluster.run)",
        needed=needed,
        available=available,
    )
