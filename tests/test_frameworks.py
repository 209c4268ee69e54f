"""One launcher for every framework: PyTorch's and JAX's own variables in every trainer (their
process groups start with no arguments), a script as the entry point, the driver running the
trainers itself (local mode), and PySpark's TorchDistributor API.

The PyTorch jobs run in ``.venv-torch`` (PyTorch's CUDA wheels are several GB and need their own
setuptools), as ``spark-submit`` jobs of their own: ``examples/torch_distributor.py`` with only
the TorchDistributor import changed, in its function, script and local forms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import sparktrain as st
from sparktrain.cluster.driver.options import JobOptions
from sparktrain.cluster.settings import TaskInfo
from sparktrain.cluster.trainer.frameworks import framework_env, interface_of
from sparktrain.errors import ConfigurationError, InvalidArgumentError, WorkerFailed
from sparktrain.torch import TorchDistributor

ROOT = Path(__file__).resolve().parents[1]


def _tasks() -> list[TaskInfo]:
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    roles = [("chief", 0), ("worker", 0), ("evaluator", 0)]
    return [
        TaskInfo(i, role, index, host, 40_000 + i, 20_000 + i, str(i))
        for i, ((role, index), host) in enumerate(zip(roles, hosts, strict=True))
    ]


# --- the variables, the entry points and the arguments (no Spark) ---------------------------


def test_every_trainer_gets_pytorchs_and_jaxs_variables() -> None:
    chief, worker, evaluator = (framework_env(_tasks(), rank, num_workers=2) for rank in range(3))
    for env in (chief, worker, evaluator):
        assert env["MASTER_ADDR"] == "10.0.0.1"
        assert env["MASTER_PORT"] == "20000"  # the chief's reserved port
        assert env["WORLD_SIZE"] == "2"
        assert env["JAX_COORDINATOR_ADDRESS"] == "10.0.0.1:20000"
    assert (chief["RANK"], worker["RANK"]) == ("0", "1")
    assert (chief["NODE_RANK"], worker["NODE_RANK"]) == ("0", "1")
    assert chief["LOCAL_RANK"] == worker["LOCAL_RANK"] == "0"
    assert chief["LOCAL_WORLD_SIZE"] == "1"
    # An evaluator is not in the training world: no rank to join it with.
    assert "RANK" not in evaluator
    assert "SPARKTRAIN_JAX_PROCESS_ID" not in evaluator


@pytest.mark.skipif(sys.platform != "linux", reason="interfaces are looked up with Linux's ioctl")
def test_gloo_is_told_the_interface_of_the_tasks_address(monkeypatch: pytest.MonkeyPatch) -> None:
    # gloo would take the address the host name resolves to, loopback on many hosts, and its
    # peers elsewhere could not reach it: it gets the interface that holds the task's address.
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    tasks = [TaskInfo(0, "chief", 0, "127.0.0.1", 40_000, 20_000, "0")]
    assert interface_of("127.0.0.1") == "lo"
    assert framework_env(tasks, 0, num_workers=1)["GLOO_SOCKET_IFNAME"] == "lo"
    # An address no interface here holds (a documentation range): gloo is left to its choice.
    elsewhere = [TaskInfo(0, "chief", 0, "198.51.100.7", 40_000, 20_000, "0")]
    assert interface_of("198.51.100.7") is None
    assert "GLOO_SOCKET_IFNAME" not in framework_env(elsewhere, 0, num_workers=1)
    # The job's own choice wins.
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    assert "GLOO_SOCKET_IFNAME" not in framework_env(tasks, 0, num_workers=1)


def test_a_script_entry_point_is_checked_on_the_driver(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="main_fun"):
        JobOptions(main_fun=str(tmp_path / "missing.py"), name="job")
    with pytest.raises(InvalidArgumentError, match=r"\.py"):
        JobOptions(main_fun=str(tmp_path / "train.sh"), name="job")
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    with pytest.raises(InvalidArgumentError, match="line 1"):
        JobOptions(main_fun=broken, name="job")
    good = tmp_path / "train.py"
    good.write_text("print('hi')\n")
    with pytest.raises(InvalidArgumentError, match="command line"):
        JobOptions(main_fun=good, name="job", args="--lr=1")
    with pytest.raises(InvalidArgumentError, match="strings or numbers"):
        JobOptions(main_fun=good, name="job", args=["--lr", {"x": 1}])
    options = JobOptions(main_fun=good, name="job", args=["--lr", 0.5, 3])
    assert options.args == ["--lr", "0.5", "3"]


def test_torch_distributor_arguments_are_refused_by_name() -> None:
    with pytest.raises(InvalidArgumentError, match="num_processes"):
        TorchDistributor(num_processes=0)
    with pytest.raises(InvalidArgumentError, match="num_workers"):
        TorchDistributor(num_processes=2, num_workers=3)
    with pytest.raises(InvalidArgumentError, match="kwargs"):
        TorchDistributor(num_processes=1, spark=object()).run("train.py", lr=1)


def test_jax_initializes_with_no_arguments_from_a_trainers_environment(tmp_path: Path) -> None:
    """Two processes with the variables a trainer gets: ``jax.distributed.initialize()`` finds
    the coordinator, the count and the id, and the processes exchange values."""
    pytest.importorskip("jax")
    script = textwrap.dedent(
        """
        import json, os, sys
        from sparktrain.cluster.settings import TaskInfo
        from sparktrain.cluster.trainer.frameworks import framework_env, register_jax_cluster
        rank, port = int(sys.argv[1]), int(sys.argv[2])
        roles = ["chief", "worker"]
        tasks = [TaskInfo(i, roles[i], 0, "127.0.0.1", 0, port, str(i)) for i in range(2)]
        os.environ.update(framework_env(tasks, rank, 2))
        register_jax_cluster()
        import jax, jax.numpy as jnp
        from jax.experimental import multihost_utils
        jax.distributed.initialize()
        values = multihost_utils.process_allgather(jnp.array([rank + 1.0]))
        print(json.dumps([jax.process_index(), jax.process_count(), values.ravel().tolist()]))
        """
    )
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(r), str(port)], stdout=subprocess.PIPE, text=True)
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert [json.loads(o.strip().splitlines()[-1]) for o in outs] == [[0, 2, [1.0, 2.0]], [1, 2, [1.0, 2.0]]]


# --- on Spark: a script, JAX, local mode ----------------------------------------------------


SCRIPT = """
import json, os, sys
rank = os.environ["RANK"]
with open(os.path.join(sys.argv[1], f"rank-{rank}.json"), "w") as f:
    json.dump({"name": __name__, "argv": sys.argv[1:], "file": os.path.basename(__file__),
               "env": {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "TF_CONFIG")}}, f)
