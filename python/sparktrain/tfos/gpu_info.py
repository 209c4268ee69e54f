"""TFoS's ``gpu_info``: which NVIDIA GPUs this host has, and which of them are free, as
``nvidia-smi`` reports them. Runs anywhere (the driver, Spark tasks, nodes).

:func:`get_gpus` hands out free GPUs (those no compute process uses), waiting and asking again
when too few are free: up to :data:`MAX_RETRIES` more times, :data:`RETRY_SECONDS` times the
attempt's number seconds apart (30, 60 then 90 s, as TFoS waits), before it gives up with the
list of processes that hold them.

On sparktrain's launcher a node does not need this to find its GPUs: the launcher sets
``CUDA_VISIBLE_DEVICES`` from the GPUs Spark assigned to the node's task
(``spark.task.resource.gpu.amount``), and :func:`sparktrain.tfos.util.single_node_env` keeps
them. These functions are for code that picks GPUs on hosts where Spark does not schedule them.
"""

from __future__ import annotations

import logging
import random
import re
import subprocess
import time

from sparktrain import _checks
from sparktrain.errors import ClusterError, InvalidArgumentError

_log = logging.getLogger(__name__)

#: How many more times :func:`get_gpus` asks ``nvidia-smi`` when too few GPUs are free.
MAX_RETRIES = 3
#: Seconds :func:`get_gpus` waits before its n-th retry, times n.
RETRY_SECONDS = 30.0
#: Seconds one ``nvidia-smi`` call may take before it is given up.
NVIDIA_SMI_TIMEOUT = 60.0
#: ``get_gpus(format=...)``: a comma-separated string (``"0,1"``), or a list (``["0", "1"]``).
AS_STRING = "string"
AS_LIST = "list"

#: A line of ``nvidia-smi --list-gpus``: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d3c...)``.
_GPU_LINE = re.compile(r"^GPU (\d+):.*\(UUID: ([^)\s]+)\)\s*$")


def _nvidia_smi(*args: str) -> str:
    """The output of ``nvidia-smi args``; raises :class:`~sparktrain.errors.ClusterError` when
    it cannot run, fails, or does not answer within :data:`NVIDIA_SMI_TIMEOUT` seconds."""
    command = ["nvidia-smi", *args]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT, check=False
        )
    except FileNotFoundError as e:
        raise ClusterError(
            "nvidia-smi is not installed on this host: it has no NVIDIA GPUs to hand out"
        ) from e
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"{' '.join(command)} did not answer within {NVIDIA_SMI_TIMEOUT:g} s") from e
    except OSError as e:
        raise ClusterError(f"{' '.join(command)} could not run: {e}") from e
    if done.returncode != 0:
        raise ClusterError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def parse_gpu_list(listing: str) -> list[tuple[str, str]]:
    """``(index, uuid)`` of every GPU in the output of ``nvidia-smi --list-gpus``."""
    gpus = []
    for line in listing.splitlines():
        match = _GPU_LINE.match(line.strip())
        if match:
            gpus.append((match.group(1), match.group(2)))
    return gpus


def place(free: list[str], num_gpu: int, worker_index: int) -> list[str]:
    """``num_gpu`` of the ``free`` GPU indexes for the worker ``worker_index``: at random for
    -1; else the worker's own run of ``num_gpu`` consecutive ones, so that workers on one host
    take different GPUs, wrapping around when there are more workers than runs (TFoS's
    placement can then return fewer GPUs than asked; here every worker gets ``num_gpu``)."""
    if num_gpu == 0:
        return []
    if worker_index == -1:
        return random.sample(free, num_gpu)
    start = worker_index * num_gpu % len(free)
    return [free[(start + k) % len(free)] for k in range(num_gpu)]


def is_gpu_available() -> bool:
    """True when ``nvidia-smi`` runs and lists this host's GPUs."""
    try:
        _nvidia_smi("--list-gpus")
    except ClusterError:
        return False
    return True


def get_gpus(num_gpu: int = 1, worker_index: int = -1, format: str = AS_STRING) -> str | list[str]:
    """``num_gpu`` GPUs that no compute process uses, as ``nvidia-smi`` numbers them: a string
    such as ``"0,1"`` (``format=AS_STRING``) or a list (``AS_LIST``). ``worker_index`` picks
    among the free GPUs so that workers on one host do not share them (see :func:`place`);
    -1 picks at random.

    With too few free GPUs it waits and asks again (see the module's docstring), then raises
    :class:`~sparktrain.errors.ClusterError` listing the processes that hold them."""
    num_gpu = _checks.integer("num_gpu", num_gpu, minimum=0)
    worker_index = _checks.integer("worker_index", worker_index, minimum=-1)
    if format not in (AS_STRING, AS_LIST):
        raise InvalidArgumentError(f"format={format!r}: use gpu_info.AS_STRING or gpu_info.AS_LIST")
    gpus = parse_gpu_list(_nvidia_smi("--list-gpus"))
    _log.debug("GPUs of this host: %s", gpus)
    free: list[str] = []
    for attempt in range(MAX_RETRIES + 1):
        busy = set(_nvidia_smi("--format=csv,noheader,nounits", "--query-compute-apps=gpu_uuid").split())
        free = [index for index, uuid in gpus if uuid not in busy]
        if len(free) >= num_gpu:
            break
        if attempt < MAX_RETRIES:
            wait = RETRY_SECONDS * (attempt + 1)
            _log.warning(
                "%d of the %d GPUs asked for are free; asking again in %g s", len(free), num_gpu, wait
            )
            time.sleep(wait)
    if len(free) < num_gpu:
        holders = _nvidia_smi(
            "--format=csv", "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory"
        )
        raise ClusterError(
            f"{len(free)} of the {num_gpu} GPUs asked for are free after {MAX_RETRIES} retries; "
            f"the processes that hold them:\n{holders.strip()}"
        )
    chosen = place(free, num_gpu, worker_index)
    _log.info("GPUs chosen: %s (free: %s)", chosen, free)
    return ",".join(chosen) if format == AS_STRING else chosen


__all__ = [
    "AS_LIST",
    "AS_STRING",
    "MAX_RETRIES",
    "RETRY_SECONDS",
    "get_gpus",
    "is_gpu_available",
    "parse_gpu_list",
    "place",
]
