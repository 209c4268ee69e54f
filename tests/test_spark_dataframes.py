"""DataFrames and RDDs to TFRecord datasets and back, on a local-cluster with separate executors,
to local files and to a real HDFS: every column type with nulls, the three record types, each
compression, each mode, ``partition_by``, the ``tfrecord`` data source, task retries and failed
jobs, and TensorFlow on either side."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import Row
from pyspark.sql import types as T

from sparktrain import fs, tfrecord
from sparktrain.errors import PathExistsError, PathNotFoundError, SchemaError, TFRecordCorruptError
from sparktrain.tfrecord._engine import ENGINE_CONF


# The HDFS case takes hdfs_url at run time, which the automatic marking cannot see.
@pytest.fixture(params=["file", pytest.param("hdfs", marks=pytest.mark.hdfs)])
def out_dir(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/out"
    return f"{request.getfixturevalue('hdfs_url')}/t/spark-df-{uuid.uuid4().hex}/out"


@pytest.fixture(params=["jvm", "python"])
def engine(request: pytest.FixtureRequest, spark) -> Iterator[str]:
    """Runs a test with each implementation of ``tfrecord.write`` and ``read_dataframe``: the
    jar's file format (the session has the jar) and the Python one."""
    spark.conf.set(ENGINE_CONF, request.param)
    yield request.param
    spark.conf.unset(ENGINE_CONF)


def part_files(folder: str) -> list[str]:
    """The data files directly in ``folder``."""
    return [f.path for f in fs.ls(folder) if f.path.rsplit("/", 1)[1].startswith("part-")]


def f32(x: float | None) -> float | None:
    """What a double reads back as: its float32 rounding."""
    return None if x is None else float(np.float32(x))


ALL_TYPES = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("b", T.BooleanType()),
        T.StructField("i8", T.ByteType()),
        T.StructField("i16", T.ShortType()),
        T.StructField("i32", T.IntegerType()),
        T.StructField("f32", T.FloatType()),
        T.StructField("f64", T.DoubleType()),
        T.StructField("dec", T.DecimalType(12, 3)),
        T.StructField("s", T.StringType()),
        T.StructField("bin", T.BinaryType()),
        T.StructField("d", T.DateType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("ntz", T.TimestampNTZType()),
        T.StructField("al", T.ArrayType(T.LongType(), containsNull=False)),
        T.StructField("ad", T.ArrayType(T.DoubleType(), containsNull=False)),
        T.StructField("astr", T.ArrayType(T.StringType(), containsNull=False)),
    ]
)


def all_types_rows(n: int = 60) -> list[tuple[object, ...]]:
    rows = []
    for i in range(n):
        null = i % 7 == 3  # every column but the id is null in these rows
        rows.append(
            (
                i,
                None if null else i % 2 == 0,
                None if null else (i % 256) - 128,
                None if null else -(2**15) + i,
                None if null else 2**31 - 1 - i,
                None if null else i + 0.25,
                None if null else i / 3,
                None if null else Decimal(f"{i * 1000 - 30000}.{i % 1000:03d}"),
                None if null else f"héllo {i} 日本",
                None if null else bytes([i % 256, 0, 255]),
                None if null else dt.date(1969, 12, 1) + dt.timedelta(days=i * 40),
                None if null else dt.datetime(1999, 12, 31, 23, 59, 59, 999_999) + dt.timedelta(hours=i * 13),
                None if null else dt.datetime(2024, 2, 29, 12, 0, 0, i),
                None if null else list(range(i % 4)),
                None if null else [i / 7, -1.5],
                None if null else [f"t{j}" for j in range(i % 3)],
            )
        )
    return rows


def expected_back(row: tuple[object, ...]) -> tuple[object, ...]:
    """A row as it reads back: doubles rounded to float32."""
    values = list(row)
    values[6] = f32(values[6])  # type: ignore[arg-type]
    values[14] = None if values[14] is None else [f32(x) for x in values[14]]  # type: ignore[union-attr]
    return tuple(values)


