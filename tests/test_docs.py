"""The Python examples of the README and ``docs/*.md`` against the API they show.

Most of them address a cluster (``hdfs://nn:9000/...``, YARN), so they cannot run here; what
rots in them is the API: a function renamed, a parameter removed or renamed. Each ```` ```python ````
block must parse, every ``sparktrain`` name it uses must exist, and every call of a sparktrain
function or class must bind to its signature: the number of positional arguments and every
keyword by name (for :func:`sparktrain.train`, whose extra keywords go to the engine's
``Trainer``, against that too). The docstrings' examples run in ``bash docs/build.sh``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import sparktrain

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for document in DOCUMENTS:
        text = (ROOT / document).read_text()
        for block in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            line = text[: block.start()].count("\n") + 2
            found.append((document, line, block.group(1)))
    return found


BLOCKS = _blocks()


def _resolve(node: ast.expr, names: dict[str, Any]) -> Any:
    """The object an expression of names and attributes stands for, when it is sparktrain's."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, names)
        if owner is None:
            return None
        if not hasattr(owner, node.attr):
            raise AssertionError(f"{ast.unparse(node)}: {owner!r} has no attribute {node.attr!r}")
        return getattr(owner, node.attr)
    return None


def _sparktrain_names(tree: ast.Module) -> dict[str, Any]:
    """The names a block binds to sparktrain's modules and objects by its imports."""
    names: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sparktrain":
                    module = importlib.import_module(alias.name)
                    names[alias.asname or alias.name.split(".")[0]] = module if alias.asname else sparktrain
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sparktrain":
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if value is None:
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                names[alias.asname or alias.name] = value
    return names


def _check_call(call: ast.Call, target: Any) -> None:
    function = target.__init__ if inspect.isclass(target) else target
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    if inspect.isclass(target):
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return  # *args or **kwargs: the names are not in the text
    args = [object()] * len(call.args)
    kwargs = {k.arg: object() for k in call.keywords if k.arg is not None}
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise AssertionError(f"{ast.unparse(call)[:120]}: {e}") from None
    if target is sparktrain.train:
        # train's other keywords go to the engine's Trainer.
        from sparktrain.training import Trainer

        accepted = set(inspect.signature(Trainer.__init__).parameters) | set(
            sparktrain._native.HYPERPARAMETERS
        )
        extra = set(bound.arguments.get("hyperparameters", {})) - accepted
        assert not extra, (
            f"{ast.unparse(call)[:120]}: train() passes {sorted(extra)} to Trainer, which refuses them"
        )


@pytest.mark.parametrize(("document", "line", "code"), BLOCKS, ids=[f"{d}:{n}" for d, n, _ in BLOCKS])
def test_a_documented_example_uses_the_api_as_it_is(document: str, line: int, code: str) -> None:
    tree = ast.parse(code, filename=f"{document}:{line}")
    names = _sparktrain_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            _resolve(node, names)
        if isinstance(node, ast.Call):
            target = _resolve(node.func, names)
            if target is not None and (inspect.isclass(target) or callable(target)):
                _check_call(node, target)


def test_the_examples_are_found() -> None:
    documents = {d for d, _, _ in BLOCKS}
    assert {"README.md", "docs/ml.md", "docs/tracking.md"} <= documents
