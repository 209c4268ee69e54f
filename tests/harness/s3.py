"""A real S3-compatible server for tests: moto's standalone server (``moto_server`` from the
``moto[server]`` package) on a free port of 127.0.0.1.

``SPARKTRAIN_TEST_S3=http://127.0.0.1:<port>`` names a server that is already running (to share
one between runs); otherwise :class:`MotoServer` starts one per session. Tests
reach it through Hadoop's S3A keys, as Spark users configure S3 (:data:`s3a_keys`), and check
what sparktrain wrote with boto3, an independent client.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from types import TracebackType
from typing import Any

from harness.processes import stop

READY = re.compile(r"Running on (http://127\.0\.0\.1:\d+)")


class MotoServer:
    """``moto_server`` as a context manager; ``url`` is its endpoint."""

    def __init__(self, ready_timeout: float = 60.0) -> None:
        self.ready_timeout = ready_timeout
        self.url = ""
        self._process: subprocess.Popen[str] | None = None
        self._lines: list[str] = []

    def __enter__(self) -> MotoServer:
        program = shutil.which("moto_server")
        if program is None:
            raise RuntimeError("moto_server is not installed: pip install 'moto[server]'")
        self._process = subprocess.Popen(
            [program, "-H", "127.0.0.1", "-p", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        found = threading.Event()

        def drain() -> None:
            assert self._process is not None
            assert self._process.stderr is not None
            for line in self._process.stderr:
                self._lines.append(line)
                match = READY.search(line)
                if match and not found.is_set():
                    self.url = match.group(1)
                    found.set()

        threading.Thread(target=drain, name="moto-stderr", daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout
        while not found.wait(0.1):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("moto_server did not start:\n" + "".join(self._lines[-20:]))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        stop(self._process)


def s3a_keys(endpoint: str) -> dict[str, str]:
    """The Hadoop S3A keys that point a client at ``endpoint`` (moto takes any credentials)."""
    return {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.access.key": "test",
        "fs.s3a.secret.key": "test",
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.path.style.access": "true",
    }


def boto3_client(endpoint: str) -> Any:
    """An independent S3 client on ``endpoint``, to check what sparktrain wrote."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )


def new_bucket(endpoint: str) -> str:
    """Creates a bucket with a unique name and returns the name."""
    name = f"sparktrain-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    boto3_client(endpoint).create_bucket(Bucket=name)
    return name