if "--fail" in sys.argv and rank == "1":
    sys.exit(3)
"""


def test_a_script_runs_as_main_in_every_trainer_with_its_command_line(spark, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    with st.Cluster.run(spark, str(script), [str(out), "--lr", 0.1], 2, log=False) as cluster:
        assert cluster.wait() is None
    runs = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]
    for rank, run in enumerate(runs):
        assert run["name"] == "__main__"
        assert run["argv"] == [str(out), "--lr", "0.1"]
        assert run["file"] == "train.py"
        assert run["env"]["RANK"] == str(rank)
        assert run["env"]["WORLD_SIZE"] == "2"
        assert json.loads(run["env"]["TF_CONFIG"])["task"]["type"] == ("chief" if rank == 0 else "worker")

    with pytest.raises(WorkerFailed, match="exited with status 3"):
        st.Cluster.run(spark, str(script), [str(out), "--fail"], 2, log=False, max_restarts=0).wait()


def test_jax_processes_on_two_executors_train_in_step(spark) -> None:
    pytest.importorskip("jax")

    # Defined here so that Spark pickles it by value: executors cannot import this module.
    def _jax_main(args, ctx):
        """Linear regression across JAX processes: each computes its gradient on its own data and
        all apply the mean, exchanged through JAX's own distributed runtime."""
        import jax
        import jax.numpy as jnp
        from jax.experimental import multihost_utils

        jax.distributed.initialize()
        key = jax.random.PRNGKey(jax.process_index())
        truth = jnp.arange(4.0)
        w = jnp.zeros(4)

        def loss(w, x, y):
            return jnp.mean((x @ w - y) ** 2)

        grad = jax.jit(jax.grad(loss))
        losses = []
        for _ in range(40):
            key, sub = jax.random.split(key)
            x = jax.random.normal(sub, (32, 4))
            y = x @ truth
            g = multihost_utils.process_allgather(grad(w, x, y)).mean(axis=0)
            w = w - 0.1 * g
            losses.append(float(loss(w, x, y)))
        jax.distributed.shutdown()
        return {
            "process": jax.process_index(),
            "count": jax.process_count(),
            "w": w.tolist(),
            "losses": losses,
        }

    with st.Cluster.run(spark, _jax_main, None, 2, log=False) as cluster:
        runs = cluster.results()
    assert [(r["process"], r["count"]) for r in runs] == [(0, 2), (1, 2)]
    np.testing.assert_array_equal(runs[0]["w"], runs[1]["w"])  # the same updates everywhere
    assert runs[0]["losses"][-1] < 0.01 * runs[0]["losses"][0]
    np.testing.assert_allclose(runs[0]["w"], [0.0, 1.0, 2.0, 3.0], atol=0.05)


