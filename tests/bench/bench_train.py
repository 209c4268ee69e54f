"""Synchronous data-parallel training: sparktrain against Keras under MultiWorkerMirroredStrategy
launched by TensorFlowOnSpark, and PyTorch DDP launched by TorchDistributor, in one run.

Every contender trains the same model on the same data on ``local-cluster[2,1,1024]`` (two
executors, one core each), with a per-worker batch of ``--batch`` (256) for ``--steps`` (300)
steps, on 2 workers and on 1 (``--workers 2,1``):

  mlp        ``dense_table`` data (39 float32 features): 39 → 256 ReLU → 256 ReLU → 1 logit;
  wide_deep  ``criteo_table`` data (13 float32, 26 int64 ids): each id column hashed into 10,000
             buckets; wide = one learned weight per (column, bucket) + a linear layer over the
             dense features; deep = 8-dim embeddings of the same buckets concatenated with the
             dense features → 256 ReLU → 128 ReLU → 1; the two logits are summed;
  dcn        the same data and parts as wide_deep, with 3 DCN-v2 cross layers
             ``x_{l+1} = x_0 ⊙ (x_l W_l + b_l) + x_l`` (full-rank 221 x 221 ``W_l``) between the
             embeddings-and-dense vector ``x_0`` and the deep tower.

Adam (lr 1e-3), binary cross-entropy on the logits, Glorot-uniform kernels, zero biases, deep
embeddings uniform in ±0.05, wide weights zero. The ``--rows`` (300,000) training rows are written
once as 8 TFRecord files (uncompressed ``tf.train.Example``s, by ``sparktrain.tfrecord``) and as 8
Parquet files; 20,000 evaluation rows of the same problem (another seed) likewise. The
contenders:

  sparktrain  ``sparktrain.train`` over the TFRecord files (each worker reads its share of the
              files), the model and optimizer above on sparktrain's candle engine; its tables
              exchange and update only the rows a step touched (Adam's "lazy" form there);
  sparktrain-dense  the same with ``sparse_tables=False``: Adam updates every table row every
              step, as the peers do (wide_deep only);
  sparktrain-clear  ``sparktrain`` with its data plane's frames in the clear
              (``spark.sparktrain.collective.seal=false``) rather than encrypted and
              authenticated: what sealing costs;
  tfos        TFoS 2.2.5 ``TFCluster.run`` (TENSORFLOW input mode, ``master_node="chief"``,
              bound to 127.0.0.1), tf-keras ``fit`` under MultiWorkerMirroredStrategy over a
              ``tf.data`` pipeline of the TFRecord files (each worker reads its share of the files);
  torch       ``TorchDistributor(local_mode=False)``, DDP over gloo; each rank reads its share
              of the Parquet files into tensors up front. PyTorch lives in ``.venv-torch``
              (made from ``tests/bench/requirements-torch.txt`` when missing), so this runs
              ``tests/bench/train_torch_peer.py`` as a subprocess with its own Spark session;
  torch-sparktrain  the same DDP function launched by ``sparktrain.torch.TorchDistributor``, the
              drop-in on sparktrain's launcher (not in the default set: compare it with
              ``--contenders torch,torch-sparktrain``);
  keras-1p, torch-1p  references: the same training in one process with one thread, no Spark
              and no strategy (run once per model, listed with 1 worker).

TensorFlow and PyTorch use one intra-op and one inter-op thread per worker. Each distributed run
gets a fresh Spark session whose executors' Python workers are already started. Figures per
run: steady steps/s and examples/s (all workers together: global batch x steps/s) from the end
of step 20 to the end of the last step, stamped on the chief; ``first step s`` from the start
call to the end of the first step; ``steps 2..N s`` from there to the end of the last step;
``tail s`` from there until the start call returns (the chief's evaluation, then the teardown);
``wall s`` from the start call (``TFCluster.run``, ``TorchDistributor.run``) until it returns
(``shutdown()`` for TFoS), the sum of the three (for the references: from the training
function's entry in its process); and the eval log-loss and AUC of the final model, whose
logits the chief computes after training. TFoS is needed::

    .venv/bin/pip install -r tests/bench/requirements-peers.txt
    .venv/bin/python tests/bench/bench_train.py [--model mlp,wide_deep] [--workers 2,1]
        [--contenders sparktrain,sparktrain-dense,sparktrain-clear,tfos,torch,keras-1p,torch-1p] [--steps 300]
        [--rows 300000]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.spark import ROOT, local_cluster_session
from harness.synthetic import criteo_table, dense_table
from harness.torch_env import torch_python
from sparktrain.cluster.driver.conf import SEAL_CONF

MODELS: dict[str, Callable[..., pa.Table]] = {
    "mlp": dense_table,
    "wide_deep": criteo_table,
    "dcn": criteo_table,
}
CROSS_LAYERS = 3  # DCN's
BUCKETS = 10_000  # hash buckets per id column
EMBEDDING_DIM = 8
FILES = 8
EVAL_ROWS = 20_000
WARMUP_STEPS = 20  # steady figures run from the end of this step to the end of the last
TORCH_PEER = ROOT / "tests" / "bench" / "train_torch_peer.py"
SITECUSTOMIZE = """\
try:
    import tensorflowonspark.util as _util

    _util.get_ip_address = lambda: "127.0.0.1"
