"""TFoS's ``TFManager``: a ``multiprocessing`` manager holding named queues and a key-value
store, shared between the processes of one host (``mode="local"``) or reachable from other
hosts (``mode="remote"``). Runs wherever it is started: a Spark task, a node, the driver.

``start(authkey, queues)`` starts the manager's server process and returns a handle whose
``get_queue(name)``, ``get(key)`` and ``set(key, value)`` reach it; ``connect(address,
authkey)`` opens another handle to a running one. A
:class:`~sparktrain.tfos.TFNode.DataFeed` reads such a manager as TFoS's does: rows from the
``input`` queue until ``None``, results into ``output``, ``state`` set to ``"terminating"``
by ``terminate()``.

sparktrain's own nodes do not start one: in ``InputMode.SPARK`` their ``ctx.mgr`` hands them
the rows that reach them as Arrow batches through the launcher, and it has no queues (see
:class:`~sparktrain.tfos._feed.FeedManager`). A manager speaks pickle to whoever presents its
``authkey``: keep the key secret, and prefer ``"local"`` (a Unix socket) unless another host
must connect.
"""

from __future__ import annotations

import queue
from collections.abc import Iterable
from multiprocessing.managers import BaseManager
from typing import Any

from sparktrain import _checks
from sparktrain.errors import InvalidArgumentError

#: The manager's modes: reachable on this host only, or from other hosts too.
MODES = ("local", "remote")

# The manager's state, in its server process only: filled by _serve when it starts.
_queues: dict[str, queue.Queue[Any]] = {}
_values: dict[str, Any] = {}


def _serve(names: list[str]) -> None:
    """Runs first in the manager's server process: a fresh queue per name, no values."""
    _queues.clear()
    _values.clear()
    for name in names:
        _queues[name] = queue.Queue()


def _get_queue(qname: str) -> queue.Queue[Any] | None:
    return _queues.get(qname)


def _get(key: str) -> Any:
    return _values[key]


def _set(key: str, value: Any) -> None:
    _values[key] = value


class TFManager(BaseManager):
    """The manager: ``get_queue(qname)`` (None for a name it does not hold), ``get(key)`` and
    ``set(key, value)``, each a call into its server process."""

    # BaseManager.register builds these at run time; declared for type checkers.
    get_queue: Any
    get: Any
    set: Any


# Module-level functions, so that the registry works under any start method (a spawned server
# process finds them by name, where TFoS's lambdas would only survive fork).
TFManager.register("get_queue", callable=_get_queue)
TFManager.register("get", callable=_get)
TFManager.register("set", callable=_set)


def _key(authkey: object) -> bytes:
    if isinstance(authkey, str):
        authkey = authkey.encode()
    if not isinstance(authkey, bytes | bytearray) or not authkey:
        raise InvalidArgumentError(f"authkey={authkey!r}: must be non-empty bytes (e.g. uuid.uuid4().bytes)")
    return bytes(authkey)


def start(authkey: bytes | str, queues: Iterable[str], mode: str = "local") -> TFManager:
    """Starts a manager holding a queue for each name in ``queues``; returns it, started.

    ``mode="local"`` serves on a Unix socket of this host; ``"remote"`` on a TCP port of this
    host's outward address (:func:`~sparktrain.tfos.util.get_ip_address`), which
    ``mgr.address`` gives as ``(host, port)`` for :func:`connect` on another host."""
    key = _key(authkey)
    names = [_checks.text("queues", q) for q in queues]
    if mode not in MODES:
        raise InvalidArgumentError(f"mode={mode!r}: use 'local' or 'remote'")
    if mode == "remote":
        from sparktrain.tfos.util import get_ip_address

        mgr = TFManager(address=(get_ip_address(), 0), authkey=key)
    else:
        mgr = TFManager(authkey=key)
    mgr.start(initializer=_serve, initargs=(names,))
    return mgr


def connect(address: Any, authkey: bytes | str) -> TFManager:
    """A handle to the running manager at ``address`` (its ``mgr.address``: a socket path in
    local mode, ``(host, port)`` in remote mode)."""
    if isinstance(address, list):
        address = tuple(address)
    mgr = TFManager(address=address, authkey=_key(authkey))
    mgr.connect()
    return mgr


__all__ = [
    "TFManager",
    "connect",
    "start",
]
