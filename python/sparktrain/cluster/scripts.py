"""A Python file as a job's entry point: ``Cluster.run(spark, "train.py", args=[...])`` runs the
file as ``__main__`` in every trainer, with ``args`` as its command line, as ``torchrun`` does.
A :class:`Script` is made on the driver and called in the trainer process.

The file is read on the driver, where its path is checked, and its text travels with the job,
so the executors need no copy of it. A trainer runs the file at its original path when that
path holds the same text there (a shared file system, or a local cluster), so that modules
beside it import as they would for ``python train.py``; otherwise it writes the text to a
private folder under the file's name and runs that. Either way :func:`runpy.run_path` runs it:
``__file__``, ``sys.argv[0]`` and ``sys.path[0]`` are the file's, and the environment holds
``TF_CONFIG`` and PyTorch's and JAX's variables (:mod:`sparktrain.cluster.trainer.frameworks`).
``sys.exit(0)`` (or the end of the file) is success; any other exit status fails the trainer.
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparktrain import _checks
from sparktrain.errors import InvalidArgumentError


class ScriptExit(Exception):
    """The script exited with a non-zero status."""


@dataclass(frozen=True)
class Script:
    """A script and its text, callable as a ``main_fun``: ``script(argv, ctx)``."""

    #: The path as given on the driver, for ``sys.argv[0]``'s name and messages.
    path: str
    text: bytes

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Script:
        """Reads the script at ``path``; :class:`InvalidArgumentError` names ``main_fun`` when
        it is not a readable ``.py`` file."""
        name = os.fspath(path)
        if not name.endswith(".py"):
            raise _checks.refuse("main_fun", name, "a script entry point must be a .py file")
        try:
            text = Path(name).read_bytes()
        except OSError as e:
            raise _checks.refuse("main_fun", name, f"cannot read the script: {e.strerror or e}") from e
        try:
            compile(text, name, "exec")
        except SyntaxError as e:
            raise _checks.refuse("main_fun", name, f"is not valid Python: line {e.lineno}: {e.msg}") from e
        return cls(name, text)

    def __call__(self, argv: Sequence[str] | None, ctx: Any) -> None:
        path = os.path.abspath(self.path)
        try:
            in_place = Path(path).read_bytes() == self.text
        except OSError:
            in_place = False
        if not in_place:
            path = os.path.join(tempfile.mkdtemp(prefix="sparktrain-script-"), os.path.basename(self.path))
            with open(path, "wb") as f:
                f.write(self.text)
        sys.argv = [path, *(argv or [])]
        sys.path.insert(0, os.path.dirname(path))
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                raise ScriptExit(f"{self.path} exited with status {e.code!r}") from None


def script_arguments(args: object) -> list[str]:
    """A script's command line: ``None`` or a sequence of strings and numbers, as ``str``."""
    if args is None:
        return []
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise InvalidArgumentError(
            f"args={args!r}: a script entry point takes its command line, a list of strings"
        )
    bad = [a for a in args if not isinstance(a, str | int | float) or isinstance(a, bool)]
    if bad:
        raise InvalidArgumentError(f"args: a script's arguments are strings or numbers, not {bad[0]!r}")
    return [str(a) for a in args]


__all__ = ["Script", "ScriptExit", "script_arguments"]
