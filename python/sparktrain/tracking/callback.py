""":class:`MLflowCallback`: a training job logged to MLflow. Its job hooks run on the driver,
its training hooks in the chief's trainer process (the callback is pickled there with the job),
so this module must load no driver-side module.

The driver opens the run (a new one, or the one ``run_id``/``MLFLOW_RUN_ID`` names; a child of
the driver's active run, if any) before any Spark job, logs the job's shape, and hands the run's
id and tracking URI to the trainers, in the callback itself and as ``MLFLOW_RUN_ID`` /
``MLFLOW_TRACKING_URI`` in their environment (so that user code there logs to the same run).
The chief logs every resolved hyperparameter, its progress and evaluations at their steps, and
its TensorBoard files, checkpoint folder and export. A restart ships the same callback again,
so the new generation's chief goes on in the same run; the driver logs each restart as a
``restarts`` metric at the step it happened and lists them in ``sparktrain/restarts.json``.
"""

from __future__ import annotations

import copy
import getpass
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from sparktrain import _checks, fs
from sparktrain.errors import InvalidArgumentError
from sparktrain.tracking._mlflow import require_mlflow
from sparktrain.training.callbacks import Callback

if TYPE_CHECKING:
    from sparktrain.cluster.callbacks import JobCallback, JobInfo
    from sparktrain.cluster.driver.restarts import Restart
    from sparktrain.training.results import FitResult, Metrics
    from sparktrain.training.trainer import Trainer

#: How users name this integration, in messages about a missing ``mlflow``.
_NEEDED_BY = "sparktrain.tracking.MLflowCallback"
#: The longest parameter value MLflow's stores take.
MAX_PARAM_LENGTH = 6000
#: Metrics and parameters per ``log_batch`` call (MLflow's limits are 1000 and 100).
_BATCH = 100
#: Seconds the driver gives an MLflow server over HTTP to accept a connection when a job
#: opens its run: MLflow's own client retries for minutes before it gives up.
CONNECT_SECONDS = 10.0
#: MLflow 3's opt-in to its file store (``file://`` or a bare path as the tracking URI).
ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"


