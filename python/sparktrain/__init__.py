"""sparktrain: distributed training on Spark clusters, with a Rust core. Imported anywhere; every
name loads on first use.

Modules:

- :mod:`sparktrain.cluster`: ``Cluster.run``, one trainer per Spark task with a chief,
  ``TF_CONFIG``, failure detection and a synchronized exit.
- :mod:`sparktrain.tfos`: TensorFlowOnSpark's API on top of the launcher.
- :mod:`sparktrain.training`: synchronous training on the Rust engine (``ctx.trainer``), and
  :func:`train`, the whole job in one call.
- :mod:`sparktrain.prediction`: :func:`predict`, scoring a DataFrame with an exported model.
- :mod:`sparktrain.ml`: Spark ML's ``Estimator`` and ``Model`` on the engine, for ``Pipeline``
  and ``CrossValidator``.
- :mod:`sparktrain.contents`: :func:`embeddings`, an exported model's embedding tables as a
  DataFrame.
- :mod:`sparktrain.servable`: :func:`export_onnx`, the exported model as ONNX for serving, and
  :func:`onnx_inputs`, the inputs it takes.
- :mod:`sparktrain.tracking`: MLflow runs of training jobs, and exported models as MLflow
  models.
- :mod:`sparktrain.tfrecord`: TFRecord files to and from Arrow, on local paths and HDFS.
- :mod:`sparktrain.fs`: file-system operations on local paths, ``hdfs://`` and ``viewfs://``.
- :mod:`sparktrain.errors`: the exceptions sparktrain raises.
- :mod:`sparktrain.deploy`: the ``sparktrain`` command: ``submit``, ``pack`` and ``doctor``.
- :func:`jar_path`: the jar the wheel carries (the JVM TFRecord format), for ``spark.jars``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparktrain import errors, fs, tfrecord, training
    from sparktrain.cluster import Cluster
    from sparktrain.contents import embeddings
    from sparktrain.jvm import jar_path
    from sparktrain.prediction import predict
    from sparktrain.servable import export_onnx, onnx_inputs
    from sparktrain.training import train

__all__ = [
    "Cluster",
    "__version__",
    "embeddings",
    "errors",
    "export_onnx",
    "fs",
    "jar_path",
    "onnx_inputs",
    "predict",
    "tfrecord",
    "train",
    "training",
]

_SUBMODULES = {
    "cluster",
    "contents",
    "data",
    "errors",
    "fs",
    "ml",
    "prediction",
    "servable",
    "tfos",
    "tfrecord",
    "torch",
    "tracking",
    "training",
}
#: Names handed on from the module that defines them.
_NAMES = {
    "Cluster": "sparktrain.cluster.driver.launcher",
    "jar_path": "sparktrain.jvm",
    "train": "sparktrain.training.driver",
    "predict": "sparktrain.prediction",
    "embeddings": "sparktrain.contents",
    "export_onnx": "sparktrain.servable",
    "onnx_inputs": "sparktrain.servable",
    "__version__": "sparktrain._native",
}


def __getattr__(name: str) -> Any:
    # Everything loads on first use: a trainer process that only needs the launcher starts
    # without importing pyarrow and the TFRecord stack, and no task or trainer loads the
    # driver's modules by importing this package.
    if name in _SUBMODULES:
        return importlib.import_module(f"sparktrain.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'sparktrain' has no attribute {name!r}")
