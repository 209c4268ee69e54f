"""The ONNX export: every built-in model, written by ``sparktrain.export_onnx``, passes
``onnx.checker`` and scores a held-out set in onnxruntime as ``sparktrain.predict``'s own scorer
does, within 1e-5: integer and string keys, nulls, unseen values, crosses, multi-hot lists
pooled by sum and mean, softmax, regression and DCN models. The file is reachable on every
storage the export is (HDFS here), and through the command line."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparktrain as st
from sparktrain import cli
from sparktrain.errors import CheckpointError, InvalidArgumentError, PathNotFoundError
from sparktrain.prediction import score_batch
from sparktrain.training import FeatureSpec, Trainer

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

TOLERANCE = 1e-5


def table(rows: int, seed: int, *, nulls: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 2)).astype(np.float32)
    shop = rng.integers(-40, 40, rows)
    day = rng.integers(0, 7, rows).astype(np.uint8)
    city = np.array(["paris", "lyon", "nice", "gdańsk"])[rng.integers(0, 4, rows)]
    label = ((x[:, 0] + (shop % 3 == 0) - 0.5 * x[:, 1] + (day > 4)) > 0.4).astype(np.int64)
    gaps = rng.random(rows) < 0.1 if nulls else np.zeros(rows, bool)
    lengths = rng.integers(0, 4, rows)
    tags = [None if gap else rng.integers(0, 30, n).tolist() for gap, n in zip(gaps, lengths, strict=True)]
    words = [["red", "blue", "green", "gdańsk"][: int(n)] for n in rng.integers(0, 5, rows)]
    return pa.table(
        {
            "label": label,
            "x0": pa.array(x[:, 0], mask=gaps),
            "x1": x[:, 1],
            "shop": pa.array(shop, mask=gaps),
            "city": pa.array(city, mask=np.roll(gaps, 1)),
            "day": day,
            "tags": pa.array(tags, pa.list_(pa.int64())),
            "words": pa.array(words, pa.list_(pa.string())),
        }
    )


SPEC = {
    "dense": ["x0", "x1"],
    "categorical": {"shop": 30, "city": 5},
    "crossed": [(("city", "day"), 13), (("shop", "day", "city"), 17)],
}
CASES = {
    # The dense-only models take no categorical or crossed columns.
    "logistic_regression": {"model": "logistic_regression", "categorical": {}, "crossed": []},
    "mlp_softmax": {"model": "mlp", "classes": 3, "hidden": [6, 4], "categorical": {}, "crossed": []},
    "wide_deep": {"model": "wide_deep", "hidden": [8], "dim": 3},
    "deep_fm": {"model": "deep_fm", "hidden": [8, 4], "dim": 4},
    # No dense features: the wide part's bias and the deep part's embeddings alone.
    "wide_deep_ids_only": {"model": "wide_deep", "hidden": [4], "dim": 2, "dense": []},
    "dcn": {"model": "dcn", "hidden": [8], "dim": 3, "cross_layers": 2},
    "regression": {"model": "wide_deep", "hidden": [4], "dim": 2, "loss": "mean_squared_error"},
    "multi_hot": {
        "model": "deep_fm",
        "hidden": [8],
        "dim": 3,
        "multi_hot": [("tags", 11, "mean"), ("words", 7, "sum")],
    },
    # Multi-hot columns alone feed the embeddings: no categorical or crossed column.
    "dcn_multi_hot_only": {
        "model": "dcn",
        "hidden": [4],
        "dim": 2,
        "cross_layers": 1,
        "categorical": {},
        "crossed": [],
        "multi_hot": [("tags", 11, "sum")],
    },
}


def trained(tmp_path, case: str) -> str:
    """The export folder of a model of ``case`` trained for one epoch on a small table."""
    settings = dict(CASES[case])
    features = {
        **SPEC,
        **{
            key: settings.pop(key)
            for key in ("dense", "categorical", "crossed", "multi_hot")
            if key in settings
        },
    }
    data = table(600, 1)
    if settings.get("classes"):
        data = data.set_column(0, "label", pa.array(np.arange(600) % 3))
    pq.write_table(data, tmp_path / "train.parquet")
    trainer = Trainer(features=features, batch_size=64, learning_rate=0.05, seed=2, **settings)
    trainer.fit(str(tmp_path / "train.parquet"), epochs=1)
    return trainer.export(str(tmp_path / "export"))


def engine_scores(export_dir: str, batch: pa.RecordBatch) -> np.ndarray:
    """What ``sparktrain.predict`` appends to each row, as a ``[rows, outputs]`` array."""
    scores = score_batch(export_dir, batch).column("score")
    if pa.types.is_list(scores.type):
        return np.array(scores.to_pylist(), dtype=np.float32)
    return scores.to_numpy().reshape(-1, 1)


def onnx_scores(model_path: str, data: pa.Table | pa.RecordBatch) -> np.ndarray:
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    (scores,) = session.run([st.servable.SCORES], st.onnx_inputs(model_path, data))
    return scores


@pytest.mark.parametrize("case", sorted(CASES))
def test_onnxruntime_scores_as_the_engine_does(tmp_path, case):
    export_dir = trained(tmp_path, case)
    path = st.export_onnx(export_dir, str(tmp_path / "model.onnx"))
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["sparktrain.loss"] in ("binary_cross_entropy", "softmax_cross_entropy", "mean_squared_error")

    held_out = table(300, 7, nulls=True).to_batches(max_chunksize=300)[0].drop_columns(["label"])
    expected = engine_scores(export_dir, held_out)
    got = onnx_scores(path, held_out)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE)
    assert np.ptp(expected) > 1e-3, "the scores vary, so agreement means something"

    # One row at a time, as a server scores: the same values.
    one = held_out.slice(5, 1)
    np.testing.assert_allclose(onnx_scores(path, one), expected[5:6], rtol=0, atol=TOLERANCE)


def test_the_inputs_follow_the_documented_contract(tmp_path):
    spec = FeatureSpec.of({**SPEC, "label": "label"})
    data = pa.table(
        {
            "x0": pa.array([1.5, None], pa.float64()),
            "x1": pa.array([2, 3], pa.int32()),
            "shop": pa.array([-1, None], pa.int64()),
            "city": ["paris", None],
            "day": pa.array([2**64 - 1, 0], pa.uint64()),
        }
    )
    inputs = st.onnx_inputs(spec, data)
    assert sorted(inputs) == ["dense", "keys", "missing"]
    np.testing.assert_array_equal(inputs["dense"], np.array([[1.5, 2.0], [0.0, 3.0]], np.float32))
    assert inputs["dense"].dtype == np.float32
    assert spec.to_native().key_columns == ["shop", "city", "day"]

    def fnv1a(data: bytes) -> int:
        h = 0xCBF29CE484222325
        for byte in data:
            h = ((h ^ byte) * 0x100000001B3) % 2**64
        return h - 2**64 if h >= 2**63 else h

    assert inputs["keys"].dtype == np.int64
    np.testing.assert_array_equal(inputs["keys"], [[-1, fnv1a(b"paris"), -1], [0, 0, 0]])
    np.testing.assert_array_equal(inputs["missing"], [[False, False, False], [True, True, False]])


def test_the_command_line_writes_the_model_and_names_what_is_missing(tmp_path, capsys):
    export_dir = trained(tmp_path, "logistic_regression")
    out = str(tmp_path / "cli.onnx")
    assert cli.main(["export-onnx", export_dir, out]) == 0
    onnx.checker.check_model(onnx.load(out))
    assert cli.main(["export-onnx", str(tmp_path / "nowhere"), out]) == 1
    assert "nowhere" in capsys.readouterr().err
    # A refused option exits 2 (as argparse's refusals, `submit`'s and `doctor`'s), with the usage.
    assert cli.main(["export-onnx", export_dir, out, "--conf", "spark.master=local"]) == 2
    err = capsys.readouterr().err
    assert "spark.master" in err
    assert err.startswith("usage: sparktrain export-onnx")


def test_errors_name_the_path_or_column_at_fault(tmp_path):
    with pytest.raises(PathNotFoundError, match="nowhere"):
        st.export_onnx(str(tmp_path / "nowhere"), str(tmp_path / "m.onnx"))
    (tmp_path / "foreign.onnx").write_bytes(b"\xff\xff\xff not protobuf")
    with pytest.raises(CheckpointError, match=r"foreign\.onnx"):
        st.onnx_inputs(str(tmp_path / "foreign.onnx"), table(3, 0))
    with pytest.raises(InvalidArgumentError, match="'shop'"):
        st.onnx_inputs(FeatureSpec.of(SPEC), table(3, 0).drop_columns(["shop"]))
    with pytest.raises(InvalidArgumentError, match="out_path"):
        st.export_onnx(str(tmp_path), "")


@pytest.mark.hdfs
def test_export_dir_and_model_on_hdfs(tmp_path, hdfs_url):
    import uuid

    export_dir = trained(tmp_path, "deep_fm")
    base = f"{hdfs_url}/onnx-{uuid.uuid4().hex}"
    st.fs.mkdirs(f"{base}/export")
    for name in ("model.json", "model.safetensors"):
        st.fs.write_bytes(f"{base}/export/{name}", (tmp_path / "export" / name).read_bytes())
    remote_model = st.export_onnx(f"{base}/export", f"{base}/model.onnx")
    local = tmp_path / "from_hdfs.onnx"
    local.write_bytes(st.fs.read_bytes(remote_model))
    held_out = table(50, 9, nulls=True)
    np.testing.assert_allclose(
        onnx_scores(str(local), held_out),
        engine_scores(export_dir, held_out.to_batches()[0]),
        rtol=0,
        atol=TOLERANCE,
    )
    # The helper reads the spec from the model where it lies.
    assert sorted(st.onnx_inputs(remote_model, held_out)) == ["dense", "keys", "missing"]


@pytest.mark.spark
def test_sparktrain_predict_and_onnxruntime_agree(tmp_path, spark):
    export_dir = trained(tmp_path, "wide_deep")
    path = st.export_onnx(export_dir, str(tmp_path / "model.onnx"))
    # Spark has no unsigned types, and pandas no null integers: day as int32, no gaps.
    held_out = table(200, 11)
    held_out = held_out.set_column(5, "day", held_out.column("day").cast(pa.int32()))
    held_out = held_out.append_column("id", pa.array(np.arange(200)))
    df = spark.createDataFrame(held_out.to_pandas()).repartition(3)
    scored = st.predict(spark, export_dir, df).select("id", "score").toPandas().sort_values("id")
    got = onnx_scores(path, held_out)[:, 0]
    np.testing.assert_allclose(got, scored["score"].to_numpy(np.float32), rtol=0, atol=TOLERANCE)