def as_tuples(rows: list[Row]) -> list[tuple[object, ...]]:
    return sorted((tuple(r) for r in rows), key=lambda r: r[0])


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_every_type_round_trips_with_nulls(spark, engine, out_dir: str, compression: str | None) -> None:
    rows = all_types_rows()
    df = spark.createDataFrame(rows, ALL_TYPES).repartition(3)
    result = tfrecord.write(df, out_dir, compression=compression)

    assert result.rows == len(rows)
    ext = {None: ".tfrecord", "GZIP": ".tfrecord.gz", "ZLIB": ".tfrecord.zlib"}[compression]
    names = [f.path.rsplit("/", 1)[1] for f in fs.ls(out_dir)]
    assert "_SUCCESS" in names
    assert "_temporary" not in names
    parts = sorted(n for n in names if n.startswith("part-"))
    assert len(parts) == 3
    assert all(n.endswith(ext) for n in parts)
    assert sorted(result.files) == sorted(f"{out_dir}/{n}" for n in parts)

    back = tfrecord.read_dataframe(spark, out_dir, schema=ALL_TYPES)
    # The same types; Spark makes every column of a JVM file source nullable.
    assert back.schema.simpleString() == ALL_TYPES.simpleString()
    assert as_tuples(back.collect()) == [expected_back(r) for r in rows]

    # Without a schema: the kinds the features hold.
    inferred = tfrecord.read_dataframe(spark, out_dir).schema
    kinds = {f.name: f.dataType.simpleString() for f in inferred.fields}
    assert kinds == {
        "id": "bigint",
        "b": "bigint",
        "i8": "bigint",
        "i16": "bigint",
        "i32": "bigint",
        "f32": "float",
        "f64": "float",
        "dec": "string",
        "s": "string",
        "bin": "binary",
        "d": "bigint",
        "ts": "bigint",
        "ntz": "bigint",
        "al": "array<bigint>",
        "ad": "array<float>",
        "astr": "array<string>",
    }


def test_stored_values_follow_the_type_table(spark, engine, tmp_path: Path) -> None:
    """Dates are days, timestamps microseconds since the epoch (UTC), decimals text."""
    schema = "d date, ts timestamp, dec decimal(6,2), b boolean"
    row = (
        dt.date(1970, 1, 11),
        dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc),
        Decimal("-1.5"),
        True,
    )
    out = str(tmp_path / "out")
    tfrecord.write(spark.createDataFrame([row], schema).coalesce(1), out)
    (record,) = tfrecord.read(out).read_all().to_pylist()
    assert record == {"b": 1, "d": 10, "dec": "-1.50", "ts": 1_000_000}


def test_unwritable_columns_are_refused_by_name(spark, engine, tmp_path: Path) -> None:
    df = spark.createDataFrame([(1, {"k": 1})], "id long, m map<string,int>")
    with pytest.raises(SchemaError, match="`m`") as err:
        tfrecord.write(df, str(tmp_path / "a"))
    assert err.value.column == "m"
    nested = spark.createDataFrame([(1, [[1, 2]])], "id long, seq array<array<long>>")
    with pytest.raises(SchemaError, match="SequenceExample"):
        tfrecord.write(nested, str(tmp_path / "b"))
    struct = spark.createDataFrame([(1, (2, "x"))], "id long, st struct<a:int,b:string>")
    with pytest.raises(SchemaError, match="`st`"):
        tfrecord.write(struct, str(tmp_path / "c"))
    assert not fs.exists(str(tmp_path / "a"))
    assert not fs.exists(str(tmp_path / "c"))


def test_a_value_no_feature_holds_fails_the_write_as_a_schema_error(spark, engine, tmp_path: Path) -> None:
    # Found only in a task, where the row is read: raised as sparktrain's error all the same.
    df = spark.sql("select 1 as id, array(1, null, 3) as `with nulls`")
    with pytest.raises(SchemaError, match=r"^column 'with nulls', row 0: a list element is null") as err:
        tfrecord.write(df, str(tmp_path / "a"))
    assert err.value.column == "with nulls"
    out = str(tmp_path / "a")
    assert not fs.exists(out) or fs.expand_inputs(out) == []


SEQUENCE = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("label", T.StringType()),
        T.StructField("tokens", T.ArrayType(T.ArrayType(T.LongType(), False), False)),
        T.StructField("frames", T.ArrayType(T.ArrayType(T.FloatType(), False), False)),
        T.StructField("words", T.ArrayType(T.ArrayType(T.StringType(), False), False)),
    ]
)


