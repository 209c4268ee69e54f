"""The contract between Python and the compiled module, without Spark or HDFS: results come
back as typed objects, the engine's defaults are the ones the Python API shows, bad arguments
are refused naming the parameter, and each core error arrives as its ``sparktrain.errors``
class with the attributes that name what is at fault."""

from __future__ import annotations

import inspect
import socket
from pathlib import Path

import pyarrow as pa
import pytest

import sparktrain as st
from sparktrain import _native, errors
from sparktrain.training import DEFAULTS, FeatureSpec, Trainer


def rows(n: int = 200) -> pa.Table:
    x = [float(i % 7) / 7 for i in range(n)]
    return pa.table({"label": [i % 2 for i in range(n)], "x": x, "shop": [i % 5 for i in range(n)]})


# --- options: one set of defaults, checked before any data is read ---------------------------


def test_the_python_signature_shows_the_engines_defaults():
    signature = inspect.signature(Trainer)
    engine = _native.TrainerConfig()
    for name in ("batch_size", "shuffle_buffer", "prefetch", "seed", "keep_checkpoints", "max_shard_bytes"):
        assert signature.parameters[name].default == getattr(engine, name), name
    for name in ("log_every", "threads", "device", "sparse_tables", "model", "optimizer"):
        assert signature.parameters[name].default == getattr(engine, name), name
    for name in ("shard_tables", "table_budget_bytes"):
        assert signature.parameters[name].default == getattr(engine, name), name
    assert (engine.shard_tables, engine.table_budget_bytes) == ("auto", None)
    assert signature.parameters["buckets"].default == _native.DEFAULT_BUCKETS
    assert inspect.signature(st.train).parameters["batch_size"].default == DEFAULTS.batch_size


def test_the_configuration_holds_what_was_given_and_defaults_the_rest(tmp_path):
    trainer = Trainer(model="deep_fm", optimizer="adamw", batch_size=64, model_dir=str(tmp_path), classes=1)
    config = trainer.config
    assert (config.model, config.optimizer, config.batch_size, config.model_dir) == (
        "deep_fm",
        "adamw",
        64,
        str(tmp_path),
    )
    assert (config.loss, config.prefetch) == ("binary_cross_entropy", DEFAULTS.prefetch)
    assert Trainer(model="mlp", classes=3).config.loss == "softmax_cross_entropy"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"batch_size": 0}, "batch_size=0"),
        ({"keep_checkpoints": 0}, "keep_checkpoints=0"),
        ({"checkpoint_every": 0}, "checkpoint_every=0"),
        ({"log_every": 0}, "log_every=0"),
        ({"threads": 0}, "threads=0"),
        ({"device": "tpu"}, "device 'tpu'"),
        ({"optimizer": "adamax"}, "optimizer 'adamax'"),
        ({"optimizer": {"learning_rate": 0.1}}, "needs a 'name'"),
        ({"learning_rate": -0.5}, "learning_rate=-0.5"),
        ({"model": "gbdt"}, "model 'gbdt'"),
        ({"hidden": [8, 0]}, r"hidden\[1\]=0: must be >= 1"),
        ({"classes": 0}, "classes=0"),
        ({"buckets": 0}, "buckets=0"),
        ({"lr": 0.1}, "unknown training arguments \\['lr'\\]"),
        ({"shard_tables": "maybe"}, "shard_tables='maybe'"),
        ({"table_budget_bytes": 0}, "table_budget_bytes=0"),
        ({"batch_size": -1}, "batch_size=-1: must be >= 0"),
        ({"seed": 1.5}, r"seed=1\.5: must be an integer"),
        ({"classes": "2"}, "classes='2': must be an integer"),
        ({"hidden": "64"}, "hidden='64': must be a sequence"),
        ({"features": {"dense": "price"}}, "give a list of columns"),
        ({"features": {"dense": ["x"], "categorical": {"shop": 0}}}, "'shop' has 0 buckets"),
        ({"features": {"dense": ["x"], "labels": "y"}}, "unknown feature spec keys \\['labels'\\]"),
    ],
)
def test_bad_arguments_are_refused_when_the_trainer_is_built(arguments, named):
    with pytest.raises(errors.InvalidArgumentError, match=named):
        Trainer(**arguments)


