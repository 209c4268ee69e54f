"""Spark ML on sparktrain's engine: :class:`Classifier`, an ``Estimator`` whose ``fit(df)``
trains through :func:`sparktrain.train`, and :class:`ClassifierModel`, the ``Transformer``
that scores in Spark tasks. Both work inside ``Pipeline`` with Spark's feature transformers
(``VectorAssembler``, ``StringIndexer``...), in ``CrossValidator`` and
``TrainValidationSplit`` with Spark's evaluators, and save to and load from any storage URL
through sparktrain's storage layer (``write().save(path)``, ``ClassifierModel.load(path)``,
``PipelineModel.load(path)``).

The modules: :mod:`~sparktrain.ml.params` (the params and their checks),
:mod:`~sparktrain.ml.classifier` (the estimator and the model, on the driver),
:mod:`~sparktrain.ml.columns` (features from columns, also in the training feed's tasks),
:mod:`~sparktrain.ml.scoring` (in the scoring tasks) and :mod:`~sparktrain.ml.persistence`.
"""

from __future__ import annotations

from sparktrain._deps import require_spark

require_spark("sparktrain.ml", arrow_udfs=True)

from sparktrain.ml.classifier import Classifier, ClassifierModel  # noqa: E402

__all__ = ["Classifier", "ClassifierModel"]
