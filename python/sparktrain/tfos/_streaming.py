"""The driver's side of feeding a stream to TFoS nodes: Spark Streaming's DStreams
(``TFCluster.train(dstream)``) and Structured Streaming's micro-batches
(``TFCluster.stream_feeder()``, a ``foreachBatch`` function). Runs on the driver.

The nodes run as one barrier stage for as long as the stream lasts, so each micro-batch is
read and sent to them by Spark tasks of its own (:mod:`sparktrain.tfos._stream_tasks`): the
cluster needs task slots beside the nodes' (``TFCluster`` checks it before the nodes start).
The driver finds the nodes of the job's current generation through their signed
reservations, and talks to them over :mod:`sparktrain.tfos._wire`.

Structured Streaming, exactly once. For micro-batch ``N`` the feeder asks the chief which
micro-batch its state holds last: when ``N`` is not newer, the query is replaying a
micro-batch the nodes already trained (it failed or stopped after they committed it, before
Spark recorded it), and nothing is read or sent. Otherwise one Spark job sends each node its
share (``repartition(nodes)``, partition ``i`` to node ``i``), then every node is told to go:
each trains its share, the chief saves the state with ``N`` in one atomic write, the nodes
meet, and the feeder returns, after which Spark records ``N`` in the query's checkpoint. When
the nodes fail and the launcher restarts them (a new generation, resumed from the chief's
state), the feeder sends the micro-batch again to the new nodes.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparktrain.errors import ClusterError, RendezvousTimeout
from sparktrain.tfos import _stream_tasks, _wire

if TYPE_CHECKING:
    from sparktrain.cluster.driver.launcher import Cluster
    from sparktrain.tfos.reservation import Server

_log = logging.getLogger("sparktrain.tfos")

#: Seconds between looks at the reservations while waiting for the nodes.
_POLL_SECONDS = 0.1
#: Seconds a node has to answer a short request (the last micro-batch committed, the end).
REQUEST_TIMEOUT = 60.0
#: Seconds the feeder waits, after feeding failed, for the job to start a new generation.
RESTART_NOTICE_SECONDS = 60.0
#: The launcher's states in which a job no longer runs.
_ENDED = ("succeeded", "failed", "shut down")


@dataclass(frozen=True)
class Node:
    """A training node's stream endpoint, and its name in errors (``chief:0``)."""

    address: tuple[str, int]
    name: str


class StreamNodes:
    """The training nodes of a running streaming job, as the driver reaches them."""

    def __init__(
        self, cluster: Callable[[], Cluster], server: Server, key: bytes, count: int, timeout: float
    ) -> None:
        self._cluster = cluster
        self._server = server
        self.key = key
        self.count = count
        self._timeout = timeout

    def current(self) -> tuple[int, list[Node]]:
        """The current generation and its nodes, once every one of them registered (waiting at
        most the job's ``reservation_timeout``). Raises the job's failure when it ended."""
        deadline = time.monotonic() + self._timeout
        while True:
            cluster = self._cluster()
            generation = cluster.generation
            found = {
                r["executor_id"]: r
                for r in self._server.signed()
                if r.get("generation") == generation and r.get("addr")
            }
            missing = [rank for rank in range(self.count) if rank not in found]
            if not missing:
                nodes = []
                for rank in range(self.count):
                    r = found[rank]
                    nodes.append(
                        Node((str(r["addr"][0]), int(r["addr"][1])), f"{r['job_name']}:{r['task_index']}")
                    )
                return generation, nodes
            state = cluster.status()["state"]
            if state in _ENDED:
                cluster.wait(0)  # raises the job's failure
                raise ClusterError(f"the nodes of {cluster.name} have ended: the stream cannot be fed")
            if time.monotonic() > deadline:
                raise RendezvousTimeout(
                    f"nodes {missing} of {cluster.name} did not open their stream endpoints within "
                    f"{self._timeout:g} s",
                    missing=missing,
                    total=self.count,
                )
            time.sleep(_POLL_SECONDS)

    def end(self) -> None:
        """Ends the stream on every node of the current generation: their feeds return what
        is left, then nothing. A node that cannot be reached is logged (the job's own
        failure, if any, is what ``shutdown`` raises)."""
        try:
            _, nodes = self.current()
        except ClusterError as e:
            _log.warning("the stream was not ended on the nodes: %s", e)
            return
        for node in nodes:
            try:
                _wire.request(node.address, self.key, node.name, {"op": "end"}, REQUEST_TIMEOUT)
            except ClusterError as e:
                _log.warning("the stream was not ended on %s: %s", node.name, e)


