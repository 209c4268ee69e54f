""":func:`log_model`: an exported sparktrain model logged (and registered) as an MLflow model
with a ``pyfunc`` flavor. Runs on the driver (or any process that can read the export).

The logged model scores with ``mlflow.pyfunc.load_model(uri).predict(pandas_df)`` and
``mlflow.pyfunc.spark_udf(spark, uri)``: through sparktrain's engine where sparktrain is
installed, else through its ONNX file with onnxruntime (see
:mod:`sparktrain.tracking._pyfunc`, which travels inside the model as its loader).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

from sparktrain import _checks, exported, servable
from sparktrain.tracking._mlflow import require_mlflow
from sparktrain.tracking.callback import _copy_down, _is_local, _local_path
from sparktrain.training.results import FeatureSpec

_NEEDED_BY = "sparktrain.tracking.log_model"
#: The name MLflow imports the loader by, from the model's ``code/`` folder.
LOADER_MODULE = "sparktrain_pyfunc"
#: Rows of the input example kept with the model.
EXAMPLE_ROWS = 5


def _example(data: Any) -> Any:
    """The first rows of ``data`` (pandas, pyarrow or Spark) as a pandas DataFrame."""
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        frame = data
    elif hasattr(data, "toPandas") and hasattr(data, "limit"):  # a Spark DataFrame
        frame = data.limit(EXAMPLE_ROWS).toPandas()
    elif hasattr(data, "to_pandas"):  # a pyarrow Table or RecordBatch
        frame = data.slice(0, EXAMPLE_ROWS).to_pandas()
    else:
        raise _checks.refuse(
            "input_example", data, "must be a pandas DataFrame, a pyarrow Table or a Spark DataFrame"
        )
    if len(frame) == 0:
        raise _checks.refuse("input_example", "an empty table", "needs at least one row")
    return frame.head(EXAMPLE_ROWS).reset_index(drop=True)


def _features_only(frame: Any, spec: FeatureSpec) -> Any:
    """The example's feature columns, in the spec's order: the label and other columns are not
    the model's inputs."""
    columns = [*spec.dense, *spec.to_native().key_columns, *(name for name, _, _ in spec.multi_hot)]
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise _checks.refuse(
            "input_example", list(frame.columns), f"lacks the model's feature columns {missing}"
        )
    return frame[columns]


def _signature(example: Any, scores: Any, spec: FeatureSpec) -> Any:
    """The model's signature, inferred from the example and its scores, with each id column
    that is not of strings declared of any type.

    An integer id column comes in three pandas types: int64 (no id missing), float64 (pandas'
    own conversion of integers with a missing one, as ``toPandas`` gives them) and the nullable
    Int64 (Spark's for a struct's field, what ``spark_udf`` hands a model). MLflow's checks take
    no declared type from all three: ``long`` refuses float64, ``double`` refuses both int64s.
    The loader takes each of them (and the objects MLflow passes on for a column of any type)."""
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types.schema import AnyType, ColSpec, DataType, Schema

    with warnings.catch_warnings():
        # Its advice for integer columns (declare them doubles) is what this function replaces.
        warnings.filterwarnings("ignore", "Hint: Inferred schema contains integer", UserWarning)
        signature = infer_signature(example, scores)
    keys = set(spec.to_native().key_columns)
    textual = (DataType.string, DataType.binary)
    any_type = AnyType()  # type: ignore[no-untyped-call]  # mlflow leaves its __init__ unannotated
    inputs = [
        ColSpec(any_type, c.name, c.required)
        if c.name in keys and isinstance(c.type, DataType) and c.type not in textual
        else c
        for c in signature.inputs.inputs
    ]
    return ModelSignature(Schema(inputs), signature.outputs, signature.params)


