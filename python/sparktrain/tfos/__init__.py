"""TensorFlowOnSpark compatibility: existing TFoS jobs run on sparktrain's launcher by changing
their imports from ``tensorflowonspark`` to ``sparktrain.tfos``.

- :mod:`~sparktrain.tfos.TFCluster`: ``TFCluster.run``, ``InputMode``, ``train``,
  ``inference`` and ``shutdown``;
- :mod:`~sparktrain.tfos.TFNode`: ``DataFeed`` and ``hdfs_path``;
- :mod:`~sparktrain.tfos.compat`: ``export_saved_model``, ``disable_auto_shard``,
  ``is_gpu_available``;
- :mod:`~sparktrain.tfos.TFParallel`: independent single-node runs on every executor.

What differs from TFoS: parameter servers (``num_ps > 0``) are refused, since
MultiWorkerMirroredStrategy has none; ``tensorboard=True`` is accepted and ignored (point
TensorBoard at ``log_dir``); in ``InputMode.SPARK`` the trainers start when ``train`` or
``inference`` is called, with the data, and the data reaches them as Arrow batches rather than
through a multiprocessing queue.
"""

from __future__ import annotations

from sparktrain.tfos import TFCluster, TFNode, TFParallel, compat

__all__ = ["TFCluster", "TFNode", "TFParallel", "compat"]