def test_local_mode_runs_the_trainers_from_the_driver(spark) -> None:
    def _local_main(args, ctx):
        import os

        if args == "fail" and ctx.rank == 1:
            raise RuntimeError("rank 1 gives up")
        ctx.barrier()
        return {"rank": ctx.rank, "pid": os.getpid(), "ppid": os.getppid(), "world": ctx.world_size}

    with st.Cluster.run(spark, _local_main, None, 2, local=True, log=False) as cluster:
        runs = cluster.results()
    assert [r["rank"] for r in runs] == [0, 1]
    # The driver (this process) started both trainers itself: no Spark task in between.
    assert {r["ppid"] for r in runs} == {os.getpid()}
    with pytest.raises(WorkerFailed, match="rank 1 gives up"):
        st.Cluster.run(spark, _local_main, "fail", 2, local=True, log=False, max_restarts=0).wait(timeout=120)
    # GPUs in local mode are the driver's, whatever Spark gives its tasks: the error says so.
    with pytest.raises(
        ConfigurationError, match=r"local mode needs 2 GPUs on the driver .*spark\.driver\.resource"
    ):
        st.Cluster.run(spark, _local_main, None, 2, local=True, log=False, gpus_per_worker=1)


# --- PyTorch, in its own virtualenv ---------------------------------------------------------


def _submit_example(*args: str) -> subprocess.CompletedProcess[str]:
    """``examples/torch_distributor.py`` through spark-submit on a local cluster of two
    executors, everything (driver, executors, trainers) in ``.venv-torch``."""
    from harness.processes import run_in_group
    from harness.torch_env import torch_python_for_tests

    python = torch_python_for_tests()
    submit = python.parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    command = [str(submit), "--master", "local-cluster[2,1,1024]", "--conf", "spark.ui.enabled=false"]
    command += [
        "--conf",
        "spark.driver.host=127.0.0.1",
        str(ROOT / "examples" / "torch_distributor.py"),
        *args,
    ]
    done = run_in_group(command, timeout=420, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _check_ddp(result: dict) -> None:
    assert result["world_size"] == 2
    assert result["ranks_agree"], "DDP left the ranks with different parameters"
    assert result["losses"][-1] < 0.2 * result["losses"][0], result["losses"]


@pytest.mark.spark
def test_the_torch_distributor_example_runs_its_function_on_two_executors() -> None:
    done = _submit_example("--processes", "2")
    _check_ddp(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.spark
def test_the_torch_distributor_example_runs_its_script_and_in_local_mode() -> None:
    done = _submit_example("--processes", "2", "--script")
    # The script prints its result on rank 0; its output streams to the driver.
    lines = [line for line in done.stdout.splitlines() if "RESULT " in line]
    assert lines, done.stdout[-2000:]
    _check_ddp(json.loads(lines[-1].split("RESULT ", 1)[1]))
    done = _submit_example("--processes", "2", "--local-mode")
    _check_ddp(json.loads(done.stdout.strip().splitlines()[-1]))
