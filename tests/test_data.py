"""``sparktrain.data``: TFRecord and Parquet datasets on any storage read as Arrow, NumPy,
``tf.data`` and PyTorch batches, sharded by rank (and by DataLoader worker), shuffled the same
way on every rerun, from HDFS too, and taking files from the driver's work queue under
``Cluster.run``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sparktrain as st
from sparktrain.data import Dataset
from sparktrain.errors import InvalidArgumentError, PathNotFoundError, SchemaError

ROOT = Path(__file__).resolve().parents[1]


def table(start: int, rows: int) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array([i / 2 for i in ids], pa.float32()),
            "tags": pa.array([list(range(i % 3)) for i in ids], pa.list_(pa.int64())),
            "word": pa.array([f"w{i}" for i in ids], pa.string()),
        }
    )


def write_files(root: str, files: int, rows: int, parquet: bool = False) -> str:
    for f in range(files):
        part = table(f * rows, rows)
        if parquet:
            Path(root).mkdir(parents=True, exist_ok=True)
            pq.write_table(part, f"{root}/part-{f}.parquet")
        else:
            st.tfrecord.write_batches(f"{root}/part-{f}.tfrecord", part)
    return root


def ids_of(data: Dataset, epoch: int = 0, worker: tuple[int, int] = (0, 1)) -> list[int]:
    return [i for b in data.batches(epoch, worker) for i in b.column("id").to_pylist()]


# --- local files --------------------------------------------------------------------------


@pytest.mark.parametrize(("files", "readers"), [(4, 2), (1, 3)])
def test_shares_cover_every_row_once(tmp_path: Path, files: int, readers: int) -> None:
    root = write_files(str(tmp_path / "d"), files, 300)
    shares = [ids_of(Dataset(root, batch_size=64, shard=(r, readers))) for r in range(readers)]
    everything = sorted(i for share in shares for i in share)
    assert everything == list(range(files * 300))
    assert all(len(share) > 0 for share in shares)


def test_batches_are_cut_to_size_and_a_remainder_can_be_dropped(tmp_path: Path) -> None:
    root = write_files(str(tmp_path / "d"), 3, 100)
    sizes = [b.num_rows for b in Dataset(root, batch_size=64, shard=None).batches()]
    assert sizes == [64, 64, 64, 64, 44]
    sizes = [b.num_rows for b in Dataset(root, batch_size=64, shard=None, drop_remainder=True).batches()]
    assert sizes == [64] * 4


def test_shuffling_is_a_permutation_repeated_by_seed_and_new_each_epoch(tmp_path: Path) -> None:
    root = write_files(str(tmp_path / "d"), 4, 250)
    data = Dataset(root, batch_size=100, shuffle_buffer=400, seed=7, shard=None)
    first = ids_of(data, epoch=0)
    assert sorted(first) == list(range(1000))
    assert first != list(range(1000))
    assert ids_of(Dataset(root, batch_size=100, shuffle_buffer=400, seed=7, shard=None), epoch=0) == first
    assert ids_of(data, epoch=1) != first
    # A window smaller than a read batch: rows move only within their window of 10 (the
    # files' order is shuffled too).
    small = ids_of(Dataset(root, batch_size=100, shuffle_buffer=10, seed=7, shard=None))
    assert sorted(small) == list(range(1000))
    windows = [sorted(small[w : w + 10]) for w in range(0, 1000, 10)]
    assert all(w == list(range(w[0], w[0] + 10)) and w[0] % 10 == 0 for w in windows)
    assert any(small[w : w + 10] != windows[w // 10] for w in range(0, 1000, 10))


def test_numpy_batches_hold_numbers_ragged_lists_and_strings(tmp_path: Path) -> None:
    root = write_files(str(tmp_path / "d"), 1, 10)
    batch = next(Dataset(root, batch_size=10, shard=None).numpy())
    np.testing.assert_array_equal(batch["id"], np.arange(10))
    assert batch["x"].dtype == np.float32
    values, offsets = batch["tags"]
    np.testing.assert_array_equal(offsets, [0, 0, 1, 3, 3, 4, 6, 6, 7, 9, 9])
    np.testing.assert_array_equal(values, [0, 0, 1, 0, 0, 1, 0, 0, 1])
    assert batch["word"][:2] == ["w0", "w1"]


def test_parquet_files_and_chosen_columns(tmp_path: Path) -> None:
    root = write_files(str(tmp_path / "p"), 2, 50, parquet=True)
    data = Dataset(root, batch_size=32, columns=["id", "x"], shard=None)
    assert data.schema.names == ["id", "x"]
    assert sorted(ids_of(data)) == list(range(100))
    # A given schema's types, not the file's.
    narrow = pa.schema([("id", pa.int32()), ("x", pa.float64())])
    batch = next(Dataset(root, batch_size=32, schema=narrow, shard=None).batches())
    assert batch.schema == narrow
    with pytest.raises(
        SchemaError, match=r"part-0\.parquet: column 'word' of type string cannot be read as int64"
    ):
        next(Dataset(root, schema=pa.schema([("word", pa.int64())]), shard=None).batches())


@pytest.mark.parametrize("parquet", [False, True])
def test_partition_folders_become_columns(tmp_path: Path, parquet: bool) -> None:
    # As tfrecord.write(partition_by=...) and Spark's partitionBy lay them out.
    root = tmp_path / "d"
    for day, region, start in [(1, "eu", 0), (1, "us%2Fwest", 10), (2, "__HIVE_DEFAULT_PARTITION__", 20)]:
        folder = root / f"day={day}" / f"region={region}"
        folder.mkdir(parents=True)
        if parquet:
            pq.write_table(table(start, 10), str(folder / "part-0.parquet"))
        else:
            st.tfrecord.write_batches(str(folder / "part-0.tfrecord"), table(start, 10))
    data = Dataset(str(root), shard=None)
    # The records' columns (in the order inference gives them), then the folders'.
    assert sorted(data.schema.names[:4]) == ["id", "tags", "word", "x"]
    assert data.schema.names[4:] == ["day", "region"]
    assert data.schema.field("day").type == pa.int32()
    rows = {r["id"]: (r["day"], r["region"]) for b in data.batches() for r in b.to_pylist()}
    assert len(rows) == 30
    assert rows[3] == (1, "eu")
    assert rows[13] == (1, "us/west")
    assert rows[23] == (2, None)
    # Chosen columns, the folders' alone too; a given schema types them.
    only = Dataset(str(root), columns=["region", "id"], shard=None)
    assert sorted(r["id"] for b in only.batches() for r in b.to_pylist()) == list(range(30))
    days = Dataset(str(root), columns=["day"], shard=None)
    assert sorted(d for b in days.batches() for d in b.column("day").to_pylist()) == [1] * 20 + [2] * 10
    typed = data.schema.set(data.schema.get_field_index("day"), pa.field("day", pa.int64()))
    assert next(Dataset(str(root), schema=typed, shard=None).batches()).schema.field("day").type == pa.int64()


def test_decoding_threads_change_nothing_but_speed(tmp_path: Path) -> None:
    root = write_files(str(tmp_path / "d"), 3, 5000)
    one = [b.to_pydict() for b in Dataset(root, batch_size=1000, shuffle_buffer=3000, seed=5).batches()]
    four = Dataset(root, batch_size=1000, shuffle_buffer=3000, seed=5, threads=4).batches()
    assert [b.to_pydict() for b in four] == one


def test_bad_arguments_are_refused_by_name(tmp_path: Path) -> None:
    root = write_files(str(tmp_path / "d"), 1, 5)
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        Dataset(root, batch_size=0)
    with pytest.raises(InvalidArgumentError, match="threads"):
        Dataset(root, threads=0)
    with pytest.raises(InvalidArgumentError, match="shard"):
        Dataset(root, shard=(2, 2))
    with pytest.raises(InvalidArgumentError, match="nope"):
        Dataset(root, columns=["id", "nope"])
    with pytest.raises(InvalidArgumentError, match="ctx"):
        Dataset(root, dynamic=True)
    with pytest.raises(PathNotFoundError):
        Dataset(str(tmp_path / "missing"))


# --- HDFS, from each framework --------------------------------------------------------------


@pytest.fixture(scope="module")
def hdfs_data(hdfs_url: str) -> str:
    return write_files(f"{hdfs_url}/t/data-{uuid.uuid4().hex}", 4, 500)


def test_numpy_reads_hdfs_shard_by_shard(hdfs_data: str) -> None:
    shares = [ids_of(Dataset(hdfs_data, batch_size=128, shard=(r, 2))) for r in range(2)]
    assert sorted(shares[0] + shares[1]) == list(range(2000))


def test_tf_data_reads_hdfs_with_ragged_lists(tf, hdfs_data: str) -> None:
    dataset = Dataset(hdfs_data, batch_size=250, shard=None).tf(epoch=0)
    ids, tags = [], 0
    for batch in dataset:
        ids += batch["id"].numpy().tolist()
        assert isinstance(batch["tags"], tf.RaggedTensor)
        tags += int(batch["tags"].flat_values.shape[0])
    assert sorted(ids) == list(range(2000))
    assert tags == sum(i % 3 for i in range(2000))


def test_keras_fits_from_a_dataset_on_hdfs(tf, hdfs_data: str) -> None:
    data = Dataset(hdfs_data, batch_size=200, columns=["x", "id"], shard=None).tf()
    pairs = data.map(lambda b: (tf.reshape(b["x"], (-1, 1)), tf.cast(b["id"], tf.float32) / 2000.0))
    model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(1e-4), loss="mse")
    history = model.fit(pairs, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


@pytest.mark.spark  # PyTorch runs in .venv-torch, in a process of its own
def test_a_torch_dataloader_with_two_workers_reads_hdfs_once(hdfs_data: str) -> None:
    from harness.torch_env import torch_python_for_tests

    python = torch_python_for_tests()
    script = textwrap.dedent(
        f"""
        import json, torch
        from sparktrain.data import Dataset
        data = Dataset({hdfs_data!r}, batch_size=100, shard=(1, 2))
        loader = torch.utils.data.DataLoader(data.torch(), batch_size=None, num_workers=2)
        ids, bag = [], torch.nn.EmbeddingBag(10, 4, mode="sum")
        for batch in loader:
            assert batch["x"].dtype == torch.float32
            values, offsets = batch["tags"]
            bag(values, offsets[:-1])  # what EmbeddingBag takes
            ids += batch["id"].tolist()
        print(json.dumps(sorted(ids)))
        """
    )
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ids = json.loads(done.stdout.strip().splitlines()[-1])
    # Rank 1 of 2 holds files 1 and 3; its two DataLoader workers split them without overlap.
    assert ids == list(range(500, 1000)) + list(range(1500, 2000))


# --- the driver's work queue ------------------------------------------------------------------


def test_trainers_take_files_from_the_driver_one_at_a_time(spark, tmp_path: Path) -> None:
    root = write_files(str(tmp_path / "d"), 6, 100)

    def main_fun(path, ctx):
        import time

        from sparktrain.data import Dataset

        data = Dataset(path, batch_size=50, dynamic=True, ctx=ctx)
        ctx.barrier("both trainers ready")  # neither may drain the queue before the other asks
        taken = []
        for batch in data.batches(epoch=0):
            taken += batch.column("id").to_pylist()
            time.sleep(0.2)  # a training step: the other trainer asks for a file meanwhile
        return taken

    with st.Cluster.run(spark, main_fun, root, 2, work=root, log=False) as cluster:
        taken = cluster.results()
    assert sorted(taken[0] + taken[1]) == list(range(600))
    assert taken[0], "the chief took no file"
    assert taken[1], "the worker took no file"


def test_the_reader_is_importable_without_the_frameworks() -> None:
    code = "import sys, sparktrain.data; print('torch' in sys.modules, 'tensorflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"]
