"""The TFRecord → Keras input pipeline: ``sparktrain.data.Dataset(...).tf()`` against
``tf.data.TFRecordDataset`` + batched ``tf.io.parse_example``, on the same files, in one run.

The data is ``bench_tfrecord.criteo_like``'s table (``--rows`` rows: an int64 label, 13 float32
and 26 int64 columns) written as 8 uncompressed TFRecord files. Both pipelines give batches of
``--batch`` rows as dicts of tensors, schema given, no shuffling, read to the end; both run in
this process with TensorFlow on one intra-op and one inter-op thread, and sparktrain's reader
with ``threads=1`` (``--threads`` adds a run with more). ``Dataset.numpy()`` (NumPy dicts, what
the PyTorch dataset wraps) is timed too, to show what ``tf.data``'s generator hand-over costs.
Figures: rows/s over the whole pass and the time to the first batch from building the
pipeline, each the median of ``--repeat`` runs::

    .venv/bin/python tests/bench/bench_data.py [--rows 1000000] [--batch 1024] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tfrecord import DENSE, SPARSE, criteo_like

FILES = 8


def timed_pass(make: Callable[[], Iterable[Any]]) -> tuple[float, float, int]:
    """(seconds to the first batch, seconds for the whole pass, rows) of one pass."""
    began = time.perf_counter()
    first, rows = None, 0
    for batch in make():
        rows += int(batch["label"].shape[0])
        if first is None:
            first = time.perf_counter() - began
    return first or 0.0, time.perf_counter() - began, rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="also run sparktrain with this many threads")
    args = parser.parse_args()

    import pyarrow as pa
    import tensorflow as tf

    from sparktrain import tfrecord
    from sparktrain.data import Dataset

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    pa.set_cpu_count(1)

    table = criteo_like(args.rows)
    spec = {"label": tf.io.FixedLenFeature([], tf.int64)}
    spec.update({name: tf.io.FixedLenFeature([], tf.float32) for name in DENSE})
    spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in SPARSE})
    with tempfile.TemporaryDirectory(prefix="bench-data-") as folder:
        step = -(-table.num_rows // FILES)
        for i in range(FILES):
            tfrecord.write_batches(f"{folder}/part-{i}.tfrecord", table.slice(i * step, step))
        files = sorted(str(p) for p in Path(folder).glob("part-*.tfrecord"))

        def ours(threads: int) -> Callable[[], Iterable[Any]]:
            return lambda: Dataset(
                folder, batch_size=args.batch, schema=table.schema, shard=None, threads=threads
            ).tf()

        def theirs() -> Iterable[Any]:
            records = tf.data.TFRecordDataset(files).batch(args.batch)
            return records.map(lambda x: tf.io.parse_example(x, spec))

        def ours_numpy() -> Iterable[Any]:
            return Dataset(folder, batch_size=args.batch, schema=table.schema, shard=None).numpy()

        contenders: dict[str, Callable[[], Iterable[Any]]] = {
            "sparktrain.data Dataset.tf()": ours(1),
            "tf.data + parse_example": theirs,
            "sparktrain.data Dataset.numpy()": ours_numpy,
        }
        if args.threads > 1:
            contenders[f"sparktrain.data, threads={args.threads}"] = ours(args.threads)
        runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in contenders}
        for _ in range(args.repeat):
            for name, make in contenders.items():
                runs[name].append(timed_pass(make))

    print(f"rows: {args.rows:,} in {FILES} files, batches of {args.batch}; median of {args.repeat}")
    print(f"{'pipeline':34} {'rows/s':>12} {'first batch s':>14}")
    rates = {}
    for name, figures in runs.items():
        assert all(rows == args.rows for _, _, rows in figures), figures
        rates[name] = args.rows / statistics.median(whole for _, whole, _ in figures)
        first = statistics.median(f for f, _, _ in figures)
        print(f"{name:34} {rates[name]:>12,.0f} {first:>14.3f}")
    names = list(contenders)
    print(f"rows/s, sparktrain.data / tf.data + parse_example: {rates[names[0]] / rates[names[1]]:.2f}x")
    print(
        f"rows/s, sparktrain.data numpy() / tf.data + parse_example: {rates[names[2]] / rates[names[1]]:.2f}x"
    )


if __name__ == "__main__":
    main()
