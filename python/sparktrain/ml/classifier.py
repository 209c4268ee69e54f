""":class:`Classifier`, a Spark ML ``Estimator`` that trains one of the engine's models through
:func:`sparktrain.train`, and :class:`ClassifierModel`, the ``Transformer`` it returns, which
scores in Spark tasks as :func:`sparktrain.predict` does.

Both run on the driver; what runs in the Spark tasks is in :mod:`sparktrain.ml.columns` (the
training feed) and :mod:`sparktrain.ml.scoring` (scoring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.util import MLReadable, MLWritable

from sparktrain import _checks
from sparktrain.ml.base import Fitted, Fitting
from sparktrain.ml.params import EMBEDDING_MODELS, ClassifierParams
from sparktrain.ml.persistence import Reader, Writer
from sparktrain.ml.scoring import Scorer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class Classifier(
    Estimator["ClassifierModel"], Fitting, ClassifierParams, MLWritable, MLReadable["Classifier"]
):
    """Binary or multi-class classification on sparktrain's engine, as a Spark ML estimator.

    ``fit(df)`` trains ``model`` (``"logistic_regression"``, ``"mlp"``, ``"wide_deep"``,
    ``"deep_fm"``, ``"dcn"``) on ``numWorkers`` Spark task slots in sync, with ``df``'s
    partitions as the trainers' input, and returns a :class:`ClassifierModel`.

    Features: ``featuresCol``, a vector column (``VectorAssembler``'s, dense or sparse) or an
    ``array<numeric>`` column; or, given a list of columns (``featuresCol=["a", "b"]``, kept
    as ``featuresCols``), those numeric columns. ``categoricalCols`` (integers or strings) are
    hashed into ``buckets`` ids each and embedded: the embedding models need at least one,
    the others take none. The label (``labelCol``) is 0/1 for two classes or a class id; the
    class count is ``numClasses``, else the label's ML attributes (``StringIndexer``'s), else
    the largest label plus one.

    Training: ``optimizer``, ``learningRate``, ``batchSize`` (per worker), ``epochs``,
    ``hidden``, ``dim``, ``seed``, and any other :func:`sparktrain.train` argument in
    ``trainOptions`` (``{"steps": 100, "momentum": 0.9, "class_weight": {1: 5.0},
    "lr_schedule": {...}, "log": False}``). Each fit trains in
    a new folder under ``modelDir``, which every executor must reach (``hdfs://``, ``s3://``);
    on a local master it may be left unset (a temporary folder of the driver's).

    Every param is checked when it is set and again against the DataFrame's schema in
    ``fit``, before any Spark job: :class:`~sparktrain.errors.InvalidArgumentError` names it.
    """

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
        probabilityCol: str | None = None,
        rawPredictionCol: str | None = None,
        threshold: float | None = None,
        numClasses: int | None = None,
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
        probabilityCol: str | None = None,
        rawPredictionCol: str | None = None,
        threshold: float | None = None,
        numClasses: int | None = None,
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
    ) -> Classifier:
        """Sets the params given (None leaves one as it is); returns this estimator."""
        self._set_params(self._input_kwargs)
        return self

    OWN: ClassVar[dict[str, str]] = {"classes": "numClasses", "loss": "the Classifier (cross-entropy)"}

    def _fit(self, dataset: DataFrame) -> ClassifierModel:
        arguments, model_dir = self._prepare(dataset)
        # From here on Spark jobs may run: every param has been checked.
        if self.isDefined(self.numClasses):
            classes = int(self.getOrDefault(self.numClasses))
        else:
            classes = _classes(dataset, self.getLabelCol())
        model = self.getOrDefault(self.model)
        if classes > 2 and model in EMBEDDING_MODELS:
            raise _checks.refuse(
                "numClasses",
                classes,
                f"{model} is a binary model: more classes need 'mlp' or 'logistic_regression'",
            )
        result, layout = self._train(dataset, arguments, model_dir, classes=1 if classes == 2 else classes)
        assert result.export_dir is not None
        fitted = ClassifierModel._of(result.export_dir, layout.spec, result)
        self._copyValues(fitted)
        fitted._set(numClasses=classes)
        return fitted

    def write(self) -> Writer:
        """A writer on sparktrain's storage layer (any storage URL)."""
        return Writer(self)

    @classmethod
    def read(cls) -> Reader[Classifier]:
        """A reader on sparktrain's storage layer."""
        return Reader(cls)


def _classes(dataset: DataFrame, label: str) -> int:
    """The class count of ``label``: its ML attributes' values (``StringIndexer`` writes them),
    else the largest label plus one (at least 2), found in the same pass that refuses labels
    that are not class ids (negative, or not whole numbers: the engine would train on 0.3 as
    a soft label, which a classifier's data does not mean)."""
    from pyspark.sql import functions as F

    from sparktrain import _frames

    attributes: Any = dataset.schema[label].metadata.get("ml_attr", {})
    if attributes.get("type") == "nominal":
        if isinstance(attributes.get("num_vals"), int):
            return max(2, int(attributes["num_vals"]))
        if isinstance(attributes.get("vals"), list):
            return max(2, len(attributes["vals"]))
    column = _frames.column(label)
    found = dataset.agg(
        F.max(column), F.min(column), F.max(F.when(column != F.floor(column), column))
    ).first()
    if found is None or found[0] is None:
        raise _checks.refuse("labelCol", label, "has no values to count the classes of: set numClasses")
    largest, smallest, fractional = found
    if fractional is not None:
        raise _checks.refuse(
            "labelCol", label, f"holds {fractional}, not a class id (0, 1, ...): use a Regressor for numbers"
        )
    if smallest < 0:
        raise _checks.refuse(
            "labelCol", label, f"holds {smallest}: class ids start at 0 (StringIndexer makes them)"
        )
    return max(2, int(largest) + 1)


class ClassifierModel(Model, Fitted, ClassifierParams, MLWritable, MLReadable["ClassifierModel"]):
    """A model that :class:`Classifier` trained, as a Spark ML ``Transformer``.

    ``transform(df)`` appends ``rawPredictionCol`` (a vector of logits; ``[-logit, logit]``
    for two classes), ``probabilityCol`` (a vector of class probabilities) and
    ``predictionCol`` (the class, a double), scored in Spark tasks by the exported model (the
    engine in each Python worker, on Arrow batches), so ``BinaryClassificationEvaluator`` and
    ``MulticlassClassificationEvaluator`` take the result as they take Spark's own models'.
    The column params may be changed after fitting (the columns are matched by position).

    ``exportDir`` is the exported model (:func:`sparktrain.predict` and
    :func:`sparktrain.embeddings` read it too); ``write().save(path)`` copies it under
    ``path``, and ``ClassifierModel.load(path)`` scores from there.
    """

    @classmethod
    def _of(cls, export_dir: str, spec: Any, result: Any) -> ClassifierModel:
        model = cls()
        model._adopt(export_dir, spec, result)
        return model

    def getNumClasses(self) -> int:
        """How many classes the model tells apart."""
        return int(self.getOrDefault(self.numClasses))

    def _transform(self, dataset: DataFrame) -> DataFrame:
        from pyspark.ml.linalg import VectorUDT
        from pyspark.sql.types import DoubleType, StructField, StructType

        outputs = {
            "rawPredictionCol": self.getRawPredictionCol(),
            "probabilityCol": self.getProbabilityCol(),
            "predictionCol": self.getPredictionCol(),
        }
        layout, storage, version = self._scoring(dataset, outputs)
        raw, probability, prediction = outputs.values()
        scorer = Scorer(
            self.exportDir,
            version,
            layout,
            self.getNumClasses(),
            self.getThreshold(),
            (raw, probability, prediction),
        )
        schema = StructType(
            [
                *dataset.schema.fields,
                StructField(raw, VectorUDT(), False),
                StructField(probability, VectorUDT(), False),
                StructField(prediction, DoubleType(), False),
            ]
        )
        return self._scored(dataset, scorer, schema, storage)

    def write(self) -> Writer:
        """A writer on sparktrain's storage layer (any storage URL)."""
        return Writer(self)

    @classmethod
    def read(cls) -> Reader[ClassifierModel]:
        """A reader on sparktrain's storage layer."""
        return Reader(cls)


__all__ = ["Classifier", "ClassifierModel"]
