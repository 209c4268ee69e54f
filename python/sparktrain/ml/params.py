"""The Spark ML ``Param``\\s of :class:`~sparktrain.ml.Classifier`,
:class:`~sparktrain.ml.Regressor` and their models. Runs on the driver.

Spark's own type converters raise ``TypeError`` without naming the param; these raise
:class:`~sparktrain.errors.InvalidArgumentError` that starts with the param's name and the value
given, when the value is set (in the constructor, ``setParams``, ``copy`` or a ``ParamMap`` of
``CrossValidator``), so a bad value never reaches a Spark job.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pyspark.ml.param import Param, Params

from sparktrain import _checks, _native
from sparktrain.training import DEFAULTS
from sparktrain.training.trainer import EMBEDDING_MODELS  # the models that embed categorical columns

#: The models the engine trains for classification.
MODELS: tuple[str, ...] = tuple(_native.MODELS)
#: How the embedding tables are placed (the engine's ``shard_tables``).
SHARD_TABLES = ("auto", "on", "off")
#: Optimizers by name.
OPTIMIZERS: tuple[str, ...] = tuple(name for name, _ in _native.LEARNING_RATES)


class _Converter:
    """A Param's type converter that names the param in its error. A class rather than a
    closure, so that a param (and the estimator holding it) pickles."""

    def __init__(self, name: str, kind: str, minimum: float = 0, choices: Sequence[str] = ()) -> None:
        self.name = name
        self.kind = kind
        self.minimum = minimum
        self.choices = tuple(choices)

    def __call__(self, value: Any) -> Any:
        name = self.name
        if self.kind == "str":
            text = _checks.text(name, value)
            return _checks.choice(name, text, self.choices) if self.choices else text
        if self.kind == "int":
            return _checks.integer(name, value, minimum=int(self.minimum))
        if self.kind == "float":
            number = _number(name, value)
            _checks.check(number > self.minimum, name, value, f"must be > {self.minimum}")
            return number
        if self.kind == "probability":
            number = _number(name, value)
            _checks.check(0.0 <= number <= 1.0, name, value, "must be from 0 to 1")
            return number
        if self.kind == "strings":
            _checks.check(_is_list(value), name, value, "must be a list of columns")
            columns = [_checks.text(f"{name}[{i}]", v) for i, v in enumerate(value)]
            _checks.check(len(set(columns)) == len(columns), name, value, "names a column twice")
            return columns
        if self.kind == "ints":
            _checks.check(_is_list(value), name, value, "must be a list of widths")
            minimum = int(self.minimum)
            return [_checks.integer(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(value)]
        if self.kind == "options":
            _checks.check(isinstance(value, Mapping), name, value, "must be a dict of train arguments")
            for key in value:
                _checks.check(isinstance(key, str), name, value, f"has a key that is not a str: {key!r}")
            return dict(value)
        raise AssertionError(f"no converter of kind {self.kind}")


def _number(name: str, value: object) -> float:
    """``value`` as a float, when it is a real number (a bool is not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _checks.refuse(name, value, "must be a number")
    return float(value)


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def _param(name: str, doc: str, kind: str, minimum: float = 0, choices: Sequence[str] = ()) -> Param[Any]:
    return Param(Params._dummy(), name, doc, typeConverter=_Converter(name, kind, minimum, choices))


_P = TypeVar("_P", bound="CommonParams")
_C = TypeVar("_C", bound="ClassifierParams")


class CommonParams(Params):
    """The params of every sparktrain estimator and its model (Spark copies an estimator's
    values to its model): where the features and the label are, the model, and training."""

    featuresCol: Param[Any] = _param(
        "featuresCol", "the features: a vector column (or array<numeric>), unless featuresCols is set", "str"
    )
    featuresCols: Param[Any] = _param(
        "featuresCols", "numeric columns taken as the dense features instead of featuresCol", "strings"
    )
    categoricalCols: Param[Any] = _param(
        "categoricalCols", "integer or string columns hashed into `buckets` ids each", "strings"
    )
    buckets: Param[Any] = _param("buckets", "ids each categorical column is hashed into", "int", minimum=1)
    labelCol: Param[Any] = _param("labelCol", "the label: a class id from 0, or a number to regress", "str")
    predictionCol: Param[Any] = _param(
        "predictionCol", "the prediction (a class or a number), a double", "str"
    )
    model: Param[Any] = _param("model", "the engine's model", "str", choices=MODELS)
    hidden: Param[Any] = _param("hidden", "hidden layer widths (unset: the model's)", "ints", minimum=1)
    dim: Param[Any] = _param("dim", "values per embedding (unset: the model's own)", "int", minimum=1)
    optimizer: Param[Any] = _param("optimizer", "the update rule", "str", choices=OPTIMIZERS)
    learningRate: Param[Any] = _param("learningRate", "the learning rate (unset: the optimizer's)", "float")
    batchSize: Param[Any] = _param("batchSize", "examples per step on each worker", "int", minimum=1)
    epochs: Param[Any] = _param("epochs", "passes over the data", "int", minimum=1)
    numWorkers: Param[Any] = _param("numWorkers", "trainers, one Spark task slot each", "int", minimum=1)
    seed: Param[Any] = _param("seed", "the seed of the initial weights and the shuffle", "int")
    modelDir: Param[Any] = _param(
        "modelDir",
        "a folder every executor reaches (hdfs://, s3://...); each fit trains in a new subfolder",
        "str",
    )
    shardTables: Param[Any] = _param(
        "shardTables",
        "split the embedding tables across the trainers: auto (when one trainer's share of the "
        "memory cannot hold them), on or off",
        "str",
        choices=SHARD_TABLES,
    )
    tableBudgetBytes: Param[Any] = _param(
        "tableBudgetBytes",
        "bytes of embedding tables and their optimizer state one trainer may hold (unset: half "
        "of what its machine or limits allow)",
        "int",
        minimum=1,
    )
    trainOptions: Param[Any] = _param(
        "trainOptions", "further sparktrain.train arguments (steps, momentum, wide_optimizer...)", "options"
    )

    #: The keyword arguments of the last ``keyword_only`` call (set by that decorator).
    _input_kwargs: dict[str, Any]

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(
            featuresCol="features",
            featuresCols=[],
            categoricalCols=[],
            buckets=_native.DEFAULT_BUCKETS,
            labelCol="label",
            predictionCol="prediction",
            model=DEFAULTS.model,
            optimizer=DEFAULTS.optimizer,
            batchSize=DEFAULTS.batch_size,
            epochs=1,
            numWorkers=1,
            seed=DEFAULTS.seed,
            shardTables="auto",
            trainOptions={},
        )

    def _set_params(self, kwargs: Mapping[str, Any]) -> None:
        """Sets ``kwargs``, taking a list given as ``featuresCol`` as ``featuresCols`` (as
        ``xgboost.spark`` takes ``features_col``); a column name given as ``featuresCol``
        clears ``featuresCols``, which would otherwise take precedence over it."""
        values = {k: v for k, v in kwargs.items() if v is not None}
        features = values.get("featuresCol")
        if isinstance(features, (list, tuple)):
            values["featuresCols"] = values.pop("featuresCol")
        elif features is not None and "featuresCols" not in values:
            values["featuresCols"] = []
        self._set(**values)

    def setFeaturesCol(self: _P, value: str | list[str]) -> _P:
        """Reads the features from a vector column, or from a list of numeric columns."""
        self._set_params({"featuresCol": value})
        return self

    def setLabelCol(self: _P, value: str) -> _P:
        """Sets the label column."""
        self._set_params({"labelCol": value})
        return self

    def setPredictionCol(self: _P, value: str) -> _P:
        """Sets the column of the prediction."""
        self._set_params({"predictionCol": value})
        return self

    def getFeaturesCol(self) -> str:
        """The vector (or array) column of the features."""
        return str(self.getOrDefault(self.featuresCol))

    def getFeaturesCols(self) -> list[str]:
        """The numeric columns of the dense features, when they are given one by one."""
        return list(self.getOrDefault(self.featuresCols))

    def getCategoricalCols(self) -> list[str]:
        """The columns hashed into embedding ids."""
        return list(self.getOrDefault(self.categoricalCols))

    def getLabelCol(self) -> str:
        """The label column."""
        return str(self.getOrDefault(self.labelCol))

    def getPredictionCol(self) -> str:
        """The column of the prediction."""
        return str(self.getOrDefault(self.predictionCol))

    def getNumWorkers(self) -> int:
        """How many trainers train together."""
        return int(self.getOrDefault(self.numWorkers))

    def getLearningRate(self) -> float | None:
        """The learning rate, or None for the optimizer's own."""
        return float(self.getOrDefault(self.learningRate)) if self.isDefined(self.learningRate) else None


class ClassifierParams(CommonParams):
    """:class:`CommonParams` and the classifier's own: its probability and logit columns, the
    binary threshold and the class count."""

    probabilityCol: Param[Any] = _param("probabilityCol", "the class probabilities, a vector", "str")
    rawPredictionCol: Param[Any] = _param(
        "rawPredictionCol", "the logits (binary: [-logit, logit]), a vector", "str"
    )
    threshold: Param[Any] = _param(
        "threshold", "binary models predict 1 when the probability of 1 is above it", "probability"
    )
    numClasses: Param[Any] = _param(
        "numClasses", "classes of the label (2: binary); inferred from the label when unset", "int", minimum=2
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(probabilityCol="probability", rawPredictionCol="rawPrediction", threshold=0.5)

    def setProbabilityCol(self: _C, value: str) -> _C:
        """Sets the column of the class probabilities."""
        self._set_params({"probabilityCol": value})
        return self

    def setRawPredictionCol(self: _C, value: str) -> _C:
        """Sets the column of the logits."""
        self._set_params({"rawPredictionCol": value})
        return self

    def setThreshold(self: _C, value: float) -> _C:
        """Sets the probability of class 1 above which a binary model predicts 1."""
        self._set_params({"threshold": value})
        return self

    def getProbabilityCol(self) -> str:
        """The column of the class probabilities."""
        return str(self.getOrDefault(self.probabilityCol))

    def getRawPredictionCol(self) -> str:
        """The column of the logits."""
        return str(self.getOrDefault(self.rawPredictionCol))

    def getThreshold(self) -> float:
        """The probability of class 1 above which a binary model predicts 1."""
        return float(self.getOrDefault(self.threshold))


class RegressorParams(CommonParams):
    """:class:`CommonParams` of a regressor, whose label is any number and whose prediction is
    the model's output."""


__all__ = ["EMBEDDING_MODELS", "MODELS", "OPTIMIZERS", "ClassifierParams", "CommonParams", "RegressorParams"]
