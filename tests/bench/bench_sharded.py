"""Sharded embedding tables against replicated ones, and against TensorFlow's
ParameterServerStrategy with sharded variables, in one run.

The data are Criteo-like rows whose ids follow a Zipf law over a large id space
(``harness.synthetic.zipf_criteo_table``: 13 float columns, 26 id columns of 100 to 4,000,000
distinct values, a few very hot values and a long tail), ``--rows`` (400,000) training rows and
20,000 held-out rows of the same problem, each written once as 8 TFRecord files. The models are
Wide&Deep and DeepFM: each of the 26 id columns hashed into ``b`` buckets, one first-order
weight and one ``--dim`` (16) embedding per bucket (two tables of ``26 b`` rows), a linear layer
over the floats, a 256-128 ReLU tower over the embeddings and the floats, and for DeepFM the
pairwise dot products of the embeddings; Adagrad (learning rate ``--learning-rate``, 0.05,
accumulators from 0.1, as Keras's) on every parameter, binary cross-entropy, ``--batch`` (256)
rows per trainer and step.

The table budget is the bytes of the tables with ``--buckets`` (8,192) buckets per column and
Adagrad's accumulators (26 x 8,192 x 17 x 2 x 4 bytes = 27.6 MiB): the engine's
``table_budget_bytes``. Tables "k x budget" have ``k x --buckets`` buckets per column, so
exactly ``k`` times those bytes. For every model, trainer count ``n`` (``--workers``, 2 and 4)
and size ``k`` (``--sizes``, 1, 2, 4, 8) with ``k <= n`` (a sharded trainer holds ``k/n`` of
the budget, so larger tables need more trainers):

  replicated  ``shard_tables="off"`` and the default budget (half the machine's memory):
              every trainer holds the whole tables. Under the table budget it fits only at
              ``k = 1``; above, the engine refuses it before training, and the run shows the
              refusal. The replicated run is still made, without the budget, as the reference
              for speed and for the held-out loss of a model of that size;
  sharded     ``shard_tables="on"`` and ``table_budget_bytes`` = the budget: each trainer holds
              its share of the rows and their accumulators (two all-to-alls of ids and rows
              and one of row gradients per step);
  ps          the peer, once per model and ``n``, at the largest ``k``: tf-keras 2.21 under
              ``tf.distribute.ParameterServerStrategy`` launched by sparktrain's TFoS shim
              (``sparktrain.tfos.TFCluster.run(..., num_ps=n, master_node="chief")``): the
              coordinator on the chief, ``n`` workers that train, and ``n`` parameter servers
              holding the tables as sharded variables (``MinSizePartitioner``: ``n`` shards of
              every variable over 256 KiB, smaller ones whole); the same model, optimizer and
              per-worker batch over ``tf.data`` on the same TFRecord files (each worker its
              share of the files), ``n x --steps`` steps of one batch (the same examples as
              ``--steps`` synchronous steps of ``n`` batches). Its updates are asynchronous, as
              the strategy is.

sparktrain's runs are ``sparktrain.Cluster.run`` jobs on ``local-cluster[n,1,1024]`` (one trainer
per executor); the peer's on ``local-cluster[n,3,1024]`` (the same ``n`` executors, holding the
``2n + 1`` tasks). Every task has one CPU (``spark.task.cpus=1``: one thread for candle and for
TensorFlow's ops; the shim raises TensorFlow's inter-op threads to ``2n + 2`` so that parameter
servers cannot deadlock). The data plane is sealed (AES-256-GCM) for sparktrain; TensorFlow's
gRPC is in the clear.

Figures, steady state: each contender first takes ``--warmup-steps`` (20) steps (the peer
``n x`` that many, as a first epoch), then ``--steps`` (150) measured ones (the peer: its second
epoch). examples/s is the measured steps' examples over their time (for sparktrain from the end
of the first measured step to the end of the last); ``step ms`` is the time of one synchronous
step of ``n`` batches (for the peer, ``n`` batches' worth of its rate). ``wire KiB`` is what each
trainer put on its TCP connections to the others per step of one batch, from the kernel's
``tcpi_bytes_sent`` of the trainer's data-plane sockets (the same bytes the ring's own counter
counts: frames, tags included); for the peer, every task's bytes to the others per batch, all
tasks together, divided by ``n``, sampled every 0.25 s. ``peak RSS`` is the largest
``VmHWM`` among the trainers (for the peer: among the parameter servers and among the
workers). The held-out loss is the mean log-loss on the 20,000 held-out rows after training
(sparktrain: ``Trainer.evaluate``; the peer: its coordinator's model on the same rows).

``--to-loss L`` measures time to a held-out loss instead: sharded and the peer each train from
the start, at every learning rate of ``--lr-grid`` (a synchronous step of ``n`` batches and an
asynchronous update of one may want different rates, so each contender gets its best), and
evaluate on the held-out rows every ``--eval-every`` (50) steps (the peer: after every
``n x --eval-every`` batches, on its coordinator), until the loss is at most ``L`` or
``--max-steps``. The time to ``L`` is the training time up to that evaluation, the evaluations'
own time left out; the table gives each contender's best over the grid and their ratio.

The ratio tables check the targets: where both fit, sharded within 1.3x of replicated step
time; sharded >= 3x the peer's examples/s at equal held-out loss; tables of at least 8x one
trainer's budget (``--workers 8 --sizes 8``) trained to the held-out loss of the replicated
model of the same size trained without a budget. TensorFlow is needed (``tensorflow-cpu`` and
``tf-keras``, which the README's first command installs from tests/requirements.txt and
tests/requirements-nodeps.txt)::

    .venv/bin/python tests/bench/bench_sharded.py                  # quick: 7 min on 2 cores
    .venv/bin/python tests/bench/bench_sharded.py --workers 2,4,8 --sizes 1,2,4,8 --steps 300 \\
        --rows 1000000                                             # the full run
    .venv/bin/python tests/bench/bench_sharded.py --to-loss 0.51 --workers 2,4 \\
        --lr-grid 0.05,0.1,0.2,0.4                                 # time to a loss (17 min)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.spark import local_cluster_session
from harness.synthetic import DENSE, SPARSE, zipf_criteo_table

MODELS = ("wide_deep", "deep_fm")
HIDDEN = (256, 128)
FILES = 8
EVAL_ROWS = 20_000
LOG_EVERY = 10  # the engine's progress lines: steady figures run between them
ADAGRAD_BUFFERS = 1  # the accumulator: one more float per table value
PS_MIN_SHARD_BYTES = 256 << 10
SAMPLE_SECONDS = 0.25  # how often the peer's tasks note their bytes sent and peak RSS


def table_bytes(buckets: int, dim: int) -> int:
    """Bytes of both tables (first-order weights and embeddings) with ``buckets`` per id column
    and Adagrad's accumulators: what the engine holds a trainer's tables to."""
    return len(SPARSE) * buckets * (dim + 1) * (1 + ADAGRAD_BUFFERS) * 4


@dataclasses.dataclass(frozen=True)
class Job:
    """One training run, as the trainers receive it (as a dict)."""

    model: str
    workers: int
    size: int  # the tables' bytes in table budgets
    buckets: int  # per id column
    dim: int
    steps: int  # measured steps
    warmup: int
    batch: int  # per trainer and step
    learning_rate: float
    placement: str  # "replicated", "sharded" or "ps"
    budget: int | None  # table_budget_bytes, or None for the engine's default
    ps_steps_per_execution: int  # the peer's steps per call on a worker
    train: str
    eval: str
    scratch: str
    target_loss: float | None = None  # the time-to-loss mode: train until the held-out loss is this
    eval_every: int = 0  # steps between held-out evaluations (the peer: n x that many batches)
    max_steps: int = 0  # where the time-to-loss mode gives up


# ---------------------------------------------------------------- measurements in the trainers


def vm_bytes(field: str) -> int:
    """``field`` (``VmHWM``, ``VmRSS``) of this process's ``/proc/self/status``, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def tcp_bytes_sent(ports: set[int]) -> int:
    """Bytes this process has sent on its established TCP connections from or to one of
    ``ports`` (the listeners of the job's tasks): the kernel's ``tcpi_bytes_sent``, which
    counts what the application wrote (frames and their tags, not TCP/IP headers)."""
    import socket
    import struct

    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state = (
                int(fields[1].rsplit(":", 1)[1], 16),
                int(fields[2].rsplit(":", 1)[1], 16),
                fields[3],
            )
            if state == "01" and (local in ports or remote in ports):  # 01: ESTABLISHED
                inodes.add(int(fields[9]))
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if not target.startswith("socket:[") or int(target[8:-1]) not in inodes:
            continue
        try:
            with socket.socket(fileno=os.dup(int(fd))) as s:
                info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
        except OSError:
            continue
        total += struct.unpack_from("=Q", info, 200)[0]  # tcpi_bytes_sent (Linux 4.19 and later)
    return total


