"""Spark-style ``col=value/`` folder names: escaping, splitting batches, discovering columns."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from sparktrain import _partitions as partitioning


def test_escaping_matches_spark_and_round_trips() -> None:
    # Spark writes 'a/b:c=d%' as 'a%2Fb%3Ac%3Dd%25'; spaces and letters stay.
    assert partitioning.escape("a/b:c=d% e") == "a%2Fb%3Ac%3Dd%25 e"
    for value in ["plain", "a/b", "100%", "x=y", "tab\there", "日本", "{[*?]}"]:
        assert partitioning.unescape(partitioning.escape(value)) == value


def test_batches_split_into_runs_of_equal_keys_without_the_key_columns() -> None:
    batch = pa.record_batch(
        {
            "id": pa.array(range(6), pa.int64()),
            # An empty string goes to the null value's folder, as Spark writes it.
            "cat": pa.array(["a", "a", None, "", "b/c", "a"]),
            "flag": pa.array([True, True, True, False, False, False]),
        }
    )
    runs = [
        (folder, part.column("id").to_pylist())
        for folder, part in partitioning.split_by_partition(batch, ["cat", "flag"])
    ]
    assert runs == [
        ("cat=a/flag=true", [0, 1]),
        ("cat=__HIVE_DEFAULT_PARTITION__/flag=true", [2]),
        ("cat=__HIVE_DEFAULT_PARTITION__/flag=false", [3]),
        ("cat=b%2Fc/flag=false", [4]),
        ("cat=a/flag=false", [5]),
    ]
    _, first = next(partitioning.split_by_partition(batch, ["cat"]))
    assert first.schema.names == ["id", "flag"]


def test_discovery_infers_types_over_all_files() -> None:
    schema, values = partitioning.discover(
        [
            "year=2024/day=2024-01-31/city=Z%C3%BCrich/part-0.tfrecord",
            "year=2025/day=2024-02-01/city=__HIVE_DEFAULT_PARTITION__/part-1.tfrecord",
            "year=3000000000/day=2024-02-02/city=x%2Fy/part-2.tfrecord",
        ]
    )
    assert schema == pa.schema([("year", pa.int64()), ("day", pa.date32()), ("city", pa.string())])
    assert values[1] == {"year": "2025", "day": "2024-02-01", "city": None}
    assert values[2]["city"] == "x/y"
    column = partitioning.constant_column("2024-01-31", pa.date32(), 2)
    assert column.to_pylist() == [dt.date(2024, 1, 31)] * 2
    assert partitioning.constant_column(None, pa.int64(), 3).null_count == 3
    small, _ = partitioning.discover(["n=1/a", "n=-5/b"])
    assert small.field("n").type == pa.int32()
    mixed, _ = partitioning.discover(["v=1.5/a", "v=2/b"])
    assert mixed.field("v").type == pa.float64()


def test_dataset_root_of_globs() -> None:
    assert partitioning.dataset_root("hdfs://nn:9000/data/") == "hdfs://nn:9000/data"
    assert partitioning.dataset_root("hdfs://nn:9000/data/year=*/part-*") == "hdfs://nn:9000/data"