def sequence_rows() -> list[tuple[object, ...]]:
    return [
        (
            i,
            None if i == 2 else f"l{i}",
            [list(range(j)) for j in range(i % 4)],
            [[0.5 * i, 1.0]] * (i % 3),
            None,
        )
        if i % 5 == 4
        else (i, f"l{i}", [[i, i + 1], [], [7]], [[0.25], [0.5, 0.75]], [["a", "b"], [f"w{i}"]])
        for i in range(30)
    ]


def test_sequence_example_round_trip_and_tensorflow_parses_it(spark, engine, tf, out_dir: str) -> None:
    rows = sequence_rows()
    df = spark.createDataFrame(rows, SEQUENCE).repartition(2)
    tfrecord.write(df, out_dir, record_type="SequenceExample", compression="GZIP")
    back = tfrecord.read_dataframe(spark, out_dir, schema=SEQUENCE, record_type="SequenceExample")
    assert as_tuples(back.collect()) == sorted(rows, key=lambda r: r[0])
    inferred = tfrecord.read_dataframe(spark, out_dir, record_type="SequenceExample").schema
    assert inferred["tokens"].dataType.simpleString() == "array<array<bigint>>"
    assert inferred["label"].dataType.simpleString() == "string"

    if out_dir.startswith("file://"):
        part = next(f.path for f in fs.ls(out_dir) if f.path.rsplit("/", 1)[1].startswith("part-"))
        dataset = tf.data.TFRecordDataset(part.removeprefix("file://"), compression_type="GZIP")
        by_id = {r[0]: r for r in rows}
        for serialized in dataset:
            context, lists = tf.io.parse_single_sequence_example(
                serialized,
                context_features={"id": tf.io.FixedLenFeature([], tf.int64)},
                sequence_features={"tokens": tf.io.RaggedFeature(tf.int64)},
            )
            expected = by_id[int(context["id"])][2]
            assert lists["tokens"].to_list() == expected


