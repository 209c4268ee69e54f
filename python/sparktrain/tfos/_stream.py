"""A TFoS node's side of streaming: the endpoint where micro-batches arrive, and what
``map_fun`` reads them with. Runs in the trainer process.

Each training node of a streaming job listens on its host (:class:`StreamEndpoint`, over the
authenticated channel of :mod:`sparktrain.tfos._wire`) and registers the address with the
driver's reservation server. Two kinds of stream reach it:

- **Spark Streaming** (``cluster.train(dstream)``, as in TFoS): each partition of each RDD is
  sent by a Spark task to one node and queued there (:class:`RowStream`, the node's
  ``ctx.mgr``); ``TFNode.DataFeed(ctx.mgr)`` reads the rows across micro-batches, waiting for
  more, until the driver ends the stream. The task waits until the node has read its rows (or
  terminated the feed), as TFoS's feeding tasks do.
- **Structured Streaming** (``cluster.stream_feeder()`` as a ``foreachBatch`` function): each
  micro-batch is split into one share per node; the shares are held until the driver says that
  every node got its own (``go``), then ``ctx.get_stream_feed()`` hands each node its share
  (:class:`MicroBatch`). ``feed.commit(state)`` ends a micro-batch: the chief saves ``state``
  together with the micro-batch's id in one atomic write, every node meets the others, and
  only then does the driver's ``foreachBatch`` return, so that Spark records the micro-batch as
  done. A query that restarts replays the micro-batches it had not recorded; the nodes skip
  those their state already holds, so that each one is trained exactly once (see
  :class:`MicroBatches`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import pickle
import socket
import sys
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparktrain.errors import ClusterError, InvalidArgumentError
from sparktrain.tfos import _wire
from sparktrain.tfos._feed import FeedSource

if TYPE_CHECKING:
    import pyarrow as pa

    from sparktrain.cluster.trainer.context import TrainerContext

#: Seconds the endpoint waits for the next frame of a request before it gives the sender up.
FRAME_TIMEOUT = 120.0
#: Requests a node serves at once; more are refused as they arrive.
MAX_CONNECTIONS = 64
#: The name of the stream state's file in ``state_dir`` (``stream.npz``).
STATE_NAME = "stream"
#: The key of the micro-batch id in the saved state.
BATCH_KEY = "__sparktrain_stream_batch__"
#: The barrier every node reaches when it commits a micro-batch.
COMMIT_BARRIER = "sparktrain.tfos.stream.commit"


class _Piece:
    """The rows one feeding task sent; ``done`` is set once they were all read (or dropped)."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows
        self.taken = 0
        self.done = threading.Event()


class RowStream(FeedSource):
    """``ctx.mgr`` of a node fed by Spark Streaming: the rows of every micro-batch's partitions
    sent to this node, in the order they arrived, until the driver ends the stream."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pieces: deque[_Piece] = deque()
        self._ended = False
        self.state = "running"

    def put(self, rows: list[Any]) -> _Piece:
        """Queues ``rows`` (called by the endpoint); the piece is done at once when the feed
        is terminated."""
        piece = _Piece(rows)
        with self._cond:
            if self._ended:
                raise InvalidArgumentError("the stream has ended: this node takes no more rows")
            if self.state != "running" or not rows:
                piece.done.set()
            else:
                self._pieces.append(piece)
                self._cond.notify_all()
        return piece

    def take(self, n: int) -> list[Any]:
        """``n`` rows, waiting for them; fewer only at the end of the stream or after
        ``terminate``."""
        rows: list[Any] = []
        with self._cond:
            while len(rows) < n:
                if self._pieces:
                    piece = self._pieces[0]
                    want = n - len(rows)
                    rows.extend(piece.rows[piece.taken : piece.taken + want])
                    piece.taken += want
                    if piece.taken >= len(piece.rows):
                        self._pieces.popleft()
                        piece.done.set()
                elif self._ended or self.state != "running":
                    break
                else:
                    self._cond.wait()
        return rows

    def terminate(self) -> None:
        """Stops feeding: queued rows are dropped, later ones too; their senders learn that the
        node terminated, and the driver then stops the streaming job."""
        with self._cond:
            self.state = "terminating"
            for piece in self._pieces:
                piece.done.set()
            self._pieces.clear()
            self._cond.notify_all()

    def end(self) -> None:
        """The driver ended the stream: reads return what is left, then nothing."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()


