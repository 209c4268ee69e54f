"""Sphinx configuration of sparktrain's documentation: the README, ``docs/*.md`` and the
examples as narrative pages (MyST Markdown), and an API reference generated from the
docstrings of every public name. Built by ``bash docs/build.sh`` with warnings as errors and
every cross-reference checked (``nitpicky``).

The public names are those ``tests/test_public_api.py`` holds to its rules: the modules the
package's docstring names and the modules their ``__all__`` lists, each with its ``__all__``.
``reference/`` is written from them at every build, so a new public name cannot be left out.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

project = "sparktrain"
author = "the sparktrain authors"
copyright = "the sparktrain authors"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.doctest"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 4
nitpicky = True
html_theme = "alabaster"
html_static_path: list[str] = []
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}
suppress_warnings = ["myst.xref_missing"]
# The docstrings name types of packages whose own references this build does not fetch
# (it runs offline), and the compiled module, which is private.
nitpick_ignore_regex = [
    (r"py:.*", r"(pyarrow|pa|pyspark|numpy|np|pandas|pd|mlflow|torch|tensorflow|tf|jax|onnxruntime)(\..*)?"),
    (r"py:.*", r"(sparktrain\.)?_native(\..*)?"),
    (
        r"py:.*",
        r"(collections\.abc|typing|types|os|socket|subprocess|enum|pathlib|threading|argparse"
        r"|multiprocessing)\..*",
    ),
    (
        r"py:.*",
        r"(DataFrame|SparkSession|SparkContext|RDD|StructType|RecordBatch|Table|Schema|ndarray|Path|PathLike)",
    ),
]
# The docstrings' examples run with ``st`` imported and ``tmp``, a fresh folder of their own.
doctest_global_setup = """
import tempfile
import sparktrain as st
tmp = tempfile.mkdtemp(prefix="sparktrain-doctest-")
"""


def _public_modules() -> list[str]:
    """The public modules, as ``tests/test_public_api.py`` finds them."""
    import sparktrain

    named = re.findall(r":mod:`(sparktrain(?:\.\w+)+)`", sparktrain.__doc__ or "")
    pending, found = ["sparktrain", *named], []
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


def _home(obj: object, modules: list[str]) -> str | None:
    """The public module that documents ``obj``: the deepest one its own module lies in."""
    own = getattr(obj, "__module__", None) or ""
    holders = [m for m in modules if obj_in(m, obj)]
    inside = [m for m in holders if own == m or own.startswith(m + ".")]
    return max(inside, key=len) if inside else (holders[0] if holders else None)


def obj_in(module: str, obj: object) -> bool:
    mod = importlib.import_module(module)
    return any(getattr(mod, n, None) is obj for n in getattr(mod, "__all__", ()))


def _write_reference() -> None:
    """``reference/<module>.rst`` for every public module, documenting each name of its
    ``__all__`` (a name another public module documents links there instead)."""
    modules = _public_modules()
    out = HERE / "reference"
    out.mkdir(exist_ok=True)
    for stale in out.glob("*.rst"):
        stale.unlink()
    for name in modules:
        module = importlib.import_module(name)
        lines = [name, "=" * len(name), "", f".. automodule:: {name}", "   :no-members:", ""]
        for member in getattr(module, "__all__", ()):
            value = getattr(module, member)
            if isinstance(value, ModuleType):
                lines += [f"- :mod:`{value.__name__}`", ""]
                continue
            home = _home(value, modules) if (inspect.isclass(value) or callable(value)) else name
            if home is not None and home != name:
                kind = "class" if inspect.isclass(value) else "func"
                lines += [f"- ``{member}``: :py:{kind}:`{home}.{member}`", ""]
                continue
            directive = (
                "autoclass" if inspect.isclass(value) else "autofunction" if callable(value) else "autodata"
            )
            lines += [f".. {directive}:: {name}.{member}"]
            if directive == "autoclass":
                lines += ["   :members:"]
            lines += [""]
        (out / f"{name}.rst").write_text("\n".join(lines))
    toc = ["API reference", "=============", "", ".. toctree::", "   :maxdepth: 1", ""]
    toc += [f"   {name}" for name in modules]
    (out / "index.rst").write_text("\n".join(toc) + "\n")


_write_reference()


def _lookup(dotted: str) -> Any:
    """The object a dotted name names (a module, or an attribute path inside one), or None."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for part in parts[split:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


_documented: dict[int, tuple[str, str]] = {}
_defined: dict[str, list[Any]] = {}


def _defined_as(name: str) -> list[Any]:
    """The classes and functions named ``name`` that sparktrain's loaded modules define: what
    a bare name in a signature (imported only for type checking) stands for."""
    if not _defined:
        for module_name, module in list(sys.modules.items()):
            if not module_name.startswith("sparktrain") or module is None:
                continue
            for attr, value in vars(module).items():
                if (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__ == module_name:
                    _defined.setdefault(attr, []).append(value)
    return _defined.get(name, [])


def _resolve_by_identity(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolves what the Python domain could not, by the object a reference names:

    - a name given by the module that defines it (``sparktrain.training.driver.TrainResult``,
      as signatures give it) or by another public module (``sparktrain.Cluster.run``), or
      relative to the docstring's module (``JobCallback``), goes to where the reference
      documents that object;
    - an object of sparktrain's that the reference does not document (an implementation
      module, a private base class) is shown as text: it exists, so the reference is right.

    Anything else stays unresolved, and the build fails on it."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    contexts = [node.get("py:module"), node.get("py:class")]
    candidates = [target] + [f"{c}.{target}" for c in contexts if c]
    if node.get("py:module") and node.get("py:class"):
        candidates.append(f"{node['py:module']}.{node['py:class']}.{target}")
    domain = env.get_domain("py")
    if not _documented:
        for full, entry in domain.objects.items():
            found = _lookup(full)
            if found is not None:
                _documented.setdefault(id(found), (full, entry.objtype))
    objects = [_lookup(name) for name in candidates]
    if "." not in target:
        found = _defined_as(target)
        objects += found if len(found) == 1 else []
    for obj in objects:
        if obj is None:
            continue
        if id(obj) in _documented:
            full, _ = _documented[id(obj)]
            return domain.resolve_xref(env, node["refdoc"], app.builder, "obj", full, node, contnode)
        own = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
        if isinstance(own, str) and own.startswith("sparktrain"):
            return contnode
    return None


def _no_type_docstring(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """A constant without a ``#:`` comment of its own would show its type's docstring (``str``'s
    for ``__version__``): show nothing instead."""
    if what in ("data", "attribute") and lines:
        doc = type(obj).__doc__
        if not isinstance(doc, str):
            return
        own = inspect.cleandoc(doc).splitlines()
        if [line for line in lines if line.strip()] == [line for line in own if line.strip()]:
            lines.clear()


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _no_type_docstring)
    app.connect("missing-reference", _resolve_by_identity)
