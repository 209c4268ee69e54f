"""Which peers a trainer can still reach, said after one of its collectives failed. Runs in the
trainer process.

A ring fails every rank at once: the rank next to a peer that went silent times out, shuts its
connections, and its own neighbour then sees a connection closed by a bystander, and so on
around the ring. Each trainer's error names a neighbour, which is the culprit for only one of
them. So a trainer whose collective failed also knocks on every other trainer's data-plane
port: a peer whose host answers (the connection opens, or is refused because its trainer has
gone) is reachable; one that does not answer within a couple of seconds is cut off from this
host (a partition, a dead host or switch port). The trainer prints which, and every trainer's
stderr (which reaches the driver) then names the peer the network lost.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Sequence

from sparktrain.cluster.settings import TaskInfo

#: Seconds a knock waits for an answer.
KNOCK_TIMEOUT = 2.0

#: ``connect`` errors that mean the peer's host answered: something is there, if not the trainer.
_ANSWERED = {errno.ECONNREFUSED, errno.ECONNRESET}


def _knock(host: str, port: int, timeout: float) -> str | None:
    """None when ``host`` answers on ``port`` within ``timeout`` seconds (the connection opens,
    or is refused); else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as e:
        if e.errno in _ANSWERED:
            return None
        return e.strerror or str(e)


def unreachable_peers(
    tasks: Sequence[TaskInfo], rank: int, num_workers: int, timeout: float = KNOCK_TIMEOUT
) -> dict[int, str]:
    """``{rank: why}`` of the training peers whose data-plane port does not answer from here,
    all knocked on at once (so this takes at most about ``timeout`` seconds)."""
    peers = [t for t in tasks[:num_workers] if t.task_index != rank]
    found: dict[int, str] = {}
    lock = threading.Lock()

    def knock(task: TaskInfo) -> None:
        why = _knock(task.host, task.data_port, timeout)
        if why is not None:
            with lock:
                found[task.task_index] = why

    threads = [threading.Thread(target=knock, args=(t,), daemon=True) for t in peers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 1.0)
    return found


def describe_reach(
    tasks: Sequence[TaskInfo], rank: int, num_workers: int, timeout: float = KNOCK_TIMEOUT
) -> str:
    """One line for the trainer's stderr: the peers this host cannot reach, or that it reaches
    them all."""
    lost = unreachable_peers(tasks, rank, num_workers, timeout)
    if not lost:
        return "sparktrain: after the failed collective, every peer's host still answers from here"
    names = "; ".join(
        f"rank {r} ({tasks[r].role} on {tasks[r].host}, port {tasks[r].data_port}): {why}"
        for r, why in sorted(lost.items())
    )
    return f"sparktrain: after the failed collective, unreachable from here: {names}"


__all__ = ["KNOCK_TIMEOUT", "describe_reach", "unreachable_peers"]
