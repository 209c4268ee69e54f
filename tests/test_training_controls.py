"""The engine's training controls from Python, in one process (``Trainer(ctx=None)``):
learning-rate schedules, clipping, penalties, class weights, early stopping with the best model
kept, the chief's evaluation hook, regression, DCN and multi-hot list columns. Each control's
effect is checked against what it promises; bad settings are refused naming the parameter."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparktrain as st
from sparktrain.errors import InvalidArgumentError
from sparktrain.prediction import score_batch
from sparktrain.training import FeatureSpec, Metrics, Trainer

FEATURES = {"dense": ["x0", "x1"], "categorical": {"shop": 30}}


def table(rows: int, seed: int = 0, positives: float = 0.5) -> pa.Table:
    """Rows whose label follows x0, x1 and the shop; ``positives`` sets the share of 1s."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 2)).astype(np.float32)
    shop = rng.integers(0, 20, rows)
    score = x[:, 0] - 0.5 * x[:, 1] + (shop % 3 == 0)
    label = (score > np.quantile(score, 1 - positives)).astype(np.int64)
    lengths = rng.integers(0, 4, rows)
    tags = [rng.integers(0, 8, n).tolist() for n in lengths]
    return pa.table({"label": label, "x0": x[:, 0], "x1": x[:, 1], "shop": shop, "tags": tags})


@pytest.fixture
def data(tmp_path):
    pq.write_table(table(4_000), tmp_path / "train.parquet")
    pq.write_table(table(1_000, seed=9), tmp_path / "eval.parquet")
    return tmp_path


def trainer(**settings) -> Trainer:
    base = {"model": "wide_deep", "features": FEATURES, "hidden": [8], "batch_size": 100, "shuffle_buffer": 0}
    return Trainer(**{**base, "seed": 3, "log_every": 1, **settings})


def test_a_schedule_warms_up_then_decays_the_logged_rate(data):
    schedule = {"name": "cosine", "steps": 30, "alpha": 0.1, "warmup_steps": 10}
    result = trainer(learning_rate=0.01, lr_schedule=schedule).fit(str(data / "train.parquet"))
    rates = [line["learning_rate"] for line in result.history]
    assert rates[0] == pytest.approx(0.001)  # step 1 of 10 warm-up steps
    assert rates[9] == pytest.approx(0.01)
    assert rates[24] == pytest.approx(0.01 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 15 / 30))))
    assert rates[39] == pytest.approx(0.001)  # alpha once the decay is done


def test_penalties_shrink_the_weights_and_clipping_bounds_the_steps(data):
    path = str(data / "train.parquet")
    plain = trainer(learning_rate=0.05)
    plain.fit(path)
    heavy = trainer(learning_rate=0.05, regularization={"kernel": {"l2": 0.5}, "embedding": {"l2": 0.5}})
    heavy.fit(path)
    assert np.linalg.norm(heavy.weights()) < 0.5 * np.linalg.norm(plain.weights())

    # SGD of rate 1 with the gradient clipped to 1e-3: 40 steps move the weights at most 0.04.
    start = trainer(optimizer="sgd", learning_rate=1.0, clip_norm=1e-3)
    start.fit(path, steps=0)
    clipped = trainer(optimizer="sgd", learning_rate=1.0, clip_norm=1e-3)
    clipped.fit(path)
    moved = np.linalg.norm(clipped.weights() - start.weights())
    assert 0.01 < moved <= 40 * 1e-3 + 1e-6


def test_class_weights_tilt_the_model_towards_the_weighted_class(data):
    pq.write_table(table(4_000, positives=0.1), data / "rare.parquet")
    held_out = table(2_000, seed=2, positives=0.1)
    positive = held_out["label"].to_numpy() == 1
    scores = {}
    for weights in (None, {1: 9.0}):
        model = trainer(learning_rate=0.05, class_weight=weights)
        model.fit(str(data / "rare.parquet"), epochs=2)
        export = model.export(str(data / f"export-{weights is None}"))
        scores[weights is None] = score_batch(export, held_out.to_batches()[0]).column("score").to_numpy()
    plain, weighted = scores[True], scores[False]
    # Weighing the rare positives 9:1 raises every score: the positives' most.
    assert weighted[positive].mean() > plain[positive].mean() + 0.1
    assert weighted[~positive].mean() > plain[~positive].mean()
    assert (weighted[positive] > 0.5).mean() > (plain[positive] > 0.5).mean()


