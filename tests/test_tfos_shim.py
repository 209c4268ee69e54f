"""The TensorFlowOnSpark shim on real Spark, without TensorFlow: a TENSORFLOW-mode job sees
TFoS's ctx and TF_CONFIG, parameter servers and an evaluator included; background nodes stop
when training ends; a SPARK-mode job trains over an RDD for several epochs, and inference
returns a lazy RDD whose outputs match the inputs one to one, partition by partition, in
order; dfutil round-trips a DataFrame through TFRecords; bad arguments fail on the driver.

Functions that run on executors are defined inside the tests: executors cannot import this
module. (tests/test_tfos_examples.py runs TFoS's example jobs with TensorFlow.)
"""

from __future__ import annotations

import json
import time

import pytest

from sparktrain.errors import InvalidArgumentError, PathExistsError, SlotsUnavailable, WorkerFailed
from sparktrain.tfos import TFCluster, dfutil, reservation


def _facts_fun():
    """A ``map_fun`` that writes what its node sees to ``<out>/<worker_num>.json`` and blocks
    forever on the nodes named in ``args["block"]`` (as ``server.join()`` does). Nested, so
    that it is pickled by value: executors cannot import this module."""

    def map_fun(args, ctx):
        import json
        import os
        import time

        from sparktrain.tfos import TFNode

        facts = {
            "job_name": ctx.job_name,
            "task_index": ctx.task_index,
            "num_workers": ctx.num_workers,
            "worker_num": ctx.worker_num,
            "executor_id": ctx.executor_id,
            "cluster_spec": ctx.cluster_spec,
            "defaultFS": ctx.defaultFS,
            "tf_config": json.loads(os.environ["TF_CONFIG"]),
            "hdfs_path": TFNode.hdfs_path(ctx, "/data/x"),
            "absolute_path": ctx.absolute_path("rel"),
            "working_dir": ctx.working_dir,
            "mgr": ctx.mgr,
        }
        with open(os.path.join(args["out"], f"{ctx.worker_num}.json"), "w") as f:
            json.dump(facts, f)
        if ctx.job_name in args.get("block", ()):
            while True:
                time.sleep(0.1)

    return map_fun


@pytest.mark.parametrize("master_node", ["chief", "master", None])
def test_tensorflow_mode_gives_tfos_ctx_and_tf_config(spark, tmp_path, master_node):
    cluster = TFCluster.run(
        spark.sparkContext,
        _facts_fun(),
        {"out": str(tmp_path)},
        2,
        num_ps=0,
        input_mode=TFCluster.InputMode.TENSORFLOW,
        master_node=master_node,
    )
    cluster.shutdown()
    facts = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    addresses = [a for role in facts[0]["cluster_spec"].values() for a in role]
    assert len(addresses) == 2
    if master_node is not None:
        expected = [(master_node, 0), ("worker", 0)]
        assert facts[0]["cluster_spec"] == {master_node: [addresses[0]], "worker": [addresses[1]]}
    else:
        expected = [("worker", 0), ("worker", 1)]
        assert facts[0]["cluster_spec"] == {"worker": addresses}
    for i, f in enumerate(facts):
        assert (f["job_name"], f["task_index"]) == expected[i]
        assert (f["worker_num"], f["executor_id"], f["num_workers"]) == (i, i, 2)
        tf_config = {"cluster": f["cluster_spec"], "task": {"type": expected[i][0], "index": expected[i][1]}}
        if master_node is not None:
            tf_config["environment"] = "cloud"
        assert f["tf_config"] == tf_config
        # TFoS's defaultFS has no trailing slash, so that defaultFS + "/path" is a URL.
        assert f["defaultFS"] == "file://"
        assert f["hdfs_path"] == "file:///data/x"
        assert f["absolute_path"] == f"file://{f['working_dir']}/rel"
        assert f["mgr"] is None
    assert cluster.tensorboard_url() is None


def test_nodes_register_with_the_reservation_server_and_write_their_executor_id(spark, tmp_path):
    def map_fun(args, ctx):
        import os
        import time

        from sparktrain.tfos import util

        with open(os.path.join(args, f"id-{ctx.executor_id}"), "w") as f:
            f.write(str(util.read_executor_id()))
        while not os.path.exists(os.path.join(args, "go")):
            time.sleep(0.1)

    cluster = TFCluster.run(spark.sparkContext, map_fun, str(tmp_path), 2, master_node="chief")
    try:
        # As in TFoS, run returns once every node has registered.
        assert len(cluster.cluster_info) == 2
        # What TFoS's reservation.Client sees from any process that reaches the driver.
        client = reservation.Client(cluster.cluster_meta["server_addr"])
        seen = sorted(client.get_reservations(), key=lambda r: r["executor_id"])
        client.close()
    finally:
        (tmp_path / "go").write_text("")
        cluster.shutdown(timeout=120)
    assert [(r["executor_id"], r["job_name"], r["task_index"]) for r in seen] == [
        (0, "chief", 0),
        (1, "worker", 0),
    ]
    for r in seen:
        assert r["host"] == "127.0.0.1"
        assert r["port"] > 0
        assert r["authkey"] is None  # no secret leaves the node
        assert r["addr"] is None  # a stream endpoint only in a streaming job
    assert [(tmp_path / f"id-{i}").read_text() for i in range(2)] == ["0", "1"]


