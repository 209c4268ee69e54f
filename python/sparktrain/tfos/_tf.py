"""TensorFlow for a TFoS node: TFoS's ``hdfs_path``, ``start_cluster_server`` and
``export_saved_model`` (``TFNode`` hands them on). Runs in the trainer process; TensorFlow is
imported only when a function needs it.

Unlike TFoS, ``start_cluster_server`` and ``export_saved_model`` work on TensorFlow 2 (TFoS
refuses them there): the first starts a ``tf.distribute.Server`` for the node, the second
writes a TF1 session's graph with ``tf.compat.v1``'s SavedModel builder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktrain import _checks
from sparktrain.errors import InvalidArgumentError

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
    if getattr(ctx, "tmp_socket", None) is not None:
        raise InvalidArgumentError(
            "start_cluster_server: the node still holds its TensorFlow port (release_port=False); "
            "call ctx.release_port() first"
        )
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
