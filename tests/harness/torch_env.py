"""The PyTorch virtualenv (``.venv-torch``): PyTorch from PyPI brings several GB of CUDA
wheels and needs a setuptools that TensorFlowOnSpark (in ``.venv``) cannot have, so it lives
apart, made from ``tests/bench/requirements-torch.txt`` and reused while that file is unchanged.
The sparktrain wheel that ``tests/run.sh`` built goes in too, since a job run by its
interpreter has it as driver and executors."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-torch"
REQUIREMENTS = ROOT / "tests" / "bench" / "requirements-torch.txt"


def torch_python(venv: Path = VENV, *, with_wheel: bool = True) -> Path:
    """``venv``'s interpreter, making ``venv`` first when it is missing or was made from other
    requirements, and installing the newest built sparktrain wheel when ``with_wheel``."""
    python = venv / "bin" / "python"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv / ".requirements.sha"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if not stamp.exists() or stamp.read_text().strip() != want:
        print(f"installing {REQUIREMENTS.name} into {venv} (PyTorch: a few GB)", file=sys.stderr)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(want)
    if with_wheel:
        wheels = sorted((ROOT / "target" / "wheels").glob("sparktrain-*.whl"))
        if not wheels:
            raise RuntimeError("no sparktrain wheel in target/wheels: run submit/install.sh first")
        built = hashlib.sha256(wheels[-1].read_bytes()).hexdigest()
        installed = venv / ".wheel.sha"
        if not installed.exists() or installed.read_text().strip() != built:
            pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            subprocess.run([*pip, "--force-reinstall", "--no-deps", str(wheels[-1])], check=True)
            installed.write_text(built)
    return python


if __name__ == "__main__":
    print(torch_python())
