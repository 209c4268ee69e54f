"""PySpark's ``TorchDistributor``, on sparktrain's launcher: change the import and nothing else.
Runs on the driver.

.. code-block:: python

    from sparktrain.torch import TorchDistributor        # was: from pyspark.ml.torch.distributor

    def train(learning_rate):
        import torch.distributed as dist
        dist.init_process_group("gloo")                   # MASTER_ADDR, RANK, ... are set
        ...
        return model_state if dist.get_rank() == 0 else None

    state = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(train, 1e-3)
    TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run("train.py", "--lr=1e-3")

As with PySpark's: ``num_processes`` processes run ``train_object`` (a function, called with
``*args, **kwargs``, whose rank-0 return value ``run`` returns; or the path of a script, run as
``__main__`` with ``args`` as its command line, ``run`` returning None), each with PyTorch's
distributed variables set, so ``init_process_group`` needs no arguments. ``local_mode=False``
spreads them over Spark tasks, one process per task; ``local_mode=True`` runs them on the
driver's machine. ``use_gpu`` gives each process one GPU (``spark.task.resource.gpu.amount``
on the executors, or the driver's GPUs in local mode).

What the launcher adds: every argument and the Spark conf are checked before anything starts;
each process's output streams to the driver as ``[chief:0] ...``; a process that fails ends the
job at once with :class:`~sparktrain.errors.WorkerFailed` carrying its stderr tail (the others
are stopped); no process leaves before all are done; and a process or executor that dies
restarts the job (``max_restarts=3``), where code that resumes from its own checkpoints picks up
(``SPARKTRAIN_GENERATION`` in the environment counts the restarts). Extra
:meth:`sparktrain.Cluster.run` options can be given as keywords to the constructor.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparktrain import _checks, _spark
from sparktrain.errors import InvalidArgumentError


@dataclass(frozen=True)
class _Call:
    """``train_fn(*args, **kwargs)`` as a ``main_fun``."""

    train_fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def __call__(self, _: object, ctx: object) -> Any:
        return self.train_fn(*self.args, **self.kwargs)


class TorchDistributor:
    """Runs PyTorch training on Spark like ``pyspark.ml.torch.distributor.TorchDistributor``
    (see the module notes)."""

    def __init__(
        self,
        num_processes: int = 1,
        local_mode: bool = True,
        use_gpu: bool = True,
        *,
        spark: Any = None,
        **cluster_options: Any,
    ) -> None:
        self.num_processes = _checks.integer("num_processes", num_processes, minimum=1)
        self.local_mode = bool(local_mode)
        self.use_gpu = bool(use_gpu)
        self.spark = spark
        taken = {"num_workers", "local", "gpus_per_worker", "args", "main_fun"} & set(cluster_options)
        if taken:
            raise InvalidArgumentError(f"{sorted(taken)}: TorchDistributor sets these itself")
        self.cluster_options = cluster_options

    def run(self, train_object: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """Runs ``train_object`` in ``num_processes`` processes and waits for them; returns
        what rank 0's call returned (None for a script)."""
        from sparktrain.cluster.driver.launcher import Cluster

        if isinstance(train_object, str | os.PathLike):
            if kwargs:
                raise InvalidArgumentError("a script takes its arguments as strings in args, not kwargs")
            main_fun: Any = train_object
            main_args: Any = list(args)
        else:
            _checks.function("train_object", train_object)
            main_fun, main_args = _Call(train_object, args, kwargs), None
        spark = self.spark if self.spark is not None else _spark.active_session("TorchDistributor")
        with Cluster.run(
            spark,
            main_fun,
            main_args,
            self.num_processes,
            local=self.local_mode,
            gpus_per_worker=1 if self.use_gpu else None,
            **self.cluster_options,
        ) as cluster:
            return cluster.wait()


__all__ = ["TorchDistributor"]
