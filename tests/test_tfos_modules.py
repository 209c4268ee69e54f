"""TFoS's helper modules in ``sparktrain.tfos``, without Spark: ``TFManager`` in local and
remote mode with ``TFNode.DataFeed`` over it (TFoS's own ``test_datafeed``, and the
``EndPartition`` marker), the reservation server and client (JSON messages, signed node
reservations, ``request_stop``), ``util`` (the executor id file, the host's address, a file
on a search path, ``single_node_env`` on this host) and ``gpu_info`` (``nvidia-smi``'s
listing parsed, GPUs placed per worker, the answers of a host without ``nvidia-smi``).

The Spark side of these modules (nodes registering with the reservation server, the executor
id file in a node) is in tests/test_tfos_shim.py; TFoS's example jobs in
tests/test_tfos_examples.py.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
import struct
import subprocess
import sys
import time
from multiprocessing import AuthenticationError

import pytest

from sparktrain.errors import ClusterError, InvalidArgumentError, PathNotFoundError, StorageError
from sparktrain.tfos import TFManager, TFNode, _feed, gpu_info, marker, reservation, util

# --- TFManager and DataFeed ------------------------------------------------------------------


def test_datafeed_reads_a_local_tfmanager_as_tfos_does():
    # TFoS's tests/test_TFNode.py::test_datafeed, with the import changed.
    mgr = TFManager.start(b"abc", ["input", "output"], "local")
    try:
        q = mgr.get_queue("input")
        for i in range(10):
            q.put(i)
        q.put(None)  # end-of-feed marker

        feed = TFNode.DataFeed(mgr)
        assert not feed.done_feeding
        batch = feed.next_batch(2)
        assert (len(batch), sum(batch)) == (2, 1)
        assert not feed.done_feeding
        batch = feed.next_batch(4)
        assert (len(batch), sum(batch)) == (4, 14)
        assert not feed.done_feeding
        batch = feed.next_batch(10)  # more than is left
        assert (len(batch), sum(batch)) == (4, 30)
        assert feed.should_stop()
    finally:
        mgr.shutdown()


def test_end_partition_ends_an_inference_batch_and_results_reach_the_output_queue():
    mgr = TFManager.start(b"key", ["input", "output"])
    try:
        q = mgr.get_queue("input")
        for item in [1, 2, marker.EndPartition(), 3, 4, 5, marker.EndPartition(), None]:
            q.put(item)
        inference = TFNode.DataFeed(mgr, train_mode=False)
        first = inference.next_batch(10)
        assert first == [1, 2]  # the partition's end returns what it has
        inference.batch_results([x * x for x in first])
        assert inference.next_batch(10) == [3, 4, 5]
        assert inference.next_batch(10) == []
        assert inference.should_stop()
        out = mgr.get_queue("output")
        assert [out.get(timeout=5), out.get(timeout=5)] == [1, 4]
    finally:
        mgr.shutdown()


def test_remote_tfmanager_is_reached_by_address_and_key_and_datafeed_terminates_it(monkeypatch):
    monkeypatch.setattr(_feed, "DRAIN_SECONDS", 0.5)
    mgr = TFManager.start(b"secret", ["input", "output"], "remote")
    try:
        host, port = mgr.address
        assert host == util.get_ip_address()
        assert port > 0
        mgr.set("state", "running")
        # Another process connects as TFoS's feeding tasks do, by address and key.
        script = (
            "import sys\n"
            "from sparktrain.tfos import TFManager\n"
            "m = TFManager.connect((sys.argv[1], int(sys.argv[2])), b'secret')\n"
            "q = m.get_queue('input')\n"
            "for i in range(5): q.put(i)\n"
            "print(m.get('state'))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, host, str(port)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        # A value comes back as a proxy whose str() is the value's repr, as in TFoS.
        assert done.stdout.strip() == "'running'"
        feed = TFNode.DataFeed(mgr)
        assert feed.next_batch(2) == [0, 1]
        started = time.monotonic()
        feed.terminate()  # drops the rest, waiting a moment for stragglers
        assert time.monotonic() - started >= _feed.DRAIN_SECONDS
        assert str(mgr.get("state")) == "'terminating'"
        assert mgr.get_queue("input").empty()
        assert feed.should_stop()
        with pytest.raises(AuthenticationError):
            TFManager.connect((host, port), b"wrong")
    finally:
        mgr.shutdown()


def test_tfmanager_refuses_a_missing_key_and_an_unknown_mode():
    with pytest.raises(InvalidArgumentError, match="authkey"):
        TFManager.start(b"", ["input"])
    with pytest.raises(InvalidArgumentError, match="mode='cluster'"):
        TFManager.start(b"k", ["input"], "cluster")


# --- reservation -----------------------------------------------------------------------------


@pytest.fixture
def server():
    s = reservation.Server(2, host="127.0.0.1", key=b"k" * 32)
    addr = s.start()
    yield s, addr
    s.stop()


def test_reservations_are_registered_listed_and_awaited(server):
    s, addr = server
    client = reservation.Client(addr)
    assert client.register({"executor_id": 0, "host": "h0"}) == "OK"
    assert not s.reservations.done()
    assert s.reservations.remaining() == 1
    other = reservation.Client(addr)
    other.register({"executor_id": 1, "host": "h1"})
    assert other.await_reservations(timeout=5) == [
        {"executor_id": 0, "host": "h0"},
        {"executor_id": 1, "host": "h1"},
    ]
    # A node that registers again (a restarted node) replaces its reservation.
    client.register({"executor_id": 1, "host": "h1-again"})
    assert [r["host"] for r in client.get_reservations()] == ["h0", "h1-again"]
    assert s.await_reservations(timeout=1) == client.get_reservations()
    assert client.request_stop() == "OK"
    assert s.done
    client.close()
    other.close()


def test_stop_streaming_utility_stops_the_server(server):
    # TFoS's examples/utils/stop_streaming.py, with the import changed, run as a script.
    s, (host, port) = server
    script = os.path.join(os.path.dirname(__file__), "tfos_examples", "stop_streaming.py")
    done = subprocess.run(
        [sys.executable, script, host, str(port)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert s.done


def test_signed_reservations_cannot_be_forged_or_replaced_unsigned(server):
    s, addr = server
    client = reservation.Client(addr)
    node = {"executor_id": 0, "host": "10.0.0.1", "addr": ["10.0.0.1", 4000]}
    client.register_signed(node, b"k" * 32)
    assert s.signed() == [node]
    with pytest.raises(ClusterError, match="refused this node's key"):
        client.register_signed({"executor_id": 1, "addr": ["6.6.6.6", 1]}, b"x" * 32)
    # Unsigned, it may not take a signed node's place.
    assert client.register({"executor_id": 0, "addr": ["6.6.6.6", 1]}) == "ERR"
    assert s.signed() == [node]
    assert client.get_reservations() == [node]
    client.close()


def test_the_server_reads_json_and_never_runs_a_pickle(server, tmp_path):
    _s, addr = server
    marker_file = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker_file), "w"))

    data = pickle.dumps({"type": "QINFO", "data": Payload()})
    with socket.create_connection(addr, timeout=5) as sock:
        sock.sendall(struct.pack(">I", len(data)) + data)
        sock.settimeout(5)
        assert sock.recv(16) == b""  # not JSON: the server hangs up
    assert not marker_file.exists()
    # And still serves others.
    client = reservation.Client(addr)
    assert client.get_reservations() == []
    client.close()


def test_server_ports_come_from_tfos_server_port(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        first = probe.getsockname()[1]
    monkeypatch.setenv(reservation.TFOS_SERVER_PORT, f"{first}-{first + 1}")
    a, b, c = (reservation.Server(1, host="127.0.0.1") for _ in range(3))
    assert a.get_server_ports() == [first, first + 1]
    try:
        sa, sb = a.start_listening_socket(), b.start_listening_socket()
        assert {sa.getsockname()[1], sb.getsockname()[1]} == {first, first + 1}
        with pytest.raises(ClusterError, match="could not listen"):
            c.start_listening_socket()
    finally:
        sa.close()
        sb.close()
    monkeypatch.setenv(reservation.TFOS_SERVER_PORT, "99-x")
    with pytest.raises(InvalidArgumentError, match="TFOS_SERVER_PORT"):
        a.get_server_ports()


def test_a_client_names_a_server_that_does_not_answer():
    with socket.create_server(("127.0.0.1", 0)) as silent:
        client = reservation.Client(silent.getsockname(), timeout=0.5)
        with pytest.raises(ClusterError, match=r"did not answer within 0.5 s"):
            client.get_reservations()
        client.close()


# --- util ------------------------------------------------------------------------------------


def test_executor_id_file_round_trips_and_its_absence_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PathNotFoundError, match="executor_id does not exist"):
        util.read_executor_id()
    util.write_executor_id(3)
    assert (tmp_path / "executor_id").read_text() == "3"
    assert util.read_executor_id() == 3


def test_ip_address_and_find_in_path(tmp_path):
    ip = util.get_ip_address()
    with socket.socket() as s:
        s.bind((ip, 0))  # an address of this host
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "tool").write_text("")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tool").mkdir()  # a folder is not a match
    path = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])
    assert util.find_in_path(path, "tool") == str(tmp_path / "b" / "tool")
    assert util.find_in_path(path, "missing") is False


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has nvidia-smi")
def test_single_node_env_without_gpus_hides_them_and_reports_hadoop_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("HADOOP_PREFIX", raising=False)
    util.single_node_env()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv("HADOOP_PREFIX", str(tmp_path))
    monkeypatch.delenv("TFOS_CLASSPATH_UPDATED", raising=False)
    with pytest.raises(StorageError, match=r"bin/hadoop classpath --glob failed"):
        util.single_node_env()
    with pytest.raises(InvalidArgumentError, match="worker_index=2"):
        util.single_node_env(1, 2, ["h:1", "h:2"])


# --- gpu_info --------------------------------------------------------------------------------

#: ``nvidia-smi --list-gpus`` of a host with four GPUs (names of several words).
LISTING = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d3c2a10-0000-0000-0000-000000000000)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-6e4d3b21-0000-0000-0000-000000000001)
GPU 2: Tesla K80 (UUID: GPU-7f5e4c32-0000-0000-0000-000000000002)
GPU 3: Tesla K80 (UUID: GPU-8a6f5d43-0000-0000-0000-000000000003)
"""


