"""The environment each framework's own launcher would give a trainer: PyTorch's (``torchrun``)
and JAX's, next to TensorFlow's ``TF_CONFIG``. Runs in the trainer process.

So that ``torch.distributed.init_process_group("gloo")`` and ``jax.distributed.initialize()``
work with no arguments in ``main_fun``, every trainer gets, before user code runs:

- PyTorch: ``MASTER_ADDR`` and ``MASTER_PORT`` (the chief's host and its reserved port),
  ``WORLD_SIZE`` (the training tasks), and for a training task ``RANK`` and ``NODE_RANK`` (its
  rank), ``LOCAL_RANK=0`` and ``LOCAL_WORLD_SIZE=1``: one process per Spark task, as
  PySpark's TorchDistributor runs ``torchrun`` (a task's GPUs are its ``CUDA_VISIBLE_DEVICES``,
  so its device is always 0);
- JAX: ``JAX_COORDINATOR_ADDRESS`` (the same address), which JAX reads itself, and the process
  count and id, which JAX only takes from a cluster environment it detects: a trainer
  registers one for sparktrain (:func:`register_jax_cluster`) when JAX is imported.

The port is the one reserved for TensorFlow on the chief: a job uses one framework's
collectives, and the chief's TensorFlow server, PyTorch's store and JAX's coordinator all bind
there. Evaluators are not part of the training world: they get the addresses but no rank.

PyTorch's gloo back-end picks the address it listens on and hands its peers from the host
name, which on many hosts resolves to loopback (Debian's ``127.0.1.1``, a container's
``127.0.0.1``): its peers then dial their own loopback and the process group never forms. So a
trainer also gets ``GLOO_SOCKET_IFNAME``, the network interface that holds the address its task
registered (the one Spark knows the executor by), unless the job's environment sets it.
"""

from __future__ import annotations

import array
import fcntl
import importlib.abc
import importlib.machinery
import os
import socket
import struct
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from sparktrain.cluster.settings import TaskInfo

#: The JAX process count and id of this trainer, read by sparktrain's JAX cluster environment.
JAX_NUM_PROCESSES = "SPARKTRAIN_JAX_NUM_PROCESSES"
JAX_PROCESS_ID = "SPARKTRAIN_JAX_PROCESS_ID"


def framework_env(tasks: Sequence[TaskInfo], rank: int, num_workers: int) -> dict[str, str]:
    """The PyTorch and JAX variables of the trainer at ``rank`` (see the module notes)."""
    chief = tasks[0]
    address = f"{chief.host}:{chief.tf_port}"
    env = {
        "MASTER_ADDR": chief.host,
        "MASTER_PORT": str(chief.tf_port),
        "WORLD_SIZE": str(num_workers),
        "JAX_COORDINATOR_ADDRESS": address,
        JAX_NUM_PROCESSES: str(num_workers),
    }
    if rank < num_workers:
        env.update(
            RANK=str(rank),
            NODE_RANK=str(rank),
            GROUP_RANK=str(rank),
            LOCAL_RANK="0",
            LOCAL_WORLD_SIZE="1",
            **{JAX_PROCESS_ID: str(rank)},
        )
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        interface = interface_of(tasks[rank].host)
        if interface is not None:
            env["GLOO_SOCKET_IFNAME"] = interface
    return env


#: ``ioctl`` request for an interface's IPv4 address (``linux/sockios.h``).
_SIOCGIFADDR = 0x8915


def interface_of(host: str) -> str | None:
    """The name of this machine's network interface that holds ``host``'s IPv4 address, or None
    when none does (or the system cannot say: not Linux)."""
    try:
        address = socket.inet_aton(socket.gethostbyname(host))
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for name in names:
            request = array.array("B", struct.pack("256s", name.encode()[:15]))
            try:
                fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request, True)
            except OSError:
                continue  # no IPv4 address on it
            # struct ifreq: the name (16 bytes), then a sockaddr_in: family, port, address.
            if request.tobytes()[20:24] == address:
                return name
    return None


def register_jax_cluster() -> None:
    """Makes ``jax.distributed.initialize()`` find this job's process count and id: when JAX
    loads its cluster environments, a sparktrain one is added beside them. Nothing is imported
    now (JAX costs a second and memory that a job without it should not pay)."""
    if any(isinstance(finder, _JaxClustersHook) for finder in sys.meta_path):
        return
    module = sys.modules.get(_JaxClustersHook.target)
    if module is not None:
        _define_cluster(module)
    else:
        sys.meta_path.insert(0, _JaxClustersHook())


class _JaxClustersHook(importlib.abc.MetaPathFinder):
    """Finds JAX's ``clusters`` module as usual, then defines sparktrain's environment in it."""

    target = "jax._src.clusters"

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.target:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                spec.loader = _DefiningLoader(spec.loader)
                return spec
        return None


class _DefiningLoader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.inner.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _define_cluster(module)


def _define_cluster(clusters: ModuleType) -> None:
    """Subclasses JAX's ``ClusterEnv`` (subclasses register themselves as they are defined)."""
    base = getattr(clusters, "ClusterEnv", None)
    if base is None or any(getattr(c, "name", "") == "sparktrain" for c in base._cluster_types):
        return

    class SparktrainCluster(base):  # type: ignore[misc, valid-type]
        """A trainer of a sparktrain job: its job gave the coordinator, count and id."""

        name = "sparktrain"

        @classmethod
        def is_env_present(cls) -> bool:
            return JAX_PROCESS_ID in os.environ and "JAX_COORDINATOR_ADDRESS" in os.environ

        @classmethod
        def get_coordinator_address(cls, *args: Any, **kwargs: Any) -> str:
            return os.environ["JAX_COORDINATOR_ADDRESS"]

        @classmethod
        def get_process_count(cls) -> int:
            return int(os.environ[JAX_NUM_PROCESSES])

        @classmethod
        def get_process_id(cls) -> int:
            return int(os.environ[JAX_PROCESS_ID])

        @classmethod
        def get_local_process_id(cls) -> int | None:
            return 0  # one process per task, which sees only its own devices

    # JAX tries environments in the order they were defined; a job's own comes first, before
    # ones that only guess (Kubernetes, for an executor that runs in a pod).
    base._cluster_types.remove(SparktrainCluster)
    base._cluster_types.insert(0, SparktrainCluster)


__all__ = ["framework_env", "interface_of", "register_jax_cluster"]
