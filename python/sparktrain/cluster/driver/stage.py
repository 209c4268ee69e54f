"""The Spark stage of one generation of a job, on the driver: a barrier stage with one task
per trainer over ``parallelize(range(n), n)``, or over the job's DataFrame repartitioned to one
partition per trainer (``input_mode="spark"``). Each task runs
:mod:`sparktrain.cluster.task.stages`; this module only builds the stage and collects it.
Runs on the driver."""

from __future__ import annotations

import functools
from typing import Any

from sparktrain import _frames
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
    """Runs the job's barrier stage over ``data`` repartitioned to ``num_tasks`` partitions,
    each in a fixed order (:func:`in_fixed_order`). Returns what :func:`run_stage` returns."""
    from sparktrain.tfrecord._types import arrow_schema_of

    body = functools.partial(fed_partition, settings, arrow_schema_of(data.schema))
    stage = _frames.map_in_arrow(
        in_fixed_order(data.repartition(num_tasks)), body, FED_RESULT_DDL, barrier=True
    )
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


def in_fixed_order(df: Any) -> Any:
    """``df`` sorted within each partition by every column Spark can order.

    Each generation of a job repartitions its DataFrame again. Spark puts the same rows in
    each partition every time (it sorts before a round-robin repartition), but fetches the
    shuffle's blocks in no fixed order, so a partition's rows arrive in another order each
    time. A resumed trainer skips the batches its checkpoint covers, so the order must be the
    one the checkpoint saw: sorting by the row's values makes it so. Map columns cannot be
    ordered and are left out of the key; rows equal in every other column keep no fixed order
    among themselves."""
    from pyspark.sql import types as T

    def orderable(t: Any) -> bool:
        if isinstance(t, T.MapType):
            return False
        if isinstance(t, T.ArrayType):
            return orderable(t.elementType)
        if isinstance(t, T.StructType):
            return all(orderable(f.dataType) for f in t.fields)
        return True

    key = [_frames.column(f.name) for f in df.schema.fields if orderable(f.dataType)]
    return df.sortWithinPartitions(*key) if key else df
