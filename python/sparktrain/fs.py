"""File-system operations on bare local paths, ``file://``, ``hdfs://``, ``viewfs://`` and object
stores (``s3://``, ``s3a://``, ``gs://``, ``abfs://``, ``abfss://``). Runs anywhere: driver,
executor tasks and trainers.

HDFS is reached by a native client (no JVM, no libhdfs); ``hdfs://host:port/...`` names one
NameNode, ``hdfs://nameservice/...`` and ``viewfs://`` are resolved from ``HADOOP_CONF_DIR``.
Object stores are configured like Hadoop's connectors (``fs.s3a.endpoint``,
``fs.s3a.access.key``, ``fs.azure.account.key.<account>.dfs.core.windows.net``,
``fs.gs.auth.service.account.json.keyfile``: in ``core-site.xml`` or with :func:`configure`) or
with each cloud's environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``,
``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_ACCOUNT_KEY``, ...). They have no folders and
no rename: a folder is a key prefix holding objects, uploads appear whole when they complete,
and renaming a folder copies every object in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparktrain import _native


@dataclass(frozen=True)
class FileInfo:
    """One entry of a listing."""

    path: str
    size: int
    is_dir: bool
    modified_ms: int

    @classmethod
    def _from_native(cls, s: _native.FileStatus) -> FileInfo:
        return cls(path=s.path, size=s.size, is_dir=s.is_dir, modified_ms=s.modified_ms)


def exists(path: str) -> bool:
    """True when ``path`` exists."""
    return _native.fs_exists(path)


def status(path: str) -> FileInfo:
    """What ``path`` is; :class:`sparktrain.errors.PathNotFoundError` if nothing is there."""
    return FileInfo._from_native(_native.fs_status(path))


def expand_inputs(path: str) -> list[FileInfo]:
    """The files a path or glob stands for, as Hadoop input formats read them: a folder's files
    at any depth without hidden names (``_SUCCESS``, ``_temporary``, ``.x``), a file itself, a
    glob's matches (folders expanded)."""
    return [FileInfo._from_native(s) for s in _native.fs_expand_inputs(path)]


def size(path: str) -> int:
    """The size of the file ``path`` in bytes."""
    return _native.fs_size(path)


def ls(path: str) -> list[FileInfo]:
    """The direct children of the folder ``path``, sorted by name."""
    return [FileInfo._from_native(s) for s in _native.fs_list(path)]


def glob(pattern: str) -> list[FileInfo]:
    """The files and folders matching ``pattern`` (``*``, ``?`` and ``[...]`` in any part)."""
    return [FileInfo._from_native(s) for s in _native.fs_glob(pattern)]


def mkdirs(path: str) -> None:
    """Creates the folder ``path`` and any missing parents."""
    _native.fs_mkdirs(path)


def rename(src: str, dst: str, *, overwrite: bool = False) -> None:
    """Renames ``src`` to ``dst`` on the same file system."""
    _native.fs_rename(src, dst, overwrite)


def delete(path: str, *, recursive: bool = False) -> bool:
    """Deletes a file, or a folder (with its contents when ``recursive``); returns whether it
    existed."""
    return _native.fs_delete(path, recursive)


def read_bytes(path: str) -> bytes:
    """The whole content of the file ``path``."""
    return _native.fs_read_bytes(path)


def write_bytes(path: str, data: bytes, *, overwrite: bool = False) -> int:
    """Writes ``data`` to ``path`` atomically: the file appears whole or not at all."""
    return _native.fs_write_bytes(path, data, overwrite)


def configure(options: Mapping[str, str]) -> None:
    """Sets Hadoop-style object-store keys for this process, over ``core-site.xml`` and the
    environment: ``fs.s3a.*`` (``endpoint``, ``access.key``, ``secret.key``, ``session.token``,
    ``endpoint.region``, ``path.style.access``, ``connection.ssl.enabled``, and
    ``fs.s3a.bucket.<bucket>.<option>`` for one bucket), ``fs.gs.*`` and ``fs.azure.*``. A
    Spark session's ``spark.hadoop.fs.*`` confs are applied for you by sparktrain's Spark entry
    points, in the driver and in their tasks. Another key raises
    :class:`~sparktrain.errors.InvalidArgumentError`; no keys change nothing."""
    if options:
        _native.fs_configure(dict(options))


def configured() -> dict[str, str]:
    """The object-store keys set with :func:`configure` in this process."""
    return _native.fs_configured()


__all__ = [
    "FileInfo",
    "configure",
    "configured",
    "delete",
    "exists",
    "expand_inputs",
    "glob",
    "ls",
    "mkdirs",
    "read_bytes",
    "rename",
    "size",
    "status",
    "write_bytes",
]