def test_train_refuses_bad_arguments_before_touching_spark():
    # No SparkSession exists: the checks must come first.
    with pytest.raises(errors.InvalidArgumentError, match="unknown training arguments \\['epoch'\\]"):
        st.train(None, "/data", epoch=3)
    with pytest.raises(errors.InvalidArgumentError, match="num_workers=0"):
        st.train(None, "/data", num_workers=0)
    with pytest.raises(errors.InvalidArgumentError, match="eval_every=0"):
        st.train(None, "/data", eval_every=0)
    with pytest.raises(errors.InvalidArgumentError, match=r"epochs=2\.5: must be an integer"):
        st.train(None, "/data", epochs=2.5)
    with pytest.raises(errors.InvalidArgumentError, match="sharding='random'"):
        st.train(None, "/data", sharding="random")
    with pytest.raises(errors.InvalidArgumentError, match="data=42"):
        st.train(None, 42)


# --- typed results ------------------------------------------------------------------------------


def test_a_feature_spec_round_trips_through_the_engine():
    spec = FeatureSpec(
        dense=("x",), categorical=(("shop", 10), ("city", 4)), crossed=((("shop", "city"), 40),), label="y"
    )
    native = spec.to_native()
    assert isinstance(native, _native.FeatureSpec)
    assert FeatureSpec.from_native(native) == spec
    assert FeatureSpec.from_json(spec.to_json()) == spec
    assert FeatureSpec.of({"dense": ["x"], "categorical": {"shop": 10, "city": 4}}) == FeatureSpec(
        dense=("x",), categorical=(("shop", 10), ("city", 4))
    )


def test_the_inferred_spec_is_a_typed_object():
    spec = _native.infer_features(rows().schema, "label", 16)
    assert (spec.dense, spec.categorical, spec.label) == (["x"], [("shop", 16)], "label")


def test_fit_returns_typed_figures_and_progress_lines(tmp_path):
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), rows(400))
    lines: list[_native.LogLine] = []
    trainer = Trainer(model="logistic_regression", batch_size=50, log_every=2, shuffle_buffer=0)
    original = trainer._report
    trainer._report = lambda line: (lines.append(line), original(line))  # type: ignore[method-assign]
    result = trainer.fit(
        str(tmp_path / "train.tfrecord"), epochs=1, eval_data=str(tmp_path / "train.tfrecord")
    )
    assert (result.steps, result.new_steps, result.examples, result.epochs) == (8, 8, 400, 1)
    assert [line.step for line in lines] == [2, 4, 6, 8]
    assert all(isinstance(line, _native.LogLine) for line in lines)
    assert result.history[-1]["step"] == 8
    assert result.metrics is not None
    assert result.metrics.examples == 400


def test_tables_over_the_budget_are_refused_naming_size_budget_and_setting(tmp_path):
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), rows(100))
    assert Trainer(shard_tables=True).config.shard_tables == "on"
    assert Trainer(shard_tables="OFF", table_budget_bytes=5).config.table_budget_bytes == 5
    # 16 buckets: tables of 16 rows of 1 + 8 values, with Adam's two moments: 1728 bytes.
    small = {"model": "wide_deep", "buckets": 16, "batch_size": 50, "shuffle_buffer": 0}
    trainer = Trainer(**small, shard_tables="off", table_budget_bytes=1000)
    with pytest.raises(errors.InvalidArgumentError, match="shard_tables='auto' or 'on'") as refused:
        trainer.fit(str(tmp_path / "train.tfrecord"), epochs=1)
    assert (refused.value.needed, refused.value.budget) == (1728, 1000)  # type: ignore[attr-defined]
    assert refused.value.parameter == "table_budget_bytes"  # type: ignore[attr-defined]
    assert "1.69 KiB (1728 bytes)" in str(refused.value)
    # Sharded over one trainer (its share is every row), within a budget that holds them.
    result = Trainer(**small, shard_tables="on", table_budget_bytes=2000).fit(
        str(tmp_path / "train.tfrecord"), epochs=1
    )
    assert result.steps == 2


