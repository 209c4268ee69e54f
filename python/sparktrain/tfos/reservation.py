"""TFoS's ``reservation``: the small server where a job's nodes leave their reservations (who
they are, where they listen), and its client. Runs anywhere: the server on the driver, the
client on the driver, in nodes, or in a separate process such as TFoS's ``stop_streaming.py``.

``TFCluster.run`` starts a :class:`Server` for every job and logs its address; its nodes
register there as they start (``cluster.cluster_info``, ``Client.get_reservations()``). A
:class:`Client`'s ``request_stop()`` marks the server done: ``TFCluster.shutdown(ssc)`` then
stops the streaming job gracefully, which is how TFoS's ``examples/utils/stop_streaming.py``
ends one from another process::

    client = reservation.Client((host, port))
    client.request_stop()
    client.close()

Messages are length-prefixed JSON (TFoS sends pickles): nothing read from the network runs
code, and a reservation must be JSON (a dict of strings, numbers, lists...). The server
listens on one address, not on every interface: ``TFOS_SERVER_HOST`` names it (by default
the driver's host in ``TFCluster.run``, this host's outward address otherwise) and
``TFOS_SERVER_PORT`` picks the port (``"8888"`` or a range, ``"9997-9999"``). Like TFoS's,
the server asks no credential of a client: whoever reaches the port can read the reservations
and stop a streaming job. Reservations sent with the job's key (sparktrain's nodes) are
checked, so that no one else can pose as a node.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import socket
import struct
import threading
import time
from typing import Any

from sparktrain.errors import ClusterError, InvalidArgumentError, RendezvousTimeout

_log = logging.getLogger(__name__)

TFOS_SERVER_PORT = "TFOS_SERVER_PORT"
TFOS_SERVER_HOST = "TFOS_SERVER_HOST"
#: Bytes read from a socket at a time.
BUFSIZE = 65536
#: How many times a client sends a request again over a new connection when sending fails.
MAX_RETRIES = 3
#: The largest message either side accepts.
MAX_MESSAGE_BYTES = 1 << 20
#: Seconds a client waits to connect and for each answer.
CLIENT_TIMEOUT = 60.0
#: Seconds a server waits for the next request on an idle connection before closing it.
IDLE_TIMEOUT = 300.0
#: Connections a server serves at once; more are closed as they arrive.
MAX_CONNECTIONS = 256
#: Seconds between the server loop's looks at ``done``.
_POLL_SECONDS = 0.25
_HEADER = struct.Struct(">I")


def sign(key: bytes, reservation: Any) -> str:
    """The HMAC-SHA256 (hex) of ``reservation``'s canonical JSON under ``key``."""
    body = json.dumps(reservation, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, b"sparktrain.tfos.reservation\0" + body, hashlib.sha256).hexdigest()


class Reservations:
    """The reservations a server holds, safe to use from several threads. ``required`` is how
    many make the cluster complete."""

    def __init__(self, required: int) -> None:
        self.required = required
        self.lock = threading.RLock()
        self.reservations: list[Any] = []

    def add(self, meta: Any) -> None:
        """Adds ``meta``; a dict with the ``executor_id`` of one already held replaces it (a node
        that started again, after a restart of the job)."""
        with self.lock:
            if isinstance(meta, dict) and "executor_id" in meta:
                for i, held in enumerate(self.reservations):
                    if isinstance(held, dict) and held.get("executor_id") == meta["executor_id"]:
                        self.reservations[i] = meta
                        return
            self.reservations.append(meta)

    def done(self) -> bool:
        """True once ``required`` reservations are held."""
        with self.lock:
            return len(self.reservations) >= self.required

    def get(self) -> list[Any]:
        """The reservations held, in the order they came (a copy)."""
        with self.lock:
            return list(self.reservations)

    def remaining(self) -> int:
        """How many more make the cluster complete."""
        with self.lock:
            return self.required - len(self.reservations)


def _receive_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(BUFSIZE, size - len(data)))
        if not chunk:
            raise ConnectionError("the connection closed")
        data += chunk
    return bytes(data)


class MessageSocket:
    """Sends and receives length-prefixed JSON messages."""

    def receive(self, sock: socket.socket) -> Any:
        """The next message on ``sock``."""
        (size,) = _HEADER.unpack(_receive_exact(sock, _HEADER.size))
        if size > MAX_MESSAGE_BYTES:
            raise ConnectionError(f"a message of {size} bytes, more than the limit of {MAX_MESSAGE_BYTES}")
        return json.loads(_receive_exact(sock, size))

    def send(self, sock: socket.socket, msg: Any) -> None:
        """Sends ``msg`` (a JSON value) on ``sock``."""
        data = json.dumps(msg).encode()
        if len(data) > MAX_MESSAGE_BYTES:
            raise InvalidArgumentError(
                f"a message of {len(data)} bytes, more than the limit of {MAX_MESSAGE_BYTES}"
            )
        sock.sendall(_HEADER.pack(len(data)) + data)


