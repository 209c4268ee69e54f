"""TFoS's ``TFNode``: the data feed of ``InputMode.SPARK``, and ``hdfs_path``."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from sparktrain import _checks
from sparktrain.errors import InvalidArgumentError
from sparktrain.tfos._node import FeedManager


def hdfs_path(ctx: Any, path: str) -> str:
    """``path`` as a full URL, as TFoS resolves it (see ``ctx.absolute_path``)."""
    return str(ctx.absolute_path(path))


class DataFeed:
    """Reads the trainer's share of the RDD given to ``TFCluster.train`` or ``inference``.

    ``next_batch(n)`` returns up to ``n`` rows (fewer at the end), or with ``input_mapping`` a
    dict of tensor name → column values, columns taken by position in the sorted order of the
    mapping's keys, as TFoS does. ``should_stop()`` is true once every row of every epoch was
    read or ``terminate()`` was called. In inference, ``batch_results(results)`` takes one result
    per row of the batches read, in order.
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
        self._rows = mgr.rows()
        self._pending: deque[int] = deque()

    def next_batch(self, batch_size: int) -> list[Any] | dict[str, list[Any]]:
        """Up to ``batch_size`` rows."""
        batch_size = _checks.integer("batch_size", batch_size, minimum=1)
        rows: list[Any] = []
        while len(rows) < batch_size and not self.done_feeding:
            item = next(self._rows, None)
            if item is None:
                self.done_feeding = True
                break
            position, row = item
            if not self.train_mode:
                self._pending.append(position)
            rows.append(row)
        if self.input_tensors is None:
            return rows
        return {t: [row[i] for row in rows] for i, t in enumerate(self.input_tensors)}

    def should_stop(self) -> bool:
        """True once the feed is exhausted or terminated."""
        return self.done_feeding

    def batch_results(self, results: list[Any]) -> None:
        """One result per row read (in inference), in the order the rows came."""
        if len(results) > len(self._pending):
            raise InvalidArgumentError(
                f"batch_results got {len(results)} results for {len(self._pending)} rows not yet answered"
            )
        for result in results:
            self.mgr.results.append((self._pending.popleft(), result))

    def terminate(self) -> None:
        """Stops reading; the rest of the partition is ignored."""
        self.done_feeding = True


__all__ = [
    "DataFeed",
    "hdfs_path",
]
