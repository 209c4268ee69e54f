"""A user's DataFrame columns by their exact names, whatever characters they hold.

Spark reads a bare column name as a path: ``"a.b"`` is field ``b`` of a struct ``a``, and a
column named ``a.b`` must be quoted to be found. PySpark's own ``mapInArrow`` and ``cogroup``
look their input columns up by bare name, so they fail on such a column
(``UNRESOLVED_COLUMN``) even when nothing reads it. Used on the driver, by modules that scoring
tasks also load; pyspark is imported only when a function runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def column(name: str) -> Any:
    """The top-level column named exactly ``name``: a bare ``"a.b"`` names field ``b`` of a
    struct ``a`` to Spark, a quoted one the column ``a.b``."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def plain_names(df: DataFrame) -> DataFrame:
    """``df``, its columns renamed ``_0``, ``_1``, ... (in their order) if any name holds a dot
    or a backtick, for ``mapInArrow`` and ``cogroup``."""
    names = list(df.columns)
    if not any("." in n or "`" in n for n in names):
        return df
    return df.toDF(*(f"_{i}" for i in range(len(names))))


def map_in_arrow(
    df: Any, fn: Callable[[Iterator[Any]], Iterator[Any]], schema: Any, barrier: bool = False
) -> Any:
    """``df.mapInArrow(fn, schema)`` whatever ``df``'s column names: ``fn`` gets its batches
    under the real ones (:func:`plain_names`)."""
    names = list(df.columns)
    plain = plain_names(df)
    if plain is df:
        return df.mapInArrow(fn, schema, barrier=barrier)

    def named(batches: Iterator[Any]) -> Iterator[Any]:
        return fn(batch.rename_columns(names) for batch in batches)

    return plain.mapInArrow(named, schema, barrier=barrier)
