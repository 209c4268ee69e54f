"""GPUs for the engine, in the trainer process (and in the process ``sparktrain doctor``'s
``gpu-runtime`` check starts from an executor task): which device ``device="auto"`` means, and
CUDA's libraries from PyPI (``pip install 'sparktrain[cuda]'``) made findable before a device
opens.

A build with CUDA opens the driver's ``libcuda.so.1``, cuBLAS (with cuBLASLt) and cuRAND only
when a GPU is asked for, by their file names, as the dynamic loader finds them. PyPI's
``nvidia-cublas`` and ``nvidia-curand`` install them into ``site-packages/nvidia/cu13/lib``,
which the loader does not search, so they are loaded here first (a library already loaded is
found by its name), as PyTorch does with the same packages."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import TypedDict, cast

from sparktrain import _native

#: PyPI's CUDA 13 libraries the engine opens, in the order they depend on each other.
PYPI_LIBRARIES = ("libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10")


class CudaLibrary(TypedDict):
    """One library a GPU needs: ``name`` (``"cuBLAS"``), the ``files`` tried, whether one was
    ``found``, and a ``hint`` where it comes from."""

    name: str
    files: list[str]
    found: bool
    hint: str


class CudaCard(TypedDict):
    """A GPU the driver lists: its ``ordinal`` in this process, ``name``, ``capability``
    (``"9.0"``) and ``memory_bytes``."""

    ordinal: int
    name: str
    capability: str
    memory_bytes: int


class CudaReport(TypedDict):
    """What this process sees of CUDA (:func:`cuda_report`)."""

    built: bool
    toolkit: str
    libraries: list[CudaLibrary]
    driver: str | None
    cards: list[CudaCard]
    error: str | None


def load_pypi_libraries() -> list[str]:
    """Loads the CUDA libraries of PyPI's packages found on ``sys.path`` so that the engine
    finds them by name; returns the files loaded. Libraries found otherwise (the system's,
    ``LD_LIBRARY_PATH``) are left to the loader."""
    loaded: list[str] = []
    for name in PYPI_LIBRARIES:
        for entry in sys.path:
            path = Path(entry or ".") / "nvidia" / "cu13" / "lib" / name
            if path.is_file():
                try:
                    ctypes.CDLL(os.fspath(path), mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    continue  # a broken copy: the engine names the library it could not load
                loaded.append(os.fspath(path))
                break
    return loaded


def cuda_report() -> CudaReport:
    """What this process can see of CUDA, after loading PyPI's libraries: whether the build
    has CUDA, each library and whether it loads, the driver's version and the cards."""
    if _native.CUDA:
        load_pypi_libraries()
    return cast(CudaReport, _native.cuda_report())


def resolve_device(device: str, task_gpus: tuple[str, ...] | None) -> str:
    """The device a trainer asks the engine for. ``auto`` in a Spark task that Spark gave no
    GPU is the CPU (every trainer on a GPU host would otherwise take its first card);
    ``task_gpus`` is None outside Spark. A GPU device on the CUDA build first makes PyPI's
    libraries findable (the CPU build never loads them: they are hundreds of MB)."""
    if device == "auto" and task_gpus is not None and not task_gpus:
        return "cpu"
    if device != "cpu" and _native.CUDA:
        load_pypi_libraries()
    return device
