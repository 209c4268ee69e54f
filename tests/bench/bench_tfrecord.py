"""TFRecord codec benchmark: sparktrain against TensorFlow on the same Criteo-like table.

In one run, on one core (the process pins itself to CPU 0):

  (a) sparktrain writes the table from Arrow to TFRecords;
  (b) TensorFlow's Python ``tf.io.TFRecordWriter`` + ``tf.train.Example`` writes the same rows;
  (c) sparktrain reads the file back into Arrow;
  (d) ``tf.data.TFRecordDataset`` + batched ``tf.io.parse_example`` reads it (and raw, unparsed);

(e) sparktrain reads it again decoding on N threads with the process on N cores, for each N
of ``--threads`` (default: 2 and every core; the scaling against (c));
and, on TensorFlow's own file from (b) (its writer's feature order), (f) sparktrain with the
schema given against (g) ``tf.data`` + ``parse_example``;

each measured ``--repeat`` times (median). It prints rows/s, MB/s and the ratios, plus single-core
CRC-32C and memcpy bandwidth as the physical reference. TensorFlow's Python writer builds about 12k
Examples/s, so it writes a slice of the table (``--tf-write-rows``) and its rate is compared.

    python tests/bench/bench_tfrecord.py [--rows 1000000] [--tf-write-rows 50000] [--threads 2,4]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
DENSE = [f"I{i}" for i in range(1, 14)]
SPARSE = [f"C{i}" for i in range(1, 27)]


def criteo_like(rows: int, seed: int = 7) -> pa.Table:
    """A label, 13 float columns and 26 int64 id columns."""
    rng = np.random.default_rng(seed)
    columns: dict[str, np.ndarray] = {"label": rng.integers(0, 2, rows, dtype=np.int64)}
    for name in DENSE:
        columns[name] = rng.lognormal(1.0, 1.5, rows).astype(np.float32)
    for name in SPARSE:
        columns[name] = rng.integers(0, 2**31, rows, dtype=np.int64)
    return pa.table(columns)


REPEAT = 3


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """The median wall time of ``REPEAT`` runs of ``fn``, and its last result.

    Python's garbage collector is off while a run is timed, as ``timeit`` does: the table's rows
    kept as Python lists for TensorFlow's writer are millions of objects, and a full collection
    landing in a short read would time the collector, not the reader.
    """
    times = []
    for _ in range(REPEAT):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return statistics.median(times), result


def physical_reference() -> dict[str, float]:
    out = subprocess.run(
        ["cargo", "run", "--release", "-q", "-p", "sparktrain-tfrecord", "--example", "physical_reference"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {k: float(v) for k, v in (line.split() for line in out.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tf-write-rows", type=int, default=50_000)
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to CPU 0")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument(
        "--threads",
        default=",".join(str(n) for n in sorted({2, os.cpu_count() or 1}) if n > 1),
        help="comma-separated decoder thread counts for (e), each on as many cores",
    )
    args = parser.parse_args()
    global REPEAT
    REPEAT = args.repeat

    if not args.no_pin:
        os.sched_setaffinity(0, {0})
    # Arrow's own thread pool would otherwise spread conversions over both cores.
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    from sparktrain import tfrecord

    table = criteo_like(args.rows)
    results: dict[str, tuple[int, float, int]] = {}  # name -> (rows, seconds, bytes)
    with tempfile.TemporaryDirectory() as tmp:
        ours = os.path.join(tmp, "sparktrain.tfrecord")
        seconds, _ = timed(lambda: tfrecord.write_batches(ours, table, overwrite=True))
        size = os.path.getsize(ours)
        results["(a) write: sparktrain, Arrow -> TFRecord"] = (args.rows, seconds, size)

        tf_rows = min(args.tf_write_rows, args.rows)
        py_columns = table.slice(0, tf_rows).to_pydict()  # not timed: favours TensorFlow
        names = list(py_columns)
        theirs = os.path.join(tmp, "tensorflow.tfrecord")

        def tf_write() -> None:
            with tf.io.TFRecordWriter(theirs) as writer:
                for i in range(tf_rows):
                    feature = {}
                    for name in names:
                        v = py_columns[name][i]
                        if isinstance(v, float):
                            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                        else:
                            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                    example = tf.train.Example(features=tf.train.Features(feature=feature))
                    writer.write(example.SerializeToString())

        seconds, _ = timed(tf_write)
        results["(b) write: TF Python TFRecordWriter + Example"] = (tf_rows, seconds, os.path.getsize(theirs))

        def our_read() -> int:
            return sum(b.num_rows for b in tfrecord.read(ours, batch_size=65536))

        seconds, n = timed(our_read)
        assert n == args.rows, n
        results["(c) read: sparktrain, TFRecord -> Arrow"] = (args.rows, seconds, size)

        scaling = [int(n) for n in args.threads.split(",") if n and int(n) <= (os.cpu_count() or 1)]
        for threads in scaling:

            def our_read_threaded(threads: int = threads) -> int:
                batches = tfrecord.read(ours, batch_size=65536, threads=threads)
                return sum(b.num_rows for b in batches)

            # The decoder threads start in the reader and inherit this thread's CPUs.
            os.sched_setaffinity(0, set(range(threads)))
            seconds, n = timed(our_read_threaded)
            if not args.no_pin:
                os.sched_setaffinity(0, {0})
            assert n == args.rows, n
            results[f"(e) read: sparktrain, {threads} threads on {threads} cores"] = (
                args.rows,
                seconds,
                size,
            )

        # TensorFlow's own file from (b): its writer's feature order, read with the schema given,
        # as a trainer that knows its columns reads files made elsewhere. Measured before any
        # tf.data read: TensorFlow's threads, pinned to the same core, stay busy for a moment
        # after one and slowed this short read by up to half.
        def our_read_theirs() -> int:
            return sum(b.num_rows for b in tfrecord.read(theirs, schema=table.schema, batch_size=65536))

        seconds, n = timed(our_read_theirs)
        assert n == tf_rows, n
        results["(f) read: sparktrain, TF's file, schema given"] = (tf_rows, seconds, os.path.getsize(theirs))

        spec = {"label": tf.io.FixedLenFeature([], tf.int64)}
        spec.update({name: tf.io.FixedLenFeature([], tf.float32) for name in DENSE})
        spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in SPARSE})

        def tf_read_parsed() -> int:
            dataset = tf.data.TFRecordDataset(ours).batch(1024).map(lambda x: tf.io.parse_example(x, spec))
            return sum(int(batch["label"].shape[0]) for batch in dataset)

        seconds, n = timed(tf_read_parsed)
        assert n == args.rows, n
        results["(d) read: tf.data + parse_example (batch 1024)"] = (args.rows, seconds, size)

        def tf_read_raw() -> int:
            return sum(int(b.shape[0]) for b in tf.data.TFRecordDataset(ours).batch(1024))

        seconds, n = timed(tf_read_raw)
        results["(d') read: tf.data raw records (batch 1024)"] = (args.rows, seconds, size)

        def tf_read_theirs() -> int:
            dataset = tf.data.TFRecordDataset(theirs).batch(1024).map(lambda x: tf.io.parse_example(x, spec))
            return sum(int(batch["label"].shape[0]) for batch in dataset)

        seconds, n = timed(tf_read_theirs)
        assert n == tf_rows, n
        results["(g) read: tf.data + parse_example, TF's file"] = (tf_rows, seconds, os.path.getsize(theirs))

        # The same bytes: a record written by sparktrain equals TensorFlow's serialization.
        first_ours = next(iter(tfrecord.RecordReader(ours)))
        parsed = tf.train.Example.FromString(first_ours)
        assert parsed.features.feature["C1"].int64_list.value[0] == py_columns["C1"][0]

    reference = physical_reference()
    cores = "all cores" if args.no_pin else "one core (CPU 0)"
    print(f"rows: {args.rows:,} ({size / args.rows:.1f} bytes/row as TFRecord); {cores}; median of {REPEAT}")
    print(f"{'work':48} {'rows':>10} {'seconds':>8} {'rows/s':>12} {'MB/s':>8}")
    rate: dict[str, float] = {}
    for name, (rows, seconds, nbytes) in results.items():
        rate[name] = rows / seconds
        mbps = nbytes / seconds / 1e6
        print(f"{name:48} {rows:>10,} {seconds:>8.2f} {rows / seconds:>12,.0f} {mbps:>8.1f}")

    def rate_of(prefix: str) -> float:
        return next(r for name, r in rate.items() if name.startswith(prefix))

    print(f"write ratio sparktrain / TensorFlow: {rate_of('(a)') / rate_of('(b)'):.1f}x")
    print(f"read ratio sparktrain / tf.data+parse_example: {rate_of('(c)') / rate_of('(d)'):.1f}x")
    theirs_ratio = rate_of("(f)") / rate_of("(g)")
    print(f"read ratio on TF's file, schema given, sparktrain / tf.data+parse_example: {theirs_ratio:.1f}x")
    raw = rate_of("(d')")
    print(f"read ratio sparktrain / tf.data raw: {rate_of('(c)') / raw:.1f}x")
    for name in results:
        if name.startswith("(e)"):
            threads = name.removeprefix("(e) read: sparktrain, ")
            print(f"read scaling, {threads} / one thread: {rate[name] / rate_of('(c)'):.2f}x")
    print(f"crc32c: {reference['crc32c_gbps']:.1f} GB/s; memcpy: {reference['memcpy_gbps']:.1f} GB/s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
