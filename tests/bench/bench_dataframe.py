"""DataFrame ⇄ TFRecord benchmark on Spark: sparktrain's two paths against TensorFlowOnSpark's
path, a hand-written mapPartitions job, and Spark's own Parquet and Avro formats, on the same
1M-row Criteo-like DataFrame, in one run.

On ``local-cluster[2,1,1024]`` (two executors, one core each), the DataFrame is read from the
same 8 Parquet files by every contender (that read is part of every timing), then:

  write (h) sparktrain's JVM format: ``df.write.format("tfrecord")`` (the jar's FileFormat);
        (i) Spark's Parquet writer; (j) Spark's Avro writer (``spark-avro`` from Maven Central);
        (a) sparktrain: ``sparktrain.tfrecord.write(df, path, engine="python")`` (mapInArrow →
            Rust writer);
        (b) mapPartitions: one ``tf.train.Example`` per row, ``tf.io.TFRecordWriter`` per partition;
        (c) TFoS: ``dfutil.saveAsTFRecords``'s path: TFoS's per-row ``toTFExample`` and
            ``saveAsNewAPIHadoopFile`` with the jar's ``TFRecordFileOutputFormat`` (TFoS names a
            class from TensorFlow's ecosystem jar, which is not on Maven Central);
  read  (k) sparktrain's JVM format, schema inferred; (l) Parquet; (m) Avro;
        (d) sparktrain: ``read_dataframe(engine="python")`` with the schema inferred;
        (e) TFoS: ``dfutil.loadTFRecords``'s path: ``newAPIHadoopFile`` with the jar's
            ``TFRecordFileInputFormat``, TFoS's per-row ``fromTFExample``, ``createDataFrame``.

Every read materializes all columns of all rows through Spark's ``noop`` sink. Two floors are
measured too: Spark scanning the Parquet files alone, and Spark handing the rows to Python as
Arrow batches (``mapInArrow`` doing nothing), the least any Python-side writer can take. It
prints rows/s and the ratios. The peers need TensorFlowOnSpark in the virtualenv::

    .venv/bin/pip install -r tests/bench/requirements-peers.txt
    .venv/bin/python tests/bench/bench_dataframe.py [--rows 1000000] [--repeat 3] [--peer-repeat 1]

The Avro jar is fetched with Maven (the pyspark version, else 4.0.1, the newest 4.x there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_tfrecord import DENSE, SPARSE, criteo_like

from harness.spark import local_cluster_session

OUTPUT_FORMAT = "io.sparktrain.hadoop.TFRecordFileOutputFormat"
INPUT_FORMAT = "io.sparktrain.hadoop.TFRecordFileInputFormat"
KEY = "org.apache.hadoop.io.BytesWritable"
VALUE = "org.apache.hadoop.io.NullWritable"
PARTITIONS = 8


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def map_partitions_writer(out: str) -> Callable[[int, Iterator[Any]], Iterator[int]]:
    """What a user writes by hand: one ``tf.train.Example`` per row, one file per partition."""

    def write(index: int, rows: Iterator[Any]) -> Iterator[int]:
        import tensorflow as tf

        n = 0
        with tf.io.TFRecordWriter(f"{out}/part-{index:05d}.tfrecord") as writer:
            for row in rows:
                feature = {}
                for name, value in row.asDict().items():
                    if isinstance(value, float):
                        feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
                    else:
                        feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
                n += 1
        yield n

    return write


def _count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    yield pa.record_batch({"rows": pa.array([sum(b.num_rows for b in batches)], pa.int64())})


def count_records(path: str) -> int:
    from sparktrain import fs, tfrecord

    return sum(sum(1 for _ in tfrecord.RecordReader(f.path)) for f in fs.expand_inputs(path))


def avro_jar() -> str:
    """spark-avro for this Spark, from Maven Central (or Maven's local repository)."""
    import pyspark

    folder = tempfile.mkdtemp(prefix="bench-avro-")
    for version in dict.fromkeys([pyspark.__version__, "4.0.1"]):
        artifact = f"org.apache.spark:spark-avro_2.13:{version}"
        done = subprocess.run(
            ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={folder}"],
            capture_output=True,
            check=False,
        )
        if done.returncode == 0:
            return f"{folder}/spark-avro_2.13-{version}.jar"
    sys.exit("spark-avro is not on Maven Central for this Spark, nor 4.0.1")


def bytes_per_row(path: str, rows: int) -> float:
    from sparktrain import fs

    return sum(f.size for f in fs.expand_inputs(path)) / rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each sparktrain measurement (median)")
    parser.add_argument("--peer-repeat", type=int, default=1, help="runs of each peer measurement (median)")
    args = parser.parse_args()
    try:
        from tensorflowonspark import dfutil
    except ImportError:
        sys.exit("TensorFlowOnSpark is missing: .venv/bin/pip install -r tests/bench/requirements-peers.txt")

    from sparktrain import tfrecord

    spark = local_cluster_session("sparktrain-bench-dataframe", jars=(avro_jar(),))
    # One input partition per Parquet file: Spark would otherwise pack the small files together.
    spark.conf.set("spark.sql.files.openCostInBytes", str(1 << 30))
    rows = args.rows
    results: dict[str, tuple[float, int]] = {}
    sizes: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        source = f"{tmp}/source"
        os.makedirs(source)
        table = criteo_like(rows)
        step = -(-rows // PARTITIONS)
        for i in range(PARTITIONS):
            pq.write_table(table.slice(i * step, step), f"{source}/part-{i}.parquet")

        def df() -> Any:
            return spark.read.parquet(source)

        assert df().rdd.getNumPartitions() == PARTITIONS, df().rdd.getNumPartitions()

        # The floors every Python-side writer stands on: Spark scanning the Parquet files, and
        # Spark handing the rows to Python as Arrow batches (mapInArrow doing nothing).
        def scan_only() -> None:
            df().write.format("noop").mode("overwrite").save()

        def arrow_to_python() -> None:
            df().mapInArrow(_count_rows, "rows long").collect()

        results["(f) floor: Spark scan only (noop sink)"] = (median_time(scan_only, args.repeat), rows)
        results["(g) floor: scan + mapInArrow handing batches to Python"] = (
            median_time(arrow_to_python, args.repeat),
            rows,
        )

        # Spark's own formats and sparktrain's JVM format: the same DataFrame, the same cluster.
        jvm, parquet, avro = f"{tmp}/jvm-format", f"{tmp}/parquet", f"{tmp}/avro"
        for label, fmt, out in (
            ("(h) write: sparktrain JVM format", "tfrecord", jvm),
            ("(i) write: Spark Parquet", "parquet", parquet),
            ("(j) write: Spark Avro", "avro", avro),
        ):
            seconds = median_time(
                lambda f=fmt, o=out: df().write.format(f).mode("overwrite").save(o), args.repeat
            )
            results[label] = (seconds, spark.read.format(fmt).load(out).count())
            sizes[label] = bytes_per_row(out, rows)
        for label, fmt, out in (
            ("(k) read: sparktrain JVM format", "tfrecord", jvm),
            ("(l) read: Spark Parquet", "parquet", parquet),
            ("(m) read: Spark Avro", "avro", avro),
        ):
            seconds = median_time(
                lambda f=fmt, o=out: (
                    spark.read.format(f).load(o).write.format("noop").mode("overwrite").save()
                ),
                args.repeat,
            )
            results[label] = (seconds, rows)

        ours = f"{tmp}/sparktrain"
        seconds = median_time(
            lambda: tfrecord.write(df(), ours, mode="overwrite", engine="python"), args.repeat
        )
        results["(a) write: sparktrain.tfrecord.write, Python engine"] = (seconds, count_records(ours))
        sizes["(a) write: sparktrain.tfrecord.write, Python engine"] = bytes_per_row(ours, rows)

        by_hand = f"{tmp}/mappartitions"

        def hand_write() -> None:
            os.makedirs(by_hand, exist_ok=True)
            df().rdd.mapPartitionsWithIndex(map_partitions_writer(by_hand)).sum()

        seconds = median_time(hand_write, args.peer_repeat)
        results["(b) write: mapPartitions + tf.io.TFRecordWriter"] = (seconds, count_records(by_hand))

        tfos = f"{tmp}/tfos"

        def tfos_write() -> None:
            frame = df()
            examples = frame.rdd.mapPartitions(dfutil.toTFExample(frame.dtypes))
            examples.saveAsNewAPIHadoopFile(tfos, OUTPUT_FORMAT, keyClass=KEY, valueClass=VALUE)

        def tfos_write_fresh() -> None:
            import shutil

            shutil.rmtree(tfos, ignore_errors=True)
            tfos_write()

        seconds = median_time(tfos_write_fresh, args.peer_repeat)
        results["(c) write: TFoS dfutil.saveAsTFRecords path"] = (seconds, count_records(tfos))

        def our_read() -> None:
            frame = tfrecord.read_dataframe(spark, ours, engine="python")
            frame.write.format("noop").mode("overwrite").save()

        seconds = median_time(our_read, args.repeat)
        results["(d) read: read_dataframe, Python engine"] = (seconds, rows)

        def tfos_read() -> None:
            sc = spark.sparkContext
            raw = sc.newAPIHadoopFile(ours, INPUT_FORMAT, keyClass=KEY, valueClass=VALUE)
            import tensorflow as tf

            first = tf.train.Example()
            first.ParseFromString(bytes(raw.take(1)[0][0]))
            schema = dfutil.infer_schema(first, [])
            parsed = raw.mapPartitions(lambda it: dfutil.fromTFExample(it, []))
            spark.createDataFrame(parsed, schema).write.format("noop").mode("overwrite").save()

        seconds = median_time(tfos_read, args.peer_repeat)
        results["(e) read: TFoS dfutil.loadTFRecords path"] = (seconds, rows)

        # All writers stored the same values (floats as float32 everywhere).
        import tensorflow as tf

        def first_records(path: str) -> dict[int, dict[str, Any]]:
            from sparktrain import fs

            out = {}
            for f in fs.expand_inputs(path)[:2]:
                for i, record in enumerate(tfrecord.RecordReader(f.path)):
                    example = tf.train.Example.FromString(record)
                    values = {
                        k: list(v.int64_list.value or v.float_list.value)
                        for k, v in example.features.feature.items()
                    }
                    out[values["C1"][0]] = values
                    if i == 50:
                        break
            return out

        samples = [first_records(p) for p in (ours, by_hand, tfos, jvm)]
        shared = set.intersection(*(set(s) for s in samples))
        assert shared, "no common sample rows"
        for key in shared:
            assert all(s[key] == samples[0][key] for s in samples), key

    spark.stop()
    print(
        f"rows: {rows:,}; local-cluster[2,1,1024]; {PARTITIONS} partitions; columns: label, "
        f"{len(DENSE)} float, {len(SPARSE)} int64; "
        f"sparktrain median of {args.repeat}, peers of {args.peer_repeat}"
    )
    print(f"{'work':52} {'seconds':>8} {'rows/s':>10} {'bytes/row':>10}")
    rate = {}
    for name, (seconds, n) in sorted(results.items()):
        assert n == rows, (name, n)
        rate[name[:3]] = rows / seconds
        size = f"{sizes[name]:.1f}" if name in sizes else ""
        print(f"{name:52} {seconds:>8.2f} {rows / seconds:>10,.0f} {size:>10}")
    print(f"JVM format write / Parquet write: {rate['(h)'] / rate['(i)']:.2f}x (target >= 1.0)")
    print(f"JVM format write / Avro write: {rate['(h)'] / rate['(j)']:.2f}x (target >= 1.5)")
    print(f"JVM format read / Parquet read: {rate['(k)'] / rate['(l)']:.2f}x (target >= 0.8)")
    print(f"JVM format write / TFoS path: {rate['(h)'] / rate['(c)']:.1f}x (target >= 50)")
    print(f"JVM format read / TFoS path: {rate['(k)'] / rate['(e)']:.1f}x")
    ours_w, hand_w, tfos_w = rate["(a)"], rate["(b)"], rate["(c)"]
    ours_r, tfos_r = rate["(d)"], rate["(e)"]
    print(f"write ratio sparktrain / TFoS path: {ours_w / tfos_w:.1f}x")
    print(f"write ratio sparktrain / mapPartitions: {ours_w / hand_w:.1f}x")
    print(f"read ratio sparktrain / TFoS path: {ours_r / tfos_r:.1f}x")
    ceiling = rate["(g)"]
    print(f"ceiling of any mapInArrow writer / TFoS path: {ceiling / tfos_w:.1f}x")


if __name__ == "__main__":
    main()