except ImportError:
    pass
"""


@dataclasses.dataclass(frozen=True)
class Job:
    """One training run: what every contender function receives."""

    model: str  # "mlp", "wide_deep" or "dcn"
    workers: int
    steps: int
    batch: int  # per worker
    dense: tuple[str, ...]  # float32 feature columns, in model input order
    ids: tuple[str, ...]  # int64 id columns (empty for mlp)
    train_tfrecord: str  # folders of FILES files each
    train_parquet: str
    eval_tfrecord: str
    eval_parquet: str
    scratch: str  # an empty folder for this run

    @property
    def global_batch(self) -> int:
        return self.batch * self.workers


# ---------------------------------------------------------------- figures


def log_loss(labels: np.ndarray, logits: np.ndarray) -> float:
    z = np.asarray(logits, np.float64)
    return float(np.mean(np.logaddexp(0.0, z) - np.asarray(labels, np.float64) * z))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties get their average rank)."""
    labels = np.asarray(labels) > 0
    _, inverse, counts = np.unique(np.asarray(scores), return_inverse=True, return_counts=True)
    average_rank = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based average rank of each value
    positives = int(labels.sum())
    negatives = len(labels) - positives
    rank_sum = average_rank[inverse][labels].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


def figures(
    stamps: list[float], began: float, returned: float, logits: Any, labels: Any, global_batch: int
) -> dict[str, Any]:
    """The figures of one run. ``stamps[i]`` is the wall time at the end of step ``i + 1`` on the
    chief; ``began``/``returned`` bracket the start call; ``logits`` are the final model's on the
    eval rows, whose labels are ``labels``."""
    steady_steps = len(stamps) - WARMUP_STEPS
    steps_per_s = steady_steps / (stamps[-1] - stamps[WARMUP_STEPS - 1])
    return {
        "steps": len(stamps),
        "steps_per_s": steps_per_s,
        "examples_per_s": steps_per_s * global_batch,
        "first_step_s": stamps[0] - began,
        "train_s": stamps[-1] - stamps[0],
        "tail_s": returned - stamps[-1],
        "wall_s": returned - began,
        "eval_loss": log_loss(labels, logits),
        "eval_auc": auc(labels, logits),
    }


# ---------------------------------------------------------------- data


