"""The driver's view of the trainers' output: prefixed log lines and a live progress line. Runs
on the driver.

Each line a trainer writes is printed on the driver as ``[chief:0] ...`` (stdout lines to
stdout, stderr lines to stderr). In a terminal or a notebook, the chief's latest
``ctx.report`` metrics are shown on one line that is rewritten in place.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO


def _interactive(stream: TextIO) -> bool:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found, unused-ignore]

        if get_ipython() is not None:
            return True
    except ImportError:
        pass
    return bool(getattr(stream, "isatty", lambda: False)())


def _number(value: float) -> str:
    """A metric as the progress line shows it: ``nan`` and ``inf`` as such, whole numbers and
    numbers of 1,000 or more with thousands separators and no exponent, others to 4 digits."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


class Console:
    """Prints trainer output and progress for one job."""

    def __init__(self, roles: list[str], enabled: bool = True) -> None:
        #: Role names by task index; a restart with fewer workers replaces them.
        self.roles = roles
        self._enabled = enabled
        self._progress = enabled and _interactive(sys.stderr)
        self._progress_shown = False
        self._last_step: tuple[float, int] | None = None

    def _clear_progress(self) -> None:
        if self._progress_shown:
            sys.stderr.write("\r\x1b[2K")
            self._progress_shown = False

    def line(self, rank: int, stream: str, text: str) -> None:
        """One line from the trainer of task ``rank``."""
        if not self._enabled:
            return
        self._clear_progress()
        out = sys.stderr if stream == "stderr" else sys.stdout
        out.write(f"[{self.roles[rank]}] {text}\n")
        out.flush()

    def metrics(self, rank: int, step: int | None, metrics: dict[str, float]) -> None:
        """A ``ctx.report`` from task ``rank``; the chief's become the progress line."""
        if not self._progress or rank != 0:
            return
        parts: list[str] = []
        if step is not None:
            parts.append(f"step {step:,}")
            now = time.monotonic()
            if self._last_step is not None and step > self._last_step[1] and now > self._last_step[0]:
                parts.append(f"{(step - self._last_step[1]) / (now - self._last_step[0]):.1f} steps/s")
            self._last_step = (now, step)
        parts += [f"{name} {_number(value)}" for name, value in metrics.items()]
        sys.stderr.write("\r\x1b[2K[sparktrain] " + " | ".join(parts))
        sys.stderr.flush()
        self._progress_shown = True

    def done(self) -> None:
        """Ends the progress line."""
        if self._progress_shown:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._progress_shown = False
