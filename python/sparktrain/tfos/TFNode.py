"""TFoS's ``TFNode``: what a ``map_fun`` calls on its node: the data feed of
``InputMode.SPARK`` (:class:`DataFeed`, and the module functions ``next_batch``,
``batch_results`` and ``terminate`` over a node's shared feed), ``hdfs_path``,
``start_cluster_server`` and ``export_saved_model``.

Unlike TFoS, ``start_cluster_server`` and ``export_saved_model`` work on TensorFlow 2 (TFoS
refuses them there): the first starts a ``tf.distribute.Server`` for the node, the second
writes a TF1 session's graph with ``tf.compat.v1``'s SavedModel builder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktrain import _checks
from sparktrain.errors import InvalidArgumentError
from sparktrain.tfos._node import FeedManager

#: URL schemes a path keeps as it is (Hadoop's file systems, as TFoS lists them).
_SCHEMES = (
    "adl://",
    "file://",
    "hdfs://",
    "oss://",
    "s3://",
    "s3a://",
    "s3n://",
    "swift://",
    "viewfs://",
    "wasb://",
)


def hdfs_path(ctx: Any, path: str) -> str:
    """``path`` as a full URL, as TFoS resolves it: a URL keeps its scheme, ``/x`` goes on
    ``ctx.defaultFS``, and a relative path goes under the user's home on HDFS or under the
    working directory on a local default file system."""
    if path.startswith(_SCHEMES):
        return path
    trainer = getattr(ctx, "trainer", None)
    if trainer is not None:
        return str(trainer.absolute_path(path))
    return str(ctx.absolute_path(path))


def start_cluster_server(ctx: Any, num_gpus: int = 1, rdma: bool = False) -> tuple[Any, Any]:
    """Starts this node's TensorFlow server: returns ``(tf.train.ClusterSpec,
    tf.distribute.Server)`` built from ``ctx.cluster_spec``, ``ctx.job_name`` and
    ``ctx.task_index``, listening on the port sparktrain reserved for the node. A parameter
    server then usually calls ``server.join()``.

    ``num_gpus`` is accepted for compatibility: the node sees the GPUs Spark assigned to its
    task (``CUDA_VISIBLE_DEVICES``). ``rdma=True`` asks for the ``grpc+verbs`` protocol, which
    only TensorFlow builds with RDMA support have."""
    del num_gpus
    import tensorflow as tf

    cluster = tf.train.ClusterSpec(ctx.cluster_spec)
    server = tf.distribute.Server(
        cluster,
        job_name=ctx.job_name,
        task_index=ctx.task_index,
        protocol="grpc+verbs" if rdma else "grpc",
        start=True,
    )
    return cluster, server


def export_saved_model(sess: Any, export_dir: str, tag_set: str, signatures: Mapping[str, Any]) -> None:
    """Writes the graph and variables of the TF1 session ``sess`` as a SavedModel.

    ``tag_set`` is a comma-separated list of tags (``"serve"``); ``signatures`` maps each
    signature key to ``{"inputs": {alias: tensor}, "outputs": {alias: tensor}, "method_name":
    name}`` (tensors, or their names in the session's graph; ``method_name`` defaults to the
    key). A finalized graph (a ``MonitoredTrainingSession``'s) is exported all the same."""
    import tensorflow as tf

    v1 = tf.compat.v1
    _checks.instance("signatures", signatures, Mapping, "a dict of signature key to inputs and outputs")
    graph = sess.graph

    def tensor(value: Any) -> Any:
        return graph.get_tensor_by_name(value) if isinstance(value, str) else value

    with graph.as_default():
        signature_map = {
            key: v1.saved_model.signature_def_utils.build_signature_def(
                inputs={
                    k: v1.saved_model.utils.build_tensor_info(tensor(t)) for k, t in sig["inputs"].items()
                },
                outputs={
                    k: v1.saved_model.utils.build_tensor_info(tensor(t)) for k, t in sig["outputs"].items()
                },
                method_name=sig.get("method_name", key),
            )
            for key, sig in signatures.items()
        }
        finalized = graph.finalized
        if finalized:
            graph._unsafe_unfinalize()  # the builder adds its saver's ops to the graph
        try:
            builder = v1.saved_model.Builder(export_dir)
            builder.add_meta_graph_and_variables(
                sess, tag_set.split(","), signature_def_map=signature_map, clear_devices=True
            )
            builder.save()
        finally:
            if finalized:
                graph.finalize()


def release_port(ctx: Any) -> None:
    """Nothing to do: the port reserved for TensorFlow is released before ``map_fun`` starts."""
    ctx.tmp_socket = None


class DataFeed:
    """Reads the node's share of the RDD given to ``TFCluster.train`` or ``inference``.

    ``next_batch(n)`` returns up to ``n`` rows (fewer at the end), or with ``input_mapping`` a
    dict of tensor name → column values, columns taken by position in the sorted order of the
    mapping's keys, as TFoS does. ``should_stop()`` is true once this feed read to the end of
    every epoch, or after ``terminate()``. In inference, ``batch_results(results)`` takes one
    result per row read, in order. The feeds of one node share its rows, as TFoS's share one
    queue; ``train_mode`` is accepted for compatibility.
    """

    def __init__(
        self,
        mgr: FeedManager | None,
        train_mode: bool = True,
        qname_in: str = "input",
        qname_out: str = "output",
        input_mapping: dict[str, str] | None = None,
    ) -> None:
        if mgr is None:
            raise InvalidArgumentError("DataFeed needs ctx.mgr, which exists only in InputMode.SPARK")
        if input_mapping is not None:
            _checks.instance("input_mapping", input_mapping, Mapping, "a dict of column to tensor name")
        self.mgr = mgr
        self.train_mode = train_mode
        self.qname_in = qname_in
        self.qname_out = qname_out
        self.done_feeding = False
        self.input_tensors = [t for _, t in sorted(input_mapping.items())] if input_mapping else None

    def next_batch(self, batch_size: int) -> list[Any] | dict[str, list[Any]]:
        """Up to ``batch_size`` rows; fewer (or none) at the end of the feed."""
        batch_size = _checks.integer("batch_size", batch_size, minimum=1)
        rows = self.mgr.take(batch_size)
        if len(rows) < batch_size:
            self.done_feeding = True
        if self.input_tensors is None:
            return rows
        return {t: [row[i] for row in rows] for i, t in enumerate(self.input_tensors)}

    def should_stop(self) -> bool:
        """True once the feed is exhausted or terminated."""
        return self.done_feeding

    def batch_results(self, results: list[Any]) -> None:
        """One result per row read (in inference), in the order the rows came. In training
        the results are dropped, as TFoS does."""
        self.mgr.answer(list(results))

    def terminate(self) -> None:
        """Stops feeding this node: the rest of its share is not read."""
        self.mgr.terminate()
        self.done_feeding = True


def next_batch(mgr: FeedManager, batch_size: int, qname: str = "input") -> list[Any] | dict[str, list[Any]]:
    """``DataFeed.next_batch`` on the node's shared feed."""
    del qname
    return mgr.default_feed().next_batch(batch_size)


def batch_results(mgr: FeedManager, results: list[Any], qname: str = "output") -> None:
    """``DataFeed.batch_results`` on the node's shared feed."""
    del qname
    mgr.default_feed().batch_results(results)


def terminate(mgr: FeedManager, qname: str = "input") -> None:
    """``DataFeed.terminate`` on the node's shared feed."""
    del qname
    mgr.default_feed().terminate()


__all__ = [
    "DataFeed",
    "batch_results",
    "export_saved_model",
    "hdfs_path",
    "next_batch",
    "release_port",
    "start_cluster_server",
    "terminate",
]
