"""What needs no Spark and no tracking server: the training hooks of a trainer alone, in
order and with what they promise; callbacks refused by name; MLflow as an optional
dependency (without it, sparktrain imports and trains as before, and asking for MLflow says
which package to install); and the logged model's loader and signature, which take an integer
id column in each form pandas holds it in."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import sparktrain as st
from harness.synthetic import dense_table, write_tfrecords
from sparktrain.errors import InvalidArgumentError
from sparktrain.training import Callback, FeatureSpec, Trainer

FEATURES = FeatureSpec(dense=tuple(f"f{j:02d}" for j in range(4)))


class Recorder(Callback):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def on_fit_start(self, trainer, arguments):
        self.calls.append(("fit_start", (trainer.features, arguments["epochs"], arguments["sharding"])))

    def on_log(self, trainer, line):
        self.calls.append(("log", int(line["step"])))

    def on_evaluation(self, trainer, step, metrics):
        self.calls.append(("evaluation", (step, metrics.examples)))

    def on_fit_end(self, trainer, result):
        self.calls.append(("fit_end", result.steps))

    def on_export(self, trainer, export_dir):
        self.calls.append(("export", export_dir))


class Failing(Callback):
    def on_log(self, trainer, line):
        raise RuntimeError("the tracking server is down")


def test_a_trainer_calls_its_callbacks_hooks_in_order(tmp_path):
    data = write_tfrecords(f"{tmp_path}/data", dense_table(640, seed=1, features=4), files=1)
    recorder = Recorder()
    trainer = Trainer(None, model="mlp", features=FEATURES, hidden=[4], batch_size=64, log_every=5, seed=1)
    trainer = Trainer(
        None,
        model="mlp",
        features=FEATURES,
        hidden=[4],
        batch_size=64,
        log_every=5,
        callbacks=[recorder, Failing()],
    )
    result = trainer.fit(data, epochs=1, eval_data=data, eval_every=5)
    trainer.export(f"{tmp_path}/export")
    kinds = [kind for kind, _ in recorder.calls]
    assert kinds[0] == "fit_start"
    assert recorder.calls[0][1] == (FEATURES, 1, "static")
    assert kinds[-2:] == ["fit_end", "export"]
    assert [v for k, v in recorder.calls if k == "log"] == [int(line["step"]) for line in result.history]
    assert [v for k, v in recorder.calls if k == "evaluation"] == [
        (s, m.examples) for s, m in result.evaluations
    ]
    assert recorder.calls[-2] == ("fit_end", 10)
    assert recorder.calls[-1] == ("export", f"{tmp_path}/export")


def test_callbacks_that_are_not_callbacks_are_refused_by_name():
    from sparktrain.cluster.driver.options import JobOptions

    with pytest.raises(InvalidArgumentError, match="callbacks"):
        Trainer(None, model="mlp", callbacks=[print])
    with pytest.raises(InvalidArgumentError, match="callbacks"):
        JobOptions(main_fun=lambda args, ctx: None, name="job", callbacks=["mlflow"])


def test_the_mlflow_callback_checks_its_arguments():
    pytest.importorskip("mlflow", reason="mlflow-skinny is in tests/requirements.txt, not here")
    from sparktrain.tracking import MLflowCallback

    with pytest.raises(InvalidArgumentError, match="tags"):
        MLflowCallback(tags={"team": 1})
    with pytest.raises(InvalidArgumentError, match="experiment_name"):
        MLflowCallback(experiment_name=3)


def test_a_tracking_server_that_cannot_be_reached_fails_the_job_at_once():
    pytest.importorskip("mlflow", reason="mlflow-skinny is in tests/requirements.txt, not here")
    import socket
    import time

    from sparktrain.cluster.callbacks import JobInfo
    from sparktrain.tracking import MLflowCallback

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens once it is closed
    job = JobInfo("job", 1, 0, "files", 0, None, None, False, "local[1]", "app-1")
    started = time.monotonic()
    with pytest.raises(InvalidArgumentError, match=rf"nothing accepts connections at 127.0.0.1:{port}"):
        MLflowCallback(f"http://127.0.0.1:{port}").on_job_start(job)
    # MLflow's client alone retried for about four minutes before it failed.
    assert time.monotonic() - started < 30


def test_a_file_stores_opt_in_reaches_the_trainers_with_the_run(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="mlflow-skinny is in tests/requirements.txt, not here")
    from sparktrain.cluster.callbacks import JobInfo
    from sparktrain.tracking import MLflowCallback

    job = JobInfo("job", 1, 0, "files", 0, None, None, False, "local[1]", "app-1")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    bound = MLflowCallback(tmp_path.as_uri(), experiment_name="file-store").on_job_start(job)
    try:
        env = bound.trainer_env()
    finally:
        bound.on_job_end(None)
    # Executors on other hosts do not inherit the driver's environment: the opt-in goes along.
    assert env["MLFLOW_ALLOW_FILE_STORE"] == "true"
    assert env["MLFLOW_TRACKING_URI"] == tmp_path.as_uri()
    import mlflow

    assert mlflow.MlflowClient(tmp_path.as_uri()).get_run(env["MLFLOW_RUN_ID"]).info.status == "FINISHED"


def test_without_mlflow_nothing_changes_and_asking_for_it_names_the_package():
    code = """
