"""What each Spark task of a job's barrier stage runs: one task of the job
(:func:`~sparktrain.cluster.task.run.run_task`) over its partition, handing back the trainer's
result. Runs in the executor task (Spark's Python worker); the driver builds the stages around
these functions (:mod:`sparktrain.cluster.driver.stage`).

They are module functions, bound to the job's settings with :func:`functools.partial`, so that
Spark ships them by name and a task imports this package alone, never the driver's modules.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sparktrain.cluster.settings import JobSettings
from sparktrain.cluster.task.run import TaskResult, run_task

if TYPE_CHECKING:
    import pyarrow as pa

#: The fed stage's output: one row per task, its rank and the trainer's pickled result.
FED_RESULT_DDL = "rank int, value binary"


def plain_partition(settings: JobSettings, _: Iterator[Any]) -> Iterator[TaskResult]:
    """The task of a stage over ``parallelize(range(n), n)``: its partition is only its index."""
    yield run_task(settings)


def fed_partition(
    settings: JobSettings, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The task of a stage over the job's DataFrame (``input_mode="spark"``): ``batches`` is its
    partition, served to the trainer through ``ctx.feed()``."""
    import pyarrow as pa

    result = run_task(settings, feed=(batches, schema))
    columns = [pa.array([result.rank], pa.int32()), pa.array([result.value], pa.binary())]
    yield pa.record_batch(columns, names=["rank", "value"])
