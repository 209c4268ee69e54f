"""Running sparktrain jobs where users' Spark runs: YARN, Kubernetes, standalone, local.

- :mod:`sparktrain.deploy.pack`: packs the current virtualenv or conda env into an archive
  for ``--archives``, and says which confs use it.
- :mod:`sparktrain.deploy.submit`: builds and runs the ``spark-submit`` command of a training
  job, with the confs such a job needs and an enforced time limit.
- :mod:`sparktrain.deploy.doctor`: checks a Spark session and its storage for what would make a
  training job fail, and says how to fix each finding.

All three are also subcommands of the ``sparktrain`` console script (see :mod:`sparktrain.cli`).
"""

from sparktrain.deploy import doctor, pack, submit

__all__ = ["doctor", "pack", "submit"]
