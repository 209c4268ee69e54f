"""MLflow against a real tracking server (``mlflow server`` on 127.0.0.1, SQLite store, local
artifacts; ``harness/mlflow_server.py``) and real Spark (local-cluster): a two-worker
``sparktrain.train`` job is one run with its hyperparameters, progress, evaluations, throughput
and artifacts, logged by the chief alone; a ``Cluster.run`` job whose trainer dies goes on in
the same run after its restart; a ``CrossValidator`` over ``sparktrain.ml.Classifier`` gives
one child run per fit; and an export logged and registered as an MLflow model scores through
``mlflow.pyfunc`` (with the engine, and with ONNX where sparktrain is not installed) and
``spark_udf`` as ``sparktrain.predict`` does (to the rounding of a float sum).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pyarrow as pa
import pytest

import sparktrain as st
from harness.synthetic import dense_table, write_tfrecords
from sparktrain.training import FeatureSpec
from test_layers import driver_side

mlflow = pytest.importorskip("mlflow", reason="mlflow-skinny is in tests/requirements.txt, not here")

from sparktrain.tracking import MLflowCallback, log_model  # noqa: E402

# One xdist worker takes them all (tests/run.sh: --dist loadgroup): one tracking server and one
# training job (the module's `trained`) rather than one on each worker that gets a test of it.
pytestmark = pytest.mark.xdist_group("mlflow")

SPEC = FeatureSpec(dense=("x1", "x2"), categorical=(("shop", 64), ("city", 16)))


def _table(rows: int, seed: int) -> pa.Table:
    """A learnable table with integer and string ids, some of them missing."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.standard_normal(rows).astype(np.float32), rng.standard_normal(rows).astype(np.float32)
    shop = rng.integers(0, 40, rows)
    city = rng.choice(["oslo", "lyon", "kyiv", "lima", "pune"], rows)
    logit = 1.5 * x1 - x2 + np.where(shop % 3 == 0, 1.5, -0.5) + np.where(city == "oslo", 1.0, 0.0)
    label = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    shops = pa.array([None if i % 17 == 0 else int(s) for i, s in enumerate(shop)], pa.int64())
    cities = pa.array([None if i % 23 == 0 else str(c) for i, c in enumerate(city)], pa.string())
    return pa.table({"label": label, "x1": x1, "x2": x2, "shop": shops, "city": cities})


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def _artifacts(client, run_id: str, path: str) -> list[str]:
    return sorted(os.path.basename(f.path) for f in client.list_artifacts(run_id, path))


