"""The Spark stage of one generation of a job, on the driver: a barrier stage with one task
per trainer over ``parallelize(range(n), n)``, or over the job's DataFrame repartitioned to one
partition per trainer (``input_mode="spark"``). Each task runs
:mod:`sparktrain.cluster.task.stages`; this module only builds the stage and collects it.
Runs on the driver."""

from __future__ import annotations

import functools
from typing import Any

from sparktrain.cluster.settings import JobSettings
from sparktrain.cluster.task.run import TaskResult
from sparktrain.cluster.task.stages import FED_RESULT_DDL, fed_partition, plain_partition


def run_stage(sc: Any, num_tasks: int, settings: JobSettings, keep: bool = False) -> Any:
    """Runs the job's barrier stage of ``num_tasks`` tasks. Returns the tasks' results; with
    ``keep``, an RDD of ``(rank, pickled value)`` pairs left on the executors (partition ``i``
    holding task ``i``'s)."""
    body = functools.partial(plain_partition, settings)
    stage = sc.parallelize(range(num_tasks), num_tasks).barrier().mapPartitions(body)
    if keep:
        return checkpoint_locally(stage.map(lambda r: (r.rank, r.value)))
    results: list[TaskResult] = stage.collect()
    return results


def run_fed_stage(data: Any, num_tasks: int, settings: JobSettings, keep: bool = False) -> Any:
    """Runs the job's barrier stage over ``data`` repartitioned to ``num_tasks`` partitions.
    Returns what :func:`run_stage` returns."""
    from sparktrain.tfrecord._types import arrow_schema_of

    body = functools.partial(fed_partition, settings, arrow_schema_of(data.schema))
    stage = data.repartition(num_tasks).mapInArrow(body, FED_RESULT_DDL, barrier=True)
    if keep:
        kept = stage.localCheckpoint(eager=True)
        return kept.rdd.map(lambda row: (row[0], bytes(row[1])), preservesPartitioning=True)
    rows = stage.collect()
    return [TaskResult(rank=row["rank"], value=bytes(row["value"])) for row in rows]


def checkpoint_locally(rdd: Any) -> Any:
    """Computes ``rdd`` once and keeps its partitions on the executors (Spark's local
    checkpoint: memory, then local disk), cutting its lineage so that nothing recomputes the
    stage behind it. Returns a plain RDD over the kept partitions: a PySpark ``map`` on the
    original would fuse with the functions before the checkpoint and run them again."""
    from pyspark import RDD

    rdd.localCheckpoint()
    rdd._jrdd.count()
    return RDD(rdd._jrdd, rdd.ctx, rdd._jrdd_deserializer)