def sparktrain_main(job_fields: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """One trainer: ``--warmup-steps`` steps, then the measured ones, then the held-out
    evaluation; every trainer's bytes and memory go to the chief, which returns them."""
    job = dict(job_fields)
    baseline = vm_bytes("VmRSS")
    features = {
        "dense": list(DENSE),
        "categorical": [(name, job["buckets"]) for name in SPARSE],
        "label": "label",
    }
    options = dict(
        model=job["model"],
        features=features,
        hidden=list(HIDDEN),
        dim=job["dim"],
        optimizer="adagrad",
        learning_rate=job["learning_rate"],
        batch_size=job["batch"],
        shuffle_buffer=0,  # files in order, as the peer reads them
        log_every=LOG_EVERY,
        shard_tables="on" if job["placement"] == "sharded" else "off",
        table_budget_bytes=job["budget"],
    )
    if job["target_loss"] is not None:
        return sparktrain_to_loss(options, job, ctx)
    trainer = ctx.trainer(**options)
    ports = {task.data_port for task in ctx.tasks}
    trainer.fit(job["train"], epochs=1_000, steps=job["warmup"])  # the steps end the run
    sent = tcp_bytes_sent(ports)
    fit = trainer.fit(job["train"], epochs=1_000, steps=job["warmup"] + job["steps"])
    sent = tcp_bytes_sent(ports) - sent
    metrics = trainer.evaluate(job["eval"])
    mine = {
        "bytes_per_step": sent / fit.new_steps,
        "peak_rss": vm_bytes("VmHWM"),
        "baseline_rss": baseline,
    }
    everyone = ctx.allgather(mine)
    trainer.close()
    if not ctx.is_chief:
        return None
    lines = [(line["step"], line["wall_time"]) for line in fit.history]
    last_step, last_time = lines[-1]
    first_step = fit.steps - fit.new_steps + 1
    return {
        "steps_per_s": (last_step - first_step) / (last_time - fit.first_step_at),
        "trainers": everyone,
        "eval_loss": metrics.loss,
        "eval_auc": metrics.auc,
    }


def sparktrain_to_loss(options: dict[str, Any], job: dict[str, Any], ctx: Any) -> dict[str, Any] | None:
    """Trains from the first step, evaluating on the held-out rows every ``eval_every`` steps,
    until the held-out loss is at most ``target_loss`` (or ``max_steps``); the chief returns
    each evaluation's step, loss and training seconds so far (evaluations' own time left out:
    an evaluation starts right after the progress line of its step, ``log_every`` dividing
    ``eval_every``, and ends when ``on_eval`` is called)."""
    from sparktrain.training import Callback

    clock = {"logged": 0.0, "evaluating": 0.0}
    curve: list[dict[str, float]] = []

    class Clock(Callback):
        def on_log(self, trainer: Any, line: dict[str, float]) -> None:
            clock["logged"] = line["wall_time"]

    def on_eval(step: int, metrics: Any) -> bool:
        now = time.time()
        if step % LOG_EVERY == 0:
            clock["evaluating"] += now - clock["logged"]
        seconds = now - began - clock["evaluating"]
        curve.append({"step": step, "loss": metrics.loss, "auc": metrics.auc, "seconds": seconds})
        return bool(metrics.loss <= job["target_loss"])

    trainer = ctx.trainer(**options, callbacks=[Clock()])
    began = time.time()
    trainer.fit(
        job["train"],
        epochs=1_000,
        steps=job["max_steps"],
        eval_data=job["eval"],
        eval_every=job["eval_every"],
        on_eval=on_eval,
    )
    trainer.close()
    return {"curve": curve} if ctx.is_chief else None


def keras_model(tf: Any, job: dict[str, Any]) -> Any:
    """The tf-keras functional model of ``job["model"]``; inputs ``numeric`` and ``ids``."""
    layers = tf.keras.layers
    buckets, dim, columns = job["buckets"], job["dim"], len(SPARSE)
    numeric = tf.keras.Input((len(DENSE),), name="numeric")
    ids = tf.keras.Input((columns,), dtype=tf.int64, name="ids")
    # The ids are already hashes (below 2**31): a bucket is the id modulo the buckets, and
    # the columns' buckets follow one another in one table, as the engine's do.
    offsets = tf.constant(np.arange(columns) * buckets, tf.int64)
    rows = tf.math.floormod(ids, buckets) + offsets
    first = layers.Embedding(columns * buckets, 1, embeddings_initializer="zeros", name="wide_ids")(rows)
    wide = tf.reduce_sum(first, axis=[1, 2])[:, None] + layers.Dense(1, name="wide_dense")(numeric)
    uniform = tf.keras.initializers.RandomUniform(-0.05, 0.05)
    e = layers.Embedding(columns * buckets, dim, embeddings_initializer=uniform, name="embeddings")(rows)
    hidden = layers.Concatenate()([layers.Flatten()(e), numeric])
    for width in HIDDEN:
        hidden = layers.Dense(width, activation="relu")(hidden)
    logit = wide + layers.Dense(1)(hidden)
    if job["model"] == "deep_fm":
        # sum over pairs i < j of <e_i, e_j> = ((sum_i e_i)^2 - sum_i e_i^2) / 2, over the values
        summed = tf.reduce_sum(e, axis=1)
        squares = tf.reduce_sum(e * e, axis=1)
        logit = logit + 0.5 * tf.reduce_sum(summed * summed - squares, axis=1, keepdims=True)
    return tf.keras.Model({"numeric": numeric, "ids": ids}, logit)


def keras_dataset(tf: Any, folder: str, batch: int, shard: tuple[int, int] | None, repeat: bool) -> Any:
    """The TFRecord files of ``folder`` (``shard``: this worker's share of them) as batches of
    ``({"numeric", "ids"}, label)``."""
    spec = {"label": tf.io.FixedLenFeature([], tf.int64)}
    spec.update({name: tf.io.FixedLenFeature([], tf.float32) for name in DENSE})
    spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in SPARSE})

    def parse(records):  # no annotations: AutoGraph reads them, and they name no type here
        example = tf.io.parse_example(records, spec)
        features = {
            "numeric": tf.stack([example[n] for n in DENSE], axis=1),
            "ids": tf.stack([example[n] for n in SPARSE], axis=1),
        }
        return features, tf.cast(example["label"], tf.float32)[:, None]

    files = tf.data.Dataset.list_files(f"{folder}/*.tfrecord", shuffle=False)
    if shard is not None:
        files = files.shard(*shard)
    records = tf.data.TFRecordDataset(files)
    records = records.repeat() if repeat else records
    return records.batch(batch, drop_remainder=repeat).map(parse).prefetch(tf.data.AUTOTUNE)


