"""``examples/notebook.ipynb``, executed from top to bottom in a fresh IPython kernel of this
interpreter, as a data engineer would run it, with its output folder moved to a temporary one.
Every cell must run without an error, the training cell must show the chief's progress line,
the plot cell an image and the last cell the AUC of the held-out scores."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"

# The kernel starts its own Spark driver and local cluster, outside the spark fixture.
pytestmark = pytest.mark.spark


def kernel_manager(folder: Path):
    """A kernel manager whose only kernel spec, ``python3``, runs ipykernel on this interpreter:
    a ``python3`` spec elsewhere (the user's Jupyter folder, another environment) is not used."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"})
    )
    specs = KernelSpecManager(kernel_dirs=[str(folder / "kernels")], ensure_native_kernel=False)
    return KernelManager(kernel_name="python3", kernel_spec_manager=specs)


def with_parameters(nb, **values) -> None:
    """Inserts a cell after the one tagged ``parameters`` that sets ``values``, as papermill does."""
    from nbformat.v4 import new_code_cell

    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    source = "\n".join(f"{name} = {value!r}" for name, value in values.items())
    nb.cells.insert(index + 1, new_code_cell(source, id="injected-parameters"))


def cell(nb, cell_id: str):
    return next(c for c in nb.cells if c.get("id") == cell_id)


def streams(code_cell, name: str) -> str:
    return "".join(o.text for o in code_cell.outputs if o.output_type == "stream" and o.name == name)


def test_the_notebook_runs_and_shows_progress_the_loss_curve_and_the_auc(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    stored = nbformat.read(NOTEBOOK, as_version=4)
    # Kept without outputs, so that the repository stays small and diffs stay readable.
    code = [c for c in stored.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)

    nb = nbformat.read(NOTEBOOK, as_version=4)
    with_parameters(nb, OUTPUT=str(tmp_path / "output"))
    client = NotebookClient(
        nb,
        km=kernel_manager(tmp_path / "jupyter"),
        timeout=300,  # per cell
        startup_timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working folder
    )
    client.execute()  # raises CellExecutionError, with the cell's traceback, for any error

    # The chief's ctx.report metrics, on one stderr line rewritten in place by carriage returns.
    progress = streams(cell(nb, "train"), "stderr")
    updates = re.findall(r"\r\x1b\[2K\[sparktrain\] step ([\d,]+) \|[^\r\n]*\bloss \d", progress)
    assert len(updates) >= 2, progress[-3000:]
    steps = [int(s.replace(",", "")) for s in updates]
    assert steps == sorted(steps), steps
    # Large figures with thousands separators, not in exponent notation.
    assert re.search(r"examples_per_sec \d{1,3}(,\d{3})+(?![\d.e])", progress), progress[-3000:]
    summary = streams(cell(nb, "train"), "stdout")
    assert re.search(r"\d+ steps, [\d,]+ examples", summary), summary

    plot = cell(nb, "plot")
    assert any("image/png" in o.get("data", {}) for o in plot.outputs), plot.outputs

    printed = streams(cell(nb, "predict"), "stdout")
    found = re.search(r"AUC of the scores on ([\d,]+) held-out rows: ([\d.]+)", printed)
    assert found, printed
    assert int(found[1].replace(",", "")) > 0
    assert 0.5 < float(found[2]) <= 1.0, printed
    assert (tmp_path / "output" / "model" / "export" / "model.json").exists()
