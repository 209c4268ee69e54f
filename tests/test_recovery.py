"""Recovery on real Spark (``local-cluster[2,2,1024]``): a trainer that dies, is killed or
stops responding restarts the job as a new generation, which resumes from the chief's latest
checkpoint and ends with the weights of an uninterrupted run; errors no restart can fix end the
job at once; the state a user's own code saves on the chief survives a restart.

The chaos tests on a standalone master with three workers (``test_chaos.py``) kill executors
and chiefs mid-checkpoint; these cover the launcher's side of it quickly.

Functions that run on executors are defined inside the tests: executors cannot import this
module.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from harness.synthetic import dense_table, write_tfrecords
from sparktrain import Cluster
from sparktrain.errors import WorkerFailed
from sparktrain.training import FeatureSpec

DENSE39 = FeatureSpec(dense=tuple(f"f{j:02d}" for j in range(39)))


def _chunked_training():
    """A main_fun that trains in chunks of ``chunk`` steps (each ends with a checkpoint) and,
    in generation 0, has task ``kill`` SIGKILL itself once step ``kill_at`` is checkpointed
    and a few more steps are under way."""

    def main_fun(args, ctx):
        import os
        import signal

        trainer = ctx.trainer(
            model="mlp",
            features=args["features"],
            hidden=[32, 16],
            batch_size=64,
            model_dir=args["model_dir"],
            log_every=10,
            seed=5,
        )
        steps = args["steps"]
        for end in range(args["chunk"], steps + 1, args["chunk"]):
            if ctx.generation == 0 and ctx.rank == args["kill"] and end > args["kill_at"]:
                os.kill(os.getpid(), signal.SIGKILL)
            result = trainer.fit(args["data"], epochs=100, steps=end)
        return {
            "weights": trainer.weights(),
            "steps": result.steps,
            "resumed_from": result.resumed_from,
            "generation": ctx.generation,
        }

    return main_fun


def test_a_killed_trainer_restarts_the_job_which_ends_with_the_weights_of_a_clean_run(
    spark, tmp_path, caplog
):
    data = write_tfrecords(f"{tmp_path}/data", dense_table(6_000, seed=3), files=4)
    common = {"features": DENSE39, "data": data, "steps": 60, "chunk": 10, "kill_at": 30}
    clean_args = {**common, "model_dir": f"{tmp_path}/clean", "kill": -1}
    with Cluster.run(spark, _chunked_training(), clean_args, 2, log=False) as cluster:
        clean = cluster.results()
    assert cluster.restarts == []

    args = {**common, "model_dir": f"{tmp_path}/restarted", "kill": 1}
    with Cluster.run(spark, _chunked_training(), args, 2, log=False, restart_backoff=0.2) as cluster:
        restarted = cluster.results()
        status = cluster.status()
    assert [r["generation"] for r in restarted] == [1, 1]
    assert [r["steps"] for r in restarted] == [60, 60]
    assert restarted[0]["resumed_from"] == 30
    (restart,) = cluster.restarts
    assert restart.generation == 0
    assert restart.cause == "worker:0 (task 1 on 127.0.0.1) was killed by SIGKILL"
    assert restart.seconds_to_resubmit < 15
    assert restart.resumed_from == 30
    assert restart.last_step is not None
    assert restart.steps_redone == restart.last_step - 30
    assert status["generation"] == 1
    assert status["state"] == "succeeded"
    assert (
        "generation 0 failed: worker:0 (task 1 on 127.0.0.1) was killed by SIGKILL; restart 1 of 3"
        in caplog.text
    )
    # Same steps, same data order: the weights of the uninterrupted run.
    scale = np.abs(clean[0]["weights"]).max()
    np.testing.assert_allclose(restarted[0]["weights"], clean[0]["weights"], rtol=0, atol=1e-5 * scale)
    np.testing.assert_array_equal(restarted[0]["weights"], restarted[1]["weights"])


def test_with_dynamic_sharding_a_restarted_epoch_goes_on_where_its_checkpoint_left_it(spark, tmp_path):
    """One trainer, so the driver's queue hands out files in one order: the restarted run
    ends with the weights of the clean one only if no file is read twice and the interrupted
    epoch is not started over."""
    data = write_tfrecords(f"{tmp_path}/data", dense_table(6_000, seed=3), files=12)

    def main_fun(args, ctx):
        import os
        import signal
        import threading
        import time

        def kill_after_checkpoint_60():
            # In the trainer itself: training is too fast for a test to aim from outside.
            from pathlib import Path

            index = Path(args["model_dir"], "checkpoint.json")
            while True:
                if index.exists() and "ckpt-0000000060" in index.read_text():
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(0.0005)

        if args["kill"] and ctx.generation == 0:
            threading.Thread(target=kill_after_checkpoint_60, daemon=True).start()
        trainer = ctx.trainer(
            model="mlp",
            features=args["features"],
            hidden=[64, 32],
            batch_size=32,
            model_dir=f"file://{args['model_dir']}",
            checkpoint_every=20,
            seed=5,
        )
        result = trainer.fit(args["data"], epochs=2, sharding="dynamic")
        return trainer.weights(), result.steps, result.resumed_from

    def run(name, kill):
        args = {"features": DENSE39, "data": data, "model_dir": f"{tmp_path}/{name}", "kill": kill}
        with Cluster.run(spark, main_fun, args, 1, work=data, log=False, restart_backoff=0.2) as cluster:
            return cluster.results()[0], cluster.restarts

    (clean, steps, _), _ = run("clean", kill=False)
    (weights, restarted_steps, resumed_from), restarts = run("restarted", kill=True)
    assert len(restarts) == 1
    assert resumed_from is not None
    assert 60 <= resumed_from < steps
    assert restarted_steps == steps == 2 * -(-6_000 // 32)  # each epoch ends on a short batch
    np.testing.assert_allclose(weights, clean, rtol=0, atol=1e-5 * np.abs(clean).max())


def test_a_stopped_trainer_is_killed_by_its_task_and_the_job_restarts(spark):
    def main_fun(args, ctx):
        import os
        import signal
        import time

        ctx.barrier("started")
        if ctx.generation == 0 and ctx.rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(1)
        ctx.barrier("done")
        return ctx.generation

    start = time.monotonic()
    with Cluster.run(
        spark, main_fun, None, 2, heartbeat_timeout=5.0, restart_backoff=0.2, log=False
    ) as cluster:
        assert cluster.results() == [1, 1]
    assert time.monotonic() - start < 120
    (restart,) = cluster.restarts
    assert restart.cause.startswith("worker:0 (task 1 on 127.0.0.1) exited with code 71")
    assert "stopped responding" in restart.cause


def test_errors_that_no_restart_fixes_end_the_job_at_once(spark):
    def main_fun(args, ctx):
        from sparktrain.errors import InvalidArgumentError

        if ctx.rank == 1:
            raise InvalidArgumentError("batch_size=0: must be at least 1")
        ctx.barrier()

    with Cluster.run(spark, main_fun, None, 2, log=False) as cluster, pytest.raises(WorkerFailed) as failed:
        cluster.wait(timeout=60)
    assert failed.value.exit_code == 4
    assert "InvalidArgumentError: batch_size=0" in failed.value.stderr_tail
    assert cluster.restarts == []
    assert cluster.status()["generation"] == 0


def test_user_state_saved_on_the_chief_survives_a_restart(spark, tmp_path):
    def main_fun(directory, ctx):
        import os
        import signal

        state = ctx.load_state(directory)
        if state is None:
            state = {"step": 0, "weights": [0.0, 0.0]}
        while state["step"] < 6:
            state = {"step": state["step"] + 1, "weights": [w + 1.0 for w in state["weights"]]}
            wrote = ctx.save_state(state, directory)
            assert wrote == ctx.is_chief
            ctx.barrier("saved")
            if ctx.generation == 0 and ctx.rank == 1 and state["step"] == 3:
                os.kill(os.getpid(), signal.SIGKILL)
        return (ctx.generation, ctx.restarts, state)

    with Cluster.run(
        spark, main_fun, f"file://{tmp_path}/state", 2, restart_backoff=0.2, log=False
    ) as cluster:
        results = cluster.results()
    final = {"step": 6, "weights": [6.0, 6.0]}
    assert results == [(1, 1, final), (1, 1, final)]
    # The default format runs no code when read.
    assert sorted(os.listdir(tmp_path / "state")) == ["state.npz"]


class _Planted:
    """What an attacker who can write a job's state folder plants: a pickle that runs code
    (here, creating a file) wherever it is unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_planted_in_the_state_folder_is_refused_not_run(spark, tmp_path):
    import pickle

    import numpy as np

    folder = tmp_path / "state"
    folder.mkdir()
    marker = tmp_path / "code-ran"
    (folder / "state.pickle").write_bytes(pickle.dumps(_Planted(str(marker))))

    def main_fun(directory, ctx):
        from sparktrain.errors import InvalidArgumentError

        try:
            ctx.load_state(directory)
        except InvalidArgumentError as e:
            refused = str(e)
        else:
            refused = None
        ctx.barrier("read")
        # The safe format round-trips arrays and JSON values.
        state = {"step": 7, "weights": np.arange(4.0), "names": ["a", "b"]}
        ctx.save_state(state, directory)
        ctx.barrier("saved")
        back = ctx.load_state(directory)
        return refused, back["step"], back["weights"].tolist(), back["names"]

    with Cluster.run(spark, main_fun, f"file://{folder}", 2, max_restarts=0, log=False) as cluster:
        results = cluster.results()
    assert not marker.exists()
    refused, step, weights, names = results[0]
    assert refused is not None
    assert "state.pickle is a pickle, which runs code when read; pass pickle=True" in refused
    assert results[1][1:] == (7, [0.0, 1.0, 2.0, 3.0], ["a", "b"])
    assert (step, weights, names) == (7, [0.0, 1.0, 2.0, 3.0], ["a", "b"])
    # The pickle written before is gone: it would be an older state.
    assert sorted(os.listdir(folder)) == ["state.npz"]


