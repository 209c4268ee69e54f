"""The data feed of TFoS's ``InputMode.SPARK`` inside a node: ``ctx.mgr``
(:class:`FeedManager`, the task's share of the fed RDD; a stream's rows come from
:mod:`sparktrain.tfos._stream`) and :class:`DataFeed`, what TFoS's ``TFNode.DataFeed(ctx.mgr)``
returns. A ``DataFeed`` also reads a :mod:`~sparktrain.tfos.TFManager` queue as TFoS's does.
Runs in the trainer process."""

from __future__ import annotations

import pickle
import queue
from collections import deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sparktrain import _checks
from sparktrain.errors import InvalidArgumentError
from sparktrain.tfos.marker import EndPartition

if TYPE_CHECKING:
    from sparktrain.cluster.trainer.context import TrainerContext

#: The columns of the DataFrame an RDD becomes to be fed: the row's position, the pickled row.
INDEX_COLUMN = "_sparktrain_index"
ROW_COLUMN = "_sparktrain_row"
#: Seconds ``terminate()`` waits for more rows in a TFManager queue while it empties it.
DRAIN_SECONDS = 5.0


class FeedSource:
    """What a node's ``ctx.mgr`` is in ``InputMode.SPARK``: the rows that reach the node
    through the launcher, read by :class:`DataFeed`. It is not TFoS's multiprocessing manager:
    it has no queues (:meth:`get_queue` says so) and keeps only ``"state"``."""

    #: Whether rows read are owed a result (``TFCluster.inference``).
    inference = False
    #: ``"running"``, or ``"terminating"`` once a feed was terminated.
    state = "running"
    _default: DataFeed | None = None

    def take(self, n: int) -> list[Any]:
        """Up to ``n`` rows; fewer (or none) at the end of the feed or after ``terminate``."""
        raise NotImplementedError

    def answer(self, results: list[Any]) -> None:
        """Results for the oldest rows read (inference); dropped in training, as TFoS does."""

    def terminate(self) -> None:
        """Stops feeding: every feed of the node reads nothing more."""
        self.state = "terminating"

    def get(self, key: str) -> Any:
        """TFoS's ``mgr.get``: only ``"state"`` is kept."""
        if key != "state":
            raise InvalidArgumentError(f"mgr.get({key!r}): only 'state' is kept")
        return self.state

    def set(self, key: str, value: Any) -> None:
        """TFoS's ``mgr.set``: only ``("state", "terminating")``, which terminates the feed."""
        if key != "state" or value != "terminating":
            raise InvalidArgumentError(f"mgr.set({key!r}, {value!r}): only ('state', 'terminating') is kept")
        self.terminate()

    def get_queue(self, qname: str) -> Any:
        """Refused: rows reach a sparktrain node as Arrow batches through the launcher, not
        through a multiprocessing queue; read them with ``TFNode.DataFeed(ctx.mgr)``."""
        raise InvalidArgumentError(
            f"ctx.mgr.get_queue({qname!r}): a sparktrain.tfos node has no multiprocessing queues; its "
            "rows reach it through the launcher: read them with TFNode.DataFeed(ctx.mgr)"
        )

    def default_feed(self) -> DataFeed:
        """The feed behind TFoS's module functions ``TFNode.next_batch(mgr, ...)`` and
        ``TFNode.batch_results(mgr, ...)``."""
        if self._default is None:
            self._default = DataFeed(self, train_mode=not self.inference)
        return self._default

    def check_answered(self) -> None:
        """Fails when rows read are still owed a result."""


class FeedManager(FeedSource):
    """``ctx.mgr``: the task's share of the fed RDD, read row by row for ``epochs`` passes by
    every :class:`~sparktrain.tfos.TFNode.DataFeed` of the node (they share one reader, as
    TFoS's feeds share one queue), and the inference results handed back."""

    def __init__(self, ctx: TrainerContext, epochs: int, pickled_rows: bool, inference: bool) -> None:
        self._ctx = ctx
        self._epochs = max(1, epochs)
        self._pickled = pickled_rows
        #: Whether the job is ``TFCluster.inference``: rows read are then owed a result.
        self.inference = inference
        self._rows = self._read()
        self._exhausted = False
        self.state = "running"
        #: Positions of the rows read and not answered yet, in order.
        self.pending: deque[int] = deque()
        #: ``(row position, result)`` pairs from ``batch_results``.
        self.results: list[tuple[int, Any]] = []

    def _read(self) -> Iterator[tuple[int, Any]]:
        """``(position, row)`` for every row of every epoch."""
        for _ in range(self._epochs):
            for batch in self._ctx.feed():
                positions = batch.column(INDEX_COLUMN).to_pylist()
                if self._pickled:
                    rows = [pickle.loads(r) for r in batch.column(ROW_COLUMN).to_pylist()]
                else:
                    columns = [batch.column(i).to_pylist() for i in range(1, batch.num_columns)]
                    rows = [tuple(r) for r in zip(*columns, strict=True)]
                yield from zip(positions, rows, strict=True)

    def take(self, n: int) -> list[Any]:
        """Up to ``n`` rows; fewer (or none) at the end of the feed or after ``terminate``."""
        rows: list[Any] = []
        while len(rows) < n and not self._exhausted and self.state == "running":
            item = next(self._rows, None)
            if item is None:
                self._exhausted = True
                break
            if self.inference:
                self.pending.append(item[0])
            rows.append(item[1])
        return rows

    def answer(self, results: list[Any]) -> None:
        """Pairs ``results`` with the oldest rows read and not answered yet."""
        if not self.inference:
            return  # TFoS drops results in training: nobody reads its output queue there
        if len(results) > len(self.pending):
            raise InvalidArgumentError(
                f"batch_results got {len(results)} results for {len(self.pending)} rows not yet answered"
            )
        for result in results:
            self.results.append((self.pending.popleft(), result))

    def check_answered(self) -> None:
        """In inference, fails when rows read got no result, or when rows of the node's share
        were never read and the feed was not terminated: their outputs would be missing from
        an RDD that promises one per input row. (``terminate()`` drops the rest, as in TFoS.)"""
        if not self.inference:
            return
        if self.pending:
            raise InvalidArgumentError(
                f"inference: {len(self.pending)} rows were read but got no result from batch_results; "
                "TFCluster.inference needs one result per row read"
            )
        if self.state == "running" and not self._exhausted and next(self._rows, None) is not None:
            unread = 1 + sum(1 for _ in self._rows)
            self._exhausted = True
            raise InvalidArgumentError(
                f"inference: map_fun returned with {unread} rows of its share never read; "
                "TFCluster.inference needs one result per row: read with next_batch until "
                "should_stop(), or call terminate() to drop the rest"
            )


