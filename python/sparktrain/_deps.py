"""Optional dependencies, imported where they are first needed. Imported anywhere.

The Spark side of sparktrain needs pyspark, and pandas for ``mapInArrow`` (the ``spark``
extra); trainers and the TFRecord API start without them. :func:`require` imports one on
behalf of a public entry point, and turns its absence into
:class:`~sparktrain.errors.MissingDependencyError` naming the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sparktrain.errors import MissingDependencyError

#: The extra of the Spark side: pyspark, and pandas for ``mapInArrow``.
SPARK_EXTRA = "spark"


def require(module: str, *, extra: str, needed_by: str) -> ModuleType:
    """Imports ``module`` (``"pyspark"``, ``"pyspark.sql"``...) and returns it.

    Raises :class:`~sparktrain.errors.MissingDependencyError` when it cannot be imported:
    ``"<needed_by> needs pyspark: pip install 'sparktrain[<extra>]'"``, chained to the
    ImportError that said so."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = module.split(".", 1)[0]
        raise MissingDependencyError(
            f"{needed_by} needs {package}: pip install 'sparktrain[{extra}]'", package=package, extra=extra
        ) from e


def require_spark(needed_by: str, *, arrow_udfs: bool = False) -> ModuleType:
    """``pyspark``, for ``needed_by`` (a public entry point, as users call it). With
    ``arrow_udfs`` pandas is checked too: PySpark refuses ``mapInArrow`` without it."""
    pyspark = require("pyspark", extra=SPARK_EXTRA, needed_by=needed_by)
    if arrow_udfs:
        require("pandas", extra=SPARK_EXTRA, needed_by=needed_by)
    return pyspark


def has_python_data_sources() -> bool:
    """Whether the installed PySpark has the Python data source API (``pyspark.sql.datasource``,
    PySpark 4.0 and later; PySpark 3.5 has none)."""
    try:
        importlib.import_module("pyspark.sql.datasource")
    except ImportError:
        return False
    return True


def require_python_data_sources(needed_by: str, instead: str) -> None:
    """Raises :class:`~sparktrain.errors.MissingDependencyError` when the installed PySpark has
    no Python data source API (3.5), naming ``instead``: what works there."""
    if has_python_data_sources():
        return
    pyspark = require_spark(needed_by)
    raise MissingDependencyError(
        f"{needed_by} needs PySpark 4.0 or later for its Python data source API, and this is "
        f"PySpark {pyspark.__version__}: {instead}",
        package="pyspark",
        extra=SPARK_EXTRA,
    )
