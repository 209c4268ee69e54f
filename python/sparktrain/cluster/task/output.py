"""A trainer's output on its way to the driver: split into lines, cut, queued and batched
within fixed bounds. Runs in the executor task.

The executor's log gets every byte a trainer writes (see :mod:`sparktrain.cluster.task.run`);
what goes to the driver is bounded, because it travels in heartbeats (gRPC messages of at
most 4 MiB) and waits in the task's memory until it is sent:

- a line is cut after :data:`MAX_LINE_BYTES` with a marker saying how much was cut, and the
  rest of it is skipped as it is read, never held;
- ``\\r`` ends a line as ``\\n`` does, so that a progress bar's redraws arrive one by one
  rather than as one endless line;
- the queue holds at most :data:`MAX_QUEUED_BYTES`; lines that do not fit are counted, and one
  line in their place tells the driver how many were dropped;
- a heartbeat carries at most :data:`MAX_LINES_PER_HEARTBEAT` lines and
  :data:`MAX_HEARTBEAT_BYTES`.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final

#: Bytes of a line forwarded to the driver; the rest is cut (the executor log has it all).
MAX_LINE_BYTES: Final = 8192
#: Bytes read from a trainer's pipe at a time.
READ_CHUNK_BYTES: Final = 64 * 1024
#: Most lines sent in one heartbeat.
MAX_LINES_PER_HEARTBEAT: Final = 2000
#: Most bytes of lines sent in one heartbeat: three quarters of the driver's 1 MiB message
#: limit, so a heartbeat always fits, and a few times what a chatty trainer writes between two
#: beats.
MAX_HEARTBEAT_BYTES: Final = 768 << 10
#: Most bytes of lines waiting for the driver: a few heartbeats' worth, enough for a burst
#: while the driver is slow, yet little memory in the Spark task.
MAX_QUEUED_BYTES: Final = 8 << 20
#: What a line costs in a heartbeat besides its UTF-8 text (protobuf tags and lengths).
LINE_OVERHEAD_BYTES: Final = 16
#: Lines of a trainer's stderr kept for the failure report.
STDERR_TAIL_LINES: Final = 60
#: Bytes of a trainer's stderr kept for the failure report (the end of it).
MAX_STDERR_TAIL_BYTES: Final = 64 * 1024
#: The stream numbers of a heartbeat's lines.
STDOUT: Final = 1
STDERR: Final = 2

_STREAM_NAMES: Final = {STDOUT: "stdout", STDERR: "stderr"}
_LINE_END: Final = re.compile(rb"\r\n|\r|\n")


def line_size(text: str) -> int:
    """What ``text`` costs as one line of a heartbeat, in bytes."""
    return len(text.encode("utf-8")) + LINE_OVERHEAD_BYTES


def cut_marker(cut: int) -> str:
    """What replaces the ``cut`` bytes at the end of an over-long line."""
    return f" ... [{cut} more bytes cut; the executor log has the whole line]"


def dropped_notice(stream: int, count: int) -> str:
    """The line that stands in for ``count`` lines of ``stream`` the driver never got."""
    name = _STREAM_NAMES.get(stream, f"stream {stream}")
    return (
        f"sparktrain: {count} lines of {name} were dropped here because the driver could not "
        f"keep up; the executor's {name} log has every line"
    )


class LineSplitter:
    """Turns a byte stream, fed in chunks of any size, into lines of at most
    :data:`MAX_LINE_BYTES` bytes (plus the cut marker), each handed to ``emit``.

    A line ends at ``\\n``, ``\\r\\n`` or ``\\r``; an empty line ended by a lone ``\\r`` (a
    progress bar returning to the start) is not a line. Memory stays bounded by the longest
    line forwarded, however long the line in the stream."""

    def __init__(self, emit: Callable[[str], None], max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._emit = emit
        self._max = max_line_bytes
        self._head = bytearray()
        self._cut = 0
        self._pending_cr = False

    def feed(self, chunk: bytes) -> None:
        """Splits the next bytes of the stream."""
        if not chunk:
            return
        start = 0
        if self._pending_cr:
            self._pending_cr = False
            crlf = chunk.startswith(b"\n")
            self._end_line(by_cr=not crlf)
            start = 1 if crlf else 0
        for end in _LINE_END.finditer(chunk, start):
            self._add(chunk[start : end.start()])
            start = end.end()
            if end.group() == b"\r" and start == len(chunk):
                # Half of a \r\n, perhaps: the next chunk tells.
                self._pending_cr = True
            else:
                self._end_line(by_cr=end.group() == b"\r")
        self._add(chunk[start:])

    def close(self) -> None:
        """Ends the stream: a last line without a line end is still a line."""
        if self._pending_cr:
            self._pending_cr = False
            self._end_line(by_cr=True)
        elif self._head or self._cut:
            self._end_line(by_cr=False)

    def _add(self, piece: bytes) -> None:
        room = max(0, self._max - len(self._head))
        self._head += piece[:room]
        self._cut += max(0, len(piece) - room)

    def _end_line(self, by_cr: bool) -> None:
        if by_cr and not self._head and not self._cut:
            return
        if self._cut:
            # The cut may split a UTF-8 sequence: a non-final decode holds its first bytes
            # back, and they count as cut too.
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            head = decoder.decode(bytes(self._head))
            text = head + cut_marker(self._cut + len(decoder.getstate()[0]))
        else:
            text = self._head.decode("utf-8", "replace")
        self._head.clear()
        self._cut = 0
        self._emit(text)


class OutputQueue:
    """The lines waiting for the driver, as ``(stream, text)``, at most ``max_bytes`` of them
    (by :func:`line_size`). Thread-safe: both of a trainer's pumps put, the heartbeat takes.

    A line that does not fit is dropped and counted; once lines fit again (or the queue has
    been sent), a :func:`dropped_notice` per stream takes the dropped lines' place."""

    def __init__(self, max_bytes: int = MAX_QUEUED_BYTES) -> None:
        self._lock = threading.Lock()
        self._lines: deque[tuple[int, str, int]] = deque()
        self._bytes = 0
        self._max = max_bytes
        self._dropped: dict[int, int] = {}

    def put(self, stream: int, text: str) -> None:
        """Queues one line, or counts it as dropped when the queue is full."""
        size = line_size(text)
        with self._lock:
            if self._bytes + size > self._max:
                self._dropped[stream] = self._dropped.get(stream, 0) + 1
                return
            self._append_notices()
            self._append(stream, text, size)

    def take(self, max_lines: int, max_bytes: int) -> list[tuple[int, str]]:
        """The oldest lines, at most ``max_lines`` of them and ``max_bytes`` in all (at least
        one line when any is queued)."""
        with self._lock:
            if not self._lines:
                self._append_notices()
            batch: list[tuple[int, str]] = []
            size = 0
            while self._lines and len(batch) < max_lines:
                stream, text, n = self._lines[0]
                if batch and size + n > max_bytes:
                    break
                self._lines.popleft()
                self._bytes -= n
                size += n
                batch.append((stream, text))
            return batch

    def put_back(self, lines: list[tuple[int, str]]) -> None:
        """Returns lines that :meth:`take` handed out but could not be sent, in front of the
        rest. They may take the queue over its bound for as long as one batch."""
        with self._lock:
            for stream, text in reversed(lines):
                size = line_size(text)
                self._lines.appendleft((stream, text, size))
                self._bytes += size

    def pending(self) -> bool:
        """Whether anything (a line or a notice of dropped lines) waits for the driver."""
        with self._lock:
            return bool(self._lines or self._dropped)

    def _append(self, stream: int, text: str, size: int) -> None:
        self._lines.append((stream, text, size))
        self._bytes += size

    def _append_notices(self) -> None:
        # A notice is a few dozen bytes: it may exceed the bound, so it is never lost itself.
        for stream, count in sorted(self._dropped.items()):
            text = dropped_notice(stream, count)
            self._append(stream, text, line_size(text))
        self._dropped.clear()


def tail_text(lines: Iterable[str], max_bytes: int = MAX_STDERR_TAIL_BYTES) -> str:
    """``lines`` joined, keeping the last ``max_bytes`` bytes (UTF-8) when they are longer,
    behind a marker that says the beginning was cut."""
    text = "\n".join(lines)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = "[... the beginning was cut; the executor's stderr log has all of it]\n"
    keep = data[len(data) - max(0, max_bytes - len(marker)) :]
    # The cut may fall inside a UTF-8 sequence; its stray continuation bytes are dropped.
    return marker + keep.decode("utf-8", "ignore")