import sys
sys.modules["mlflow"] = None  # as if not installed
import sparktrain, sparktrain.tracking, sparktrain.training
from sparktrain.errors import MissingDependencyError
for ask in (lambda: sparktrain.tracking.MLflowCallback(),
            lambda: sparktrain.tracking.log_model("/nowhere", input_example=None)):
    try:
        ask()
    except MissingDependencyError as e:
        print(e.package, e.extra, e)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "mlflow mlflow sparktrain.tracking.MLflowCallback needs mlflow: pip install 'sparktrain[mlflow]'",
        "mlflow mlflow sparktrain.tracking.log_model needs mlflow: pip install 'sparktrain[mlflow]'",
    ]


def _ids_table(rows: int, seed: int, missing: bool) -> pa.Table:
    rng = np.random.default_rng(seed)
    x1 = rng.standard_normal(rows).astype(np.float32)
    shop = rng.integers(0, 30, rows)
    city = rng.choice(["oslo", "lyon", "kyiv"], rows)
    label = ((x1 + (shop % 3 == 0) + (city == "oslo")) > 0.8).astype(np.int64)
    shops = pa.array([None if missing and i % 7 == 0 else int(s) for i, s in enumerate(shop)], pa.int64())
    return pa.table({"label": label, "x1": x1, "shop": shops, "city": city})


def _id_forms(table: pa.Table) -> dict[str, pd.DataFrame]:
    """The features of ``table`` as each pandas form an integer id column with a missing value
    arrives in: float64 (``toPandas``), nullable Int64 (``spark_udf``'s struct fields) and the
    objects MLflow's check passes on for a column of any type."""
    features = table.drop(["label"])
    nullable = features.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    return {
        "float64": features.to_pandas(),
        "Int64": nullable,
        "object": nullable.assign(shop=pd.Series(list(nullable["shop"]), dtype=object)),
    }


@pytest.fixture(scope="module")
def pyfunc_data(tmp_path_factory):
    """An export of a model with an integer and a string id, laid out as ``log_model`` lays
    out the model's data folder."""
    root = tmp_path_factory.mktemp("pyfunc")
    st.tfrecord.write_batches(str(root / "train.tfrecord"), _ids_table(600, seed=1, missing=False))
    features = {"dense": ["x1"], "categorical": {"shop": 32, "city": 8}}
    trainer = Trainer(model="wide_deep", features=features, hidden=[8], batch_size=64, seed=2)
    trainer.fit(str(root / "train.tfrecord"), epochs=1)
    export = trainer.export(str(root / "export"))
    data = root / "data"
    shutil.copytree(export, data / "export")
    st.servable.export_onnx(export, str(data / "model.onnx"))
    (data / "sparktrain.json").write_text(json.dumps({"format": 1, "export": "export", "onnx": "model.onnx"}))
    return {"export": export, "data": str(data)}


@pytest.mark.parametrize("engine", ["engine", "onnx"])
def test_the_loader_scores_integer_ids_in_each_form_as_the_engine_does(pyfunc_data, engine, monkeypatch):
    if engine == "onnx":
        pytest.importorskip("onnxruntime", reason="onnxruntime is in tests/requirements.txt, not here")
    from sparktrain.prediction import score_batch
    from sparktrain.tracking import _pyfunc

    table = _ids_table(200, seed=3, missing=True)
    expected = score_batch(pyfunc_data["export"], table.combine_chunks().to_batches()[0])["score"].to_numpy()
    monkeypatch.setenv(_pyfunc.ENGINE_VARIABLE, engine)
    model = _pyfunc.SparktrainModel(pyfunc_data["data"])
    assert model.engine == engine
    for form, frame in _id_forms(table).items():
        scores = model.predict(frame)["score"].to_numpy(np.float32)
        if engine == "engine":  # the same engine on the same batch
            np.testing.assert_array_equal(scores, expected, err_msg=form)
        else:
            np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5, err_msg=form)


