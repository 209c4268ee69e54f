"""What every sparktrain estimator and model shares, on the driver: checking the params and
training through :func:`sparktrain.train` (:class:`Fitting`), and the fitted model's export
folder, feature layout and persistence (:class:`Fitted`). :mod:`sparktrain.ml.classifier` and
:mod:`sparktrain.ml.regressor` add what is their own: the loss, the class count, the output
columns.
Runs on the driver."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import uuid
from typing import TYPE_CHECKING, Any, ClassVar

from sparktrain import _checks, _frames, exported, fs, prediction, storage_options
from sparktrain.ml.columns import Layout, check_columns, training_frame, vector_width
from sparktrain.ml.params import EMBEDDING_MODELS, CommonParams
from sparktrain.ml.persistence import MODEL, copy_folder, join
from sparktrain.ml.scoring import Regression, Scorer
from sparktrain.training import FeatureSpec, Trainer, TrainResult

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

#: ``trainOptions`` keys that a param sets, or that the estimator sets itself.
OWN_ARGUMENTS = {
    "batch_size": "batchSize",
    "buckets": "buckets",
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
    "shard_tables": "shardTables",
    "table_budget_bytes": "tableBudgetBytes",
    "export_dir": "modelDir",
    "features": "featuresCol, featuresCols and categoricalCols",
    "data": "fit's DataFrame",
    "sharding": "fit's DataFrame (split by partitions)",
}

#: ``trainOptions`` that :func:`sparktrain.train` takes itself rather than the trainer.
TRAIN_ONLY = {
    "steps",
    "eval_data",
    "eval_every",
    "tensorboard_dir",
    "log",
    "env",
    "max_restarts",
    "restart_backoff",
    "min_workers",
    "early_stopping",
    "on_eval",
    "callbacks",
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


class Fitting(CommonParams):
    """An estimator's side: the params checked, then training through
    :func:`sparktrain.train`. ``OWN`` names the ``trainOptions`` keys the estimator sets
    itself, with what sets them."""

    OWN: ClassVar[dict[str, str]] = {}

    def _sources(self) -> tuple[str | None, list[str], list[str], str]:
        """(vector column or None, dense columns, categorical columns, label)."""
        dense = self.getFeaturesCols()
        vector = None if dense else self.getFeaturesCol()
        return vector, dense, self.getCategoricalCols(), self.getLabelCol()

    def _trainer_arguments(self, **fixed: Any) -> dict[str, Any]:
        """The arguments of :func:`sparktrain.train` that the params and ``fixed`` (what the
        estimator sets itself) give, checked by building the trainers' ``Trainer`` here."""
        model = self.getOrDefault(self.model)
        categorical = self.getCategoricalCols()
        if model in EMBEDDING_MODELS and not categorical:
            need = f"model={model!r} embeds categorical columns: name one"
            raise _checks.refuse("categoricalCols", categorical, need)
        if model not in EMBEDDING_MODELS and categorical:
            need = f"model={model!r} reads dense features only: use one of {', '.join(EMBEDDING_MODELS)}"
            raise _checks.refuse("categoricalCols", categorical, need)
        if model not in EMBEDDING_MODELS and self.isDefined(self.dim):
            raise _checks.refuse("dim", self.getOrDefault(self.dim), f"model={model!r} has no embeddings")
        options = dict(self.getOrDefault(self.trainOptions))
        own = {**OWN_ARGUMENTS, **self.OWN}
        for key in options:
            if key in own:
                raise _checks.refuse("trainOptions", options, f"{key!r} is set by {own[key]}")
        arguments: dict[str, Any] = {
            "model": model,
            "optimizer": self.getOrDefault(self.optimizer),
            "learning_rate": self.getLearningRate(),
            "batch_size": self.getOrDefault(self.batchSize),
            "seed": self.getOrDefault(self.seed),
            "hidden": self.getOrDefault(self.hidden) if self.isDefined(self.hidden) else None,
            "dim": self.getOrDefault(self.dim) if self.isDefined(self.dim) else None,
            "shard_tables": self.getOrDefault(self.shardTables),
            "table_budget_bytes": self.getOrDefault(self.tableBudgetBytes)
            if self.isDefined(self.tableBudgetBytes)
            else None,
            **fixed,
        }
        engine = {k: v for k, v in options.items() if k not in TRAIN_ONLY}
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

    def _prepare(self, dataset: DataFrame, **fixed: Any) -> tuple[dict[str, Any], str]:
        """Checks every param against ``dataset``'s schema before any Spark job: returns the
        arguments of :func:`sparktrain.train` (with ``fixed``, set by the estimator) and the
        fit's new folder under ``modelDir``."""
        arguments = self._trainer_arguments(**fixed)
        check_columns(dataset.schema, *self._sources())
        return arguments, self._model_dir(dataset.sparkSession)

    def _train(
        self, dataset: DataFrame, arguments: dict[str, Any], model_dir: str, **fixed: Any
    ) -> tuple[TrainResult, Layout]:
        """Trains on ``dataset`` with what :meth:`_prepare` gave and ``fixed`` (settings that
        needed the data, such as the class count)."""
        from sparktrain.training import train

        vector, dense, categorical, label = self._sources()
        width = vector_width(dataset, vector) if vector is not None else len(dense)
        layout = Layout.of(vector, width, dense, categorical, label, int(self.getOrDefault(self.buckets)))
        result = train(
            dataset.sparkSession,
            training_frame(dataset, layout),
            features=layout.spec,
            num_workers=self.getNumWorkers(),
            epochs=int(self.getOrDefault(self.epochs)),
            model_dir=model_dir,
            **{**arguments, **fixed},
        )
        assert result.export_dir is not None, "train exports into model_dir/export"
        return result, layout

    def _extra_metadata(self) -> dict[str, Any]:
        return {}

    def _save_data(self, path: str) -> None:
        pass

    def _load_data(self, path: str, extra: dict[str, Any]) -> None:
        pass