def test_early_stopping_stops_and_ends_with_the_best_model(data):
    train, held_out = str(data / "train.parquet"), str(data / "eval.parquet")
    model_dir = str(data / "model")
    # No later evaluation beats the first by 10: the patience of one evaluation runs out at the third.
    stopping = {"monitor": "loss", "patience": 1, "min_delta": 10.0}
    model = trainer(learning_rate=0.05, model_dir=model_dir)
    result = model.fit(train, epochs=5, eval_data=held_out, eval_every=5, early_stopping=stopping)
    assert result.stopped_early
    assert result.steps == 15
    assert [step for step, _ in result.evaluations] == [5, 10, 15]
    assert result.best == (5, pytest.approx(result.evaluations[0][1].loss))
    assert result.best_checkpoint == model_dir + "/best"
    # The figures are those of the model it ends with: the best evaluation's, not the last's.
    assert result.restored_best
    assert result.metrics == result.evaluations[0][1]
    assert result.metrics == model.evaluate(held_out)

    # The model ends with the weights of step 5: those of a run of 5 steps.
    five = trainer(learning_rate=0.05)
    five.fit(train, steps=5)
    np.testing.assert_array_equal(model.weights(), five.weights())
    # Without restore_best, the model and its figures are the last evaluation's.
    last = trainer(learning_rate=0.05).fit(
        train, epochs=5, eval_data=held_out, eval_every=5, early_stopping={**stopping, "restore_best": False}
    )
    assert not last.restored_best
    assert last.metrics == last.evaluations[-1][1]
    best = st.fs.glob(model_dir + "/best/ckpt-*")
    assert [info.path.rsplit("/", 1)[1] for info in best] == ["ckpt-0000000005-g0"]


def test_the_chiefs_hook_sees_every_evaluation_and_can_stop(data):
    seen: list[tuple[int, Metrics]] = []

    def hook(step: int, metrics: Metrics) -> bool:
        seen.append((step, metrics))
        return step >= 20

    result = trainer().fit(
        str(data / "train.parquet"),
        epochs=3,
        eval_data=str(data / "eval.parquet"),
        eval_every=10,
        on_eval=hook,
    )
    assert [step for step, _ in seen] == [10, 20]
    assert seen[0][1].examples == 1_000
    assert seen[0][1].auc is not None
    assert (result.steps, result.stopped_early) == (20, True)


def test_regression_learns_a_number_and_scores_it(data):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3_000, 2)).astype(np.float32)
    target = 2 * x[:, 0] - x[:, 1] + 0.05 * rng.standard_normal(3_000)
    pq.write_table(pa.table({"y": target, "x0": x[:, 0], "x1": x[:, 1]}), data / "regression.parquet")
    model = Trainer(
        model="mlp",
        features={"dense": ["x0", "x1"], "label": "y"},
        loss="mean_squared_error",
        hidden=[16],
        learning_rate=0.01,
    )
    assert model.config.loss == "mean_squared_error"
    model.fit(str(data / "regression.parquet"), epochs=20)
    metrics = model.evaluate(str(data / "regression.parquet"))
    assert metrics.accuracy is None
    assert metrics.auc is None
    assert metrics.loss < 0.05
    export = model.export(str(data / "export"))
    scores = score_batch(export, pa.table({"x0": [1.0, 0.0], "x1": [0.0, 1.0]}).to_batches()[0]).column(
        "score"
    )
    np.testing.assert_allclose(scores.to_numpy(), [2.0, -1.0], atol=0.2)