def test_the_signature_takes_integer_ids_in_each_form_and_strings_as_strings(pyfunc_data):
    pytest.importorskip("mlflow", reason="mlflow-skinny is in tests/requirements.txt, not here")
    from mlflow.models import validate_schema
    from mlflow.types.schema import AnyType, DataType

    from sparktrain._native import ExportedModel
    from sparktrain.tracking import _pyfunc
    from sparktrain.tracking.models import _example, _features_only, _signature

    spec = FeatureSpec.from_native(ExportedModel(pyfunc_data["export"]).features)
    # Spark's toPandas of the first rows: the example's ids are int64 (none missing there).
    example = _features_only(_example(_ids_table(200, seed=3, missing=True).slice(1)), spec)
    assert str(example["shop"].dtype) == "int64"
    scores = _pyfunc.SparktrainModel(pyfunc_data["data"]).predict(example)
    signature = _signature(example, scores, spec)
    types = {c.name: c.type for c in signature.inputs.inputs}
    assert list(types) == ["x1", "shop", "city"]  # the features alone, in the spec's order
    assert isinstance(types["shop"], AnyType)
    assert types["city"] == DataType.string
    table = _ids_table(200, seed=3, missing=True)
    forms = {**_id_forms(table), "int64": table.drop(["label"]).drop_null().to_pandas()}
    for form, frame in forms.items():
        try:
            validate_schema(frame, signature.inputs)
        except Exception as e:  # MlflowException: MLflow's check refuses the frame
            raise AssertionError(f"the signature refuses integer ids as {form}") from e


def test_the_loader_refuses_an_unknown_engine_and_a_fractional_id_naming_them(pyfunc_data, monkeypatch):
    from sparktrain.tracking import _pyfunc

    monkeypatch.setenv(_pyfunc.ENGINE_VARIABLE, "bogus")
    with pytest.raises(ValueError, match="SPARKTRAIN_PYFUNC_ENGINE='bogus': use onnx or engine"):
        _pyfunc.SparktrainModel(pyfunc_data["data"])
    monkeypatch.setenv(_pyfunc.ENGINE_VARIABLE, "Engine")  # any case
    model = _pyfunc.SparktrainModel(pyfunc_data["data"])
    frame = _ids_table(20, seed=3, missing=True).drop(["label"]).to_pandas()
    frame.loc[3, "shop"] = 6.5
    with pytest.raises(
        ValueError, match=r"categorical column 'shop' holds 6\.5: its values must be integers"
    ):
        model.predict(frame)
    # No rows: no scores, in either engine.
    assert len(model.predict(frame.iloc[:0])) == 0


def test_the_onnx_loader_names_a_fractional_id_and_takes_no_rows(pyfunc_data, monkeypatch):
    pytest.importorskip("onnxruntime", reason="onnxruntime is in tests/requirements.txt, not here")
    from sparktrain.tracking import _pyfunc

    monkeypatch.setenv(_pyfunc.ENGINE_VARIABLE, "onnx")
    model = _pyfunc.SparktrainModel(pyfunc_data["data"])
    frame = _ids_table(20, seed=3, missing=False).drop(["label"]).to_pandas().astype({"shop": object})
    frame.loc[3, "shop"] = 6.5
    with pytest.raises(ValueError, match=r"categorical column 'shop' holds 6\.5"):
        model.predict(frame)
    assert len(model.predict(frame.iloc[:0])) == 0


def test_a_model_logged_into_a_finished_run_by_its_id_goes_into_the_runs_experiment(pyfunc_data, tmp_path):
    pytest.importorskip("mlflow", reason="mlflow-skinny is in tests/requirements.txt, not here")
    example = tmp_path / "example.parquet"
    _ids_table(50, seed=3, missing=False).drop(["label"]).to_pandas().to_parquet(example)
    # In a process of its own: MLflow's tracking URI and current experiment are process-wide.
    script = f"""
import os
os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
import mlflow, pandas as pd
from sparktrain.tracking import log_model
mlflow.set_tracking_uri({f"file://{tmp_path}/mlruns"!r})
client = mlflow.MlflowClient()
experiment = client.create_experiment("ctr")
run = client.create_run(experiment)
# As MLflowCallback logs them: metrics at step 0, which MLflow copies to the model.
client.log_metric(run.info.run_id, "workers", 2.0, step=0)
client.set_terminated(run.info.run_id)
example = pd.read_parquet({str(example)!r})
info = log_model({pyfunc_data["export"]!r}, input_example=example, run_id=run.info.run_id, onnx=False)
model = client.get_logged_model(info.model_id)
print(model.experiment_id == experiment, model.source_run_id == run.info.run_id,
      client.get_run(run.info.run_id).info.status)
print(len(mlflow.pyfunc.load_model(info.model_uri).predict(example)))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "True", "FINISHED", "50"]
