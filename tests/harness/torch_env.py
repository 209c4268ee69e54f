"""The PyTorch virtualenv (``.venv-torch``): PyTorch from PyPI brings several GB of CUDA
wheels and needs a setuptools that TensorFlowOnSpark (in ``.venv``) cannot have, so it lives
apart, made from ``tests/bench/requirements-torch.txt`` and reused while that file is unchanged.
The sparktrain wheel that ``tests/run.sh`` built goes in too, since a job run by its
interpreter has it as driver and executors.

PyTorch's install takes about 7.5 GB on disk. The requirements pin every package, so they go in
one large wheel at a time: pip resolving them together would keep all their downloads (3.5 GB)
until it ends. On a machine with less free than the install needs, :func:`torch_python` raises
:class:`TorchEnvUnavailable` before pip starts, rather than leave a half-installed virtualenv,
and the tests that need it skip with that reason."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-torch"
REQUIREMENTS = ROOT / "tests" / "bench" / "requirements-torch.txt"
# The installed virtualenv (7.5 GB with PyTorch 2.9's CUDA wheels) and the download of its
# largest wheel (cuDNN, under 1 GB), with some room to spare.
NEEDED_BYTES = 10 * 2**30
# Packages whose wheels are hundreds of MB: each is installed by a pip of its own, so that its
# download is gone before the next one starts.
LARGE = ("torch", "triton", "nvidia-")


class TorchEnvUnavailable(RuntimeError):
    """The PyTorch virtualenv is not built and this machine's disk cannot hold it."""


def torch_python(venv: Path = VENV, *, with_wheel: bool = True) -> Path:
    """``venv``'s interpreter, making ``venv`` first when it is missing or was made from other
    requirements, and installing the newest built sparktrain wheel when ``with_wheel``."""
    python = venv / "bin" / "python"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv / ".requirements.sha"
    if not stamp.exists() or stamp.read_text().strip() != want:
        free = shutil.disk_usage(venv.parent).free
        if free < NEEDED_BYTES:
            raise TorchEnvUnavailable(
                f"{venv} is not built and the disk has {free / 2**30:.1f} GiB free; "
                f"PyTorch's install needs about {NEEDED_BYTES / 2**30:.0f} GiB"
            )
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        print(f"installing {REQUIREMENTS.name} into {venv} (PyTorch: a few GB)", file=sys.stderr)
        _pip_install(python, "--upgrade", "pip")
        _install_one_by_one(python)
        stamp.write_text(want)
    if with_wheel:
        wheels = sorted((ROOT / "target" / "wheels").glob("sparktrain-*.whl"))
        if not wheels:
            raise RuntimeError("no sparktrain wheel in target/wheels: run submit/install.sh first")
        built = hashlib.sha256(wheels[-1].read_bytes()).hexdigest()
        installed = venv / ".wheel.sha"
        if not installed.exists() or installed.read_text().strip() != built:
            _pip_install(python, "--force-reinstall", "--no-deps", str(wheels[-1]))
            installed.write_text(built)
    return python


def _install_one_by_one(python: Path) -> None:
    """Installs the pinned requirements, each large wheel by itself and the small ones together,
    then has pip check that the pins left no dependency out."""
    lines = (line.split("#", 1)[0].strip() for line in REQUIREMENTS.read_text().splitlines())
    pins = [pin for pin in lines if pin]
    large = [pin for pin in pins if pin.lower().startswith(LARGE)]
    small = [pin for pin in pins if pin not in large]
    for batch in [*([pin] for pin in large), small]:
        # No pip cache: it would keep a second copy of the multi-GB wheels.
        _pip_install(python, "--no-cache-dir", "--no-deps", *batch)
    subprocess.run([str(python), "-m", "pip", "check"], check=True)


def _pip_install(python: Path, *args: str) -> None:
    """``pip install`` in ``python``'s environment, quietly."""
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *args], check=True)


def torch_python_for_tests() -> Path:
    """:func:`torch_python` for a test: skips it when the virtualenv is not built, outside CI
    (where building it would cost a run minutes and GBs unasked), or when the disk cannot hold
    it, with the reason."""
    import pytest

    if not (VENV / "bin" / "python").exists() and os.environ.get("CI") != "true":
        pytest.skip(f"{VENV} is not built: python tests/harness/torch_env.py (PyTorch, a few GB)")
    try:
        return torch_python()
    except TorchEnvUnavailable as unavailable:
        pytest.skip(str(unavailable))


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Makes .venv-torch and installs the built wheel in it.")
    parser.add_argument(
        "--without-wheel",
        action="store_true",
        help="the requirements alone (tests/environments.sh runs this while the wheel compiles)",
    )
    args = parser.parse_args()
    try:
        print(torch_python(with_wheel=not args.without_wheel))
    except TorchEnvUnavailable as unavailable:
        # Not fatal: the tests that need PyTorch say this again as their reason to skip.
        print(f"PyTorch environment not built: {unavailable}", file=sys.stderr)