@pytest.mark.parametrize("release_port", [True, False])
def test_release_port_false_holds_the_tensorflow_port_until_the_node_releases_it(
    spark, tmp_path, release_port
):
    # TFoS's tests/test_TFCluster.py::test_port_released and test_port_unreleased, extended.
    def map_fun(args, ctx):
        import json
        import os
        import socket

        from sparktrain.errors import InvalidArgumentError
        from sparktrain.tfos import TFNode

        facts = {"held": ctx.tmp_socket is not None}
        if ctx.tmp_socket is not None:
            port = ctx.tmp_socket.getsockname()[1]
            facts["is_tf_port"] = ctx.cluster_spec[ctx.job_name][ctx.task_index].endswith(f":{port}")
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                probe.bind(("0.0.0.0", port))
                facts["bind_while_held"] = "bound"
            except OSError:
                facts["bind_while_held"] = "refused"
            finally:
                probe.close()
            try:
                TFNode.start_cluster_server(ctx)
            except InvalidArgumentError as e:
                facts["server_refused"] = str(e)
            ctx.release_port()
            facts["released"] = ctx.tmp_socket is None
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("0.0.0.0", port))  # free now
        with open(os.path.join(args, f"{ctx.worker_num}.json"), "w") as f:
            json.dump(facts, f)

    cluster = TFCluster.run(
        spark.sparkContext, map_fun, str(tmp_path), 2, master_node="chief", release_port=release_port
    )
    cluster.shutdown(timeout=120)
    for i in range(2):
        facts = json.loads((tmp_path / f"{i}.json").read_text())
        if release_port:
            assert facts == {"held": False}
        else:
            assert (facts["held"], facts["is_tf_port"], facts["released"]) == (True, True, True), facts
            assert facts["bind_while_held"] == "refused"
            assert "call ctx.release_port() first" in facts["server_refused"]


def test_parameter_servers_and_evaluator_are_in_tf_config_and_stop_when_training_ends(spark, tmp_path):
    # chief, worker, ps, evaluator: the last three block forever, as ParameterServerStrategy's
    # workers and parameter servers do in server.join() and a sidecar evaluator in its loop.
    args = {"out": str(tmp_path), "block": ["worker", "ps", "evaluator"]}
    started = time.monotonic()
    cluster = TFCluster.run(
        spark.sparkContext,
        _facts_fun(),
        args,
        4,
        num_ps=1,
        master_node="chief",
        eval_node=True,
        eval_grace_secs=1,
    )
    cluster.shutdown(timeout=180)
    assert time.monotonic() - started < 120
    facts = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(4)]
    spec = facts[0]["cluster_spec"]
    assert sorted(spec) == ["chief", "evaluator", "ps", "worker"]
    assert all(len(addresses) == 1 for addresses in spec.values())
    assert len({a for addresses in spec.values() for a in addresses}) == 4
    roles = [(f["job_name"], f["task_index"]) for f in facts]
    assert roles == [("chief", 0), ("worker", 0), ("ps", 0), ("evaluator", 0)]
    for f, (job, index) in zip(facts, roles, strict=True):
        assert f["tf_config"] == {
            "cluster": spec,
            "task": {"type": job, "index": index},
            "environment": "cloud",
        }
        assert f["num_workers"] == 2  # TFoS counts chief/master and worker nodes only


def test_a_failing_parameter_server_fails_the_job_naming_it(spark):
    def map_fun(args, ctx):
        import time

        if ctx.job_name == "ps":
            raise ValueError("the parameter server broke")
        time.sleep(120)  # stopped when the job fails

    cluster = TFCluster.run(
        spark.sparkContext, map_fun, None, 2, num_ps=1, master_node="chief", max_restarts=0
    )
    with pytest.raises(WorkerFailed, match=r"ps:0 \(task 1") as failure:
        cluster.shutdown(timeout=120)
    assert "the parameter server broke" in str(failure.value)