def write_data(model: str, rows: int, folder: Path) -> dict[str, str]:
    """The training and eval rows of ``model`` as FILES TFRecord and FILES Parquet files each."""
    from sparktrain import tfrecord

    paths = {}
    for split, table in (("train", MODELS[model](rows, seed=1)), ("eval", MODELS[model](EVAL_ROWS, seed=2))):
        step = -(-table.num_rows // FILES)
        for kind in ("tfrecord", "parquet"):
            out = folder / model / f"{split}-{kind}"
            out.mkdir(parents=True, exist_ok=True)
            for i in range(FILES):
                part = table.slice(i * step, step)
                if kind == "tfrecord":
                    tfrecord.write_batches(str(out / f"part-{i:05d}.tfrecord"), part, overwrite=True)
                else:
                    pq.write_table(part, out / f"part-{i:05d}.parquet")
            paths[f"{split}_{kind}"] = str(out)
    return paths


def columns(model: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The float feature columns and the int64 id columns of ``model``'s table."""
    schema = MODELS[model](1).schema
    dense = tuple(f.name for f in schema if pa.types.is_floating(f.type))
    ids = tuple(f.name for f in schema if pa.types.is_integer(f.type) and f.name != "label")
    return dense, ids


@contextlib.contextmanager
def spark_session(name: str, conf: dict[str, str] | None = None) -> Iterator[Any]:
    """A fresh ``local-cluster[2,1,1024]`` session whose executors' Python workers are started."""
    spark = local_cluster_session(name, conf=conf)
    try:
        spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()
        yield spark
    finally:
        spark.stop()


# ---------------------------------------------------------------- sparktrain


def run_sparktrain(job: Job, sparse_tables: bool = True, sealed: bool = True) -> dict[str, Any]:
    """sparktrain's engine on ``job`` (``sparktrain.train`` over ``job.train_tfrecord``) in a
    fresh ``spark_session(...)``. The chief's progress lines, every ``WARMUP_STEPS`` steps,
    carry the wall time, so the steady rate runs from the end of step ``WARMUP_STEPS`` to the
    end of the last step as for the peers; the eval logits come from the exported model.

    ``sparse_tables`` (sparktrain's default) exchanges and updates only the embedding rows a
    step touched: Adam's "lazy" form on the tables. Off, every row gets Adam's update every
    step, as in the Keras and PyTorch peers. ``sealed=False`` sends the data plane's frames in
    the clear."""
    import sparktrain as st
    from sparktrain.training import FeatureSpec

    if not job.ids and not sparse_tables:
        raise NotImplementedError("the MLP has no embedding tables: the same run as sparktrain")
    features = FeatureSpec(dense=job.dense, categorical=tuple((name, BUCKETS) for name in job.ids))
    if job.model == "mlp":
        shape = {"model": "mlp", "hidden": [256, 256]}
    elif job.model == "dcn":
        shape = {"model": "dcn", "hidden": [256, 128], "dim": EMBEDDING_DIM, "cross_layers": CROSS_LAYERS}
    else:
        shape = {"model": "wide_deep", "hidden": [256, 128], "dim": EMBEDDING_DIM}
    conf = None if sealed else {SEAL_CONF: "false"}
    with spark_session("bench-train-sparktrain", conf) as spark:
        began = time.time()
        result = st.train(
            spark,
            job.train_tfrecord,
            features=features,
            num_workers=job.workers,
            batch_size=job.batch,
            steps=job.steps,
            epochs=1_000,  # the steps end the run
            optimizer="adam",
            learning_rate=1e-3,
            shuffle_buffer=0,  # as the peers: files in order
            sparse_tables=sparse_tables,
            log_every=WARMUP_STEPS,
            export_dir=f"{job.scratch}/export",
            log=False,
            **shape,
        )
        returned = time.time()
    fit = result.fit
    lines = {line["step"]: line["wall_time"] for line in fit.history}
    last = fit.steps
    steps_per_s = (last - WARMUP_STEPS) / (lines[last] - lines[WARMUP_STEPS])
    model = st._native.ExportedModel(result.export_dir)
    table = pq.read_table(job.eval_parquet)
    p = np.concatenate([model.predict(b).to_numpy() for b in table.to_batches()]).astype(np.float64)
    p = np.clip(p, 1e-7, 1 - 1e-7)  # float32 probabilities round to 0 or 1 beyond |logit| ~ 17
    logits = np.log(p) - np.log1p(-p)
    labels = table.column("label").to_numpy()
    return {
        "steps": last,
        "steps_per_s": steps_per_s,
        "examples_per_s": steps_per_s * job.global_batch,
        "first_step_s": fit.first_step_at - began,
        "train_s": lines[last] - fit.first_step_at,
        "tail_s": returned - lines[last],
        "wall_s": returned - began,
        "eval_loss": log_loss(labels, logits),
        "eval_auc": auc(labels, logits),
    }


# ---------------------------------------------------------------- Keras (TFoS and one process)


def keras_worker(job: Job | dict[str, Any], ctx: Any = None) -> None:
    """Trains ``job`` (a ``Job`` or its fields) with tf-keras: under MultiWorkerMirroredStrategy
    when ``ctx`` (TFoS's context) is given, else in this process alone. The chief saves its step
    stamps and eval logits to ``job.scratch/keras.npz``."""
    began = time.time()
    job = Job(**job) if isinstance(job, dict) else job
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if ctx else tf.distribute.get_strategy()
    chief = ctx is None or ctx.job_name == "chief"
    spec = {"label": tf.io.FixedLenFeature([], tf.int64)}
    spec.update({name: tf.io.FixedLenFeature([], tf.float32) for name in job.dense})
    spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in job.ids})

    def parse(records: Any) -> Any:
        example = tf.io.parse_example(records, spec)
        features = {"numeric": tf.stack([example[n] for n in job.dense], axis=1)}
        if job.ids:
            features["ids"] = tf.stack([example[n] for n in job.ids], axis=1)
        return features, tf.cast(example["label"], tf.float32)[:, None]

    def dataset(folder: str, batch: int, context: Any = None, repeat: bool = True) -> Any:
        files = tf.data.Dataset.list_files(f"{folder}/*.tfrecord", shuffle=False)
        if context is not None:
            files = files.shard(context.num_input_pipelines, context.input_pipeline_id)
        records = tf.data.TFRecordDataset(files)
        records = records.repeat() if repeat else records
        return records.batch(batch, drop_remainder=repeat).map(parse).prefetch(tf.data.AUTOTUNE)

    def train_dataset(context: Any) -> Any:
        return dataset(job.train_tfrecord, context.get_per_replica_batch_size(job.global_batch), context)

    tf.keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras_model(tf, job)
        model.compile(
            optimizer=tf.keras.optimizers.Adam(learning_rate=1e-3),
            loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
        )
    stamps: list[float] = []

    class Stamps(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            stamps.append(time.time())

    data = (
        tf.keras.utils.experimental.DatasetCreator(train_dataset)
        if ctx
        else train_dataset(tf.distribute.InputContext())
    )
    model.fit(data, epochs=1, steps_per_epoch=job.steps, callbacks=[Stamps()], verbose=0)
    if not chief:
        return
    evaluator = keras_model(tf, job)  # a plain copy, outside the strategy
    evaluator.set_weights(model.get_weights())
    logits, labels = [], []
    for features, label in dataset(job.eval_tfrecord, 4096, repeat=False):
        logits.append(evaluator(features, training=False).numpy()[:, 0])
        labels.append(label.numpy()[:, 0])
    np.savez(
        Path(job.scratch) / "keras.npz",
        stamps=np.array(stamps),
        logits=np.concatenate(logits),
        labels=np.concatenate(labels),
        began=began,
        returned=time.time(),
    )


def keras_model(tf: Any, job: Job) -> Any:
    """The tf-keras functional model of ``job.model``; inputs ``numeric`` (and ``ids``)."""
    layers = tf.keras.layers
    dense = tf.keras.Input((len(job.dense),), name="numeric")
    if job.model == "mlp":
        hidden = layers.Dense(256, activation="relu")(dense)
        hidden = layers.Dense(256, activation="relu")(hidden)
        return tf.keras.Model({"numeric": dense}, layers.Dense(1)(hidden))
    ids = tf.keras.Input((len(job.ids),), dtype=tf.int64, name="ids")
    offsets = tf.constant(np.arange(len(job.ids)) * BUCKETS, tf.int64)
    buckets = layers.Hashing(num_bins=BUCKETS)(ids) + offsets  # one table for all columns
    rows = len(job.ids) * BUCKETS
    wide_ids = layers.Embedding(rows, 1, embeddings_initializer="zeros")(buckets)
    wide = tf.reduce_sum(wide_ids, axis=1) + layers.Dense(1)(dense)
    embedded = layers.Flatten()(layers.Embedding(rows, EMBEDDING_DIM)(buckets))
    hidden = layers.Concatenate()([embedded, dense])
    if job.model == "dcn":
        x0 = hidden
        for _ in range(CROSS_LAYERS):
            hidden = x0 * layers.Dense(x0.shape[-1])(hidden) + hidden
    hidden = layers.Dense(256, activation="relu")(hidden)
    hidden = layers.Dense(128, activation="relu")(hidden)
    return tf.keras.Model({"numeric": dense, "ids": ids}, wide + layers.Dense(1)(hidden))


def keras_result(job: Job, began: float | None = None, returned: float | None = None) -> dict[str, Any]:
    saved = np.load(Path(job.scratch) / "keras.npz")
    began = float(saved["began"]) if began is None else began
    returned = float(saved["returned"]) if returned is None else returned
    return figures(list(saved["stamps"]), began, returned, saved["logits"], saved["labels"], job.global_batch)


def run_tfos(job: Job) -> dict[str, Any]:
    """TFoS ``TFCluster.run`` of ``keras_worker`` on ``job.workers`` executors, on 127.0.0.1."""
    import tensorflowonspark.util
    from tensorflowonspark import TFCluster

    os.environ["TFOS_SERVER_HOST"] = "127.0.0.1"
    tensorflowonspark.util.get_ip_address = lambda: "127.0.0.1"
    site = Path(job.scratch) / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    # This folder too: when this file is imported rather than run, keras_worker is pickled by name.
    python_path = f"{site}{os.pathsep}{Path(__file__).resolve().parent}"
    conf = {"spark.executorEnv.PYTHONPATH": python_path, "spark.executorEnv.TF_USE_LEGACY_KERAS": "1"}
    with spark_session("bench-train-tfos", conf) as spark:
        began = time.time()
        cluster = TFCluster.run(
            spark.sparkContext,
            keras_worker,
            dataclasses.asdict(job),  # TFoS wants a dict (or argparse's Namespace, or argv)
            job.workers,
            num_ps=0,
            input_mode=TFCluster.InputMode.TENSORFLOW,
            master_node="chief",
        )
        cluster.shutdown()
        returned = time.time()
    return keras_result(job, began, returned)


def run_keras_1p(job: Job) -> dict[str, Any]:
    """The reference: ``keras_worker`` alone in a fresh process, without Spark or a strategy."""
    process = multiprocessing.get_context("spawn").Process(target=keras_worker, args=(job,))
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"the Keras reference exited with {process.exitcode}")
    return keras_result(job)


