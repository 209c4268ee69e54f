"""File-system operations on bare local paths, ``file://``, ``hdfs://`` and ``viewfs://``.

HDFS is reached by a native client (no JVM, no libhdfs); ``hdfs://host:port/...`` names one
NameNode, ``hdfs://nameservice/...`` and ``viewfs://`` are resolved from ``HADOOP_CONF_DIR``.
"""

from __future__ import annotations

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


__all__ = [
    "FileInfo",
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
