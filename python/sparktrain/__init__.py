"""sparktrain: distributed training on Spark clusters, with a Rust core.

Modules:

- :mod:`sparktrain.cluster`: ``Cluster.run``, one trainer per Spark task with a chief,
  ``TF_CONFIG``, failure detection and a synchronized exit.
- :mod:`sparktrain.tfrecord`: TFRecord files to and from Arrow, on local paths and HDFS.
- :mod:`sparktrain.fs`: file-system operations on local paths, ``hdfs://`` and ``viewfs://``.
- :mod:`sparktrain.errors`: the exceptions sparktrain raises.
"""

from __future__ import annotations

from sparktrain import errors, fs, tfrecord
from sparktrain._native import __version__
from sparktrain.cluster import Cluster

__all__ = ["Cluster", "__version__", "errors", "fs", "tfrecord"]
