"""A real Azure Blob Storage endpoint for tests: Azurite, Microsoft's storage emulator (the
``azurite`` package from the npm registry), on a free port of 127.0.0.1.

``tests/run.sh`` installs it into ``.azurite/`` (``python tests/harness/azurite.py install``);
:class:`Azurite` starts its Blob service from there. sparktrain reaches it as an Azure user of
the emulator does, through the environment (``AZURE_STORAGE_USE_EMULATOR``,
``AZURITE_BLOB_STORAGE_URL``) with URLs ``abfs://<container>@devstoreaccount1.dfs.core.windows.net``;
tests check what sparktrain wrote with Microsoft's own client (``azure-storage-blob``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Where ``install`` puts Azurite, and the version it pins.
HOME = ROOT / ".azurite"
VERSION = "3.37.0"
#: The emulator's one account, and its key (public, the same in every Azurite).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def program() -> Path:
    """The Blob service's command in ``.azurite``."""
    return HOME / "node_modules" / ".bin" / "azurite-blob"


def missing() -> str | None:
    """Why Azurite cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "Node.js is not installed (Azurite runs on it)"
    stamp = HOME / ".version"
    if not program().exists() or not stamp.exists() or stamp.read_text().strip() != VERSION:
        return (
            f"Azurite {VERSION} is not installed: python tests/harness/azurite.py install (tests/run.sh does)"
        )
    return None


def install() -> None:
    """Installs Azurite ``VERSION`` into ``.azurite`` from the npm registry, unless it is there."""
    if missing() is None:
        return
    HOME.mkdir(exist_ok=True)
    subprocess.run(
        [
            "npm",
            "install",
            "--no-audit",
            "--no-fund",
            "--silent",
            "--prefix",
            str(HOME),
            f"azurite@{VERSION}",
        ],
        check=True,
    )
    (HOME / ".version").write_text(VERSION + "\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Azurite:
    """Azurite's Blob service as a context manager; ``url`` is its endpoint
    (``http://127.0.0.1:<port>``), and the process's environment points object stores at it."""

    def __init__(self, ready_timeout: float = 60.0) -> None:
        self.ready_timeout = ready_timeout
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._data = ""

    def __enter__(self) -> Azurite:
        reason = missing()
        if reason:
            raise RuntimeError(reason)
        self._data = tempfile.mkdtemp(prefix="azurite-")
        port = _free_port()
        command = [
            str(program()),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            self._data,
        ]
        self._process = subprocess.Popen(
            [*command, "--skipApiVersionCheck", "--loose", "--silent"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.ready_timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"Azurite did not start on port {port}") from None
                time.sleep(0.2)
        os.environ["AZURE_STORAGE_USE_EMULATOR"] = "true"
        os.environ["AZURITE_BLOB_STORAGE_URL"] = self.url
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        from harness.processes import stop  # not at the top: `install` runs this file as a script

        stop(self._process)
        shutil.rmtree(self._data, ignore_errors=True)


def blob_service(url: str) -> Any:
    """Microsoft's own client on the emulator at ``url``, to check what sparktrain wrote."""
    from azure.storage.blob import BlobServiceClient

    connection = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={url}/{ACCOUNT};"
    )
    return BlobServiceClient.from_connection_string(connection)


def new_container(url: str) -> str:
    """Creates a container with a unique name and returns the name."""
    name = f"sparktrain-{uuid.uuid4().hex[:12]}"
    blob_service(url).create_container(name)
    return name


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python tests/harness/azurite.py install")
    install()
