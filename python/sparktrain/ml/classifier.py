""":class:`Classifier`, a Spark ML ``Estimator`` that trains one of the engine's models through
:func:`sparktrain.train`, and :class:`ClassifierModel`, the ``Transformer`` it returns, which
scores in Spark tasks as :func:`sparktrain.predict` does.

Both run on the driver; what runs in the Spark tasks is in :mod:`sparktrain.ml.columns` (the
training feed) and :mod:`sparktrain.ml.scoring` (scoring).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.util import MLReadable, MLWritable

from sparktrain import _checks, fs, storage_options
from sparktrain.ml.columns import Layout, check_columns, training_frame, vector_width
from sparktrain.ml.params import EMBEDDING_MODELS, ClassifierParams
from sparktrain.ml.persistence import MODEL, Reader, Writer, copy_folder, join
from sparktrain.ml.scoring import Scorer
from sparktrain.training import FeatureSpec, Trainer, TrainResult

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

#: ``trainOptions`` keys that a param sets, or that the estimator sets itself.
_OWN_ARGUMENTS = {
    "batch_size": "batchSize",
    "buckets": "buckets",
    "classes": "numClasses",
    "dim": "dim",
    "epochs": "epochs",
    "hidden": "hidden",
    "label": "labelCol",
    "learning_rate": "learningRate",
    "model": "model",
    "num_workers": "numWorkers",
    "optimizer": "optimizer",
    "seed": "seed",
    "model_dir": "modelDir",
    "export_dir": "modelDir",
    "features": "featuresCol, featuresCols and categoricalCols",
    "data": "fit's DataFrame",
    "sharding": "fit's DataFrame (split by partitions)",
}

#: ``trainOptions`` that :func:`sparktrain.train` takes itself rather than the trainer.
_TRAIN_ONLY = {
    "steps",
    "eval_data",
    "eval_every",
    "tensorboard_dir",
    "log",
    "env",
    "max_restarts",
    "restart_backoff",
    "min_workers",
}

_local_base: str | None = None


def _local_model_dir() -> str:
    """A folder of this process's for the models of a local Spark master, whose executors
    share this machine; removed when the process ends."""
    global _local_base
    if _local_base is None:
        _local_base = tempfile.mkdtemp(prefix="sparktrain-ml-")
        atexit.register(shutil.rmtree, _local_base, True)
    return _local_base


class Classifier(Estimator["ClassifierModel"], ClassifierParams, MLWritable, MLReadable["Classifier"]):
    """Binary or multi-class classification on sparktrain's engine, as a Spark ML estimator.

    ``fit(df)`` trains ``model`` (``"logistic_regression"``, ``"mlp"``, ``"wide_deep"``,
    ``"deep_fm"``) on ``numWorkers`` Spark task slots in sync, with ``df``'s partitions as the
    trainers' input, and returns a :class:`ClassifierModel`.

    Features: ``featuresCol``, a vector column (``VectorAssembler``'s, dense or sparse) or an
    ``array<numeric>`` column; or, given a list of columns (``featuresCol=["a", "b"]``, kept
    as ``featuresCols``), those numeric columns. ``categoricalCols`` (integers or strings) are
    hashed into ``buckets`` ids each and embedded: the embedding models need at least one,
    the others take none. The label (``labelCol``) is 0/1 for two classes or a class id; the
    class count is ``numClasses``, else the label's ML attributes (``StringIndexer``'s), else
    the largest label plus one.

    Training: ``optimizer``, ``learningRate``, ``batchSize`` (per worker), ``epochs``,
    ``hidden``, ``dim``, ``seed``, and any other :func:`sparktrain.train` argument in
    ``trainOptions`` (``{"steps": 100, "momentum": 0.9, "log": False}``). Each fit trains in
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
        trainOptions: dict[str, Any] | None = None,
    ) -> Classifier:
        """Sets the params given (None leaves one as it is); returns this estimator."""
        self._set_params(self._input_kwargs)
        return self

    def _sources(self) -> tuple[str | None, list[str], list[str], str]:
        """(vector column or None, dense columns, categorical columns, label)."""
        dense = self.getFeaturesCols()
        vector = None if dense else self.getFeaturesCol()
        return vector, dense, self.getCategoricalCols(), self.getLabelCol()

    def _trainer_arguments(self) -> dict[str, Any]:
        """The arguments of :func:`sparktrain.train` that the params set, checked by building
        the trainers' :class:`~sparktrain.training.Trainer` here."""
        model = self.getOrDefault(self.model)
        categorical = self.getCategoricalCols()
        if model in EMBEDDING_MODELS and not categorical:
            need = f"model={model!r} embeds categorical columns: name one"
            raise _checks.refuse("categoricalCols", categorical, need)
        if model not in EMBEDDING_MODELS and categorical:
            need = f"model={model!r} reads dense features only: use wide_deep or deep_fm"
            raise _checks.refuse("categoricalCols", categorical, need)
        if model not in EMBEDDING_MODELS and self.isDefined(self.dim):
            raise _checks.refuse("dim", self.getOrDefault(self.dim), f"model={model!r} has no embeddings")
        options = dict(self.getOrDefault(self.trainOptions))
        for key in options:
            if key in _OWN_ARGUMENTS:
                raise _checks.refuse("trainOptions", options, f"{key!r} is set by {_OWN_ARGUMENTS[key]}")
        arguments: dict[str, Any] = {
            "model": model,
            "optimizer": self.getOrDefault(self.optimizer),
            "learning_rate": self.getLearningRate(),
            "batch_size": self.getOrDefault(self.batchSize),
            "seed": self.getOrDefault(self.seed),
            "hidden": self.getOrDefault(self.hidden) if self.isDefined(self.hidden) else None,
            "dim": self.getOrDefault(self.dim) if self.isDefined(self.dim) else None,
        }
        engine = {k: v for k, v in options.items() if k not in _TRAIN_ONLY}
        Trainer(None, **arguments, **engine)
        return {**arguments, **options}

    def _model_dir(self, spark: SparkSession) -> str:
        """A new folder for this fit, under ``modelDir``."""
        if self.isDefined(self.modelDir):
            base = str(self.getOrDefault(self.modelDir))
        elif str(spark.sparkContext.master).startswith("local"):
            base = _local_model_dir()
        else:
            need = "set a folder every executor reaches (hdfs://..., s3://...): the trainers write there"
            raise _checks.refuse("modelDir", None, need)
        return join(base, f"{self.uid}-{uuid.uuid4().hex[:12]}")

    def _fit(self, dataset: DataFrame) -> ClassifierModel:
        from sparktrain.training import train

        spark = dataset.sparkSession
        vector, dense, categorical, label = self._sources()
        arguments = self._trainer_arguments()
        check_columns(dataset.schema, vector, dense, categorical, label)
        model_dir = self._model_dir(spark)
        # From here on Spark jobs may run: every param has been checked.
        width = vector_width(dataset, vector) if vector is not None else len(dense)
        if self.isDefined(self.numClasses):
            classes = int(self.getOrDefault(self.numClasses))
        else:
            classes = _classes(dataset, label)
        layout = Layout.of(vector, width, dense, categorical, label, int(self.getOrDefault(self.buckets)))
        result = train(
            spark,
            training_frame(dataset, layout),
            features=layout.spec,
            num_workers=self.getNumWorkers(),
            epochs=int(self.getOrDefault(self.epochs)),
            model_dir=model_dir,
            classes=1 if classes == 2 else classes,
            **arguments,
        )
        assert result.export_dir is not None, "train exports into model_dir/export"
        fitted = ClassifierModel._of(result.export_dir, layout.spec, result)
        self._copyValues(fitted)
        fitted._set(numClasses=classes)
        return fitted

    def _extra_metadata(self) -> dict[str, Any]:
        return {}

    def _save_data(self, path: str) -> None:
        pass

    def _load_data(self, path: str, extra: dict[str, Any]) -> None:
        pass

    def write(self) -> Writer:
        """A writer on sparktrain's storage layer (any storage URL)."""
        return Writer(self)

    @classmethod
    def read(cls) -> Reader[Classifier]:
        """A reader on sparktrain's storage layer."""
        return Reader(cls)