@pytest.fixture(scope="module")
def tracking(mlflow_server):
    """MLflow's own variable points this process at the test server, as a user's would."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
        mlflow.set_tracking_uri(mlflow_server)
        yield mlflow_server


@pytest.fixture(scope="module")
def trained(spark, tracking, tmp_path_factory):
    """A two-worker ``sparktrain.train`` job logged to its own experiment, named by
    ``MLFLOW_EXPERIMENT_NAME``."""
    root = tmp_path_factory.mktemp("mlflow-train")
    data = write_tfrecords(f"{root}/train", _table(4_000, seed=1), files=4)
    evaluation = write_tfrecords(f"{root}/eval", _table(1_000, seed=2), files=2)
    experiment = f"train-{uuid.uuid4().hex[:8]}"
    os.environ["MLFLOW_EXPERIMENT_NAME"] = experiment
    try:
        callback = MLflowCallback()
        result = st.train(
            spark,
            data,
            model="wide_deep",
            features=SPEC,
            num_workers=2,
            epochs=2,
            batch_size=64,
            model_dir=f"{root}/model",
            eval_data=evaluation,
            eval_every=20,
            tensorboard_dir=f"{root}/tb",
            log_every=10,
            hidden=[16],
            log=False,
            callbacks=[callback],
        )
    finally:
        del os.environ["MLFLOW_EXPERIMENT_NAME"]
    return {"result": result, "run_id": callback.run_id, "experiment": experiment, "eval": evaluation}


def test_a_two_worker_training_job_is_one_run_logged_by_its_chief(trained, tracking):
    client = mlflow.MlflowClient(tracking)
    result = trained["result"]
    run = client.get_run(trained["run_id"])
    experiment = client.get_experiment_by_name(trained["experiment"])
    assert run.info.experiment_id == experiment.experiment_id
    assert run.info.status == "FINISHED"
    assert len(client.search_runs([experiment.experiment_id])) == 1

    params = run.data.params
    # The job's shape, and every resolved hyperparameter: those left to the engine included.
    assert params["num_workers"] == "2"
    assert params["input_mode"] == "files"
    assert params["fit.sharding"] == "static"
    assert params["fit.epochs"] == "2"
    assert params["device"] == "cpu"
    assert params["batch_size"] == "64"
    learning_rate = float(params["optimizer.rule.lr"])
    assert learning_rate == pytest.approx(st.training.LEARNING_RATES["adam"])
    assert params["optimizer.rule.name"] == "adam"
    assert json.loads(params["model.hidden"]) == [16]
    assert params["model.dim"] == str(8)
    assert params["features.categorical"] == "2"

    # Only the chief logs: one value per step, at the steps of its progress lines.
    steps = [s for s, _ in _history(client, run.info.run_id, "loss")]
    assert steps == sorted(set(steps)), steps
    assert steps == [int(line["step"]) for line in result.fit.history]
    evaluations = _history(client, run.info.run_id, "eval/auc")
    assert evaluations == [(step, pytest.approx(m.auc)) for step, m in result.fit.evaluations]
    assert [v for _, v in _history(client, run.info.run_id, "workers")] == [2.0]
    (throughput,) = _history(client, run.info.run_id, "fit/examples_per_sec")
    assert throughput == (result.fit.steps, pytest.approx(result.fit.examples_per_sec))

    tags = run.data.tags
    assert tags["sparktrain.checkpoint"] == result.fit.checkpoint
    assert tags["sparktrain.export_dir"] == result.export_dir
    assert any(
        name.startswith("events.out.tfevents") for name in _artifacts(client, run.info.run_id, "tensorboard")
    )
    assert _artifacts(client, run.info.run_id, "export") == ["model.json", "model.safetensors"]
    features = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/sparktrain/features.json"))
    assert FeatureSpec.from_json(json.dumps(features)) == SPEC


def _killed_once():
    """A main_fun, built here so that it is pickled by value, that trains in chunks of 10
    steps; in generation 0 the worker SIGKILLs itself after step 20. The chief also logs a
    metric of its own through MLflow's variables, and returns the modules it loaded."""

    def main_fun(args, ctx):
        import os
        import signal
        import sys

        trainer = ctx.trainer(
            model="mlp",
            features=args["features"],
            hidden=[8],
            batch_size=32,
            model_dir=args["model_dir"],
            log_every=5,
        )
        for end in (10, 20, 30, 40):
            if ctx.generation == 0 and ctx.rank == 1 and end > 20:
                os.kill(os.getpid(), signal.SIGKILL)
            result = trainer.fit(args["data"], epochs=100, steps=end)
        loaded = sorted(m for m in sys.modules if m.startswith("sparktrain"))
        if ctx.is_chief:
            import mlflow

            with mlflow.start_run():  # MLFLOW_RUN_ID: the job's run
                mlflow.log_metric("user/generation", ctx.generation)
        return {"resumed_from": result.resumed_from, "modules": loaded}

    return main_fun


def test_a_restarted_job_goes_on_in_the_same_run_with_its_restart_logged(spark, tracking, tmp_path):
    data = write_tfrecords(f"{tmp_path}/data", dense_table(2_000, seed=4, features=4), files=2)
    experiment = f"restart-{uuid.uuid4().hex[:8]}"
    callback = MLflowCallback(experiment_name=experiment)
    features = FeatureSpec(dense=tuple(f"f{j:02d}" for j in range(4)))
    args = {"features": features, "data": data, "model_dir": f"{tmp_path}/model"}
    with st.Cluster.run(
        spark, _killed_once(), args, 2, log=False, restart_backoff=0.1, callbacks=[callback]
    ) as job:
        chief = job.wait()
        restarts = job.restarts
    resumed_from = chief["resumed_from"]
    # The callback the chief unpickled loaded nothing of the driver's side.
    assert "sparktrain.tracking.callback" in chief["modules"]
    assert driver_side(chief["modules"]) == []
    assert len(restarts) == 1
    assert resumed_from == 20

    client = mlflow.MlflowClient(tracking)
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert run.info.run_id == callback.run_id
    assert run.info.status == "FINISHED"
    assert _history(client, run.info.run_id, "restarts") == [(restarts[0].last_step or 0, 1.0)]
    listed = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/sparktrain/restarts.json"))
    assert [(r["generation"], r["cause"]) for r in listed["restarts"]] == [(0, restarts[0].cause)]
    assert run.data.tags["sparktrain.restarts"] == "1"
    # Both generations' chiefs logged progress into it: the second one from its checkpoint on.
    steps = [s for s, _ in _history(client, run.info.run_id, "loss")]
    assert 40 in steps, steps
    assert min(steps) <= 20, steps
    assert [v for _, v in _history(client, run.info.run_id, "fit/resumed_from")][-1] == 20.0
    # Each fit call logs the workers it trains with, in both generations.
    workers = _history(client, run.info.run_id, "workers")
    assert {v for _, v in workers} == {2.0}
    assert max(step for step, _ in workers) >= 20, workers
    assert _history(client, run.info.run_id, "user/generation") == [(0, 1.0)]
    # The chief's fit calls took steps=10, 20, 30, 40: the parameter keeps the first, a tag the latest.
    assert run.data.params["fit.steps"] == "10"
    assert run.data.tags["fit.steps"] == "40"