class DataFeed:
    """Reads the node's share of the RDD given to ``TFCluster.train`` or ``inference``, or of
    the stream given to ``train``.

    ``next_batch(n)`` returns up to ``n`` rows (fewer at the end; in a stream it waits for
    ``n``), or with ``input_mapping`` a dict of tensor name → column values, columns taken by
    position in the sorted order of the mapping's keys, as TFoS does. ``should_stop()`` is
    true once this feed read to the end of every epoch (of the stream), or after
    ``terminate()``. In inference, ``batch_results(results)`` takes one result per row read,
    in order. The feeds of one node share its rows, as TFoS's share one queue; ``train_mode``
    matters only for a :mod:`~sparktrain.tfos.TFManager` queue (see :meth:`next_batch`).

    ``mgr`` may also be a :mod:`~sparktrain.tfos.TFManager` that user code fills: the feed
    then reads its ``qname_in`` queue and writes results to ``qname_out``, as TFoS's does.
    """

    def __init__(
        self,
        mgr: Any,
        train_mode: bool = True,
        qname_in: str = "input",
        qname_out: str = "output",
        input_mapping: dict[str, str] | None = None,
    ) -> None:
        if mgr is None:
            raise InvalidArgumentError("DataFeed needs ctx.mgr, which exists only in InputMode.SPARK")
        if not isinstance(mgr, FeedSource) and not hasattr(mgr, "get_queue"):
            raise InvalidArgumentError(f"DataFeed(mgr={mgr!r}): pass ctx.mgr or a TFManager")
        if input_mapping is not None:
            _checks.instance("input_mapping", input_mapping, Mapping, "a dict of column to tensor name")
        self.mgr = mgr
        self.train_mode = train_mode
        self.qname_in = qname_in
        self.qname_out = qname_out
        self.done_feeding = False
        self.input_tensors = [t for _, t in sorted(input_mapping.items())] if input_mapping else None
        self._queues = (
            None if isinstance(mgr, FeedSource) else (mgr.get_queue(qname_in), mgr.get_queue(qname_out))
        )

    def next_batch(self, batch_size: int) -> list[Any] | dict[str, list[Any]]:
        """Up to ``batch_size`` rows; fewer (or none) at the end of the feed.

        From a TFManager queue it takes items until ``batch_size`` rows or ``None`` (the end
        of the feed); an :class:`~sparktrain.tfos.marker.EndPartition` ends the batch early
        in inference (``train_mode=False``) once it holds rows."""
        batch_size = _checks.integer("batch_size", batch_size, minimum=1)
        if self._queues is not None:
            rows = self._from_queue(batch_size)
        else:
            rows = self.mgr.take(batch_size)
            if len(rows) < batch_size:
                self.done_feeding = True
        if self.input_tensors is None:
            return rows
        return {t: [row[i] for row in rows] for i, t in enumerate(self.input_tensors)}

    def _from_queue(self, batch_size: int) -> list[Any]:
        assert self._queues is not None
        source = self._queues[0]
        rows: list[Any] = []
        while len(rows) < batch_size:
            item = source.get(block=True)
            source.task_done()
            if item is None:
                self.done_feeding = True
                break
            if isinstance(item, EndPartition):
                if not self.train_mode and rows:
                    break
                continue
            rows.append(item)
        return rows

    def should_stop(self) -> bool:
        """True once the feed is exhausted or terminated."""
        return self.done_feeding

    def batch_results(self, results: list[Any]) -> None:
        """One result per row read (in inference), in the order the rows came. In training
        the results are dropped, as TFoS does (a TFManager's ``qname_out`` queue gets them)."""
        if self._queues is not None:
            for result in results:
                self._queues[1].put(result, block=True)
            return
        self.mgr.answer(list(results))

    def terminate(self) -> None:
        """Stops feeding this node: the rest of its share is not read. A TFManager's
        ``state`` becomes ``"terminating"`` and its queue is emptied of what arrives within
        ``DRAIN_SECONDS``."""
        if self._queues is not None:
            self.mgr.set("state", "terminating")
            while True:
                try:
                    self._queues[0].get(block=True, timeout=DRAIN_SECONDS)
                except queue.Empty:
                    break
                self._queues[0].task_done()
        else:
            self.mgr.terminate()
        self.done_feeding = True