def held_out(tf: Any, model: Any, job: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The model's logits on the held-out rows, and their labels."""
    logits, labels = [], []
    for features, label in keras_dataset(tf, job["eval"], 4096, None, repeat=False):
        logits.append(model(features, training=False).numpy()[:, 0])
        labels.append(label.numpy()[:, 0])
    return np.concatenate(logits), np.concatenate(labels)


def keras_to_loss(
    tf: Any, model: Any, data: Any, workers: int, job: dict[str, Any]
) -> list[dict[str, float]]:
    """The peer's time-to-loss run, in one ``fit``: epochs of ``workers x eval_every`` batches
    (the examples of ``eval_every`` synchronous steps), the held-out loss after each on the
    coordinator, until it is at most ``target_loss`` or ``max_steps`` such steps have passed.
    Each evaluation's step, loss and training seconds so far (epochs' time alone: the
    coordinator has joined the workers at an epoch's end, before the evaluation)."""
    import time

    curve: list[dict[str, float]] = []
    spent = {"seconds": 0.0, "began": 0.0}

    class Evaluate(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            spent["began"] = time.time()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            spent["seconds"] += time.time() - spent["began"]
            logits, labels = held_out(tf, self.model, job)
            loss = log_loss(labels, logits)
            step = (epoch + 1) * job["eval_every"]
            curve.append(
                {"step": step, "loss": loss, "auc": auc(labels, logits), "seconds": spent["seconds"]}
            )
            if loss <= job["target_loss"]:
                self.model.stop_training = True

    epochs = -(-job["max_steps"] // job["eval_every"])
    model.fit(
        data, epochs=epochs, steps_per_epoch=workers * job["eval_every"], callbacks=[Evaluate()], verbose=0
    )
    return curve


def ps_main(job_fields: dict[str, Any], ctx: Any) -> None:
    """A node of the peer (TFoS's ``map_fun``): parameter servers and workers serve until
    training ends, noting their bytes sent and peak RSS; the chief coordinates the training,
    evaluates the model on the held-out rows and saves its figures."""
    import json
    import os
    import threading
    import time

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    from sparktrain.tfos import TFNode

    job = dict(job_fields)
    ports = {int(address.rsplit(":", 1)[1]) for role in ctx.cluster_spec.values() for address in role}
    scratch = Path(job["scratch"])
    if ctx.job_name in ("worker", "ps"):

        def note() -> None:
            with open(scratch / f"{ctx.job_name}-{ctx.task_index}.jsonl", "a") as f:
                while True:
                    sample = {"t": time.time(), "sent": tcp_bytes_sent(ports), "hwm": vm_bytes("VmHWM")}
                    f.write(json.dumps(sample) + "\n")
                    f.flush()
                    time.sleep(SAMPLE_SECONDS)

        threading.Thread(target=note, daemon=True).start()
        _, server = TFNode.start_cluster_server(ctx)
        server.join()
        return

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    num_ps = len(ctx.cluster_spec["ps"])
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=PS_MIN_SHARD_BYTES, max_shards=num_ps
    )
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    tf.keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras_model(tf, job)
        model.compile(
            optimizer=tf.keras.optimizers.Adagrad(
                learning_rate=job["learning_rate"], initial_accumulator_value=0.1, epsilon=1e-7
            ),
            loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
            steps_per_execution=job["ps_steps_per_execution"],
        )
    # How many parameter servers hold each table (a ShardedVariable lists its parts).
    shards = {
        name: len(getattr(model.get_layer(name).embeddings, "variables", [None]))
        for name in ("wide_ids", "embeddings")
    }

    def dataset_fn(context: Any) -> Any:
        share = (context.num_input_pipelines, context.input_pipeline_id)
        return keras_dataset(tf, job["train"], job["batch"], share, repeat=True)

    workers = len(ctx.cluster_spec["worker"])
    stamps: list[float] = []

    class Stamps(tf.keras.callbacks.Callback):
        # Keras joins the coordinator at an epoch's end: the stamps bracket finished steps.
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            stamps.append(time.time())

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            stamps.append(time.time())

    data = tf.keras.utils.experimental.DatasetCreator(dataset_fn)
    if job["target_loss"] is not None:
        curve = keras_to_loss(tf, model, data, workers, job)
        (scratch / "chief.json").write_text(json.dumps({"curve": curve, "shards": shards}))
        return
    model.fit(data, epochs=1, steps_per_epoch=workers * job["warmup"], verbose=0)
    model.fit(data, epochs=1, steps_per_epoch=workers * job["steps"], callbacks=[Stamps()], verbose=0)
    logits, labels = held_out(tf, model, job)
    (scratch / "chief.json").write_text(
        json.dumps(
            {
                "began": stamps[0],
                "ended": stamps[1],
                "logits": logits.tolist(),
                "labels": labels.tolist(),
                "shards": shards,
            }
        )
    )


# ---------------------------------------------------------------- the driver's side


def log_loss(labels: np.ndarray, logits: np.ndarray) -> float:
    z = np.asarray(logits, np.float64)
    return float(np.mean(np.logaddexp(0.0, z) - np.asarray(labels, np.float64) * z))


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties get their average rank)."""
    positive = np.asarray(labels) > 0
    _, inverse, counts = np.unique(np.asarray(scores), return_inverse=True, return_counts=True)
    average_rank = np.cumsum(counts) - (counts - 1) / 2.0
    p = int(positive.sum())
    n = len(positive) - p
    return float((average_rank[inverse][positive].sum() - p * (p + 1) / 2.0) / (p * n))


def write_data(rows: int, folder: Path) -> tuple[str, str]:
    """The training and held-out rows as FILES TFRecord files each; their folders."""
    from sparktrain import tfrecord

    folders = []
    for split, count, seed in (("train", rows, 1), ("eval", EVAL_ROWS, 2)):
        table = zipf_criteo_table(count, seed=seed)
        out = folder / split
        out.mkdir(parents=True, exist_ok=True)
        step = -(-table.num_rows // FILES)
        for i in range(FILES):
            part = table.slice(i * step, step)
            tfrecord.write_batches(str(out / f"part-{i:05d}.tfrecord"), part, overwrite=True)
        folders.append(str(out))
    return folders[0], folders[1]


@contextlib.contextmanager
def spark_session(name: str, executors: int, cores: int, conf: dict[str, str] | None = None) -> Iterator[Any]:
    """A fresh ``local-cluster[executors,cores,1024]`` session whose Python workers are started."""
    spark = local_cluster_session(name, cores=cores, conf=conf, executors=executors)
    try:
        slots = executors * cores
        spark.sparkContext.parallelize(range(slots), slots).map(lambda x: x).collect()
        yield spark
    finally:
        spark.stop()


def refusal(job: Job) -> str | None:
    """The engine's message when ``job``'s tables, replicated, do not fit the table budget
    (``None`` when they do): the check a trainer makes before it allocates any table."""
    from sparktrain import _native
    from sparktrain.errors import InvalidArgumentError
    from sparktrain.training import FeatureSpec, Trainer

    features = FeatureSpec(dense=DENSE, categorical=tuple((name, job.buckets) for name in SPARSE))
    config = Trainer(
        None,
        model=job.model,
        features=features,
        hidden=list(HIDDEN),
        dim=job.dim,
        optimizer="adagrad",
        shard_tables="off",
        table_budget_bytes=job.budget,
    ).config
    if table_bytes(job.buckets, job.dim) <= (job.budget or 0):
        return None
    try:
        _native.Trainer(config, features.to_native(), None)
    except InvalidArgumentError as e:
        return str(e).splitlines()[0]
    return None


def run_sparktrain(spark: Any, job: Job, timeout: float) -> dict[str, Any]:
    """``sparktrain_main`` on ``job.workers`` trainers; the figures of the run."""
    import sparktrain as st

    cluster = st.Cluster.run(spark, sparktrain_main, dataclasses.asdict(job), job.workers, log=False)
    with cluster:
        out = cluster.wait(timeout)
    if job.target_loss is not None:
        return to_loss_figures(job, out["curve"])
    steps_per_s = out["steps_per_s"]
    trainers = out["trainers"]
    return {
        "examples_per_s": steps_per_s * job.batch * job.workers,
        "step_ms": 1e3 / steps_per_s,
        "wire_kib": float(np.mean([t["bytes_per_step"] for t in trainers])) / 1024,
        "wire_kib_max": max(t["bytes_per_step"] for t in trainers) / 1024,
        "peak_rss_mib": max(t["peak_rss"] for t in trainers) / 2**20,
        "baseline_rss_mib": max(t["baseline_rss"] for t in trainers) / 2**20,
        "eval_loss": out["eval_loss"],
        "eval_auc": out["eval_auc"],
    }


def to_loss_figures(job: Job, curve: list[dict[str, float]]) -> dict[str, Any]:
    """A time-to-loss run's figures: where the held-out loss first reached the target (None
    where it did not within ``max_steps``), and the whole curve."""
    reached = next((point for point in curve if point["loss"] <= (job.target_loss or 0.0)), None)
    last = reached or curve[-1]
    examples = last["step"] * job.batch * job.workers
    return {
        "reached": reached is not None,
        "steps": last["step"],
        "examples": examples,
        "seconds": last["seconds"],
        "examples_per_s": examples / last["seconds"],
        "eval_loss": last["loss"],
        "eval_auc": last["auc"],
        "curve": curve,
    }


def samples_at(path: Path, when: float) -> dict[str, float]:
    """The peer task's noted bytes sent at ``when`` (linear between its samples) and its
    peak RSS then."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    times = np.array([r["t"] for r in rows])
    return {
        "sent": float(np.interp(when, times, [r["sent"] for r in rows])),
        "hwm": float(np.interp(when, times, [r["hwm"] for r in rows])),
    }


