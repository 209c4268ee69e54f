"""The training API in one process (``Trainer(ctx=None)``): Parquet and TFRecord inputs train
alike, softmax models score every class, the feature spec is inferred from the data and saved
with the export, embedding tables kept on the device train, checkpoint and export as tables in
memory do, and bad input is refused naming what is wrong."""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparktrain as st
from sparktrain.errors import InvalidArgumentError, TFRecordCorruptError
from sparktrain.prediction import score_batch
from sparktrain.training import FeatureSpec, Trainer


def table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 3)).astype(np.float32)
    shop = rng.integers(0, 20, rows)
    city = np.array(["paris", "lyon", "nice"])[rng.integers(0, 3, rows)]
    label = ((x[:, 0] + (shop % 3 == 0) - 0.5 * x[:, 1]) > 0.3).astype(np.int64)
    return pa.table({"label": label, "x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2], "shop": shop, "city": city})


def test_parquet_and_tfrecord_inputs_train_to_the_same_weights(tmp_path):
    data = table(3_000)
    pq.write_table(data, tmp_path / "rows.parquet")
    st.tfrecord.write_batches(str(tmp_path / "rows.tfrecord"), data)
    # Inference orders columns as each format stores them: give the spec.
    features = {"dense": ["x0", "x1", "x2"], "categorical": {"shop": 30, "city": 10}}
    weights = []
    for path in ("rows.parquet", "rows.tfrecord"):
        trainer = Trainer(
            model="wide_deep", features=features, hidden=[8], shuffle_buffer=0, batch_size=100, seed=3
        )
        result = trainer.fit(str(tmp_path / path), epochs=2)
        assert result.examples == 6_000
        weights.append(trainer.weights())
    np.testing.assert_array_equal(weights[0], weights[1])


def test_the_inferred_spec_travels_with_the_export(tmp_path):
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), table(2_000))
    trainer = Trainer(model="wide_deep", hidden=[8], buckets=50, learning_rate=0.02, batch_size=64)
    trainer.fit(str(tmp_path / "train.tfrecord"), epochs=3)
    assert trainer.features == FeatureSpec(
        dense=("x0", "x1", "x2"), categorical=(("city", 50), ("shop", 50)), label="label"
    )
    trainer.export(str(tmp_path / "export"))
    model = st._native.ExportedModel(str(tmp_path / "export"))
    assert FeatureSpec.from_native(model.features) == trainer.features
    metrics = trainer.evaluate(str(tmp_path / "train.tfrecord"))
    assert metrics.examples == 2_000
    assert metrics.auc > 0.85


