"""Processes a test starts in a process group of their own: a test that runs too long stops
the whole group (an interpreter, spark-submit, a driver's JVM, a local cluster's executors)
and fails with the tail of its stderr, instead of leaking them into later tests."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest


def start_in_group(
    command: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``command`` with its output captured, as the leader of a new process group."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def finish(process: subprocess.Popen[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Waits for ``process``; past ``timeout`` seconds kills its group and fails the test."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        what = shlex.join(str(a) for a in list(process.args)[:4])
        pytest.fail(f"{what} ran past {timeout} s; its stderr ends with:\n{err[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def stop(process: subprocess.Popen[Any] | None, grace: float = 10.0) -> None:
    """Stops a server a test started: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_in_group(
    command: list[str], *, timeout: float, cwd: Path | str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """:func:`start_in_group`, then :func:`finish`."""
    return finish(start_in_group(command, cwd=cwd, env=env), timeout)