def _requirements(onnx: bool) -> list[str]:
    """What the ONNX path needs, pinned to this environment's versions: the model must score
    where sparktrain is not installed (it is not a requirement: it is not on PyPI yet)."""
    packages = ["numpy", "pandas", "pyarrow", *(["onnxruntime"] if onnx else [])]
    pinned = []
    for package in packages:
        try:
            pinned.append(f"{package}=={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            pinned.append(package)
    return pinned


def log_model(
    export_dir: str,
    name: str = "model",
    *,
    input_example: Any,
    registered_model_name: str | None = None,
    run_id: str | None = None,
    onnx: bool = True,
) -> Any:
    """Logs the export in ``export_dir`` (any storage URL; what :func:`sparktrain.train`
    returns as ``export_dir``) as the MLflow model ``name`` with a ``pyfunc`` flavor, and
    returns MLflow's ``ModelInfo`` (its ``model_uri`` loads it).

    ``input_example`` (a pandas DataFrame, pyarrow Table or Spark DataFrame with the feature
    columns; the first rows of those columns are kept) is recorded with the model, and the
    model's signature is inferred from it and its scores: the feature columns by name, integer
    ids of any type, so that the model takes them as int64, nullable Int64 or float64 (what
    pandas makes of integers with a missing one). With ``onnx`` the model also
    carries its ONNX form, so it scores where sparktrain is not installed (with onnxruntime);
    its ``pip_requirements`` name what that needs. ``registered_model_name`` registers the
    model (a new version of it).

    The model goes into ``run_id``'s run, else the active run, else a new run of MLflow's
    current experiment, on MLflow's current tracking URI (``MLFLOW_TRACKING_URI``). Raises
    :class:`~sparktrain.errors.MissingDependencyError` without mlflow, and
    :class:`~sparktrain.errors.PathNotFoundError` without an export in ``export_dir``."""
    mlflow = require_mlflow(_NEEDED_BY)
    export_dir = _checks.text("export_dir", export_dir)
    name = _checks.text("name", name)
    registered_model_name = _checks.optional_text("registered_model_name", registered_model_name)
    run_id = _checks.optional_text("run_id", run_id)
    # PathNotFoundError before anything is written.
    config = json.loads(exported.config(export_dir))
    spec = FeatureSpec.from_json(json.dumps(config["features"]))
    example = _features_only(_example(input_example), spec)

    from sparktrain.tracking import _pyfunc

    work = tempfile.mkdtemp(prefix="sparktrain-mlflow-model-")
    try:
        data = os.path.join(work, "sparktrain")
        if _is_local(export_dir):
            shutil.copytree(_local_path(export_dir), os.path.join(data, "export"))
        else:
            _copy_down(export_dir, os.path.join(data, "export"))
        if onnx:
            servable.export_onnx(export_dir, os.path.join(data, "model.onnx"))
        with open(os.path.join(data, "sparktrain.json"), "w") as f:
            json.dump({"format": 1, "export": "export", "onnx": "model.onnx" if onnx else None}, f)
        loader = os.path.join(work, f"{LOADER_MODULE}.py")
        shutil.copyfile(_pyfunc.__file__, loader)
        scores = _pyfunc.SparktrainModel(data).predict(example)
        signature = _signature(example, scores, spec)
        from mlflow.models import Model

        # Model.log is what mlflow.pyfunc.log_model calls, and it takes the run by its id: no
        # fluent run is started, so the caller's active run and experiment stay as they were.
        with _run(mlflow) if run_id is None else nullcontext():
            return Model.log(
                artifact_path=None,
                name=name,
                flavor=mlflow.pyfunc,
                run_id=run_id,
                model_id=None if run_id is None else _model_of_run(mlflow, name, run_id),
                loader_module=LOADER_MODULE,
                data_path=data,
                code_paths=[loader],
                signature=signature,
                input_example=example,
                registered_model_name=registered_model_name,
                pip_requirements=_requirements(onnx),
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _model_of_run(mlflow: Any, name: str, run_id: str) -> str:
    """A new logged model of ``run_id``'s run, in that run's experiment; its id.

    Given a run by its id alone, MLflow puts the model in the current experiment (the
    ``Default`` one unless one was set), not the run's; a file store then fails to copy the
    run's metrics to it. The model is made here, where its experiment can be given."""
    run = mlflow.MlflowClient().get_run(run_id)
    model = mlflow.initialize_logged_model(
        name=name,
        source_run_id=run_id,
        params={key: str(value) for key, value in run.data.params.items()},
        experiment_id=run.info.experiment_id,
    )
    return str(model.model_id)


@contextlib.contextmanager
def _run(mlflow: Any) -> Iterator[None]:
    """Inside the active run, or a new one of MLflow's current experiment (ended after)."""
    if mlflow.active_run() is not None:
        yield
        return
    with mlflow.start_run():
        yield


__all__ = ["EXAMPLE_ROWS", "LOADER_MODULE", "log_model"]
