"""Synchronous data-parallel training on sparktrain's Rust engine (candle). Imported on the driver
and in the trainer process.

Inside ``Cluster.run``, ``ctx.trainer(...)`` gives each trainer a :class:`Trainer` whose
``fit`` trains together with every other trainer: gradients are averaged over the ring each
step, and the chief writes checkpoints, TensorBoard event files and the exported model.
:func:`train` runs such a job from the driver in one call; :func:`sparktrain.predict` scores a
DataFrame with the exported model.

Models: ``"logistic_regression"``, ``"mlp"``, ``"wide_deep"``, ``"deep_fm"`` and ``"dcn"``
(DCN-v2), as binary or softmax classifiers or, with ``loss="mean_squared_error"``, regressors;
categorical, crossed and multi-hot (list) columns feed the embedding models. Optimizers:
``"sgd"``, ``"momentum"``, ``"adam"``, ``"adamw"``, ``"adagrad"`` and ``"ftrl"``, plus
``wide_optimizer`` for the wide part of Wide&Deep and DeepFM (``"ftrl"``, as Keras's
``WideDeepModel`` trains its linear part). Every step's gradient can take L1/L2 penalties per
group, global-norm clipping and a learning-rate schedule; ``fit`` stops early on an evaluation
metric and keeps the best model, and the chief's ``on_eval`` hook can stop every trainer.

Input: a path (a folder, file or glob of TFRecord or Parquet files, on any storage URL), split
among the trainers by whole files (``sharding="static"``) or handed out file by file by the
driver (``sharding="dynamic"``: fast trainers read more); or, with
``Cluster.run(..., input_mode="spark", data=df)``, each trainer's partition of the DataFrame
(``data=None``).

The modules: :mod:`~sparktrain.training.driver` (:func:`train` and :class:`TrainResult`, on
the driver), :mod:`~sparktrain.training.trainer` (:class:`Trainer`, in each trainer),
:mod:`~sparktrain.training.results` (the values that travel between them) and
:mod:`~sparktrain.training.callbacks` (:class:`Callback`, the hooks an experiment tracker
such as :class:`sparktrain.tracking.MLflowCallback` follows training with). The trainer process
imports the last two alone, so :func:`train` and :class:`TrainResult` load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sparktrain import _native
from sparktrain.training.callbacks import Callback
from sparktrain.training.results import FeatureSpec, FitResult, Metrics
from sparktrain.training.trainer import DEFAULTS, Trainer

if TYPE_CHECKING:
    from sparktrain.training.driver import TrainResult, train

#: Models the engine builds.
MODELS: tuple[str, ...] = tuple(_native.MODELS)
#: Optimizers, and their default learning rates.
LEARNING_RATES: dict[str, float] = dict(_native.LEARNING_RATES)
#: Ids a categorical column is hashed into when the feature spec is inferred.
DEFAULT_BUCKETS: int = _native.DEFAULT_BUCKETS

__all__ = [
    "DEFAULTS",
    "DEFAULT_BUCKETS",
    "LEARNING_RATES",
    "MODELS",
    "Callback",
    "FeatureSpec",
    "FitResult",
    "Metrics",
    "TrainResult",
    "Trainer",
    "train",
]


def __getattr__(name: str) -> Any:
    if name in ("train", "TrainResult"):
        return getattr(importlib.import_module("sparktrain.training.driver"), name)
    raise AttributeError(f"module 'sparktrain.training' has no attribute {name!r}")
