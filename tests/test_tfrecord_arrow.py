"""Arrow ⇄ TFRecord round trips through the Python API, on local files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sparktrain import errors, tfrecord


def _table() -> pa.Table:
    return pa.table(
        {
            "b": pa.array([True, None, False], pa.bool_()),
            "i8": pa.array([-128, 0, 127], pa.int8()),
            "i64": pa.array([-(2**63), 2**63 - 1, None], pa.int64()),
            "u32": pa.array([2**32 - 1, 0, 7], pa.uint32()),
            "f16": pa.array(np.array([0.5, -2.0, 1.0], np.float16), pa.float16()),
            "f32": pa.array([1.5, None, -0.25], pa.float32()),
            "f64": pa.array([0.1, 2.0, 3.0], pa.float64()),
            "s": pa.array(["é", "", None], pa.string()),
            "ls": pa.array(["a", "bb", "ccc"], pa.large_string()),
            "bin": pa.array([b"\x00\xff", None, b""], pa.binary()),
            "ids": pa.array([[1, 2, 3], [], None], pa.list_(pa.int32())),
            "ll": pa.array([[1.0], [2.0, 3.0], []], pa.large_list(pa.float64())),
            "fx": pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int64(), 2)),
            "words": pa.array([["x", "y"], None, ["z"]], pa.list_(pa.string())),
        }
    )


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_every_type_round_trips_with_the_original_schema(tmp_path: Path, compression: str | None) -> None:
    table = _table()
    path = str(tmp_path / "data.tfrecord")
    assert tfrecord.write_batches(path, table, compression) == 3
    back = tfrecord.read(path, schema=table.schema, compression=compression).read_all()
    expected = table.to_pydict()
    # float64 is stored as float32, like every TFRecord writer does.
    expected["f64"] = [float(np.float32(v)) for v in expected["f64"]]
    expected["ll"] = [[float(np.float32(v)) for v in row] for row in expected["ll"]]
    got = back.to_pydict()
    got["f64"] = [float(np.float32(v)) for v in got["f64"]]
    assert got == expected
    assert back.schema == table.schema


def test_inferred_schema_widens_across_files(tmp_path: Path) -> None:
    tfrecord.write_batches(str(tmp_path / "a.tfrecord"), pa.table({"x": [1, 2], "tags": [[1], [2]]}))
    # Only the second file holds a float for x, a multi-valued tag list and a new feature.
    tfrecord.write_batches(
        str(tmp_path / "b.tfrecord"),
        pa.table({"x": [0.5], "tags": [[3, 4]], "name": ["n"]}),
    )
    schema = tfrecord.infer_schema(str(tmp_path))
    assert schema == pa.schema([("name", pa.string()), ("tags", pa.list_(pa.int64())), ("x", pa.float32())])
    table = tfrecord.read(str(tmp_path)).read_all()
    assert table.to_pydict() == {
        "name": [None, None, "n"],
        "tags": [[1], [2], [3, 4]],
        "x": [1.0, 2.0, 0.5],
    }


def test_columns_prune_and_order(tmp_path: Path) -> None:
    path = str(tmp_path / "d.tfrecord")
    tfrecord.write_batches(path, pa.table({"a": [1], "b": ["x"], "c": [2.0]}))
    table = tfrecord.read(path, columns=["c", "a"]).read_all()
    assert table.column_names == ["c", "a"]
    with pytest.raises(errors.InvalidArgumentError, match="'zz' is not in the schema"):
        tfrecord.read(path, columns=["zz"])


def test_batch_size_and_globs(tmp_path: Path) -> None:
    for i in range(3):
        tfrecord.write_batches(str(tmp_path / f"part-{i}.tfrecord"), pa.table({"v": list(range(10))}))
    (tmp_path / "_SUCCESS").write_bytes(b"")
    batches = list(tfrecord.read(str(tmp_path / "part-*"), batch_size=4))
    assert [b.num_rows for b in batches] == [4, 4, 2] * 3
    assert len(tfrecord.read(str(tmp_path)).files) == 3


def test_defaults_fill_nulls(tmp_path: Path) -> None:
    path = str(tmp_path / "d.tfrecord")
    tfrecord.write_batches(path, pa.table({"age": pa.array([None, 3], pa.int64())}), defaults={"age": -1})
    assert tfrecord.read(path).read_all().column("age").to_pylist() == [-1, 3]


def test_unsupported_column_names_the_column(tmp_path: Path) -> None:
    table = pa.table({"ok": [1], "m": pa.array([{"k": 1}], pa.struct([("k", pa.int64())]))})
    path = tmp_path / "x.tfrecord"
    with pytest.raises(errors.SchemaError, match="column 'm'") as info:
        tfrecord.write_batches(str(path), table)
    assert info.value.column == "m"
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_iterable_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "x.tfrecord"

    def batches():
        yield pa.record_batch({"v": [1, 2]})
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError, match="source failed"):
        tfrecord.write_batches(str(path), batches())
    assert list(tmp_path.iterdir()) == []


def test_existing_file_is_kept_unless_overwrite(tmp_path: Path) -> None:
    path = str(tmp_path / "x.tfrecord")
    tfrecord.write_batches(path, pa.table({"v": [1]}))
    with pytest.raises(errors.PathExistsError):
        tfrecord.write_batches(path, pa.table({"v": [2]}))
    assert tfrecord.read(path).read_all().column("v").to_pylist() == [1]
    tfrecord.write_batches(path, pa.table({"v": [2]}), overwrite=True)
    assert tfrecord.read(path).read_all().column("v").to_pylist() == [2]


def test_type_conflict_names_file_record_and_feature(tmp_path: Path) -> None:
    path = str(tmp_path / "x.tfrecord")
    tfrecord.write_batches(path, pa.table({"v": ["a", "b"]}))
    with pytest.raises(errors.RecordDecodeError) as info:
        tfrecord.read(path, schema=pa.schema([("v", pa.int64())])).read_all()
    assert (info.value.path, info.value.record, info.value.feature) == (path, 0, "v")


def test_missing_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(errors.PathNotFoundError, match="no input files match"):
        tfrecord.read(str(tmp_path / "nothing-*.tfrecord"))


def test_raw_records_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "raw.tfrecord.gz")
    records = [b"", b"x", bytes(range(256)) * 1000]
    with tfrecord.RecordWriter(path) as w:
        w.write(records[0])
        w.write_many(records[1:])
    with tfrecord.RecordReader(path) as r:
        assert list(r) == records
    assert tfrecord.RecordReader(path, "GZIP").read(2) == records[:2]


def test_raw_writer_in_failed_block_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "raw.tfrecord"

    def write_then_fail() -> None:
        with tfrecord.RecordWriter(str(path)) as w:
            w.write(b"x")
            raise KeyError("boom")

    with pytest.raises(KeyError):
        write_then_fail()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_decoding_on_several_threads_gives_the_same_batches(tmp_path: Path, compression: str | None) -> None:
    rows = 25_000
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "x": pa.array(np.arange(rows, dtype=np.float32) / 7),
            "word": pa.array([None if i % 9 == 0 else f"w{i}" for i in range(rows)]),
            "tags": pa.array([list(range(i % 5)) for i in range(rows)], pa.list_(pa.int64())),
        }
    )
    suffix = ".gz" if compression else ""
    for part in range(3):
        tfrecord.write_batches(
            str(tmp_path / f"part-{part}.tfrecord{suffix}"), table.slice(part * 9000, 9000)
        )

    def batches(threads: int) -> list[pa.RecordBatch]:
        return list(tfrecord.read(str(tmp_path), batch_size=5000, threads=threads))

    one = batches(1)
    assert sum(b.num_rows for b in one) == rows
    # Two and three threads read whole files (three files); four split each file's records.
    for threads in (2, 3, 4):
        several = batches(threads)
        assert [b.num_rows for b in several] == [b.num_rows for b in one]
        assert all(a.equals(b) for a, b in zip(several, one, strict=True))


def test_files_read_at_once_keep_their_order_skip_report_and_errors(tmp_path: Path) -> None:
    rows = 12_000
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "w": [f"w{i}" for i in range(rows)]})
    for part in range(4):
        tfrecord.write_batches(str(tmp_path / f"part-{part}.tfrecord"), table.slice(part * 3000, 3000))
    damaged = tmp_path / "part-2.tfrecord"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))

    def read(threads: int, skip: bool) -> tuple[list[pa.RecordBatch], list[tuple[str, int, int]]]:
        reader = tfrecord.read(str(tmp_path), batch_size=1000, threads=threads, skip_corrupt=skip)
        batches = list(reader)
        return batches, [(s["path"], s["offset"], s["bytes"]) for s in reader.skipped]

    one, one_skipped = read(1, skip=True)
    assert len(one_skipped) == 1
    assert one_skipped[0][0].endswith("part-2.tfrecord")
    assert sum(b.num_rows for b in one) == rows - 1
    for threads in (2, 4):
        several, skipped = read(threads, skip=True)
        assert skipped == one_skipped
        assert [b.num_rows for b in several] == [b.num_rows for b in one]
        assert all(a.equals(b) for a, b in zip(several, one, strict=True))

    def error_and_rows_before(threads: int) -> tuple[str, int]:
        # The schema given: inference would sample the damaged file and fail before any batch.
        reader = tfrecord.read(str(tmp_path), schema=table.schema, batch_size=1000, threads=threads)
        batches = iter(reader)
        seen = 0
        while True:
            try:
                seen += next(batches).num_rows
            except errors.TFRecordCorruptError as e:
                return str(e), seen

    message, seen = error_and_rows_before(1)
    assert "part-2.tfrecord" in message
    assert "offset" in message
    assert error_and_rows_before(4) == (message, seen)


def test_a_bad_record_read_on_several_threads_names_file_and_record(tmp_path: Path) -> None:
    words = pa.array([f"w{i}" for i in range(10_000)])
    tfrecord.write_batches(str(tmp_path / "a.tfrecord"), pa.table({"v": words}))
    schema = pa.schema([("v", pa.int64())])
    with pytest.raises(errors.RecordDecodeError, match=r"a\.tfrecord: record 0, feature 'v'"):
        list(tfrecord.read(str(tmp_path), schema=schema, threads=4))
    with pytest.raises(errors.InvalidArgumentError, match="threads=0"):
        tfrecord.read(str(tmp_path), threads=0)
    with pytest.raises(errors.InvalidArgumentError, match="batch_size=-1: must be >= 1"):
        tfrecord.read(str(tmp_path), batch_size=-1)
    with pytest.raises(errors.InvalidArgumentError, match="max_record_bytes=0: must be >= 1"):
        tfrecord.read(str(tmp_path), max_record_bytes=0)
