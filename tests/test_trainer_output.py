"""A trainer's output on its way to the driver, and the driver's watcher, without Spark.

The output pump reads a real pipe (``os.pipe``) as it reads a trainer's stdout or stderr; the
heartbeat sends to a small client of our own that records each heartbeat's lines. The limits
checked are those of :mod:`sparktrain.cluster.task.output`: a line is cut, a heartbeat stays
well under gRPC's 4 MiB, the queue is bounded and says how many lines it dropped, and the
stderr tail of a failure report is bounded too. The watcher tests run the driver's real loop on
a Cluster whose rendezvous service and SparkContext are stand-ins.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import tracemalloc
from types import SimpleNamespace

import pytest

from sparktrain._native import Event
from sparktrain.cluster.driver import launcher
from sparktrain.cluster.driver.console import Console
from sparktrain.cluster.driver.launcher import Cluster, State
from sparktrain.cluster.settings import JobSettings
from sparktrain.cluster.task.output import (
    LINE_OVERHEAD_BYTES,
    MAX_HEARTBEAT_BYTES,
    MAX_LINE_BYTES,
    MAX_LINES_PER_HEARTBEAT,
    MAX_QUEUED_BYTES,
    MAX_STDERR_TAIL_BYTES,
    STDERR,
    STDOUT,
    LineSplitter,
    OutputQueue,
    cut_marker,
    line_size,
)
from sparktrain.cluster.task.run import _Heartbeat, _OutputPump
from sparktrain.errors import ClusterError, WorkerFailed

SECRET = "ab" * 32


def settings() -> JobSettings:
    return JobSettings(
        address="driver:1",
        secret=SECRET,
        num_workers=1,
        num_evaluators=0,
        function=b"",
        env={},
        default_fs="file:///",
        reservation_timeout=10.0,
        heartbeat_interval=0.01,
        heartbeat_timeout=5.0,
        max_result_bytes=1 << 20,
    )


class CountingSink:
    """An executor log that counts what it is given instead of keeping it."""

    def __init__(self) -> None:
        self.chars = 0
        self.last = ""

    def write(self, text: str) -> int:
        self.chars += len(text)
        self.last = (self.last + text)[-100:]
        return len(text)

    def flush(self) -> None:
        pass


class RecordingClient:
    """The task's control-plane client, as far as heartbeats go: records what each is sent;
    the first ``failures`` calls fail as an unreachable driver would."""

    def __init__(self, failures: int = 0) -> None:
        self.sent: list[list[tuple[int, str]]] = []
        self.failures = failures

    def heartbeat(self, rank: int, attempt: int, lines: list[tuple[int, str]], timeout: float) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("driver unreachable")
        self.sent.append(list(lines))

    def lines(self) -> list[tuple[int, str]]:
        return [line for beat in self.sent for line in beat]


def pump(data: list[bytes], stream: int = STDOUT, queue: OutputQueue | None = None):
    """Runs an output pump over a pipe that a writer thread fills with ``data`` and closes;
    returns the pump, its queue and its sink once the pump has read everything."""
    queue = OutputQueue() if queue is None else queue
    sink = CountingSink()
    read_fd, write_fd = os.pipe()

    def write() -> None:
        with os.fdopen(write_fd, "wb", buffering=0) as w:
            for piece in data:
                view = memoryview(piece)
                while view:
                    view = view[w.write(view) :]

    writer = threading.Thread(target=write)
    writer.start()
    with os.fdopen(read_fd, "rb") as source:
        p = _OutputPump(source, stream, sink, queue)
        p.thread.join(60)
        assert not p.thread.is_alive()
    writer.join()
    return p, queue, sink


def everything(queue: OutputQueue) -> list[tuple[int, str]]:
    return queue.take(1 << 30, 1 << 40)


# --- lines ------------------------------------------------------------------------------------


def test_a_5_mb_line_without_a_newline_is_cut_with_a_marker_in_bounded_memory():
    size = 5_000_000
    line = b"x" * size
    tracemalloc.start()
    try:
        _, queue, sink = pump([line])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The pump holds a read chunk and the forwarded head, never the line.
    assert peak < 1_000_000
    [(stream, text)] = everything(queue)
    assert stream == STDOUT
    assert text == "x" * MAX_LINE_BYTES + cut_marker(size - MAX_LINE_BYTES)
    assert "the executor log has the whole line" in text
    # The executor log got every byte, and the line end the trainer never wrote.
    assert sink.chars == size + 1
    assert sink.last.endswith("x\n")


def test_progress_bars_redrawn_with_carriage_returns_arrive_as_lines():
    bar = [b"\r 10%|#    |", b"\r 50%|###  |", b"\r100%|#####|\n", b"done\r\n", b"next\n"]
    _, queue, sink = pump([b"".join(bar)])
    texts = [" 10%|#    |", " 50%|###  |", "100%|#####|", "done", "next"]
    assert everything(queue) == [(STDOUT, text) for text in texts]
    assert sink.chars == len(b"".join(bar))


def test_line_ends_split_between_reads_make_no_empty_lines():
    lines: list[str] = []
    splitter = LineSplitter(lines.append, max_line_bytes=4)
    for chunk in [b"ab\r", b"\ncd", b"efgh\r", b"\r", b"\n", b"caf\xc3", b"\xa9\n", b"tail"]:
        splitter.feed(chunk)
    splitter.close()
    assert lines == ["ab", "cdef" + cut_marker(2), "", "caf" + cut_marker(2), "tail"]


# --- heartbeats -------------------------------------------------------------------------------


def test_each_heartbeat_stays_under_the_byte_cap_and_every_line_arrives_in_order():
    client = RecordingClient()
    heartbeat = _Heartbeat(client, 0, 0, settings())
    count = MAX_QUEUED_BYTES // line_size("y" * 8000)
    for i in range(count):
        heartbeat.queue.put(STDOUT, f"{i:07d}" + "y" * 7993)
    assert heartbeat.drain(time.monotonic() + 30) is None
    assert len(client.sent) > 1
    for lines in client.sent:
        assert len(lines) <= MAX_LINES_PER_HEARTBEAT
        assert sum(line_size(text) for _, text in lines) <= MAX_HEARTBEAT_BYTES
        assert sum(len(text.encode()) for _, text in lines) < 4 << 20
    assert [int(text[:7]) for _, text in client.lines()] == list(range(count))
    assert not heartbeat.queue.pending()


def test_draining_at_exit_outlasts_a_driver_that_missed_some_heartbeats():
    client = RecordingClient(failures=3)
    heartbeat = _Heartbeat(client, 0, 0, settings())
    for i in range(10):
        heartbeat.queue.put(STDERR, f"line {i}")
    assert heartbeat.drain(time.monotonic() + 30) is None
    assert client.lines() == [(STDERR, f"line {i}") for i in range(10)]


def test_a_flood_beyond_the_queue_bound_says_how_many_lines_were_dropped():
    client = RecordingClient()
    heartbeat = _Heartbeat(client, 0, 0, settings())
    total = 1500
    lines = [f"{i:07d}".encode() + b"z" * 7993 + b"\n" for i in range(total)]
    pump(lines, STDOUT, heartbeat.queue)
    heartbeat.drain(time.monotonic() + 30)

    received = client.lines()
    kept = MAX_QUEUED_BYTES // line_size("z" * 8000)
    assert [int(text[:7]) for _, text in received[:-1]] == list(range(kept))
    assert received[-1] == (
        STDOUT,
        f"sparktrain: {total - kept} lines of stdout were dropped here because the driver could "
        "not keep up; the executor's stdout log has every line",
    )


def test_the_dropped_notice_takes_the_place_of_the_lines_it_stands_for():
    queue = OutputQueue(max_bytes=3 * line_size("a"))
    for text in "abcde":
        queue.put(STDERR, text)
    assert queue.take(2, 1 << 20) == [(STDERR, "a"), (STDERR, "b")]
    queue.put(STDOUT, "f")
    taken = everything(queue)
    assert [text for _, text in taken][:1] == ["c"]
    assert taken[1][1].startswith("sparktrain: 2 lines of stderr were dropped")
    assert taken[2] == (STDOUT, "f")


# --- the failure report -----------------------------------------------------------------------


def test_the_stderr_tail_keeps_the_last_bytes_within_its_cap():
    lines = [f"{i:04d} ".encode() + b"e" * 7000 + b"\n" for i in range(100)]
    p, _, _ = pump(lines, STDERR)
    tail = p.tail()
    assert len(tail.encode()) <= MAX_STDERR_TAIL_BYTES
    assert tail.startswith("[... the beginning was cut")
    assert tail.endswith("0099 " + "e" * 7000)

    short, _, _ = pump([b"Traceback (most recent call last):\n", b"ValueError: bad\n"], STDERR)
    assert short.tail() == "Traceback (most recent call last):\nValueError: bad"


def test_the_settings_repr_hides_the_job_secret():
    shown = repr(settings())
    assert SECRET not in shown
    assert "secret" not in shown
    assert "driver:1" in shown


# --- the driver's watcher ---------------------------------------------------------------------


class FakeRendezvous:
    """The driver's rendezvous service: hands out ``batches`` of events, then ends the stage."""

    def __init__(self, cluster: Cluster, batches: list[list[object]], fail: bool = False) -> None:
        self.cluster, self.batches, self.fail = cluster, batches, fail
        self.aborted: list[str] = []

    def poll(self, timeout: float) -> tuple[int, list[object]]:
        if self.fail:
            raise RuntimeError("the rendezvous service is gone")
        if self.batches:
            return 0, self.batches.pop(0)
        self.cluster._stage_done.set()
        return 0, []

    def missing(self) -> list[int]:
        return []

    def abort(self, reason: str) -> None:
        self.aborted.append(reason)


