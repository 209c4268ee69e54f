"""TFoS's Spark ML pipeline API: :class:`TFEstimator` trains with a TFoS cluster fed from a
DataFrame and returns a :class:`TFModel`, which scores a DataFrame with the exported
SavedModel, one single-node TensorFlow per Python worker (the model is loaded once per worker
and kept for its later partitions).

Parameters are Spark ML ``Param``s with TFoS's names, setters and defaults; ``fit`` and
``transform`` hand the estimator's ``tf_args`` to the training function merged with them
(``args.batch_size``, ``args.epochs``, ``args.export_dir``...). As in TFoS on TensorFlow 2,
training runs in ``InputMode.SPARK`` (``InputMode.TENSORFLOW`` is refused) and the training
function exports the model itself (``export_fn`` is refused).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters

from sparktrain.errors import InvalidArgumentError
from sparktrain.tfos import TFCluster


class TFTypeConverters:
    """Spark ML type converters Spark lacks: a dict parameter."""

    @staticmethod
    def toDict(value: Any) -> dict[Any, Any]:
        """``value`` itself when it is a dict; anything else is refused."""
        if isinstance(value, dict):
            return value
        raise TypeError(f"could not convert {value!r} to a dict")


def _param(name: str, doc: str, converter: Callable[[Any], Any]) -> Any:
    return Param(Params._dummy(), name, doc, typeConverter=converter)


class HasBatchSize(Params):
    """``batch_size``: records per batch."""

    batch_size: Param[int] = _param("batch_size", "Number of records per batch", TypeConverters.toInt)

    def setBatchSize(self, value: int) -> Any:
        """Sets ``batch_size``."""
        return self._set(batch_size=value)

    def getBatchSize(self) -> int:
        """``batch_size``, or its default."""
        return int(self.getOrDefault(self.batch_size))


class HasClusterSize(Params):
    """``cluster_size``: nodes in the cluster."""

    cluster_size: Param[int] = _param("cluster_size", "Number of nodes in the cluster", TypeConverters.toInt)

    def setClusterSize(self, value: int) -> Any:
        """Sets ``cluster_size``."""
        return self._set(cluster_size=value)

    def getClusterSize(self) -> int:
        """``cluster_size``, or its default."""
        return int(self.getOrDefault(self.cluster_size))


class HasEpochs(Params):
    """``epochs``: passes over the training data."""

    epochs: Param[int] = _param("epochs", "Number of epochs to train", TypeConverters.toInt)

    def setEpochs(self, value: int) -> Any:
        """Sets ``epochs``."""
        return self._set(epochs=value)

    def getEpochs(self) -> int:
        """``epochs``, or its default."""
        return int(self.getOrDefault(self.epochs))


class HasGraceSecs(Params):
    """``grace_secs``: TFoS's wait after feeding; accepted, not needed here (see
    :meth:`~sparktrain.tfos.TFCluster.TFCluster.shutdown`)."""

    grace_secs: Param[int] = _param(
        "grace_secs", "Seconds to wait after feeding data (for final tasks)", TypeConverters.toInt
    )

    def setGraceSecs(self, value: int) -> Any:
        """Sets ``grace_secs``."""
        return self._set(grace_secs=value)

    def getGraceSecs(self) -> int:
        """``grace_secs``, or its default."""
        return int(self.getOrDefault(self.grace_secs))


class HasInputMapping(Params):
    """``input_mapping``: input DataFrame column → input tensor."""

    input_mapping: Param[Any] = _param(
        "input_mapping", "Mapping of input DataFrame column to input tensor", TFTypeConverters.toDict
    )

    def setInputMapping(self, value: dict[str, str]) -> Any:
        """Sets ``input_mapping``."""
        return self._set(input_mapping=value)

    def getInputMapping(self) -> dict[str, str]:
        """``input_mapping``, or its default."""
        return dict(self.getOrDefault(self.input_mapping))


class HasInputMode(Params):
    """``input_mode``: only ``InputMode.SPARK``, as TFoS on TensorFlow 2 allows."""

    input_mode: Param[int] = _param(
        "input_mode", "Input data feeding mode (0=TENSORFLOW, 1=SPARK)", TypeConverters.toInt
    )

    def setInputMode(self, value: int) -> Any:
        """Sets ``input_mode``; ``InputMode.TENSORFLOW`` is refused."""
        if value == TFCluster.InputMode.TENSORFLOW:
            raise InvalidArgumentError("input_mode=InputMode.TENSORFLOW: TFEstimator feeds its DataFrame")
        return self._set(input_mode=value)

    def getInputMode(self) -> int:
        """``input_mode``, or its default."""
        return int(self.getOrDefault(self.input_mode))


class HasMasterNode(Params):
    """``master_node``: the chief's job name."""

    master_node: Param[str] = _param(
        "master_node", "Job name of master/chief worker node", TypeConverters.toString
    )

    def setMasterNode(self, value: str) -> Any:
        """Sets ``master_node``."""
        return self._set(master_node=value)

    def getMasterNode(self) -> str | None:
        """``master_node``, or its default."""
        value = self.getOrDefault(self.master_node)
        return None if value is None else str(value)


