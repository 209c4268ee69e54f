"""A real MLflow tracking server on 127.0.0.1, for the MLflow tests: ``mlflow server`` with a
SQLite backend store and a local artifact store (served through the server, as a tracking
server beside a cluster serves trainers that share no disk with it).

The server runs from a virtualenv of its own, ``.venv-mlflow``, made from
``tests/requirements-mlflow-server.txt`` and reused while that file is unchanged: the full
``mlflow`` package (Flask, SQLAlchemy, alembic...) pins a pyarrow older than sparktrain's, so
it cannot share ``.venv``; the tests talk to it with ``mlflow-skinny``, the client, from
``.venv``. :class:`MlflowServer` starts it on a free port, waits for ``/health``, and stops its
whole process group on every way out (its ``with`` block, a failed start, the interpreter's
exit).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-mlflow"
REQUIREMENTS = ROOT / "tests" / "requirements-mlflow-server.txt"
#: Seconds the server has to answer ``/health`` (it creates its SQLite schema first).
START_SECONDS = 120.0


def server_python(venv: Path = VENV) -> Path:
    """``venv``'s interpreter, making ``venv`` first when it is missing or was made from other
    requirements."""
    python = venv / "bin" / "python"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv / ".requirements.sha"
    if not stamp.exists() or stamp.read_text().strip() != want or not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(want)
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a SQLite store and local artifacts under a fresh
    temporary folder; ``url`` is its tracking URI."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="sparktrain-mlflow-"))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._log = self.folder / "server.log"

    def __enter__(self) -> MlflowServer:
        python = server_python()
        command = [
            str(python),
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{self.folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.folder / "artifacts"),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        with open(self._log, "wb") as log:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.folder,
                start_new_session=True,
            )
        atexit.register(self.stop)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited with {self._process.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError(
            f"mlflow server did not answer /health within {START_SECONDS} s:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's output."""
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stops the server's process group: SIGTERM, then SIGKILL after 10 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


if __name__ == "__main__":
    # tests/run.sh makes the virtualenv before pytest, so no test pays for it.
    print(server_python())