# ---------------------------------------------------------------- PyTorch (subprocess in .venv-torch)


def run_torch_peer(job: Job, venv: Path, single: bool, launcher: str = "pyspark") -> dict[str, Any]:
    # The PyTorch contenders' jobs import sparktrain too (its data reader, its launcher): the
    # harness installs the built wheel into that virtualenv beside PyTorch.
    command = [str(torch_python(venv)), str(TORCH_PEER), "--job", json.dumps(dataclasses.asdict(job))]
    command += ["--single"] if single else ["--launcher", launcher]
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update({"GLOO_SOCKET_IFNAME": "lo", "VIRTUAL_ENV": str(venv)})
    out = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    results = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if not results:
        raise RuntimeError(f"{TORCH_PEER.name} printed no RESULT line; its output:\n{out}")
    return json.loads(results[-1].removeprefix("RESULT "))


# ---------------------------------------------------------------- main


def print_tables(model: str, results: list[tuple[str, Job, dict[str, Any]]]) -> None:
    print(f"\n### {model}\n")
    print(
        "| contender | workers | steps/s | examples/s | first step s | steps 2..N s | tail s | wall s "
        "| eval log-loss | eval AUC |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, job, r in results:
        print(
            f"| {name} | {job.workers} | {r['steps_per_s']:.1f} | {r['examples_per_s']:,.0f} | "
            f"{r['first_step_s']:.1f} | {r['train_s']:.1f} | {r['tail_s']:.1f} | {r['wall_s']:.1f} | "
            f"{r['eval_loss']:.4f} | {r['eval_auc']:.4f} |"
        )
    by_workers: dict[str, dict[int, float]] = {}
    for name, job, r in results:
        by_workers.setdefault(name, {})[job.workers] = r["examples_per_s"]
    scaling = [(name, rates) for name, rates in by_workers.items() if 1 in rates and len(rates) > 1]
    for name, rates in scaling:
        most = max(rates)
        print(f"\n{name}: examples/s on {most} workers ÷ on 1 worker = {rates[most] / rates[1]:.2f}")
    for variant in dict.fromkeys(name for name, _, _ in results if name.startswith("sparktrain")):
        ours = {job.workers: r for name, job, r in results if name == variant}
        peers = [
            (name, job, r)
            for name, job, r in results
            if not name.startswith("sparktrain") and job.workers in ours
        ]
        if not peers:
            continue
        print(f"\n| {variant} against | workers | examples/s: ours ÷ peer | wall: peer ÷ ours |")
        print("|---|---:|---:|---:|")
        for name, job, r in peers:
            mine = ours[job.workers]
            speed = mine["examples_per_s"] / r["examples_per_s"]
            print(f"| {name} | {job.workers} | {speed:.2f}x | {r['wall_s'] / mine['wall_s']:.2f}x |")
    # The same DDP function under the two launchers: sparktrain's TorchDistributor ÷ PySpark's.
    ours = {job.workers: r for name, job, r in results if name == "torch-sparktrain"}
    for name, job, r in results:
        if name == "torch" and job.workers in ours:
            mine = ours[job.workers]
            print(
                "\n"
                f"DDP under sparktrain's TorchDistributor ÷ PySpark's, {job.workers} workers: "
                f"examples/s {mine['examples_per_s'] / r['examples_per_s']:.2f}x, "
                f"wall {r['wall_s'] / mine['wall_s']:.2f}x faster"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="mlp,wide_deep", help="comma-separated: mlp, wide_deep, dcn")
    parser.add_argument(
        "--contenders", default="sparktrain,sparktrain-dense,sparktrain-clear,tfos,torch,keras-1p,torch-1p"
    )
    parser.add_argument("--workers", default="2,1", help="comma-separated worker counts")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=256, help="per worker")
    parser.add_argument("--rows", type=int, default=300_000, help="training rows")
    parser.add_argument("--data", help="folder for the data files (default: a temporary one)")
    parser.add_argument("--torch-venv", default=str(ROOT / ".venv-torch"))
    parser.add_argument("--json", help="also write every run's figures to this file")
    args = parser.parse_args()
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # executors too, not the outward address
    venv = Path(args.torch_venv)
    contenders: dict[str, Callable[[Job], dict[str, Any]]] = {
        "sparktrain": run_sparktrain,
        "sparktrain-dense": lambda job: run_sparktrain(job, sparse_tables=False),
        "sparktrain-clear": lambda job: run_sparktrain(job, sealed=False),
        "tfos": run_tfos,
        "torch": lambda job: run_torch_peer(job, venv, single=False),
        "torch-sparktrain": lambda job: run_torch_peer(job, venv, single=False, launcher="sparktrain"),
        "keras-1p": run_keras_1p,
        "torch-1p": lambda job: run_torch_peer(job, venv, single=True),
    }
    chosen = args.contenders.split(",")
    unknown = set(chosen) - set(contenders)
    if unknown:
        sys.exit(f"unknown contenders: {sorted(unknown)}; known: {sorted(contenders)}")
    if "tfos" in chosen:
        try:
            import tensorflowonspark  # noqa: F401
        except ImportError:
            sys.exit("TensorFlowOnSpark is missing: pip install -r tests/bench/requirements-peers.txt")
    if {"torch", "torch-sparktrain", "torch-1p"} & set(chosen):
        torch_python(venv)
    worker_counts = [int(w) for w in args.workers.split(",")]
    everything = []
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        data = Path(args.data or tmp)
        for model in args.model.split(","):
            paths = write_data(model, args.rows, data)
            dense, ids = columns(model)
            results = []
            for name in chosen:
                counts = [1] if name.endswith("-1p") else worker_counts
                for workers in counts:
                    scratch = tempfile.mkdtemp(prefix=f"{name}-{workers}-", dir=tmp)
                    job = Job(model, workers, args.steps, args.batch, dense, ids, scratch=scratch, **paths)
                    print(f"{model}: {name} on {workers} worker(s) ...", file=sys.stderr, flush=True)
                    try:
                        result = contenders[name](job)
                    except NotImplementedError as e:
                        print(f"  skipped: {e}", file=sys.stderr)
                        continue
                    except Exception as e:  # a flaky peer must not lose the others' figures
                        print(f"  FAILED: {type(e).__name__}: {str(e)[:500]}", file=sys.stderr)
                        print(f"\n{model}: {name} on {workers} worker(s) failed: {type(e).__name__}")
                        continue
                    print(f"  {json.dumps(result)}", file=sys.stderr, flush=True)
                    results.append((name, job, result))
                    everything.append({"contender": name, "model": model, "workers": workers, **result})
            print_tables(model, results)
    print(
        f"\n{args.rows:,} training rows in {FILES} files, {EVAL_ROWS:,} eval rows; "
        f"{args.steps} steps of {args.batch} per worker; steady figures from the end of step "
        f"{WARMUP_STEPS}; local-cluster[2,1,1024]"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1) + "\n")


if __name__ == "__main__":
    main()
