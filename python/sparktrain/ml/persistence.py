"""``MLWritable``/``MLReadable`` for sparktrain's estimators and models, on sparktrain's own
storage layer (local paths, ``hdfs://``, ``s3://``, ``gs://``, ``abfs://``), without Hadoop. Runs on
the driver.

The layout is Spark ML's own, so that ``Pipeline``/``PipelineModel.load``, which read each
stage's metadata with ``spark.read.text``, find the class to load:

- ``<path>/metadata/part-00000``: one line of JSON, as ``DefaultParamsWriter`` writes it
  (``class``, ``timestamp``, ``sparkVersion``, ``uid``, ``paramMap``, ``defaultParamMap``),
  plus a ``sparktrain`` entry with what the instance adds (a model's class count);
- ``<path>/model/``: a model's exported files (``model.json``, ``model.safetensors``), which
  :func:`sparktrain.predict` and :func:`sparktrain.embeddings` read as they are.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.ml.util import DefaultParamsReader, MLReadable, MLReader, MLWriter

from sparktrain import _checks, fs, storage_options
from sparktrain.errors import InvalidArgumentError, PathExistsError, PathNotFoundError, StorageError

if TYPE_CHECKING:
    from pyspark.ml.param import Params

METADATA = "metadata"
#: Where a model's exported files go.
MODEL = "model"

P = TypeVar("P", bound="MLReadable[Any]")


def join(path: str, *parts: str) -> str:
    """``path`` and ``parts`` joined with single slashes (a URL keeps its scheme)."""
    return "/".join([path.rstrip("/"), *parts])


def copy_folder(source: str, target: str) -> None:
    """Copies the files of the folder ``source`` into ``target`` (created), file by file. A
    source without files is refused: a model saved from it would be an empty folder."""
    files = [entry for entry in fs.ls(source) if not entry.is_dir] if fs.exists(source) else []
    if not files:
        raise PathNotFoundError(
            f"the model's files at {source} are gone, so there is nothing to save; a PipelineModel "
            "saved with overwrite() over the path it was loaded from deletes them before they are "
            "copied: save it to another path",
            path=source,
        )
    fs.mkdirs(target)
    for entry in files:
        name = entry.path.rstrip("/").rsplit("/", 1)[-1]
        fs.write_bytes(join(target, name), fs.read_bytes(entry.path), overwrite=True)


def _within(path: str, folder: str) -> bool:
    path, folder = path.rstrip("/"), folder.rstrip("/")
    return path == folder or path.startswith(folder + "/")


class Writer(MLWriter):
    """Saves an instance: its metadata, then whatever its ``_save_data(path)`` writes."""

    def __init__(self, instance: Params) -> None:
        super().__init__()
        self.instance = instance

    def save(self, path: str) -> None:
        """Saves to ``path``, which must not exist unless ``overwrite()`` was called."""
        path = _checks.text("path", path)
        storage_options.of_session(self.sparkSession)
        if fs.exists(path):
            if not self.shouldOverwrite:
                raise PathExistsError(f"{path} already exists: use write().overwrite().save(path)", path=path)
            sources: list[str] = getattr(self.instance, "_data_sources", list)()
            if any(_within(source, path) for source in sources):
                self._save_over_its_own_files(path)
                return
            fs.delete(path, recursive=True)
        self.saveImpl(path)

    def _save_over_its_own_files(self, path: str) -> None:
        # A model loaded from `path` reads its files there: deleting them first would save an
        # empty model. It is saved beside, then moved into place.
        staged = f"{path.rstrip('/')}.saving-{uuid.uuid4().hex[:12]}"
        try:
            self.saveImpl(staged)
        except BaseException:
            with contextlib.suppress(StorageError):
                fs.delete(staged, recursive=True)
            raise
        fs.delete(path, recursive=True)
        try:
            fs.rename(staged, path)
        except StorageError as e:
            raise StorageError(
                f"saving over {path}: the model was saved at {staged} but could not be moved into "
                f"place ({e}); move it there yourself",
                path=staged,
            ) from e

    def saveImpl(self, path: str) -> None:
        """Writes the metadata and the instance's data under ``path``."""
        instance: Any = self.instance
        params = instance._paramMap
        defaults = instance._defaultParamMap
        metadata = {
            "class": f"{type(instance).__module__}.{type(instance).__name__}",
            "timestamp": round(time.time() * 1000),
            "sparkVersion": self.sparkSession.version,
            "uid": instance.uid,
            "paramMap": {p.name: params[p] for p in params},
            "defaultParamMap": {p.name: defaults[p] for p in defaults},
            "sparktrain": instance._extra_metadata(),
        }
        folder = join(path, METADATA)
        fs.mkdirs(folder)
        line = json.dumps(metadata, separators=(",", ":")) + "\n"
        fs.write_bytes(join(folder, "part-00000"), line.encode())
        fs.write_bytes(join(folder, "_SUCCESS"), b"")
        instance._save_data(path)


class Reader(MLReader[P]):
    """Loads an instance of ``cls`` saved by :class:`Writer` (or Spark's own writer)."""

    def __init__(self, cls: type[P]) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> P:
        """The instance saved at ``path``."""
        path = _checks.text("path", path)
        storage_options.of_session(self.sparkSession)
        metadata = read_metadata(path)
        expected = f"{self.cls.__module__}.{self.cls.__name__}"
        if metadata.get("class") != expected:
            raise InvalidArgumentError(f"path={path!r} holds a {metadata.get('class')}, not a {expected}")
        instance: Any = self.cls()
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
        instance._load_data(path, metadata.get("sparktrain", {}))
        return instance  # type: ignore[no-any-return]


def read_metadata(path: str) -> dict[str, Any]:
    """The metadata JSON under ``path`` (the first part file of its ``metadata`` folder)."""
    folder = join(path, METADATA)
    if not fs.exists(folder):
        raise PathNotFoundError(f"{path} holds no saved Spark ML instance ({folder} is missing)", path=folder)
    parts = sorted(
        e.path for e in fs.ls(folder) if not e.is_dir and not e.path.rsplit("/", 1)[-1].startswith(("_", "."))
    )
    if not parts:
        raise PathNotFoundError(f"{folder} holds no metadata file", path=folder)
    value: dict[str, Any] = json.loads(fs.read_bytes(parts[0]).decode().splitlines()[0])
    return value


__all__ = ["MODEL", "Reader", "Writer", "copy_folder", "join", "read_metadata"]
