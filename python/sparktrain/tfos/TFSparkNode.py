"""TFoS's ``TFSparkNode``: the internals that run TFoS's own nodes, which sparktrain's launcher
replaces. Runs anywhere it is imported.

``TFNodeContext`` is the ``ctx`` a ``map_fun`` receives
(:class:`sparktrain.tfos._node.NodeContext`), for code that names its type. The rest (``run``,
``train``, ``inference``, ``shutdown``, ``TFSparkNode``) are the ``mapPartitions`` functions
that start a node inside a Spark task, leave it running in a reused Python worker, and feed it
through a multiprocessing manager on the same executor. On sparktrain a node is a process of a
barrier task supervised by the launcher, fed through it, so those functions cannot mean the
same thing: using them raises an ``AttributeError`` that says what to call instead.
"""

from __future__ import annotations

from sparktrain.tfos._node import NodeContext

#: The ``ctx`` of a ``map_fun``.
TFNodeContext = NodeContext

_REPLACED = {
    "run": "TFCluster.run starts the nodes",
    "train": "TFCluster.train feeds them",
    "inference": "TFCluster.inference feeds them and returns their results",
    "shutdown": "TFCluster.shutdown stops them",
    "TFSparkNode": "TFCluster runs the nodes",
}


def __getattr__(name: str) -> object:
    if name in _REPLACED or not name.startswith("__"):
        instead = _REPLACED.get(name, "use TFCluster and TFNode")
        raise AttributeError(
            f"sparktrain.tfos.TFSparkNode.{name}: TFoS's node internals do not run on sparktrain's "
            f"launcher (nodes are processes of one barrier stage, fed through it); {instead}"
        )
    raise AttributeError(name)


__all__ = ["TFNodeContext"]
