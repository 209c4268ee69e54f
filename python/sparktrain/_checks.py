"""Checks of public arguments, made on the driver before any Spark job starts. Runs on the driver
(and wherever a public function is called).

Each check raises :class:`~sparktrain.errors.InvalidArgumentError` whose message starts with
the parameter and the value given (``heartbeat_timeout=-1: must be > 0``), and returns the
value in the form the code after it uses (``float`` seconds, ``int`` counts, a ``dict`` copy).
They refuse only what would fail later anyway, deep in a Spark task or the Rust core.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Collection, Mapping
from typing import Any, SupportsIndex, TypeVar

from sparktrain import _native
from sparktrain.errors import InvalidArgumentError

T = TypeVar("T")


def refuse(name: str, value: object, requirement: str) -> InvalidArgumentError:
    """The error for ``name=value`` that does not meet ``requirement``."""
    return InvalidArgumentError(f"{name}={_shown(value)}: {requirement}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def integer(name: str, value: object, *, minimum: int) -> int:
    """``value`` as an ``int`` of at least ``minimum``. Any integer type is taken (NumPy's
    too); floats are not, even whole ones, nor booleans (``eval_every=True`` is a slip)."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise refuse(name, value, f"must be an integer >= {minimum}")
    number = operator.index(value)
    if number < minimum:
        raise refuse(name, value, f"must be >= {minimum}")
    return number


def optional_integer(name: str, value: object, *, minimum: int) -> int | None:
    """:func:`integer`, or None for None."""
    return None if value is None else integer(name, value, minimum=minimum)


#: The longest time-out taken (a year, the compiled module's limit): longer ones overflow the
#: clock arithmetic of the waits they set.
MAX_SECONDS = _native.MAX_WAIT_SECONDS


def seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` as a number of seconds greater than zero (or zero, with ``allow_zero``) and
    at most :data:`MAX_SECONDS`."""
    bound = ">= 0" if allow_zero else "> 0"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise refuse(name, value, f"must be a number of seconds {bound}")
    number = float(value)
    if not (number >= 0 if allow_zero else number > 0):  # also refuses NaN
        raise refuse(name, value, f"must be {bound}")
    if not math.isfinite(number):
        raise refuse(name, value, "must be finite")
    if number > MAX_SECONDS:
        raise refuse(name, value, f"must be at most {MAX_SECONDS} (a year)")
    return number


def positive_number(name: str, value: object) -> float:
    """``value`` as a finite ``float`` greater than zero."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise refuse(name, value, "must be a number > 0")
    number = float(value)
    if not (number > 0 and math.isfinite(number)):  # also refuses NaN
        raise refuse(name, value, "must be a finite number > 0")
    return number


def text(name: str, value: object) -> str:
    """``value`` as a non-empty ``str``."""
    if not isinstance(value, str):
        raise refuse(name, value, "must be a str")
    if not value:
        raise refuse(name, value, "must not be empty")
    return value


def optional_text(name: str, value: object) -> str | None:
    """:func:`text`, or None for None."""
    return None if value is None else text(name, value)


def function(name: str, value: T) -> T:
    """``value`` itself, when it can be called."""
    if not callable(value):
        raise refuse(name, value, "must be callable")
    return value


def choice(name: str, value: T, choices: Collection[object]) -> T:
    """``value`` itself, when it is one of ``choices``."""
    if value not in choices:
        raise refuse(name, value, f"use one of {', '.join(repr(c) for c in choices)}")
    return value


def string_map(name: str, value: object) -> dict[str, str]:
    """A ``dict`` copy of a mapping of ``str`` to ``str`` (such as environment variables);
    None is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise refuse(name, value, "must be a mapping of str to str")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise refuse(name, value, f"must map str to str, but {key!r} maps to {_shown(item)}")
    return dict(value)


def instance(name: str, value: object, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` itself, when it is a ``kind``; ``what`` names the kind for the message."""
    if not isinstance(value, kind):
        raise refuse(name, value, f"must be {what}, not {type(value).__name__}")
    return value


def check(condition: bool, name: str, value: object, requirement: str) -> None:
    """Raises the error for ``name=value`` unless ``condition`` holds."""
    if not condition:
        raise refuse(name, value, requirement)
