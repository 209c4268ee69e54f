"""Hosts on one machine: Linux network namespaces joined by a bridge, for the tests and
benchmarks that must cross a network (addresses that differ between hosts, links that are
slow, links that are cut). Runs in the test process; ``python tests/harness/netns.py --reap``
is its clean-up helper.

A :class:`Network` is a "switch" namespace holding a bridge, and one namespace per
:meth:`Network.add_host`, each joined to the bridge by a veth pair. Every host sees its own
``lo`` and an ``eth0`` with one address of the network's private ``/24``, and nothing else: the
machine's own interfaces, routes and addresses are not touched, so two networks (of two test
runs at once) cannot collide even when they use the same addresses::

    with Network() as net:
        a, b = net.add_host("a"), net.add_host("b")
        server = b.popen(["python3", "-m", "http.server", "--bind", b.address, "8000"])
        a.limit(100_000_000)        # 100 Mbit/s each way
        a.cut(); a.restore()        # the switch port goes down, then up again

- **Links.** :meth:`Host.limit` puts a token bucket (``tc tbf``) on both ends of the host's
  veth pair, so the host sends and receives at the rate; :meth:`Host.cut` sets the switch's end
  down, as a dead switch port or cable would: packets are dropped without a word, TCP on either
  side waits and retransmits, and :meth:`Host.restore` lets it resume. ``netem`` (delay, loss)
  is not used: many kernels here lack it.
- **Processes.** :meth:`Host.popen` and :meth:`Host.run` start a command in the host with
  ``ip netns exec``. :meth:`Network.close` stops every process found in the network's
  namespaces (SIGTERM, then SIGKILL), whoever started it, and deletes the namespaces; their
  veths and the bridge go with them.
- **Every exit path.** ``close`` runs on leaving the ``with`` block, failed or not. A test
  process killed outright (SIGKILL, a crash) cannot run it, so each network starts a small
  reaper process that waits for the end of its stdin pipe, which the kernel closes when the
  test process dies, and then does the same clean-up. Names carry the owner's process id:
  a network whose owner is gone is also swept away by the next :class:`Network` made on the
  machine.
- **Where it cannot run** (not Linux, not root, no ``ip``, namespaces refused),
  :func:`unavailable` says why, for a test to skip with that reason.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

#: Namespace names: ``stn<owner pid>x<network number>-<host name>``.
_NAME = re.compile(r"^stn(\d+)x(\d+)-")
_STOP_GRACE_S = 10.0
_POLL_S = 0.1
_counter = itertools.count()


class NetworkError(RuntimeError):
    """A command that builds or changes the network failed; the message holds its stderr."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def _tc(namespace: str, *args: str) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", *args], capture_output=True, text=True, timeout=30
    )
    if done.returncode != 0:
        raise NetworkError(
            f"tc {' '.join(args)} in {namespace} failed ({done.returncode}): {done.stderr.strip()}"
        )


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can (checked once by
    making and deleting one)."""
    if sys.platform != "linux":
        return f"network namespaces need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run the tests as root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: apt-get install iproute2)"
    probe = f"stn{os.getpid()}x{next(_counter)}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        veth = _ip(
            "-n", probe, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb", check=False
        )
        if veth.returncode != 0:
            return f"cannot make a veth pair in a namespace: {veth.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    listed = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def _pids_in(namespace: str) -> list[int]:
    done = _ip("netns", "pids", namespace, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def remove_namespaces(names: Sequence[str], grace: float = _STOP_GRACE_S) -> None:
    """Stops every process in ``names`` (SIGTERM, then SIGKILL after ``grace`` seconds) and
    deletes the namespaces; their interfaces go with them. Namespaces already gone are
    skipped."""
    present = set(_namespaces())
    names = [n for n in names if n in present]

    def members() -> set[int]:
        return {pid for name in names for pid in _pids_in(name)}

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        pids = members()
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while members() and time.monotonic() < deadline:
            time.sleep(_POLL_S)
    for name in names:
        _ip("netns", "del", name, check=False)


def sweep_stale() -> list[str]:
    """Removes the namespaces of networks whose owner process is gone (a test run killed before
    its reaper could act); returns their names."""
    stale = [n for n in _namespaces() if (m := _NAME.match(n)) and not _pid_alive(int(m.group(1)))]
    if stale:
        remove_namespaces(stale, grace=2.0)
    return stale


def _rate_text(bits_per_second: int) -> str:
    return f"{bits_per_second}bit"


@dataclass
class Host:
    """One host of a :class:`Network`: a namespace with ``lo`` and ``eth0`` at :attr:`address`."""

    name: str
    namespace: str
    address: str
    #: The bridge's end of this host's link, in the switch namespace.
    port: str
    switch: str
    #: The rate :meth:`limit` set, bits per second; None for an unlimited link.
    rate: int | None = None
    #: Whether :meth:`cut` cut the link (and :meth:`restore` has not restored it yet).
    is_cut: bool = False
    _children: list[subprocess.Popen[Any]] = field(default_factory=list, repr=False)

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` run in this host."""
        return ["ip", "netns", "exec", self.namespace, *command]

    def popen(self, command: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Starts ``command`` in this host (``subprocess.Popen``'s keywords); it is stopped
        with the network at the latest."""
        process: subprocess.Popen[Any] = subprocess.Popen(self.argv(command), **kwargs)
        self._children.append(process)
        return process

    def run(
        self, command: Sequence[str], timeout: float = 60.0, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Runs ``command`` in this host and returns what it printed; raises
        :class:`NetworkError` with its stderr when it fails."""
        done = subprocess.run(self.argv(command), capture_output=True, text=True, timeout=timeout, **kwargs)
        if done.returncode != 0:
            said = done.stderr.strip()[-2000:]
            raise NetworkError(f"{' '.join(command)} in {self.name} failed ({done.returncode}): {said}")
        return done

    def limit(self, bits_per_second: int) -> None:
        """Limits the host's link to ``bits_per_second`` each way (a token bucket on both ends
        of its veth pair). Packets wait up to 5 ms in its queue, then drop.

        The bucket holds a millisecond of traffic, at least 64 KiB: after a pause, that much
        passes at the veth's own speed, as a real link would not let it, so messages smaller
        than that may cross faster than the rate. A smaller bucket starves TCP here: with 16 KiB,
        one stream reached 0.16 Gbit/s on a 1 Gbit/s bucket (0.84 with 128 KiB), since the
        kernel hands the veth segments of up to 64 KiB."""
        burst = max(bits_per_second // 8 // 1000, 64 << 10)
        bucket = ["tbf", "rate", _rate_text(bits_per_second), "burst", str(burst), "latency", "5ms"]
        for namespace, device in ((self.namespace, "eth0"), (self.switch, self.port)):
            _tc(namespace, "qdisc", "replace", "dev", device, "root", *bucket)
        self.rate = bits_per_second

    def unlimit(self) -> None:
        """Removes the rate limit."""
        if self.rate is None:
            return
        for namespace, device in ((self.namespace, "eth0"), (self.switch, self.port)):
            _tc(namespace, "qdisc", "del", "dev", device, "root")
        self.rate = None

    def cut(self) -> None:
        """Cuts the host off: the switch's end of its link goes down. Nothing is told to
        either side; packets are lost until :meth:`restore`."""
        _ip("-n", self.switch, "link", "set", self.port, "down")
        self.is_cut = True

    def restore(self) -> None:
        """Brings a cut link back up; connections that have not given up carry on."""
        _ip("-n", self.switch, "link", "set", self.port, "up")
        self.is_cut = False

    def pids(self) -> list[int]:
        """Every process running in this host now."""
        return _pids_in(self.namespace)

    def processes(self, pattern: str) -> list[int]:
        """The processes in this host whose command line contains ``pattern``."""
        found = []
        for pid in self.pids():
            try:
                cmdline = (
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            if pattern in cmdline:
                found.append(pid)
        return found


class Network:
    """A bridge and the hosts on it; see the module notes. ``subnet`` is the first three
    octets of the private ``/24`` the hosts' addresses come from (``.1`` up)."""

    def __init__(self, subnet: str = "10.213.7") -> None:
        reason = unavailable()
        if reason is not None:
            raise NetworkError(reason)
        sweep_stale()
        self.subnet = subnet
        self.prefix = f"stn{os.getpid()}x{next(_counter)}-"
        self.switch = f"{self.prefix}sw"
        self.hosts: list[Host] = []
        self._closed = False
        # Started first, so that even a failure half-way through building is cleaned up.
        self._reaper: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, __file__, "--reap", self.prefix],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            # Its own session: a Ctrl-C on the test run must not stop it before it has cleaned up.
            start_new_session=True,
        )
        try:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def add_host(self, name: str) -> Host:
        """A new host on the bridge, at the subnet's next address."""
        if self._closed:
            raise NetworkError("the network is closed")
        if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", name) or any(h.name == name for h in self.hosts):
            raise NetworkError(f"host name {name!r}: 1-8 lower-case letters and digits, unique")
        index = len(self.hosts)
        if index >= 250:
            raise NetworkError("a network holds at most 250 hosts")
        host = Host(
            name=name,
            namespace=self.prefix + name,
            address=f"{self.subnet}.{index + 1}",
            port=f"p{index}",
            switch=self.switch,
        )
        _ip("netns", "add", host.namespace)
        self.hosts.append(host)
        _ip("link", "add", "name", "eth0", "netns", host.namespace, "type", "veth", "peer", "name", host.port,
            "netns", self.switch)  # fmt: skip
        _ip("-n", self.switch, "link", "set", host.port, "master", "br0")
        _ip("-n", self.switch, "link", "set", host.port, "up")
        _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.namespace, "link", "set", "eth0", "up")
        _ip("-n", host.namespace, "link", "set", "lo", "up")
        return host

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def close(self) -> None:
        """Stops every process in the network's hosts and removes the namespaces. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            for host in self.hosts:
                for child in host._children:
                    if child.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            child.terminate()
            remove_namespaces([h.namespace for h in self.hosts] + [self.switch])
            for host in self.hosts:
                for child in host._children:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=_STOP_GRACE_S)
        finally:
            reaper, self._reaper = self._reaper, None
            if reaper is not None:
                # End of its stdin: it finds nothing left and exits.
                with contextlib.suppress(OSError):
                    assert reaper.stdin is not None
                    reaper.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    reaper.wait(timeout=30)

    def __enter__(self) -> Network:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _reap(prefix: str, stdin: IO[bytes]) -> None:
    """Waits for the end of ``stdin`` (its owner closed it, or died), then removes what is
    left of the network ``prefix``."""
    with contextlib.suppress(OSError):
        while stdin.read(4096):
            pass
    remove_namespaces([n for n in _namespaces() if n.startswith(prefix)], grace=2.0)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--reap":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _reap(sys.argv[2], sys.stdin.buffer)
    elif len(sys.argv) == 2 and sys.argv[1] == "--sweep":
        print("\n".join(sweep_stale()))
    else:
        sys.exit("usage: netns.py --reap PREFIX | --sweep")
