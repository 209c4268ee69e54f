"""The optional ``mlflow`` import, and the run resolution both sides share. Imported on the
driver and in the trainer process.

``mlflow-skinny`` (the client alone) is enough for everything here; the full ``mlflow`` package
is a superset. Without either, :func:`require_mlflow` raises
:class:`~sparktrain.errors.MissingDependencyError` naming the package, and nothing is imported
until something asks for MLflow.
"""

from __future__ import annotations

from types import ModuleType

from sparktrain._deps import require

#: The extra that installs the MLflow client: ``pip install 'sparktrain[mlflow]'``.
MLFLOW_EXTRA = "mlflow"


def require_mlflow(needed_by: str) -> ModuleType:
    """The ``mlflow`` module, for ``needed_by`` (as users call it)."""
    return require("mlflow", extra=MLFLOW_EXTRA, needed_by=needed_by)
