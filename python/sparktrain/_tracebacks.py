"""Errors raised in Spark tasks, as the driver sees them: the exception line a Python traceback
ends with, and sparktrain's own error rebuilt from it or from the jar's exceptions, so that an
operation whose task failed raises the class its task raised. Runs anywhere.

Spark hands the driver a task's failure as text (PySpark's ``PythonException``, Py4J's
``Py4JJavaError`` with the Java stack trace), never as the exception object itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from sparktrain import errors
from sparktrain.errors import SchemaError, SparktrainError, TFRecordCorruptError

#: The jar's exceptions that stand for one of sparktrain's errors, by Java class name.
_JAR_ERRORS: Final[dict[str, type[SparktrainError]]] = {
    "io.sparktrain.spark.UnwritableValueException": SchemaError,
    "io.sparktrain.hadoop.TFRecordCorruptException": TFRecordCorruptError,
}
#: Where a message names the column at fault (``column 'ids', row 7: ...``).
_COLUMN: Final = re.compile(r"^column '((?:[^']|'')*)'")
#: How the jar's TFRecordCorruptException says what is damaged, where (``CorruptionKind``).
_DAMAGE: Final = re.compile(r"^(?P<path>.+?): (?P<what>[^:]+?) at byte offset (?P<offset>\d+)")
#: The jar's descriptions of the kinds of damage, by the kind's name.
_DAMAGE_KINDS: Final = {
    "truncated record header": "truncated_header",
    "record length CRC mismatch": "length_crc_mismatch",
    "truncated record payload": "truncated_payload",
    "record payload CRC mismatch": "payload_crc_mismatch",
    "not a TFRecord file": "not_tfrecord",
    "record longer than the limit": "record_too_long",
    "damaged compressed stream": "damaged_compression",
}


def exception_line(lines: Iterable[str]) -> str | None:
    """The exception line of the last Python traceback in ``lines``: the first line without
    indentation after ``Traceback (most recent call last):``."""
    exception = None
    in_traceback = False
    for line in lines:
        if line.endswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and line and not line[0].isspace():
            exception = line
            in_traceback = False
    return exception


def raised_in_task(error: BaseException) -> SparktrainError | None:
    """sparktrain's error that a Spark task raised, rebuilt from Spark's report of it in
    ``error`` (see :func:`raised_in`)."""
    return raised_in(str(error))


def raised_in(text: str) -> SparktrainError | None:
    """sparktrain's error that Spark's report ``text`` of a failed task ends with: a Python
    worker's ``sparktrain.errors.X: message``, or one of the jar's exceptions that stands for
    one (:data:`_JAR_ERRORS`). None for anything else."""
    for java, kind in _JAR_ERRORS.items():
        found = re.search(re.escape(java) + r": ([^\n]*)", text)
        if found:
            return _rebuilt(kind, found.group(1).strip())
    line = exception_line(text.splitlines())
    if line is None or not line.startswith("sparktrain.errors."):
        return None
    name, _, message = line.removeprefix("sparktrain.errors.").partition(": ")
    named = getattr(errors, name, None)
    if not (isinstance(named, type) and issubclass(named, SparktrainError)):
        return None
    return _rebuilt(named, message)


def _rebuilt(kind: type[SparktrainError], message: str) -> SparktrainError:
    column = _COLUMN.match(message)
    if issubclass(kind, SchemaError) and column:
        return kind(message, column=column.group(1))
    damage = _DAMAGE.match(message)
    if issubclass(kind, TFRecordCorruptError) and damage:
        return kind(
            message,
            path=damage["path"],
            offset=int(damage["offset"]),
            kind=_DAMAGE_KINDS.get(damage["what"], damage["what"]),
        )
    return kind(message)
