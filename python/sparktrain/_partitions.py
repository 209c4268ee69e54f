"""``col=value/`` folders, written and read as Spark's file sources do. Runs on the driver, in
Spark tasks, and wherever :class:`sparktrain.data.Dataset` reads.

Values are written as their text (dates as ``YYYY-MM-DD``, booleans as ``true``/``false``), with
the characters Spark escapes replaced by ``%XX``; a null is ``__HIVE_DEFAULT_PARTITION__``.
Reading discovers the columns from the folder names and infers each column's type over all
files: int, long, double, date, else string.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"

# The characters Spark's ExternalCatalogUtils escapes in partition path names.
_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^") | {chr(c) for c in range(1, 0x20)}
_SEPARATOR = "\x00"


def escape(value: str) -> str:
    """A partition value as a path name component."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def unescape(name: str) -> str:
    """The value a path name component stands for."""
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), name)


def _as_text(column: pa.Array) -> pa.Array:
    if pa.types.is_boolean(column.type):
        text = pc.if_else(column, "true", "false")
    else:
        text = pc.cast(column, pa.string())
    # Spark writes an empty string to the null value's folder too: a `p=` folder is one neither
    # Spark nor the jar would read back (EMPTY_PARTITION_COLUMN_VALUE).
    text = pc.if_else(pc.equal(text, ""), NULL_VALUE, text)
    return pc.fill_null(text, NULL_VALUE)


def split_by_partition(batch: pa.RecordBatch, columns: Sequence[str]) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Splits ``batch`` into runs of rows with equal values in ``columns``; yields each run's
    relative folder (``a=1/b=x``) and its rows without the partition columns.

    Rows should arrive sorted by the partition columns, so that each run is long; the split is
    done with Arrow kernels, never row by row in Python."""
    keep = [name for name in batch.schema.names if name not in columns]
    data = batch.select(keep)
    if batch.num_rows == 0:
        return
    texts = [_as_text(batch.column(name)) for name in columns]
    key = texts[0] if len(texts) == 1 else pc.binary_join_element_wise(*texts, _SEPARATOR)
    codes = pc.dictionary_encode(key).indices.to_numpy(zero_copy_only=False)
    starts = np.concatenate(([0], np.flatnonzero(codes[1:] != codes[:-1]) + 1, [len(codes)]))
    for start, end in itertools.pairwise(starts):
        values = key[int(start)].as_py().split(_SEPARATOR)
        folder = "/".join(f"{escape(c)}={escape(v)}" for c, v in zip(columns, values, strict=True))
        yield folder, data.slice(int(start), int(end - start))


def dataset_root(path: str) -> str:
    """The folder partition paths are relative to: ``path`` itself, or for a glob the folder
    before its first wildcard."""
    wildcard = min((i for i, c in enumerate(path) if c in "*?[{\\"), default=None)
    if wildcard is None:
        return path.rstrip("/")
    return path[:wildcard].rsplit("/", 1)[0]


def parse_folder(relative_path: str) -> dict[str, str | None]:
    """The ``col=value`` pairs of a file's folders below the dataset root (raw text)."""
    values: dict[str, str | None] = {}
    for component in relative_path.split("/")[:-1]:
        name, sep, raw = component.partition("=")
        if not sep or not name:
            continue
        value = unescape(raw)
        values[unescape(name)] = None if value == NULL_VALUE else value
    return values


def _infer_type(values: Sequence[str | None]) -> pa.DataType:
    present = [v for v in values if v is not None]

    def all_parse(parse: type | object) -> bool:
        try:
            for v in present:
                parse(v)  # type: ignore[operator]
        except ValueError:
            return False
        return True

    if present and all(re.fullmatch(r"-?\d+", v) for v in present):
        ints = [int(v) for v in present]
        return pa.int32() if all(-(2**31) <= i < 2**31 for i in ints) else pa.int64()
    if present and all_parse(float):
        return pa.float64()
    if (
        present
        and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", v) for v in present)
        and all_parse(datetime.date.fromisoformat)
    ):
        return pa.date32()
    return pa.string()


def discover(relative_paths: Sequence[str]) -> tuple[pa.Schema, list[dict[str, str | None]]]:
    """The partition columns (in folder order) with inferred types, and each file's values."""
    per_file = [parse_folder(p) for p in relative_paths]
    names: list[str] = []
    for values in per_file:
        for name in values:
            if name not in names:
                names.append(name)
    fields = [pa.field(n, _infer_type([v.get(n) for v in per_file]), nullable=True) for n in names]
    return pa.schema(fields), per_file


def constant_column(value: str | None, data_type: pa.DataType, rows: int) -> pa.Array:
    """A column of ``rows`` copies of a partition value, converted to ``data_type``."""
    if value is None:
        return pa.nulls(rows, data_type)
    if pa.types.is_boolean(data_type):
        scalar = pa.scalar(value == "true")
    elif pa.types.is_date(data_type):
        scalar = pa.scalar(datetime.date.fromisoformat(value), data_type)
    else:
        scalar = pc.cast(pa.scalar(value), data_type)
    return pa.repeat(scalar.cast(data_type), rows)
