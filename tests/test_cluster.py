"""The launcher on real Spark (``local-cluster[2,2,1024]``: two executors, four task slots):
roles, cluster spec and TF_CONFIG reach every trainer; failures surface as ``WorkerFailed``
with the cause within seconds; the exit barrier holds the chief; the control plane refuses
callers without the job secret.

Functions that run on executors are defined inside the tests: executors cannot import this
module.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from sparktrain import Cluster
from sparktrain.cluster.trainer.context import TrainerContext
from sparktrain.errors import InvalidArgumentError, SlotsUnavailable, Unauthenticated, WorkerFailed


@pytest.mark.parametrize(("num_workers", "num_evaluators"), [(2, 0), (3, 0), (2, 1)])
def test_every_trainer_gets_its_role_the_cluster_spec_and_tf_config(spark, num_workers, num_evaluators):
    def main_fun(args, ctx):
        import os

        return {
            "args": args,
            "job_name": ctx.job_name,
            "task_index": ctx.task_index,
            "rank": ctx.rank,
            "worker_num": ctx.worker_num,
            "num_workers": ctx.num_workers,
            "is_chief": ctx.is_chief,
            "cluster_spec": ctx.cluster_spec,
            "tf_config_env": json.loads(os.environ["TF_CONFIG"]),
            "tf_config": ctx.tf_config,
            "threads": os.environ["OMP_NUM_THREADS"],
            "pid": os.getpid(),
            "parent": os.getppid(),
            "data_port": ctx.data_listener.getsockname()[1],
        }

    n = num_workers + num_evaluators
    cluster = Cluster.run(spark, main_fun, {"lr": 0.1}, num_workers, num_evaluators=num_evaluators)
    chief = cluster.wait(timeout=120)
    results = cluster.results()
    assert chief == results[0]
    assert len(results) == n

    expected_roles = [("chief", 0)] + [("worker", i) for i in range(num_workers - 1)]
    expected_roles += [("evaluator", i) for i in range(num_evaluators)]
    assert [(r["job_name"], r["task_index"]) for r in results] == expected_roles
    assert [r["rank"] for r in results] == list(range(n))
    assert [r["worker_num"] for r in results] == list(range(n))
    assert [r["is_chief"] for r in results] == [True] + [False] * (n - 1)
    assert all(r["args"] == {"lr": 0.1} and r["num_workers"] == num_workers for r in results)
    assert all(r["threads"] == "1" for r in results)
    # Each trainer is its own process, started by (not forked from) its task.
    assert len({r["pid"] for r in results}) == n
    assert all(r["pid"] != r["parent"] for r in results)

    spec = results[0]["cluster_spec"]
    assert len(spec["chief"]) == 1
    assert len(spec.get("worker", [])) == num_workers - 1
    assert len(spec.get("evaluator", [])) == num_evaluators
    addresses = [a for role in spec.values() for a in role]
    assert len(set(addresses)) == n
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    for r in results:
        assert r["cluster_spec"] == spec
        assert r["tf_config_env"] == r["tf_config"]
        assert r["tf_config"] == {"cluster": spec, "task": {"type": r["job_name"], "index": r["task_index"]}}
        # The data plane's listener is open in the trainer, on a port of its own.
        assert r["data_port"] not in {int(a.rsplit(":", 1)[1]) for a in addresses}
    status = cluster.status()
    assert status["state"] == "succeeded"
    assert status["exit_codes"] == dict.fromkeys(range(n), 0)
    cluster.shutdown()


def test_a_deterministic_exception_is_tried_twice_then_fails_the_job_with_its_traceback(spark, caplog):
    def main_fun(args, ctx):
        import time

        if ctx.job_name == "worker":
            raise ValueError("bad batch at step 3")
        time.sleep(120)

    start = time.monotonic()
    cluster = Cluster.run(spark, main_fun, None, 2, restart_backoff=0.5)
    with pytest.raises(WorkerFailed) as failed:
        cluster.wait(timeout=90)
    assert time.monotonic() - start < 60
    e = failed.value
    assert (e.task_index, e.role, e.host, e.exit_code, e.signal) == (1, "worker:0", "127.0.0.1", 1, None)
    assert "Traceback" in e.stderr_tail
    assert e.stderr_tail.count("ValueError: bad batch at step 3") == 1
    assert str(e).startswith("worker:0 (task 1 on 127.0.0.1) exited with code 1")
    status = cluster.status()
    assert status["state"] == "failed"
    # Restarted once; the same exception at the same step again is not retried.
    assert status["generation"] == 1
    cause = "worker:0 (task 1 on 127.0.0.1) exited with code 1: ValueError: bad batch at step 3"
    assert [r["cause"] for r in status["restarts"]] == [cause]
    assert status["restarting"] is None
    assert "is not restarted (it failed the same way before the last restart)" in caplog.text
    cluster.shutdown()
    # The chief was stopped and the slots are free again: a new job runs at once.
    assert Cluster.run(spark, lambda args, ctx: ctx.rank, None, 2).wait(timeout=60) == 0


def test_sys_exit_in_main_fun_is_success_at_zero_and_a_failure_naming_its_status_otherwise(spark):
    def main_fun(args, ctx):
        import sys

        if ctx.rank == 1:
            sys.exit(args)
        return "done"

    for status in (0, None):
        cluster = Cluster.run(spark, main_fun, status, 2, max_restarts=0)
        assert cluster.wait(timeout=60) == "done"
        assert cluster.results() == ["done", None]
        cluster.shutdown()

    with (
        Cluster.run(spark, main_fun, 3, 2, max_restarts=0) as cluster,
        pytest.raises(WorkerFailed) as failed,
    ):
        cluster.wait(timeout=60)
    e = failed.value
    assert (e.rank, e.task_index, e.role, e.exit_code) == (1, 1, "worker:0", 1)
    assert "main_fun called sys.exit(3)" in e.stderr_tail


def test_a_trainer_killed_by_a_signal_fails_the_job_naming_the_signal(spark):
    def main_fun(args, ctx):
        import os
        import signal
        import sys
        import time

        if ctx.job_name == "worker":
            print("about to die", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)

    start = time.monotonic()
    with (
        Cluster.run(spark, main_fun, None, 2, max_restarts=0) as cluster,
        pytest.raises(WorkerFailed) as failed,
    ):
        cluster.wait(timeout=60)
    assert time.monotonic() - start < 30
    e = failed.value
    assert (e.task_index, e.exit_code, e.signal) == (1, None, 9)
    assert "was killed by SIGKILL" in str(e)
    assert "about to die" in e.stderr_tail


def test_too_few_slots_is_an_error_with_the_numbers_within_30_seconds(spark):
    start = time.monotonic()
    with pytest.raises(SlotsUnavailable) as refused:
        Cluster.run(spark, lambda args, ctx: None, None, 5)
    assert time.monotonic() - start < 30
    assert (refused.value.needed, refused.value.available) == (5, 4)
    assert "needs 5 task slots" in str(refused.value)
    assert "has 4" in str(refused.value)


def test_calls_without_the_job_secret_are_refused(spark):
    from sparktrain._native import ControlClient, generate_secret

    def main_fun(args, ctx):
        import time

        time.sleep(4)
        return "done"

    with Cluster.run(spark, main_fun, None, 2) as cluster:
        # One that even holds the job's pinned certificate (say, from a closure sent in the
        # clear): past TLS, the credential check refuses it.
        settings = cluster._settings
        intruder = ControlClient(
            cluster.address, generate_secret(), 10.0, settings.tls_ca, settings.tls_domain
        )
        with pytest.raises(Unauthenticated):
            intruder.register(0, 9, "10.6.6.6", 1, "x", 1, 2, [], 5.0)
        with pytest.raises(Unauthenticated):
            intruder.barrier(0, "__exit__", 1.0)
        assert cluster.wait(timeout=60) == "done"
        refused = cluster.status()["refused"]
    assert len(refused) == 2
    assert all("wrong job secret" in r for r in refused)


def test_the_exit_barrier_holds_the_chief_until_the_slowest_worker_returns(spark):
    def main_fun(args, ctx):
        import time

        if ctx.job_name == "worker":
            time.sleep(3)
        return time.time()

    with Cluster.run(spark, main_fun, None, 3) as cluster:
        cluster.wait(timeout=60)
        returned = cluster.results()
        exited = cluster.status()["exited_at"]
    assert returned[0] < returned[1] - 2
    # The chief's trainer exited only after the last worker returned.
    assert exited[0] >= max(returned)


def test_barriers_reports_and_prefixed_logs_reach_the_driver(spark, capfd):
    def main_fun(args, ctx):
        import sys

        ctx.barrier()
        ctx.barrier("epoch")
        ctx.barrier("epoch")
        print(f"hello from rank {ctx.rank}", flush=True)
        print(f"warning from rank {ctx.rank}", file=sys.stderr, flush=True)
        ctx.report(step=10, loss=0.25 + ctx.rank)
        return ctx.rank

    with Cluster.run(spark, main_fun, None, 2) as cluster:
        assert cluster.wait(timeout=60) == 0
        metrics = cluster.status()["metrics"]
    assert metrics == {"chief:0": {"step": 10, "loss": 0.25}, "worker:0": {"step": 10, "loss": 1.25}}
    out, err = capfd.readouterr()
    assert "[chief:0] hello from rank 0" in out
    assert "[worker:0] hello from rank 1" in out
    assert "[worker:0] warning from rank 1" in err


def test_a_flood_of_trainer_output_reaches_the_driver_or_is_counted(spark, capfd):
    def main_fun(args, ctx):
        import sys

        print("y" * 2_000_000)
        for i in range(3000):
            print(f"{i:05d} " + "x" * 8000)
        sys.stdout.flush()
        return "done"

    start = time.monotonic()
    with Cluster.run(spark, main_fun, None, 1) as cluster:
        assert cluster.wait(timeout=120) == "done"
    assert time.monotonic() - start < 60
    out, _ = capfd.readouterr()
    lines = out.splitlines()
    # The 2 MB line came first, into an empty queue: it arrives, cut.
    cut = [line for line in lines if line.startswith("[chief:0] yyy")]
    assert len(cut) == 1
    assert cut[0].endswith(f"... [{2_000_000 - 8192} more bytes cut; the executor log has the whole line]")
    received = [int(line[10:15]) for line in lines if re.fullmatch(r"\[chief:0\] \d{5} x{8000}", line)]
    assert received == sorted(set(received))
    notices = [
        re.fullmatch(r"\[chief:0\] sparktrain: (\d+) lines of stdout were dropped.*", line) for line in lines
    ]
    dropped = sum(int(n.group(1)) for n in notices if n)
    assert len(received) + dropped == 3000
    if dropped:
        assert "the executor's stdout log has every line" in out


def test_spark_input_mode_feeds_each_trainer_a_partition_for_every_epoch(spark):
    def main_fun(epochs, ctx):
        totals = []
        for _ in range(epochs):
            rows, total = 0, 0
            for batch in ctx.feed():
                rows += batch.num_rows
                total += sum(batch.column("id").to_pylist())
            totals.append((rows, total))
        return totals

    df = spark.range(0, 10_000, numPartitions=5)
    with Cluster.run(spark, main_fun, 3, 2, input_mode="spark", data=df) as cluster:
        cluster.wait(timeout=120)
        per_task = cluster.results()
    for epoch in range(3):
        assert sum(t[epoch][0] for t in per_task) == 10_000
        assert sum(t[epoch][1] for t in per_task) == sum(range(10_000))
    assert all(t[0][0] > 0 for t in per_task)


def test_a_second_pass_over_the_feed_while_one_is_open_is_refused(spark):
    """The task serves one pass at a time: a second ``ctx.feed()`` read while the first is
    open would wait for it forever, with healthy heartbeats. It is refused, naming the fix."""

    def main_fun(args, ctx):
        first = ctx.feed()
        next(first)
        try:
            next(ctx.feed())
        except InvalidArgumentError as e:
            refused = str(e)
        else:
            refused = None
        first.close()
        return refused, sum(batch.num_rows for batch in ctx.feed())

    # Partitions far larger than a socket's buffers: the task is still writing the first pass
    # when the second one connects.
    df = spark.range(0, 2_000_000, numPartitions=4)
    with Cluster.run(spark, main_fun, None, 2, input_mode="spark", data=df, log=False) as cluster:
        cluster.wait(timeout=120)
        per_task = cluster.results()
    for refused, _ in per_task:
        assert refused is not None
        assert "still being read" in refused
        assert "close()" in refused
    assert sum(rows for _, rows in per_task) == 2_000_000


def test_absolute_path_follows_tensorflowonspark():
    def ctx(default_fs: str) -> TrainerContext:
        return TrainerContext(
            job_name="chief",
            task_index=0,
            rank=0,
            num_workers=1,
            num_evaluators=0,
            tasks=[],
            tf_config={},
            default_fs=default_fs,
            working_dir="/work/dir",
            executor_id="e",
            gpus=(),
        )

    hdfs = ctx("hdfs://nn:8020")
    assert hdfs.absolute_path("s3a://bucket/x") == "s3a://bucket/x"
    assert hdfs.absolute_path("/data/x") == "hdfs://nn:8020/data/x"
    assert hdfs.absolute_path("models/m").startswith("hdfs://nn:8020/user/")
    assert hdfs.absolute_path("models/m").endswith("/models/m")
    assert ctx("file:///").absolute_path("models/m") == "file:///work/dir/models/m"
    assert ctx("file:///").absolute_path("/tmp/m") == "file:///tmp/m"


def test_a_task_that_dies_under_its_trainer_fails_the_job_naming_it(spark):
    def main_fun(args, ctx):
        import os
        import signal
        import time

        if ctx.job_name == "worker":
            # Kill the Spark task's Python worker that supervises this trainer; the
            # parent-death signal then takes the trainer down too.
            os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(120)

    start = time.monotonic()
    with (
        Cluster.run(spark, main_fun, None, 2, max_restarts=0) as cluster,
        pytest.raises(WorkerFailed) as failed,
    ):
        cluster.wait(timeout=60)
    assert time.monotonic() - start < 30
    assert failed.value.task_index == 1
    assert failed.value.role == "worker:0"


def test_the_control_plane_can_run_over_tls(spark, tmp_path):
    import subprocess

    from sparktrain._native import ControlClient
    from sparktrain.errors import ClusterError

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    extensions = ["-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(["openssl", *request, *extensions, *files], check=True, capture_output=True)

    def main_fun(args, ctx):
        import time

        ctx.barrier()
        time.sleep(2)
        return ctx.rank

    with Cluster.run(spark, main_fun, None, 2, tls=(str(cert), str(key))) as cluster:
        plain = ControlClient(cluster.address, "00" * 32, 5.0)
        with pytest.raises(ClusterError):
            plain.barrier(0, "x", 1.0)
        assert cluster.results() == [0, 1]


def test_without_tls_files_the_control_plane_runs_over_tls_with_a_pinned_job_certificate(spark):
    """No TLS conf at all: the driver serves a certificate made for this job, which the tasks
    pin. A TLS client that pins it completes a handshake; one that trusts only the system's CAs,
    or speaks plain HTTP/2, gets nothing; and each job has a certificate of its own."""
    import socket
    import ssl

    def main_fun(args, ctx):
        import time

        ctx.barrier()
        time.sleep(3)
        return ctx.rank

    with Cluster.run(spark, main_fun, None, 2) as cluster:
        pinned = cluster._settings.tls_ca
        assert pinned is not None
        assert pinned.startswith("-----BEGIN CERTIFICATE-----")
        assert cluster._settings.tls_domain == "driver.sparktrain.invalid"
        host, port = cluster.address.rsplit(":", 1)
        context = ssl.create_default_context(cadata=pinned)
        context.set_alpn_protocols(["h2"])
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="driver.sparktrain.invalid") as tls,
        ):
            assert ssl.DER_cert_to_PEM_cert(tls.getpeercert(binary_form=True)).strip() == pinned.strip()
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            ssl.create_default_context().wrap_socket(raw, server_hostname="driver.sparktrain.invalid")
        # HTTP/2 in the clear: the TLS server answers with a TLS alert, or not at all.
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(9))
            raw.settimeout(5)
            try:
                answer = raw.recv(64)
            except (TimeoutError, ConnectionResetError):
                answer = b""
            assert answer == b"" or answer[:1] == b"\x15", answer
        assert cluster.results() == [0, 1]
    with Cluster.run(spark, main_fun, None, 2) as other:
        assert other._settings.tls_ca != pinned
        assert other.results() == [0, 1]


def test_kept_results_stay_on_the_executors_and_roles_name_the_evaluators(spark):
    def main_fun(args, ctx):
        return [ctx.rank] * (ctx.rank + 1)

    cluster = Cluster.run(
        spark, main_fun, None, 2, num_evaluators=1, evaluator_roles=["ps"], keep_results=True
    )
    assert cluster.wait(timeout=120) is None
    rdd = cluster.result_rdd()
    # One partition per task, in task order, computed where the tasks left them.
    assert rdd.getNumPartitions() == 3
    assert rdd.glom().collect() == [[[0]], [[1, 1]], [[2, 2, 2]]]
    assert sorted(cluster.status()["hosts"]) == ["chief:0", "ps:0", "worker:0"]
    with pytest.raises(InvalidArgumentError, match="use result_rdd"):
        cluster.results()
    cluster.shutdown()


def _tagged(tag: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``ORPHAN_TAG=tag``."""
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"ORPHAN_TAG={tag}".encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def test_a_trainers_children_do_not_outlive_the_job(spark):
    """Trainers exit with os._exit, which skips the clean-up of their children: a daemon
    process (as multiprocessing and DataLoader workers are) and a plain subprocess that a
    main_fun starts must not outlive the job, whether it succeeds or fails."""
    import uuid

    def main_fun(fail, ctx):
        import multiprocessing
        import subprocess
        import time

        worker = multiprocessing.Process(target=time.sleep, args=(3600,), daemon=True)
        worker.start()
        subprocess.Popen(["sleep", "3600"])
        if fail:
            raise RuntimeError("main_fun fails with its children running")
        return worker.pid

    for fail in (False, True):
        tag = uuid.uuid4().hex
        env = {"ORPHAN_TAG": tag}
        with Cluster.run(spark, main_fun, fail, 2, env=env, max_restarts=0, log=False) as cluster:
            if fail:
                with pytest.raises(WorkerFailed, match="main_fun fails with its children running"):
                    cluster.wait(timeout=120)
            else:
                cluster.wait(timeout=120)
        deadline = time.monotonic() + 15
        while _tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _tagged(tag) == [], f"left running after the job (fail={fail})"
