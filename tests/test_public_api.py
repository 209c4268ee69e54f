"""The public API: the names sparktrain promises, each documented.

The public modules are ``sparktrain``, the modules its docstring names (``:mod:`sparktrain.x```)
and, in turn, every module listed in a public module's ``__all__`` (the TFoS shim's modules).
Modules that none of these names, such as ``sparktrain.tfrecord._dataframes`` or
``sparktrain.cluster.driver.launcher``, are implementation; the rules below do not apply to them.

- Every public module declares ``__all__``.
- Every name in ``__all__`` resolves, and every class, function or module among them has a
  docstring of its own. A dataclass's generated signature does not count as a docstring.
  Constants (``__version__``) need none.
- Every class and function a public module defines itself (its ``__module__`` is that module)
  is either in the module's ``__all__`` or named with a leading underscore. The underscore is
  how a name is kept internal (PEP 8), so a name without one is a promise and belongs in
  ``__all__``. Names a module imports are checked in the module that defines them.
- Every public class in ``sparktrain.errors`` derives from ``SparktrainError``, so that
  ``except SparktrainError`` catches all of them, and has a docstring of its own.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from types import ModuleType

import pytest

import sparktrain
from sparktrain import errors


def _public_modules() -> list[str]:
    named = re.findall(r":mod:`(sparktrain(?:\.\w+)+)`", sparktrain.__doc__ or "")
    pending = ["sparktrain", *named]
    found: list[str] = []
    while pending:
        name = pending.pop(0)
        if name in found:
            continue
        found.append(name)
        module = importlib.import_module(name)
        for member in getattr(module, "__all__", ()):
            value = getattr(module, member, None)
            if isinstance(value, ModuleType):
                pending.append(value.__name__)
    return found


PUBLIC_MODULES = _public_modules()


def _docstring(obj: object) -> str:
    """``obj``'s own docstring, or "" if it has none."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not isinstance(doc, str):
        return ""
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        generated = obj.__name__ + str(inspect.signature(obj)).replace(" -> None", "")
        if doc == generated:
            return ""
    return doc.strip()


def _defined_here(module: ModuleType) -> dict[str, object]:
    """The classes and functions ``module`` defines, by name, leading underscores excluded."""
    return {
        name: value
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    }


def test_the_public_modules_include_those_the_package_names() -> None:
    assert {"sparktrain.errors", "sparktrain.fs", "sparktrain.tfrecord", "sparktrain.tfos"} <= set(
        PUBLIC_MODULES
    )


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_declares_all(name: str) -> None:
    exported = getattr(importlib.import_module(name), "__all__", None)
    assert isinstance(exported, list | tuple), f"{name} declares no __all__"


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_name_in_all_resolves_and_is_documented(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", ()))
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what {name} does not have: {missing}"
    documented_kinds = (inspect.isclass, inspect.isfunction, inspect.ismodule, inspect.isbuiltin)
    undocumented = [
        n
        for n in exported
        if any(kind(getattr(module, n)) for kind in documented_kinds) and not _docstring(getattr(module, n))
    ]
    assert not undocumented, f"without a docstring of their own in {name}: {undocumented}"


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_class_and_function_is_in_all(name: str) -> None:
    module = importlib.import_module(name)
    unlisted = sorted(set(_defined_here(module)) - set(getattr(module, "__all__", ())))
    assert not unlisted, f"defined in {name} without a leading underscore, but not in its __all__: {unlisted}"


def test_every_error_derives_from_sparktrain_error_and_is_documented() -> None:
    classes = {n: c for n, c in _defined_here(errors).items() if inspect.isclass(c)}
    assert "SparktrainError" in classes
    underived = [n for n, c in classes.items() if not issubclass(c, errors.SparktrainError)]
    assert not underived, f"not subclasses of SparktrainError: {underived}"
    undocumented = [n for n, c in classes.items() if not _docstring(c)]
    assert not undocumented, f"without a docstring of their own: {undocumented}"