def feed_rdd(nodes: StreamNodes, feed_timeout: float, rdd: Any, max_restarts: int = 0) -> bool:
    """Sends every partition of ``rdd`` (one RDD of a DStream) to the nodes and waits until
    they read the rows; True when a node terminated its feed (the stream should stop). When
    the nodes fail and the launcher restarts them, ``rdd`` is sent again, whole, to the new
    nodes (up to ``max_restarts`` times)."""
    attempt = 0
    while True:
        generation, found = nodes.current()
        send = functools.partial(
            _stream_tasks.feed_rows,
            [n.address for n in found],
            [n.name for n in found],
            nodes.key,
            feed_timeout,
        )
        try:
            states = rdd.mapPartitionsWithIndex(send).collect()
        except Exception as e:
            attempt += 1
            if attempt > max_restarts or not restarted(nodes, generation):
                raise
            _log.warning("a DStream's micro-batch is sent again to the restarted nodes (%s)", e)
            continue
        return "terminating" in states


def restarted(nodes: StreamNodes, generation: int) -> bool:
    """Waits for the nodes to register again after a restart of the job; True when the job's
    generation moved past ``generation``. Raises the job's failure when it ended."""
    # The failure may reach the driver a heartbeat time-out after the feeding failed.
    deadline = time.monotonic() + RESTART_NOTICE_SECONDS
    while True:
        now, _ = nodes.current()
        if now != generation:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def _arrow_schema(df: Any) -> Any:
    """``df``'s schema in Arrow, for a node whose share of a micro-batch is empty."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(df.schema)
    except Exception:  # a type Arrow conversion does not cover: an empty share has no columns
        return pa.schema([])


class StreamFeeder:
    """The ``foreachBatch`` function of a Structured Streaming query that trains on it:
    ``query = df.writeStream.foreachBatch(cluster.stream_feeder()).option("checkpointLocation",
    ...).start()``. Each call returns once the nodes have trained and committed the
    micro-batch (see the module's docstring); it raises when they cannot, which fails the
    query."""

    def __init__(
        self,
        nodes: StreamNodes,
        feed_timeout: float,
        max_restarts: int,
        ended: Callable[[], bool],
    ) -> None:
        self._nodes = nodes
        self._timeout = feed_timeout
        self._max_restarts = max_restarts
        self._ended = ended
        #: The micro-batch ids the nodes trained through this feeder, in order.
        self.trained: list[int] = []
        #: The micro-batch ids a restarted query replayed and the nodes had already committed.
        self.skipped: list[int] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        if self._ended():
            raise ClusterError(f"micro-batch {batch_id}: the stream was ended (TFCluster.shutdown)")
        attempt = 0
        while True:
            generation, nodes = self._nodes.current()
            try:
                self._feed(df, int(batch_id), nodes)
                return
            except Exception as e:
                attempt += 1
                if attempt > self._max_restarts or not restarted(self._nodes, generation):
                    raise
                _log.warning("micro-batch %d is sent again to the restarted nodes (%s)", batch_id, e)

    def _feed(self, df: Any, batch_id: int, nodes: list[Node]) -> None:
        key = self._nodes.key
        chief = nodes[0]
        committed = _wire.request(
            chief.address, key, chief.name, {"op": "committed", "timeout": self._timeout}, self._timeout + 5
        )["committed"]
        if batch_id <= committed:
            _log.info(
                "micro-batch %d is already in the nodes' state (up to %d): skipped", batch_id, committed
            )
            self.skipped.append(batch_id)
            return
        delivery = uuid.uuid4().hex
        send = functools.partial(
            _stream_tasks.feed_share,
            [n.address for n in nodes],
            [n.name for n in nodes],
            key,
            batch_id,
            delivery,
        )
        sent = df.repartition(len(nodes)).mapInArrow(send, _stream_tasks.SHARE_RESULT).collect()
        rows = [0] * len(nodes)
        for row in sent:
            rows[int(row["node"])] += int(row["rows"])
        schema = base64.b64encode(_arrow_schema(df).serialize().to_pybytes()).decode()
        with contextlib.ExitStack() as stack:
            # Every node is told before any answer is awaited: each answers once all committed.
            channels = []
            for node, count in zip(nodes, rows, strict=True):
                channel = stack.enter_context(_wire.connect(node.address, key, node.name))
                channel.send_json(
                    {
                        "op": "go",
                        "batch": batch_id,
                        "delivery": delivery,
                        "rows": count,
                        "schema": schema,
                        "timeout": self._timeout,
                    }
                )
                channels.append(channel)
            for channel in channels:
                _wire.checked(channel.receive_json(self._timeout + 5), channel.peer)
        self.trained.append(batch_id)
