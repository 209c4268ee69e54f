"""``input_mode="spark"``: each trainer reads one partition of a DataFrame as Arrow batches.

The job's barrier stage runs over the DataFrame itself, repartitioned to one partition per
trainer (``mapInArrow(..., barrier=True)``), so every task holds its partition's batches. The
task serves them to its trainer over a Unix socket as an Arrow IPC stream: no row goes through
Python objects or pickling. The first pass is also spooled to a local Arrow file, so
``ctx.feed()`` can be read again for further epochs without recomputing or copying the
DataFrame.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from sparktrain.cluster.settings import JobSettings
    from sparktrain.cluster.task import TaskResult

_RESULT_SCHEMA = pa.schema([("rank", pa.int32()), ("value", pa.binary())])


class FeedServer:
    """Serves a task's input batches to its trainer, once live and then from the spool."""

    def __init__(self, batches: Iterator[pa.RecordBatch], schema: pa.Schema, folder: str) -> None:
        self.path = os.path.join(folder, "feed.sock")
        self._spool = os.path.join(folder, "feed.arrow")
        self._source = batches
        self._schema = schema
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(1)
        self._thread = threading.Thread(target=self._serve, name="sparktrain-feed", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        first = True
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with conn, conn.makefile("wb") as out:
                try:
                    if first:
                        first = False
                        self._serve_live(out)
                    else:
                        self._serve_spool(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the trainer stopped reading early; that is its choice

    def _serve_live(self, out: Any) -> None:
        first = next(self._source, None)
        if first is not None:
            # Spark's batches are the truth (its own time zone and nullability conventions).
            self._schema = first.schema
        with pa.OSFile(self._spool, "wb") as spool_file, pa.ipc.new_file(spool_file, self._schema) as spool:
            live: pa.ipc.RecordBatchStreamWriter | None = pa.ipc.new_stream(out, self._schema)
            for batch in _chain(first, self._source):
                spool.write_batch(batch)
                if live is not None:
                    try:
                        live.write_batch(batch)
                    except (BrokenPipeError, ConnectionResetError):
                        live = None  # keep spooling: a later epoch reads the whole partition
            if live is not None:
                live.close()

    def _serve_spool(self, out: Any) -> None:
        with pa.memory_map(self._spool) as source, pa.ipc.new_stream(out, self._schema) as stream:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                stream.write_batch(reader.get_batch(i))

    def close(self) -> None:
        self._listener.close()


def _chain(first: pa.RecordBatch | None, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if first is not None:
        yield first
        yield from rest


def read_feed(path: str) -> Iterator[pa.RecordBatch]:
    """The trainer's side: one pass over the task's partition."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        with conn.makefile("rb") as source:
            yield from pa.ipc.open_stream(source)


def run_fed_stage(data: Any, num_tasks: int, settings: JobSettings) -> list[TaskResult]:
    """Runs the job's barrier stage over ``data`` repartitioned to ``num_tasks`` partitions."""
    from sparktrain.cluster.task import TaskResult, run_task
    from sparktrain.spark_types import arrow_schema_of

    schema = arrow_schema_of(data.schema)

    def body(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        result = run_task(settings, feed=(batches, schema))
        columns = [pa.array([result.rank], pa.int32()), pa.array([result.value], pa.binary())]
        yield pa.record_batch(columns, schema=_RESULT_SCHEMA)

    rows = data.repartition(num_tasks).mapInArrow(body, "rank int, value binary", barrier=True).collect()
    return [TaskResult(rank=row["rank"], value=bytes(row["value"])) for row in rows]
