"""The data plane inside ``Cluster.run`` on real Spark: trainers all-reduce, broadcast and
all-gather NumPy arrays through ``ctx`` and get NumPy's answers, bit-identical on every rank;
a trainer that dies mid-collective makes the others fail naming it.

Functions that run on executors are defined inside the tests: executors cannot import this
module.
"""

from __future__ import annotations

import numpy as np
import pytest

from sparktrain import Cluster
from sparktrain.errors import WorkerFailed


@pytest.mark.parametrize("num_workers", [2, 3])
def test_trainers_all_reduce_broadcast_and_all_gather_through_ctx(spark, num_workers):
    def main_fun(args, ctx):
        import numpy as np

        rng = np.random.default_rng(ctx.rank)
        mine = {
            "f32": rng.standard_normal(100_003).astype(np.float32),
            "f64": rng.standard_normal(7).astype(np.float64),
            "i64": rng.integers(-1000, 1000, size=(31, 3)),
        }
        out = {
            "inputs": {k: v.copy() for k, v in mine.items()},
            "sum": ctx.allreduce(mine["f32"].copy(), op="sum"),
            "mean": ctx.allreduce(mine["f64"].copy()),
            "max": ctx.allreduce(mine["i64"].copy(), op="max"),
            "min_list": ctx.allreduce([ctx.rank, -ctx.rank], op="min"),
        }
        grads = [rng.standard_normal((50, 20)).astype(np.float32), np.full(20, ctx.rank, np.float32)]
        out["grads"] = [g.copy() for g in grads]
        out["fused"] = ctx.allreduce(grads, op="mean")
        out["fused_in_place"] = all(a is b for a, b in zip(out["fused"], grads, strict=True))
        out["bf16"] = ctx.allreduce(mine["f32"].copy(), op="sum", wire="bfloat16")
        in_place = mine["f32"].copy()
        out["in_place"] = ctx.allreduce(in_place, op="sum") is in_place
        weights = np.arange(10, dtype=np.float64) * (ctx.rank + 1)
        out["broadcast"] = ctx.broadcast(weights, root=1)
        out["gathered"] = ctx.allgather({"rank": ctx.rank, "host": ctx.tasks[ctx.rank].host})
        out["gathered_bytes"] = ctx.allgather(bytes([ctx.rank]) * ctx.rank)
        return out

    with Cluster.run(spark, main_fun, None, num_workers) as cluster:
        results = cluster.results()
    inputs = [r["inputs"] for r in results]
    f32 = np.stack([i["f32"] for i in inputs])
    np.testing.assert_allclose(results[0]["sum"], f32.sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        results[0]["mean"], np.stack([i["f64"] for i in inputs]).mean(axis=0), rtol=1e-12
    )
    np.testing.assert_array_equal(results[0]["max"], np.stack([i["i64"] for i in inputs]).max(axis=0))
    assert results[0]["max"].shape == (31, 3)
    np.testing.assert_array_equal(results[0]["min_list"], [0, -(num_workers - 1)])
    grads = [np.stack([r["grads"][i] for r in results]).mean(axis=0) for i in range(2)]
    for got, want in zip(results[0]["fused"], grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # bfloat16 on the wire keeps 8 bits of precision per hop.
    error = np.abs(results[0]["bf16"] - f32.sum(axis=0))
    assert np.all(error <= 1e-2 * (np.abs(f32).sum(axis=0) + 1e-3)), error.max()
    for r in results:
        # Bit-identical on every rank.
        for key in ("sum", "mean", "max", "min_list", "bf16"):
            assert r[key].tobytes() == results[0][key].tobytes(), key
        assert [f.tobytes() for f in r["fused"]] == [f.tobytes() for f in results[0]["fused"]]
        assert r["fused_in_place"] is True
        assert r["in_place"] is True
        np.testing.assert_array_equal(r["broadcast"], np.arange(10) * 2.0)
        assert [g["rank"] for g in r["gathered"]] == list(range(num_workers))
        assert r["gathered_bytes"] == [bytes([i]) * i for i in range(num_workers)]


def test_a_trainer_that_dies_mid_all_reduce_fails_the_job_naming_it(spark):
    def main_fun(args, ctx):
        import os
        import signal

        import numpy as np

        data = np.ones(1 << 22, dtype=np.float32)
        ctx.allreduce(data)  # connects the ring; everyone is in step
        if ctx.rank == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        ctx.allreduce(data)
        return "finished"

    with (
        Cluster.run(spark, main_fun, None, 3, collective_timeout=30) as cluster,
        pytest.raises(WorkerFailed) as failed,
    ):
        cluster.wait(timeout=60)
    # The neighbours' all-reduces broke at once, but they wait for the driver to learn the
    # first failure, so the job's error names the killed trainer, not a bystander.
    e = failed.value
    assert (e.task_index, e.signal) == (2, 9), str(e)