class HasModelDir(Params):
    """``model_dir``: where checkpoints go."""

    model_dir: Param[str] = _param(
        "model_dir", "Path to save/load model checkpoints", TypeConverters.toString
    )

    def setModelDir(self, value: str) -> Any:
        """Sets ``model_dir``."""
        return self._set(model_dir=value)

    def getModelDir(self) -> str | None:
        """``model_dir``, or its default."""
        value = self.getOrDefault(self.model_dir)
        return None if value is None else str(value)


class HasNumPS(Params):
    """``num_ps`` and ``driver_ps_nodes``: TFoS's parameter servers (refused in
    ``InputMode.SPARK``, see :func:`~sparktrain.tfos.TFCluster.run`)."""

    num_ps: Param[int] = _param("num_ps", "Number of PS nodes in cluster", TypeConverters.toInt)
    driver_ps_nodes: Param[bool] = _param(
        "driver_ps_nodes", "Run PS nodes on driver locally", TypeConverters.toBoolean
    )

    def setNumPS(self, value: int) -> Any:
        """Sets ``num_ps``."""
        return self._set(num_ps=value)

    def getNumPS(self) -> int:
        """``num_ps``, or its default."""
        return int(self.getOrDefault(self.num_ps))

    def setDriverPSNodes(self, value: bool) -> Any:
        """Sets ``driver_ps_nodes``."""
        return self._set(driver_ps_nodes=value)

    def getDriverPSNodes(self) -> bool:
        """``driver_ps_nodes``, or its default."""
        return bool(self.getOrDefault(self.driver_ps_nodes))


class HasOutputMapping(Params):
    """``output_mapping``: output tensor → output DataFrame column."""

    output_mapping: Param[Any] = _param(
        "output_mapping", "Mapping of output tensor to output DataFrame column", TFTypeConverters.toDict
    )

    def setOutputMapping(self, value: dict[str, str]) -> Any:
        """Sets ``output_mapping``."""
        return self._set(output_mapping=value)

    def getOutputMapping(self) -> dict[str, str]:
        """``output_mapping``, or its default."""
        return dict(self.getOrDefault(self.output_mapping))


class HasProtocol(Params):
    """``protocol``: TensorFlow's network protocol (``grpc``)."""

    protocol: Param[str] = _param(
        "protocol", "Network protocol for Tensorflow (grpc|rdma)", TypeConverters.toString
    )

    def setProtocol(self, value: str) -> Any:
        """Sets ``protocol``."""
        return self._set(protocol=value)

    def getProtocol(self) -> str:
        """``protocol``, or its default."""
        return str(self.getOrDefault(self.protocol))


class HasReaders(Params):
    """``readers``: reader threads (TF1 queues)."""

    readers: Param[int] = _param("readers", "number of reader/enqueue threads", TypeConverters.toInt)

    def setReaders(self, value: int) -> Any:
        """Sets ``readers``."""
        return self._set(readers=value)

    def getReaders(self) -> int:
        """``readers``, or its default."""
        return int(self.getOrDefault(self.readers))


class HasSteps(Params):
    """``steps``: the most training steps."""

    steps: Param[int] = _param("steps", "Maximum number of steps to train", TypeConverters.toInt)

    def setSteps(self, value: int) -> Any:
        """Sets ``steps``."""
        return self._set(steps=value)

    def getSteps(self) -> int:
        """``steps``, or its default."""
        return int(self.getOrDefault(self.steps))


class HasTensorboard(Params):
    """``tensorboard``: start TensorBoard on the chief."""

    tensorboard: Param[bool] = _param("tensorboard", "Launch tensorboard process", TypeConverters.toBoolean)

    def setTensorboard(self, value: bool) -> Any:
        """Sets ``tensorboard``."""
        return self._set(tensorboard=value)

    def getTensorboard(self) -> bool:
        """``tensorboard``, or its default."""
        return bool(self.getOrDefault(self.tensorboard))


