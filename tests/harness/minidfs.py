"""A real HDFS for tests: runs tests/minidfs/start.sh (Hadoop's MiniDFSCluster) as a child process.

The launcher prints ``MINIDFS_READY hdfs://127.0.0.1:<port>`` once the cluster is up and stops
when its stdin reaches EOF (see :mod:`harness.java_cluster`).
"""

from __future__ import annotations

from pathlib import Path

from harness.java_cluster import ClusterStartError, JavaCluster

START_SH = Path(__file__).resolve().parent.parent / "minidfs" / "start.sh"


class MiniDfsError(ClusterStartError):
    """The cluster failed to start (or vanished); the message ends with the launcher's stderr."""


class MiniDfs(JavaCluster):
    """Context manager for one MiniDFSCluster on 127.0.0.1; ``url`` is its ``hdfs://`` address.

    ``block_size`` and ``replication`` become the NameNode's server defaults, which clients that
    ask the server (hdfs-native does) use when they create files without explicit values.
    """

    name = "MiniDFS"
    start_sh = START_SH
    ready_prefix = "MINIDFS_READY "
    error = MiniDfsError

    def __init__(
        self,
        datanodes: int = 1,
        block_size: int | None = None,
        ready_timeout: float = 180.0,
        *,
        replication: int = 1,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        super().__init__(ready_timeout)
        self.datanodes = datanodes
        self.block_size = block_size
        self.replication = replication
        self.extra_args = extra_args

    def arguments(self, work_dir: Path) -> list[str]:
        args = ["--datanodes", str(self.datanodes), "--replication", str(self.replication)]
        args += ["--base-dir", str(work_dir / "dfs")]
        if self.block_size is not None:
            args += ["--block-size", str(self.block_size)]
        return args + list(self.extra_args)

    @property
    def url(self) -> str:
        return self.address

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def base_dir(self) -> Path:
        """The NameNode's and DataNodes' storage."""
        return self.work_dir / "dfs"

    def __enter__(self) -> MiniDfs:
        self.start()
        return self