def test_listings_and_skipped_regions_are_typed(tmp_path):
    path = tmp_path / "a.tfrecord"
    st.tfrecord.write_batches(str(path), rows(50))
    [info] = st.fs.ls(str(tmp_path))
    assert (Path(info.path).name, info.size, info.is_dir) == ("a.tfrecord", path.stat().st_size, False)
    raw = bytearray(path.read_bytes())
    raw[20] ^= 0xFF
    path.write_bytes(bytes(raw))
    reader = st.tfrecord.RecordReader(str(path), skip_corrupt=True)
    list(reader)
    [region] = reader.skipped
    assert isinstance(region, _native.SkippedRecord)
    assert (region.offset, region.kind) == (0, "payload_crc_mismatch")
    # Mapping access still works, as it did when regions were dicts.
    assert (region["offset"], region["kind"]) == (region.offset, region.kind)


def test_the_rendezvous_reports_typed_events_and_task_infos():
    secret = _native.generate_secret()
    server = _native.Rendezvous("127.0.0.1", 0, 0, secret, 1, 0, 10.0, 10.0)
    try:
        client = _native.ControlClient(server.address, secret, 5.0)
        tasks, tf_config = client.register(0, 0, "127.0.0.1", 4242, "exec-1", 5000, 5001, ["0"], 5.0)
        assert tasks == [tasks[0]]
        assert (tasks[0].role, tasks[0].data_port, tasks[0].gpus) == ("chief", 5000, ["0"])
        assert '"chief"' in tf_config
        client.report(0, 7, [("loss", 0.5)], 5.0)
        seen: list[str] = []
        for event in server.events(1.0) + server.events(0.2):
            match event:
                case _native.Event.Registered(task_index=0, host=host, executor_id=executor):
                    seen.append(f"registered {host} {executor}")
                case _native.Event.Ready():
                    seen.append("ready")
                case _native.Event.Metrics(task_index=0, step=step, metrics=metrics):
                    seen.append(f"metrics {step} {metrics}")
        assert seen == ["registered 127.0.0.1 exec-1", "ready", "metrics 7 [('loss', 0.5)]"]
        intruder = _native.ControlClient(server.address, _native.generate_secret(), 5.0)
        with pytest.raises(errors.Unauthenticated):
            intruder.report(0, 1, [], 5.0)
        assert (server.refused_total(), len(server.refused())) == (1, 1)
        # A registered task is bound to its token: the secret alone does not act for it.
        assert client.token is not None
        other = _native.ControlClient(server.address, secret, 5.0)
        with pytest.raises(errors.Unauthenticated, match="task 0's calls must carry the token"):
            other.report(0, 8, [("loss", 0.4)], 5.0)
        other.use_token(client.token)
        other.report(0, 8, [("loss", 0.4)], 5.0)
    finally:
        server.close()
    with pytest.raises(errors.ClosedError, match="rendezvous is closed"):
        server.missing()


# --- errors: one class per fault, with the attributes that name it -----------------------------


def test_a_missing_path_is_path_not_found_with_its_path(tmp_path):
    with pytest.raises(errors.PathNotFoundError) as missing:
        st.fs.status(str(tmp_path / "nothing"))
    assert missing.value.path.endswith("nothing")
    assert isinstance(missing.value, FileNotFoundError)


def test_a_model_dir_that_cannot_be_written_is_a_storage_error_with_its_path(tmp_path):
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), rows())
    (tmp_path / "file").write_text("not a folder")
    trainer = Trainer(model="logistic_regression", model_dir=str(tmp_path / "file" / "model"))
    with pytest.raises(errors.StorageError) as failed:
        trainer.fit(str(tmp_path / "train.tfrecord"))
    assert "file/model" in failed.value.path


def test_a_damaged_checkpoint_index_is_a_checkpoint_error_naming_the_file(tmp_path):
    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), rows())
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "checkpoint.json").write_text("{not json")
    trainer = Trainer(model="logistic_regression", model_dir=str(tmp_path / "model"))
    with pytest.raises(errors.CheckpointError) as damaged:
        trainer.fit(str(tmp_path / "train.tfrecord"))
    assert damaged.value.path.endswith("model/checkpoint.json")


