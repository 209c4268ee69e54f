"""``input_mode="spark"``, the trainer's side: ``ctx.feed()`` reads the task's partition of the
DataFrame as Arrow batches, from the Unix socket its task serves it on
(:mod:`sparktrain.cluster.task.feed`). Runs in the trainer process.

Every read waits at most :data:`FEED_READ_TIMEOUT` (as the engine's own reader of the feed
does): the task may be computing its Spark partition, but one that stops serving is named
then rather than waited for forever.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pyarrow as pa

from sparktrain._native import FEED_ERROR_FILE
from sparktrain.errors import InputError

#: Seconds a read from the feed waits for its task (the engine's reader waits as long).
FEED_READ_TIMEOUT = 600.0


def read_feed(path: str, timeout: float = FEED_READ_TIMEOUT) -> Iterator[pa.RecordBatch]:
    """One pass over the task's partition. Raises :class:`~sparktrain.errors.InputError` when
    the task could not serve all of it, or sent nothing for ``timeout`` seconds."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            with conn.makefile("rb") as source:
                yield from pa.ipc.open_stream(source)
    except TimeoutError as e:
        _raise_if_failed(path)
        raise InputError(
            f"the Spark feed at {path}: no batch for {timeout:g} s from the task serving it "
            "(its partition is still being computed, or the task hangs)",
            path=path,
        ) from e
    except OSError as e:
        _raise_if_failed(path)
        raise InputError(f"the Spark feed at {path}: {e}", path=path) from e
    _raise_if_failed(path)


def _raise_if_failed(path: str) -> None:
    try:
        with open(os.path.join(os.path.dirname(path), FEED_ERROR_FILE)) as f:
            why = f.read()
    except FileNotFoundError:
        return
    raise InputError(f"the Spark task serving the feed at {path} failed: {why}", path=path)