class Server(MessageSocket):
    """The reservation server of a cluster of ``count`` nodes.

    ``host`` is the address it listens on and gives out (default: ``TFOS_SERVER_HOST``, else
    this host's outward address). With ``key``, a reservation that carries a signature must
    carry a valid one, and :meth:`signed` lists the reservations that did."""

    #: The reservations held.
    reservations: Reservations
    #: True once a client asked to stop (``request_stop``) or :meth:`stop` was called.
    done: bool = False

    def __init__(self, count: int, *, host: str | None = None, key: bytes | None = None) -> None:
        if count <= 0:
            raise InvalidArgumentError(f"count={count}: a cluster has at least one node")
        self.reservations = Reservations(count)
        self.done = False
        self._host = host
        self._key = key
        #: The signed reservations by ``executor_id``.
        self._signed: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self._connections = 0
        self._thread: threading.Thread | None = None

    def await_reservations(
        self, sc: Any = None, status: dict[str, Any] | None = None, timeout: float = 600
    ) -> list[Any]:
        """Waits until the cluster is complete and returns the reservations. Raises
        :class:`~sparktrain.errors.RendezvousTimeout` after ``timeout`` seconds, and
        :class:`~sparktrain.errors.ClusterError` as soon as ``status`` holds an ``"error"``
        (``sc`` is accepted for compatibility; the Spark context is left running)."""
        del sc
        deadline = time.monotonic() + timeout
        while not self.reservations.done():
            if status and "error" in status:
                raise ClusterError(f"the cluster failed while nodes registered: {status['error']}")
            if time.monotonic() > deadline:
                raise RendezvousTimeout(
                    f"{self.reservations.remaining()} of {self.reservations.required} nodes did not "
                    f"register with the reservation server within {timeout:g} s",
                    missing=[],
                    total=self.reservations.required,
                )
            time.sleep(_POLL_SECONDS)
        return self.reservations.get()

    def signed(self) -> list[Any]:
        """The reservations held that came with a valid signature (see ``key``)."""
        with self.reservations.lock:
            return list(self._signed.values())

    def _register(self, meta: Any, mac: Any) -> bool:
        """Holds ``meta``; False when its signature is wrong, or when it comes unsigned to
        replace a signed reservation."""
        node = meta.get("executor_id") if isinstance(meta, dict) else None
        with self.reservations.lock:
            if mac is None:
                if node is not None and node in self._signed:
                    return False
            elif (
                self._key is None or not hmac.compare_digest(str(mac), sign(self._key, meta)) or node is None
            ):
                return False
            self.reservations.add(meta)
            if mac is not None:
                self._signed[node] = meta
        return True

    def _handle_message(self, sock: socket.socket, msg: Any) -> None:
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind == "REG":
            self.send(sock, "OK" if self._register(msg.get("data"), msg.get("mac")) else "ERR")
        elif kind == "QUERY":
            self.send(sock, self.reservations.done())
        elif kind == "QINFO":
            self.send(sock, self.reservations.get())
        elif kind == "STOP":
            _log.info("the reservation server was asked to stop")
            # Done before the answer: a client that got "OK" finds the server done.
            self.done = True
            self.send(sock, "OK")
        else:
            self.send(sock, "ERR")

    def start(self) -> tuple[str, int]:
        """Starts serving on a thread of its own; returns its ``(host, port)``."""
        listener = self.start_listening_socket()
        host = self.get_server_ip()
        addr = (host, int(listener.getsockname()[1]))
        _log.info("reservation server listening at %s", addr)
        self._thread = threading.Thread(
            target=self._listen, args=(listener,), name="tfos-reservations", daemon=True
        )
        self._thread.start()
        return addr

    def _listen(self, listener: socket.socket) -> None:
        listener.settimeout(_POLL_SECONDS)
        try:
            while not self.done:
                try:
                    sock, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                with self._lock:
                    full = self._connections >= MAX_CONNECTIONS
                    if not full:
                        self._connections += 1
                if full:
                    sock.close()
                    continue
                threading.Thread(
                    target=self._serve, args=(sock,), name="tfos-reservation", daemon=True
                ).start()
        finally:
            listener.close()

    def _serve(self, sock: socket.socket) -> None:
        """Answers one client's requests until it leaves, stays idle for ``IDLE_TIMEOUT``
        seconds, sends something that is not a request, or the server is done."""
        sock.settimeout(IDLE_TIMEOUT)
        try:
            while not self.done:
                self._handle_message(sock, self.receive(sock))
        except (OSError, ValueError) as e:
            _log.debug("reservation client left: %s", e)
        finally:
            sock.close()
            with self._lock:
                self._connections -= 1

    def get_server_ip(self) -> str:
        """The address the server listens on and gives out: ``host``, else
        ``TFOS_SERVER_HOST``, else this host's outward address."""
        if self._host:
            return self._host
        env = os.environ.get(TFOS_SERVER_HOST)
        if env:
            return env
        from sparktrain.tfos.util import get_ip_address

        return get_ip_address()

    def get_server_ports(self) -> list[int]:
        """The ports to try, from ``TFOS_SERVER_PORT`` (a port or ``first-last``); ``[0]``
        (any free port) when it is not set."""
        spec = os.environ.get(TFOS_SERVER_PORT, "0").strip()
        try:
            if "-" not in spec:
                return [int(spec)]
            first, last = (int(p) for p in spec.split("-"))
        except ValueError:
            raise InvalidArgumentError(
                f"{TFOS_SERVER_PORT}={spec!r}: use a port or a range such as 9997-9999"
            ) from None
        return list(range(first, last + 1))

    def start_listening_socket(self) -> socket.socket:
        """A socket listening on the server's address, on the first port of
        :meth:`get_server_ports` that is free."""
        ports = self.get_server_ports()
        address = socket.gethostbyname(self.get_server_ip())
        errors = []
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((address, port))
                sock.listen(64)
                return sock
            except OSError as e:
                sock.close()
                errors.append(f"{port}: {e.strerror or e}")
        raise ClusterError(f"the reservation server could not listen on {address}, port {', '.join(errors)}")

    def stop(self) -> None:
        """Stops serving (within a fraction of a second)."""
        self.done = True
        if self._thread is not None:
            self._thread.join(5.0)


