"""Writes the Example and SequenceExample golden files with sparktrain's Rust writer.

``rust_examples.tfrecord`` and ``rust_sequence_examples.tfrecord`` hold the rows below, encoded
by the Rust codec (through the installed ``sparktrain._native``, so no Rust build is needed). The
JVM file format's ``ExampleGoldenTest`` (jars/) builds the same rows as Spark ``InternalRow``s and
checks that it writes these files byte for byte. The Arrow types are the ones Spark's Arrow
conversion gives for the Spark types in the comments. Run with ``--check`` to compare the files
with what the Rust writer makes now.

    .venv/bin/python tests/golden/make_examples.py [--check]
"""

from __future__ import annotations

import datetime as dt
import decimal
import sys
import tempfile
from pathlib import Path

import pyarrow as pa

from sparktrain import _native

HERE = Path(__file__).parent
D = decimal.Decimal

EXAMPLE_SCHEMA = pa.schema(
    [
        ("b", pa.bool_()),  # boolean
        ("i8", pa.int8()),  # byte
        ("i16", pa.int16()),  # short
        ("i32", pa.int32()),  # int
        ("i64", pa.int64()),  # long
        ("f32", pa.float32()),  # float
        ("f64", pa.float64()),  # double
        ("dec", pa.decimal128(10, 3)),  # decimal(10,3)
        ("s", pa.string()),  # string
        ("bin", pa.binary()),  # binary
        ("d", pa.date32()),  # date
        ("ts", pa.timestamp("us", "UTC")),  # timestamp
        ("ntz", pa.timestamp("us")),  # timestamp_ntz
        ("ids", pa.list_(pa.int64())),  # array<long>
        ("fl", pa.list_(pa.float32())),  # array<float>
        ("dl", pa.list_(pa.float64())),  # array<double>
        ("tags", pa.list_(pa.string())),  # array<string>
        ("blobs", pa.list_(pa.binary())),  # array<binary>
        ("decs", pa.list_(pa.decimal128(5, 2))),  # array<decimal(5,2)>
        ("days", pa.list_(pa.date32())),  # array<date>
        ("flags", pa.list_(pa.bool_())),  # array<boolean>
        ("a_much_longer_feature_name_" + "x" * 120, pa.int32()),  # int, a name over 127 bytes
    ]
)

EPOCH = dt.date(1970, 1, 1)
UTC = dt.timezone.utc


def ts(micros: int, tz: dt.tzinfo | None) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=tz) + dt.timedelta(microseconds=micros)


EXAMPLE_ROWS = [
    [
        True,
        -128,
        -300,
        70000,
        1 << 40,
        0.5,
        0.1,
        D("1.250"),
        "é",
        b"\x00\xff",
        EPOCH - dt.timedelta(days=31),
        ts(-1, UTC),
        ts(1_500_000, None),
        [1, -2, 300],
        [0.25, -1.0],
        [1e300, -2.5],
        ["a", ""],
        [b"\x01"],
        [D("-0.05"), D("12.34")],
        [EPOCH, EPOCH + dt.timedelta(days=19000)],
        [True, False],
        7,
    ],
    [None] * 22,
    [
        False,
        127,
        32767,
        -1,
        -(1 << 63),
        float("nan"),
        -0.0,
        D("-0.050"),
        "",
        b"",
        EPOCH,
        ts(0, UTC),
        ts(-1, None),
        [],
        [],
        [],
        [],
        [],
        [],
        [],
        [],
        -1,
    ],
    [
        True,
        0,
        0,
        0,
        (1 << 63) - 1,
        1e-45,
        3.4e38,
        D("0.000"),
        "x" * 200,
        bytes(range(256)) * 2,
        dt.date(9999, 12, 31),
        ts(253402300799999999, UTC),
        ts(-62135596800000000, None),
        [(1 << 63) - 1, -1],
        [float("inf")],
        [],
        ["long " * 40],
        [b"\x00" * 130],
        [D("999.99")],
        [dt.date(1, 1, 1)],
        [True],
        None,
    ],
]

SEQUENCE_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),  # long (context)
        ("tokens", pa.list_(pa.list_(pa.int64()))),  # array<array<long>> (feature list)
        ("label", pa.string()),  # string (context)
        ("frames", pa.list_(pa.list_(pa.float32()))),  # array<array<float>>
        ("words", pa.list_(pa.list_(pa.string()))),  # array<array<string>>
    ]
)

SEQUENCE_ROWS = [
    [1, [[1, 2], [], [300]], "yes", [[0.5], [1.0, 2.0]], [["a", "bc"], []]],
    [None, None, None, None, None],
    [2, [], "", [], [[]]],
    [None, [[-1]], None, None, [[""]]],
]


def table(schema: pa.Schema, rows: list[list[object]]) -> pa.Table:
    columns = list(zip(*rows, strict=True))
    return pa.table([pa.array(list(c), f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def write(path: Path, data: pa.Table, record_type: str) -> None:
    writer = _native.ExampleWriter(str(path), None, True, None, record_type)
    for batch in data.to_batches():
        writer.write_batch(batch)
    writer.close()


def main() -> int:
    files = {
        "rust_examples.tfrecord": (table(EXAMPLE_SCHEMA, EXAMPLE_ROWS), "Example"),
        "rust_sequence_examples.tfrecord": (table(SEQUENCE_SCHEMA, SEQUENCE_ROWS), "SequenceExample"),
    }
    if "--check" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            for name, (data, record_type) in files.items():
                write(Path(tmp) / name, data, record_type)
                same = (Path(tmp) / name).read_bytes() == (HERE / name).read_bytes()
                print(name, "same" if same else "DIFFERS")
                if not same:
                    return 1
        return 0
    for name, (data, record_type) in files.items():
        write(HERE / name, data, record_type)
        print("wrote", HERE / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