def test_a_barrier_waits_at_most_barrier_timeout(spark):
    def main_fun(args, ctx):
        import time

        if ctx.rank == 0:
            ctx.barrier("never-complete")
        time.sleep(60)

    start = time.monotonic()
    cluster = Cluster.run(spark, main_fun, None, 2, barrier_timeout=2.0, max_restarts=0, log=False)
    with cluster, pytest.raises(WorkerFailed) as failed:
        cluster.wait(timeout=60)
    assert time.monotonic() - start < 30
    assert (
        "BarrierTimeout: barrier 'never-complete#1': 1 of 2 tasks never arrived: [1]"
        in failed.value.stderr_tail
    )


def test_a_fed_job_trains_each_row_once_across_a_restart(spark, tmp_path):
    """``input_mode="spark"``: each generation repartitions the DataFrame again, and Spark
    fetches a shuffle's blocks in no fixed order. A resumed trainer skips the rows its
    checkpoint covers, as the engine does, so each partition must come in the same order in
    every generation: then every row is trained on exactly once across the restart."""
    from collections import Counter

    def main_fun(folder, ctx):
        from pathlib import Path

        base = Path(folder)
        progress = base / f"progress-{ctx.rank}"
        done = int(progress.read_text()) if progress.exists() else 0
        ids = [i for batch in ctx.feed() for i in batch.column("id").to_pylist()]
        (base / f"order-{ctx.generation}-{ctx.rank}").write_text(",".join(map(str, ids)))
        if ctx.generation == 0:
            # Train on half the partition, checkpoint there, then fail mid-epoch.
            checkpoint = len(ids) // 2
            (base / f"used-0-{ctx.rank}").write_text(",".join(map(str, ids[:checkpoint])))
            progress.write_text(str(checkpoint))
            ctx.barrier("checkpointed")
            raise RuntimeError("lost mid-epoch")
        (base / f"used-1-{ctx.rank}").write_text(",".join(map(str, ids[done:])))
        return len(ids)

    # Many map partitions, so that each trainer's partition is fetched from several of them.
    df = spark.range(0, 6_000, numPartitions=12)
    with Cluster.run(
        spark, main_fun, str(tmp_path), 2, input_mode="spark", data=df, restart_backoff=0.2, log=False
    ) as cluster:
        cluster.wait(timeout=180)
        assert len(cluster.restarts) == 1
    uses = Counter(int(i) for path in tmp_path.glob("used-*") for i in path.read_text().split(",") if i)
    assert sorted(uses) == list(range(6_000))
    assert set(uses.values()) == {1}
    for rank in range(2):
        assert (tmp_path / f"order-0-{rank}").read_text() == (tmp_path / f"order-1-{rank}").read_text()
