"""sparktrain across hosts that differ: a Spark standalone cluster and HDFS over three "hosts",
each a network namespace with its own address on a private bridge, and the driver on a fourth
(:mod:`harness.hosts`). Nothing here may assume 127.0.0.1 or one hostname: every host's name
resolves to loopback, as on many real hosts, and every process must bind and advertise the
address Spark knows it by.

- The README's main job (``examples/ctr_on_spark.py`` through ``sparktrain submit``) writes,
  trains on three hosts, evaluates, exports and scores.
- The TFoS shim: TensorFlow's own collectives across the three hosts under ``TF_CONFIG``.
- The PyTorch launcher (``sparktrain.torch.TorchDistributor``): gloo across the three hosts,
  each rank on its host's own interface.
- A trainer's host cut off mid-training: the other trainers' collectives fail within their
  time-out and name the unreachable peer, the driver restarts without that host
  (``min_workers``), and a later restart uses it again once its link is back. Without
  ``min_workers`` the restart waits for the cut host instead, and resumes on all three hosts
  once its link is back.
- The driver cut off from every trainer: the trainers stop by themselves within a bounded
  time, and the job recovers once the driver is back, its restart saying why.
- A slow link (a tenth of the others' rate): the step-time report names that host.

One cluster serves the whole module (about 40 s to start); each test runs its own driver
program in the driver host. They need root and iproute2 (``ip``, ``tc``), and skip saying so
elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import netns
from harness.hosts import WORKER_TIMEOUT_S, DriverProcess, HostCluster
from sparktrain.cluster.trainer.reach import KNOCK_TIMEOUT

ROOT = Path(__file__).resolve().parents[1]
DENSE = [f"i{k:02d}" for k in range(1, 14)]
SPARSE = [f"c{k:02d}" for k in range(1, 27)]
ROWS = 20000

pytestmark = [pytest.mark.spark, pytest.mark.hdfs, pytest.mark.hosts, pytest.mark.xdist_group("hosts")]

_UNAVAILABLE = netns.unavailable()
if _UNAVAILABLE is not None:
    pytestmark.append(pytest.mark.skip(reason=f"no network namespaces here: {_UNAVAILABLE}"))


@pytest.fixture(scope="module")
def hosts(request: pytest.FixtureRequest) -> Iterator[HostCluster]:
    failed_before = request.session.testsfailed
    cluster = HostCluster(hosts=3)
    cluster.start()
    try:
        yield cluster
    finally:
        # A failed test's logs (the driver programs', the executors') stay for a look.
        cluster.stop(keep_logs=request.session.testsfailed > failed_before)


@pytest.fixture(scope="module")
def main_job(hosts: HostCluster) -> dict[str, Any]:
    """The README's main job on the three hosts, as a user submits it: ``sparktrain submit``
    from the driver host to the standalone master, data and model on HDFS."""
    assert hosts.driver is not None
    out = f"{hosts.hdfs_url}/ctr"
    command = [sys.executable, "-m", "sparktrain", "submit", "--master", hosts.master_url]
    command += ["--workers", "3", "--memory", "512m", "--time-limit", "10m"]
    command += ["--conf", "spark.log.level=WARN", "--conf", "spark.ui.enabled=false"]
    command += [str(ROOT / "examples" / "ctr_on_spark.py"), "--rows", str(ROWS), "--epochs", "2"]
    command += ["--workers", "3", "--output", out]
    logs = hosts.work_dir / "main-job"
    with open(f"{logs}.out", "w+") as stdout, open(f"{logs}.err", "w+") as stderr:
        job = subprocess.Popen(
            hosts.driver.argv(command),
            stdout=stdout,
            stderr=stderr,
            env=hosts.driver_env(),
            cwd=hosts.work_dir,
        )
        # Which hosts run a trainer, looked at while the job runs.
        trained_on: set[str] = set()
        deadline = time.monotonic() + 660
        while job.poll() is None and time.monotonic() < deadline:
            trained_on |= {name for name, pids in hosts.trainers().items() if pids}
            time.sleep(0.2)
        if job.poll() is None:
            job.kill()
        job.wait()
        stdout.seek(0)
        stderr.seek(0)
        out_text, err_text = stdout.read(), stderr.read()
    assert job.returncode == 0, out_text[-3000:] + err_text[-5000:]
    line = next(line for line in out_text.splitlines() if line.startswith("RESULT "))
    return {"result": json.loads(line[len("RESULT ") :]), "out": out, "trained_on": trained_on}


def paced_args(hosts: HostCluster, stop_file: Path, data: str, **overrides: Any) -> dict[str, Any]:
    """Arguments of :func:`harness.host_jobs.paced_train` on the main job's training data: a
    small Wide&Deep model checkpointing every 5 steps into a model folder of its own."""
    args: dict[str, Any] = {
        "trainer": {
            "model": "wide_deep",
            "features": {"dense": DENSE, "categorical": dict.fromkeys(SPARSE, 1000)},
            "batch_size": 64,
            "model_dir": f"{hosts.hdfs_url}/models/{uuid.uuid4().hex[:8]}",
            "checkpoint_every": 5,
            "log_every": 5,
        },
        "data": data,
        "round_steps": 5,
        "pause": 0.3,
        "stop_file": str(stop_file),
        "max_steps": 100_000,
    }
    args.update(overrides)
    return args


def paced_job(
    hosts: HostCluster, main_job: dict[str, Any], tmp_path: Path, options: dict[str, Any], **overrides: Any
) -> tuple[DriverProcess, Path]:
    """:func:`paced_args`' job on three trainers with ``Cluster.run(**options)``, from a
    driver program on the driver host; returns that program and the file that stops the job."""
    stop = tmp_path / "stop"
    args = paced_args(hosts, stop, f"{main_job['out']}/train", **overrides)
    driver = hosts.driver_process(
        "harness.host_jobs", "train_job", {"args": args, "num_workers": 3, "options": options}
    )
    return driver, stop


def restore_cut_hosts(hosts: HostCluster) -> None:
    """Brings back the link of every host a test cut, so that the next test has all three."""
    for host in hosts.hosts:
        if host.is_cut:
            host.restore()


def all_at(status: dict[str, Any], workers: int, step: int) -> bool:
    """Whether ``workers`` trainers have reported and every one is at ``step`` or beyond."""
    steps = [s for s in status["steps"].values() if s is not None]
    return len(steps) == workers and min(steps) >= step


# --- the jobs users run -------------------------------------------------------------------------


def test_the_main_job_trains_on_three_hosts_and_scores(hosts: HostCluster, main_job: dict[str, Any]) -> None:
    result = main_job["result"]
    assert result["rows"] == ROWS
    assert result["workers"] == 3
    # Every row once an epoch: the example writes 8 equal files, the static shares of 3
    # trainers hold 3, 3 and 2 of them, and the largest share sets the steps of an epoch.
    assert result["steps"] == 2 * -(-(3 * ROWS // 8) // 256), result
    assert result["scored"] == max(ROWS // 10, 1000), result  # the example's held-out rows
    assert result["eval_auc"] > 0.6, result  # a model that learned nothing scores 0.5
    assert result["export"] == f"{main_job['out']}/model/export"
    # One trainer on each host.
    assert main_job["trained_on"] == {h.name for h in hosts.hosts}


@pytest.mark.tensorflow
def test_the_tfos_shim_runs_tensorflow_collectives_across_three_hosts(hosts: HostCluster) -> None:
    out = f"{hosts.hdfs_url}/tfos-{uuid.uuid4().hex[:8]}"
    driver = hosts.driver_process("harness.host_jobs", "tfos_all_reduce", {"out": out, "workers": 3})
    nodes = driver.result(420)["nodes"]
    assert [n["sum"] for n in nodes] == [6.0, 6.0, 6.0]
    assert [n["job_name"] for n in nodes] == ["chief", "worker", "worker"]
    spec = nodes[0]["tf_config"]["cluster"]
    addresses = [a.rsplit(":", 1)[0] for role in ("chief", "worker") for a in spec[role]]
    # TensorFlow was told every node's own host, and they are three.
    assert sorted(addresses) == sorted(h.address for h in hosts.hosts)


def test_the_pytorch_launcher_runs_gloo_across_three_hosts(hosts: HostCluster) -> None:
    from harness.torch_env import torch_python_for_tests

    # Driver, executors and trainers all in the PyTorch environment, as a user's would be.
    python = str(torch_python_for_tests())
    driver = hosts.driver_process("harness.host_jobs", "torch_all_gather", {"workers": 3}, python=python)
    result = driver.result(420)
    assert result["sum"] == 6.0  # 1 + 2 + 3: every rank took part
    ranks = sorted(result["ranks"], key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    # gloo was pointed at each host's own interface, and the three ranks are the three hosts.
    assert {r["interface"] for r in ranks} == {"eth0"}
    assert sorted(r["address"] for r in ranks) == sorted(h.address for h in hosts.hosts)


# --- the network failing --------------------------------------------------------------------------


def test_a_trainer_host_cut_off_mid_training(
    hosts: HostCluster, main_job: dict[str, Any], tmp_path: Path
) -> None:
    # The collectives' time-out is the shortest, so that the other trainers find the cut host
    # themselves before the driver, or Spark (its Master writes the host's Worker off after
    # WORKER_TIMEOUT_S), stops them.
    collective_timeout, heartbeat_timeout = 8.0, 25.0
    assert collective_timeout + KNOCK_TIMEOUT < WORKER_TIMEOUT_S
    options = {
        "collective_timeout": collective_timeout,
        "heartbeat_timeout": heartbeat_timeout,
        "min_workers": 2,
        "reservation_timeout": 30.0,
        "restart_backoff": 0.5,
        "max_restarts": 5,
    }
    driver, stop = paced_job(hosts, main_job, tmp_path, options)
    try:
        running = driver.wait_for(
            lambda s: s["generation"] == 0 and all_at(s, 3, 10), 300, "three trainers at step 10"
        )
        victim = hosts.host_of(running["hosts"]["worker:1"])
        bystanders = {role: host for role, host in running["hosts"].items() if role != "worker:1"}
        victim.cut()
        cut_at = time.time()

        # The driver restarts without the cut host: two trainers, neither on it.
        again = driver.wait_for(
            lambda s: s["generation"] >= 1 and s["state"] == "running" and all_at(s, 2, 0),
            180,
            "a restart on two hosts",
        )
        assert victim.address not in again["hosts"].values(), again
        first = again["restarts"][0]
        # The restart's cause is the cut host, found within the time-outs (not TCP's minutes).
        assert "worker:1" in first["cause"], first
        assert victim.address in first["cause"], first
        assert first["detected_at"] - cut_at < heartbeat_timeout + 10, first
        # Every other trainer's collective failed, and each named the peer it cannot reach.
        for role in bystanders:
            said = [line for line in driver.lines if line.startswith(f"[{role}] ")]
            assert any("CollectiveTimeout" in line or "PeerFailed" in line for line in said), "\n".join(
                said[-20:]
            )
            unreachable = [line for line in said if "unreachable from here" in line]
            assert unreachable, "\n".join(said[-20:])
            assert all(victim.address in line for line in unreachable), "\n".join(said[-20:])
            assert not any(host in line for line in unreachable for host in bystanders.values())

        # The link comes back; the next restart (forced here by killing a trainer) uses it again.
        victim.restore()
        driver.wait_for(lambda s: s["executors"] == 3, 120, "the cut host's executor back")
        trainer_host = hosts.host_of(again["hosts"]["chief:0"])
        for pid in trainer_host.processes("sparktrain.cluster.trainer"):
            os.kill(pid, signal.SIGKILL)
        whole = driver.wait_for(
            lambda s: s["generation"] >= 2 and s["state"] == "running" and all_at(s, 3, 0),
            180,
            "a restart on three hosts",
        )
        assert victim.address in whole["hosts"].values(), whole
        driver.wait_for(
            lambda s: s["generation"] == whole["generation"] and all_at(s, 3, 5),
            120,
            "training on three hosts",
        )
        stop.touch()
        result = driver.result(180)
        assert result["value"]["steps"] > 0
    finally:
        restore_cut_hosts(hosts)


def test_without_min_workers_the_restart_waits_for_the_cut_host(
    hosts: HostCluster, main_job: dict[str, Any], tmp_path: Path
) -> None:
    # Without min_workers a job runs on num_workers hosts or not at all: the restart after the
    # cut waits (reservation_timeout) for the lost slot, and resumes on every host, the cut one
    # included, once its link is back. The time-outs are the test above's.
    collective_timeout, heartbeat_timeout = 8.0, 25.0
    options = {
        "collective_timeout": collective_timeout,
        "heartbeat_timeout": heartbeat_timeout,
        "reservation_timeout": 180.0,
        "restart_backoff": 0.5,
        "max_restarts": 3,
    }
    driver, stop = paced_job(hosts, main_job, tmp_path, options)
    try:
        running = driver.wait_for(
            lambda s: s["generation"] == 0 and all_at(s, 3, 10), 300, "three trainers at step 10"
        )
        victim = hosts.host_of(running["hosts"]["worker:1"])
        victim.cut()
        # The driver finds the failure and holds the restart until the slot is back, saying why.
        waiting = driver.wait_for(lambda s: s["restarting"] is not None, 120, "the failure found")
        assert waiting["state"] == "restarting", waiting
        cause = waiting["restarting"]["cause"]
        assert "worker:1" in cause, cause
        assert victim.address in cause, cause
        # The host stays away for longer than Spark's Master takes to write its Worker off,
        # so the slot comes back only when the Worker registers again.
        time.sleep(WORKER_TIMEOUT_S + 5)
        assert not any(s["state"] == "running" and s["generation"] >= 1 for s in driver.statuses), (
            "a generation ran while a host was cut off, although min_workers was not given"
        )
        victim.restore()
        again = driver.wait_for(
            lambda s: s["generation"] >= 1 and s["state"] == "running" and all_at(s, 3, 0),
            240,
            "a restart on the three hosts",
        )
        assert victim.address in again["hosts"].values(), again
        # No generation after the first ever ran on fewer hosts.
        for status in driver.statuses:
            if status["generation"] >= 1 and status["state"] == "running" and status["steps"]:
                assert len(status["hosts"]) == 3, status
        driver.wait_for(
            lambda s: s["generation"] == again["generation"] and all_at(s, 3, 5),
            120,
            "training on the three hosts",
        )
        stop.touch()
        result = driver.result(180)
        assert result["value"]["steps"] > 0
        # It resumed from a checkpoint of the first generation, not from the start.
        assert result["restarts"][0]["resumed_from"], result["restarts"]
    finally:
        restore_cut_hosts(hosts)


def test_a_driver_cut_off_from_every_trainer(
    hosts: HostCluster, main_job: dict[str, Any], tmp_path: Path
) -> None:
    heartbeat_timeout = 8.0
    options = {"heartbeat_timeout": heartbeat_timeout, "restart_backoff": 0.5, "reservation_timeout": 60.0}
    driver, stop = paced_job(hosts, main_job, tmp_path, options)
    assert hosts.driver is not None
    try:
        driver.wait_for(lambda s: s["generation"] == 0 and all_at(s, 3, 10), 300, "three trainers at step 10")
        assert all(hosts.trainers().values())
        hosts.driver.cut()
        cut_at = time.monotonic()
        # Nothing trains on without the driver: every task stops its trainer by itself once the
        # driver has not answered for the heartbeat time-out (then SIGTERM, SIGKILL 3 s later).
        bound = heartbeat_timeout * 2 + 3 + 10
        while any(hosts.trainers().values()):
            assert time.monotonic() - cut_at < bound, (
                f"trainers still run {bound:.0f} s after the cut: {hosts.trainers()}"
            )
            time.sleep(0.5)
        hosts.driver.restore()
        # The job recovers: a new generation on every host, its restart saying why.
        again = driver.wait_for(
            lambda s: s["generation"] >= 1 and s["state"] == "running" and all_at(s, 3, 0), 240, "the restart"
        )
        cause = again["restarts"][0]["cause"]
        assert "stopped heart-beating" in cause or "driver" in cause, cause
        stop.touch()
        assert driver.result(180)["value"]["steps"] > 0
    finally:
        if hosts.driver.is_cut:
            hosts.driver.restore()


def test_a_slow_link_names_its_host_as_the_straggler(
    hosts: HostCluster, main_job: dict[str, Any], tmp_path: Path
) -> None:
    for host in hosts.hosts:
        host.limit(200_000_000)
    # A table big enough that the sparse exchange moves some data every step.
    driver, stop = paced_job(hosts, main_job, tmp_path, {}, pause=0.0, round_steps=10)
    try:
        running = driver.wait_for(lambda s: all_at(s, 3, 5), 300, "three trainers at step 5")
        slow = hosts.host_of(running["hosts"]["worker:0"])
        slow.limit(20_000_000)
        named = driver.wait_for(
            lambda s: s["straggler"] is not None and s["straggler"]["host"] == slow.address,
            180,
            "the slow host named",
        )
        assert named["straggler"]["role"] == "worker:0"
        assert named["straggler"]["link_busy"] >= 2 * named["straggler"]["others"]
        stop.touch()
        driver.result(180)
        assert any("holds the ring back" in line and slow.address in line for line in driver.lines)
    finally:
        for host in hosts.hosts:
            host.unlimit()
