"""What needs no Spark and no tracking server: the training hooks of a trainer alone, in
order and with what they promise; callbacks refused by name; and MLflow as an optional
dependency (without it, sparktrain imports and trains as before, and asking for MLflow says
which package to install)."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