class MicroBatches(FeedSource):
    """The micro-batches of a Structured Streaming query for this node, and the exactly-once
    bookkeeping: ``committed`` is the id of the last micro-batch the node's state holds
    (None until ``map_fun`` opens the feed and restores it).

    A share that arrives is held until the driver's ``go`` for its micro-batch and delivery
    (one ``foreachBatch`` call): only then is it handed to ``map_fun``, so that no node trains
    on a micro-batch whose delivery did not reach every node. A share or a ``go`` for a
    micro-batch already committed is answered at once and not trained again."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.committed: int | None = None
        self._shares: dict[int, tuple[str, pa.Table]] = {}
        self._ready: dict[int, pa.Table] = {}
        self.current: int | None = None
        self._ended = False

    def take(self, n: int) -> list[Any]:
        """Refused: micro-batches are read with ``ctx.get_stream_feed()``."""
        raise InvalidArgumentError(
            "this node is fed by cluster.stream_feeder(): read its micro-batches with "
            "ctx.get_stream_feed(), not TFNode.DataFeed"
        )

    # --- the endpoint's side ---

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        if not self._cond.wait_for(lambda: ready() or self._ended, timeout):
            raise ClusterError(f"{what} within {timeout:g} s")
        if not ready():
            raise ClusterError("the stream has ended")

    def put_share(self, batch: int, delivery: str, table: pa.Table) -> None:
        """Holds this node's share of micro-batch ``batch`` from ``delivery``; a later
        delivery's share replaces an earlier one until the micro-batch is handed out."""
        with self._cond:
            if self._ended:
                raise InvalidArgumentError("the stream has ended: this node takes no more micro-batches")
            if self.committed is not None and batch <= self.committed:
                return
            if batch == self.current or batch in self._ready:
                return
            self._shares[batch] = (delivery, table)

    def last_committed(self, timeout: float) -> int:
        """``committed``, once ``map_fun`` has opened the feed."""
        with self._cond:
            self._wait(
                lambda: self.committed is not None,
                timeout,
                "map_fun did not open the stream feed (ctx.get_stream_feed())",
            )
            assert self.committed is not None
            return self.committed

    def go(self, batch: int, delivery: str, rows: int, schema: pa.Schema, timeout: float) -> int:
        """Hands micro-batch ``batch`` to ``map_fun`` (this node's share from ``delivery``,
        which must hold ``rows`` rows; none arrived when ``rows`` is 0) and waits until it is
        committed; returns the id committed."""
        with self._cond:
            committed = self.last_committed(timeout)
            if batch <= committed:
                return committed
            if batch != self.current and batch not in self._ready:
                if self.current is not None or self._ready:
                    raise ClusterError(
                        f"micro-batch {batch} arrived while micro-batch "
                        f"{self.current if self.current is not None else min(self._ready)} is not committed"
                    )
                held = self._shares.pop(batch, None)
                if held is not None and held[0] == delivery:
                    table = held[1]
                elif rows == 0:
                    table = schema.empty_table()
                else:
                    raise ClusterError(
                        f"this node's share of micro-batch {batch} ({rows} rows) did not arrive"
                    )
                if table.num_rows != rows:
                    raise ClusterError(
                        f"this node's share of micro-batch {batch} holds {table.num_rows} rows, not {rows}"
                    )
                self._ready[batch] = table
                self._cond.notify_all()
            self._wait(
                lambda: self.committed is not None and self.committed >= batch,
                timeout,
                f"map_fun did not commit micro-batch {batch} (feed.commit())",
            )
            return batch

    def end(self) -> None:
        """The driver ended the stream: ``map_fun``'s loop over it stops."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    # --- map_fun's side ---

    def open(self, committed: int) -> None:
        """Starts the feed after ``committed`` (restored from the node's state)."""
        with self._cond:
            if self.committed is not None:
                raise InvalidArgumentError("ctx.get_stream_feed() was already called on this node")
            self.committed = committed
            for batch in [b for b in self._shares if b <= committed]:
                del self._shares[batch]
            self._cond.notify_all()

    def next(self) -> tuple[int, pa.Table] | None:
        """The next micro-batch handed out, waiting for it; None once the stream has ended."""
        with self._cond:
            if self.current is not None:
                raise InvalidArgumentError(
                    f"micro-batch {self.current} is not committed: call feed.commit() before reading the next"
                )
            self._cond.wait_for(lambda: bool(self._ready) or self._ended)
            if not self._ready:
                return None
            batch = min(self._ready)
            self.current = batch
            return batch, self._ready.pop(batch)

    def commit(self, batch: int) -> None:
        """Records ``batch`` as committed and answers the driver."""
        with self._cond:
            self.committed = batch
            self.current = None
            for held in [b for b in self._shares if b <= batch]:
                del self._shares[held]
            self._cond.notify_all()


@dataclass(frozen=True)
class MicroBatch:
    """This node's share of one micro-batch: ``batch_id`` (Spark's, for ``foreachBatch``)
    and its rows as a ``pyarrow.Table`` (the DataFrame's columns)."""

    batch_id: int
    table: pa.Table

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def rows(self) -> list[tuple[Any, ...]]:
        """The rows as tuples of the DataFrame's column values."""
        columns = [column.to_pylist() for column in self.table.columns]
        return list(zip(*columns, strict=True))


class StreamFeed:
    """The micro-batches of a Structured Streaming query, for ``map_fun``; made by
    ``ctx.get_stream_feed()`` (see there). Iterate over it for each :class:`MicroBatch`, and
    call :meth:`commit` after training on each one."""

    def __init__(
        self,
        trainer: TrainerContext,
        batches: MicroBatches,
        state_dir: str | None,
        last_batch_id: int | None,
        pickle: bool,
    ) -> None:
        self._trainer = trainer
        self._batches = batches
        self._state_dir = state_dir
        self._pickle = pickle
        #: The state the chief last committed (its dict, without the micro-batch id), or None.
        self.state: dict[str, Any] | None = None
        committed = -1
        if state_dir is not None:
            if last_batch_id is not None:
                raise InvalidArgumentError("get_stream_feed: give state_dir or last_batch_id, not both")
            saved = trainer.load_state(state_dir, name=STATE_NAME, pickle=pickle)
            if saved is not None:
                if not isinstance(saved, dict) or BATCH_KEY not in saved:
                    raise InvalidArgumentError(f"{state_dir}/{STATE_NAME}: not the state of a stream feed")
                committed = int(saved.pop(BATCH_KEY))
                self.state = saved
        elif last_batch_id is not None:
            committed = int(last_batch_id)
        batches.open(committed)

    @property
    def last_batch_id(self) -> int:
        """The id of the last micro-batch committed (-1 before the first)."""
        committed = self._batches.committed
        return -1 if committed is None else committed

    def __iter__(self) -> StreamFeed:
        return self

    def __next__(self) -> MicroBatch:
        item = self._batches.next()
        if item is None:
            raise StopIteration
        return MicroBatch(*item)

    def commit(self, state: dict[str, Any] | None = None) -> None:
        """Ends the current micro-batch. With a ``state_dir``, the chief saves ``state`` (a dict
        of NumPy arrays and JSON values, or any picklable values with ``pickle=True``) with the
        micro-batch's id, replacing the previous state atomically (``ctx.save_state``); then
        every node waits for the others, and the driver learns that the micro-batch is done.
        Without a ``state_dir`` user code saves its own checkpoint, with the micro-batch's id,
        before it calls ``commit()``, and passes that id as ``last_batch_id`` on restart."""
        batch = self._batches.current
        if batch is None:
            raise InvalidArgumentError("feed.commit(): no micro-batch is being trained")
        if self._state_dir is not None:
            if state is not None and not isinstance(state, dict):
                raise InvalidArgumentError(f"feed.commit(state={type(state).__name__}): state must be a dict")
            self._trainer.save_state(
                {**(state or {}), BATCH_KEY: batch}, self._state_dir, name=STATE_NAME, pickle=self._pickle
            )
        elif state is not None:
            raise InvalidArgumentError(
                "feed.commit(state): saving state needs get_stream_feed(state_dir=...)"
            )
        self._trainer.barrier(COMMIT_BARRIER)
        self._batches.commit(batch)


class StreamEndpoint:
    """Where a node takes requests from the driver and the feeding tasks: one connection per
    request, served on a thread of its own (see the module's docstring for what each does)."""

    def __init__(self, host: str, key: bytes, stream: RowStream | MicroBatches, name: str) -> None:
        self._key = key
        self._stream = stream
        self._name = name
        self._listener = socket.create_server((socket.gethostbyname(host), 0), backlog=64)
        self.address = (host, int(self._listener.getsockname()[1]))
        self._lock = threading.Lock()
        self._connections = 0
        self._closed = False
        threading.Thread(target=self._accept, name="tfos-stream", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return
            with self._lock:
                full = self._connections >= MAX_CONNECTIONS
                if not full:
                    self._connections += 1
            if full:
                sock.close()
                continue
            name = f"{peer[0]}:{peer[1]}"
            threading.Thread(
                target=self._serve, args=(sock, name), name="tfos-stream-request", daemon=True
            ).start()

    def _serve(self, sock: socket.socket, peer: str) -> None:
        try:
            with contextlib.closing(sock):
                channel = _wire.accept(sock, self._key, peer)
                request = channel.receive_json(FRAME_TIMEOUT)
                try:
                    answer = self._answer(channel, request)
                except (ClusterError, InvalidArgumentError) as e:
                    answer = {"error": str(e)}
                channel.send_json(answer)
        except Exception as e:  # a sender that went away or failed to authenticate
            print(
                f"sparktrain.tfos: a stream request from {peer} to {self._name} failed: {e}", file=sys.stderr
            )
        finally:
            with self._lock:
                self._connections -= 1

    def _data(self, channel: _wire.Channel) -> list[bytes]:
        """The data frames of a request, up to its ``end_data`` message."""
        frames = []
        while True:
            kind, payload = channel.receive(FRAME_TIMEOUT)
            if kind == _wire.DATA:
                frames.append(payload)
            elif json.loads(payload).get("op") == "end_data":
                return frames
            else:
                raise ClusterError(f"{channel.peer} sent a message in the middle of its data")

    def _answer(self, channel: _wire.Channel, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        stream = self._stream
        timeout = float(request.get("timeout", FRAME_TIMEOUT))
        if op == "end":
            stream.end()
            return {"ok": True}
        if op == "rows" and isinstance(stream, RowStream):
            rows: list[Any] = []
            for frame in self._data(channel):
                # From a Spark task of this job: the frame's tag proved it holds the stream key.
                rows.extend(pickle.loads(frame))
            piece = stream.put(rows)
            if not piece.done.wait(timeout):
                raise ClusterError(
                    f"{self._name} did not read the {len(rows)} rows sent within {timeout:g} s"
                )
            return {"state": stream.state}
        if isinstance(stream, MicroBatches):
            if op == "share":
                import pyarrow as pa

                tables = [pa.ipc.open_stream(frame).read_all() for frame in self._data(channel)]
                table = pa.concat_tables(tables) if tables else None
                if table is not None:
                    stream.put_share(int(request["batch"]), str(request["delivery"]), table)
                return {"rows": 0 if table is None else table.num_rows}
            if op == "committed":
                return {"committed": stream.last_committed(timeout)}
            if op == "go":
                import pyarrow as pa

                schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(request["schema"])))
                committed = stream.go(
                    int(request["batch"]), str(request["delivery"]), int(request["rows"]), schema, timeout
                )
                return {"committed": committed}
        raise InvalidArgumentError(f"{self._name} does not take {op!r} requests in this kind of stream")
