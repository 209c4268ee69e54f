"""The artifacts users get: the manylinux abi3 wheel in ``target/wheels`` installs into a fresh
virtualenv with no Rust toolchain on PATH, pip builds nothing from source, and the installed
package runs a small job end to end (TFRecords written and read back, a model trained, exported
and scored) and finds the jar it carries. The sdist next to it holds what a source build needs
and nothing else.

``submit/install.sh`` builds the wheel and ``tests/run.sh`` the sdist; these tests check what
they left in ``target/wheels`` rather than building anew (a release build takes minutes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / "target" / "wheels"
# The oldest glibc the Rust toolchain targets (2.17, CentOS 7); install.sh builds for it.
PLATFORM_TAGS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64")


def only(pattern: str) -> Path:
    found = sorted(WHEELS.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {WHEELS} (built by tests/run.sh), found {found}"
    return found[0]


def test_the_wheel_is_tagged_manylinux2014_abi3():
    wheel = only("sparktrain-*.whl")
    # name-version-python-abi-platform.whl; the platform part lists every tag, dot-separated.
    _, _, python, abi, platforms = wheel.name.removesuffix(".whl").split("-")
    assert (python, abi) == ("cp310", "abi3")
    assert set(platforms.split(".")) == set(PLATFORM_TAGS)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        tags = {
            line.split(": ", 1)[1]
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Tag: ")
        }
    assert tags == {f"cp310-abi3-{platform}" for platform in PLATFORM_TAGS}
    assert "sparktrain/_native.abi3.so" in names
    # Grafted libraries would land in sparktrain.libs/: the wheel must need none.
    assert not [n for n in names if ".libs/" in n]


def no_rust_env(home: Path) -> dict[str, str]:
    """This process's environment without a way to reach cargo or rustc: what a notebook host has."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUSTUP", "RUST", "VIRTUAL_ENV"))
    }
    env.pop("PYTHONPATH", None)
    keep = []
    for entry in env.get("PATH", "").split(os.pathsep):
        folder = Path(entry)
        if not entry or ".cargo" in folder.parts or ".venv" in folder.parts:
            continue
        if any((folder / tool).exists() for tool in ("cargo", "rustc", "rustup", "maturin")):
            continue
        keep.append(entry)
    env["PATH"] = os.pathsep.join(keep)
    # pip's cache stays where it is (it holds pyarrow and numpy: no download), but nothing else
    # of this user's home: no ~/.cargo/bin to fall back on.
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    env.setdefault("PIP_CACHE_DIR", str(Path(cache) / "pip"))
    env["HOME"] = str(home)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


