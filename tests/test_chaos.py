"""Chaos tests: a training job on a Spark standalone master with three workers (separate Master,
Worker and executor JVMs on 127.0.0.1, see ``harness/standalone.py``) survives the faults of a
shared cluster, and loses nothing.

Each scenario trains the same model with sparktrain's engine on three trainers, injects one
fault mid-training, and checks that the job finishes with the expected step count, the final
weights of an uninterrupted run (where the worker count stays the same), a log line naming the
cause, no trainer process left on any worker, and no partial checkpoint. The time from the
fault to its detection, and from the detection to the first training step of the next
generation, go to the file named by ``SPARKTRAIN_CHAOS_REPORT`` (``tests/run.sh`` prints it).

These run in their own pytest step (marker ``chaos``): a process holds one SparkContext, and
this module's is on the standalone master rather than the shared ``local-cluster``.

Functions that run on executors are built inside this module's functions: executors cannot
import it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.standalone import StandaloneCluster
from harness.synthetic import dense_table, write_tfrecords
from sparktrain import Cluster
from sparktrain.errors import WorkerFailed
from sparktrain.training import FeatureSpec

pytestmark = [pytest.mark.chaos, pytest.mark.spark]

WORKERS = 3
STEPS = 120
CHUNK = 10
#: The checkpoint after which faults are injected.
FAULT_AFTER = 40
FEATURES = FeatureSpec(dense=tuple(f"f{j:02d}" for j in range(39)))
HEARTBEAT_TIMEOUT = 5.0


@dataclass
class Chaos:
    cluster: StandaloneCluster
    spark: Any
    data: str
    root: Path
    reference: np.ndarray


def _training(fail_at: int | None = None) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """A main_fun that writes ``<pids>/g<generation>-r<rank>`` (its pid and executor), then
    trains in chunks of :data:`CHUNK` steps, each ending with a checkpoint, pausing between
    chunks so that faults land mid-training. With ``fail_at``, task 2 raises the same
    ValueError in every generation once it passes that step."""

    def main_fun(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        import os
        import time

        with open(f"{args['pids']}/g{ctx.generation}-r{ctx.rank}", "w") as f:
            f.write(f"{os.getpid()} {ctx.executor_id}")
        trainer = ctx.trainer(
            model="mlp",
            features=args["features"],
            hidden=[256, 128],
            batch_size=64,
            model_dir=args["model_dir"],
            max_shard_bytes=16 << 10,
            log_every=CHUNK,
            seed=5,
        )
        first_step_at = None
        for end in range(CHUNK, STEPS + 1, CHUNK):
            if fail_at is not None and ctx.rank == 2 and end > fail_at:
                raise ValueError("bad record in part-00003.tfrecord")
            result = trainer.fit(args["data"], epochs=100, steps=end)
            if result.new_steps and first_step_at is None:
                first_step_at = result.first_step_at
            time.sleep(0.3)
        return {
            "weights": trainer.weights() if ctx.is_chief else None,
            "steps": result.steps,
            "generation": ctx.generation,
            "num_workers": ctx.num_workers,
            "first_step_at": first_step_at,
            "resumed_from": result.resumed_from,
        }

    return main_fun


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    root = tmp_path_factory.mktemp("chaos")
    data = write_tfrecords(f"{root}/data", dense_table(12_000, seed=3), files=6)
    with StandaloneCluster(workers=WORKERS) as cluster:
        spark = cluster.session("sparktrain-chaos")
        probe = Chaos(cluster, spark, data, root, np.zeros(0))
        results, _ = _run(probe, "reference", _training())
        probe.reference = results[0]["weights"]
        yield probe


def _run(
    chaos: Chaos,
    tag: str,
    main_fun: Callable[..., Any],
    inject: Callable[[Path, Path], float] | None = None,
    **options: Any,
) -> tuple[list[Any], Cluster]:
    """Runs ``main_fun`` on three trainers; ``inject(pids, model_dir)`` waits for its moment,
    injects a fault and returns when (``time.time()``). Returns the results and the job, after
    checking that no trainer process of the job is left anywhere."""
    pids = chaos.root / tag / "pids"
    model_dir = chaos.root / tag / "model"
    pids.mkdir(parents=True)
    args = {"features": FEATURES, "data": chaos.data, "pids": str(pids), "model_dir": f"file://{model_dir}"}
    options = {"heartbeat_timeout": HEARTBEAT_TIMEOUT, "restart_backoff": 0.5, "log": False, **options}
    cluster = Cluster.run(chaos.spark, main_fun, args, WORKERS, env={"SPARKTRAIN_CHAOS": tag}, **options)
    try:
        injected = inject(pids, model_dir) if inject is not None else None
        try:
            results = cluster.results()
        finally:
            _assert_no_trainer_left(tag)
    finally:
        cluster.shutdown()
    if injected is not None:
        _report(tag, injected, cluster, results)
    _assert_no_partial_checkpoint(model_dir)
    return results, cluster


def _trainer_processes(tag: str) -> list[int]:
    """Trainer processes of the job tagged ``tag``, wherever they run on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"sparktrain.cluster.trainer" in cmdline and f"SPARKTRAIN_CHAOS={tag}".encode() in environ.split(
            b"\0"
        ):
            found.append(int(entry.name))
    return found