def test_byte_array_from_a_dataframe_and_from_an_rdd_of_examples(spark, engine, tf, out_dir: str) -> None:
    examples = [
        tf.train.Example(
            features=tf.train.Features(
                feature={"x": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
            )
        ).SerializeToString()
        for i in range(100)
    ]
    rdd_out = f"{out_dir}/from-rdd"
    result = tfrecord.write(spark.sparkContext.parallelize(examples, 4), rdd_out)
    assert result.rows == 100
    assert len(result.files) == 4
    # Written as they are: they read back as Examples ...
    xs = tfrecord.read_dataframe(spark, rdd_out).collect()
    assert sorted(r.x for r in xs) == list(range(100))
    # ... and as raw bytes.
    raw = tfrecord.read_dataframe(spark, rdd_out, record_type="ByteArray")
    assert raw.schema.fieldNames() == ["byteArray"]
    assert sorted(bytes(r.byteArray) for r in raw.collect()) == sorted(examples)

    df_out = f"{out_dir}/from-df"
    blobs = spark.createDataFrame([(bytes([i]) * i,) for i in range(50)], "payload binary")
    tfrecord.write(blobs, df_out, record_type="ByteArray", compression="ZLIB")
    back = tfrecord.read_dataframe(spark, df_out, record_type="bytearray").collect()
    assert sorted(bytes(r.byteArray) for r in back) == sorted(bytes([i]) * i for i in range(50))
    with pytest.raises(SchemaError, match="ByteArray"):
        tfrecord.write(
            spark.createDataFrame([(1, b"x")], "a long, b binary"), f"{out_dir}/bad", record_type="ByteArray"
        )


def test_rdds_of_rows_and_dicts_go_through_the_dataframe_path(spark, engine, tmp_path: Path) -> None:
    sc = spark.sparkContext
    rows = sc.parallelize([Row(id=i, name=f"n{i}", score=i / 2) for i in range(20)], 2)
    tfrecord.write(rows, str(tmp_path / "rows"))
    dicts = sc.parallelize([{"id": i, "tags": [f"t{j}" for j in range(i % 3)]} for i in range(10)], 2)
    tfrecord.write(dicts, str(tmp_path / "dicts"), num_files=1)
    back = tfrecord.read_dataframe(spark, str(tmp_path / "rows")).orderBy("id").collect()
    assert [(r.id, r.name, r.score) for r in back] == [(i, f"n{i}", i / 2) for i in range(20)]
    assert len(part_files(str(tmp_path / "dicts"))) == 1
    back = tfrecord.read_dataframe(spark, str(tmp_path / "dicts")).orderBy("id").collect()
    assert [(r.id, r.tags) for r in back] == [(i, [f"t{j}" for j in range(i % 3)]) for i in range(10)]


def test_modes(spark, engine, out_dir: str) -> None:
    def df(start: int, n: int):
        return spark.range(start, start + n, numPartitions=2).selectExpr("id", "id * 2 as twice")

    def ids() -> list[int]:
        return sorted(r.id for r in tfrecord.read_dataframe(spark, out_dir).collect())

    tfrecord.write(df(0, 10), out_dir)
    with pytest.raises(PathExistsError, match="already exists"):
        tfrecord.write(df(100, 10), out_dir)
    assert tfrecord.write(df(100, 10), out_dir, mode="ignore").rows == 0
    assert ids() == list(range(10))
    tfrecord.write(df(10, 5), out_dir, mode="append")
    assert ids() == list(range(15))
    tfrecord.write(df(50, 3), out_dir, mode="overwrite")
    assert ids() == [50, 51, 52]
    assert len(part_files(out_dir)) == 2
    assert fs.exists(f"{out_dir}/_SUCCESS")


def test_partition_by_writes_spark_style_folders(spark, engine, out_dir: str) -> None:
    rows = [(i, ["a", "b/c", None][i % 3], dt.date(2024, 1, 1 + i % 2), float(i)) for i in range(40)]
    df = spark.createDataFrame(rows, "id long, cat string, day date, x double").repartition(3)
    tfrecord.write(df, out_dir, partition_by=["cat", "day"], compression="GZIP")

    folders = sorted({f.path[len(out_dir) + 1 :].rsplit("/", 1)[0] for f in fs.expand_inputs(out_dir)})
    assert folders == [
        f"cat={c}/day=2024-01-0{d}" for c in ["__HIVE_DEFAULT_PARTITION__", "a", "b%2Fc"] for d in (1, 2)
    ]
    # The partition columns live in the paths only.
    some_file = fs.expand_inputs(out_dir)[0].path
    assert set(tfrecord.infer_schema(some_file).names) == {"id", "x"}

    back = tfrecord.read_dataframe(spark, out_dir)
    assert {f.name: f.dataType.simpleString() for f in back.schema.fields} == {
        "id": "bigint",
        "x": "float",
        "cat": "string",
        "day": "date",
    }
    got = sorted((r.id, r.cat, r.day, r.x) for r in back.collect())
    assert got == sorted((i, c, d, f32(x)) for i, c, d, x in rows)
    # Spark's own reader sees the same partitions (it reads the folder names the same way).
    assert spark.read.format("tfrecord").load(out_dir).where("cat = 'b/c'").count() == 13


def test_columns_named_with_a_dot_are_written_and_partitioned_by(spark, engine, out_dir: str) -> None:
    rows = [(i, f"k{i % 2}", ["", "x"][i % 2]) for i in range(10)]
    df = spark.createDataFrame(rows, ["user.id", "key.part", "tag"])
    tfrecord.write(df, out_dir, partition_by=["key.part", "tag"])
    folders = sorted({f.path[len(out_dir) + 1 :].rsplit("/", 1)[0] for f in fs.expand_inputs(out_dir)})
    # An empty value goes to the null value's folder, as Spark writes it.
    assert folders == ["key.part=k0/tag=__HIVE_DEFAULT_PARTITION__", "key.part=k1/tag=x"]
    back = tfrecord.read_dataframe(spark, out_dir)
    got = sorted((r["user.id"], r["key.part"], r["tag"]) for r in back.collect())
    assert got == [(i, f"k{i % 2}", [None, "x"][i % 2]) for i in range(10)]


# "tfrecord" is the jar's file format here (the session has the jar); the Python data source
# answers to "sparktrain.tfrecord.python" too (PySpark 4 only: 3.5 has no Python data sources).
@pytest.mark.parametrize(
    "name", ["tfrecord", pytest.param("sparktrain.tfrecord.python", marks=pytest.mark.spark4)]
)
def test_the_data_source_api(spark, out_dir: str, name: str) -> None:
    # A new session has only the data sources Spark finds by itself. The first session, still
    # the active one, holding the name too must not stop the new one registering it.
    first, spark = spark, spark.newSession()
    if name != "tfrecord":
        tfrecord.register(first)
        tfrecord.register(spark)
    df = spark.createDataFrame([(i, f"s{i}", [i, i]) for i in range(25)], "id long, s string, v array<long>")
    df.repartition(2).write.format(name).mode("overwrite").option("compression", "gzip").save(out_dir)
    parts = part_files(out_dir)
    assert len(parts) == 2
    assert all(p.endswith(".tfrecord.gz") for p in parts)
    assert fs.exists(f"{out_dir}/_SUCCESS")
    back = spark.read.format(name).load(out_dir)
    assert sorted(tuple(r) for r in back.collect()) == sorted((i, f"s{i}", [i, i]) for i in range(25))
    # Column pruning: a narrower schema decodes only those features.
    narrow = spark.read.format(name).schema("s string").load(out_dir)
    assert sorted(r.s for r in narrow.collect()) == sorted(f"s{i}" for i in range(25))
    df.limit(5).write.format(name).mode("append").save(out_dir)
    assert spark.read.format(name).load(out_dir).count() == 30


def test_a_retried_task_leaves_no_partial_or_duplicate_file(spark, engine, out_dir: str) -> None:
    # Defined here so that Spark pickles it by value: executors cannot import this module.
    def _fail_first_attempt_of_partition_1(rows):
        from pyspark import TaskContext

        context = TaskContext.get()
        for i, batch in enumerate(rows):
            if i == 2 and context.partitionId() == 1 and context.attemptNumber() == 0:
                raise RuntimeError("injected failure after two batches")
            yield batch

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = spark.range(0, 3000, numPartitions=3).selectExpr("id", "cast(id as string) as s")
        flaky = df.mapInArrow(_fail_first_attempt_of_partition_1, df.schema)
        result = tfrecord.write(flaky, out_dir)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert result.rows == 3000
    parts = part_files(out_dir)
    assert len(parts) == 3
    assert not fs.exists(f"{out_dir}/_temporary")
    ids = [r.id for r in tfrecord.read_dataframe(spark, out_dir).collect()]
    assert len(ids) == 3000
    assert sorted(ids) == list(range(3000))


def test_a_failed_job_leaves_no_success_marker_and_no_visible_file(spark, engine, out_dir: str) -> None:
    def _always_fail_partition_2(rows):
        from pyspark import TaskContext

        for i, batch in enumerate(rows):
            if i == 1 and TaskContext.get().partitionId() == 2:
                raise RuntimeError("injected permanent failure")
            yield batch

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = spark.range(0, 3000, numPartitions=3).selectExpr("id")
        with pytest.raises(Exception, match="injected permanent failure"):
            tfrecord.write(df.mapInArrow(_always_fail_partition_2, df.schema), out_dir)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert not fs.exists(f"{out_dir}/_SUCCESS")
    assert not fs.exists(out_dir) or fs.expand_inputs(out_dir) == []
    assert not fs.exists(f"{out_dir}/_temporary")


def test_of_two_attempts_of_a_task_only_one_commits(out_dir: str) -> None:
    """A speculative copy racing the original: both write, one commit wins, no duplicate."""
    import pyarrow as pa

    from sparktrain.tfrecord._output import WriteJob, write_task

    job = WriteJob(out_dir)
    batch = pa.record_batch({"id": pa.array(range(10), pa.int64())})
    first = write_task(job, [batch], task=0, attempt=0)
    second = write_task(job, [batch], task=0, attempt=1)
    assert (first.committed, second.committed) == (True, False)
    job.commit([0], overwrite=False)
    assert [f.path.rsplit("/", 1)[1] for f in fs.expand_inputs(out_dir)] == [job.file_name(0)]
    assert tfrecord.read(out_dir).read_all().num_rows == 10


def test_corrupt_files_fail_the_read_or_are_skipped(spark, engine, tmp_path: Path) -> None:
    out = tmp_path / "data"
    tfrecord.write(spark.range(0, 1000, numPartitions=2).selectExpr("id"), str(out))
    part = sorted(out.glob("part-*"))[0]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))

    with pytest.raises(Exception, match=rf"{part.name}.*offset \d+|offset \d+.*{part.name}"):
        tfrecord.read_dataframe(spark, str(out), schema="id long").collect()
    rows = tfrecord.read_dataframe(spark, str(out), schema="id long", skip_corrupt=True).collect()
    assert 1000 - len(rows) == 1


