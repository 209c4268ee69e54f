"""What the object-store tests check alike on every store (S3 on moto, Azure on Azurite): a
table of the common column kinds, and that a large upload appears only when complete. Each
store's module lists what it holds with that store's own client, passed in as ``listing``."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from sparktrain import fs, tfrecord


def mixed_table(n: int = 1000) -> pa.Table:
    """``n`` rows of an int64, a float32, an int64 list and a string column."""
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "x": pa.array([i / 4 for i in range(n)], pa.float32()),
            "ids": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int64())),
            "word": pa.array([f"w{i % 7}" for i in range(n)], pa.string()),
        }
    )


def check_a_large_upload_appears_whole(root: str, listing: Callable[[str], dict[str, int]]) -> None:
    """A 20 MB TFRecord file under ``root`` goes up in parts (S3's multipart upload, Azure's
    blocks) but no object exists until the writer closes; a writer that fails leaves nothing.
    ``listing(root)`` is name → size under ``root``, as the store's own client sees it."""
    path = f"{root}/big.tfrecord"
    records = [bytes([i % 251]) * 100_000 for i in range(200)]
    writer = tfrecord.RecordWriter(path)
    writer.write_many(records)
    assert not fs.exists(path)
    assert listing(root) == {}
    assert writer.close() == len(records)
    assert listing(root) == {"big.tfrecord": fs.size(path)}
    assert list(tfrecord.RecordReader(path)) == records

    def fail_while_writing() -> None:
        with tfrecord.RecordWriter(f"{root}/failed.tfrecord") as w:
            w.write_many(records)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_while_writing()
    assert sorted(listing(root)) == ["big.tfrecord"]