def test_a_cross_validator_logs_one_child_run_per_fit(spark, tracking):
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from sparktrain.ml import Classifier

    df = spark.createDataFrame(_table(1_200, seed=5)).repartition(2).cache()
    mlflow.set_experiment(f"cv-{uuid.uuid4().hex[:8]}")
    parent = mlflow.start_run()
    callback = MLflowCallback(parent_run_id=parent.info.run_id)
    classifier = Classifier(
        model="wide_deep",
        featuresCol=["x1", "x2"],
        categoricalCols=["shop", "city"],
        buckets=64,
        hidden=[8],
        batchSize=64,
        trainOptions={"callbacks": [callback], "log": False},
    )
    grid = ParamGridBuilder().addGrid(classifier.learningRate, [0.01, 0.05]).build()
    cv = CrossValidator(
        estimator=classifier,
        estimatorParamMaps=grid,
        evaluator=BinaryClassificationEvaluator(),
        numFolds=2,
        seed=7,
    )
    with parent:
        cv.fit(df)
    client = mlflow.MlflowClient(tracking)
    runs = client.search_runs([parent.info.experiment_id])
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    # 2 settings x 2 folds, then the best setting on all the data.
    assert len(children) == 5
    assert len(runs) == 6
    assert all(r.info.status == "FINISHED" for r in children)
    rates = sorted(float(r.data.params["optimizer.rule.lr"]) for r in children)
    assert rates.count(0.01) >= 2
    assert rates.count(0.05) >= 2
    assert all(r.data.params["num_workers"] == "1" for r in children)


def test_a_registered_model_scores_through_pyfunc_and_spark_udf_as_predict_does(
    spark, trained, tracking, tmp_path
):
    from pyspark.sql import functions as F

    export_dir = trained["result"].export_dir
    table = _table(300, seed=9)
    df = spark.createDataFrame(table).repartition(2)
    expected = (
        st.predict(spark, export_dir, df).select("label", "x1", "x2", "shop", "city", "score").toPandas()
    )

    name = f"ctr-{uuid.uuid4().hex[:8]}"
    info = log_model(export_dir, input_example=df, registered_model_name=name, run_id=trained["run_id"])
    assert info.run_id == trained["run_id"]
    run = mlflow.MlflowClient(tracking).get_run(trained["run_id"])
    assert run.info.status == "FINISHED"
    # In the run's experiment, not MLflow's current one.
    assert (
        mlflow.MlflowClient(tracking).get_logged_model(info.model_id).experiment_id == run.info.experiment_id
    )
    uri = f"models:/{name}/1"

    model = mlflow.pyfunc.load_model(uri)
    inputs = [c.name for c in model.metadata.get_input_schema().inputs]
    assert inputs == ["x1", "x2", "shop", "city"]  # the features alone; ids as doubles, nulls taken
    assert model.metadata.saved_input_example_info is not None
    features = expected.drop(columns=["score"])
    scores = model.predict(features)["score"].to_numpy(np.float32)
    # The same engine on the same rows, but not in the same batches: predict scores each Spark
    # partition (about 150 rows here), pyfunc all 300 at once. The gemm behind the engine picks
    # its kernel by shape (a one-output layer: a dot product per row up to 256 rows, a
    # matrix-vector kernel beyond), and the two sum in another order: a score may differ in
    # its last bit (1.2e-7), which no fixed batching on this side could rule out.
    np.testing.assert_allclose(scores, expected["score"].to_numpy(np.float32), rtol=0, atol=1e-6)

    udf = mlflow.pyfunc.spark_udf(spark, uri, result_type="float", env_manager="local")
    scored = df.withColumn("udf", udf(F.struct(*inputs))).select("x1", "x2", "udf").toPandas()
    merged = scored.merge(expected, on=["x1", "x2"])
    assert len(merged) == len(expected)
    udf_scores = merged["udf"].to_numpy(np.float32)
    np.testing.assert_allclose(udf_scores, merged["score"].to_numpy(np.float32), rtol=0, atol=1e-6)

    # Where sparktrain is not installed, the model's ONNX file scores it.
    features.to_parquet(f"{tmp_path}/features.parquet")
    script = f"""
import sys
sys.modules["sparktrain"] = None  # as if not installed: "import sparktrain" raises ImportError
import mlflow, pandas as pd
model = mlflow.pyfunc.load_model({uri!r})
frame = pd.read_parquet({f"{tmp_path}/features.parquet"!r})
assert model.get_raw_model().engine == "onnx", model.get_raw_model().engine
model.predict(frame).to_parquet({f"{tmp_path}/onnx.parquet"!r})
"""
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import pandas as pd

    onnx_scores = pd.read_parquet(f"{tmp_path}/onnx.parquet")["score"].to_numpy(np.float32)
    np.testing.assert_allclose(onnx_scores, expected["score"].to_numpy(np.float32), rtol=0, atol=1e-5)