def check_reachable(uri: str) -> None:
    """Refuses an HTTP(S) tracking URI whose server does not accept a TCP connection within
    :data:`CONNECT_SECONDS`, before the job starts. Other stores, and servers reached through
    a proxy, are left to MLflow."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    host = parts.hostname
    if parts.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(host):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidArgumentError(f"tracking URI {uri!r}: its port is not a number") from None
    try:
        with socket.create_connection((host, port), timeout=CONNECT_SECONDS):
            pass
    except OSError as e:
        raise InvalidArgumentError(
            f"tracking URI {uri!r}: nothing accepts connections at {host}:{port} ({e}); start the "
            "MLflow server, or give a tracking_uri (MLFLOW_TRACKING_URI) that reaches one"
        ) from None


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    """Nested settings as ``a.b.c`` keys with text values."""
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
        return
    text = json.dumps(value) if isinstance(value, list | tuple | bool) or value is None else str(value)
    out[prefix] = text[:MAX_PARAM_LENGTH]


def _is_file_store(uri: str) -> bool:
    return urllib.parse.urlsplit(uri).scheme in ("", "file")


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local_path(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def _copy_down(url: str, local: str) -> None:
    """The folder ``url`` (any storage URL) copied into the local folder ``local``."""
    os.makedirs(local, exist_ok=True)
    for entry in fs.ls(url):
        name = entry.path.rstrip("/").rsplit("/", 1)[-1]
        target = os.path.join(local, name)
        if entry.is_dir:
            _copy_down(entry.path, target)
        else:
            with open(target, "wb") as f:
                f.write(fs.read_bytes(entry.path))


class MLflowCallback(Callback):
    """Logs a sparktrain job to an MLflow run: give it to :func:`sparktrain.train`,
    ``Cluster.run`` or an estimator of :mod:`sparktrain.ml` (``trainOptions={"callbacks":
    [...]}``) as ``callbacks=[MLflowCallback()]``.

    ``tracking_uri`` defaults to MLflow's own (``MLFLOW_TRACKING_URI``), ``experiment_name`` to
    ``MLFLOW_EXPERIMENT_NAME`` (or ``MLFLOW_EXPERIMENT_ID``), then the active run's experiment,
    then MLflow's default one. Each job opens a new run named ``run_name`` (the job's name by
    default) with ``tags``, unless ``run_id`` (or ``MLFLOW_RUN_ID``) names a run to go on
    with. Each job's run is a child of ``parent_run_id``, or of the run active in the calling
    thread (``with mlflow.start_run():``) with ``nested=True`` (the default); with
    ``nested=False`` the job logs into that active run itself. Spark ML's ``CrossValidator``
    fits in threads of its own, which do not see the caller's active run: give
    ``parent_run_id=parent.info.run_id`` for one child run per fit. The trainers
    must reach the tracking server (and hold its credentials, e.g. ``MLFLOW_TRACKING_TOKEN``
    through ``spark.executorEnv.*``).

    Logged: the job's shape (``num_workers``, ``num_evaluators``, ``input_mode``,
    ``max_restarts``, ``min_workers``, ``gpus_per_worker``, the Spark master; the chief adds
    ``device``, ``sharding`` and the ``workers`` it trained with as a metric), every resolved
    hyperparameter (the engine's configuration with its defaults, flattened:
    ``optimizer.rule.lr``, ``model.hidden``...) and ``fit``'s arguments as
    parameters (a value that changes later, as a second ``fit``'s ``steps``, keeps its first
    value as the parameter and its latest as a tag of the same name); ``loss``,
    ``examples_per_sec``, ``learning_rate`` and ``epoch`` at each
    progress line's step and ``eval/loss``, ``eval/accuracy``, ``eval/auc`` at each
    evaluation's; ``fit/examples_per_sec`` and ``fit/seconds`` at the end; each restart as a
    ``restarts`` metric; the checkpoint folders as tags (``sparktrain.model_dir``,
    ``sparktrain.checkpoint``); and, with ``log_artifacts``, the TensorBoard files
    (``tensorboard/``), the feature spec (``sparktrain/features.json``) and the export
    (``export/``) as artifacts. :func:`sparktrain.tracking.log_model` logs the export as an
    MLflow model too.

    After a job, :attr:`run_id` names its run. One callback may serve several jobs, also side
    by side: each job gets a copy bound to its own run."""

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment_name: str | None = None,
        *,
        run_id: str | None = None,
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
        parent_run_id: str | None = None,
        nested: bool = True,
        log_artifacts: bool = True,
    ) -> None:
        require_mlflow(_NEEDED_BY)  # asked for MLflow: say now, on the driver, if it is missing
        self.tracking_uri = _checks.optional_text("tracking_uri", tracking_uri)
        self.experiment_name = _checks.optional_text("experiment_name", experiment_name)
        self.resume_run_id = _checks.optional_text("run_id", run_id)
        self.run_name = _checks.optional_text("run_name", run_name)
        self.parent_run_id = _checks.optional_text("parent_run_id", parent_run_id)
        self.tags = _checks.string_map("tags", tags or {})
        self.nested = bool(nested)
        self.log_artifacts = bool(log_artifacts)
        #: The runs this callback's jobs logged to, oldest first (shared with its bound copies).
        self._runs: list[str] = []
        self._lock = threading.Lock()
        # A bound copy's run, and what the driver knows of it.
        self._run_id: str | None = None
        self._uri: str | None = None
        self._ends_run = False
        self._ends_at_fit_end = False
        self._restarts: list[dict[str, Any]] = []
        self._client: Any = None

    @property
    def run_id(self) -> str | None:
        """The MLflow run of the latest job this callback followed (None before any)."""
        if self._run_id is not None:
            return self._run_id
        with self._lock:
            return self._runs[-1] if self._runs else None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state["_lock"] = None
        state["_runs"] = []
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # --- the run ------------------------------------------------------------------------

    def _mlflow_client(self) -> Any:
        if self._client is None:
            mlflow = require_mlflow(_NEEDED_BY)
            self._client = mlflow.MlflowClient(self._uri)
        return self._client

    def _experiment_id(self, client: Any, parent: str | None) -> str:
        name = self.experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if name:
            found = client.get_experiment_by_name(name)
            return str(found.experiment_id) if found is not None else str(client.create_experiment(name))
        if os.environ.get("MLFLOW_EXPERIMENT_ID"):
            return os.environ["MLFLOW_EXPERIMENT_ID"]
        if parent is not None:
            return str(client.get_run(parent).info.experiment_id)
        return "0"  # MLflow's Default experiment

    def _open(self, name: str) -> None:
        """Opens this copy's run: the one to go on with, the active run, or a new one."""
        mlflow = require_mlflow(_NEEDED_BY)
        self._uri = self.tracking_uri or mlflow.get_tracking_uri()
        check_reachable(self._uri)
        self._client = None
        client = self._mlflow_client()
        resume = self.resume_run_id or os.environ.get("MLFLOW_RUN_ID")
        if resume:
            client.update_run(resume, status="RUNNING")
            self._run_id, self._ends_run = resume, True
            return
        active = mlflow.active_run()
        if active is not None and not self.nested and self.parent_run_id is None:
            self._run_id, self._ends_run = active.info.run_id, False
            return
        parent = self.parent_run_id or (active.info.run_id if active is not None else None)
        tags = {"sparktrain.job": name, "mlflow.user": getpass.getuser(), **self.tags}
        if parent is not None:
            tags["mlflow.parentRunId"] = parent
        run = client.create_run(
            self._experiment_id(client, parent), run_name=self.run_name or name, tags=tags
        )
        self._run_id, self._ends_run = run.info.run_id, True

    def _log(self, *, params: dict[str, str] | None = None, metrics: Any = (), step: int = 0) -> None:
        require_mlflow(_NEEDED_BY)
        from mlflow.entities import Metric, Param, RunTag

        client = self._mlflow_client()
        now = int(1000 * time.time())
        entries = [Metric(k, float(v), now, step) for k, v in dict(metrics).items() if v is not None]
        for i in range(0, len(entries), _BATCH):
            client.log_batch(self._run_id, metrics=entries[i : i + _BATCH])
        if not params:
            return
        # MLflow refuses a parameter logged again with another value (a later fit's steps, a
        # restart with fewer workers): the first value stays, the latest is a tag.
        logged = client.get_run(self._run_id).data.params
        pairs = [Param(k, v) for k, v in params.items() if k not in logged]
        for i in range(0, len(pairs), _BATCH):
            client.log_batch(self._run_id, params=pairs[i : i + _BATCH])
        changed = [RunTag(k, v) for k, v in params.items() if k in logged and logged[k] != v]
        for i in range(0, len(changed), _BATCH):
            client.log_batch(self._run_id, tags=changed[i : i + _BATCH])

    # --- the driver ---------------------------------------------------------------------

    def on_job_start(self, job: JobInfo) -> JobCallback:
        """Opens the job's run and logs the job's shape; returns the copy bound to the run."""
        bound = copy.copy(self)
        bound._restarts = []
        bound._open(job.name)
        assert bound._run_id is not None
        with self._lock:
            self._runs.append(bound._run_id)
        shape = {
            "num_workers": job.num_workers,
            "num_evaluators": job.num_evaluators,
            "input_mode": job.input_mode,
            "max_restarts": job.max_restarts,
            "min_workers": job.min_workers,
            "gpus_per_worker": job.gpus_per_worker,
            "spark.master": job.master,
        }
        params: dict[str, str] = {}
        _flatten("", shape, params)
        bound._log(params=params)
        bound._mlflow_client().set_tag(bound._run_id, "sparktrain.application_id", job.application_id)
        return bound

    def trainer_env(self) -> dict[str, str]:
        """The run's id and tracking URI, for MLflow calls of the trainers' own code."""
        if self._run_id is None or self._uri is None:
            return {}
        env = {"MLFLOW_RUN_ID": self._run_id, "MLFLOW_TRACKING_URI": self._uri}
        # MLflow 3 opens a file store (a folder the trainers share, e.g. on NFS) only with this
        # opt-in, which executors on other hosts do not inherit from the driver's environment.
        if os.environ.get(ALLOW_FILE_STORE) and _is_file_store(self._uri):
            env[ALLOW_FILE_STORE] = os.environ[ALLOW_FILE_STORE]
        return env

    def on_restart(self, restart: Restart) -> None:
        """Logs the restart: the ``restarts`` metric at its step, the list as an artifact."""
        self._restarts.append(
            {
                "generation": restart.generation,
                "cause": restart.cause,
                "detected_at": restart.detected_at,
                "resubmitted_at": restart.resubmitted_at,
                "last_step": restart.last_step,
            }
        )
        self._log(metrics={"restarts": len(self._restarts)}, step=restart.last_step or 0)
        client = self._mlflow_client()
        client.set_tag(self._run_id, "sparktrain.restarts", str(len(self._restarts)))
        client.log_dict(self._run_id, {"restarts": self._restarts}, "sparktrain/restarts.json")

    def on_job_end(self, error: BaseException | None) -> None:
        """Ends the run it opened: ``FINISHED``, or ``FAILED`` with the error as a tag."""
        client = self._mlflow_client()
        if error is not None:
            client.set_tag(self._run_id, "sparktrain.error", str(error).split("\n", 1)[0][:MAX_PARAM_LENGTH])
        if self._ends_run:
            client.set_terminated(self._run_id, "FINISHED" if error is None else "FAILED")

    # --- the chief ----------------------------------------------------------------------

    def on_fit_start(self, trainer: Trainer, arguments: dict[str, Any]) -> None:
        """Logs every resolved hyperparameter, ``fit``'s arguments and the worker count."""
        if self._run_id is None:
            # A trainer alone (Trainer(None, ...)): no driver opened a run for it.
            self._open("sparktrain-trainer")
            self._ends_at_fit_end, self._ends_run = self._ends_run, False
        params: dict[str, str] = {}
        _flatten("", json.loads(trainer.config.to_json()), params)
        fit = dict(arguments)
        fit["data"] = fit["data"] if fit["data"] is not None else "the Spark feed"
        _flatten("fit", fit, params)
        spec = trainer.features
        if spec is not None:
            params["features.label"] = spec.label
            for kind in ("dense", "categorical", "crossed", "multi_hot"):
                params[f"features.{kind}"] = str(len(getattr(spec, kind)))
        params["device"] = trainer.device
        self._log(params=params, metrics={"workers": trainer.num_workers}, step=trainer.step)
        client = self._mlflow_client()
        if trainer.config.model_dir:
            client.set_tag(self._run_id, "sparktrain.model_dir", trainer.config.model_dir)
        if spec is not None and self.log_artifacts:
            client.log_text(self._run_id, spec.to_json(), "sparktrain/features.json")

    def on_log(self, trainer: Trainer, line: dict[str, float]) -> None:
        """Logs a progress line at its step."""
        keys = ("loss", "examples_per_sec", "learning_rate", "epoch")
        self._log(metrics={k: line[k] for k in keys}, step=int(line["step"]))

    def on_evaluation(self, trainer: Trainer, step: int, metrics: Metrics) -> None:
        """Logs an evaluation at its step."""
        values = {
            "eval/loss": metrics.loss,
            "eval/accuracy": metrics.accuracy,
            "eval/auc": metrics.auc,
            "eval/examples": metrics.examples,
        }
        self._log(metrics=values, step=step)

    def on_fit_end(self, trainer: Trainer, result: FitResult) -> None:
        """Logs the throughput, the checkpoint folders and the TensorBoard files."""
        values = {
            "fit/examples_per_sec": result.examples_per_sec,
            "fit/seconds": result.seconds,
            "fit/examples": result.examples,
            "fit/resumed_from": result.resumed_from,
        }
        self._log(metrics=values, step=result.steps)
        client = self._mlflow_client()
        for tag, value in (("checkpoint", result.checkpoint), ("best_checkpoint", result.best_checkpoint)):
            if value:
                client.set_tag(self._run_id, f"sparktrain.{tag}", value)
        board = trainer.config.tensorboard_dir
        if board and self.log_artifacts and fs.exists(board):
            self._upload(board, "tensorboard")
        if self._ends_at_fit_end:
            client.set_terminated(self._run_id, "FINISHED")

    def on_export(self, trainer: Trainer, export_dir: str) -> None:
        """Logs the exported model's files as the ``export/`` artifacts."""
        self._mlflow_client().set_tag(self._run_id, "sparktrain.export_dir", export_dir)
        if self.log_artifacts:
            self._upload(export_dir, "export")

    def _upload(self, folder: str, artifact_path: str) -> None:
        """Logs the files of ``folder`` (any storage URL) under ``artifact_path``."""
        client = self._mlflow_client()
        if _is_local(folder):
            client.log_artifacts(self._run_id, _local_path(folder), artifact_path)
            return
        local = tempfile.mkdtemp(prefix="sparktrain-mlflow-")
        try:
            _copy_down(folder, local)
            client.log_artifacts(self._run_id, local, artifact_path)
        finally:
            shutil.rmtree(local, ignore_errors=True)


__all__ = ["MAX_PARAM_LENGTH", "MLflowCallback"]