def test_a_softmax_model_scores_every_class(tmp_path):
    data = table(2_000)
    data = data.set_column(0, "label", pa.array(data["shop"].to_numpy() % 3))
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), data)
    features = {"dense": ["x0"], "label": "label"}
    trainer = Trainer(model="mlp", features=features, classes=3, hidden=[4])
    trainer.fit(str(tmp_path / "train.tfrecord"))
    export = trainer.export(str(tmp_path / "export"))
    scored = score_batch(export, data.drop(["label"]).to_batches()[0], "probabilities")
    probabilities = np.array(scored["probabilities"].to_pylist())
    assert probabilities.shape == (data.num_rows, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert trainer.evaluate(str(tmp_path / "train.tfrecord")).auc is None


def test_tables_and_the_update_kept_on_the_device_give_the_same_model(tmp_path):
    # On the CPU the device's tensor code runs where a GPU would run it, bit for bit.
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), table(2_000))
    features = {"dense": ["x0", "x1", "x2"], "categorical": {"shop": 30, "city": 10}}
    outcome = {}
    for on_device, update in ((False, None), (True, None), (True, True)):
        trainer = Trainer(
            model="deep_fm",
            features=features,
            hidden=[8],
            shuffle_buffer=0,
            batch_size=100,
            seed=3,
            optimizer="adagrad",
            learning_rate=0.1,
            clip_norm=0.5,
            tables_on_device=on_device,
            update_on_device=update,
        )
        assert trainer.config.tables_on_device is on_device
        assert trainer.config.update_on_device is update
        trainer.fit(str(tmp_path / "train.tfrecord"), epochs=2)
        export = trainer.export(str(tmp_path / f"export-{on_device}-{update}"))
        scored = score_batch(export, table(300, seed=9).drop(["label"]).to_batches()[0], "probabilities")
        outcome[on_device, update] = (np.asarray(trainer.weights()), scored["probabilities"].to_pylist())
    for place in ((True, None), (True, True)):
        np.testing.assert_array_equal(outcome[place][0], outcome[False, None][0])
        assert outcome[place][1] == outcome[False, None][1]
    with pytest.raises(InvalidArgumentError, match="tables_on_device"):
        Trainer(tables_on_device="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="update_on_device"):
        Trainer(update_on_device=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"update_on_device=True .* tables_on_device=False"):
        Trainer(tables_on_device=False, update_on_device=True)


def test_bad_arguments_are_refused_by_name(tmp_path):
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), table(100))
    with pytest.raises(InvalidArgumentError, match="optimizer 'adamax'"):
        Trainer(optimizer="adamax")
    with pytest.raises(InvalidArgumentError, match="model 'gbdt'"):
        Trainer(model="gbdt")
    with pytest.raises(InvalidArgumentError, match="unknown training arguments \\['lr'\\]"):
        Trainer(lr=0.1)
    with pytest.raises(InvalidArgumentError, match="wide_deep is a binary model"):
        Trainer(model="wide_deep", classes=4)
    if not st._native.cuda_report()["built"]:
        with pytest.raises(InvalidArgumentError, match="this sparktrain was built without CUDA"):
            Trainer(device="cuda").fit(str(tmp_path / "train.tfrecord"))
    with pytest.raises(InvalidArgumentError, match="label column 'clicked' is not in the data"):
        Trainer(label="clicked").fit(str(tmp_path / "train.tfrecord"))
    # A label given twice, differently, would train on one of them without a word.
    with pytest.raises(InvalidArgumentError, match="label='y': features names the label 'label'"):
        Trainer(features={"dense": ["x0"]}, label="y")
    assert Trainer(features={"dense": ["x0"], "label": "y"}, label="y") is not None
    nan = table(100).set_column(1, "x0", pa.array([float("nan")] * 100, pa.float32()))
    st.tfrecord.write_batches(str(tmp_path / "nan.tfrecord"), nan)
    with pytest.raises(InvalidArgumentError, match="'x0' holds NaN in row 0"):
        Trainer(features={"dense": ["x0"]}).fit(str(tmp_path / "nan.tfrecord"))
    missing = Trainer(features={"dense": ["x0", "price"]})
    with pytest.raises(InvalidArgumentError, match="feature column 'price' is not in the data"):
        missing.fit(str(tmp_path / "train.tfrecord"))


def test_a_dense_only_model_refuses_columns_it_would_leave_out(tmp_path, caplog):
    for model in ("logistic_regression", "mlp"):
        with pytest.raises(
            InvalidArgumentError, match=rf"^features=.*model='{model}' reads dense columns only; shop"
        ):
            Trainer(model=model, features={"dense": ["x0"], "categorical": {"shop": 10}})
    # An inferred spec says which columns it leaves out.
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), table(100))
    with caplog.at_level(logging.WARNING, logger="sparktrain"):
        Trainer(model="logistic_regression").fit(str(tmp_path / "train.tfrecord"))
    assert "reads the floating-point columns only: city, shop (not floats) are left out" in caplog.text


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        # Each left the weights NaN after a "successful" fit, or was refused without a name.
        ({"optimizer": "adam", "beta1": 1.5}, "beta1=1.5 must be a number from 0 up to"),
        ({"optimizer": "adam", "beta2": -0.1}, "beta2=-0.1 must be"),
        ({"optimizer": "adam", "eps": -1}, "eps=-1 must be a number above 0"),
        ({"optimizer": {"name": "momentum", "momentum": 2.0}}, "momentum=2 must be"),
        (
            {"optimizer": "adagrad", "initial_accumulator": -1.0},
            "initial_accumulator=-1 must be a number 0 or more",
        ),
        ({"optimizer": "sgd", "weight_decay": -1}, "weight_decay=-1 must be"),
        ({"wide_optimizer": "ftrl", "l1": -1}, "l1=-1 must be"),
        ({"learning_rate": "0.1"}, r"^learning_rate='0\.1': must be a number"),
        ({"optimizer": {"name": "adam", "learning_rate": "x"}}, r"^optimizer\['learning_rate'\]='x'"),
        ({"hidden": [64, -5]}, r"^hidden\[1\]=-5: must be >= 1"),
        ({"sparse_tables": "yes"}, r"^sparse_tables='yes'"),
        ({"tensorboard_dir": ["a"]}, r"^tensorboard_dir=\['a'\]: must be a str"),
        ({"model_dir": 5}, r"^model_dir=5: must be a str"),
    ],
)
def test_settings_out_of_range_or_of_the_wrong_type_are_refused_by_name(arguments, named):
    with pytest.raises(InvalidArgumentError, match=named):
        Trainer(**arguments)


