"""The channel that carries streamed data to TFoS nodes: from the Spark tasks that feed a
micro-batch, and from the driver that drives the stream. Runs anywhere: the driver, Spark
tasks, nodes.

Both ends hold the job's stream key: 32 random bytes the driver makes for each
``TFCluster.run``, which reach the tasks and the nodes inside Spark's closures, as the job
secret does, and never cross this channel. A connection starts with a mutual HMAC-SHA256
challenge-response over fresh nonces from both sides; each frame after it carries an
HMAC-SHA256 tag, under a key of the connection's own, over its direction, its sequence number
and its content, so a frame cannot be forged, altered, replayed or reordered unnoticed. Frames
are not encrypted: rows travel in the clear, as they do in Spark's own shuffle unless
``spark.network.crypto.enabled`` is set.

A frame is JSON (a request or an answer) or data (Arrow IPC, or rows pickled by this job's own
Spark tasks; the tag proves that they come from a holder of the key). Every wait has a
time-out that names the peer that did not answer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
from typing import Any

from sparktrain.errors import ClusterError, Unauthenticated

#: What a node sends first, so that a client that reached something else fails at once.
MAGIC = b"sparktrain.tfos.stream/1\n"
#: The largest frame either side accepts.
MAX_FRAME_BYTES = 256 << 20
#: Seconds each side waits for the other during the handshake.
HANDSHAKE_TIMEOUT = 30.0
#: Seconds to wait for a TCP connection.
CONNECT_TIMEOUT = 30.0
#: Frame kinds.
JSON, DATA = b"J", b"D"

_NONCE = 32
_TAG = 32
_HEADER = struct.Struct(">cI")


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def _receive_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise ConnectionError("the connection closed")
        got += n
    return bytes(data)


class Channel:
    """One authenticated connection. ``peer`` names the other end in errors."""

    def __init__(self, sock: socket.socket, session_key: bytes, client: bool, peer: str) -> None:
        self._sock = sock
        self._key = session_key
        self.peer = peer
        self._out, self._in = (b"C", b"S") if client else (b"S", b"C")
        self._sent = 0
        self._received = 0

    def send(self, kind: bytes, payload: bytes) -> None:
        """Sends one frame."""
        if len(payload) > MAX_FRAME_BYTES:
            raise ClusterError(
                f"a frame of {len(payload)} bytes for {self.peer}, more than {MAX_FRAME_BYTES}"
            )
        tag = _mac(self._key, self._out, self._sent.to_bytes(8, "big"), kind, payload)
        self._sent += 1
        try:
            self._sock.sendall(_HEADER.pack(kind, len(payload)) + payload + tag)
        except TimeoutError as e:
            raise ClusterError(f"{self.peer} took no data for {self._sock.gettimeout():g} s") from e
        except OSError as e:
            raise ClusterError(f"the connection to {self.peer} failed: {e}") from e

    def send_json(self, message: Any) -> None:
        """Sends ``message`` as a JSON frame."""
        self.send(JSON, json.dumps(message).encode())

    def receive(self, timeout: float | None) -> tuple[bytes, bytes]:
        """The next frame's kind and payload, waiting at most ``timeout`` seconds (None: as
        long as the connection lives)."""
        self._sock.settimeout(timeout)
        try:
            kind, size = _HEADER.unpack(_receive_exact(self._sock, _HEADER.size))
            if size > MAX_FRAME_BYTES or kind not in (JSON, DATA):
                raise ClusterError(f"{self.peer} sent a malformed frame")
            payload = _receive_exact(self._sock, size)
            tag = _receive_exact(self._sock, _TAG)
        except TimeoutError as e:
            raise ClusterError(f"{self.peer} did not answer within {timeout:g} s") from e
        except OSError as e:
            raise ClusterError(f"the connection to {self.peer} failed: {e}") from e
        expected = _mac(self._key, self._in, self._received.to_bytes(8, "big"), kind, payload)
        if not hmac.compare_digest(tag, expected):
            raise Unauthenticated(f"a frame from {self.peer} failed its check", address=self.peer)
        self._received += 1
        return kind, payload

    def receive_json(self, timeout: float | None) -> Any:
        """The next frame, which must be JSON."""
        kind, payload = self.receive(timeout)
        if kind != JSON:
            raise ClusterError(f"{self.peer} sent data where a message was due")
        return json.loads(payload)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def accept(sock: socket.socket, key: bytes, peer: str) -> Channel:
    """The node's side of a new connection: proves itself and checks the client."""
    sock.settimeout(HANDSHAKE_TIMEOUT)
    mine = os.urandom(_NONCE)
    try:
        sock.sendall(MAGIC + mine)
        answer = _receive_exact(sock, _NONCE + _TAG)
    except OSError as e:
        raise ClusterError(f"the handshake with {peer} failed: {e}") from e
    theirs, proof = answer[:_NONCE], answer[_NONCE:]
    if not hmac.compare_digest(proof, _mac(key, b"client", mine, theirs)):
        raise Unauthenticated(f"{peer} does not hold this job's stream key", address=peer)
    try:
        sock.sendall(_mac(key, b"server", mine, theirs))
    except OSError as e:
        raise ClusterError(f"the handshake with {peer} failed: {e}") from e
    return Channel(sock, _mac(key, b"session", mine, theirs), client=False, peer=peer)


def connect(address: tuple[str, int], key: bytes, peer: str) -> Channel:
    """A new connection to the node ``peer`` at ``address``, both sides proven."""
    where = f"{peer} at {address[0]}:{address[1]}"
    try:
        sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT)
    except OSError as e:
        raise ClusterError(f"could not reach {where}: {e}") from e
    try:
        sock.settimeout(HANDSHAKE_TIMEOUT)
        hello = _receive_exact(sock, len(MAGIC) + _NONCE)
        if not hello.startswith(MAGIC):
            raise ClusterError(f"{where} is not a TFoS node's stream endpoint")
        theirs = hello[len(MAGIC) :]
        mine = os.urandom(_NONCE)
        sock.sendall(mine + _mac(key, b"client", theirs, mine))
        proof = _receive_exact(sock, _TAG)
        if not hmac.compare_digest(proof, _mac(key, b"server", theirs, mine)):
            raise Unauthenticated(f"{where} does not hold this job's stream key", address=where)
    except TimeoutError as e:
        sock.close()
        raise ClusterError(f"{where} did not finish the handshake within {HANDSHAKE_TIMEOUT:g} s") from e
    except OSError as e:
        sock.close()
        raise ClusterError(f"the handshake with {where} failed: {e}") from e
    except BaseException:
        sock.close()
        raise
    return Channel(sock, _mac(key, b"session", theirs, mine), client=True, peer=where)


def request(address: tuple[str, int], key: bytes, peer: str, message: Any, timeout: float) -> Any:
    """Sends ``message`` to a node and returns its answer, waiting at most ``timeout`` seconds
    for it; an answer with an ``"error"`` raises :class:`~sparktrain.errors.ClusterError`."""
    with connect(address, key, peer) as channel:
        channel.send_json(message)
        return checked(channel.receive_json(timeout), channel.peer)


def checked(answer: Any, peer: str) -> Any:
    """``answer``, unless it reports an error (then raised, naming ``peer``)."""
    if isinstance(answer, dict) and "error" in answer:
        raise ClusterError(f"{peer}: {answer['error']}")
    return answer
