"""Scoring latency: the exported model in onnxruntime against the engine's own scorer (what
``sparktrain.predict`` runs in each Spark task), for the same model and rows, in one run.

For each model (an MLP over dense features, Wide&Deep and DeepFM over a Criteo-like mix of
dense, integer, string and crossed columns), trained briefly in process and exported, three
contenders score the same Arrow rows:

  engine:      ``ExportedModel.predict(record_batch)`` (hashing, lookup, forward, sigmoid);
  onnx:        ``sparktrain.onnx_inputs`` (keying the values) then ``InferenceSession.run``;
  onnx (run):  ``InferenceSession.run`` alone on inputs keyed beforehand, as a server that
               receives keys pays it.

Single-row latency is the median over ``--repeat`` calls with one row; batch latency the
median over calls with ``--batch`` rows. Both engines run on one thread (``RAYON_NUM_THREADS=1``,
``intra_op_num_threads=1``), so the ratio compares the work, not the thread pools. It prints the
figures and the ratios engine / onnx (above 1: onnxruntime is faster)::

    .venv/bin/python tests/bench/bench_onnx.py [--repeat 2000] [--batch 4096]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before the engine's thread pool starts: one thread, like onnxruntime's session below.
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MODELS = {
    "mlp": {"model": "mlp", "hidden": [64, 32]},
    "wide_deep": {"model": "wide_deep", "hidden": [64, 32], "dim": 8},
    "deep_fm": {"model": "deep_fm", "hidden": [64, 32], "dim": 8},
}


def table(rows: int, seed: int) -> pa.Table:
    """13 dense columns, 6 integer and 4 string categorical columns, like Criteo's."""
    rng = np.random.default_rng(seed)
    columns: dict[str, object] = {"label": rng.integers(0, 2, rows)}
    for i in range(13):
        columns[f"i{i}"] = rng.standard_normal(rows).astype(np.float32)
    for i in range(6):
        columns[f"c{i}"] = rng.integers(0, 10_000, rows)
    words = np.array([f"w{i:05d}" for i in range(5_000)])
    for i in range(4):
        columns[f"s{i}"] = words[rng.integers(0, len(words), rows)]
    return pa.table(columns)


def features(model: str) -> dict[str, object]:
    dense = [f"i{i}" for i in range(13)]
    if model == "mlp":
        return {"dense": dense}
    categorical = {**{f"c{i}": 10_000 for i in range(6)}, **{f"s{i}": 10_000 for i in range(4)}}
    return {"dense": dense, "categorical": categorical, "crossed": [(("c0", "s0"), 20_000)]}


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    for _ in range(min(50, repeat)):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000, help="single-row calls per contender")
    parser.add_argument("--batch", type=int, default=4096, help="rows per batch call")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " + ", ".join(MODELS))
    args = parser.parse_args()

    import onnxruntime as ort

    import sparktrain as st
    from sparktrain import _native
    from sparktrain.training import FeatureSpec, Trainer

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    batch_repeat = max(5, args.repeat // 100)
    print(f"onnxruntime {ort.__version__}, one thread each; single row: median of {args.repeat} calls, ")
    print(f"batch of {args.batch}: median of {batch_repeat} calls\n")
    columns = ("engine ms", 10), ("onnx ms", 9), ("run ms", 8), ("engine/onnx", 12), ("engine/run", 11)
    print(f"{'model':10} {'rows':>5} " + " ".join(f"{title:>{width}}" for title, width in columns))
    with tempfile.TemporaryDirectory() as tmp:
        pq.write_table(table(20_000, 1), Path(tmp) / "train.parquet")
        rows = table(args.batch, 2).drop_columns(["label"]).combine_chunks().to_batches()[0]
        for name in args.models.split(","):
            spec = FeatureSpec.of(features(name))
            trainer = Trainer(features=spec, batch_size=256, seed=1, **MODELS[name])
            trainer.fit(str(Path(tmp) / "train.parquet"), epochs=1)
            export_dir = trainer.export(str(Path(tmp) / name))
            path = st.export_onnx(export_dir, str(Path(tmp) / f"{name}.onnx"))
            engine = _native.ExportedModel(export_dir)
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            for size, repeat in ((1, args.repeat), (args.batch, batch_repeat)):
                measure(engine, session, rows.slice(0, size), name, repeat)


def measure(engine: Any, session: Any, batch: pa.RecordBatch, name: str, repeat: int) -> None:
    """Prints one line: the three contenders' median latency on ``batch``, and the ratios."""
    import sparktrain as st

    keyed = st.onnx_inputs(engine.features, batch)
    expected = engine.predict(batch).to_numpy()
    np.testing.assert_allclose(session.run(None, keyed)[0].ravel(), expected, atol=1e-5)
    t_engine = median_ms(lambda: engine.predict(batch), repeat)
    t_onnx = median_ms(lambda: session.run(None, st.onnx_inputs(engine.features, batch)), repeat)
    t_run = median_ms(lambda: session.run(None, keyed), repeat)
    print(
        f"{name:10} {batch.num_rows:>5} {t_engine:>10.4f} {t_onnx:>9.4f} {t_run:>8.4f} "
        f"{t_engine / t_onnx:>12.2f} {t_engine / t_run:>11.2f}"
    )


if __name__ == "__main__":
    main()
