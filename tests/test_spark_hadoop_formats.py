"""The jar's Hadoop formats from PySpark, as the TensorFlowOnSpark tutorials use them:
``rdd.saveAsNewAPIHadoopFile(..., TFRecordFileOutputFormat)`` and ``sc.newAPIHadoopFile(...,
TFRecordFileInputFormat)`` on a local-cluster with separate executors, to local files and to a
real HDFS; the records are read back by sparktrain's Rust reader too."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from sparktrain import fs, tfrecord

OUTPUT_FORMAT = "io.sparktrain.hadoop.TFRecordFileOutputFormat"
INPUT_FORMAT = "io.sparktrain.hadoop.TFRecordFileInputFormat"
KEY = "org.apache.hadoop.io.BytesWritable"
VALUE = "org.apache.hadoop.io.NullWritable"


# The HDFS case takes hdfs_url at run time, which the automatic marking cannot see.
@pytest.fixture(params=["file", pytest.param("hdfs", marks=pytest.mark.hdfs)])
def out_dir(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/out"
    return f"{request.getfixturevalue('hdfs_url')}/t/spark-jar-{uuid.uuid4().hex}/out"


@pytest.mark.parametrize("compress", [False, True])
def test_rdd_bytes_round_trip_through_the_jar(spark, out_dir: str, compress: bool) -> None:
    sc = spark.sparkContext
    records = [b"", bytes(range(256)), *(b"record-%d" % i for i in range(200))]
    conf = {"mapreduce.output.fileoutputformat.compress": "true"} if compress else None
    sc.parallelize([bytearray(r) for r in records], 4).map(lambda r: (r, None)).saveAsNewAPIHadoopFile(
        out_dir, OUTPUT_FORMAT, keyClass=KEY, valueClass=VALUE, conf=conf
    )

    parts = [f.path for f in fs.glob(f"{out_dir}/part-*")]
    assert len(parts) == 4
    assert all(p.endswith(".tfrecord.gz" if compress else ".tfrecord") for p in parts)
    assert fs.exists(f"{out_dir}/_SUCCESS")

    # The Rust reader reads what the JVM wrote (compression from the extension).
    ours = [r for part in parts for r in tfrecord.RecordReader(part)]
    assert sorted(ours) == sorted(records)

    # And Spark reads it back through the jar's InputFormat.
    back = (
        sc.newAPIHadoopFile(out_dir, INPUT_FORMAT, keyClass=KEY, valueClass=VALUE)
        .map(lambda kv: bytes(kv[0]))
        .collect()
    )
    assert sorted(back) == sorted(records)
