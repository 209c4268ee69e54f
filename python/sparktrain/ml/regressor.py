""":class:`Regressor`, a Spark ML ``Estimator`` that trains one of the engine's models on a
numeric label with mean squared error through :func:`sparktrain.train`, and
:class:`RegressorModel`, the ``Transformer`` it returns, which appends the model's output in
Spark tasks.

Both run on the driver; what runs in the Spark tasks is in :mod:`sparktrain.ml.columns` (the
training feed) and :mod:`sparktrain.ml.scoring` (scoring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.util import MLReadable, MLWritable

from sparktrain.ml.base import Fitted, Fitting
from sparktrain.ml.params import RegressorParams
from sparktrain.ml.persistence import Reader, Writer
from sparktrain.ml.scoring import Regression

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class Regressor(Estimator["RegressorModel"], Fitting, RegressorParams, MLWritable, MLReadable["Regressor"]):
    """Regression on sparktrain's engine, as a Spark ML estimator: the model's one output is
    fitted to the label (any number) by mean squared error.

    The params are :class:`~sparktrain.ml.Classifier`'s, less those of classes
    (``probabilityCol``, ``rawPredictionCol``, ``threshold``, ``numClasses``): the features
    (``featuresCol`` or ``featuresCols``, ``categoricalCols`` hashed into ``buckets`` ids),
    ``labelCol``, ``predictionCol``, the ``model`` and its shape, the training settings and
    ``trainOptions``. ``fit(df)`` returns a :class:`RegressorModel`, which
    ``RegressionEvaluator`` takes as it takes Spark's own regressors.
    """

    OWN: ClassVar[dict[str, str]] = {
        "classes": "the Regressor (one output)",
        "loss": "the Regressor (mean squared error)",
    }

    @keyword_only
    def __init__(
        self,
        *,
        featuresCol: str | list[str] | None = None,
        featuresCols: list[str] | None = None,
        categoricalCols: list[str] | None = None,
        buckets: int | None = None,
        labelCol: str | None = None,
        predictionCol: str | None = None,
        model: str | None = None,
        hidden: list[int] | None = None,
        dim: int | None = None,
        optimizer: str | None = None,
        learningRate: float | None = None,
        batchSize: int | None = None,
        epochs: int | None = None,
        numWorkers: int | None = None,
        seed: int | None = None,
        modelDir: str | None = None,
        shardTables: str | None = None,
        tableBudgetBytes: int | None = None,
        trainOptions: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._set_params(self._input_kwargs)

    @keyword_only
    def setParams(
        self,
        *,
        featuresCol: str | list[str] | None = None,
        featuresCols: list[str] | None = None,
        categoricalCols: list[str] | None = None,
        buckets: int | None = None,
        labelCol: str | None = None,
        predictionCol: str | None = None,
        model: str | None = None,
        hidden: list[int] | None = None,
        dim: int | None = None,
        optimizer: str | None = None,
        learningRate: float | None = None,
        batchSize: int | None = None,
        epochs: int | None = None,
        numWorkers: int | None = None,
        seed: int | None = None,
        modelDir: str | None = None,
        shardTables: str | None = None,
        tableBudgetBytes: int | None = None,
        trainOptions: dict[str, Any] | None = None,
    ) -> Regressor:
        """Sets the params given (None leaves one as it is); returns this estimator."""
        self._set_params(self._input_kwargs)
        return self

    def _fit(self, dataset: DataFrame) -> RegressorModel:
        arguments, model_dir = self._prepare(dataset, loss="mean_squared_error")
        result, layout = self._train(dataset, arguments, model_dir)
        assert result.export_dir is not None
        fitted = RegressorModel._of(result.export_dir, layout.spec, result)
        self._copyValues(fitted)
        return fitted

    def write(self) -> Writer:
        """A writer on sparktrain's storage layer (any storage URL)."""
        return Writer(self)

    @classmethod
    def read(cls) -> Reader[Regressor]:
        """A reader on sparktrain's storage layer."""
        return Reader(cls)


class RegressorModel(Model, Fitted, RegressorParams, MLWritable, MLReadable["RegressorModel"]):
    """A model that :class:`Regressor` trained, as a Spark ML ``Transformer``: ``transform(df)``
    appends ``predictionCol`` (a double), scored in Spark tasks by the exported model.
    ``exportDir``, ``write().save(path)`` and ``load`` work as
    :class:`~sparktrain.ml.ClassifierModel`'s do."""

    @classmethod
    def _of(cls, export_dir: str, spec: Any, result: Any) -> RegressorModel:
        model = cls()
        model._adopt(export_dir, spec, result)
        return model

    def _transform(self, dataset: DataFrame) -> DataFrame:
        from pyspark.sql.types import DoubleType, StructField, StructType

        output = self.getPredictionCol()
        layout, storage, version = self._scoring(dataset, {"predictionCol": output})
        scorer = Regression(self.exportDir, version, layout, output)
        schema = StructType([*dataset.schema.fields, StructField(output, DoubleType(), False)])
        return self._scored(dataset, scorer, schema, storage)

    def write(self) -> Writer:
        """A writer on sparktrain's storage layer (any storage URL)."""
        return Writer(self)

    @classmethod
    def read(cls) -> Reader[RegressorModel]:
        """A reader on sparktrain's storage layer."""
        return Reader(cls)


__all__ = ["Regressor", "RegressorModel"]
