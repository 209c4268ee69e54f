"""How Spark column types become TFRecord features, and how they come back. Runs on the driver and
in Spark tasks.

=========================  ==========================================  =========================
Spark type                 written as                                  read back (given schema)
=========================  ==========================================  =========================
boolean                    ``int64_list`` 0 / 1                        boolean
byte, short, int, long     ``int64_list``                              the same type (overflow
                                                                       is an error)
float                      ``float_list``                              float
double                     ``float_list``: **rounded to float32**, as  double (the float32
                           TensorFlow and every TFRecord tool store    value, widened)
                           it
decimal(p, s)              ``bytes_list``: the decimal as text with    decimal(p, s), exact
                           exactly ``s`` digits after the point
string                     ``bytes_list`` (UTF-8)                      string
binary                     ``bytes_list``                              binary
date                       ``int64_list``: days since 1970-01-01       date
timestamp                  ``int64_list``: microseconds since the      timestamp, the same
                           Unix epoch (UTC)                            instant
timestamp_ntz              ``int64_list``: microseconds since the      timestamp_ntz
                           epoch of the wall-clock time
array<T>                   a multi-valued feature of T's kind          array<T>
array<array<T>>            a ``SequenceExample`` feature list (one     array<array<T>>
                           Feature per inner array); refused for
                           ``Example``
map, struct, interval,     refused with :class:`SchemaError` naming    -
variant, void              the column
=========================  ==========================================  =========================

A null omits the feature (``Example`` and the context of a ``SequenceExample``); a null inside an
array cannot be stored and fails the write naming the column and row. Without a schema, reading
infers one from the features: ``int64`` becomes long, ``float`` becomes float, ``bytes`` becomes
string when every sampled value is UTF-8 and binary otherwise, each an array when a record holds
other than one value. Give a schema to get booleans, dates, timestamps, decimals or doubles back.

The ``ByteArray`` record type writes one binary (or string) column as raw records and reads
them back as one binary column named ``byteArray``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from sparktrain.errors import InvalidArgumentError, SchemaError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

RECORD_TYPES = ("Example", "SequenceExample", "ByteArray")

#: The column a ``ByteArray`` dataset reads into.
BYTE_ARRAY_COLUMN = "byteArray"


def record_type_of(value: str | None) -> str:
    """The canonical spelling of a record type name (case-insensitive); ``None`` is Example."""
    if value is None:
        return "Example"
    for known in RECORD_TYPES:
        if value.lower() == known.lower():
            return known
    raise InvalidArgumentError(f"unknown record type {value!r}; use one of {', '.join(RECORD_TYPES)}")


def _is_scalar_writable(dt: DataType) -> bool:
    from pyspark.sql import types as T

    return isinstance(
        dt,
        T.BooleanType
        | T.ByteType
        | T.ShortType
        | T.IntegerType
        | T.LongType
        | T.FloatType
        | T.DoubleType
        | T.DecimalType
        | T.StringType
        | T.BinaryType
        | T.DateType
        | T.TimestampType
        | T.TimestampNTZType,
    )


def _refusal(name: str, dt: DataType, record_type: str) -> str | None:
    """Why column ``name`` of type ``dt`` cannot be written, or ``None`` if it can."""
    from pyspark.sql import types as T

    if _is_scalar_writable(dt):
        return None
    shown = dt.simpleString()
    if isinstance(dt, T.ArrayType):
        inner = dt.elementType
        if _is_scalar_writable(inner):
            return None
        if isinstance(inner, T.ArrayType) and _is_scalar_writable(inner.elementType):
            if record_type == "SequenceExample":
                return None
            return (
                f"column `{name}` has type {shown}: an array of arrays has no tf.train.Example "
                "representation; write it with record_type='SequenceExample' (it becomes a feature list)"
            )
    return (
        f"column `{name}` has type {shown}, which has no TFRecord feature representation "
        "(map, struct, interval and variant columns are refused; flatten or serialize them first)"
    )


def check_writable(schema: StructType, record_type: str, partition_by: tuple[str, ...] = ()) -> None:
    """Raises :class:`SchemaError` naming the first column of ``schema`` that cannot be written
    as ``record_type`` (partition columns are not written into records, only into paths)."""
    from pyspark.sql import types as T

    names = schema.fieldNames()
    for column in partition_by:
        if column not in names:
            raise SchemaError(f"partition column `{column}` is not in the DataFrame ({names})", column=column)
        dt = schema[column].dataType
        if not isinstance(
            dt,
            T.StringType | T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.BooleanType | T.DateType,
        ):
            raise SchemaError(
                f"partition column `{column}` has type {dt.simpleString()}; partition by string, "
                "integer, boolean or date columns",
                column=column,
            )
    data = [f for f in schema.fields if f.name not in partition_by]
    if not data:
        raise SchemaError("nothing to write: every column is a partition column", column=None)
    if record_type == "ByteArray":
        if len(data) != 1 or not isinstance(data[0].dataType, T.BinaryType | T.StringType):
            shown = ", ".join(f"{f.name}: {f.dataType.simpleString()}" for f in data)
            raise SchemaError(
                f"record type ByteArray writes exactly one binary or string column, not ({shown})",
                column=data[0].name if len(data) == 1 else None,
            )
        return
    for field in data:
        reason = _refusal(field.name, field.dataType, record_type)
        if reason:
            raise SchemaError(reason, column=field.name)


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema the Rust reader decodes into for a Spark schema: the types Spark's Arrow
    conversion expects back (timestamps in microseconds, UTC for ``timestamp``)."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    # PySpark 3.5's takes no time zone: its timestamps are always UTC, as asked for here.
    if "timezone" not in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema)
    return to_arrow_schema(schema, timezone="UTC")


def spark_schema_of(schema: pa.Schema) -> StructType:
    """The Spark schema of an inferred Arrow schema (long, float, string, binary, arrays)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