class HasTFRecordDir(Params):
    """``tfrecord_dir``: where TFoS once exported a DataFrame for ``InputMode.TENSORFLOW``."""

    tfrecord_dir: Param[str] = _param(
        "tfrecord_dir", "Path to temporarily export a DataFrame as TFRecords", TypeConverters.toString
    )

    def setTFRecordDir(self, value: str) -> Any:
        """Sets ``tfrecord_dir``."""
        return self._set(tfrecord_dir=value)

    def getTFRecordDir(self) -> str | None:
        """``tfrecord_dir``, or its default."""
        value = self.getOrDefault(self.tfrecord_dir)
        return None if value is None else str(value)


class HasExportDir(Params):
    """``export_dir``: where the SavedModel is."""

    export_dir: Param[str] = _param("export_dir", "Directory to export saved_model", TypeConverters.toString)

    def setExportDir(self, value: str) -> Any:
        """Sets ``export_dir``."""
        return self._set(export_dir=value)

    def getExportDir(self) -> str | None:
        """``export_dir``, or its default."""
        value = self.getOrDefault(self.export_dir)
        return None if value is None else str(value)


class HasSignatureDefKey(Params):
    """``signature_def_key``: the SavedModel signature to call (``serving_default`` when
    unset)."""

    signature_def_key: Param[str] = _param(
        "signature_def_key", "Identifier for a specific saved_model signature", TypeConverters.toString
    )

    def setSignatureDefKey(self, value: str) -> Any:
        """Sets ``signature_def_key``."""
        return self._set(signature_def_key=value)

    def getSignatureDefKey(self) -> str | None:
        """``signature_def_key``, or its default."""
        value = self.getOrDefault(self.signature_def_key)
        return None if value is None else str(value)


class HasTagSet(Params):
    """``tag_set``: comma-separated tags of the SavedModel's meta graph."""

    tag_set: Param[str] = _param(
        "tag_set", "Comma-delimited list of tags identifying a saved_model metagraph", TypeConverters.toString
    )

    def setTagSet(self, value: str) -> Any:
        """Sets ``tag_set``."""
        return self._set(tag_set=value)

    def getTagSet(self) -> str | None:
        """``tag_set``, or its default."""
        value = self.getOrDefault(self.tag_set)
        return None if value is None else str(value)


class Namespace:
    """Arguments as attributes, from a dict, an ``argparse.Namespace``, another
    :class:`Namespace`, or an ARGV list (kept as ``argv``)."""

    argv: list[str] | None = None

    def __init__(self, d: Any) -> None:
        if isinstance(d, list):
            self.argv = list(d)
        elif isinstance(d, dict):
            self.__dict__.update(d)
        elif isinstance(d, argparse.Namespace | Namespace):
            self.__dict__.update(vars(d))
        else:
            raise InvalidArgumentError(f"tf_args={d!r}: use a dict, an argparse.Namespace or an ARGV list")

    def __iter__(self) -> Iterator[Any]:
        return iter(self.argv) if self.argv else iter(list(self.__dict__))

    def __contains__(self, key: object) -> bool:
        return key in self.__dict__

    def __repr__(self) -> str:
        if self.argv:
            return repr(self.argv)
        return "Namespace(" + ", ".join(f"{k}={v!r}" for k, v in sorted(self.__dict__.items())) + ")"

    def __eq__(self, other: object) -> bool:
        if self.argv:
            return self.argv == other
        return isinstance(other, Namespace | argparse.Namespace) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(repr(self))


class TFParams(Params):
    """Keeps namespace-style ``args`` and merges them with the Spark ML params."""

    args: Namespace | None = None

    def merge_args_params(self) -> Namespace:
        """A copy of ``args`` with every param's value (set or default) as an attribute."""
        merged = copy.copy(self.args) if self.args is not None else Namespace({})
        for param in self.params:
            if self.hasDefault(param) or self.isSet(param):
                setattr(merged, param.name, self.getOrDefault(param))
        return merged