def test_spark_mode_trains_for_every_epoch(spark, tmp_path):
    sc = spark.sparkContext
    rows = [(i, float(2 * i)) for i in range(3000)]
    rdd = sc.parallelize(rows, 5)

    def train_fun(args, ctx):
        import os

        feed = ctx.get_data_feed(train_mode=True)
        seen, total = 0, 0.0
        while not feed.should_stop():
            batch = feed.next_batch(128)
            seen += len(batch)
            total += sum(y for _, y in batch)
        with open(os.path.join(args, f"train-{ctx.worker_num}"), "w") as f:
            f.write(f"{seen} {total}")

    cluster = TFCluster.run(
        sc, train_fun, str(tmp_path), 2, input_mode=TFCluster.InputMode.SPARK, master_node="chief"
    )
    cluster.train(rdd, num_epochs=3)
    cluster.shutdown()
    counts = [(tmp_path / f"train-{i}").read_text().split() for i in range(2)]
    assert sum(int(c[0]) for c in counts) == 3 * 3000
    assert sum(float(c[1]) for c in counts) == 3 * sum(y for _, y in rows)
    assert all(int(c[0]) > 0 for c in counts)


def test_inference_returns_a_lazy_rdd_in_the_inputs_partitions_and_order(spark, tmp_path):
    sc = spark.sparkContext
    rows = [(i, float(2 * i)) for i in range(3000)]
    rdd = sc.parallelize(rows, 5)

    def infer_fun(args, ctx):
        import os

        from sparktrain.tfos import TFNode

        with open(os.path.join(args, f"started-{ctx.worker_num}"), "a") as f:
            f.write("started\n")
        # TFoS's module functions, on the node's shared feed.
        while True:
            batch = TFNode.next_batch(ctx.mgr, 100)
            if not batch:
                break
            TFNode.batch_results(ctx.mgr, [f"{x}:{y}:{ctx.worker_num}" for x, y in batch])

    cluster = TFCluster.run(sc, infer_fun, str(tmp_path), 2, input_mode=TFCluster.InputMode.SPARK)
    outputs = cluster.inference(rdd)
    # Transformations start nothing either: only an action does.
    without_node = outputs.map(lambda o: o.rsplit(":", 1)[0]).filter(lambda o: o != "")
    assert outputs.getNumPartitions() == without_node.getNumPartitions() == 5
    time.sleep(1)
    assert not list(tmp_path.glob("started-*")), "inference started its nodes before an action"
    by_partition = without_node.glom().collect()
    assert sorted(p.name for p in tmp_path.glob("started-*")) == ["started-0", "started-1"]
    expected = rdd.glom().collect()
    assert by_partition == [[f"{x}:{y}" for x, y in part] for part in expected]
    nodes = outputs.map(lambda o: o.rsplit(":", 1)[1]).distinct().collect()
    cluster.shutdown()
    assert sorted(nodes) == ["0", "1"]
    # Read again from where the nodes left them: the job does not run twice.
    assert outputs.count() == 3000
    # Partitioned like the input, row for row: zip pairs each row with its result.
    assert all(o.startswith(f"{x}:{y}:") for (x, y), o in rdd.zip(outputs).collect())
    assert without_node.zip(rdd).take(2) == [("0:0.0", (0, 0.0)), ("1:2.0", (1, 2.0))]
    assert [(tmp_path / f"started-{i}").read_text() for i in range(2)] == ["started\n"] * 2


def test_inference_of_a_dataframe_with_an_input_mapping(spark):
    df = spark.range(0, 500, numPartitions=3).selectExpr("id AS x", "concat('s', id) AS y")

    def infer_fun(args, ctx):
        feed = ctx.get_data_feed(train_mode=False, input_mapping={"a_x": "x", "b_y": "y"})
        while not feed.should_stop():
            batch = feed.next_batch(64)
            feed.batch_results([f"{x}/{y}" for x, y in zip(batch["x"], batch["y"], strict=True)])

    cluster = TFCluster.run(spark.sparkContext, infer_fun, None, 2, input_mode=TFCluster.InputMode.SPARK)
    outputs = cluster.inference(df).collect()
    cluster.shutdown()
    assert outputs == [f"{r.x}/{r.y}" for r in df.collect()]


def test_inference_that_leaves_rows_unanswered_fails(spark):
    def infer_fun(args, ctx):
        feed = ctx.get_data_feed(train_mode=False)
        feed.next_batch(10)

    rdd = spark.sparkContext.parallelize(range(100), 2)
    cluster = TFCluster.run(
        spark.sparkContext, infer_fun, None, 2, input_mode=TFCluster.InputMode.SPARK, max_restarts=0
    )
    with pytest.raises(WorkerFailed, match="were read but got no result"):
        cluster.inference(rdd).collect()
    # As in TFoS, shutdown reports the job's failure too.
    with pytest.raises(WorkerFailed):
        cluster.shutdown()


