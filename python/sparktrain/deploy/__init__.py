"""Running sparktrain jobs where users' Spark runs: YARN, Kubernetes, standalone, local. Runs
in the ``sparktrain`` command and on the driver, never in a task or a trainer.

- :mod:`sparktrain.deploy.pack`: packs the current virtualenv or conda env into an archive
  for ``--archives``, and says which confs use it.
- :mod:`sparktrain.deploy.submit`: the ``sparktrain submit`` command, which builds
  (:mod:`~sparktrain.deploy.spec`) and runs (:mod:`~sparktrain.deploy.process`) the
  ``spark-submit`` command of a training job, with the confs such a job needs
  (:mod:`~sparktrain.deploy.cluster_managers`, :mod:`~sparktrain.deploy.spark_home`) and an
  enforced time limit.
- :mod:`sparktrain.deploy.doctor`: checks a Spark session and its storage for what would make a
  training job fail (:mod:`~sparktrain.deploy.probes`, :mod:`~sparktrain.deploy.kerberos`, and
  the launcher's own conf checks), and says how to fix each finding.

All three are also subcommands of the ``sparktrain`` console script (see :mod:`sparktrain.cli`).
Each loads on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["doctor", "pack", "submit"]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"sparktrain.deploy.{name}")
    raise AttributeError(f"module 'sparktrain.deploy' has no attribute {name!r}")
