"""The trainer's side of synchronous training: :class:`Trainer`, which runs in each trainer
process (``ctx.trainer(...)`` inside ``Cluster.run``) or alone in this one (``ctx=None``).

Every default and every check of the configuration lives in the engine
(:class:`sparktrain._native.TrainerConfig`); the signature below shows the engine's defaults,
read from it when this module loads."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from typing import TYPE_CHECKING, Any

from sparktrain import _checks, _native
from sparktrain.errors import InvalidArgumentError
from sparktrain.training import callbacks as _callbacks
from sparktrain.training import gpu as _gpu
from sparktrain.training.results import FeatureSpec, FitResult, Metrics, log_line

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from sparktrain.cluster.callbacks import JobCallback
    from sparktrain.cluster.trainer.context import TrainerContext

#: The engine's configuration with every default.
DEFAULTS = _native.TrainerConfig()

#: How the input is split among the trainers.
SHARDINGS = ("static", "dynamic")

#: What ``fit``'s ``on_eval`` is called with on the chief: the step and the evaluation's
#: figures; a true return value stops training on every trainer.
EvalCallback = Callable[[int, Metrics], object]


def _json(parameter: str, value: Mapping[str, Any] | None) -> str | None:
    """A dict setting as the JSON the engine reads (it checks the keys and values and names
    ``parameter`` in its errors)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _checks.refuse(parameter, value, "must be a dict")
    try:
        return json.dumps(dict(value))
    except (TypeError, ValueError) as e:
        raise _checks.refuse(parameter, value, f"cannot be read: {e}") from e


def _class_weights(value: Mapping[int, float] | Sequence[float] | None, classes: int) -> list[float] | None:
    """Keras's ``class_weight`` as one weight per class id: a dict leaves the classes it does
    not name at 1.0; a list gives every class's weight in order."""
    if value is None:
        return None
    count = 2 if classes == 1 else classes
    try:
        if isinstance(value, Mapping):
            weights = [1.0] * count
            for label, weight in value.items():
                index = _checks.integer("class_weight key", label, minimum=0)
                if index >= count:
                    raise _checks.refuse(
                        "class_weight", dict(value), f"class {index} is not among the {count} classes"
                    )
                weights[index] = float(weight)
            return weights
        given: object = value  # typed as a sequence, but users pass anything
        if isinstance(given, str) or not isinstance(given, Sequence):
            raise _checks.refuse("class_weight", value, "must be a dict {class: weight} or a list")
        return [float(w) for w in given]
    except (TypeError, ValueError) as e:
        raise _checks.refuse("class_weight", value, f"weights must be numbers: {e}") from e


def early_stopping_json(
    early_stopping: Mapping[str, Any] | None, config: _native.TrainerConfig
) -> str | None:
    """``early_stopping`` checked against ``config`` (``monitor``: ``loss``, ``accuracy`` or
    ``auc``, which the model must measure; ``patience``, ``min_delta``, ``restore_best``), as
    the JSON the engine reads."""
    text = _json("early_stopping", early_stopping)
    if text is not None:
        _native.check_early_stopping(text, config)
    return text


def _rule(
    parameter: str,
    optimizer: str | Mapping[str, Any],
    learning_rate: float | None,
    settings: Mapping[str, Any],
) -> tuple[str, float | None, dict[str, float]]:
    """``(name, learning rate, settings)`` of an update rule given by name or as a dict with
    ``name``, ``learning_rate`` and its settings; ``parameter`` names it in errors."""
    rate = "learning_rate" if parameter == "optimizer" else "wide_learning_rate"
    if isinstance(optimizer, Mapping):
        spec = dict(optimizer)
        if "name" not in spec:
            raise InvalidArgumentError(f"{parameter}={optimizer!r} needs a 'name'")
        name = spec.pop("name")
        if "learning_rate" in spec:
            rate, learning_rate = f"{parameter}['learning_rate']", spec.pop("learning_rate")
        settings = {**settings, **spec}
    else:
        name = optimizer
    _checks.text(parameter, name)
    # A number, not text that looks like one; a setting may be a bool (nesterov=True).
    given: object = learning_rate  # typed as a float, but users pass anything
    if given is not None and (isinstance(given, bool) or not isinstance(given, Real)):
        raise _checks.refuse(rate, given, "must be a number")
    for key, value in settings.items():
        if not isinstance(value, Real):
            raise _checks.refuse(key, value, "must be a number")
    return (
        str(name),
        None if learning_rate is None else float(learning_rate),
        {k: float(v) for k, v in settings.items()},
    )


