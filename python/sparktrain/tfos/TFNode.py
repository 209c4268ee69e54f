"""TFoS's ``TFNode``: what a ``map_fun`` calls on its node: the data feed of
``InputMode.SPARK`` (:class:`DataFeed`, and the module functions ``next_batch``,
``batch_results`` and ``terminate`` over a node's shared feed), ``hdfs_path``,
``start_cluster_server`` and ``export_saved_model`` (:mod:`sparktrain.tfos._feed` and
:mod:`sparktrain.tfos._tf` hold them). Runs in the trainer process.
"""

from __future__ import annotations

from typing import Any

from sparktrain.tfos._feed import DataFeed, FeedManager
from sparktrain.tfos._tf import export_saved_model, hdfs_path, start_cluster_server


def release_port(ctx: Any) -> None:
    """Nothing to do: the port reserved for TensorFlow is released before ``map_fun`` starts."""
    ctx.tmp_socket = None


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
