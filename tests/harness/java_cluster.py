"""A test-only Java cluster launcher run as a child process (tests/minidfs, tests/miniyarn).

Each launcher prints one ready line (``<PREFIX> <address>``) on stdout once its cluster is up and
stops when its stdin reaches EOF, so a crashed or killed test process never leaves a cluster
behind. :class:`JavaCluster` starts one, waits for that line, and stops it; a subclass says which
script to run with which arguments.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import IO

_STDERR_TAIL_LINES = 40
_STOP_GRACE_S = 30.0
_KILL_GRACE_S = 5.0


class ClusterStartError(RuntimeError):
    """The cluster failed to start (or vanished); the message ends with the launcher's stderr."""


class JavaCluster:
    """One launcher process; ``address`` is what its ready line names. Subclasses set ``name``
    (for messages and temp names), ``start_sh``, ``ready_prefix`` and :meth:`arguments`."""

    name = "cluster"
    start_sh: Path
    ready_prefix: str
    error = ClusterStartError

    def __init__(self, ready_timeout: float) -> None:
        # Generous by default: the first start also runs the Maven build and downloads Hadoop.
        self.ready_timeout = ready_timeout
        self._proc: subprocess.Popen[str] | None = None
        self._address: str | None = None
        self._work_dir: Path | None = None
        self._stderr_path: Path | None = None
        self._stderr_file: IO[bytes] | None = None

    def arguments(self, work_dir: Path) -> list[str]:
        """The launcher's arguments; ``work_dir`` is a fresh folder removed after the stop."""
        raise NotImplementedError

    def wrapper(self) -> list[str]:
        """What the launcher's command line is run under, e.g. ``ip netns exec <host>`` for a
        cluster inside a network namespace; nothing by default."""
        return []

    @property
    def address(self) -> str:
        if self._address is None:
            raise self.error(f"{self.name} is not running")
        return self._address

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise self.error(f"{self.name} is not running")
        return self._proc.pid

    @property
    def work_dir(self) -> Path:
        if self._work_dir is None:
            raise self.error(f"{self.name} is not running")
        return self._work_dir

    @property
    def stderr_path(self) -> Path | None:
        """The launcher's stderr log; kept after a failed start, removed after a clean stop."""
        return self._stderr_path

    def __enter__(self) -> JavaCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._proc is not None:
            raise self.error(f"{self.name} already started")
        prefix = f"sparktrain-{self.name.lower()}-"
        self._work_dir = Path(tempfile.mkdtemp(prefix=prefix))
        fd, stderr_name = tempfile.mkstemp(prefix=prefix, suffix=".stderr.log")
        self._stderr_path = Path(stderr_name)
        self._stderr_file = os.fdopen(fd, "wb")
        self._proc = subprocess.Popen(
            [*self.wrapper(), "bash", str(self.start_sh), *self.arguments(self._work_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            text=True,
            cwd=self._work_dir,
            # Own process group, so a hard kill also reaches a Maven build still in progress.
            start_new_session=True,
        )
        try:
            self._address = self._wait_ready(self._proc)
        except BaseException:
            # Nobody will use this cluster: no point waiting for a graceful stop.
            self._shutdown(keep_log=True, grace_s=0.0)
            raise

    def _wait_ready(self, proc: subprocess.Popen[str]) -> str:
        assert proc.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        stdout = proc.stdout

        def pump() -> None:
            # Keeps reading after the ready line too, so the pipe can never fill up.
            for line in stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name=f"{self.name}-stdout", daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.error(
                    self._failure(f"{self.name} not ready after {self.ready_timeout:.0f}s (pid {proc.pid})")
                )
            try:
                line = lines.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if line is None:
                code = proc.wait()
                headline = f"{self.name} launcher exited with status {code} before ready"
                raise self.error(self._failure(headline))
            if line.startswith(self.ready_prefix):
                return line[len(self.ready_prefix) :].strip()

    def _failure(self, headline: str) -> str:
        tail = self._stderr_tail()
        where = f" (full log: {self._stderr_path})" if self._stderr_path else ""
        return f"{headline}; last {_STDERR_TAIL_LINES} lines of its stderr{where}:\n{tail}"

    def _stderr_tail(self) -> str:
        if self._stderr_path is None:
            return "<no stderr captured>"
        if self._stderr_file is not None:
            self._stderr_file.flush()
        try:
            with self._stderr_path.open(encoding="utf-8", errors="replace") as f:
                return "".join(deque(f, maxlen=_STDERR_TAIL_LINES)) or "<empty>"
        except OSError as e:
            return f"<cannot read {self._stderr_path}: {e}>"

    def stop(self) -> None:
        """Closes the launcher's stdin (its stop signal), waits, and kills it if it hangs."""
        self._shutdown(keep_log=False, grace_s=_STOP_GRACE_S)

    def _shutdown(self, *, keep_log: bool, grace_s: float) -> None:
        proc = self._proc
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                keep_log = keep_log or grace_s > 0
                self._kill_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=_KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    self._kill_group(proc, signal.SIGKILL)
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None
        if self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        if self._stderr_path is not None and not keep_log:
            self._stderr_path.unlink(missing_ok=True)
        self._proc = None
        self._address = None

    @staticmethod
    def _kill_group(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
