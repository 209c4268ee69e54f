"""The Python API against a real S3-compatible server (moto's, started by the tests): TFRecord
round trips, uploads that appear only when complete, folders as key prefixes, renames by copy,
damaged and missing objects, the settings a user gives, and Spark writing and reading TFRecords
on S3 from its executors.

What sparktrain writes is checked with boto3, an independent S3 client, so the objects are real
S3 objects and not only readable by sparktrain.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pyarrow as pa
import pytest

from harness.object_stores import check_a_large_upload_appears_whole, mixed_table
from harness.s3 import boto3_client, s3a_keys
from harness.synthetic import dense_table
from sparktrain import errors, fs, tfrecord
from sparktrain.training import FeatureSpec, Trainer

DENSE39 = FeatureSpec(dense=tuple(f"f{j:02d}" for j in range(39)))


@pytest.fixture
def root(s3_url: str, request: pytest.FixtureRequest) -> str:
    """A fresh key prefix for one test."""
    return f"{s3_url}/{request.node.originalname}-{uuid.uuid4().hex}"


def _keys(s3_endpoint: str, url: str) -> dict[str, int]:
    """Key → size of the objects under ``url``, as boto3 lists them."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    listing = boto3_client(s3_endpoint).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix) + 1 :]: o["Size"] for o in listing.get("Contents", [])}


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_examples_round_trip_and_are_real_objects(
    root: str, s3_endpoint: str, compression: str | None
) -> None:
    table = mixed_table()
    for part in range(2):
        tfrecord.write_batches(f"{root}/part-{part}.tfrecord", table, compression)
    fs.write_bytes(f"{root}/_SUCCESS", b"")
    keys = _keys(s3_endpoint, root)
    assert sorted(keys) == ["_SUCCESS", "part-0.tfrecord", "part-1.tfrecord"]
    assert keys["part-0.tfrecord"] == fs.size(f"{root}/part-0.tfrecord") > 0

    assert {f.name: f.type for f in tfrecord.infer_schema(root)} == {
        "id": pa.int64(),
        "x": pa.float32(),
        "ids": pa.list_(pa.int64()),
        "word": pa.string(),
    }
    back = tfrecord.read(root, schema=table.schema).read_all()
    assert back.num_rows == 2 * table.num_rows
    assert sorted(back.column("id").to_pylist()) == sorted(table.column("id").to_pylist() * 2)
    assert [f.path.rsplit("/", 1)[1] for f in fs.glob(f"{root}/part-*")] == [
        "part-0.tfrecord",
        "part-1.tfrecord",
    ]


def test_a_large_file_is_invisible_until_closed_and_a_failed_one_leaves_nothing(
    root: str, s3_endpoint: str
) -> None:
    # A multipart upload: parts go up first; no object exists until the upload completes.
    check_a_large_upload_appears_whole(root, lambda url: _keys(s3_endpoint, url))


def test_folders_are_prefixes_and_renames_copy(root: str) -> None:
    fs.mkdirs(f"{root}/empty")  # creates nothing: a store has no empty folders
    assert not fs.exists(f"{root}/empty")
    for name in ("a/1", "a/2", "a/deep/3"):
        fs.write_bytes(f"{root}/{name}", name.encode())
    assert fs.status(f"{root}/a").is_dir
    assert [(f.path.rsplit("/", 1)[1], f.is_dir) for f in fs.ls(f"{root}/a")] == [
        ("1", False),
        ("2", False),
        ("deep", True),
    ]
    assert [f.path.rsplit("/", 1)[1] for f in fs.expand_inputs(f"{root}/a")] == ["1", "2", "3"]

    fs.rename(f"{root}/a", f"{root}/b")
    assert not fs.exists(f"{root}/a")
    assert fs.read_bytes(f"{root}/b/deep/3") == b"a/deep/3"
    with pytest.raises(errors.PathExistsError):
        fs.write_bytes(f"{root}/b/1", b"again")
    with pytest.raises(errors.PathExistsError):
        fs.rename(f"{root}/b/1", f"{root}/b/2")
    fs.rename(f"{root}/b/1", f"{root}/b/2", overwrite=True)
    assert fs.read_bytes(f"{root}/b/2") == b"a/1"
    with pytest.raises(errors.StorageError, match="not empty"):
        fs.delete(f"{root}/b")
    assert fs.delete(f"{root}/b", recursive=True)
    assert not fs.exists(f"{root}/b")


def test_damaged_and_missing_objects_are_named(root: str) -> None:
    path = f"{root}/damaged.tfrecord"
    records = [b"alpha", b"bravo-bravo", b"charlie"]
    with tfrecord.RecordWriter(path) as w:
        w.write_many(records)
    data = bytearray(fs.read_bytes(path))
    second = 16 + len(records[0])
    data[second + 12 + 3] ^= 0x01
    fs.write_bytes(path, bytes(data), overwrite=True)
    with pytest.raises(errors.TFRecordCorruptError) as info:
        list(tfrecord.RecordReader(path))
    assert (info.value.path, info.value.offset, info.value.kind) == (path, second, "payload_crc_mismatch")

    missing = f"{root}/missing.tfrecord"
    for read in (fs.read_bytes, tfrecord.infer_schema, lambda p: list(tfrecord.RecordReader(p))):
        with pytest.raises(errors.PathNotFoundError) as not_found:
            read(missing)
        assert not_found.value.path == missing