def _classes(dataset: DataFrame, label: str) -> int:
    """The class count of ``label``: its ML attributes' values (``StringIndexer`` writes them),
    else the largest label plus one (at least 2)."""
    from pyspark.sql import functions

    attributes: Any = dataset.schema[label].metadata.get("ml_attr", {})
    if attributes.get("type") == "nominal":
        if isinstance(attributes.get("num_vals"), int):
            return max(2, int(attributes["num_vals"]))
        if isinstance(attributes.get("vals"), list):
            return max(2, len(attributes["vals"]))
    largest = dataset.agg(functions.max(label)).first()
    if largest is None or largest[0] is None:
        raise _checks.refuse("labelCol", label, "has no values to count the classes of: set numClasses")
    return max(2, int(largest[0]) + 1)


class ClassifierModel(Model, ClassifierParams, MLWritable, MLReadable["ClassifierModel"]):
    """A model that :class:`Classifier` trained, as a Spark ML ``Transformer``.

    ``transform(df)`` appends ``rawPredictionCol`` (a vector of logits; ``[-logit, logit]``
    for two classes), ``probabilityCol`` (a vector of class probabilities) and
    ``predictionCol`` (the class, a double), scored in Spark tasks by the exported model (the
    engine in each Python worker, on Arrow batches), so ``BinaryClassificationEvaluator`` and
    ``MulticlassClassificationEvaluator`` take the result as they take Spark's own models'.
    The column params may be changed after fitting (the columns are matched by position).

    ``exportDir`` is the exported model (:func:`sparktrain.predict` and
    :func:`sparktrain.embeddings` read it too); ``write().save(path)`` copies it under
    ``path``, and :meth:`load` scores from there.
    """

    def __init__(self) -> None:
        super().__init__()
        self._export_dir: str | None = None
        self._spec: FeatureSpec | None = None
        self._result: TrainResult | None = None

    @classmethod
    def _of(cls, export_dir: str, spec: FeatureSpec, result: TrainResult | None) -> ClassifierModel:
        model = cls()
        model._export_dir, model._spec, model._result = export_dir, spec, result
        return model

    @property
    def exportDir(self) -> str:
        """The folder of the exported model."""
        if self._export_dir is None:
            raise _checks.refuse("exportDir", None, "this model was neither fitted nor loaded")
        return self._export_dir

    @property
    def trainResult(self) -> TrainResult | None:
        """What training did (None for a loaded model)."""
        return self._result

    @property
    def numFeatures(self) -> int:
        """How many dense values the model takes."""
        return len(self._feature_spec().dense)

    def getNumClasses(self) -> int:
        """How many classes the model tells apart."""
        return int(self.getOrDefault(self.numClasses))

    def _feature_spec(self) -> FeatureSpec:
        if self._spec is None:
            raise _checks.refuse("exportDir", None, "this model was neither fitted nor loaded")
        return self._spec

    def _transform(self, dataset: DataFrame) -> DataFrame:
        from pyspark.ml.linalg import VectorUDT
        from pyspark.sql.types import DoubleType, StructField, StructType

        spec = self._feature_spec()
        dense = self.getFeaturesCols()
        vector = None if dense else self.getFeaturesCol()
        categorical, label = self.getCategoricalCols(), self.getLabelCol()
        columns = tuple(n for n, _ in spec.categorical)
        stored = Layout(None, len(spec.dense), spec.dense, columns, spec.label, spec)
        layout = stored.reading(vector, dense, categorical, label)
        check_columns(dataset.schema, vector, dense, categorical, None)
        outputs = (self.getRawPredictionCol(), self.getProbabilityCol(), self.getPredictionCol())
        for param, name in zip(("rawPredictionCol", "probabilityCol", "predictionCol"), outputs, strict=True):
            _checks.check(name not in dataset.columns, param, name, "the DataFrame already has this column")
        _checks.check(len(set(outputs)) == 3, "predictionCol", outputs, "the three outputs need three names")
        storage = storage_options.of_session(dataset.sparkSession)
        export_dir = self.exportDir
        stamp = str(fs.status(join(export_dir, "model.safetensors")).modified_ms)
        scorer = Scorer(export_dir, stamp, layout, self.getNumClasses(), self.getThreshold(), outputs)
        schema = StructType(
            [
                *dataset.schema.fields,
                StructField(outputs[0], VectorUDT(), False),
                StructField(outputs[1], VectorUDT(), False),
                StructField(outputs[2], DoubleType(), False),
            ]
        )

        def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            storage_options.apply(storage)
            for batch in batches:
                yield scorer(batch)

        return dataset.mapInArrow(score, schema)

    def _extra_metadata(self) -> dict[str, Any]:
        return {"format": 1}

    def _save_data(self, path: str) -> None:
        copy_folder(self.exportDir, join(path, MODEL))

    def _load_data(self, path: str, extra: dict[str, Any]) -> None:
        self._export_dir = join(path, MODEL)
        config = json.loads(fs.read_bytes(join(self._export_dir, "model.json")))
        self._spec = FeatureSpec.from_json(json.dumps(config["features"]))

    def write(self) -> Writer:
        """A writer on sparktrain's storage layer (any storage URL)."""
        return Writer(self)

    @classmethod
    def read(cls) -> Reader[ClassifierModel]:
        """A reader on sparktrain's storage layer."""
        return Reader(cls)


__all__ = ["Classifier", "ClassifierModel"]
