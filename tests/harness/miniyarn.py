"""A real YARN for tests: runs tests/miniyarn/start.sh (Hadoop's MiniYARNCluster: a
ResourceManager and NodeManagers whose containers are local processes) on top of a running HDFS.

The launcher writes a Hadoop configuration folder (``core-site.xml`` naming the HDFS,
``yarn-site.xml`` with the live ResourceManager's addresses) and prints
``MINIYARN_READY <folder>``; ``HADOOP_CONF_DIR=<folder> spark-submit --master yarn`` then
submits to it.
"""

from __future__ import annotations

from pathlib import Path

from harness.java_cluster import ClusterStartError, JavaCluster

START_SH = Path(__file__).resolve().parent.parent / "miniyarn" / "start.sh"


class MiniYarn(JavaCluster):
    """Context manager for one MiniYARNCluster whose file system is ``default_fs``;
    ``conf_dir`` is the folder to use as ``HADOOP_CONF_DIR``."""

    name = "MiniYARN"
    start_sh = START_SH
    ready_prefix = "MINIYARN_READY "
    error = ClusterStartError

    def __init__(
        self, default_fs: str, *, nodemanagers: int = 2, memory_mb: int = 4096, ready_timeout: float = 240.0
    ) -> None:
        super().__init__(ready_timeout)
        self.default_fs = default_fs
        self.nodemanagers = nodemanagers
        self.memory_mb = memory_mb

    def arguments(self, work_dir: Path) -> list[str]:
        return [
            "--default-fs",
            self.default_fs,
            "--conf-dir",
            str(work_dir / "conf"),
            "--nodemanagers",
            str(self.nodemanagers),
            "--memory-mb",
            str(self.memory_mb),
        ]

    @property
    def conf_dir(self) -> Path:
        return Path(self.address)

    def container_logs(self) -> list[Path]:
        """Every container's log files (stdout, stderr), for a failing test to show."""
        return sorted(p for p in self.work_dir.rglob("container_*/*") if p.is_file())

    def __enter__(self) -> MiniYarn:
        self.start()
        return self
