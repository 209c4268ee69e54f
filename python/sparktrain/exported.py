"""An exported model, loaded once per process for each version of its folder. Runs on the
driver (which checks an export before scoring) and in Spark tasks (which score with it).

Spark reuses its Python workers from task to task, so a loaded model outlives the task that
loaded it. A folder exported again under the same path is another model, though: the driver
takes the export's :func:`version` when a scoring job starts, and the tasks key their models
by path and version, so a re-export is loaded again, while every batch of one job is scored
by the same model. A few models stay loaded per process, the most recently used; a
``CrossValidator`` scores many in one worker.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from sparktrain import fs
from sparktrain.errors import PathNotFoundError

if TYPE_CHECKING:
    from sparktrain._native import ExportedModel

#: The export's configuration, which every export (re)writes.
CONFIG_FILE = "model.json"
#: Models kept loaded per process.
KEPT = 4
#: A checkpoint's folder in a ``model_dir``: ``ckpt-<step>-g<generation>``.
_CHECKPOINT = re.compile(r"ckpt-\d+-g\d+")

_MODELS: OrderedDict[tuple[str, str, bool], ExportedModel] = OrderedDict()
_LOCK = threading.Lock()


def config(export_dir: str) -> bytes:
    """The export's configuration (``model.json``). Raises
    :class:`~sparktrain.errors.PathNotFoundError` when there is none, saying where the export
    is when ``export_dir`` is a training run's ``model_dir`` or one of its checkpoints."""
    root = export_dir.rstrip("/") or export_dir
    try:
        return fs.read_bytes(f"{root}/{CONFIG_FILE}")
    except PathNotFoundError as e:
        raise not_an_export(export_dir, e) from e


def not_an_export(export_dir: str, error: PathNotFoundError) -> PathNotFoundError:
    """``error`` (no export in ``export_dir``), saying where the export is when ``export_dir``
    is a ``model_dir`` (which holds it under ``export/``) or a checkpoint in one."""
    root = export_dir.rstrip("/") or export_dir
    if fs.exists(f"{root}/export/{CONFIG_FILE}"):
        hint = f"{export_dir} is a training run's model_dir: its export is {root}/export"
    elif _CHECKPOINT.fullmatch(posixpath.basename(root)):
        hint = (
            f"{export_dir} is a checkpoint, not an export: give the export (by default "
            "<model_dir>/export), or write one with Trainer.export"
        )
    else:
        return error
    return PathNotFoundError(f"{error.message}; {hint}", path=getattr(error, "path", None))


def version(export_dir: str) -> str:
    """What tells one export in ``export_dir`` from the next one there: a digest of its
    configuration and of its files' names, sizes and modification times. One listing and
    one small read; raises :class:`~sparktrain.errors.PathNotFoundError` when there is no
    export."""
    root = export_dir.rstrip("/") or export_dir
    digest = hashlib.sha256(config(export_dir))
    for entry in fs.ls(root):
        digest.update(f"\0{entry.path}\0{entry.size}\0{entry.modified_ms}".encode())
    return digest.hexdigest()[:32]


def load(export_dir: str, export_version: str, *, tables: bool = True) -> ExportedModel:
    """The model in ``export_dir`` as it was at ``export_version`` (see :func:`version`),
    loaded on first use in this process; with ``tables=False``, without its embedding tables
    (scored with rows looked up elsewhere: ``predict_with_rows``)."""
    from sparktrain._native import ExportedModel

    key = (export_dir, export_version, tables)
    with _LOCK:
        found = _MODELS.get(key)
        if found is None:
            found = _MODELS[key] = ExportedModel(export_dir, tables)
            while len(_MODELS) > KEPT:
                _MODELS.popitem(last=False)
        _MODELS.move_to_end(key)
        return found


__all__ = ["CONFIG_FILE", "KEPT", "config", "load", "not_an_export", "version"]