class TFEstimator(
    Estimator,  # type: ignore[type-arg]
    TFParams,
    HasInputMapping,
    HasClusterSize,
    HasNumPS,
    HasInputMode,
    HasMasterNode,
    HasProtocol,
    HasGraceSecs,
    HasTensorboard,
    HasModelDir,
    HasExportDir,
    HasTFRecordDir,
    HasBatchSize,
    HasEpochs,
    HasReaders,
    HasSteps,
):
    """A Spark ML Estimator that trains ``train_fn(args, ctx)`` on a TFoS cluster of
    ``cluster_size`` nodes, fed the DataFrame's ``input_mapping`` columns (sorted by name) for
    ``epochs`` passes, and returns a :class:`TFModel` with the same args and params, for the
    model ``train_fn`` exported to ``export_dir``."""

    def __init__(self, train_fn: Callable[[Any, Any], Any], tf_args: Any, export_fn: Any = None) -> None:
        super().__init__()
        if export_fn is not None:
            raise InvalidArgumentError("export_fn: on TensorFlow 2 train_fn exports the model itself")
        self.train_fn = train_fn
        self.args = Namespace(tf_args)
        self._setDefault(
            input_mapping={},
            cluster_size=1,
            num_ps=0,
            driver_ps_nodes=False,
            input_mode=TFCluster.InputMode.SPARK,
            master_node="chief",
            protocol="grpc",
            tensorboard=False,
            model_dir=None,
            export_dir=None,
            tfrecord_dir=None,
            batch_size=100,
            epochs=1,
            readers=1,
            steps=1000,
            grace_secs=30,
        )

    def _fit(self, dataset: Any) -> TFModel:
        """Trains on ``dataset`` and returns the :class:`TFModel`."""
        args = self.merge_args_params()
        assert self.args is not None
        tf_args = self.args.argv if self.args.argv else args
        columns = sorted(self.getInputMapping())
        if not columns:
            raise InvalidArgumentError("input_mapping: TFEstimator needs the columns to feed")
        cluster = TFCluster.run(
            dataset.sparkSession.sparkContext,
            self.train_fn,
            tf_args,
            self.getClusterSize(),
            self.getNumPS(),
            self.getTensorboard(),
            TFCluster.InputMode.SPARK,
            master_node=self.getMasterNode(),
            driver_ps_nodes=self.getDriverPSNodes(),
        )
        try:
            cluster.train(dataset.select(*columns), self.getEpochs())
        finally:
            cluster.shutdown(grace_secs=self.getGraceSecs())
        return self._copyValues(TFModel(self.args))


class TFModel(
    Model,
    TFParams,
    HasInputMapping,
    HasOutputMapping,
    HasBatchSize,
    HasModelDir,
    HasExportDir,
    HasSignatureDefKey,
    HasTagSet,
):
    """A Spark ML Model over the SavedModel in ``export_dir``: ``transform`` feeds the
    ``input_mapping`` columns (sorted by name) to the signature ``signature_def_key``'s input
    tensors in batches of ``batch_size`` and returns a DataFrame of the ``output_mapping``
    columns (sorted by tensor name), one row per input row, in order."""

    def __init__(self, tf_args: Any) -> None:
        super().__init__()
        self.args = Namespace(tf_args)
        self._setDefault(
            input_mapping={},
            output_mapping={},
            batch_size=100,
            model_dir=None,
            export_dir=None,
            signature_def_key=None,
            tag_set=None,
        )

    def _transform(self, dataset: Any) -> Any:
        """Scores ``dataset``; see the class."""
        from sparktrain.tfos._predict import run_model

        inputs = sorted(self.getInputMapping().items())
        outputs = sorted(self.getOutputMapping().items())
        if not inputs or not outputs:
            raise InvalidArgumentError("input_mapping and output_mapping: TFModel needs both")
        export_dir = self.getExportDir()
        if not export_dir:
            raise InvalidArgumentError("export_dir: TFModel needs the SavedModel's folder (setExportDir)")
        args = self.merge_args_params()
        assert self.args is not None
        tf_args = self.args.argv if self.args.argv else args
        spec = (
            export_dir,
            self.getTagSet(),
            self.getSignatureDefKey() or "serving_default",
            [tensor for _, tensor in inputs],
            [tensor for tensor, _ in outputs],
            self.getBatchSize(),
        )
        rows = dataset.select(*[col for col, _ in inputs]).rdd.mapPartitions(
            lambda it: run_model(it, spec, tf_args)
        )
        return dataset.sparkSession.createDataFrame(rows, [col for _, col in outputs])


__all__ = [
    "HasBatchSize",
    "HasClusterSize",
    "HasEpochs",
    "HasExportDir",
    "HasGraceSecs",
    "HasInputMapping",
    "HasInputMode",
    "HasMasterNode",
    "HasModelDir",
    "HasNumPS",
    "HasOutputMapping",
    "HasProtocol",
    "HasReaders",
    "HasSignatureDefKey",
    "HasSteps",
    "HasTFRecordDir",
    "HasTagSet",
    "HasTensorboard",
    "Namespace",
    "TFEstimator",
    "TFModel",
    "TFParams",
    "TFTypeConverters",
]
