"""The Spark tasks that carry a stream's micro-batches to TFoS nodes, over the channel of
:mod:`sparktrain.tfos._wire`. Runs in Spark tasks (the executors' Python workers).

- :func:`feed_rows` (Spark Streaming): a partition of an RDD of the DStream goes to one node,
  pickled in chunks; the task waits until the node has read the rows, and returns the node's
  feed state (``"terminating"`` once its ``map_fun`` ended its feed).
- :func:`feed_share` (Structured Streaming): partition ``i`` of a micro-batch, repartitioned
  into one partition per node, is node ``i``'s share, sent as Arrow IPC; the task returns how
  many rows it sent. Nothing is trained until the driver's ``go`` (see
  :mod:`sparktrain.tfos._stream`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sparktrain.errors import ClusterError
from sparktrain.tfos import _wire

if TYPE_CHECKING:
    import pyarrow as pa

#: Rows pickled into one frame (fewer when they would exceed the frame limit).
CHUNK_ROWS = 512


def _send_pieces(
    channel: _wire.Channel, items: Sequence[Any], encode: Callable[[Sequence[Any]], bytes]
) -> None:
    """Sends ``items`` as data frames of ``encode(part)``, halving a part whose encoding would
    exceed the frame limit."""
    payload = encode(items)
    if len(payload) <= _wire.MAX_FRAME_BYTES or len(items) <= 1:
        channel.send(_wire.DATA, payload)
        return
    half = len(items) // 2
    _send_pieces(channel, items[:half], encode)
    _send_pieces(channel, items[half:], encode)


def _pickled(rows: Sequence[Any]) -> bytes:
    return pickle.dumps(list(rows), protocol=pickle.HIGHEST_PROTOCOL)


def feed_rows(
    nodes: Sequence[tuple[str, int]],
    names: Sequence[str],
    key: bytes,
    timeout: float,
    index: int,
    rows: Iterable[Any],
) -> Iterator[str]:
    """Sends partition ``index``'s ``rows`` to node ``index % len(nodes)`` and waits up to
    ``timeout`` seconds for it to read them; yields its feed state. An empty partition sends
    nothing and yields ``"running"``."""
    it = iter(rows)
    first = next(it, _END)
    if first is _END:
        yield "running"
        return
    node = index % len(nodes)
    with _wire.connect(tuple(nodes[node]), key, names[node]) as channel:  # type: ignore[arg-type]
        channel.send_json({"op": "rows", "timeout": timeout})
        chunk = [first]
        for row in it:
            chunk.append(row)
            if len(chunk) >= CHUNK_ROWS:
                _send_pieces(channel, chunk, _pickled)
                chunk = []
        if chunk:
            _send_pieces(channel, chunk, _pickled)
        channel.send_json({"op": "end_data"})
        # The node answers once it has read the rows: allow for the transfer besides.
        answer = _wire.checked(channel.receive_json(timeout + _wire.HANDSHAKE_TIMEOUT), channel.peer)
    yield str(answer["state"])


_END = object()


def _ipc(batches: Sequence[pa.RecordBatch]) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return bytes(sink.getvalue())


def _rows_of(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``batch`` as one-row slices, so that :func:`_send_pieces` can halve it."""
    return [batch.slice(i, 1) for i in range(batch.num_rows)]


def feed_share(
    nodes: Sequence[tuple[str, int]],
    names: Sequence[str],
    key: bytes,
    batch_id: int,
    delivery: str,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Sends this task's partition (partition ``i`` goes to node ``i``) as the node's share of
    micro-batch ``batch_id`` from ``delivery``; yields ``(node, rows)``. An empty partition
    sends nothing: the driver's ``go`` tells the node that its share is empty."""
    import pyarrow as pa
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None
    node = context.partitionId()
    sent = 0
    channel: _wire.Channel | None = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if channel is None:
                channel = _wire.connect(tuple(nodes[node]), key, names[node])  # type: ignore[arg-type]
                channel.send_json({"op": "share", "batch": batch_id, "delivery": delivery})
            payload = _ipc([batch])
            if len(payload) <= _wire.MAX_FRAME_BYTES:
                channel.send(_wire.DATA, payload)
            else:
                _send_pieces(channel, _rows_of(batch), _ipc)
            sent += batch.num_rows
        if channel is not None:
            channel.send_json({"op": "end_data"})
            answer = _wire.checked(channel.receive_json(_wire.HANDSHAKE_TIMEOUT * 4), channel.peer)
            if int(answer["rows"]) != sent:
                raise ClusterError(f"{channel.peer} holds {answer['rows']} rows of the {sent} sent")
    finally:
        if channel is not None:
            channel.close()
    yield pa.RecordBatch.from_pydict(
        {"node": [node], "rows": [sent]}, schema=pa.schema([("node", pa.int32()), ("rows", pa.int64())])
    )


#: What :func:`feed_share` yields, as a Spark schema.
SHARE_RESULT = "node int, rows long"
