"""Interoperability with real TensorFlow (tensorflow-cpu): each side reads what the other wrote,
for every compression TensorFlow offers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pytest

from sparktrain import tfrecord

if TYPE_CHECKING:
    from types import ModuleType

    import tensorflow

COMPRESSIONS = ["", "GZIP", "ZLIB"]


def _tf_examples(tf: ModuleType) -> list[tensorflow.train.Example]:
    """Examples covering every feature kind: empty lists, multi-valued lists, negative and extreme
    int64, non-ASCII and binary bytes."""
    rows = [
        {
            "i": [-(2**63)],
            "f": [1.5],
            "s": ["héllo".encode()],
            "li": [1, -2, 3],
            "lf": [],
            "lb": [b"\x00\xff"],
        },
        {"i": [2**63 - 1], "f": [-0.0], "s": [b""], "li": [], "lf": [0.25, 1e30], "lb": []},
        {"i": [0], "f": [float("inf")], "s": ["日本".encode()], "li": [7], "lf": [-1.0], "lb": [b"a", b"b"]},
    ]

    def feature(values: list[object], kind: str) -> tensorflow.train.Feature:
        if kind == "i":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        if kind == "f":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

    kinds = {"i": "i", "f": "f", "s": "b", "li": "i", "lf": "f", "lb": "b"}
    return [
        tf.train.Example(
            features=tf.train.Features(feature={k: feature(v, kinds[k]) for k, v in row.items()})
        )
        for row in rows
    ]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_sparktrain_reads_what_tensorflow_writes(tf: ModuleType, tmp_path: Path, compression: str) -> None:
    path = str(tmp_path / "tf.tfrecord")
    examples = _tf_examples(tf)
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=compression)) as w:
        for ex in examples:
            w.write(ex.SerializeToString())

    # Raw records are byte-identical to what TensorFlow serialized.
    raw = list(tfrecord.RecordReader(path, compression or None))
    assert raw == [ex.SerializeToString() for ex in examples]

    # Decoded values equal the protos' values; the compression is detected from the bytes.
    table = tfrecord.read(path).read_all()
    assert table.schema == pa.schema(
        [
            ("f", pa.float32()),
            ("i", pa.int64()),
            ("lb", pa.list_(pa.binary())),
            ("lf", pa.list_(pa.float32())),
            ("li", pa.list_(pa.int64())),
            ("s", pa.string()),
        ]
    )
    for row, ex in zip(table.to_pylist(), examples, strict=True):
        feats = ex.features.feature
        assert row["i"] == feats["i"].int64_list.value[0]
        assert row["li"] == list(feats["li"].int64_list.value)
        assert row["lb"] == list(feats["lb"].bytes_list.value)
        assert row["s"] == feats["s"].bytes_list.value[0].decode()
        np.testing.assert_array_equal(np.float32(row["f"]), np.float32(feats["f"].float_list.value[0]))
        np.testing.assert_array_equal(
            np.array(row["lf"], np.float32), np.array(feats["lf"].float_list.value, np.float32)
        )


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_tensorflow_reads_what_sparktrain_writes(tf: ModuleType, tmp_path: Path, compression: str) -> None:
    table = pa.table(
        {
            "label": pa.array([0, 1, 1], pa.int64()),
            "x": pa.array([0.5, -1.25, 3.0], pa.float32()),
            "ids": pa.array([[1, -2], [], [2**62]], pa.list_(pa.int64())),
            "word": pa.array(["ä", "", "z"], pa.string()),
            "blobs": pa.array([[b"\x00"], [b"a", b"bc"], []], pa.list_(pa.binary())),
            "vec": pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], pa.list_(pa.float32(), 2)),
        }
    )
    path = str(tmp_path / "st.tfrecord")
    tfrecord.write_batches(path, table, compression or None)

    spec = {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "x": tf.io.FixedLenFeature([], tf.float32),
        "ids": tf.io.RaggedFeature(tf.int64),
        "word": tf.io.FixedLenFeature([], tf.string),
        "blobs": tf.io.RaggedFeature(tf.string),
        "vec": tf.io.FixedLenFeature([2], tf.float32),
    }
    dataset = tf.data.TFRecordDataset(path, compression_type=compression).batch(8)
    parsed = tf.io.parse_example(next(iter(dataset)), spec)
    assert parsed["label"].numpy().tolist() == [0, 1, 1]
    assert parsed["x"].numpy().tolist() == [0.5, -1.25, 3.0]
    assert parsed["ids"].to_list() == [[1, -2], [], [2**62]]
    assert [w.decode() for w in parsed["word"].numpy()] == ["ä", "", "z"]
    assert parsed["blobs"].to_list() == [[b"\x00"], [b"a", b"bc"], []]
    assert parsed["vec"].numpy().tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
