"""TFoS's ``util``: the environment of a single-node TensorFlow process, the host's address, a
file on a search path, and the executor id file. Runs anywhere (the driver, Spark tasks,
nodes).

:func:`single_node_env` is what TFoS's inference examples call in a plain Spark task before
they load a model: it makes Hadoop's jars visible to TensorFlow's HDFS support and chooses the
GPUs the process may use. GPUs that Spark assigned to the running task (or, in a sparktrain
node, that the launcher set from them) are kept; otherwise free ones are picked with
:mod:`~sparktrain.tfos.gpu_info`, as TFoS does, and none at all on a host without GPUs.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import subprocess
from collections.abc import Sequence

from sparktrain import _checks
from sparktrain.errors import PathNotFoundError, StorageError
from sparktrain.tfos import gpu_info

_log = logging.getLogger(__name__)

#: The file :func:`write_executor_id` writes in the working directory.
EXECUTOR_ID_FILE = "executor_id"
#: Seconds ``hadoop classpath --glob`` may take.
HADOOP_CLASSPATH_TIMEOUT = 120.0


def _hadoop_classpath() -> None:
    """Appends the expanded ``hadoop classpath --glob`` to ``CLASSPATH`` once per process tree
    (``TFOS_CLASSPATH_UPDATED``) when ``HADOOP_PREFIX`` names a Hadoop installation: the JVM
    that TensorFlow's HDFS support starts through JNI does not expand wildcards."""
    prefix = os.environ.get("HADOOP_PREFIX")
    if not prefix or "TFOS_CLASSPATH_UPDATED" in os.environ:
        return
    hadoop = os.path.join(prefix, "bin", "hadoop")
    try:
        done = subprocess.run(
            [hadoop, "classpath", "--glob"],
            capture_output=True,
            text=True,
            timeout=HADOOP_CLASSPATH_TIMEOUT,
            check=True,
        )
    except subprocess.TimeoutExpired as e:
        raise StorageError(
            f"{hadoop} classpath --glob did not answer within {HADOOP_CLASSPATH_TIMEOUT:g} s", path=hadoop
        ) from e
    except (OSError, subprocess.CalledProcessError) as e:
        raise StorageError(
            f"HADOOP_PREFIX={prefix}: {hadoop} classpath --glob failed: {e}", path=hadoop
        ) from e
    current = os.environ.get("CLASSPATH", "")
    expanded = done.stdout.strip()
    os.environ["CLASSPATH"] = f"{current}{os.pathsep}{expanded}" if current else expanded
    os.environ["TFOS_CLASSPATH_UPDATED"] = "1"


def _assigned_gpus() -> list[str] | None:
    """The GPU addresses Spark assigned to this process's work, or None when it assigned none:
    the running Spark task's ``gpu`` resources, or in a sparktrain node the
    ``CUDA_VISIBLE_DEVICES`` the launcher set from its task's."""
    try:
        from pyspark import TaskContext
    except ImportError:
        context = None
    else:
        context = TaskContext.get()
    if context is not None:
        resources = context.resources()
        if "gpu" in resources and resources["gpu"].addresses:
            return list(resources["gpu"].addresses)
        return None
    # A sparktrain node: its task set CUDA_VISIBLE_DEVICES from Spark's addresses, if any.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if "SPARKTRAIN_GENERATION" in os.environ and visible:
        return [gpu for gpu in visible.split(",") if gpu]
    return None


def single_node_env(num_gpus: int = 1, worker_index: int = -1, nodes: Sequence[str] = ()) -> None:
    """Prepares this process for single-node TensorFlow: Hadoop's jars on ``CLASSPATH`` (see
    :func:`_hadoop_classpath`), and ``CUDA_VISIBLE_DEVICES`` set to ``num_gpus`` GPUs, or to
    none (``""``) on a host without GPUs or with ``num_gpus=0``.

    GPUs Spark assigned to the running task are kept (the first ``num_gpus`` of them). Else
    free GPUs are chosen with :func:`~sparktrain.tfos.gpu_info.get_gpus`; ``worker_index``
    and ``nodes`` (every worker's ``host:port``) then spread the workers of one host over its
    GPUs: the worker's rank among the nodes on its own host picks its GPUs."""
    num_gpus = _checks.integer("num_gpus", num_gpus, minimum=0)
    worker_index = _checks.integer("worker_index", worker_index, minimum=-1)
    nodes = list(nodes)
    if worker_index >= len(nodes) > 0:
        raise _checks.refuse("worker_index", worker_index, f"must index nodes (it has {len(nodes)})")
    _hadoop_classpath()
    assigned = _assigned_gpus()
    if assigned is not None:
        chosen = assigned[:num_gpus]
        _log.info("using the GPUs Spark assigned: %s", chosen)
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
        return
    if num_gpus > 0 and gpu_info.is_gpu_available():
        index = worker_index
        if worker_index >= 0 and nodes:
            mine = nodes[worker_index]
            host = mine.split(":")[0]
            index = [n for n in nodes if n.split(":")[0] == host].index(mine)
        gpus = gpu_info.get_gpus(num_gpus, index)
        assert isinstance(gpus, str)
        _log.info("using GPUs %s", gpus)
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    else:
        _log.info("using the CPU")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def get_ip_address() -> str:
    """This host's address on its outward interface: the local end of a UDP "connection"
    towards a public address (no packet is sent), or the address of its fully qualified name
    when it has no route out."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("8.8.8.8", 80))
        return str(probe.getsockname()[0])
    except OSError as e:
        if e.errno != errno.ENETUNREACH:
            raise
        return socket.gethostbyname(socket.getfqdn())
    finally:
        probe.close()


def find_in_path(path: str, file: str) -> str | bool:
    """The first ``<dir>/<file>`` that is a file, for the folders of ``path`` (separated by
    ``os.pathsep``); False when there is none."""
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder, file)
        if os.path.isfile(candidate):
            return candidate
    return False


def write_executor_id(num: int) -> None:
    """Writes ``num`` to the file ``executor_id`` in the working directory (a Spark executor's
    own folder), for later tasks on the same executor to read. sparktrain's nodes write their
    ``ctx.executor_id`` there as they start, as TFoS's do; with several nodes on one executor
    the last one's stays."""
    with open(EXECUTOR_ID_FILE, "w") as f:
        f.write(str(int(num)))


def read_executor_id() -> int:
    """The number :func:`write_executor_id` wrote in the working directory."""
    if not os.path.isfile(EXECUTOR_ID_FILE):
        where = os.path.abspath(EXECUTOR_ID_FILE)
        raise PathNotFoundError(
            f"{where} does not exist: no TFoS node started in this working directory (on this "
            "executor); check that each executor runs one node (one task slot each, no dynamic "
            "allocation) and that no node failed",
            path=where,
        )
    with open(EXECUTOR_ID_FILE) as f:
        return int(f.read())


__all__ = [
    "find_in_path",
    "get_ip_address",
    "read_executor_id",
    "single_node_env",
    "write_executor_id",
]
