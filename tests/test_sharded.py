"""Embedding tables larger than one trainer, through the Python API and real Spark
(local-cluster): a sharded run trains the replicated run's weights, its export keeps the tables
sharded and is read back as a DataFrame (``sparktrain.embeddings``) and scored where its rows
are (``sparktrain.predict``, no process holding a whole table) with the scores of the whole
model; tables over a trainer's budget are refused before any Spark job, naming the sizes and
the settings; an ONNX export over protobuf's 2 GiB is refused before its tables are read.

The engine's exactness for every optimizer, 2 to 4 trainers and a restore onto another
number of trainers is proven in Rust (``rust/train/tests/sharded.rs``)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

import sparktrain as st
from harness.synthetic import DENSE, SPARSE, criteo_table, write_tfrecords
from sparktrain.errors import InvalidArgumentError
from sparktrain.training import FeatureSpec, Trainer

COLUMNS = SPARSE[:6]
FEATURES = FeatureSpec(dense=tuple(DENSE[:4]), categorical=tuple((c, 500) for c in COLUMNS))
QUIET = {"log": False}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    table = criteo_table(4_000, seed=11)
    return {"train": write_tfrecords(f"{root}/train", table, files=4), "root": root}


def plan(workers: int = 2) -> tuple[int, int]:
    """The bytes of the model's tables with Adagrad's state, whole and one trainer's share."""
    config = Trainer(None, model="wide_deep", features=FEATURES, dim=4, optimizer="adagrad").config
    whole, share, _ = st._native.table_plan(config, FEATURES.to_native(), workers)
    return whole, share


@pytest.fixture(scope="module")
def runs(spark, data):
    """The same job with its tables whole on each trainer (no budget), sharded across them,
    and sharded because a budget between the two refuses them whole."""
    whole, share = plan()
    common = {
        "model": "wide_deep",
        "features": FEATURES,
        "num_workers": 2,
        "epochs": 1,
        "batch_size": 64,
        "hidden": [8],
        "dim": 4,
        "optimizer": "adagrad",
        "shuffle_buffer": 0,
        **QUIET,
    }
    placements = {
        "off": {"shard_tables": "off"},
        "on": {"shard_tables": "on"},
        "budget": {"shard_tables": "auto", "table_budget_bytes": (whole + share) // 2},
    }
    return {
        name: st.train(spark, data["train"], model_dir=str(data["root"] / name), **placement, **common)
        for name, placement in placements.items()
    }


def test_a_sharded_run_exports_the_replicated_runs_tables_sharded(spark, runs):
    """Sharded (asked for, or because a budget refuses the tables whole), the run ends with
    the tables of the replicated run trained without a budget."""
    assert {r.fit.examples for r in runs.values()} == {4_000}
    for name in ("on", "budget"):
        config = json.loads(st.fs.read_bytes(f"{runs[name].export_dir}/model.json"))
        assert config["tables"] == "tables.json", name
    assert not st.fs.exists(f"{runs['off'].export_dir}/tables.json")
    # sparktrain.embeddings reads the owners' files: the same rows as the replicated export.
    tables = {}
    for name, run in runs.items():
        rows = st.embeddings(spark, run.export_dir).select("table", "id", "vector").toPandas()
        tables[name] = rows.sort_values(["table", "id"]).reset_index(drop=True)
    assert len(tables["off"]) == 2 * 6 * 500
    for name in ("on", "budget"):
        assert (tables[name][["table", "id"]] == tables["off"][["table", "id"]]).all().all()
        # Each table's rows have its own width (the wide weights 1, the embeddings ``dim``).
        for table, rows in tables["off"].groupby("table"):
            np.testing.assert_allclose(
                np.stack(tables[name].loc[rows.index, "vector"]),
                np.stack(rows["vector"]),
                rtol=1e-5,
                atol=1e-7,
                err_msg=f"{name} {table}",
            )


def test_a_sharded_export_is_scored_where_its_rows_are(spark, runs):
    export = runs["on"].export_dir
    table = criteo_table(1_500, seed=12).drop(["label"])
    table = table.append_column("row", pa.array(np.arange(1_500)))
    frame = spark.createDataFrame(table.to_pandas()).repartition(3)
    # In process, with the tables put together whole.
    whole = st._native.ExportedModel(export)
    assert whole.sharded_tables
    expected = np.concatenate([whole.predict(b).to_numpy() for b in table.to_batches(max_chunksize=500)])
    for tables in ("auto", "lookup", "load"):
        scored = st.predict(spark, export, frame, tables=tables).toPandas().sort_values("row")
        assert list(scored.columns[:-1]) == frame.columns
        np.testing.assert_allclose(scored["score"].to_numpy(), expected, rtol=0, atol=1e-6, err_msg=tables)
    # Without its tables, the model scores only with their rows given.
    partial = st._native.ExportedModel(export, tables=False)
    assert partial.table_bytes == whole.table_bytes > 0
    with pytest.raises(InvalidArgumentError, match="without its embedding tables"):
        partial.predict(table.to_batches(max_chunksize=10)[0])


def test_tables_over_a_trainers_budget_are_refused_before_any_spark_job(spark, data):
    common = {
        "model": "wide_deep",
        "features": FEATURES,
        "dim": 4,
        "optimizer": "adagrad",
        "num_workers": 2,
        "steps": 1,
        **QUIET,
    }
    whole, share = plan()
    assert 0 < share < whole
    # Replicated, the tables with their optimizer state do not fit; sharded over two they do.
    budget = (whole + share) // 2
    with pytest.raises(InvalidArgumentError) as refused:
        st.train(spark, data["train"], shard_tables="off", table_budget_bytes=budget, **common)
    message = str(refused.value)
    assert (refused.value.needed, refused.value.budget) == (whole, budget)
    assert refused.value.sharded is False
    assert "shard_tables" in message
    assert "table_budget_bytes" in message
    # Not even a share fits.
    with pytest.raises(InvalidArgumentError, match="table_budget_bytes"):
        st.train(spark, data["train"], shard_tables="auto", table_budget_bytes=share // 2, **common)
    # Under the first budget, sharded, the job trains (the runs fixture compares its weights).


def test_an_onnx_export_over_two_gib_is_refused_before_its_tables_are_read(tmp_path):
    """A Wide&Deep model with a billion ids: its tables take 20 GB, which the refusal must not
    read. The export is a small model's, with model.json claiming those ids: the variables do
    not depend on how many ids the tables hold."""
    path = str(tmp_path / "rows.tfrecord")
    st.tfrecord.write_batches(path, criteo_table(500, seed=13))
    trainer = Trainer(model="wide_deep", features=FEATURES, hidden=[8], dim=4, batch_size=100)
    trainer.fit(path, steps=2)
    export = str(tmp_path / "export")
    trainer.export(export)
    config = json.loads((tmp_path / "export" / "model.json").read_text())
    for column in config["features"]["categorical"][:5]:
        column["buckets"] = 200_000_000
    (tmp_path / "export" / "model.json").write_text(json.dumps(config))
    with pytest.raises(InvalidArgumentError) as refused:
        st.export_onnx(export, str(tmp_path / "model.onnx"))
    assert "over the 2 GiB" in str(refused.value)
    assert "sparktrain.predict" in str(refused.value)
    assert not (tmp_path / "model.onnx").exists()