SMOKE_JOB = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import pyarrow as pa
    import sparktrain as st
    from sparktrain.prediction import score_batch
    from sparktrain.training import Trainer

    out = sys.argv[1]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2000, 2)).astype(np.float32)
    shop = rng.integers(0, 10, 2000)
    label = ((x[:, 0] - 0.5 * x[:, 1] + (shop % 2)) > 0.5).astype(np.int64)
    table = pa.table({"label": label, "x0": x[:, 0], "x1": x[:, 1], "shop": shop})

    path = out + "/train.tfrecord.gz"
    written = st.tfrecord.write_batches(path, table)
    back = pa.Table.from_batches(list(st.tfrecord.read(path, columns=["label", "x0", "x1", "shop"])))
    same = back.cast(table.schema).equals(table)

    features = {"dense": ["x0", "x1"], "categorical": {"shop": 10}, "label": "label"}
    trainer = Trainer(model="wide_deep", features=features, hidden=[8], batch_size=64, seed=1)
    fit = trainer.fit(path, epochs=3)
    metrics = trainer.evaluate(path)
    export = trainer.export(out + "/export")
    scored = score_batch(export, table.drop(["label"]).to_batches()[0])
    scores = scored["score"].to_numpy()
    print(json.dumps({
        "module": st._native.__file__,
        "jar": st.jar_path(),
        "written": written,
        "same": same,
        "examples": fit.examples,
        "auc": metrics.auc,
        "scores": [len(scores), float(scores.min()), float(scores.max())],
    }))
    """
)


@pytest.mark.wheel
def test_the_wheel_installs_and_runs_without_rust(tmp_path):
    wheel = only("sparktrain-*.whl")
    env = no_rust_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    assert shutil.which("cargo", path=env["PATH"]) is None
    assert shutil.which("rustc", path=env["PATH"]) is None

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], env=env, check=True, timeout=120)
    python = str(venv / "bin" / "python")
    # The wheel's dependencies pinned to the test environment's versions, which pip has cached:
    # no download, and the same pyarrow and numpy the rest of the suite runs against.
    pins = [
        line
        for line in (ROOT / "tests" / "requirements.txt").read_text().splitlines()
        if line.startswith(("pyarrow==", "numpy=="))
    ]
    assert len(pins) == 2, pins
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-c", str(constraints), str(wheel)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = install.stdout + install.stderr
    assert install.returncode == 0, log
    # pip prepares the metadata of, and builds a wheel for, every package it takes from source.
    assert "Building wheel" not in log, log
    assert "Preparing metadata" not in log, log
    assert "Successfully installed" in log, log

    (tmp_path / "job").mkdir()
    job = subprocess.run(
        [python, "-c", SMOKE_JOB, str(tmp_path / "job")],
        env=env,
        cwd=tmp_path,  # not the checkout: the package must come from the virtualenv
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert job.returncode == 0, job.stderr
    result = json.loads(job.stdout.splitlines()[-1])
    assert Path(result["module"]).is_relative_to(venv), result
    assert Path(result["jar"]).is_relative_to(venv), result
    assert result["jar"].endswith(".jar"), result
    assert result["written"] == 2000, result
    assert result["same"], result
    assert result["examples"] == 6000, result
    assert result["auc"] > 0.8, result
    count, low, high = result["scores"]
    assert count == 2000, result
    assert 0.0 <= low < high <= 1.0, result


# What `pip install` from the sdist needs: the workspace manifest and lock, every crate, the
# Python package and the build configuration.
SDIST_NEEDS = (
    "pyproject.toml",
    "README.md",
    "Cargo.toml",
    "Cargo.lock",
    "rust/python/Cargo.toml",
    "rust/python/src/lib.rs",
    "python/sparktrain/__init__.py",
    "python/sparktrain/py.typed",
    "python/sparktrain/_native.pyi",
    "python/pyspark_sparktrain/__init__.py",
)


def test_the_sdist_holds_the_source_build_and_no_junk(tmp_path):
    sdist = only("sparktrain-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        archive.extractall(tmp_path, filter="data")
    top = sdist.name.removesuffix(".tar.gz")
    assert all(n == top or n.startswith(top + "/") for n in names), names[:5]
    inside = {n.removeprefix(top + "/") for n in names}
    missing = [n for n in SDIST_NEEDS if n not in inside]
    assert not missing, f"the sdist lacks {missing}"
    for crate in sorted(p.name for p in (ROOT / "rust").iterdir() if (p / "Cargo.toml").is_file()):
        assert {f"rust/{crate}/Cargo.toml", f"rust/{crate}/src/lib.rs"} <= inside, crate
    # The protobuf definitions the build scripts compile.
    protos = {str(p.relative_to(ROOT)) for p in (ROOT / "rust").glob("*/proto/*.proto")}
    assert protos <= inside, protos - inside
    junk = [
        n
        for n in inside
        if n.split("/")[0] in {"target", ".venv", ".git", "tests", "jars"}
        or "/target/" in f"/{n}"
        or "__pycache__" in n
        or n.endswith((".so", ".pyc", ".whl"))
    ]
    assert not junk, f"the sdist carries {sorted(junk)[:10]}"
    # Cargo resolves the unpacked workspace against its lock file as the source build will:
    # every member is there and Cargo.lock matches the manifests. (Crates come from cargo's
    # cache here; the build itself is what install.sh already did.)
    manifest = tmp_path / top / "rust" / "python" / "Cargo.toml"
    resolve = subprocess.run(
        ["cargo", "metadata", "--locked", "--offline", "--format-version=1", f"--manifest-path={manifest}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resolve.returncode == 0, resolve.stderr
    packages = {p["name"] for p in json.loads(resolve.stdout)["packages"]}
    assert {"sparktrain-python", "sparktrain-train", "ring"} <= packages
