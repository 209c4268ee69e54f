"""The driver's side of training: :func:`train` checks every argument, then runs the whole
job through ``Cluster.run`` and returns the chief's result as a :class:`TrainResult`. Runs on
the driver."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sparktrain import _checks, _native, _spark, fs, storage_options
from sparktrain._deps import require_spark
from sparktrain.cluster.callbacks import JobCallback
from sparktrain.cluster.driver.restarts import DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_BACKOFF, Restart
from sparktrain.errors import InvalidArgumentError, PathNotFoundError
from sparktrain.training.results import FeatureSpec, FitResult, Metrics
from sparktrain.training.trainer import DEFAULTS, EvalCallback, Trainer, check_fit_arguments, train_main

_log = logging.getLogger(__name__)
#: The Spark conf that bounds each Python worker's memory (and so, inherited, its trainer's
#: address space): the trainers' table budget is half of it, as the engine takes by default.
PYSPARK_MEMORY_CONF = "spark.executor.pyspark.memory"


@dataclass(frozen=True)
class TrainResult:
    """What :func:`~sparktrain.train` did: the chief's ``fit`` result, its final evaluation
    (if ``eval_data`` was given), the exported model's folder (if any), and the restarts the
    job went through (see :class:`~sparktrain.cluster.driver.restarts.Restart`)."""

    fit: FitResult
    metrics: Metrics | None
    export_dir: str | None
    restarts: tuple[Restart, ...] = ()


def train(
    spark: Any,
    data: Any,
    model: str = "wide_deep",
    features: FeatureSpec | Mapping[str, Any] | None = None,
    num_workers: int = 2,
    epochs: int = 1,
    batch_size: int = DEFAULTS.batch_size,
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
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    restart_backoff: float = DEFAULT_RESTART_BACKOFF,
    min_workers: int | None = None,
    early_stopping: Mapping[str, Any] | None = None,
    on_eval: EvalCallback | None = None,
    callbacks: Sequence[JobCallback] = (),
    **hyperparameters: Any,
) -> TrainResult:
    """Trains ``model`` on ``num_workers`` Spark task slots in sync and returns the final
    figures and the exported model's folder.

    ``data`` is a path (TFRecord or Parquet files on any storage URL) or a DataFrame (each
    trainer then reads one partition of it). The chief checkpoints into ``model_dir`` (and
    training resumes from there), writes TensorBoard files into ``tensorboard_dir``, evaluates
    on ``eval_data`` and exports the model to ``export_dir`` (default ``<model_dir>/export``).
    ``batch_size`` and every other keyword argument go to
    :class:`~sparktrain.training.Trainer` (``optimizer``, ``learning_rate``, ``hidden``,
    ``label``, ``buckets``, ``checkpoint_every``...).

    A trainer or executor that dies restarts the job (``max_restarts``, ``restart_backoff``
    and ``min_workers`` as in :meth:`sparktrain.Cluster.run`); with ``model_dir``, training
    resumes from the chief's latest checkpoint (``checkpoint_every`` steps bound the work
    redone). ``TrainResult.restarts`` lists what happened.

    ``early_stopping`` and ``on_eval`` are ``fit``'s (see
    :meth:`~sparktrain.training.Trainer.fit`): with ``restore_best`` (the default) the export
    holds the best evaluation's model. ``on_eval`` is pickled to the trainers and runs on the
    chief.

    ``callbacks`` follow the job as in :meth:`sparktrain.Cluster.run`, and ``fit`` and the
    export on the chief (:class:`~sparktrain.training.Callback`);
    ``callbacks=[sparktrain.tracking.MLflowCallback()]`` logs the run to MLflow.

    Every argument is checked here, before any Spark job starts:
    :class:`~sparktrain.errors.InvalidArgumentError` names the one at fault."""
    from sparktrain.cluster.driver.launcher import Cluster

    fed = not isinstance(data, str)
    if data is None or (fed and not hasattr(data, "mapInArrow")):
        raise InvalidArgumentError(f"data={data!r}: give a path (str) or a Spark DataFrame")
    if fed and sharding != "static":
        raise InvalidArgumentError(f"sharding={sharding!r}: a DataFrame is split by partitions, not files")
    if eval_data is not None and not isinstance(eval_data, str):
        raise InvalidArgumentError(f"eval_data={eval_data!r}: give a path")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise InvalidArgumentError(f"num_workers={num_workers!r} must be a positive integer")
    if on_eval is not None and not callable(on_eval):
        raise InvalidArgumentError(f"on_eval={on_eval!r}: must be callable: on_eval(step, metrics) -> bool")
    for name, folder in {"model_dir": model_dir, "export_dir": export_dir}.items():
        _checks.optional_text(name, folder)
    if export_dir is None and model_dir is not None:
        export_dir = model_dir.rstrip("/") + "/export"
    trainer_args: dict[str, Any] = {
        "model": model,
        "features": None if features is None else asdict(FeatureSpec.of(features)),
        "model_dir": model_dir,
        "tensorboard_dir": tensorboard_dir,
        "batch_size": batch_size,
        **hyperparameters,
    }
    # The trainers build the same Trainer; building it here refuses a bad argument now rather
    # than as every trainer's failure once the Spark stage runs.
    config = Trainer(None, **trainer_args).config
    if fed:
        # A DataFrame's columns are known here: a missing one is named now, not by every trainer.
        spec = FeatureSpec.of(features) if features is not None else None
        if spec is None:
            spec = FeatureSpec(label=hyperparameters.get("label") or "label")
        spec.check_columns(data.columns, "data")
        spec.check_types(data.schema, "data")
    check_fit_arguments(epochs, steps, eval_every, sharding, early_stopping, eval_data, config)
    require_spark("sparktrain.train", arrow_udfs=fed)
    # A path that names nothing is refused here, not by every trainer once the job runs (the
    # driver reads with the session's object-store keys, as the trainers do).
    storage_options.of_session(spark)
    for name, path in [
        *([] if fed else [("data", data)]),
        *([("eval_data", eval_data)] if eval_data else []),
    ]:
        if not fs.expand_inputs(path) and not fs.exists(path):
            raise PathNotFoundError(f"{name}={path!r}: no file is there", path=path)
    if features is not None:
        check_tables(spark, config, FeatureSpec.of(features), num_workers)
    args = {
        "trainer": trainer_args,
        "data": None if fed else data,
        "fit": {
            "epochs": epochs,
            "steps": steps,
            "eval_data": eval_data,
            "eval_every": eval_every,
            "sharding": sharding,
            "early_stopping": early_stopping,
            "on_eval": on_eval,
        },
        "export_dir": export_dir,
    }
    cluster = Cluster.run(
        spark,
        train_main,
        args,
        num_workers,
        input_mode="spark" if fed else "files",
        data=data if fed else None,
        work=data if sharding == "dynamic" else None,
        env=env,
        log=log,
        max_restarts=max_restarts,
        restart_backoff=restart_backoff,
        min_workers=min_workers,
        callbacks=callbacks,
    )
    with cluster:
        outcome = cluster.wait()
    fit: FitResult = outcome["fit"]
    return TrainResult(
        fit=fit, metrics=fit.metrics, export_dir=outcome["export_dir"], restarts=tuple(cluster.restarts)
    )


def check_tables(spark: Any, config: _native.TrainerConfig, features: FeatureSpec, workers: int) -> None:
    """Says how large the model's embedding tables are and where they will live, before any
    Spark job: sharded across the ``workers`` trainers or whole on each. When the trainers'
    budget is known (``table_budget_bytes``, or half of ``spark.executor.pyspark.memory``,
    which bounds each trainer), tables that would not fit where they live are refused here,
    naming the sizes and the settings, rather than in every trainer once the job runs."""
    pyspark_memory = _spark.conf_bytes(_spark.context(spark, "spark"), PYSPARK_MEMORY_CONF)
    budget = None if pyspark_memory is None else pyspark_memory // 2
    whole, share, sharded = _native.table_plan(config, features.to_native(), workers, budget)
    if whole == 0:
        return
    where = {
        True: f"sharded across the {workers} trainers ({_gib(share)} on the largest)",
        False: "whole on every trainer",
        None: f"as each trainer's memory decides (shard_tables={config.shard_tables})",
    }[sharded]
    _log.info(
        "embedding tables with their optimizer state: %s whole, %s per trainer when sharded over "
        "%d; they will live %s",
        _gib(whole),
        _gib(share),
        workers,
        where,
    )


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"
