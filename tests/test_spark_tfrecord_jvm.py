"""The jar's TFRecord file format against the Python data source and against Spark itself: the
same records byte for byte, SQL, split reading of large files and Spark's save modes. The
session has the jar (``spark.jars``), so ``tfrecord`` is its format. Speculative copies need
executors on different hosts: they are tested in ``test_speculation.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparktrain import fs, tfrecord
from sparktrain.jvm import has_jvm_format
from test_spark_dataframes import ALL_TYPES, SEQUENCE, all_types_rows, sequence_rows


@pytest.fixture(autouse=True)
def _the_session_has_the_jar(spark) -> None:
    assert has_jvm_format(spark), "the test session must load sparktrain's jar"


def raw_records(spark, path: str) -> list[bytes]:
    """Every record of the files under ``path``, as bytes, sorted."""
    raw = tfrecord.read_dataframe(spark, path, record_type="ByteArray", engine="python")
    return sorted(bytes(r.byteArray) for r in raw.collect())


@pytest.mark.parametrize(
    ("record_type", "schema", "rows"),
    [("Example", ALL_TYPES, all_types_rows()), ("SequenceExample", SEQUENCE, sequence_rows())],
)
def test_both_writers_write_the_same_bytes(spark, tmp_path: Path, record_type, schema, rows) -> None:
    tfrecord.register(spark)
    df = spark.createDataFrame(rows, schema).repartition(3)
    jvm, python = str(tmp_path / "jvm"), str(tmp_path / "python")
    assert tfrecord.write(df, jvm, record_type=record_type, engine="jvm").rows == len(rows)
    assert tfrecord.write(df, python, record_type=record_type, engine="python").rows == len(rows)
    records = raw_records(spark, jvm)
    assert len(records) == len(rows)
    assert records == raw_records(spark, python)


def test_both_readers_read_the_same_rows(spark, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    tfrecord.write(spark.createDataFrame(all_types_rows(), ALL_TYPES), out, compression="GZIP")
    for schema in (ALL_TYPES, None):
        jvm = tfrecord.read_dataframe(spark, out, schema=schema, engine="jvm")
        python = tfrecord.read_dataframe(spark, out, schema=schema, engine="python")
        assert jvm.schema.simpleString() == python.schema.simpleString()
        assert sorted(map(tuple, jvm.collect()), key=repr) == sorted(map(tuple, python.collect()), key=repr)


def test_sql_writes_and_reads_the_format(spark, tmp_path: Path) -> None:
    out = tmp_path / "from-sql"
    spark.sql(
        f"INSERT OVERWRITE DIRECTORY '{out}' USING tfrecord OPTIONS (compression 'gzip') "
        "SELECT id, cast(id * 2 AS string) AS s FROM range(40)"
    )
    assert all(p.name.endswith(".tfrecord.gz") for p in out.glob("part-*"))
    table = f"t_{os.getpid()}"
    spark.sql(f"CREATE TABLE {table} USING sparktrain.tfrecord LOCATION '{out}'")
    try:
        assert spark.sql(f"SELECT count(*), sum(id) FROM {table} WHERE s != '0'").first() == (39, 780)
    finally:
        spark.sql(f"DROP TABLE {table}")


def test_spark_save_modes(spark, tmp_path: Path) -> None:
    out = str(tmp_path / "modes")
    df = spark.range(10).selectExpr("id")
    df.write.format("tfrecord").save(out)  # errorifexists, which Python data sources cannot do
    with pytest.raises(Exception, match="already exists"):
        df.write.format("tfrecord").save(out)
    df.write.format("tfrecord").mode("ignore").save(out)
    df.write.format("tfrecord").mode("append").save(out)
    assert spark.read.format("tfrecord").load(out).count() == 20
    df.limit(3).write.format("tfrecord").mode("overwrite").save(out)
    assert spark.read.format("tfrecord").load(out).count() == 3


def test_a_large_uncompressed_file_is_read_in_splits(spark, tmp_path: Path) -> None:
    out = str(tmp_path / "one-file")
    rows = 20_000
    df = spark.range(rows).selectExpr("id", "repeat(cast(id as string), 20) as s").coalesce(1)
    tfrecord.write(df, out)
    (part,) = [f for f in fs.ls(out) if f.path.rsplit("/", 1)[1].startswith("part-")]
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(part.size // 5))
    try:
        back = spark.read.format("tfrecord").schema("id long").load(out)
        assert back.rdd.getNumPartitions() >= 5
        ids = [r.id for r in back.collect()]
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert len(ids) == rows
    assert sorted(ids) == list(range(rows))