def run_ps(spark: Any, job: Job, timeout: float) -> dict[str, Any]:
    """``ps_main`` under the TFoS shim: a chief, ``job.workers`` workers and as many
    parameter servers."""
    from sparktrain.tfos import TFCluster

    n = job.workers
    cluster = TFCluster.run(
        spark.sparkContext,
        ps_main,
        dataclasses.asdict(job),
        2 * n + 1,
        num_ps=n,
        input_mode=TFCluster.InputMode.TENSORFLOW,
        master_node="chief",
        reservation_timeout=timeout,
        max_restarts=0,
    )
    cluster.shutdown(timeout=timeout)
    scratch = Path(job.scratch)
    chief = json.loads((scratch / "chief.json").read_text())
    if job.target_loss is not None:
        return to_loss_figures(job, chief["curve"])
    seconds = chief["ended"] - chief["began"]
    batches = n * job.steps
    sent, hwm = {}, {}
    for path in sorted(scratch.glob("*.jsonl")):
        role = path.stem.split("-")[0]
        begin, end = samples_at(path, chief["began"]), samples_at(path, chief["ended"])
        sent[path.stem] = end["sent"] - begin["sent"]
        hwm.setdefault(role, []).append(end["hwm"])
    logits, labels = np.array(chief["logits"]), np.array(chief["labels"])
    return {
        "examples_per_s": batches * job.batch / seconds,
        "step_ms": 1e3 * seconds / job.steps,  # n batches' worth, as a synchronous step
        "wire_kib": sum(sent.values()) / batches / 1024,
        "wire_kib_max": float("nan"),
        "peak_rss_mib": max(hwm.get("ps", [0.0])) / 2**20,
        "worker_rss_mib": max(hwm.get("worker", [0.0])) / 2**20,
        "baseline_rss_mib": float("nan"),
        "eval_loss": log_loss(labels, logits),
        "eval_auc": auc(labels, logits),
        "table_shards": min(chief["shards"].values()),
    }


