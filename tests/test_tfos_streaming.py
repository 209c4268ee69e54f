"""Streams through the TFoS shim on real Spark, without TensorFlow: a Spark Streaming job
(``textFileStream``) fed to the nodes with ``cluster.train(dstream)`` until TFoS's
``stop_streaming.py`` or a node's ``terminate()`` stops it, every row read once; and a
Structured Streaming query over a file source, fed with ``cluster.stream_feeder()``, that
fails and restarts (the query alone, then with a new cluster restored from the chief's state)
and still trains each micro-batch exactly once: the nodes' model counts every row's uses.

Files reach the stream folders as TFoS's README has them arrive: written elsewhere, then
moved in, so that no reader sees half a file. Functions that run on executors are defined
inside the tests: executors cannot import this module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sparktrain.errors import InvalidArgumentError, SlotsUnavailable
from sparktrain.tfos import TFCluster, reservation

STOP_STREAMING = Path(__file__).parent / "tfos_examples" / "stop_streaming.py"


def _drop_file(folder: Path, name: str, lines: list[str], mtime: float | None = None) -> None:
    """Writes ``lines`` beside ``folder`` and moves the file in."""
    staged = folder.parent / f".{name}"
    staged.write_text("".join(f"{line}\n" for line in lines))
    if mtime is not None:
        os.utime(staged, (mtime, mtime))
    os.rename(staged, folder / name)


def _wait_for(what: str, done, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what} within {timeout:g} s"
        time.sleep(0.25)


def _seen(folder: Path) -> list[int]:
    ids: list[int] = []
    for path in folder.glob("seen-*.json"):
        ids.extend(json.loads(path.read_text()))
    return ids


def _dstream_reader():
    """A ``map_fun`` that reads its node's rows one at a time and writes the ids it saw to
    ``<out>/seen-<node>.json`` after each; with ``args["terminate_after"]`` the chief ends its
    feed after that many rows."""

    def map_fun(args, ctx):
        import json
        import os

        from sparktrain.tfos import TFNode

        feed = TFNode.DataFeed(ctx.mgr)
        seen = []
        path = os.path.join(args["out"], f"seen-{ctx.executor_id}.json")
        while not feed.should_stop():
            batch = feed.next_batch(1)
            seen.extend(row[0] for row in batch)
            with open(path + ".tmp", "w") as f:
                json.dump(seen, f)
            os.replace(path + ".tmp", path)
            if ctx.job_name == "chief" and len(seen) >= args.get("terminate_after", float("inf")):
                feed.terminate()

    return map_fun


def test_a_dstream_feeds_the_nodes_until_stop_streaming_stops_it(spark, tmp_path):
    streaming = pytest.importorskip("pyspark.streaming")
    sc = spark.sparkContext
    folder, out = tmp_path / "stream", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    ssc = streaming.StreamingContext(sc, 1)
    rows = ssc.textFileStream(str(folder)).map(lambda line: tuple(int(v) for v in line.split(",")))
    cluster = TFCluster.run(
        sc, _dstream_reader(), {"out": str(out)}, 2, input_mode=TFCluster.InputMode.SPARK, master_node="chief"
    )
    cluster.train(rows, feed_timeout=120)
    ssc.start()
    try:
        for k in range(3):
            _drop_file(folder, f"part-{k}", [f"{i},{2 * i}" for i in range(k * 40, k * 40 + 40)])
            time.sleep(1.5)
        _wait_for("the nodes did not read the 120 rows", lambda: len(_seen(out)) >= 120)
        # TFoS's stop utility, as its README runs it: the reservation server's host and port.
        host, port = cluster.cluster_meta["server_addr"]
        stop = subprocess.run(
            [sys.executable, str(STOP_STREAMING), host, str(port)], capture_output=True, text=True, timeout=60
        )
        assert stop.returncode == 0, stop.stderr
        started = time.monotonic()
        cluster.shutdown(ssc, timeout=180)
        assert time.monotonic() - started < 120
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    assert sorted(_seen(out)) == list(range(120))  # each row once, over both nodes
    addresses = [r["addr"] for r in cluster.cluster_info]
    assert len(addresses) == 2
    assert all(a is not None for a in addresses)


def test_a_node_that_terminates_its_feed_stops_the_dstream(spark, tmp_path):
    streaming = pytest.importorskip("pyspark.streaming")
    sc = spark.sparkContext
    folder, out = tmp_path / "stream", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    ssc = streaming.StreamingContext(sc, 1)
    rows = ssc.textFileStream(str(folder)).map(lambda line: (int(line),))
    args = {"out": str(out), "terminate_after": 10}
    cluster = TFCluster.run(
        sc, _dstream_reader(), args, 1, input_mode=TFCluster.InputMode.SPARK, master_node="chief"
    )
    cluster.train(rows, feed_timeout=120)
    ssc.start()
    try:
        _drop_file(folder, "part-0", [str(i) for i in range(30)])
        # Nothing asks it to stop: the chief's terminate() does, and shutdown returns.
        cluster.shutdown(ssc, timeout=180)
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    assert cluster.server.done
    assert sorted(_seen(out)) == list(range(10))


def test_a_dstreams_micro_batch_goes_again_to_nodes_restarted_after_a_failure(spark, tmp_path):
    streaming = pytest.importorskip("pyspark.streaming")

    def map_fun(args, ctx):
        import json
        import os

        from sparktrain.tfos import TFNode

        feed = TFNode.DataFeed(ctx.mgr)
        seen = []
        path = os.path.join(args["out"], f"seen-{ctx.executor_id}-g{ctx.trainer.generation}.json")
        crashed = os.path.join(args["out"], "crashed")
        while not feed.should_stop():
            seen.extend(row[0] for row in feed.next_batch(1))
            with open(path + ".tmp", "w") as f:
                json.dump(seen, f)
            os.replace(path + ".tmp", path)
            if ctx.executor_id == 1 and len(seen) >= 5 and not os.path.exists(crashed):
                open(crashed, "w").close()
                raise RuntimeError("node 1 fails mid-batch")

    sc = spark.sparkContext
    folder, out = tmp_path / "stream", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    ssc = streaming.StreamingContext(sc, 1)
    rows = ssc.queueStream([sc.parallelize([(i,) for i in range(40)], 2)], oneAtATime=True)
    cluster = TFCluster.run(
        sc,
        map_fun,
        {"out": str(out)},
        2,
        input_mode=TFCluster.InputMode.SPARK,
        master_node="chief",
        max_restarts=1,
    )
    cluster.train(rows, feed_timeout=120)
    ssc.start()
    try:
        _wait_for(
            "the restarted nodes did not read the micro-batch again",
            lambda: len(_seen_in(out.glob("seen-*-g1.json"))) >= 40,
        )
        cluster.server.done = True  # what stop_streaming.py asks for
        cluster.shutdown(ssc, timeout=180)
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
    assert (out / "crashed").exists()
    # The micro-batch the failed nodes were reading reached the new ones whole.
    assert sorted(_seen_in(out.glob("seen-*-g1.json"))) == list(range(40))


def _seen_in(paths) -> list[int]:
    return [i for path in list(paths) for i in json.loads(Path(path).read_text())]


def test_a_stream_needs_task_slots_beside_the_nodes(spark):
    before = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    cluster = TFCluster.run(
        spark.sparkContext, lambda a, c: None, None, 4, input_mode=TFCluster.InputMode.SPARK
    )
    with pytest.raises(SlotsUnavailable, match="give it at least 5"):
        cluster.stream_feeder()
    with pytest.raises(InvalidArgumentError, match="feed_timeout=0"):
        cluster.stream_feeder(feed_timeout=0)
    cluster.shutdown()
    assert set(spark.sparkContext.statusTracker().getJobIdsForGroup()) == before


def _counting_trainer():
    """A ``map_fun`` whose model counts how many times it trained on each row id: each node
    counts its share of a micro-batch, the counts are summed over the nodes (``allreduce``),
    and the chief commits them with the micro-batch. The chief writes the model it ends with
    to ``<out>/counts-<name>.json``. With ``args["fail_in"]`` the chief of the first
    generation dies before it commits that micro-batch."""

    def map_fun(args, ctx):
        import json
        import os

        import numpy as np

        feed = ctx.get_stream_feed(state_dir=args["state"])
        counts = feed.state["counts"] if feed.state else np.zeros(args["rows"], dtype=np.int64)
        resumed_after = feed.last_batch_id
        trained = []
        for batch in feed:
            delta = np.zeros_like(counts)
            for row_id in batch.table.column("id").to_pylist():
                delta[row_id] += 1
            counts += ctx.trainer.allreduce(delta, op="sum")
            if (
                batch.batch_id == args.get("fail_in")
                and ctx.trainer.generation == 0
                and ctx.job_name == "chief"
            ):
                raise RuntimeError(f"the chief dies while it trains micro-batch {batch.batch_id}")
            trained.append(batch.batch_id)
            feed.commit({"counts": counts})
        if ctx.job_name == "chief":
            result = {"counts": counts.tolist(), "trained": trained, "resumed_after": resumed_after}
            with open(os.path.join(args["out"], f"counts-{args['name']}.json"), "w") as f:
                json.dump(result, f)

    return map_fun


def test_structured_streaming_trains_each_micro_batch_once_across_query_and_cluster_restarts(spark, tmp_path):
    source, out = tmp_path / "source", tmp_path / "out"
    source.mkdir()
    out.mkdir()
    checkpoint, state = str(tmp_path / "checkpoint"), str(tmp_path / "state")
    files, per_file = 4, 25
    now = time.time() - 100
    for k in range(3):  # the fourth arrives later; older files first, one per micro-batch
        lines = [json.dumps({"id": i, "x": i / 10}) for i in range(k * per_file, (k + 1) * per_file)]
        _drop_file(source, f"part-{k}.json", lines, mtime=now + k)
    stream = spark.readStream.schema("id long, x double").option("maxFilesPerTrigger", 1).json(str(source))
    calls: list[int] = []

    def start(cluster, name, crash_after):
        feeder = cluster.stream_feeder(feed_timeout=300)

        def for_each_batch(df, batch_id):
            calls.append(batch_id)
            feeder(df, batch_id)
            if batch_id == crash_after:
                raise RuntimeError(f"{name} dies after micro-batch {batch_id} was trained")

        query = (
            stream.writeStream.foreachBatch(for_each_batch).option("checkpointLocation", checkpoint).start()
        )
        return feeder, query

    def run(name):
        args = {"state": state, "out": str(out), "rows": files * per_file, "name": name}
        return TFCluster.run(
            spark.sparkContext,
            _counting_trainer(),
            args,
            2,
            input_mode=TFCluster.InputMode.SPARK,
            master_node="chief",
        )

    # The first query dies after micro-batch 1 was trained and committed by the nodes, before
    # Spark recorded it; the second, on the same nodes, replays it, then dies after 2.
    first = run("first")
    feeder, query = start(first, "query 1", crash_after=1)
    with pytest.raises(Exception, match="query 1 dies after micro-batch 1"):
        query.awaitTermination(300)
    assert (feeder.trained, feeder.skipped) == ([0, 1], [])
    feeder, query = start(first, "query 2", crash_after=2)
    with pytest.raises(Exception, match="query 2 dies after micro-batch 2"):
        query.awaitTermination(300)
    assert (feeder.trained, feeder.skipped) == ([2], [1])
    first.shutdown(timeout=180)

    # A new cluster resumes from the chief's state; its query replays micro-batch 2 (skipped)
    # and trains the fourth file, and a stop request ends it.
    _drop_file(
        source, "part-3.json", [json.dumps({"id": i, "x": 0.0}) for i in range(75, 100)], mtime=now + 3
    )
    second = run("second")
    feeder, query = start(second, "query 3", crash_after=None)
    try:
        query.processAllAvailable()
        client = reservation.Client(second.cluster_meta["server_addr"])
        client.request_stop()
        client.close()
        second.shutdown(query, timeout=180)
    finally:
        query.stop()
    assert (feeder.trained, feeder.skipped) == ([3], [2])
    assert calls == [0, 1, 1, 2, 2, 3]  # Spark replayed 1 and 2 once each

    first_model = json.loads((out / "counts-first.json").read_text())
    assert first_model["resumed_after"] == -1
    assert first_model["trained"] == [0, 1, 2]
    assert first_model["counts"] == [1] * 75 + [0] * 25
    second_model = json.loads((out / "counts-second.json").read_text())
    assert second_model["resumed_after"] == 2
    assert second_model["trained"] == [3]
    np.testing.assert_array_equal(second_model["counts"], np.ones(100))  # every row used once


def test_structured_streaming_sends_a_micro_batch_again_to_nodes_restarted_after_a_failure(spark, tmp_path):
    source, out = tmp_path / "source", tmp_path / "out"
    source.mkdir()
    out.mkdir()
    now = time.time() - 100
    for k in range(3):
        lines = [json.dumps({"id": i, "x": 0.0}) for i in range(k * 10, (k + 1) * 10)]
        _drop_file(source, f"part-{k}.json", lines, mtime=now + k)
    args = {"state": str(tmp_path / "state"), "out": str(out), "rows": 30, "name": "restarted", "fail_in": 1}
    cluster = TFCluster.run(
        spark.sparkContext,
        _counting_trainer(),
        args,
        2,
        input_mode=TFCluster.InputMode.SPARK,
        master_node="chief",
        restart_backoff=0.5,
    )
    feeder = cluster.stream_feeder(feed_timeout=300)
    stream = spark.readStream.schema("id long, x double").option("maxFilesPerTrigger", 1).json(str(source))
    query = (
        stream.writeStream.foreachBatch(feeder).option("checkpointLocation", str(tmp_path / "ckpt")).start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    cluster.shutdown(timeout=180)
    # The chief died in micro-batch 1; the nodes restarted from the state of micro-batch 0 and
    # the feeder sent micro-batch 1 again: the query itself never failed.
    assert feeder.trained == [0, 1, 2]
    model = json.loads((out / "counts-restarted.json").read_text())
    assert model["resumed_after"] == 0
    assert model["trained"] == [1, 2]
    assert model["counts"] == [1] * 30
