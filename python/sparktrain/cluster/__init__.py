"""The launcher: one trainer per Spark task, a rendezvous with a chief, ``TF_CONFIG``,
failure detection and a synchronized exit. Imported on every side; its names load on first use.

Each side of a job has its own package, and imports flow one way (driver → task → shared;
trainer → shared):

- :mod:`~sparktrain.cluster.driver`: ``Cluster.run`` and the job handle, on the driver;
- :mod:`~sparktrain.cluster.task`: what each barrier task does on its executor;
- :mod:`~sparktrain.cluster.trainer`: the trainer process that runs ``main_fun(args, ctx)``;
- shared by all three: :mod:`~sparktrain.cluster.settings` (what travels from the driver to
  tasks and trainers), :mod:`~sparktrain.cluster.failures` (exit codes and ``WorkerFailed``)
  and :mod:`~sparktrain.cluster.scripts` (a ``.py`` file as ``main_fun``).

The names below load on first use, so that a task or a trainer importing its own package does
not load the driver's launcher.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparktrain.cluster.driver.launcher import Cluster, State
    from sparktrain.cluster.settings import TaskInfo
    from sparktrain.cluster.trainer.context import TrainerContext

__all__ = ["Cluster", "State", "TaskInfo", "TrainerContext"]

_NAMES = {
    "Cluster": "sparktrain.cluster.driver.launcher",
    "State": "sparktrain.cluster.driver.launcher",
    "TaskInfo": "sparktrain.cluster.settings",
    "TrainerContext": "sparktrain.cluster.trainer.context",
}


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'sparktrain.cluster' has no attribute {name!r}")
