"""Packing the current Python environment for ``spark-submit --archives``.

A YARN or Kubernetes node rarely has the driver's Python packages. Spark can ship an archive
with the job and unpack it in every container's working folder; :func:`pack` makes that
archive from the environment sparktrain runs in, with the maintained packers: ``venv-pack``
for a virtualenv, ``conda-pack`` for a conda env. :class:`PackedEnv` says which confs use it.

A venv-pack archive holds the packages, not the interpreter: every node needs the same Python
at the same path as the machine that packed it (its ``bin/python`` is a link to it). A
conda-pack archive carries its interpreter and runs anywhere with the same OS and libc.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from sparktrain._deps import require
from sparktrain.errors import ConfigurationError, InvalidArgumentError

#: The extra that installs both packers.
PACK_EXTRA: Final = "deploy"
#: The folder name the archive is unpacked under in every container (``archive#alias``).
DEFAULT_ALIAS: Final = "environment"
#: Spark's conf of the driver's interpreter.
DRIVER_PYTHON_CONF: Final = "spark.pyspark.driver.python"

EnvKind = Literal["venv", "conda"]


@dataclass(frozen=True)
class PackedEnv:
    """An environment archive and how Spark uses it."""

    #: Where the archive is: a local path or a storage URL (``hdfs://...``).
    archive: str
    #: ``"venv"`` or ``"conda"``.
    kind: EnvKind
    #: The folder containers unpack it under.
    alias: str = DEFAULT_ALIAS

    @property
    def shipped(self) -> str:
        """``ARCHIVE#ALIAS``, as ``--archives`` and ``spark.archives`` take it."""
        return f"{self.archive}#{self.alias}"

    @property
    def python(self) -> str:
        """The interpreter inside the unpacked archive, relative to a container's folder."""
        return f"./{self.alias}/bin/python"

    def confs(self, deploy_mode: str = "cluster") -> dict[str, str]:
        """The Spark confs that ship the archive and run Python from it.

        ``spark.archives`` unpacks it in every executor (and, in cluster mode, the driver's
        container); in client mode the driver keeps this machine's interpreter
        (:func:`driver_python_confs`)."""
        return {
            "spark.archives": self.shipped,
            "spark.pyspark.python": self.python,
            **driver_python_confs(deploy_mode),
        }


def driver_python_confs(deploy_mode: str) -> dict[str, str]:
    """The driver's interpreter in ``deploy_mode``. In client mode the driver runs on this
    machine, under this interpreter (the one with sparktrain): without the conf Spark would
    start it with ``spark.pyspark.python``, which may be an interpreter inside a shipped
    archive that exists only in the containers, or else whatever ``python3`` is on ``PATH``.
    In cluster mode the driver's container has the executors' Python: nothing to add."""
    return {DRIVER_PYTHON_CONF: sys.executable} if deploy_mode == "client" else {}


def plain_folder_name(name: str) -> bool:
    """Whether ``name`` can be the ALIAS of ``ARCHIVE#ALIAS``: one folder, and nothing that
    Spark's ``#`` or its comma-separated lists would split."""
    return name not in ("", ".", "..") and not any(c in name for c in "/#,")


def current_env() -> tuple[str, EnvKind]:
    """The prefix and kind of the environment this interpreter runs in.

    Raises :class:`~sparktrain.errors.InvalidArgumentError` for a system interpreter: only an
    environment of its own can be packed whole."""
    prefix = sys.prefix
    if (Path(prefix) / "conda-meta").is_dir():
        return prefix, "conda"
    if prefix != sys.base_prefix:
        return prefix, "venv"
    raise InvalidArgumentError(
        f"{sys.executable} is not in a virtualenv or conda env, so there is nothing of its own to "
        "pack: create one (python -m venv env && env/bin/pip install 'sparktrain[spark]') and run "
        "sparktrain pack from it"
    )


