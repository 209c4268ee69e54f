"""The storage layer on Azure Blob Storage (``abfs://``), against Azurite, Microsoft's emulator,
started by the tests on 127.0.0.1: TFRecord round trips, large uploads that appear only when
complete (a failed one leaves nothing), folders as prefixes and renames by copy, checkpoints
with a resumed run, the export, TensorBoard event files, and missing blobs named. What
sparktrain writes is checked with Microsoft's own client (``azure-storage-blob``), so the blobs
are real blobs and not only readable by sparktrain.

sparktrain reaches the emulator as an Azure user of it does, through the environment
(``AZURE_STORAGE_USE_EMULATOR``, ``AZURITE_BLOB_STORAGE_URL``; see ``harness/azurite.py``).
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from harness.azurite import blob_service
from harness.object_stores import check_a_large_upload_appears_whole, mixed_table
from harness.synthetic import dense_table
from sparktrain import errors, fs, tfrecord
from sparktrain.training import FeatureSpec, Trainer

DENSE39 = FeatureSpec(dense=tuple(f"f{j:02d}" for j in range(39)))


@pytest.fixture
def root(azure_url: str, request: pytest.FixtureRequest) -> str:
    """A fresh folder for one test."""
    return f"{azure_url}/{request.node.originalname}-{uuid.uuid4().hex}"


def _blobs(endpoint: str, url: str) -> dict[str, int]:
    """Blob name under ``url`` → size, as Microsoft's client lists them."""
    container, _, rest = url.removeprefix("abfs://").partition("@")
    prefix = rest.partition("/")[2]
    client = blob_service(endpoint).get_container_client(container)
    return {b.name[len(prefix) + 1 :]: b.size for b in client.list_blobs(name_starts_with=prefix + "/")}


def _download(endpoint: str, url: str) -> bytes:
    container, _, rest = url.removeprefix("abfs://").partition("@")
    name = rest.partition("/")[2]
    data: bytes = blob_service(endpoint).get_blob_client(container, name).download_blob().readall()
    return data


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_examples_round_trip_and_are_real_blobs(
    root: str, azure_endpoint: str, compression: str | None, tmp_path
) -> None:
    table = mixed_table(500)
    for part in range(2):
        tfrecord.write_batches(f"{root}/part-{part}.tfrecord", table, compression)
    blobs = _blobs(azure_endpoint, root)
    assert sorted(blobs) == ["part-0.tfrecord", "part-1.tfrecord"]
    assert [info.size for info in fs.ls(root)] == [blobs["part-0.tfrecord"], blobs["part-1.tfrecord"]]
    back = pa.Table.from_batches(list(tfrecord.read(root, schema=table.schema)))
    assert back.num_rows == 1000
    assert back.slice(0, 500).equals(table)
    # The bytes Microsoft's client downloads are the TFRecord file sparktrain reads.
    local = tmp_path / "copy.tfrecord"
    local.write_bytes(_download(azure_endpoint, f"{root}/part-1.tfrecord"))
    assert pa.Table.from_batches(list(tfrecord.read(str(local), schema=table.schema))).equals(table)


def test_a_large_file_is_invisible_until_closed_and_a_failed_one_leaves_nothing(
    root: str, azure_endpoint: str
) -> None:
    # Blocks go up first; no blob exists until the block list is committed.
    check_a_large_upload_appears_whole(root, lambda url: _blobs(azure_endpoint, url))


def test_folders_are_prefixes_and_renames_copy(root: str, azure_endpoint: str) -> None:
    for name in ("a/1", "a/2", "a/deep/3"):
        fs.write_bytes(f"{root}/{name}", name.encode())
    assert fs.status(f"{root}/a").is_dir
    assert [(f.path.rsplit("/", 1)[1], f.is_dir) for f in fs.ls(f"{root}/a")] == [
        ("1", False),
        ("2", False),
        ("deep", True),
    ]
    fs.rename(f"{root}/a", f"{root}/b")
    assert sorted(_blobs(azure_endpoint, root)) == ["b/1", "b/2", "b/deep/3"]
    assert fs.read_bytes(f"{root}/b/deep/3") == b"a/deep/3"
    with pytest.raises(errors.PathExistsError):
        fs.write_bytes(f"{root}/b/1", b"again")
    with pytest.raises(errors.PathExistsError):
        fs.rename(f"{root}/b/1", f"{root}/b/2")
    assert fs.delete(f"{root}/b", recursive=True)
    assert _blobs(azure_endpoint, root) == {}


def test_checkpoints_resume_and_event_files_live_on_azure(root: str, azure_endpoint: str, tmp_path) -> None:
    local = tmp_path / "data.tfrecord"
    tfrecord.write_batches(str(local), dense_table(2_000, seed=3))
    settings = {
        "model": "mlp",
        "features": DENSE39,
        "hidden": [8],
        "batch_size": 100,
        "model_dir": f"{root}/model",
        "tensorboard_dir": f"{root}/tb",
        "checkpoint_every": 5,
        "log_every": 5,
    }
    first = Trainer(**settings)
    result = first.fit(str(local), steps=12)
    first.close()
    assert result.checkpoint is not None
    assert result.checkpoint.startswith(f"{root}/model/ckpt-")
    names = sorted(_blobs(azure_endpoint, f"{root}/model"))
    assert "checkpoint.json" in names
    assert any(n.endswith(".safetensors") for n in names)
    assert any(n.startswith("events.out.tfevents.") for n in _blobs(azure_endpoint, f"{root}/tb"))

    again = Trainer(**settings)
    resumed = again.fit(str(local), steps=20)
    assert (resumed.resumed_from, resumed.steps) == (12, 20)
    export = again.export(f"{root}/export")
    assert sorted(_blobs(azure_endpoint, export)) == ["model.json", "model.safetensors"]


def test_a_missing_blob_is_named(root: str) -> None:
    with pytest.raises(errors.PathNotFoundError) as missing:
        fs.read_bytes(f"{root}/absent.bin")
    assert missing.value.path == f"{root}/absent.bin"
    assert not fs.exists(f"{root}/absent.bin")
