"""TFoS's ``TFParallel``: the same function on every executor, independently (no cluster spec,
no ``TF_CONFIG``), e.g. for parallel inference of a single-node model. Runs on the driver; the
function it wraps runs in the trainers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparktrain import _checks
from sparktrain._deps import require_spark
from sparktrain.cluster import Cluster
from sparktrain.cluster.trainer.context import TrainerContext


def _run_single(packed: tuple[Callable[[Any, Any], Any], Any], ctx: TrainerContext) -> Any:
    import os
    import sys

    from sparktrain.tfos._node import NodeContext, default_fs

    map_fn, tf_args = packed
    os.environ.pop("TF_CONFIG", None)
    if isinstance(tf_args, list):
        sys.argv = list(tf_args)
    node = NodeContext(
        executor_id=ctx.rank,
        job_name="worker",
        task_index=ctx.rank,
        cluster_spec={},
        defaultFS=default_fs(ctx.default_fs),
        working_dir=ctx.working_dir,
        mgr=None,
        trainer=ctx,
        num_workers=ctx.num_workers,
    )
    return map_fn(tf_args, node)


def run(
    sc: Any, map_fn: Callable[[Any, Any], Any], tf_args: Any, num_executors: int, use_barrier: bool = True
) -> None:
    """Runs ``map_fn(tf_args, ctx)`` on ``num_executors`` tasks at once and waits for all.
    ``use_barrier`` is accepted for compatibility: the tasks always run as one barrier stage."""
    del use_barrier
    # Cluster.run checks the rest; these would otherwise be named after its own parameters.
    require_spark("sparktrain.tfos.TFParallel.run")
    _checks.function("map_fn", map_fn)
    num_executors = _checks.integer("num_executors", num_executors, minimum=1)
    Cluster.run(sc, _run_single, (map_fn, tf_args), num_executors).wait()


__all__ = [
    "run",
]