def _assert_no_trainer_left(tag: str) -> None:
    deadline = time.monotonic() + 30
    while (left := _trainer_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"trainer processes of {tag} outlived the job: {left}"


def _assert_no_partial_checkpoint(model_dir: Path) -> None:
    index = json.loads((model_dir / "checkpoint.json").read_text())
    folders = sorted(p.name for p in model_dir.iterdir() if p.name.startswith("ckpt-"))
    assert folders == sorted(index["kept"]), (folders, index)
    assert not [p for p in model_dir.rglob(".*.tmp")]


def _report(tag: str, injected: float, cluster: Cluster, results: list[Any]) -> None:
    """Appends the scenario's time to detect and time to resume to the chaos report."""
    path = os.environ.get("SPARKTRAIN_CHAOS_REPORT")
    first = cluster.restarts[0]
    resumed = results[0]["first_step_at"]
    line = {
        "scenario": tag,
        "detect_s": round(first.detected_at - injected, 2),
        "resubmit_s": round(first.seconds_to_resubmit, 2),
        "resume_s": round(resumed - first.detected_at, 2) if resumed is not None else None,
        "restarts": len(cluster.restarts),
        "cause": first.cause,
    }
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def _step_of(name: str) -> int:
    """The step of a checkpoint's folder (``ckpt-<step>-g<generation>``), of its staging folder
    (``.ckpt-<step>-g<generation>.<id>.tmp``) or of an earlier version's ``ckpt-<step>``."""
    return int(name.lstrip(".").removeprefix("ckpt-").split(".")[0].split("-g")[0])


def _latest_checkpoint(model_dir: Path) -> int:
    try:
        index = json.loads((model_dir / "checkpoint.json").read_text())
    except (OSError, ValueError):
        return -1
    return -1 if index["latest"] is None else _step_of(index["latest"])


def _wait_for(what: str, ready: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _pid_of(pids: Path, rank: int) -> tuple[int, str]:
    pid, executor = (pids / f"g0-r{rank}").read_text().split()
    return int(pid), executor


def _after_fault_point(model_dir: Path) -> None:
    _wait_for(f"checkpoint {FAULT_AFTER}", lambda: _latest_checkpoint(model_dir) >= FAULT_AFTER)


def _assert_recovered(chaos: Chaos, results: list[Any], cluster: Cluster, cause: str, caplog: Any) -> None:
    assert [r["steps"] for r in results] == [STEPS] * WORKERS
    assert all(r["generation"] >= 1 for r in results)
    assert cluster.restarts[0].cause.startswith(cause), cluster.restarts
    assert f"generation 0 failed: {cluster.restarts[0].cause}; restart 1 of 3" in caplog.text
    scale = np.abs(chaos.reference).max()
    np.testing.assert_allclose(results[0]["weights"], chaos.reference, rtol=0, atol=1e-5 * scale)


def test_kill_9_of_a_trainer(chaos: Chaos, caplog: pytest.LogCaptureFixture) -> None:
    def inject(pids: Path, model_dir: Path) -> float:
        _after_fault_point(model_dir)
        pid, _ = _pid_of(pids, 1)
        os.kill(pid, signal.SIGKILL)
        return time.time()

    results, cluster = _run(chaos, "kill-trainer", _training(), inject)
    _assert_recovered(chaos, results, cluster, "worker:0 (task 1 on 127.0.0.1) was killed by SIGKILL", caplog)


def _executor_jvm_of(pid: int) -> int:
    """The executor JVM that (through its Python worker) started process ``pid``."""
    while pid > 1:
        if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise AssertionError("the trainer runs under no executor JVM")


def test_kill_9_of_an_executor_jvm(chaos: Chaos, caplog: pytest.LogCaptureFixture) -> None:
    def inject(pids: Path, model_dir: Path) -> float:
        _after_fault_point(model_dir)
        trainer, _ = _pid_of(pids, 1)
        os.kill(_executor_jvm_of(trainer), signal.SIGKILL)
        return time.time()

    results, cluster = _run(chaos, "kill-executor", _training(), inject)
    _assert_recovered(chaos, results, cluster, "worker:0 (task 1 on 127.0.0.1)", caplog)
    chaos.cluster.wait_for_executors(chaos.spark, WORKERS)


def test_kill_9_of_the_chief_while_it_writes_a_checkpoint(
    chaos: Chaos, caplog: pytest.LogCaptureFixture
) -> None:
    caught: list[int] = []

    def inject(pids: Path, model_dir: Path) -> float:
        _after_fault_point(model_dir)
        pid, _ = _pid_of(pids, 0)

        def unpublished() -> list[int]:
            # A save under way (its staging folder, or its folder renamed into place before the
            # index names it) is newer than every kept checkpoint; an older folder outside the
            # index is one that retention is deleting.
            index = json.loads((model_dir / "checkpoint.json").read_text())
            kept = [_step_of(n) for n in index["kept"]]
            names = [p.name for p in model_dir.iterdir() if p.name.lstrip(".").startswith("ckpt-")]
            steps = [_step_of(n) for n in names if n not in index["kept"]]
            return sorted(s for s in steps if s > max(kept, default=-1))

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if unpublished():
                # Freeze it, then make sure the save is still unfinished before killing it.
                os.kill(pid, signal.SIGSTOP)
                steps = unpublished()
                if steps:
                    os.kill(pid, signal.SIGKILL)
                    caught.extend(steps)
                    return time.time()
                os.kill(pid, signal.SIGCONT)
            time.sleep(0.002)
        raise AssertionError("never saw the chief in the middle of a checkpoint")

    results, cluster = _run(chaos, "kill-chief-mid-checkpoint", _training(), inject)
    _assert_recovered(chaos, results, cluster, "chief:0 (task 0 on 127.0.0.1) was killed by SIGKILL", caplog)
    # The save under way was lost; training resumed from the one before it.
    assert caught
    assert results[0]["resumed_from"] == caught[0] - CHUNK


def test_sigstop_of_a_trainer_past_the_heartbeat_timeout(
    chaos: Chaos, caplog: pytest.LogCaptureFixture
) -> None:
    def inject(pids: Path, model_dir: Path) -> float:
        _after_fault_point(model_dir)
        pid, _ = _pid_of(pids, 2)
        os.kill(pid, signal.SIGSTOP)
        return time.time()

    results, cluster = _run(chaos, "sigstop-trainer", _training(), inject)
    _assert_recovered(chaos, results, cluster, "worker:1 (task 2 on 127.0.0.1) exited with code 71", caplog)
    assert (
        "gave no sign of life" in cluster.restarts[0].cause
        or "stopped responding" in cluster.restarts[0].cause
    )


def test_a_deterministic_user_exception_is_not_retried_again(chaos: Chaos) -> None:
    with pytest.raises(WorkerFailed) as failed:
        _run(chaos, "user-exception", _training(fail_at=FAULT_AFTER))
    error = failed.value
    assert error.task_index == 2
    assert error.exit_code == 1
    assert str(error).count("ValueError: bad record in part-00003.tfrecord") == 1
    assert str(error).count("Traceback (most recent call last)") == 1


def test_elastic_a_worker_lost_for_good_leaves_the_job_on_fewer_workers(
    chaos: Chaos, caplog: pytest.LogCaptureFixture
) -> None:
    # Last in this module: the cluster has one worker less afterwards.
    def inject(pids: Path, model_dir: Path) -> float:
        _after_fault_point(model_dir)
        chaos.cluster.kill_worker(WORKERS - 1)
        return time.time()

    results, _ = _run(chaos, "elastic", _training(), inject, min_workers=2, reservation_timeout=15.0)
    assert [r["steps"] for r in results] == [STEPS] * 2
    assert [r["num_workers"] for r in results] == [2, 2]
    assert "restarts with 2 of its 3 training tasks (min_workers=2)" in caplog.text
    assert np.isfinite(results[0]["weights"]).all()
