"""TFoS's ``marker``: objects that travel in a node's data queue beside the rows. Runs
anywhere (the driver, Spark tasks, nodes).

A :class:`~sparktrain.tfos.TFNode.DataFeed` over a :mod:`~sparktrain.tfos.TFManager` queue
reads ``None`` as the end of the feed and an :class:`EndPartition` as the end of one RDD
partition, as TFoS's does. sparktrain's own feeds (``ctx.mgr`` in ``InputMode.SPARK``) carry
rows as Arrow batches and need no markers; these are for code that fills a queue itself.
"""

from __future__ import annotations


class Marker:
    """Base class of the objects a data queue holds that are not rows."""


class EndPartition(Marker):
    """The end of one RDD partition: in inference (``train_mode=False``) ``next_batch`` returns
    the rows it has at this point, so that a partition's results are not held back waiting
    for the next one."""


__all__ = ["EndPartition", "Marker"]