class Client(MessageSocket):
    """A connection to the reservation server at ``server_addr`` (``(host, port)``). Every
    call waits at most ``timeout`` seconds for the server, then raises
    :class:`~sparktrain.errors.ClusterError` naming it."""

    sock: socket.socket
    server_addr: tuple[str, int]

    def __init__(self, server_addr: Any, timeout: float = CLIENT_TIMEOUT) -> None:
        host, port = server_addr
        self.server_addr = (str(host), int(port))
        self._timeout = timeout
        self.sock = self._connect()

    def _connect(self) -> socket.socket:
        try:
            return socket.create_connection(self.server_addr, timeout=self._timeout)
        except OSError as e:
            raise ClusterError(f"could not reach the reservation server at {self.server_addr}: {e}") from e

    def _request(self, msg_type: str, msg_data: Any = None, **extra: Any) -> Any:
        msg: dict[str, Any] = {"type": msg_type, **extra}
        if msg_data is not None:
            msg["data"] = msg_data
        for attempt in range(MAX_RETRIES):
            try:
                self.send(self.sock, msg)
                break
            except OSError:
                self.sock.close()
                if attempt + 1 == MAX_RETRIES:
                    raise
                self.sock = self._connect()
        try:
            return self.receive(self.sock)
        except TimeoutError as e:
            raise ClusterError(
                f"the reservation server at {self.server_addr} did not answer within {self._timeout:g} s"
            ) from e
        except (OSError, ValueError) as e:
            raise ClusterError(f"the reservation server at {self.server_addr} failed to answer: {e}") from e

    def close(self) -> None:
        """Closes the connection."""
        self.sock.close()

    def register(self, reservation: Any) -> Any:
        """Leaves ``reservation`` with the server; returns ``"OK"``."""
        return self._request("REG", reservation)

    def register_signed(self, reservation: Any, key: bytes) -> None:
        """Leaves ``reservation`` signed with ``key``; raises
        :class:`~sparktrain.errors.ClusterError` when the server refuses the signature."""
        if self._request("REG", reservation, mac=sign(key, reservation)) != "OK":
            raise ClusterError(f"the reservation server at {self.server_addr} refused this node's key")

    def get_reservations(self) -> list[Any]:
        """The reservations the server holds."""
        reservations: list[Any] = self._request("QINFO")
        return reservations

    def await_reservations(self, timeout: float = 600) -> list[Any]:
        """Asks every second until the cluster is complete, then returns the reservations;
        :class:`~sparktrain.errors.RendezvousTimeout` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self._request("QUERY"):
            if time.monotonic() > deadline:
                raise RendezvousTimeout(
                    f"the cluster at {self.server_addr} was not complete within {timeout:g} s",
                    missing=[],
                    total=0,
                )
            time.sleep(1.0)
        return self.get_reservations()

    def request_stop(self) -> Any:
        """Asks the server to stop: ``TFCluster.shutdown(ssc)`` then stops the streaming job."""
        return self._request("STOP")


__all__ = [
    "TFOS_SERVER_HOST",
    "TFOS_SERVER_PORT",
    "Client",
    "MessageSocket",
    "Reservations",
    "Server",
    "sign",
]
