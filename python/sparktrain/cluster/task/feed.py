"""``input_mode="spark"``, the executor task's side: serving the task's partition of a
DataFrame to its trainer as Arrow batches. Runs in the executor task.

The job's barrier stage runs over the DataFrame itself, repartitioned to one partition per
trainer (``mapInArrow(..., barrier=True)``, see :mod:`sparktrain.cluster.driver.stage`), so
every task holds its partition's batches. The task serves them to its trainer over a Unix
socket as an Arrow IPC stream: no row goes through Python objects or pickling. The first pass
is also spooled to a local Arrow file, so ``ctx.feed()`` can be read again for further epochs
without recomputing or copying the DataFrame.

A task that cannot serve (its partition failed to compute, the spool's disk is full) says why
in a file beside the socket and stops listening: a stream cut short at a batch boundary would
otherwise read as a short partition, and the next epoch would wait for a server that is gone.
Both readers, :mod:`sparktrain.cluster.trainer.feed` and the engine's, raise that error
instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from sparktrain._native import FEED_ERROR_FILE

#: Where a task that stopped serving says why, beside the socket (the engine reads it too).
ERROR_FILE = FEED_ERROR_FILE
#: The longest socket path the kernel takes is 108 bytes; a long TMPDIR would overflow it.
_MAX_SOCKET_PATH = 100


class FeedServer:
    """Serves a task's input batches to its trainer, once live and then from the spool."""

    def __init__(self, batches: Iterator[pa.RecordBatch], schema: pa.Schema, folder: str) -> None:
        self._spool = os.path.join(folder, "feed.arrow")
        #: A folder of its own for the socket, removed on close, when ``folder`` is too deep.
        self._socket_folder: str | None = None
        if len(os.path.join(folder, "feed.sock")) > _MAX_SOCKET_PATH:
            folder = self._socket_folder = tempfile.mkdtemp(prefix="st-feed-", dir="/tmp")
        self.path = os.path.join(folder, "feed.sock")
        #: Why the feed stopped serving, if it did.
        self.error: BaseException | None = None
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
            live, first = first, False
            try:
                with conn, conn.makefile("wb") as out:
                    try:
                        if live:
                            self._serve_live(out)
                        else:
                            self._serve_spool(out)
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the trainer stopped reading early (its choice)
                    except Exception as e:
                        # Before the connection closes: the reader looks for the error file
                        # when its stream ends.
                        self._fail(e)
                        return
            except (BrokenPipeError, ConnectionResetError):
                pass  # closing flushed what was left to a reader that had gone: serve the next pass

    def _fail(self, error: Exception) -> None:
        """Says why in the error file, then stops listening, so that readers raise it. The
        listener is closed even when the file cannot be written (a full disk is one of the
        failures that lead here): a reader then fails to connect rather than waiting."""
        self.error = error
        folder = os.path.dirname(self.path)
        temporary = os.path.join(folder, f".{ERROR_FILE}.tmp")
        try:
            with open(temporary, "w") as f:
                f.write(f"{type(error).__name__}: {error}")
            os.replace(temporary, os.path.join(folder, ERROR_FILE))
        finally:
            self._listener.close()

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
                        out.flush()  # each batch reaches the trainer as soon as it exists
                    except OSError:
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
        if self._socket_folder is not None:
            shutil.rmtree(self._socket_folder, ignore_errors=True)


def _chain(first: pa.RecordBatch | None, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if first is not None:
        yield first
        yield from rest
