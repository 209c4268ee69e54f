"""The launcher: one trainer per Spark task, a rendezvous with a chief, ``TF_CONFIG``,
failure detection and a synchronized exit.

- :mod:`~sparktrain.cluster.launcher`: ``Cluster.run`` and the job handle, on the driver;
- :mod:`~sparktrain.cluster.options`: ``Cluster.run``'s arguments, checked on the driver;
- :mod:`~sparktrain.cluster.conf`: the Spark confs the launcher reads;
- :mod:`~sparktrain.cluster.failures`: exit codes, ``WorkerFailed``, and Spark's task failures;
- :mod:`~sparktrain.cluster.task`: what each barrier task does on its executor;
- :mod:`~sparktrain.cluster.trainer`: the trainer process that runs ``main_fun(args, ctx)``;
- :mod:`~sparktrain.cluster.context`: ``ctx``, the trainer's view of the job;
- :mod:`~sparktrain.cluster.settings`: what travels from the driver to tasks and trainers;
- :mod:`~sparktrain.cluster.slots`: the check that the cluster has a slot per trainer;
- :mod:`~sparktrain.cluster.console`: prefixed trainer output and the progress line.
"""

from __future__ import annotations

from sparktrain.cluster.context import TaskInfo, TrainerContext
from sparktrain.cluster.launcher import Cluster, State

__all__ = ["Cluster", "State", "TaskInfo", "TrainerContext"]
