"""Spark ML on sparktrain's engine: :class:`Classifier` and :class:`Regressor`, ``Estimator``\\s
whose ``fit(df)`` trains through :func:`sparktrain.train`, and :class:`ClassifierModel` and
:class:`RegressorModel`, the ``Transformer``\\s that score in Spark tasks. They work inside
``Pipeline`` with Spark's feature transformers (``VectorAssembler``, ``StringIndexer``...), in
``CrossValidator`` and ``TrainValidationSplit`` with Spark's evaluators, and save to and load
from any storage URL through sparktrain's storage layer (``write().save(path)``,
``ClassifierModel.load(path)``, ``PipelineModel.load(path)``). Imported on the driver and in Spark
tasks.

The modules: :mod:`~sparktrain.ml.params` (the params and their checks),
:mod:`~sparktrain.ml.base` (what every estimator and model shares, on the driver),
:mod:`~sparktrain.ml.classifier` and :mod:`~sparktrain.ml.regressor` (the estimators and
their models),
:mod:`~sparktrain.ml.columns` (features from columns, also in the training feed's tasks),
:mod:`~sparktrain.ml.scoring` (in the scoring tasks) and :mod:`~sparktrain.ml.persistence`.
"""

from __future__ import annotations

from sparktrain._deps import require_spark

require_spark("sparktrain.ml", arrow_udfs=True)

from sparktrain.ml.classifier import Classifier, ClassifierModel  # noqa: E402
from sparktrain.ml.regressor import Regressor, RegressorModel  # noqa: E402

__all__ = ["Classifier", "ClassifierModel", "Regressor", "RegressorModel"]