class Fitted(CommonParams):
    """A fitted model's side: its export folder (where :func:`sparktrain.predict` and
    :func:`sparktrain.embeddings` read it too), its feature spec, what training did, and
    its persistence (``write().save(path)`` copies the export under ``path``)."""

    def __init__(self) -> None:
        super().__init__()
        self._export_dir: str | None = None
        self._spec: FeatureSpec | None = None
        self._result: TrainResult | None = None

    def _adopt(self, export_dir: str, spec: FeatureSpec, result: TrainResult | None) -> None:
        self._export_dir, self._spec, self._result = export_dir, spec, result

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

    def _feature_spec(self) -> FeatureSpec:
        if self._spec is None:
            raise _checks.refuse("exportDir", None, "this model was neither fitted nor loaded")
        return self._spec

    def _scoring(self, dataset: DataFrame, outputs: dict[str, str]) -> tuple[Layout, dict[str, str], str]:
        """What scoring ``dataset`` needs, checked on the driver (``outputs``: the output
        columns by param): the layout reading this model's columns now, the session's storage
        settings, and the export's version (:func:`sparktrain.exported.version`: a model saved
        over again is loaded again)."""
        spec = self._feature_spec()
        dense = self.getFeaturesCols()
        vector = None if dense else self.getFeaturesCol()
        categorical, label = self.getCategoricalCols(), self.getLabelCol()
        columns = tuple(n for n, _ in spec.categorical)
        stored = Layout(None, len(spec.dense), spec.dense, columns, spec.label, spec)
        layout = stored.reading(vector, dense, categorical, label)
        check_columns(dataset.schema, vector, dense, categorical, None)
        for param, name in outputs.items():
            _checks.check(name not in dataset.columns, param, name, "the DataFrame already has this column")
        names = tuple(outputs.values())
        if len(set(names)) != len(names):
            raise _checks.refuse("predictionCol", names, f"the {len(names)} outputs need {len(names)} names")
        storage = storage_options.of_session(dataset.sparkSession)
        return layout, storage, exported.version(self.exportDir)

    def _scored(
        self, dataset: DataFrame, scorer: Scorer | Regression, schema: Any, storage: dict[str, str]
    ) -> DataFrame:
        """``dataset`` scored into ``schema`` by ``scorer`` in Spark tasks: each Python worker
        loads the model, or, for an export whose tables are sharded (perhaps larger than any
        one scorer), each partition is scored with the embedding rows it needs, looked up
        where they are stored (:func:`sparktrain.prediction.predict_by_lookup`)."""
        model = exported.load(scorer.export_dir, scorer.version, tables=False)
        if model.sharded_tables:
            scored: DataFrame = prediction.predict_by_lookup(
                dataset,
                scorer.export_dir,
                scorer.version,
                schema,
                storage,
                finish=scorer.finish,
                engine=scorer.layout.engine_batch,
            )
            return scored

        def score(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            fs.configure(storage)
            for batch in batches:
                yield scorer(batch)

        scored_here: DataFrame = _frames.map_in_arrow(dataset, score, schema)
        return scored_here

    def _extra_metadata(self) -> dict[str, Any]:
        return {"format": 1}

    def _save_data(self, path: str) -> None:
        copy_folder(self.exportDir, join(path, MODEL))

    def _data_sources(self) -> list[str]:
        """The folders the saved data is copied from (the writer must not delete them first)."""
        return [self._export_dir] if self._export_dir is not None else []

    def _load_data(self, path: str, extra: dict[str, Any]) -> None:
        self._export_dir = join(path, MODEL)
        config = json.loads(fs.read_bytes(join(self._export_dir, "model.json")))
        self._spec = FeatureSpec.from_json(json.dumps(config["features"]))


__all__ = ["OWN_ARGUMENTS", "TRAIN_ONLY", "Fitted", "Fitting"]