def test_dcn_and_multi_hot_lists_train_and_score(data):
    st.tfrecord.write_batches(str(data / "train.tfrecord"), table(4_000))
    model = Trainer(model="dcn", cross_layers=2, hidden=[8], buckets=40, batch_size=100, learning_rate=0.02)
    model.fit(str(data / "train.tfrecord"), epochs=3)
    # The list column is inferred as multi-hot, mean-pooled.
    assert model.features == FeatureSpec(
        dense=("x0", "x1"), categorical=(("shop", 40),), multi_hot=(("tags", 40, "mean"),), label="label"
    )
    assert model.evaluate(str(data / "train.tfrecord")).auc > 0.85
    export = model.export(str(data / "export"))
    scored = score_batch(export, table(10, seed=5).drop(["label"]).to_batches()[0])
    assert scored["score"].null_count == 0


def test_bad_control_settings_are_refused_by_name(data):
    with pytest.raises(InvalidArgumentError, match="lr_schedule: unknown field `stepz`"):
        Trainer(lr_schedule={"name": "step", "every": 10, "rate": 0.5, "stepz": 1})
    with pytest.raises(InvalidArgumentError, match="lr_schedule: rate=2"):
        Trainer(lr_schedule={"name": "exponential", "every": 10, "rate": 2.0})
    with pytest.raises(InvalidArgumentError, match="clip_norm=0"):
        Trainer(clip_norm=0)
    with pytest.raises(InvalidArgumentError, match='gradient_wire="fp8" is not a wire format'):
        Trainer(gradient_wire="fp8")
    with pytest.raises(InvalidArgumentError, match="gradient_wire=16: must be a str"):
        Trainer(gradient_wire=16)  # type: ignore[arg-type]
    assert Trainer().config.gradient_wire == "f32"
    assert Trainer(gradient_wire="bf16").config.gradient_wire == "bf16"
    with pytest.raises(InvalidArgumentError, match="overlap_gradients='no': must be True or False"):
        Trainer(overlap_gradients="no")  # type: ignore[arg-type]
    assert Trainer().config.overlap_gradients is True
    assert Trainer(overlap_gradients=False).config.overlap_gradients is False
    with pytest.raises(InvalidArgumentError, match=r"kernel\.l2=-1"):
        Trainer(regularization={"kernel": {"l2": -1.0}})
    with pytest.raises(InvalidArgumentError, match="class_weight has 3 weights, the model has 2 classes"):
        Trainer(class_weight=[1.0, 2.0, 3.0])
    with pytest.raises(InvalidArgumentError, match="class 4 is not among the 3 classes"):
        Trainer(classes=3, class_weight={4: 2.0})
    with pytest.raises(InvalidArgumentError, match="regression model has no classes"):
        Trainer(loss="mean_squared_error", class_weight=[1.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="loss 'hinge'"):
        Trainer(loss="hinge")
    with pytest.raises(InvalidArgumentError, match="cross_layers is a setting of 'dcn'"):
        Trainer(model="mlp", cross_layers=2)
    with pytest.raises(InvalidArgumentError, match="pooling 'max'"):
        FeatureSpec.of({"multi_hot": [("tags", 10, "max")]})
    path = str(data / "train.parquet")
    with pytest.raises(InvalidArgumentError, match=r"early_stopping.*needs eval_data"):
        trainer().fit(path, early_stopping={"monitor": "auc"})
    with pytest.raises(InvalidArgumentError, match="early_stopping: unknown variant `f1`"):
        trainer().fit(path, eval_data=path, early_stopping={"monitor": "f1"})
    with pytest.raises(InvalidArgumentError, match="mean_squared_error has no 'auc' to watch"):
        trainer(loss="mean_squared_error").fit(path, eval_data=path, early_stopping={"monitor": "auc"})
    # Settings that would do nothing: an evaluation rate without data, early stopping with one
    # evaluation at the end, and a bool where a count goes.
    with pytest.raises(InvalidArgumentError, match=r"^eval_every=5: needs eval_data"):
        trainer().fit(path, eval_every=5)
    with pytest.raises(InvalidArgumentError, match=r"^early_stopping=.*needs eval_every"):
        trainer().fit(path, eval_data=path, early_stopping={"monitor": "auc"})
    with pytest.raises(InvalidArgumentError, match=r"^eval_every=True: must be an integer"):
        trainer().fit(path, eval_data=path, eval_every=True)
    with pytest.raises(InvalidArgumentError, match="on_eval=3"):
        trainer().fit(path, on_eval=3)  # type: ignore[arg-type]