def test_inference_that_returns_before_reading_its_rows_fails_and_run_takes_a_session(spark):
    def infer_fun(args, ctx):
        feed = ctx.get_data_feed(train_mode=False)
        feed.batch_results(feed.next_batch(3))  # answers what it read, then returns early

    rdd = spark.sparkContext.parallelize(range(40), 4)
    # The Structured Streaming example passes the SparkSession, which run() takes for its context.
    cluster = TFCluster.run(spark, infer_fun, None, 2, input_mode=TFCluster.InputMode.SPARK, max_restarts=0)
    with pytest.raises(WorkerFailed, match="rows of its share never read"):
        cluster.inference(rdd).collect()
    with pytest.raises(WorkerFailed):
        cluster.shutdown()


def test_dfutil_round_trips_a_dataframe_through_tfrecords(spark, tmp_path):
    df = spark.createDataFrame(
        [
            (1, 0.5, "one", bytearray(b"\x00\xff"), [1, 2], [0.25, 0.75]),
            (2, 1.5, "two", bytearray(b"\x01"), [3], [1.0]),
        ],
        "n int, x double, s string, b binary, ns array<bigint>, xs array<float>",
    )
    path = str(tmp_path / "tfr")
    dfutil.saveAsTFRecords(df, path)
    loaded = dfutil.loadTFRecords(spark.sparkContext, path, binary_features=["b"])
    assert [(f.name, f.dataType.simpleString()) for f in loaded.schema.fields] == [
        ("b", "binary"),
        ("n", "bigint"),
        ("ns", "array<bigint>"),
        ("s", "string"),
        ("x", "double"),
        ("xs", "array<double>"),
    ]
    got = sorted((r.n, r.x, r.s, bytes(r.b), r.ns, r.xs) for r in loaded.collect())
    assert got == [(1, 0.5, "one", b"\x00\xff", [1, 2], [0.25, 0.75]), (2, 1.5, "two", b"\x01", [3], [1.0])]
    assert dfutil.isLoadedDF(loaded)
    assert not dfutil.isLoadedDF(df)
    assert not dfutil.isLoadedDF(loaded.select("n"))
    # Without the hint, bytes are strings, as TFoS reads them.
    assert dict(dfutil.loadTFRecords(spark.sparkContext, path).dtypes)["b"] == "string"
    with pytest.raises(PathExistsError, match="already exists: remove it first"):
        dfutil.saveAsTFRecords(df, path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_ps": 1, "input_mode": TFCluster.InputMode.SPARK}, "num_ps=1: parameter servers need"),
        ({"eval_node": True, "input_mode": TFCluster.InputMode.SPARK}, "eval_node=True: an evaluator needs"),
        ({"driver_ps_nodes": True}, "driver_ps_nodes=True"),
        ({"master_node": "boss"}, "master_node='boss'"),
        ({"num_ps": 2, "eval_node": True}, "num_executors=3 leaves no training node"),
        ({"num_ps": -1}, "num_ps=-1"),
        ({"input_mode": 7}, "input_mode=7"),
        ({"input_mode": True}, "input_mode=True"),
        ({"eval_grace_secs": -1}, "eval_grace_secs=-1"),
    ],
)
def test_bad_arguments_are_refused_on_the_driver(spark, kwargs, message):
    before = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(InvalidArgumentError, match=message):
        TFCluster.run(spark.sparkContext, lambda args, ctx: None, None, 3, **kwargs)
    assert set(spark.sparkContext.statusTracker().getJobIdsForGroup()) == before


def test_feeding_needs_spark_mode_and_an_rdd(spark):
    cluster = TFCluster.run(
        spark.sparkContext, lambda args, ctx: None, None, 1, input_mode=TFCluster.InputMode.SPARK
    )
    with pytest.raises(InvalidArgumentError, match="dataRDD"):
        cluster.train([1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="num_epochs=-1"):
        cluster.train(spark.sparkContext.parallelize([1]), num_epochs=-1)
    with pytest.raises(InvalidArgumentError, match="ssc"):
        cluster.shutdown(ssc=object())


def test_the_reservation_server_runs_from_the_nodes_start_until_shutdown(spark):
    sc = spark.sparkContext
    cluster = TFCluster.run(sc, lambda args, ctx: None, None, 5, input_mode=TFCluster.InputMode.SPARK)
    # In InputMode.SPARK nothing listens before the nodes start.
    assert cluster.server is None
    assert cluster.cluster_info == []
    assert "server_addr" not in cluster.cluster_meta
    assert "default_fs" not in cluster.cluster_meta  # read from Spark as the nodes start
    # Five nodes do not fit the four task slots: the failed start leaves no server behind.
    with pytest.raises(SlotsUnavailable):
        cluster.train(sc.parallelize(range(10), 5))
    assert cluster.server is None
    assert "server_addr" not in cluster.cluster_meta
    outputs = cluster.inference(sc.parallelize(range(10), 2))
    cluster.shutdown()
    # Nothing would stop a server started now: the nodes do not start after shutdown.
    with pytest.raises(InvalidArgumentError, match="was shut down"):
        outputs.collect()
    assert cluster.server is None