def test_gpu_listing_is_parsed_and_workers_get_their_own_gpus():
    gpus = gpu_info.parse_gpu_list(LISTING)
    assert [i for i, _ in gpus] == ["0", "1", "2", "3"]
    assert gpus[2][1] == "GPU-7f5e4c32-0000-0000-0000-000000000002"
    free = ["0", "1", "3"]
    assert [gpu_info.place(free, 1, w) for w in range(4)] == [["0"], ["1"], ["3"], ["0"]]
    # Two GPUs each: every worker gets two, wrapping around.
    assert [gpu_info.place(free, 2, w) for w in range(3)] == [["0", "1"], ["3", "0"], ["1", "3"]]
    picked = gpu_info.place(free, 2, -1)
    assert len(set(picked)) == 2
    assert set(picked) <= set(free)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has nvidia-smi")
def test_a_host_without_nvidia_smi_has_no_gpu_to_give():
    assert gpu_info.is_gpu_available() is False
    with pytest.raises(ClusterError, match="nvidia-smi is not installed"):
        gpu_info.get_gpus(1)
    with pytest.raises(InvalidArgumentError, match="format='csv'"):
        gpu_info.get_gpus(1, format="csv")
    with pytest.raises(InvalidArgumentError, match="num_gpu=-1"):
        gpu_info.get_gpus(-1)


def test_json_of_a_reservation_is_what_travels():
    # The reservation's signature covers its canonical JSON: key order does not matter.
    a = reservation.sign(b"k", {"b": 1, "a": [1, 2]})
    assert a == reservation.sign(b"k", json.loads('{"a": [1, 2], "b": 1}'))
    assert a != reservation.sign(b"other", {"b": 1, "a": [1, 2]})
