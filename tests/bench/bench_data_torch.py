"""The TFRecord → PyTorch input pipeline: ``sparktrain.data.Dataset(...).torch()`` against a
PyTorch ``IterableDataset`` over the ``tfrecord`` package (what PyTorch users write to read
TFRecords without TensorFlow), on the same files, in one run.

The data is ``bench_tfrecord.criteo_like``'s table (``--rows`` rows: an int64 label, 13 float32
and 26 int64 columns) written as 8 uncompressed TFRecord files by sparktrain. Both pipelines
give batches of ``--batch`` rows as dicts of tensors through a ``DataLoader`` in this process
(``num_workers=0``), schema given, no shuffling, read to the end; PyTorch runs on one thread.
The ``tfrecord`` package's dataset yields one example at a time, which the ``DataLoader``
collates into batches; sparktrain's yields whole batches (``batch_size=None``). Figures: rows/s
over the whole pass and the time to the first batch from building the pipeline, each the
median of ``--repeat`` runs. It runs in the PyTorch virtualenv, which ``tests/run.sh`` makes
(or ``.venv/bin/python tests/harness/torch_env.py``, after the wheel is built)::

    .venv-torch/bin/python tests/bench/bench_data_torch.py [--rows 200000] [--batch 1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_data import FILES, timed_pass
from bench_tfrecord import DENSE, SPARSE, criteo_like


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import pyarrow as pa
    import torch
    from tfrecord.torch.dataset import TFRecordDataset
    from torch.utils.data import ChainDataset, DataLoader

    from sparktrain import tfrecord
    from sparktrain.data import Dataset

    torch.set_num_threads(1)
    pa.set_cpu_count(1)
    table = criteo_like(args.rows)
    description = {"label": "int", **dict.fromkeys(DENSE, "float"), **dict.fromkeys(SPARSE, "int")}
    with tempfile.TemporaryDirectory(prefix="bench-data-torch-") as folder:
        step = -(-table.num_rows // FILES)
        for i in range(FILES):
            tfrecord.write_batches(f"{folder}/part-{i}.tfrecord", table.slice(i * step, step))
        files = sorted(str(p) for p in Path(folder).glob("part-*.tfrecord"))

        def ours() -> Iterable[Any]:
            data = Dataset(folder, batch_size=args.batch, schema=table.schema, shard=None)
            return DataLoader(data.torch(), batch_size=None, num_workers=0)

        def theirs() -> Iterable[Any]:
            per_file = [TFRecordDataset(f, index_path=None, description=description) for f in files]
            return DataLoader(ChainDataset(per_file), batch_size=args.batch, num_workers=0)

        contenders = {"sparktrain.data Dataset.torch()": ours, "tfrecord package TFRecordDataset": theirs}
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
    ours_name, theirs_name = contenders
    print(f"rows/s, sparktrain.data / tfrecord package: {rates[ours_name] / rates[theirs_name]:.2f}x")


if __name__ == "__main__":
    main()