# ---------------------------------------------------------------- the tables


def fmt(value: float, digits: int = 1) -> str:
    return (
        "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"
    )


def print_tables(results: list[tuple[Job, dict[str, Any]]], budget: int, refusals: dict[tuple, str]) -> None:
    print("\n### Figures\n")
    print(
        "| model | trainers | tables (x budget) | table MiB per trainer | contender | fits the budget "
        "| examples/s | step ms | wire KiB/step/trainer | peak RSS MiB/trainer | held-out loss | AUC |"
    )
    print("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for job, r in results:
        whole = table_bytes(job.buckets, job.dim) / 2**20
        held = whole / job.workers if job.placement in ("sharded", "ps") else whole
        fits = {"replicated": job.size <= 1, "sharded": job.size <= job.workers, "ps": True}[job.placement]
        rss = fmt(r["peak_rss_mib"], 0)
        if job.placement == "ps":
            rss = f"ps {rss} / worker {fmt(r['worker_rss_mib'], 0)}"
        print(
            f"| {job.model} | {job.workers} | {job.size} | {held:,.1f} | {job.placement} | "
            f"{'yes' if fits else 'no (run without it)'} | {fmt(r['examples_per_s'], 0)} | "
            f"{fmt(r['step_ms'])} | {fmt(r['wire_kib'])} | {rss} | {r['eval_loss']:.4f} | "
            f"{r['eval_auc']:.4f} |"
        )
    if refusals:
        print("\nReplicated under the table budget, as the engine refuses it before training:\n")
        for (model, size), message in sorted(refusals.items()):
            print(f"- {model}, {size} x budget: {message}")

    def find(model: str, workers: int, size: int, placement: str) -> dict[str, Any] | None:
        for job, r in results:
            if (job.model, job.workers, job.size, job.placement) == (model, workers, size, placement):
                return r
        return None

    keys = sorted({(j.model, j.workers, j.size) for j, _ in results})
    print("\n### Sharded against replicated (the same size, replicated without the budget)\n")
    print(
        "| model | trainers | tables (x budget) | step ms: sharded / replicated (target <= 1.3 where "
        "both fit) | wire: sharded / replicated | peak RSS: sharded / replicated "
        "| held-out loss: sharded - replicated |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for model, workers, size in keys:
        s, r = find(model, workers, size, "sharded"), find(model, workers, size, "replicated")
        if s is None or r is None:
            continue
        both = " (both fit)" if size <= 1 else ""
        print(
            f"| {model} | {workers} | {size} | {s['step_ms'] / r['step_ms']:.2f}x{both} | "
            f"{s['wire_kib'] / r['wire_kib']:.2f}x | {s['peak_rss_mib'] / r['peak_rss_mib']:.2f}x | "
            f"{s['eval_loss'] - r['eval_loss']:+.5f} |"
        )
    print("\n### Sharded against the parameter-server peer (the same size)\n")
    print(
        "| model | trainers | tables (x budget) | examples/s: sharded / ps (target >= 3) "
        "| held-out loss: sharded | ps | wire per batch: ps / sharded |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for model, workers, size in keys:
        s, p = find(model, workers, size, "sharded"), find(model, workers, size, "ps")
        if s is None or p is None:
            continue
        print(
            f"| {model} | {workers} | {size} | {s['examples_per_s'] / p['examples_per_s']:.2f}x | "
            f"{s['eval_loss']:.4f} | {p['eval_loss']:.4f} | {p['wire_kib'] / s['wire_kib']:.2f}x |"
        )
    print(f"\nTable budget: {budget:,} bytes ({budget / 2**20:.1f} MiB) per trainer.")


def print_to_loss(results: list[tuple[Job, dict[str, Any]]], target: float) -> None:
    print(f"\n### Time to a held-out loss of {target}\n")
    print(
        "| model | trainers | tables (x budget) | learning rate | contender | reached | steps "
        "| examples | training s | examples/s | held-out loss | AUC |"
    )
    print("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for job, r in results:
        print(
            f"| {job.model} | {job.workers} | {job.size} | {job.learning_rate:g} | {job.placement} | "
            f"{'yes' if r['reached'] else 'no'} | {r['steps']:,} | {r['examples']:,} | "
            f"{r['seconds']:.1f} | {fmt(r['examples_per_s'], 0)} | {r['eval_loss']:.4f} | "
            f"{r['eval_auc']:.4f} |"
        )
    print(
        "\n| model | trainers | sharded: best time (rate) | ps: best time (rate) "
        "| ps / sharded (target >= 3) |"
    )
    print("|---|---:|---:|---:|---:|")
    for model, workers in sorted({(j.model, j.workers) for j, _ in results}):
        best: dict[str, tuple[float, float] | None] = {}
        for placement in ("sharded", "ps"):
            times = [
                (r["seconds"], j.learning_rate)
                for j, r in results
                if (j.model, j.workers, j.placement) == (model, workers, placement) and r["reached"]
            ]
            best[placement] = min(times) if times else None
        s, p = best["sharded"], best["ps"]
        cell = {k: f"{v[0]:.1f} s ({v[1]:g})" if v else "not reached" for k, v in best.items()}
        ratio = f"{p[0] / s[0]:.2f}x" if s and p else "-"
        print(f"| {model} | {workers} | {cell['sharded']} | {cell['ps']} | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=",".join(MODELS), help="comma-separated: wide_deep, deep_fm")
    parser.add_argument("--workers", default="2,4", help="comma-separated trainer counts")
    parser.add_argument(
        "--sizes", default="1,2,4,8", help="table sizes in budgets (each run where <= trainers)"
    )
    parser.add_argument("--contenders", default="replicated,sharded,ps")
    parser.add_argument("--ps-workers", default="2,4", help="trainer counts the peer runs at")
    parser.add_argument("--buckets", type=int, default=8192, help="buckets per id column at 1x the budget")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--steps", type=int, default=150, help="measured steps (a multiple of 10)")
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256, help="rows per trainer and step")
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument(
        "--ps-steps-per-execution", type=int, default=1, help="the peer's steps per call on a worker (Keras)"
    )
    parser.add_argument("--rows", type=int, default=400_000, help="training rows")
    parser.add_argument("--data", help="folder for the data files (default: a temporary one)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one run may take")
    parser.add_argument("--json", help="also write every run's figures to this file")
    parser.add_argument(
        "--to-loss",
        type=float,
        help="time to a held-out loss instead: sharded and the peer train until their held-out "
        "loss is at most this, at each learning rate of --lr-grid",
    )
    parser.add_argument("--lr-grid", default="0.05,0.1,0.2", help="learning rates of the --to-loss runs")
    parser.add_argument("--eval-every", type=int, default=50, help="--to-loss: steps between evaluations")
    parser.add_argument("--max-steps", type=int, default=1500, help="--to-loss: where a run gives up")
    args = parser.parse_args()
    if args.steps % LOG_EVERY or args.warmup_steps % LOG_EVERY or args.eval_every % LOG_EVERY:
        sys.exit(f"--steps, --warmup-steps and --eval-every must be multiples of {LOG_EVERY}")
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # executors too, not the outward address
    contenders = args.contenders.split(",")
    unknown = set(contenders) - {"replicated", "sharded", "ps"}
    if unknown:
        sys.exit(f"unknown contenders: {sorted(unknown)}")
    if "ps" in contenders:
        try:
            import tf_keras  # noqa: F401
        except ImportError:
            sys.exit("tf-keras is missing: pip install --no-deps -r tests/requirements-nodeps.txt")
    models = args.model.split(",")
    sizes = [int(k) for k in args.sizes.split(",")]
    ps_workers = {int(n) for n in args.ps_workers.split(",")}
    budget = table_bytes(args.buckets, args.dim)
    results: list[tuple[Job, dict[str, Any]]] = []
    refusals: dict[tuple, str] = {}
    ps_conf = {"spark.executorEnv.TF_USE_LEGACY_KERAS": "1"}
    began = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-sharded-") as tmp:
        data = Path(args.data or tmp)
        train, held_out = write_data(args.rows, data)

        def job(
            model: str, workers: int, size: int, placement: str, learning_rate: float | None = None
        ) -> Job:
            scratch = tempfile.mkdtemp(prefix=f"{placement}-{workers}-{size}-", dir=tmp)
            return Job(
                model=model,
                workers=workers,
                size=size,
                buckets=size * args.buckets,
                dim=args.dim,
                steps=args.steps,
                warmup=args.warmup_steps,
                batch=args.batch,
                learning_rate=args.learning_rate if learning_rate is None else learning_rate,
                placement=placement,
                budget=budget if placement == "sharded" else None,
                ps_steps_per_execution=args.ps_steps_per_execution,
                train=train,
                eval=held_out,
                scratch=scratch,
                target_loss=args.to_loss,
                eval_every=args.eval_every,
                max_steps=args.max_steps,
            )

        def record(j: Job, run: Any, spark: Any) -> None:
            label = f"{j.model}: {j.placement}, {j.workers} trainers, tables {j.size} x budget"
            print(f"{label} ...", file=sys.stderr, flush=True)
            try:
                result = run(spark, j, args.timeout)
            except Exception as e:  # one failed run must not lose the others' figures
                print(f"  FAILED: {type(e).__name__}: {str(e)[:1000]}", file=sys.stderr, flush=True)
                print(f"\n{label} failed: {type(e).__name__}")
                return
            print(f"  {json.dumps(result)}", file=sys.stderr, flush=True)
            results.append((j, result))

        if args.to_loss is not None:
            # Sharded against the peer, each at every learning rate of the grid, at the largest size.
            rates = [float(r) for r in args.lr_grid.split(",")]
            for workers in (int(n) for n in args.workers.split(",")):
                size = max(k for k in sizes if k <= workers)
                with spark_session(f"bench-sharded-{workers}", workers, cores=1) as spark:
                    for model in models:
                        for rate in rates:
                            record(job(model, workers, size, "sharded", rate), run_sparktrain, spark)
                if "ps" in contenders:
                    cores = -(-(2 * workers + 1) // workers)
                    with spark_session(f"bench-sharded-ps-{workers}", workers, cores, ps_conf) as spark:
                        for model in models:
                            for rate in rates:
                                record(job(model, workers, size, "ps", rate), run_ps, spark)
            print_to_loss(results, args.to_loss)
        for workers in (int(n) for n in args.workers.split(",") if args.to_loss is None):
            fitting = [k for k in sizes if k <= workers]
            with spark_session(f"bench-sharded-{workers}", workers, cores=1) as spark:
                for model in models:
                    for size in fitting:
                        for placement in ("replicated", "sharded"):
                            if placement not in contenders:
                                continue
                            j = job(model, workers, size, placement)
                            if placement == "replicated" and size > 1:
                                try:
                                    message = refusal(dataclasses.replace(j, budget=budget))
                                except Exception as e:  # the check must not lose the runs' figures
                                    message = f"the check itself failed: {type(e).__name__}: {e}"
                                if message:
                                    refusals[(model, size)] = message
                            record(j, run_sparktrain, spark)
            if "ps" in contenders and workers in ps_workers and fitting:
                cores = -(-(2 * workers + 1) // workers)
                with spark_session(f"bench-sharded-ps-{workers}", workers, cores, ps_conf) as spark:
                    for model in models:
                        record(job(model, workers, max(fitting), "ps"), run_ps, spark)
    if args.to_loss is None:
        print_tables(results, budget, refusals)
    print(
        f"\n{args.rows:,} training rows and {EVAL_ROWS:,} held-out rows in {FILES} files each; "
        f"{args.warmup_steps} warm-up and {args.steps} measured steps of {args.batch} rows per trainer; "
        f"dim {args.dim}, tower {'-'.join(map(str, HIDDEN))}, Adagrad {args.learning_rate}; "
        f"{time.time() - began:,.0f} s in all"
    )
    if args.json:
        everything = [{**dataclasses.asdict(j), **r} for j, r in results]
        Path(args.json).write_text(json.dumps(everything, indent=1) + "\n")


if __name__ == "__main__":
    main()