#: The models that read the dense columns alone, and those that also embed the others.
DENSE_ONLY_MODELS = ("logistic_regression", "mlp")
EMBEDDING_MODELS = ("wide_deep", "deep_fm", "dcn")


def _embedded_columns(spec: FeatureSpec) -> list[str]:
    """The columns of ``spec`` that only an embedding model reads."""
    crossed = [" x ".join(names) for names, _ in spec.crossed]
    return [n for n, _ in spec.categorical] + crossed + [m[0] for m in spec.multi_hot]


class Trainer:
    """One trainer's side of synchronous training; build it with ``ctx.trainer(...)`` inside
    ``Cluster.run`` (every trainer must make the same calls), or with ``ctx=None`` to train
    alone in this process. The arguments are checked here, so a bad one fails before any
    data is read.

    ``features`` is a :class:`FeatureSpec` (or dict); when left out it is inferred from the
    data's schema: ``label`` (``"label"`` when None) is the label, floating-point columns are
    dense, integer and string columns categorical with ``buckets`` ids each. With ``features``
    given, the spec's label is the label, and a different ``label`` is refused. ``classes`` > 1
    trains a softmax model.

    ``loss`` is ``binary_cross_entropy`` (the default with one output),
    ``softmax_cross_entropy`` (the default with ``classes`` > 1) or ``mean_squared_error``
    (regression: the label is any number, the score the model's output). ``class_weight``
    weighs each example's loss by its class, as in Keras (``{1: 5.0}``, or a list).

    Hyperparameters: ``optimizer`` (a name or a dict with ``name`` and its settings),
    ``learning_rate`` (the optimizer's default when None), and the optimizer's settings by
    name: ``momentum``, ``nesterov``, ``weight_decay``, ``beta1``, ``beta2``, ``eps``, ``l1``,
    ``l2``, ``initial_accumulator``; ``wide_optimizer`` and ``wide_learning_rate`` for the
    wide part; ``sparse_tables`` (update only the embedding rows a step touched, the "lazy"
    form for momentum and Adam). ``hidden`` and ``dim`` shape the model (None: the model's
    own default); ``cross_layers`` sets DCN's cross layers.

    Every step's gradient can be shaped three ways, the same on every trainer:
    ``lr_schedule`` multiplies the step size (``{"name": "cosine", "steps": 10000, "alpha":
    0.0, "warmup_steps": 500}``; also ``"step"`` and ``"exponential"`` with ``every`` and
    ``rate``, and ``"constant"`` for a warm-up alone); ``regularization`` adds L1/L2 penalties
    per group (``{"kernel": {"l2": 1e-4}, "bias": {...}, "embedding": {"l1": 1e-6}}``);
    ``clip_norm`` clips the whole gradient to that global L2 norm.

    ``gradient_wire`` is the dense layers' gradients' format in each step's all-reduce:
    ``"f32"`` (the default: exact, the weights of one trainer with the global batch), or
    ``"bf16"`` / ``"f16"``, which halve those bytes where the links are the bottleneck. Sums
    still accumulate in float32 and every trainer ends each step with the same weights, but
    each value that travels is rounded (bf16: 8 significant bits and float32's range; f16: 11
    bits, at most 65504), so the weights take another path, to about the same loss. The
    example count, the loss and the embedding tables' rows always travel as float32.
    With several trainers on the CPU, ``overlap_gradients`` (on by default) sends the dense
    layers' gradients in buckets of about 1 MiB as the backward pass reaches them, last layer
    first, so the link works while the layers below are still differentiated, as DDP does;
    ``False`` sends them in one call after the backward pass. The gradients are the same;
    from three trainers on, or with a 16-bit wire, the sums group differently (the same on
    every trainer).

    The chief checkpoints into ``model_dir`` every ``checkpoint_every`` steps and at the end
    (``keep_checkpoints`` kept, shards of at most ``max_shard_bytes``), and training resumes
    from the latest checkpoint there. ``tensorboard_dir`` receives event files; progress lines
    come every ``log_every`` steps and go to the driver through ``ctx.report``.

    Embedding tables too large for one trainer are sharded: each trainer holds the rows (and
    their optimizer state) of a fixed share of the ids, and a step sends ids, rows and
    gradients to and from their owners. ``shard_tables`` is ``"auto"`` (shard when the tables
    with their optimizer state exceed ``table_budget_bytes`` on one trainer), ``"on"`` /
    ``True`` or ``"off"`` / ``False``; ``table_budget_bytes`` defaults to half the memory a
    trainer may use. Tables over the budget where they would live are refused before training
    (:class:`~sparktrain.errors.InvalidArgumentError` naming the size, the budget and the
    setting). With sharded tables every trainer takes part in ``save_checkpoint`` and
    ``export``, and writes its own rows.

    ``device="cuda"`` (or ``"cuda:<n>"``) computes on a GPU the trainer sees (Spark's GPU
    resources set ``CUDA_VISIBLE_DEVICES``); it needs the CUDA build (docs/deploy.md, "GPUs"),
    and a missing driver or library raises :class:`~sparktrain.errors.MissingDependencyError`
    naming its file. ``"auto"``, the default, is the task's GPU when Spark gave it one and the
    build has CUDA, and otherwise the CPU (outside Spark: the first GPU this process sees).
    On a GPU, embedding tables that are not sharded live on it with their optimizer state
    when they take at most half its memory, so a step gathers and updates their rows there;
    ``tables_on_device`` (``True`` / ``False``) decides instead. ``weights()`` and
    checkpoints copy them out. With the tables there, or none, a GPU also runs the variables'
    update with their optimizer state, so a step brings only its loss and gradient norm to
    the host (and the gradient for the ring, with several trainers); ``update_on_device``
    decides instead (``True`` needs the tables on the device, or none).
    ``threads`` splits large optimizer updates across threads.

    ``callbacks`` (:class:`~sparktrain.training.Callback`, such as
    :class:`sparktrain.tracking.MLflowCallback`) follow ``fit`` and ``export`` on the chief;
    ``ctx.trainer(...)`` gives the job's (``Cluster.run(..., callbacks=...)``).
    """

    def __init__(
        self,
        ctx: TrainerContext | None = None,
        *,
        model: str = DEFAULTS.model,
        features: FeatureSpec | Mapping[str, Any] | None = None,
        label: str | None = None,
        buckets: int = _native.DEFAULT_BUCKETS,
        classes: int = DEFAULTS.classes,
        hidden: Sequence[int] | None = None,
        dim: int | None = None,
        optimizer: str | Mapping[str, Any] = DEFAULTS.optimizer,
        learning_rate: float | None = None,
        wide_optimizer: str | Mapping[str, Any] | None = None,
        wide_learning_rate: float | None = None,
        sparse_tables: bool = DEFAULTS.sparse_tables,
        batch_size: int = DEFAULTS.batch_size,
        shuffle_buffer: int = DEFAULTS.shuffle_buffer,
        prefetch: int = DEFAULTS.prefetch,
        seed: int = DEFAULTS.seed,
        model_dir: str | None = None,
        checkpoint_every: int | None = None,
        keep_checkpoints: int = DEFAULTS.keep_checkpoints,
        max_shard_bytes: int = DEFAULTS.max_shard_bytes,
        tensorboard_dir: str | None = None,
        log_every: int = DEFAULTS.log_every,
        threads: int = DEFAULTS.threads,
        device: str = DEFAULTS.device,
        loss: str | None = None,
        class_weight: Mapping[int, float] | Sequence[float] | None = None,
        lr_schedule: Mapping[str, Any] | None = None,
        clip_norm: float | None = None,
        regularization: Mapping[str, Any] | None = None,
        cross_layers: int | None = None,
        shard_tables: bool | str = DEFAULTS.shard_tables,
        table_budget_bytes: int | None = DEFAULTS.table_budget_bytes,
        tables_on_device: bool | None = DEFAULTS.tables_on_device,
        gradient_wire: str = DEFAULTS.gradient_wire,
        overlap_gradients: bool = DEFAULTS.overlap_gradients,
        update_on_device: bool | None = DEFAULTS.update_on_device,
        callbacks: Sequence[JobCallback] | None = None,
        **hyperparameters: float,
    ) -> None:
        unknown = set(hyperparameters) - set(_native.HYPERPARAMETERS)
        if unknown:
            raise InvalidArgumentError(f"unknown training arguments {sorted(unknown)}")
        # Counts are checked here so the error names the parameter; the engine checks the
        # rest (names, ranges that depend on each other) as it builds its configuration.
        counts = {
            "batch_size": batch_size,
            "shuffle_buffer": shuffle_buffer,
            "prefetch": prefetch,
            "seed": seed,
            "keep_checkpoints": keep_checkpoints,
            "max_shard_bytes": max_shard_bytes,
            "log_every": log_every,
            "threads": threads,
        }
        for name, value in counts.items():
            _checks.integer(name, value, minimum=0)
        for name, value in {"classes": classes, "buckets": buckets}.items():
            _checks.integer(name, value, minimum=1)
        _checks.optional_integer("checkpoint_every", checkpoint_every, minimum=1)
        _checks.optional_integer("dim", dim, minimum=1)
        _checks.optional_integer("cross_layers", cross_layers, minimum=1)
        _checks.optional_integer("table_budget_bytes", table_budget_bytes, minimum=1)
        placements = {"tables_on_device": tables_on_device, "update_on_device": update_on_device}
        for name, setting in placements.items():
            if setting is not None:
                _checks.instance(name, setting, bool, "True, False or None")
        if clip_norm is not None:
            _checks.positive_number("clip_norm", clip_norm)
        _checks.text("gradient_wire", gradient_wire)
        _checks.instance("overlap_gradients", overlap_gradients, bool, "True or False")
        shape: object = hidden  # typed as a sequence, but users pass anything
        if shape is not None and (isinstance(shape, str) or not isinstance(shape, Sequence)):
            raise _checks.refuse("hidden", hidden, "must be a sequence of layer widths")
        for i, width in enumerate(hidden or ()):
            _checks.integer(f"hidden[{i}]", width, minimum=1)
        _checks.instance("sparse_tables", sparse_tables, bool, "True or False")
        for key, text in {"model": model, "device": device}.items():
            _checks.text(key, text)
        for key, folder in {"model_dir": model_dir, "tensorboard_dir": tensorboard_dir, "loss": loss}.items():
            _checks.optional_text(key, folder)
        resolve = ctx.absolute_path if ctx is not None else (lambda p: p)
        self._ctx = ctx
        self._features = FeatureSpec.of(features) if features is not None else None
        if self._features is not None and model in DENSE_ONLY_MODELS:
            embedded = _embedded_columns(self._features)
            if embedded:
                raise _checks.refuse(
                    "features",
                    features,
                    f"model={model!r} reads dense columns only; {', '.join(embedded)} "
                    f"would be left out: categorical, crossed and multi-hot columns feed "
                    f"{', '.join(repr(m) for m in EMBEDDING_MODELS)}",
                )
        if label is not None:
            _checks.text("label", label)
        if self._features is not None and label is not None and label != self._features.label:
            raise _checks.refuse(
                "label",
                label,
                f"features names the label {self._features.label!r}; name it in one place "
                "(FeatureSpec(label=...), or label= without features=)",
            )
        self._label = label if label is not None else "label"
        self._buckets = buckets
        try:
            self._config = _native.TrainerConfig(
                model=model,
                classes=classes,
                hidden=None if hidden is None else list(hidden),
                dim=dim,
                optimizer=_rule("optimizer", optimizer, learning_rate, hyperparameters),
                wide_optimizer=None
                if wide_optimizer is None
                else _rule("wide_optimizer", wide_optimizer, wide_learning_rate, {}),
                sparse_tables=sparse_tables,
                threads=threads,
                batch_size=batch_size,
                shuffle_buffer=shuffle_buffer,
                prefetch=prefetch,
                seed=seed,
                model_dir=resolve(model_dir) if model_dir else None,
                checkpoint_every=checkpoint_every,
                keep_checkpoints=keep_checkpoints,
                max_shard_bytes=max_shard_bytes,
                tensorboard_dir=resolve(tensorboard_dir) if tensorboard_dir else None,
                log_every=log_every,
                device=_gpu.resolve_device(device, ctx.gpus if ctx is not None else None),
                loss=loss,
                class_weight=_class_weights(class_weight, classes),
                lr_schedule=_json("lr_schedule", lr_schedule),
                clip_norm=None if clip_norm is None else float(clip_norm),
                regularization=_json("regularization", regularization),
                cross_layers=cross_layers,
                shard_tables=shard_tables,
                table_budget_bytes=table_budget_bytes,
                gradient_wire=gradient_wire,
                tables_on_device=tables_on_device,
                overlap_gradients=overlap_gradients,
                update_on_device=update_on_device,
            )
        except (OverflowError, TypeError) as e:
            # pyo3 refuses a negative count or a wrong type before the engine sees it.
            raise InvalidArgumentError(f"a training argument has the wrong type or sign: {e}") from e
        self._native: _native.Trainer | None = None
        #: (``time.monotonic()``, the ring's send-busy seconds) at the last progress report.
        self._busy_mark: tuple[float, float] | None = None
        self._callbacks = _callbacks.training_callbacks(callbacks)

    @property
    def config(self) -> _native.TrainerConfig:
        """The engine's configuration, every default filled in."""
        return self._config

    @property
    def rank(self) -> int:
        """This trainer's rank (0: the chief)."""
        return self._ctx.rank if self._ctx is not None else 0

    @property
    def num_workers(self) -> int:
        """How many trainers train together."""
        return self._ctx.num_workers if self._ctx is not None else 1

    @property
    def is_chief(self) -> bool:
        """Whether this trainer writes checkpoints, event files and the export."""
        return self.rank == 0

    @property
    def features(self) -> FeatureSpec | None:
        """The feature spec, once known (given, or inferred at the first ``fit``)."""
        return self._features

    @property
    def device(self) -> str:
        """Where the model computes: ``"cpu"`` or ``"cuda:<n>"`` once training has started (what
        ``"auto"`` chose), the device as asked until then."""
        return self._native.device if self._native is not None else self._config.device

    def _input(self, data: str | None, sharding: str = "static") -> _native.Input:
        if data is None:
            if self._ctx is None or self._ctx.feed_path is None:
                raise InvalidArgumentError(
                    "data=None reads the Spark feed: use Cluster.run(..., input_mode='spark', data=df)"
                )
            return _native.Input.feed(self._ctx.feed_path, self.rank, self._config)
        path = self._ctx.absolute_path(data) if self._ctx is not None else data
        if sharding == "dynamic" and self._ctx is not None:
            restarted = self._ctx.generation > 0
            return _native.Input.queued(path, self._ctx.control_client(), self.rank, self._config, restarted)
        return _native.Input.files(path, self.num_workers, self.rank, self._config)

    def _trainer(self, input: _native.Input) -> _native.Trainer:
        """The engine's trainer, built on first use (the feature spec may need the data)."""
        if self._native is None:
            if self._features is None:
                inferred = _native.infer_features(input.schema, self._label, self._buckets)
                self._features = FeatureSpec.from_native(inferred)
                embedded = _embedded_columns(self._features)
                if self._config.model in DENSE_ONLY_MODELS and embedded and self.is_chief:
                    _log.warning(
                        "model=%r reads the floating-point columns only: %s (not floats) are left "
                        "out; give features= to choose, or train %s on them",
                        self._config.model,
                        ", ".join(embedded),
                        " or ".join(repr(m) for m in EMBEDDING_MODELS),
                    )
            ring = self._ctx.communicator() if self._ctx is not None and self.num_workers > 1 else None
            # The job and its generation fence the checkpoints: once a restart's trainers write
            # model_dir, an older generation's chief cut off from the driver can no longer.
            job, generation = (self._ctx.job_id, self._ctx.generation) if self._ctx is not None else ("", 0)
            self._native = _native.Trainer(
                self._config, self._features.to_native(), ring, job=job, generation=generation
            )
            self._link_busy()  # the first mark
            self._after_restart(self._native)
        return self._native

    def _after_restart(self, native: _native.Trainer) -> None:
        """After a restart, tells the driver the step training resumed from (so it can count
        the steps redone) and adds a ``restarts`` scalar to TensorBoard."""
        if self._ctx is None or self._ctx.generation == 0:
            return
        native.scalar("restarts", float(self._ctx.generation))
        if self.is_chief:
            self._ctx.report(resumed_from=float(native.resumed_from or 0))

    def _link_busy(self) -> float | None:
        """The share of the time since the last call that this trainer's connection to the
        next rank had data in flight (None the first time, alone, or where the system does
        not say): the driver's step-time report compares it across trainers to name a host
        on a slow link (see :mod:`sparktrain.cluster.driver.stragglers`)."""
        if self._ctx is None or self.num_workers < 2:
            return None
        busy = self._ctx.communicator().send_busy_seconds()
        if busy is None:
            return None
        now = time.monotonic()
        mark, self._busy_mark = self._busy_mark, (now, busy)
        if mark is None or now <= mark[0]:
            return None
        return min(1.0, max(0.0, (busy - mark[1]) / (now - mark[0])))

    @property
    def step(self) -> int:
        """The steps trained so far (a trainer that resumed counts its checkpoint's)."""
        return self._native.progress.step if self._native is not None else 0

    @property
    def callbacks(self) -> tuple[_callbacks.Callback, ...]:
        """The training callbacks that follow ``fit`` and ``export`` on the chief."""
        return self._callbacks

    def _hook(self, hook: str, *args: Any) -> None:
        """Runs a training hook of every callback, on the chief."""
        if self.is_chief:
            _callbacks.call(self._callbacks, hook, self, *args)

    def _report(self, line: _native.LogLine) -> None:
        self._hook("on_log", log_line(line))
        if self._ctx is not None:
            busy = self._link_busy()
            extra = {} if busy is None else {"link_busy": busy}
            self._ctx.report(
                step=line.step,
                loss=line.loss,
                examples_per_sec=line.examples_per_sec,
                epoch=line.epoch,
                **extra,
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
        early_stopping: Mapping[str, Any] | None = None,
        on_eval: EvalCallback | None = None,
    ) -> FitResult:
        """Trains for ``epochs`` passes over ``data`` (counted from the start of training, so
        a resumed run finishes the remaining ones), or until ``steps`` steps in all;
        evaluates on ``eval_data`` every ``eval_every`` steps and at the end.

        ``early_stopping`` stops when an evaluation metric stops improving, as Keras's
        ``EarlyStopping``: ``{"monitor": "auc", "patience": 2, "min_delta": 0.0,
        "restore_best": True}`` (``monitor`` is ``loss``, ``accuracy`` or ``auc``;
        ``patience`` counts evaluations). The chief keeps the best model's checkpoint in
        ``<model_dir>/best``, and with ``restore_best`` training ends with its weights, so
        ``export`` writes the best model. ``on_eval(step, metrics)`` runs on the chief at every
        evaluation; a true return value stops every trainer there."""
        check_fit_arguments(epochs, steps, eval_every, sharding, early_stopping, eval_data, self._config)
        if on_eval is not None and not callable(on_eval):
            raise _checks.refuse("on_eval", on_eval, "must be callable: on_eval(step, metrics) -> bool")
        input = self._input(data, sharding)
        trainer = self._trainer(input)
        evaluation = self._input(eval_data) if eval_data is not None else None
        arguments: dict[str, Any] = {"data": data, "epochs": epochs, "steps": steps, "eval_data": eval_data}
        arguments.update(eval_every=eval_every, sharding=sharding, early_stopping=early_stopping)
        self._hook("on_fit_start", arguments)

        def chief_sees(line: _native.EvalLine) -> object:
            metrics = Metrics.from_native(line.metrics)
            self._hook("on_evaluation", line.step, metrics)
            return on_eval(line.step, metrics) if on_eval is not None else False

        summary = trainer.fit(
            input,
            epochs=epochs,
            max_steps=steps,
            eval_every=eval_every,
            eval=evaluation,
            on_log=self._report,
            early_stopping=early_stopping_json(early_stopping, self._config),
            on_eval=chief_sees if on_eval is not None or self._callbacks else None,
        )
        restored = early_stopping is not None and bool(early_stopping.get("restore_best", True))
        result = FitResult.from_native(summary, restored_best=restored)
        self._hook("on_fit_end", result)
        return result

    def evaluate(self, data: str | None = None) -> Metrics:
        """Loss, accuracy and AUC over ``data``, every trainer evaluating its share."""
        input = self._input(data)
        return Metrics.from_native(self._trainer(input).evaluate(input))

    def export(self, export_dir: str) -> str:
        """The chief writes the model into ``export_dir`` (``model.json`` and
        ``model.safetensors``), which :func:`sparktrain.predict` loads; returns the folder.
        Sharded tables stay sharded (``tables.json`` lists each trainer's files), and every
        trainer must call it."""
        if self._native is None:
            raise InvalidArgumentError("export() needs a trained model: call fit() first")
        path = self._ctx.absolute_path(export_dir) if self._ctx is not None else export_dir
        self._native.export(path)
        self._hook("on_export", path)
        return path

    def save_checkpoint(self) -> str | None:
        """The chief writes a checkpoint now; its folder (None on other trainers). With
        sharded tables every trainer must call it: each writes its rows and gets the folder."""
        if self._native is None:
            raise InvalidArgumentError("save_checkpoint() needs a model: call fit() first")
        return self._native.save_checkpoint()

    def weights(self) -> Any:
        """The weights, flat in parameter-name order, as a NumPy float32 array (without the
        embedding tables when they are sharded)."""
        if self._native is None:
            raise InvalidArgumentError("weights() needs a model: call fit() first")
        return self._native.weights().to_numpy(zero_copy_only=False)

    def close(self) -> None:
        """Closes the TensorBoard event file."""
        if self._native is not None:
            self._native.close()