def test_an_empty_folder_read_with_a_schema_has_no_rows(spark, engine, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    df = tfrecord.read_dataframe(spark, str(tmp_path / "empty"), schema="id long")
    assert (df.columns, df.count()) == (["id"], 0)
    # Without a schema there is nothing to infer it from; a path that names nothing is refused.
    with pytest.raises(Exception, match=r"(?i)infer.* schema|schema to infer"):
        tfrecord.read_dataframe(spark, str(tmp_path / "empty")).collect()
    with pytest.raises(PathNotFoundError, match="missing"):
        tfrecord.read_dataframe(spark, str(tmp_path / "missing"), schema="id long").collect()
    with pytest.raises(PathNotFoundError, match="missing"):
        tfrecord.read_dataframe(spark, str(tmp_path / "missing"))
    # A file that is not TFRecord is named as the schema is inferred from it, on the driver.
    (tmp_path / "text.tfrecord").write_bytes(b"this is not a TFRecord file at all")
    with pytest.raises(TFRecordCorruptError, match=r"text\.tfrecord") as damaged:
        tfrecord.read_dataframe(spark, str(tmp_path / "text.tfrecord"))
    assert (damaged.value.kind, damaged.value.offset) == ("not_tfrecord", 0)
    assert damaged.value.path.endswith("text.tfrecord")


def test_a_value_too_wide_for_the_schema_fails_naming_file_record_and_column(
    spark, engine, tmp_path: Path
) -> None:
    out = tmp_path / "data"
    tfrecord.write(spark.range(0, 300, numPartitions=1).selectExpr("id", "id * 2 as x"), str(out))
    (part,) = out.glob("part-*")
    with pytest.raises(Exception, match=rf"{part.name}") as failed:
        tfrecord.read_dataframe(spark, str(out), schema="id byte").collect()
    message = str(failed.value)
    assert "feature 'id'" in message, message
    assert "128" in message, message


def test_tensorflow_files_load_as_a_dataframe_and_dataframes_parse_in_tf_data(
    spark, engine, tf, tmp_path: Path
) -> None:
    path = str(tmp_path / "tf" / "data.tfrecord")
    os.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as w:
        for i in range(50):
            feature = {
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
                "dense": tf.train.Feature(float_list=tf.train.FloatList(value=[i * 0.5, 1.0])),
                "word": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"w{i}".encode()])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    df = tfrecord.read_dataframe(spark, str(tmp_path / "tf"))
    assert {f.name: f.dataType.simpleString() for f in df.schema.fields} == {
        "dense": "array<float>",
        "label": "bigint",
        "word": "string",
    }
    got = sorted((r.label, r.dense, r.word) for r in df.collect())
    assert got == sorted((i % 2, [i * 0.5, 1.0], f"w{i}") for i in range(50))

    out = str(tmp_path / "from-spark")
    tfrecord.write(df, out, compression="GZIP", num_files=2)
    files = [f.path for f in fs.expand_inputs(out)]
    spec = {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "dense": tf.io.FixedLenFeature([2], tf.float32),
        "word": tf.io.FixedLenFeature([], tf.string),
    }
    parsed = (
        tf.data.TFRecordDataset(files, compression_type="GZIP")
        .batch(64)
        .map(lambda s: tf.io.parse_example(s, spec))
    )
    batches = list(parsed)
    assert sum(int(b["label"].shape[0]) for b in batches) == 50
    words = sorted(w.decode() for b in batches for w in b["word"].numpy())
    assert words == sorted(f"w{i}" for i in range(50))