def test_settings_are_checked_and_credentials_come_from_the_environment(
    s3_url: str, s3_endpoint: str
) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=r"spark\.executor\.memory"):
        fs.configure({"spark.executor.memory": "1g"})
    fs.configure({"fs.s3a.bucket.other.path.style.access": "maybe"})
    with pytest.raises(errors.InvalidArgumentError, match=r"fs\.s3a\.path\.style\.access"):
        fs.exists("s3://other/x")
    # A fresh process with only the AWS SDK's environment variables, as a notebook has them.
    url = f"{s3_url}/from-env-{uuid.uuid4().hex}"
    fs.write_bytes(url, b"written with S3A keys")
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
        "PATH": "/usr/bin:/bin",
    }
    script = f"from sparktrain import fs; print(fs.read_bytes({url!r}).decode())"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "written with S3A keys"
    # And with nothing: a clear error naming the object, within the retry limit.
    bare = {"PATH": "/usr/bin:/bin", "AWS_EC2_METADATA_DISABLED": "true"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=bare, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert url in out.stderr, out.stderr[-2000:]


@pytest.mark.spark4  # the Python data source by name
def test_spark_writes_and_reads_tfrecords_on_s3(spark, root: str, s3_endpoint: str) -> None:
    """The executors get the driver's S3 settings: tfrecord.write (the Python writer, since the
    session's Hadoop has no S3 connector), read_dataframe and the data source name."""
    df = spark.range(0, 5000, numPartitions=4).selectExpr("id", "cast(id % 7 as string) as word")
    result = tfrecord.write(df, root, compression="GZIP")
    assert result.rows == 5000
    assert len(result.files) == 4
    keys = _keys(s3_endpoint, root)
    assert "_SUCCESS" in keys
    assert sorted(k for k in keys if k.startswith("part-")) == sorted(
        f.rsplit("/", 1)[1] for f in result.files
    )
    assert not any(k.startswith("_temporary") for k in keys)

    back = tfrecord.read_dataframe(spark, root)
    assert sorted(r.id for r in back.select("id").collect()) == list(range(5000))
    # The name, with the S3 keys as options, as Spark's own sources take Hadoop settings.
    options = s3a_keys(s3_endpoint)
    named = spark.read.format("sparktrain.tfrecord.python").options(**options).load(root)
    assert named.where("word = '3'").count() == len([i for i in range(5000) if i % 7 == 3])
    df.limit(10).write.format("sparktrain.tfrecord.python").options(**options).mode("append").save(root)
    assert tfrecord.read_dataframe(spark, root).count() == 5010


def test_the_jvm_engine_is_not_chosen_for_a_store_its_hadoop_cannot_reach(spark, root: str) -> None:
    with pytest.raises(Exception, match=r"(?i)no filesystem for scheme"):
        tfrecord.write(spark.range(3), f"{root}/jvm", engine="jvm")
    # "auto" takes the Python writer instead of failing.
    assert tfrecord.write(spark.range(3), f"{root}/auto").rows == 3


def test_a_trainer_resumes_from_its_checkpoints_and_writes_event_files_on_s3(root: str, tmp_path) -> None:
    """Checkpoints and TensorBoard event files on S3 from a Trainer alone: a second run resumes
    from the first one's checkpoint and ends with the weights of an uninterrupted run (the
    distributed case is in test_training.py)."""
    data = f"{root}/data/part-0.tfrecord"
    tfrecord.write_batches(data, dense_table(2048, seed=1))
    common = {"model": "mlp", "features": DENSE39, "hidden": [8], "batch_size": 64, "shuffle_buffer": 0}
    logged = {"tensorboard_dir": f"{root}/tb", "checkpoint_every": 10, "log_every": 5}

    straight = Trainer(**common, model_dir=f"{root}/straight")
    straight.fit(data, steps=30)
    first = Trainer(**common, **logged, model_dir=f"{root}/model")
    assert first.fit(data, steps=20).resumed_from is None
    first.close()  # publishes the event file: an object appears only when complete
    second = Trainer(**common, **logged, model_dir=f"{root}/model")
    resumed = second.fit(data, steps=30)
    second.close()
    assert (resumed.resumed_from, resumed.steps) == (20, 30)
    assert second.weights().tobytes() == straight.weights().tobytes()
    checkpoints = sorted(f.path.rsplit("/", 1)[1] for f in fs.ls(f"{root}/model") if f.is_dir)
    assert checkpoints == ["_index", "ckpt-0000000010-g0", "ckpt-0000000020-g0", "ckpt-0000000030-g0"]
    events = [f.path for f in fs.ls(f"{root}/tb") if "tfevents" in f.path]
    assert len(events) == 2
    # Each event file is a TFRecord file of Event protos: framing and CRCs check out.
    assert all(len(list(tfrecord.RecordReader(e))) > 1 for e in events)
