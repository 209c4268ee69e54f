"""What differs between the cluster managers a job is submitted to: how executors are sized,
how the driver's container gets environment variables, and how an application is found in
``spark-submit``'s output and killed from outside.

Killing matters for the time limit: in YARN or Kubernetes cluster mode the driver runs in the
cluster, so stopping ``spark-submit`` alone would leave the application running.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparktrain.deploy.submit import SubmitSpec

_YARN_APPLICATION = re.compile(r"\b(application_\d+_\d+)\b")
_K8S_POD = re.compile(r"\bpod name: (\S+)")
#: YARN's ``yarn application`` command, a class in the Hadoop client jar Spark ships.
YARN_CLI = "org.apache.hadoop.yarn.client.cli.ApplicationCLI"
#: Seconds each attempt to kill an application may take.
KILL_TIMEOUT_S = 30.0


def sizing(profile: str, workers: int, cores: int) -> dict[str, str]:
    """The confs that ask the cluster manager for ``workers`` executors of ``cores`` cores."""
    if profile in ("standalone", "local-cluster"):
        # A standalone master (a local cluster runs one) hands out cores, not executors. The
        # maximum is also what minRegisteredResourcesRatio waits for: without it, nothing.
        return {"spark.cores.max": str(workers * cores)}
    if profile in ("yarn", "kubernetes"):
        return {"spark.executor.instances": str(workers)}
    return {}


def driver_env_prefix(profile: str) -> str:
    """The conf prefix that sets an environment variable of a driver running in the cluster
    (YARN or Kubernetes: the only profiles with a cluster deploy mode for Python)."""
    return {"yarn": "spark.yarn.appMasterEnv.", "kubernetes": "spark.kubernetes.driverEnv."}[profile]


def application_id(line: str) -> str | None:
    """The application a line of ``spark-submit``'s output names: a YARN application id, or a
    Kubernetes driver pod."""
    match = _YARN_APPLICATION.search(line)
    if match:
        return match.group(1)
    match = _K8S_POD.search(line)
    return match.group(1) if match else None


def runs_outside_submit(spec: SubmitSpec) -> bool:
    """Whether the application outlives a stopped ``spark-submit``: on YARN (whose client may
    have returned after submitting) and in Kubernetes cluster mode."""
    return spec.profile == "yarn" or (spec.profile == "kubernetes" and spec.mode == "cluster")


def kill(spec: SubmitSpec, application: str | None, spark_submit: str) -> str | None:
    """Kills ``application`` on its cluster; returns how, or None when nothing outside
    ``spark-submit`` needed killing or it could not be done (the caller stops the submit's
    process group either way). ``spark_submit`` is the one that submitted it."""
    if application is None or not runs_outside_submit(spec):
        return None
    if spec.profile == "yarn":
        return _kill_yarn(application)
    done = _quiet(_kubernetes_kill_command(spec, application, spark_submit), spec.environment())
    return "spark-submit --kill" if done else None


def manual_kill(spec: SubmitSpec, application: str, spark_submit: str) -> str:
    """The command a user runs to kill ``application`` by hand; ``spark_submit`` is the one
    that submitted it."""
    if spec.profile == "yarn":
        return f"yarn application -kill {application}"
    return shlex.join(_kubernetes_kill_command(spec, application, spark_submit))


def _kubernetes_kill_command(spec: SubmitSpec, application: str, spark_submit: str) -> list[str]:
    # The same Kubernetes client settings as the submission (context, namespace, credentials).
    submitted = spec.confs()
    confs = [
        arg
        for key, value in submitted.items()
        if key.startswith("spark.kubernetes.")
        for arg in ("--conf", f"{key}={value}")
    ]
    namespace = submitted.get("spark.kubernetes.namespace", "default")
    return [spark_submit, "--master", spec.master, *confs, "--kill", f"{namespace}:{application}"]


def _kill_yarn(application: str) -> str | None:
    """Through Hadoop's ``yarn`` command when there is one, else through the same YARN client
    class run from Spark's own jars: it reads ``HADOOP_CONF_DIR`` (HA, Kerberos) as Spark does."""
    yarn = shutil.which("yarn")
    if yarn and _quiet([yarn, "application", "-kill", application]):
        return "yarn application -kill"
    from sparktrain.deploy.submit import spark_home

    home = os.environ.get("SPARK_HOME") or spark_home()
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    if home is None:
        return None
    confs = [os.environ[v] for v in ("YARN_CONF_DIR", "HADOOP_CONF_DIR") if os.environ.get(v)]
    classpath = os.pathsep.join([*confs, os.path.join(home, "jars", "*")])
    command = [java, "-cp", classpath, YARN_CLI, "application", "-kill", application]
    return "YARN's application client" if _quiet(command) else None


def _quiet(command: list[str], env: dict[str, str] | None = None) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, timeout=KILL_TIMEOUT_S, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
