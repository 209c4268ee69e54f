"""TFoS's ``TFNode``: what a ``map_fun`` calls on its node: the data feed of
``InputMode.SPARK`` (:class:`DataFeed`, and the module functions ``next_batch``,
``batch_results`` and ``terminate`` over a node's shared feed), ``hdfs_path``,
``start_cluster_server``, ``export_saved_model`` and ``release_port``
(:mod:`sparktrain.tfos._feed` and :mod:`sparktrain.tfos._tf` hold them). A Structured
Streaming node reads its micro-batches with ``ctx.get_stream_feed()``: a :class:`StreamFeed` of
:class:`MicroBatch` (:mod:`sparktrain.tfos._stream`). Runs in the trainer process.
"""

from __future__ import annotations

import logging
from typing import Any

from sparktrain.tfos._feed import DataFeed, FeedSource
from sparktrain.tfos._stream import MicroBatch, StreamFeed
from sparktrain.tfos._tf import export_saved_model, hdfs_path, start_cluster_server

_log = logging.getLogger(__name__)


def release_port(ctx: Any) -> None:
    """Closes ``ctx.tmp_socket``, the socket that holds the node's TensorFlow port with
    ``TFCluster.run(..., release_port=False)``, so that its server can bind the port; warns
    when there is none."""
    release = getattr(ctx, "release_port", None)
    if callable(release):
        release()
        return
    if ctx.tmp_socket is None:
        _log.warning("release_port(): this node holds no reserved port")
        return
    ctx.tmp_socket.close()
    ctx.tmp_socket = None


def next_batch(mgr: FeedSource, batch_size: int, qname: str = "input") -> list[Any] | dict[str, list[Any]]:
    """``DataFeed.next_batch`` on the node's shared feed."""
    del qname
    return mgr.default_feed().next_batch(batch_size)


def batch_results(mgr: FeedSource, results: list[Any], qname: str = "output") -> None:
    """``DataFeed.batch_results`` on the node's shared feed."""
    del qname
    mgr.default_feed().batch_results(results)


def terminate(mgr: FeedSource, qname: str = "input") -> None:
    """``DataFeed.terminate`` on the node's shared feed."""
    del qname
    mgr.default_feed().terminate()


__all__ = [
    "DataFeed",
    "MicroBatch",
    "StreamFeed",
    "batch_results",
    "export_saved_model",
    "hdfs_path",
    "next_batch",
    "release_port",
    "start_cluster_server",
    "terminate",
]
