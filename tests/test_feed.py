"""The Spark feed (``input_mode="spark"``) between a task and its trainer, without Spark: the
task's server over a real Unix socket, read by ``ctx.feed()``'s reader and by the engine.

A partition that fails midway (the disk under the spool fills up, the Spark iterator raises)
must reach the trainer as an error, in this epoch and the next, rather than as a short epoch
followed by a wait for a server that is gone.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

import pyarrow as pa
import pytest

from sparktrain import _native
from sparktrain.cluster.task.feed import FeedServer
from sparktrain.cluster.trainer.feed import read_feed
from sparktrain.errors import InputError

SCHEMA = pa.schema([("x0", pa.float32()), ("label", pa.int64())])


def batches(n: int, fail_after: int | None = None) -> Iterator[pa.RecordBatch]:
    for i in range(n):
        if fail_after is not None and i == fail_after:
            raise OSError(errno.ENOSPC, "No space left on device")
        yield pa.record_batch(
            [pa.array([float(i)] * 100, pa.float32()), pa.array([i % 2] * 100)], schema=SCHEMA
        )


def test_every_epoch_reads_the_whole_partition(tmp_path):
    server = FeedServer(batches(5), SCHEMA, str(tmp_path))
    try:
        for _ in range(3):
            assert sum(b.num_rows for b in read_feed(server.path)) == 500
    finally:
        server.close()


def test_a_partition_that_fails_midway_is_an_error_in_every_epoch(tmp_path):
    server = FeedServer(batches(5, fail_after=2), SCHEMA, str(tmp_path))
    try:
        rows: list[int] = []

        def read_all() -> None:
            rows.extend(batch.num_rows for batch in read_feed(server.path))

        with pytest.raises(
            InputError, match=r"failed: OSError: \[Errno 28\] No space left on device"
        ) as first:
            read_all()
        assert sum(rows) == 200
        assert first.value.path == server.path
        # The next epoch fails at once too, instead of waiting for a server that is gone.
        with pytest.raises(InputError, match="No space left on device"):
            list(read_feed(server.path))
        assert isinstance(server.error, OSError)
    finally:
        server.close()


def test_the_engine_raises_the_feeds_error_too(tmp_path):
    server = FeedServer(batches(5, fail_after=2), SCHEMA, str(tmp_path))
    try:
        config = _native.TrainerConfig(model="logistic_regression", batch_size=50)
        features = _native.FeatureSpec(["x0"], [], [], "label")
        trainer = _native.Trainer(config, features, None)
        feed = _native.Input.feed(server.path, 0, config)
        with pytest.raises(InputError, match="the Spark task serving this feed failed: OSError"):
            trainer.fit(feed, epochs=1)
    finally:
        server.close()


def test_a_deep_working_folder_still_gets_a_socket_it_can_bind(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    server = FeedServer(batches(2), SCHEMA, str(deep))
    try:
        assert len(server.path) <= 100
        assert sum(b.num_rows for b in read_feed(server.path)) == 200
    finally:
        server.close()
    assert not os.path.exists(os.path.dirname(server.path))


def test_a_feed_that_stops_serving_is_named_after_its_time_out(tmp_path):
    """A task whose partition stops coming (a wedged Spark iterator) is named after the read
    time-out, rather than leaving its trainer waiting forever."""
    import threading

    never = threading.Event()

    def stalled() -> Iterator[pa.RecordBatch]:
        yield from batches(1)
        never.wait()

    server = FeedServer(stalled(), SCHEMA, str(tmp_path))
    try:
        reader = read_feed(server.path, timeout=1.0)
        assert next(reader).num_rows == 100
        with pytest.raises(InputError, match=r"no batch for 1 s") as stopped:
            next(reader)
        assert stopped.value.path == server.path
    finally:
        never.set()
        server.close()
