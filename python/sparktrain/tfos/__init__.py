"""TensorFlowOnSpark compatibility: existing TFoS jobs run on sparktrain's launcher by changing
their imports from ``tensorflowonspark`` to ``sparktrain.tfos``.

- :mod:`~sparktrain.tfos.TFCluster`: ``TFCluster.run`` (parameter servers, an evaluator,
  TensorBoard on the chief), ``InputMode``, ``train``, ``inference`` (a lazy RDD of results,
  left on the executors) and ``shutdown``;
- :mod:`~sparktrain.tfos.TFNode`: ``DataFeed``, ``next_batch``/``batch_results``/``terminate``,
  ``hdfs_path``, ``start_cluster_server`` and ``export_saved_model``; the ``ctx`` a
  ``map_fun`` receives has them as methods too (``ctx.get_data_feed()``...);
- :mod:`~sparktrain.tfos.compat`: ``export_saved_model``, ``disable_auto_shard``,
  ``is_gpu_available``;
- :mod:`~sparktrain.tfos.dfutil`: ``saveAsTFRecords``, ``loadTFRecords``, ``isLoadedDF``;
- :mod:`~sparktrain.tfos.pipeline`: the Spark ML ``TFEstimator`` and ``TFModel``;
- :mod:`~sparktrain.tfos.TFParallel`: independent single-node runs on every executor;
- :mod:`~sparktrain.tfos.util`, :mod:`~sparktrain.tfos.gpu_info`,
  :mod:`~sparktrain.tfos.TFManager`, :mod:`~sparktrain.tfos.reservation` and
  :mod:`~sparktrain.tfos.marker`: TFoS's helper modules, for code that imports them
  (:mod:`~sparktrain.tfos.TFSparkNode`, TFoS's node internals, only names ``ctx``'s type).

Streams: ``TFCluster.train(dstream)`` and ``shutdown(ssc)`` feed a Spark Streaming job to the
nodes as TFoS does (``reservation.Client(addr).request_stop()`` stops it), and
``TFCluster.stream_feeder()`` is a Structured Streaming ``foreachBatch`` function that trains
the nodes on each micro-batch exactly once (``ctx.get_stream_feed()`` in ``map_fun``).

What differs from TFoS: the nodes of a job are one barrier stage of sparktrain's launcher
(registration with time-outs, failure detection, restarts), task 0 is the chief and the
parameter servers and the evaluator come last; in ``InputMode.SPARK`` the nodes start when
``train`` is called or ``inference``'s RDD is first used, with the data, which reaches them as
Arrow batches rather than through a multiprocessing queue; parameter servers and an evaluator
need ``InputMode.TENSORFLOW``, and ``driver_ps_nodes`` is refused.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = [
    "TFCluster",
    "TFManager",
    "TFNode",
    "TFParallel",
    "TFSparkNode",
    "compat",
    "dfutil",
    "gpu_info",
    "marker",
    "pipeline",
    "reservation",
    "util",
]


def __getattr__(name: str) -> ModuleType:
    # Each module loads on first use: a node's trainer process imports TFNode alone, not the
    # driver's TFCluster, and the pipeline module imports pyspark.ml (and NumPy) as it loads.
    if name in __all__:
        return importlib.import_module(f"sparktrain.tfos.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
