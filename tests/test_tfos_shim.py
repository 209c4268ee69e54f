"""The TensorFlowOnSpark shim on real Spark: a TENSORFLOW-mode job sees TFoS's ctx and
TF_CONFIG; a SPARK-mode job trains over an RDD for several epochs and runs inference whose
outputs match the inputs one to one, in order.

Functions that run on executors are defined inside the tests: executors cannot import this
module.
"""

from __future__ import annotations

import json

import pytest

from sparktrain.errors import InvalidArgumentError
from sparktrain.tfos import TFCluster


@pytest.mark.parametrize("master_node", ["chief", None])
def test_tensorflow_mode_gives_tfos_ctx_and_tf_config(spark, tmp_path, master_node):
    def map_fun(args, ctx):
        import json
        import os

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
            "mgr": ctx.mgr,
        }
        with open(os.path.join(args["out"], f"{ctx.worker_num}.json"), "w") as f:
            json.dump(facts, f)

    cluster = TFCluster.run(
        spark.sparkContext,
        map_fun,
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
    if master_node == "chief":
        expected = [("chief", 0), ("worker", 0)]
        assert facts[0]["cluster_spec"] == {"chief": [addresses[0]], "worker": [addresses[1]]}
    else:
        expected = [("worker", 0), ("worker", 1)]
        assert facts[0]["cluster_spec"] == {"worker": addresses}
    for i, f in enumerate(facts):
        assert (f["job_name"], f["task_index"]) == expected[i]
        assert (f["worker_num"], f["executor_id"], f["num_workers"]) == (i, i, 2)
        assert f["tf_config"] == {
            "cluster": f["cluster_spec"],
            "task": {"type": expected[i][0], "index": expected[i][1]},
        }
        assert f["defaultFS"] == "file:///"
        assert f["hdfs_path"] == "file:///data/x"
        assert f["mgr"] is None


def test_spark_mode_trains_for_every_epoch_and_inference_matches_inputs_in_order(spark, tmp_path):
    sc = spark.sparkContext
    rows = [(i, float(2 * i)) for i in range(3000)]
    rdd = sc.parallelize(rows, 5)

    def train_fun(args, ctx):
        import os

        from sparktrain.tfos import TFNode

        feed = TFNode.DataFeed(ctx.mgr, train_mode=True)
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

    def infer_fun(args, ctx):
        from sparktrain.tfos import TFNode

        feed = TFNode.DataFeed(ctx.mgr, train_mode=False, input_mapping={"a_x": "x", "b_y": "y"})
        while not feed.should_stop():
            batch = feed.next_batch(100)
            if batch["x"]:
                feed.batch_results(
                    [f"{x}:{y}:{ctx.worker_num}" for x, y in zip(batch["x"], batch["y"], strict=True)]
                )

    cluster = TFCluster.run(sc, infer_fun, None, 2, input_mode=TFCluster.InputMode.SPARK)
    outputs = cluster.inference(rdd).collect()
    cluster.shutdown()
    assert [o.rsplit(":", 1)[0] for o in outputs] == [f"{x}:{y}" for x, y in rows]
    assert {o.rsplit(":", 1)[1] for o in outputs} == {"0", "1"}


def test_parameter_servers_are_refused_with_a_clear_error(spark):
    with pytest.raises(InvalidArgumentError, match="parameter servers are not supported"):
        TFCluster.run(spark.sparkContext, lambda args, ctx: None, None, 3, num_ps=1)
