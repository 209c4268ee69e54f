"""The driver's memory under hostile load on its control plane, measured from outside: the
rendezvous service runs in a process of its own (as in a driver), and this test floods it
over 127.0.0.1 and reads its resident memory from ``/proc``.

- 1,000 calls carrying 3.9 MB each with a wrong secret: every one is refused for its secret,
  and the service never holds their bodies (they are refused on their headers).
- 2,500 idle TCP connections: those beyond the service's cap of 2,048 are closed at once,
  memory stays bounded, and the job's own calls are served again once the crowd leaves.
"""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from sparktrain._native import ControlClient, generate_secret
from sparktrain.errors import Unauthenticated

SERVER = """
import sys
from sparktrain._native import Rendezvous
service = Rendezvous("127.0.0.1", 0, 0, sys.argv[1], 1, 0, 600.0, 600.0)
print(service.address, flush=True)
sys.stdin.read()
print(service.refused_total(), flush=True)
"""
MAX_CONNECTIONS = 2048
MiB = 1 << 20


def _allow_open_files(count: int) -> None:
    """Raises this process's soft limit on open files to at least ``count`` (the service,
    started after, inherits it): the idle-connection test holds thousands of sockets on each
    side, more than a common default of 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < count:
        if hard != resource.RLIM_INFINITY and hard < count:
            raise RuntimeError(f"this test needs {count} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))


class Service:
    def __init__(self) -> None:
        _allow_open_files(2 * (MAX_CONNECTIONS + 452) + 256)
        self.secret = generate_secret()
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, self.secret],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip()

    def resident(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            line = next(line for line in f if line.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024

    def refused_total(self) -> int:
        """Stops the service; how many calls it refused in all."""
        out, _ = self.process.communicate("", timeout=30)
        return int(out.strip())


@pytest.fixture
def service() -> Iterator[Service]:
    s = Service()
    yield s
    if s.process.poll() is None:
        s.process.kill()
        s.process.wait()


class PeakMemory:
    """Samples a process's resident memory every 20 ms while in use; ``peak`` is the most."""

    def __init__(self, service: Service) -> None:
        self.service, self.peak, self._done = service, service.resident(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak = max(self.peak, self.service.resident())

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def test_a_flood_of_large_unauthenticated_calls_leaves_the_drivers_memory_flat(service):
    calls, in_flight = 1000, 16
    lines = [(1, "x" * 8000)] * 487  # 3.9 MB
    wrong = generate_secret()
    local = threading.local()

    def call(_: int) -> bool:
        if not hasattr(local, "client"):
            local.client = ControlClient(service.address, wrong, 10.0)
        try:
            local.client.heartbeat(0, 0, lines, 10.0)
        except Unauthenticated:
            return True
        return False

    call(0)  # connect and warm up before measuring
    before = service.resident()
    started = time.monotonic()
    with PeakMemory(service) as memory, ThreadPoolExecutor(in_flight) as pool:
        refused = sum(pool.map(call, range(calls)))
    seconds = time.monotonic() - started
    assert refused == calls
    assert service.refused_total() == calls + 1
    grown = memory.peak - before
    # Decoding each body before the secret was checked grew it by ~8 MB per call in flight.
    assert grown < 24 * MiB, f"the service's memory grew by {grown / MiB:.0f} MiB"
    print(f"{calls} calls of 3.9 MB refused in {seconds:.1f} s; peak growth {grown / MiB:.1f} MiB")


def test_idle_connections_beyond_the_cap_are_closed_and_memory_stays_flat(service):
    host, port = service.address.rsplit(":", 1)
    before = service.resident()
    with PeakMemory(service) as memory:
        crowd = [
            socket.create_connection((host, int(port)), timeout=10) for _ in range(MAX_CONNECTIONS + 452)
        ]
        # Those beyond the cap are closed by the service at once: a read sees end-of-file.
        deadline = time.monotonic() + 20
        closed: set[int] = set()
        while len(closed) < 452 and time.monotonic() < deadline:
            for i, s in enumerate(crowd):
                if i in closed:
                    continue
                s.settimeout(0.0)
                try:
                    if s.recv(1) == b"":
                        closed.add(i)
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    closed.add(i)
            time.sleep(0.05)
        assert len(closed) == 452
        for s in crowd:
            s.close()
    grown = memory.peak - before
    # Bounded by the cap: about 15 KiB per connection served.
    assert grown < 48 * MiB, f"the service's memory grew by {grown / MiB:.0f} MiB"
    # The job's own task registers and is served once the crowd has left.
    client = ControlClient(service.address, service.secret, 10.0)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.register(0, 0, "127.0.0.1", 4242, "exec-0", 5000, 5001, [], 5.0)
            assert client.heartbeat(0, 0, [], 5.0) is None
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    print(f"{MAX_CONNECTIONS + 452} idle connections: 452 closed at once; peak growth {grown / MiB:.1f} MiB")