def test_another_models_checkpoint_is_a_mismatch_that_no_restart_retries(tmp_path):
    from sparktrain.cluster.failures import NOT_RETRYABLE
    from sparktrain.cluster.trainer.main import exit_code_for

    st.tfrecord.write_batches(str(tmp_path / "train.tfrecord"), rows())
    model_dir = str(tmp_path / "model")
    Trainer(model="logistic_regression", model_dir=model_dir).fit(str(tmp_path / "train.tfrecord"))
    wider = Trainer(model="mlp", model_dir=model_dir)
    with pytest.raises(errors.CheckpointMismatch) as mismatch:
        wider.fit(str(tmp_path / "train.tfrecord"))
    assert "the saved state does not fit" in str(mismatch.value)
    assert isinstance(mismatch.value, errors.CheckpointError)
    assert exit_code_for(mismatch.value) == NOT_RETRYABLE


def test_an_old_generation_saving_after_a_newer_one_is_generation_superseded(tmp_path):
    import pickle

    from sparktrain.cluster.failures import NOT_RETRYABLE
    from sparktrain.cluster.trainer.main import exit_code_for

    data = str(tmp_path / "train.tfrecord")
    st.tfrecord.write_batches(data, rows())
    model_dir = str(tmp_path / "model")
    config = _native.TrainerConfig(model="logistic_regression", model_dir=model_dir, batch_size=50)

    def generation(g: int) -> tuple[_native.Trainer, _native.Input]:
        input = _native.Input.files(data, 1, 0, config)
        features = _native.infer_features(input.schema, "label")
        return _native.Trainer(config, features, job="job-1", generation=g), input

    old, old_input = generation(0)
    old.fit(old_input, epochs=1)
    new, new_input = generation(1)
    assert new.resumed_from == 4
    assert new.fit(new_input, epochs=2).checkpoint.endswith("/ckpt-0000000008-g1")

    # The old generation's chief, cut off from the driver but not from storage, goes on.
    with pytest.raises(errors.GenerationSuperseded) as lost:
        old.fit(old_input, epochs=3)
    error = lost.value
    assert (error.path, error.generation, error.by_job, error.by_generation) == (model_dir, 0, None, 1)
    assert "generation 0 of this job may no longer write checkpoints" in str(error)
    assert isinstance(error, errors.CheckpointError)
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.generation, again.by_generation) == (errors.GenerationSuperseded, 0, 1)
    assert exit_code_for(error) == NOT_RETRYABLE
    assert new.fit(new_input, epochs=3).checkpoint.endswith("/ckpt-0000000012-g1")


def test_a_missing_export_is_path_not_found(tmp_path):
    with pytest.raises(errors.PathNotFoundError) as missing:
        _native.ExportedModel(str(tmp_path / "export"))
    assert missing.value.path.endswith("export/model.json")


def test_a_closed_writer_says_so_and_is_still_a_value_error(tmp_path):
    writer = st.tfrecord.RecordWriter(str(tmp_path / "r.tfrecord"))
    writer.close()
    with pytest.raises(errors.ClosedError, match="RecordWriter is closed"):
        writer.write(b"x")
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"x")


def test_a_time_out_too_long_for_the_clock_is_refused_not_a_panic():
    secret = _native.generate_secret()
    with pytest.raises(errors.InvalidArgumentError, match=r"registration_timeout=.*a year"):
        _native.Rendezvous("127.0.0.1", 0, 0, secret, 1, 0, 1e19, 10.0)
    with pytest.raises(errors.InvalidArgumentError, match="reservation_timeout=1e"):
        st.Cluster.run(None, print, None, 1, reservation_timeout=1e19)


def test_a_driver_that_does_not_answer_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(errors.DriverUnreachable) as unreachable:
        _native.ControlClient(address, _native.generate_secret(), 1.0)
    assert unreachable.value.address.endswith(address)


def test_errors_keep_their_attributes_across_pickling(tmp_path):
    import pickle

    with pytest.raises(errors.PathNotFoundError) as missing:
        st.fs.read_bytes(str(tmp_path / "gone"))
    again = pickle.loads(pickle.dumps(missing.value))
    assert (type(again), again.path) == (errors.PathNotFoundError, missing.value.path)