class FakeSparkContext:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancelJobGroup(self, name: str) -> None:
        self.cancelled.append(name)


def watched_cluster(batches: list[list[object]], fail: bool = False) -> Cluster:
    """A running two-task Cluster (generation 0) as far as the watcher sees it, without Spark."""
    cluster = object.__new__(Cluster)
    cluster.name = "job-1"
    cluster._settings = SimpleNamespace(generation=0)
    cluster._cause, cluster._cause_at, cluster._restarts = None, 0.0, []
    cluster._num_tasks = 2
    cluster._roles = ["chief:0", "worker:0"]
    cluster._sc = FakeSparkContext()
    cluster._server = FakeRendezvous(cluster, batches, fail)
    cluster._console = Console(cluster._roles, enabled=True)
    cluster._lock = threading.Lock()
    cluster._state = State.RUNNING
    cluster._deadline = time.monotonic() + 60
    cluster._failure = None
    cluster._hosts = {0: "h0", 1: "h1"}
    cluster._exits, cluster._exit_times, cluster._metrics = {}, {}, {}
    cluster._finished = threading.Event()
    cluster._stage_done = threading.Event()
    cluster._watch_errors = set()
    return cluster


def test_the_watcher_logs_an_error_once_and_goes_on_watching(caplog):
    handled: list[object] = []

    def on_event(event: object) -> None:
        if event == "bad" and "bad" not in handled:
            handled.append(event)
            raise KeyError("no such task")
        handled.append(event)

    cluster = watched_cluster([["a", "bad", "b"], ["c", "bad"]])
    cluster._on_event = on_event
    with caplog.at_level(logging.DEBUG, logger=launcher.__name__):
        cluster._watch_events()
    assert handled == ["a", "bad", "b", "c", "bad"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "the watcher of job-1 failed; it goes on watching" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert "KeyError: 'no such task'" in caplog.text


def test_a_broken_console_does_not_stop_failure_detection(caplog, monkeypatch):
    class BrokenPipe:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", BrokenPipe())
    events = [Event.Log(0, "stdout", "hello"), Event.Log(1, "stdout", "again")]
    cluster = watched_cluster([events, [Event.Exited(1, 2, "boom")]])
    with caplog.at_level(logging.ERROR, logger=launcher.__name__):
        cluster._watch_events()
    # The failure is recorded and the generation's stage stopped; the stage's thread then
    # restarts the job or fails it.
    assert isinstance(cluster._cause, WorkerFailed)
    assert cluster._cause.task_index == 1
    assert cluster._sc.cancelled == ["job-1-g0"]
    assert len([r for r in caplog.records if "BrokenPipeError" in r.exc_text]) == 1


def test_a_rendezvous_service_that_cannot_be_read_fails_the_job(caplog, monkeypatch):
    monkeypatch.setattr(launcher, "WATCH_POLL_SECONDS", 0.001)
    cluster = watched_cluster([], fail=True)
    with caplog.at_level(logging.ERROR, logger=launcher.__name__):
        cluster._watch_events()
    assert isinstance(cluster._cause, ClusterError)
    assert f"failed {launcher.MAX_WATCH_FAILURES} times in a row" in str(cluster._cause)
    assert cluster._server.aborted == [str(cluster._cause)]
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1


def test_the_trainers_are_stopped_even_when_cancelling_the_stage_fails(caplog):
    cluster = watched_cluster([])

    def cannot_cancel(name: str) -> None:
        raise RuntimeError("py4j gateway is gone")

    cluster._sc.cancelJobGroup = cannot_cancel
    with caplog.at_level(logging.ERROR, logger=launcher.__name__):
        cluster._fail(ClusterError("trainer 1 failed"))
    assert str(cluster._cause) == "trainer 1 failed"
    assert cluster._server.aborted == ["trainer 1 failed"]
    assert "could not cancel the Spark stage of job-1" in caplog.text
    # Only the first failure of a generation counts.
    cluster._fail(ClusterError("trainer 0 failed"))
    assert str(cluster._cause) == "trainer 1 failed"


# --- the plain control plane ------------------------------------------------------------------


def test_a_plain_control_plane_on_a_network_address_is_warned_about_once(caplog, monkeypatch):
    monkeypatch.setattr(launcher, "_warned_plain", set())
    with caplog.at_level(logging.WARNING, logger=launcher.__name__):
        launcher.warn_if_plain("127.0.0.1", tls=False)
        launcher.warn_if_plain("10.1.2.3", tls=True)
        assert caplog.records == []
        launcher.warn_if_plain("10.1.2.3", tls=False)
        launcher.warn_if_plain("10.1.2.3", tls=False)
    [record] = caplog.records
    assert "10.1.2.3 without TLS" in record.getMessage()
    assert "spark.network.crypto.enabled=true" in record.getMessage()


def test_the_line_overhead_is_what_a_heartbeat_line_costs_beyond_its_text():
    assert line_size("é") == 2 + LINE_OVERHEAD_BYTES


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_splitting_does_not_depend_on_how_the_stream_is_read(chunk):
    data = b"one\r\ntwo\rthree\n\r\rfour" + b"w" * 20 + b"\nfive"
    lines: list[str] = []
    splitter = LineSplitter(lines.append, max_line_bytes=10)
    for i in range(0, len(data), chunk):
        splitter.feed(data[i : i + chunk])
    splitter.close()
    assert lines == ["one", "two", "three", "fourwwwwww" + cut_marker(14), "five"]
