"""``input_mode="spark"``, the trainer's side: ``ctx.feed()`` reads the task's partition of the
DataFrame as Arrow batches, from the Unix socket its task serves it on
(:mod:`sparktrain.cluster.task.feed`). Runs in the trainer process."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pyarrow as pa

from sparktrain._native import FEED_ERROR_FILE
from sparktrain.errors import InputError


def read_feed(path: str) -> Iterator[pa.RecordBatch]:
    """One pass over the task's partition. Raises :class:`~sparktrain.errors.InputError` when
    the task could not serve all of it."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            with conn.makefile("rb") as source:
                yield from pa.ipc.open_stream(source)
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
