"""Synchronous data-parallel training on sparktrain's Rust engine (candle).

Inside ``Cluster.run``, ``ctx.trainer(...)`` gives each trainer a :class:`Trainer` whose
``fit`` trains together with every other trainer: gradients are averaged over the ring each
step, and the chief writes checkpoints, TensorBoard event files and the exported model.
:func:`train` runs such a job from the driver in one call; :func:`sparktrain.predict` scores a
DataFrame with the exported model.

Models: ``"logistic_regression"``, ``"mlp"``, ``"wide_deep"`` and ``"deep_fm"``. Optimizers:
``"sgd"``, ``"momentum"``, ``"adam"``, ``"adamw"``, ``"adagrad"`` and ``"ftrl"``, plus
``wide_optimizer`` for the wide part of Wide&Deep and DeepFM (``"ftrl"``, as Keras's
``WideDeepModel`` trains its linear part).

Input: a path (a folder, file or glob of TFRecord or Parquet files, on any storage URL), split
among the trainers by whole files (``sharding="static"``) or handed out file by file by the
driver (``sharding="dynamic"``: fast trainers read more); or, with
``Cluster.run(..., input_mode="spark", data=df)``, each trainer's partition of the DataFrame
(``data=None``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from sparktrain.errors import InvalidArgumentError

if TYPE_CHECKING:
    from sparktrain._native import Input
    from sparktrain._native import Trainer as NativeTrainer
    from sparktrain.cluster.context import TrainerContext

#: Models the engine builds.
MODELS = ("logistic_regression", "mlp", "wide_deep", "deep_fm")
#: Optimizers, and their default learning rates.
LEARNING_RATES = {"sgd": 0.01, "momentum": 0.01, "adam": 0.001, "adamw": 0.001, "adagrad": 0.01, "ftrl": 0.05}
#: Ids a categorical column is hashed into when the feature spec is inferred.
DEFAULT_BUCKETS = 10_000

_RULE_HYPERPARAMETERS = (
    "momentum",
    "nesterov",
    "weight_decay",
    "beta1",
    "beta2",
    "eps",
    "l1",
    "l2",
    "initial_accumulator",
)


@dataclass(frozen=True)
class FeatureSpec:
    """Which columns feed the model, and how.

    ``dense`` columns (any numeric type) are float values; ``categorical`` columns (integers,
    strings or bytes) are hashed into a number of ids each (``{"shop": 1000}``); ``crossed``
    hashes tuples of columns together (``[(("shop", "city"), 10000)]``); ``label`` is 0/1 for
    binary models or a class id."""

    dense: tuple[str, ...] = ()
    categorical: tuple[tuple[str, int], ...] = ()
    crossed: tuple[tuple[tuple[str, ...], int], ...] = ()
    label: str = "label"

    @classmethod
    def of(cls, value: FeatureSpec | Mapping[str, Any]) -> FeatureSpec:
        """A spec from itself or a dict with the same keys."""
        if isinstance(value, FeatureSpec):
            return value
        unknown = set(value) - {"dense", "categorical", "crossed", "label"}
        if unknown:
            raise InvalidArgumentError(f"unknown feature spec keys {sorted(unknown)}")
        categorical = value.get("categorical", ())
        pairs = categorical.items() if isinstance(categorical, Mapping) else categorical
        return cls(
            dense=tuple(value.get("dense", ())),
            categorical=tuple((str(n), int(b)) for n, b in pairs),
            crossed=tuple((tuple(names), int(b)) for names, b in value.get("crossed", ())),
            label=str(value.get("label", "label")),
        )

    def to_json(self) -> str:
        """The engine's JSON form."""
        return json.dumps(
            {
                "dense": list(self.dense),
                "categorical": [{"name": n, "buckets": b} for n, b in self.categorical],
                "crossed": [{"names": list(n), "buckets": b} for n, b in self.crossed],
                "label": self.label,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> FeatureSpec:
        """The spec from the engine's JSON form."""
        d = json.loads(text)
        return cls(
            dense=tuple(d["dense"]),
            categorical=tuple((c["name"], c["buckets"]) for c in d["categorical"]),
            crossed=tuple((tuple(c["names"]), c["buckets"]) for c in d["crossed"]),
            label=d["label"],
        )


@dataclass(frozen=True)
class Metrics:
    """An evaluation over every trainer's share: the mean loss, the accuracy (threshold 0.5,
    or the largest logit) and, for binary models, the AUC."""

    examples: int
    loss: float
    accuracy: float
    auc: float | None

    @classmethod
    def _of(cls, d: Mapping[str, Any]) -> Metrics:
        return cls(examples=d["examples"], loss=d["loss"], accuracy=d["accuracy"], auc=d.get("auc"))


@dataclass(frozen=True)
class FitResult:
    """What ``fit`` did. ``steps`` counts every step of the training (a resumed run counts
    the earlier ones), ``new_steps`` those of this call; ``examples_per_sec`` covers all
    trainers; ``loss`` is the mean training loss of the last progress window; ``history``
    holds the progress lines (``step``, ``epoch``, ``loss``, ``examples_per_sec``,
    ``learning_rate``, ``wall_time``) and ``evaluations`` ``(step, Metrics)`` pairs;
    ``first_step_at`` is the wall time (``time.time()``) when this call's first step ended."""

    steps: int
    new_steps: int
    examples: int
    seconds: float
    examples_per_sec: float
    epochs: int
    loss: float | None
    resumed_from: int | None
    history: list[dict[str, float]] = field(default_factory=list)
    evaluations: list[tuple[int, Metrics]] = field(default_factory=list)
    checkpoint: str | None = None
    first_step_at: float | None = None

    @classmethod
    def _of(cls, d: Mapping[str, Any]) -> FitResult:
        evaluations = [(e["step"], Metrics._of(e["metrics"])) for e in d["evaluations"]]
        fields = {k: v for k, v in d.items() if k != "evaluations"}
        return cls(**fields, evaluations=evaluations)

    @property
    def metrics(self) -> Metrics | None:
        """The last evaluation, if any."""
        return self.evaluations[-1][1] if self.evaluations else None


def _rule(
    name: str | Mapping[str, Any], learning_rate: float | None, hyper: Mapping[str, Any]
) -> dict[str, Any]:
    """The engine's JSON form of an update rule."""
    if isinstance(name, Mapping):
        spec = dict(name)
        name = str(spec.pop("name"))
        learning_rate = spec.pop("learning_rate", learning_rate)
        hyper = {**hyper, **spec}
    if name not in LEARNING_RATES:
        raise InvalidArgumentError(f"optimizer {name!r}: use one of {sorted(LEARNING_RATES)}")
    lr = float(LEARNING_RATES[name] if learning_rate is None else learning_rate)
    h = {k: float(v) for k, v in hyper.items() if k != "nesterov"}
    if name in ("sgd", "momentum"):
        momentum = h.get("momentum", 0.9 if name == "momentum" else 0.0)
        return {
            "name": "sgd",
            "lr": lr,
            "momentum": momentum,
            "nesterov": bool(hyper.get("nesterov", False)),
            "weight_decay": h.get("weight_decay", 0.0),
        }
    if name in ("adam", "adamw"):
        return {
            "name": "adam",
            "lr": lr,
            "beta1": h.get("beta1", 0.9),
            "beta2": h.get("beta2", 0.999),
            "eps": h.get("eps", 1e-8),
            "weight_decay": h.get("weight_decay", 0.01 if name == "adamw" else 0.0),
            "decoupled": name == "adamw",
        }
    if name == "adagrad":
        return {
            "name": "adagrad",
            "lr": lr,
            "initial_accumulator": h.get("initial_accumulator", 0.1),
            "eps": h.get("eps", 1e-7),
        }
    return {
        "name": "ftrl",
        "lr": lr,
        "l1": h.get("l1", 0.0),
        "l2": h.get("l2", 0.0),
        "initial_accumulator": h.get("initial_accumulator", 0.1),
    }


def _model(name: str, hidden: Sequence[int] | None, dim: int, classes: int) -> dict[str, Any]:
    if name not in MODELS:
        raise InvalidArgumentError(f"model {name!r}: use one of {list(MODELS)}")
    if name == "logistic_regression":
        return {"kind": name, "outputs": classes}
    if name == "mlp":
        return {"kind": name, "hidden": list(hidden or (256, 256)), "outputs": classes}
    if classes != 1:
        raise InvalidArgumentError(
            f"{name} is a binary model; classes={classes} needs 'mlp' or 'logistic_regression'"
        )
    return {"kind": name, "dim": dim, "hidden": list(hidden or (256, 128))}


class Trainer:
    """One trainer's side of synchronous training; build it with ``ctx.trainer(...)`` inside
    ``Cluster.run`` (every trainer must make the same calls), or with ``ctx=None`` to train
    alone in this process.

    ``features`` is a :class:`FeatureSpec` (or dict); when left out it is inferred from the
    data's schema: ``label`` is the label, floating-point columns are dense, integer and string
    columns categorical with ``buckets`` ids each. ``classes`` > 1 trains a softmax model.

    Hyperparameters: ``optimizer`` (a name or a dict with ``name`` and its settings),
    ``learning_rate``, ``momentum``, ``nesterov``, ``weight_decay``, ``beta1``, ``beta2``,
    ``eps``, ``l1``, ``l2``, ``initial_accumulator``; ``wide_optimizer`` and
    ``wide_learning_rate`` for the wide part; ``sparse_tables`` (default True: update only
    the embedding rows a step touched, the "lazy" form for momentum and Adam). ``hidden`` and
    ``dim`` shape the model.

    The chief checkpoints into ``model_dir`` every ``checkpoint_every`` steps and at the end
    (``keep_checkpoints`` kept, shards of at most ``max_shard_bytes``), and training resumes
    from the latest checkpoint there. ``tensorboard_dir`` receives event files; progress lines
    come every ``log_every`` steps and go to the driver through ``ctx.report``.

    ``device="cuda"`` (or ``"cuda:<n>"``) computes on a GPU the trainer sees (Spark's GPU
    resources set ``CUDA_VISIBLE_DEVICES``); it needs a build with the ``cuda`` feature.
    ``threads`` splits large optimizer updates across threads.
    """

    def __init__(
        self,
        ctx: TrainerContext | None = None,
        *,
        model: str = "mlp",
        features: FeatureSpec | Mapping[str, Any] | None = None,
        label: str = "label",
        buckets: int = DEFAULT_BUCKETS,
        classes: int = 1,
        hidden: Sequence[int] | None = None,
        dim: int = 8,
        optimizer: str | Mapping[str, Any] = "adam",
        learning_rate: float | None = None,
        wide_optimizer: str | Mapping[str, Any] | None = None,
        wide_learning_rate: float | None = None,
        sparse_tables: bool = True,
        batch_size: int = 256,
        shuffle_buffer: int = 10_000,
        prefetch: int = 4,
        seed: int = 0,
        model_dir: str | None = None,
        checkpoint_every: int | None = None,
        keep_checkpoints: int = 3,
        max_shard_bytes: int = 1 << 30,
        tensorboard_dir: str | None = None,
        log_every: int = 100,
        threads: int = 1,
        device: str = "cpu",
        **hyperparameters: Any,
    ) -> None:
        unknown = set(hyperparameters) - set(_RULE_HYPERPARAMETERS)
        if unknown:
            raise InvalidArgumentError(f"unknown training arguments {sorted(unknown)}")
        if classes < 1:
            raise InvalidArgumentError(f"classes={classes} must be at least 1")
        resolve = ctx.absolute_path if ctx is not None else (lambda p: p)
        self._ctx = ctx
        self._features = FeatureSpec.of(features) if features is not None else None
        self._label = label
        self._buckets = buckets
        self._config = {
            "model": _model(model, hidden, dim, classes),
            "loss": "softmax_cross_entropy" if classes > 1 else "binary_cross_entropy",
            "optimizer": {
                "rule": _rule(optimizer, learning_rate, hyperparameters),
                "wide": None if wide_optimizer is None else _rule(wide_optimizer, wide_learning_rate, {}),
                "threads": threads,
                "sparse_tables": sparse_tables,
            },
            "batch_size": batch_size,
            "shuffle_buffer": shuffle_buffer,
            "prefetch": prefetch,
            "seed": seed,
            "model_dir": resolve(model_dir) if model_dir else None,
            "checkpoint_every": checkpoint_every,
            "keep_checkpoints": keep_checkpoints,
            "max_shard_bytes": max_shard_bytes,
            "tensorboard_dir": resolve(tensorboard_dir) if tensorboard_dir else None,
            "log_every": log_every,
            "device": device,
        }
        self._native: NativeTrainer | None = None

    @property
    def rank(self) -> int:
        return self._ctx.rank if self._ctx is not None else 0

    @property
    def num_workers(self) -> int:
        return self._ctx.num_workers if self._ctx is not None else 1

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def features(self) -> FeatureSpec | None:
        """The feature spec, once known (given, or inferred at the first ``fit``)."""
        return self._features

    def _input(self, data: str | None, sharding: str = "static") -> Input:
        from sparktrain._native import Input

        c = self._config
        options = (c["batch_size"], c["shuffle_buffer"], c["seed"], c["prefetch"])
        if data is None:
            if self._ctx is None or self._ctx.feed_path is None:
                raise InvalidArgumentError(
                    "data=None reads the Spark feed: use Cluster.run(..., input_mode='spark', data=df)"
                )
            return Input.feed(self._ctx.feed_path, self.rank, options)
        path = self._ctx.absolute_path(data) if self._ctx is not None else data
        if sharding == "dynamic":
            if self._ctx is None:
                return Input.files(path, 1, 0, options)
            return Input.queued(path, self._ctx._control(), self.rank, options)
        if sharding != "static":
            raise InvalidArgumentError(f"sharding={sharding!r}: use 'static' or 'dynamic'")
        return Input.files(path, self.num_workers, self.rank, options)

    def _trainer(self, input: Input) -> NativeTrainer:
        """The engine's trainer, built on first use (the feature spec may need the data)."""
        if self._native is None:
            from sparktrain._native import Trainer as NativeTrainer
            from sparktrain._native import infer_features

            if self._features is None:
                self._features = FeatureSpec.from_json(
                    infer_features(input.schema, self._label, self._buckets)
                )
            ring = self._ctx._communicator() if self._ctx is not None and self.num_workers > 1 else None
            self._native = NativeTrainer(json.dumps(self._config), self._features.to_json(), ring)
        return self._native

    def _report(self, line: str) -> None:
        if self._ctx is not None:
            d = json.loads(line)
            self._ctx.report(
                step=d["step"], loss=d["loss"], examples_per_sec=d["examples_per_sec"], epoch=d["epoch"]
            )

    def fit(
        self,
        data: str | None = None,
        *,
        epochs: int = 1,
        steps: int | None = None,
        eval_data: str | None = None,
        eval_every: int | None = None,
        sharding: str = "static",
    ) -> FitResult:
        """Trains for ``epochs`` passes over ``data`` (counted from the start of training, so
        a resumed run finishes the remaining ones), or until ``steps`` steps in all;
        evaluates on ``eval_data`` every ``eval_every`` steps and at the end."""
        if epochs < 0 or (steps is not None and steps < 0):
            raise InvalidArgumentError(f"epochs={epochs} and steps={steps} must not be negative")
        input = self._input(data, sharding)
        trainer = self._trainer(input)
        evaluation = self._input(eval_data) if eval_data is not None else None
        options = json.dumps({"epochs": epochs, "max_steps": steps, "eval_every": eval_every})
        summary = trainer.fit(input, options, evaluation, self._report)
        return FitResult._of(json.loads(summary))

    def evaluate(self, data: str | None = None) -> Metrics:
        """Loss, accuracy and AUC over ``data``, every trainer evaluating its share."""
        input = self._input(data)
        return Metrics._of(json.loads(self._trainer(input).evaluate(input)))

    def export(self, export_dir: str) -> str:
        """The chief writes the model into ``export_dir`` (``model.json`` and
        ``model.safetensors``), which :func:`sparktrain.predict` loads; returns the folder."""
        if self._native is None:
            raise InvalidArgumentError("export() needs a trained model: call fit() first")
        path = self._ctx.absolute_path(export_dir) if self._ctx is not None else export_dir
        self._native.export(path)
        return path

    def save_checkpoint(self) -> str | None:
        """The chief writes a checkpoint now; its folder (None on other trainers)."""
        if self._native is None:
            raise InvalidArgumentError("save_checkpoint() needs a model: call fit() first")
        return self._native.save_checkpoint()

    def weights(self) -> Any:
        """The weights, flat in parameter-name order, as a NumPy float32 array."""
        if self._native is None:
            raise InvalidArgumentError("weights() needs a model: call fit() first")
        return self._native.weights().to_numpy(zero_copy_only=False)

    def close(self) -> None:
        """Closes the TensorBoard event file."""
        if self._native is not None:
            self._native.close()


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` did: the chief's ``fit`` result, its final evaluation (if
    ``eval_data`` was given) and the exported model's folder (if any)."""

    fit: FitResult
    metrics: Metrics | None
    export_dir: str | None


def _train_main(args: dict[str, Any], ctx: TrainerContext) -> dict[str, Any] | None:
    """The trainers' function of :func:`train`."""
    trainer = ctx.trainer(**args["trainer"])
    result = trainer.fit(args["data"], **args["fit"])
    export_dir = trainer.export(args["export_dir"]) if args["export_dir"] else None
    trainer.close()
    if not ctx.is_chief:
        return None
    return {"fit": result, "export_dir": export_dir}


def train(
    spark: Any,
    data: Any,
    model: str = "wide_deep",
    features: FeatureSpec | Mapping[str, Any] | None = None,
    num_workers: int = 2,
    epochs: int = 1,
    batch_size: int = 256,
    model_dir: str | None = None,
    eval_data: str | None = None,
    tensorboard_dir: str | None = None,
    *,
    steps: int | None = None,
    eval_every: int | None = None,
    export_dir: str | None = None,
    sharding: str = "static",
    log: bool = True,
    env: dict[str, str] | None = None,
    **hyperparameters: Any,
) -> TrainResult:
    """Trains ``model`` on ``num_workers`` Spark task slots in sync and returns the final
    figures and the exported model's folder.

    ``data`` is a path (TFRecord or Parquet files on any storage URL) or a DataFrame (each
    trainer then reads one partition of it). The chief checkpoints into ``model_dir`` (and
    training resumes from there), writes TensorBoard files into ``tensorboard_dir``, evaluates
    on ``eval_data`` and exports the model to ``export_dir`` (default ``<model_dir>/export``).
    Every other keyword argument goes to :class:`Trainer` (``optimizer``, ``learning_rate``,
    ``hidden``, ``label``, ``buckets``, ``checkpoint_every``...)."""
    from sparktrain.cluster import Cluster

    if export_dir is None and model_dir is not None:
        export_dir = model_dir.rstrip("/") + "/export"
    fed = not isinstance(data, str)
    if fed and sharding != "static":
        raise InvalidArgumentError("a DataFrame is split by partitions; sharding applies to files")
    args = {
        "trainer": {
            "model": model,
            "features": None if features is None else asdict(FeatureSpec.of(features)),
            "batch_size": batch_size,
            "model_dir": model_dir,
            "tensorboard_dir": tensorboard_dir,
            **hyperparameters,
        },
        "data": None if fed else data,
        "fit": {
            "epochs": epochs,
            "steps": steps,
            "eval_data": eval_data,
            "eval_every": eval_every,
            "sharding": sharding,
        },
        "export_dir": export_dir,
    }
    cluster = Cluster.run(
        spark,
        _train_main,
        args,
        num_workers,
        input_mode="spark" if fed else "files",
        data=data if fed else None,
        work=data if sharding == "dynamic" else None,
        env=env,
        log=log,
    )
    with cluster:
        outcome = cluster.wait()
    fit: FitResult = outcome["fit"]
    return TrainResult(fit=fit, metrics=fit.metrics, export_dir=outcome["export_dir"])