def test_a_damaged_file_is_named_with_its_offset(tmp_path):
    path = tmp_path / "train.tfrecord"
    st.tfrecord.write_batches(str(path), table(500))
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    features = {"dense": ["x0", "x1"], "label": "label"}
    with pytest.raises(TFRecordCorruptError) as damage:
        Trainer(features=features, shuffle_buffer=0).fit(str(path))
    assert damage.value.path.endswith("train.tfrecord")
    assert damage.value.offset > 0


def test_a_run_shorter_than_log_every_still_logs_its_loss_at_its_last_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), table(500))
    trainer = Trainer(
        model="logistic_regression",
        features={"dense": ["x0", "x1", "x2"]},
        batch_size=100,
        log_every=100,
        tensorboard_dir=str(tmp_path / "tb"),
    )
    result = trainer.fit(str(tmp_path / "train.tfrecord"), epochs=1)
    assert result.steps == 5
    assert [line["step"] for line in result.history] == [5]
    assert result.loss == pytest.approx(result.history[0]["loss"])
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(5, pytest.approx(result.loss, rel=1e-6))]


def test_a_model_dir_or_a_checkpoint_given_as_the_export_is_told_where_the_export_is(tmp_path):
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), table(300))
    model_dir = str(tmp_path / "run")
    trainer = Trainer(model="logistic_regression", features={"dense": ["x0"]}, model_dir=model_dir)
    trainer.fit(str(tmp_path / "train.tfrecord"), epochs=1)
    trainer.export(f"{model_dir}/export")
    (checkpoint,) = (p for p in (tmp_path / "run").iterdir() if p.name.startswith("ckpt-"))
    with pytest.raises(
        st.errors.PathNotFoundError, match=f"is a training run's model_dir: its export is {model_dir}/export"
    ):
        st.exported.version(model_dir)
    with pytest.raises(st.errors.PathNotFoundError, match="is a checkpoint, not an export"):
        st.servable.export_onnx(str(checkpoint), str(tmp_path / "model.onnx"))
    # Anything else is just not there.
    with pytest.raises(st.errors.PathNotFoundError, match=r"model\.json") as missing:
        st.exported.version(str(tmp_path))
    assert "training run" not in str(missing.value)


@pytest.mark.parametrize("damage", ["garbage", "cut"])
def test_a_damaged_table_file_is_named_when_its_rows_are_read(tmp_path, damage):
    from sparktrain.contents import TABLES, read_tables
    from sparktrain.errors import CheckpointError

    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), table(300))
    features = {"dense": ["x0"], "categorical": {"shop": 30}}
    trainer = Trainer(model="wide_deep", features=features, hidden=[4], batch_size=100)
    trainer.fit(str(tmp_path / "train.tfrecord"), epochs=1)
    trainer.export(str(tmp_path / "export"))
    (weights,) = (tmp_path / "export").glob("*.safetensors")
    spec = FeatureSpec.of(features)
    assert sum(b.num_rows for b in read_tables(str(weights), TABLES["wide_deep"], spec, 16)) == 2 * 30
    data = weights.read_bytes()
    weights.write_bytes(b"\x01\x02\x03" if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=f"^{weights}: ") as error:
        list(read_tables(str(weights), TABLES["wide_deep"], spec, 16))
    assert "damaged" in str(error.value) or "too short" in str(error.value)


def test_an_export_refuses_ids_of_another_kind_than_in_training(tmp_path):
    data = table(600)
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), data)
    trainer = Trainer(model="wide_deep", features={"dense": ["x0"], "categorical": {"shop": 30, "city": 8}})
    trainer.fit(str(tmp_path / "train.tfrecord"), epochs=1)
    export = trainer.export(str(tmp_path / "export"))
    config = json.loads((tmp_path / "export" / "model.json").read_text())
    assert config["key_kinds"] == {"city": "bytes", "shop": "integer"}
    features = data.drop(["label"])
    assert len(score_batch(export, features.to_batches()[0])) == 600
    # The integer 5 and the string "5" are other ids: the scores would be another model's.
    as_text = features.set_column(
        features.schema.get_field_index("shop"), "shop", data["shop"].cast(pa.string())
    )
    with pytest.raises(
        InvalidArgumentError,
        match="column 'shop' holds strings or bytes, but the model was trained on integers",
    ):
        score_batch(export, as_text.to_batches()[0])