def pack(
    output: str | None = None,
    *,
    prefix: str | None = None,
    alias: str = DEFAULT_ALIAS,
    overwrite: bool = False,
    compress_level: int = 4,
) -> PackedEnv:
    """Packs the environment at ``prefix`` (default: the current one) into a ``.tar.gz``.

    ``output`` is a local path or a storage URL (``hdfs://...``, written atomically); the
    default is ``<env name>.tar.gz`` in the current folder. The environment must have
    sparktrain installed: the trainers import it from the archive."""
    if prefix is None:
        prefix, kind = current_env()
    else:
        prefix = os.path.abspath(prefix)
        if not (Path(prefix) / "bin" / "python").exists():
            raise InvalidArgumentError(f"prefix={prefix!r}: no bin/python there; not a Python environment")
        kind = "conda" if (Path(prefix) / "conda-meta").is_dir() else "venv"
    _check_has_sparktrain(prefix)
    if not plain_folder_name(alias):
        raise InvalidArgumentError(
            f"alias={alias!r} (--alias): must be a plain folder name, without '/', '#' or ','"
        )
    target = output or f"{Path(prefix).name}.tar.gz"
    if not target.endswith((".tar.gz", ".tgz")):
        raise InvalidArgumentError(f"output={target!r} (--output): must end with .tar.gz or .tgz")
    if "#" in target or "," in target:
        # spark.archives is a comma-separated list of ARCHIVE#ALIAS.
        raise InvalidArgumentError(
            f"output={target!r} (--output): a '#' or ',' in it would break spark.archives "
            "(ARCHIVE#ALIAS, comma-separated); choose another name"
        )
    remote = "://" in target and not target.startswith("file://")
    if not remote:
        target = os.path.abspath(target.removeprefix("file://"))
        if os.path.exists(target) and not overwrite:
            raise InvalidArgumentError(
                f"output={target!r} exists; pass overwrite=True (--force) to replace it"
            )
    from sparktrain import fs

    if remote and fs.exists(target) and not overwrite:
        raise InvalidArgumentError(f"output={target!r} exists; pass overwrite=True (--force) to replace it")

    with tempfile.TemporaryDirectory(prefix="sparktrain-pack-") as scratch:
        local = os.path.join(scratch, "env.tar.gz") if remote else target
        packer_name = "conda_pack" if kind == "conda" else "venv_pack"
        packer = require(packer_name, extra=PACK_EXTRA, needed_by=f"sparktrain pack ({kind} env)")
        try:
            packer.pack(prefix=prefix, output=local, force=True, compress_level=compress_level)
        except Exception as e:
            # The packers raise their own errors (files changed by hand, editable installs...).
            raise ConfigurationError(f"{packer_name} could not pack {prefix}: {e}") from e
        if remote:
            # One copy through sparktrain's own storage layer: no Hadoop client needed here.
            fs.write_bytes(target, Path(local).read_bytes(), overwrite=overwrite)
    return PackedEnv(archive=target, kind=kind, alias=alias)


def _check_has_sparktrain(prefix: str) -> None:
    lib = Path(prefix) / "lib"
    if not any(lib.glob("python3*/site-packages/sparktrain/__init__.py")):
        raise InvalidArgumentError(
            f"the environment {prefix} does not have sparktrain installed, so its trainers could not "
            f"start: {prefix}/bin/pip install 'sparktrain[spark]' first"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``sparktrain pack``: packs, then prints the archive and the confs that use it; returns 0,
    or 2 (with the reason on stderr) when the options are refused or the packing fails."""
    parser = argparse.ArgumentParser(
        prog="sparktrain pack",
        description="Pack the current virtualenv or conda env (with sparktrain) into an archive for "
        "spark-submit --archives, and print the confs that use it.",
    )
    parser.add_argument("-o", "--output", help="archive path or storage URL (default: ./<env>.tar.gz)")
    parser.add_argument("--prefix", help="the environment to pack (default: the current one)")
    parser.add_argument(
        "--alias", default=DEFAULT_ALIAS, help="folder it unpacks under (default: %(default)s)"
    )
    parser.add_argument("--deploy-mode", choices=("cluster", "client"), default="cluster")
    parser.add_argument("-f", "--force", action="store_true", help="replace an existing archive")
    parser.add_argument("--compress-level", type=int, default=4, choices=range(10), metavar="0-9")
    args = parser.parse_args(argv)
    from sparktrain.errors import SparktrainError

    try:
        packed = pack(
            args.output,
            prefix=args.prefix,
            alias=args.alias,
            overwrite=args.force,
            compress_level=args.compress_level,
        )
    except SparktrainError as e:
        print(f"sparktrain pack: {e}", file=sys.stderr)
        return 2
    print(f"packed the {packed.kind} into {packed.archive}")
    if packed.kind == "venv":
        print(f"(its bin/python links to {sys.base_prefix}: every node needs that Python at that path)")
    print("use it with:")
    for key, value in packed.confs(args.deploy_mode).items():
        print(f"  --conf {key}={value}")
    print(f"or: sparktrain submit --archives {packed.shipped} --python {packed.python} ...")
    return 0


__all__ = [
    "DEFAULT_ALIAS",
    "DRIVER_PYTHON_CONF",
    "PackedEnv",
    "current_env",
    "driver_python_confs",
    "main",
    "pack",
    "plain_folder_name",
]
