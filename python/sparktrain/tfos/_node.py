"""What runs inside a trainer for the TFoS shim: the ``ctx`` TFoS functions expect, the feed
behind ``ctx.mgr``, and the wrapper around the user's ``map_fun``."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sparktrain.cluster.context import TrainerContext

#: The columns of the DataFrame an RDD becomes to be fed: the row's position, the pickled row.
INDEX_COLUMN = "_sparktrain_index"
ROW_COLUMN = "_sparktrain_row"


class FeedManager:
    """``ctx.mgr``: the task's partition, as rows, for ``num_epochs`` passes; and the
    inference results the trainer hands back."""

    def __init__(self, ctx: TrainerContext, epochs: int, pickled_rows: bool) -> None:
        self._ctx = ctx
        self._epochs = max(1, epochs)
        self._pickled = pickled_rows
        #: ``(row position, result)`` pairs from ``DataFeed.batch_results``.
        self.results: list[tuple[int, Any]] = []

    def rows(self) -> Iterator[tuple[int, Any]]:
        """``(position, row)`` for every row of every epoch."""
        for _ in range(self._epochs):
            for batch in self._ctx.feed():
                if self._pickled:
                    positions = batch.column(INDEX_COLUMN).to_pylist()
                    rows = [pickle.loads(r) for r in batch.column(ROW_COLUMN).to_pylist()]
                else:
                    positions = batch.column(INDEX_COLUMN).to_pylist()
                    columns = [batch.column(i).to_pylist() for i in range(1, batch.num_columns)]
                    rows = list(zip(*columns, strict=True))
                yield from zip(positions, rows, strict=True)


@dataclass
class NodeContext:
    """The ``ctx`` a TFoS ``map_fun`` receives."""

    job_name: str
    task_index: int
    num_workers: int
    worker_num: int
    executor_id: int
    cluster_spec: dict[str, list[str]]
    defaultFS: str  # TFoS's spelling
    working_dir: str
    mgr: FeedManager | None
    trainer: TrainerContext

    def absolute_path(self, path: str) -> str:
        """``path`` as a full URL (see :meth:`TrainerContext.absolute_path`)."""
        return self.trainer.absolute_path(path)


def tfos_tf_config(ctx: TrainerContext, master_node: str | None) -> dict[str, Any]:
    """``TF_CONFIG`` as TFoS writes it: with ``master_node="chief"`` it is sparktrain's own;
    without a master node every training task is a ``worker`` (worker 0 acts as chief)."""
    if master_node == "chief":
        return ctx.tf_config
    cluster = dict(ctx.tf_config["cluster"])
    workers = cluster.pop("chief", []) + cluster.pop("worker", [])
    cluster["worker"] = workers
    if ctx.job_name == "evaluator":
        task = {"type": "evaluator", "index": ctx.task_index}
    else:
        task = {"type": "worker", "index": ctx.rank}
    return {"cluster": cluster, "task": task}


#: ``(map_fun, tf_args, master_node, epochs, fed, pickled_rows)``.
Packed = tuple[Callable[..., Any], Any, str | None, int, bool, bool]


def run_map_fun(packed: Packed, ctx: TrainerContext) -> Any:
    """The trainer's ``main_fun``: builds TFoS's ``ctx`` and calls the user's ``map_fun``.

    A fed trainer returns its inference results as ``(position, result)`` pairs."""
    map_fun, tf_args, master_node, epochs, fed, pickled_rows = packed
    tf_config = tfos_tf_config(ctx, master_node)
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    mgr = FeedManager(ctx, epochs, pickled_rows) if fed else None
    node = NodeContext(
        job_name=tf_config["task"]["type"],
        task_index=tf_config["task"]["index"],
        num_workers=ctx.num_workers + ctx.num_evaluators,
        worker_num=ctx.rank,
        executor_id=ctx.rank,
        cluster_spec=tf_config["cluster"],
        defaultFS=ctx.default_fs,
        working_dir=ctx.working_dir,
        mgr=mgr,
        trainer=ctx,
    )
    map_fun(tf_args, node)
    return mgr.results if mgr is not None else None
