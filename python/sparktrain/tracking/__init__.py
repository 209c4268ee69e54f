"""Experiment tracking with MLflow: training jobs logged as MLflow runs, exported models logged
and registered as MLflow models. Imported on the driver; :mod:`~sparktrain.tracking.callback`
also in the chief's trainer process.

- :class:`MLflowCallback` logs a job (:func:`sparktrain.train`, ``Cluster.run``,
  ``ctx.trainer(...).fit``, the :mod:`sparktrain.ml` estimators) to an MLflow run: the
  driver opens the run, the chief logs its hyperparameters, metrics and artifacts, and a
  restarted job goes on in the same run.
- :func:`log_model` logs an export with a ``pyfunc`` flavor, signature and input example, so
  that ``mlflow.pyfunc.load_model(uri).predict(df)`` and ``mlflow.pyfunc.spark_udf`` score it.

MLflow is optional: ``pip install 'sparktrain[mlflow]'`` (the ``mlflow-skinny`` client; the
full ``mlflow`` package serves as well). Without it nothing here is imported unless asked for,
and asking raises :class:`~sparktrain.errors.MissingDependencyError` naming the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparktrain.tracking.callback import MLflowCallback
    from sparktrain.tracking.models import log_model

__all__ = ["MLflowCallback", "log_model"]

# The chief's trainer unpickles the callback, which imports this package: it must not load the
# driver's side (models, and what it imports) on the way.
_NAMES = {"MLflowCallback": "sparktrain.tracking.callback", "log_model": "sparktrain.tracking.models"}


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'sparktrain.tracking' has no attribute {name!r}")