def check_fit_arguments(
    epochs: int,
    steps: int | None,
    eval_every: int | None,
    sharding: str,
    early_stopping: Mapping[str, Any] | None = None,
    eval_data: object = None,
    config: _native.TrainerConfig = DEFAULTS,
) -> None:
    """Refuses ``fit``'s arguments that cannot work, naming the parameter (``early_stopping``
    against the trainer's ``config``)."""
    _checks.integer("epochs", epochs, minimum=0)
    _checks.optional_integer("steps", steps, minimum=0)
    _checks.optional_integer("eval_every", eval_every, minimum=1)
    if eval_every is not None and eval_data is None:
        raise _checks.refuse("eval_every", eval_every, "needs eval_data to evaluate on")
    if sharding not in SHARDINGS:
        raise InvalidArgumentError(f"sharding={sharding!r}: use one of {list(SHARDINGS)}")
    if early_stopping is not None:
        early_stopping_json(early_stopping, config)
        if eval_data is None:
            raise _checks.refuse("early_stopping", early_stopping, "needs eval_data to watch")
        if eval_every is None:
            # One evaluation, at the end, leaves nothing to stop.
            raise _checks.refuse("early_stopping", early_stopping, "needs eval_every: how often to evaluate")


def train_main(args: dict[str, Any], ctx: TrainerContext) -> dict[str, Any] | None:
    """The trainers' function of :func:`sparktrain.train`: builds the trainer, fits, exports;
    the chief returns what it did."""
    trainer = ctx.trainer(**args["trainer"])
    result = trainer.fit(args["data"], **args["fit"])
    export_dir = trainer.export(args["export_dir"]) if args["export_dir"] else None
    trainer.close()
    if not ctx.is_chief:
        return None
    return {"fit": result, "export_dir": export_dir}
