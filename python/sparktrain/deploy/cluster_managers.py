"""What differs between the cluster managers a job is submitted to: how executors are sized,
how the driver's container gets environment variables, and how an application is found in
``spark-submit``'s output (:mod:`sparktrain.deploy.process` kills it by that name). Runs in the
``sparktrain submit`` command, on the machine that submits.
"""

from __future__ import annotations

import re

_YARN_APPLICATION = re.compile(r"\b(application_\d+_\d+)\b")
_K8S_POD = re.compile(r"\bpod name: (\S+)")


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
