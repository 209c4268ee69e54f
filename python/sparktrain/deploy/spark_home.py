"""The Spark a job is submitted with: its ``spark-submit``, its home and version, and the build
of sparktrain's jar for it. Runs in the ``sparktrain submit`` command, on the machine that
submits."""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys

from sparktrain.errors import InvalidArgumentError, PathNotFoundError
from sparktrain.jvm import jar_path


def bundled_jar(spark_version: str | None = None) -> list[str]:
    """sparktrain's jar (the JVM TFRecord format) for ``spark_version`` (default: this
    interpreter's pyspark) as a one-item list, or an empty one when this build has none; every
    job gets it."""
    try:
        return [jar_path(spark_version)]
    except PathNotFoundError:
        return []


def spark_version_of(spark_submit: str) -> str | None:
    """The version of the Spark that ``spark_submit`` runs, from the name of the ``spark-core``
    jar of its Spark home: ``$SPARK_HOME``, else the one :meth:`SubmitSpec.environment` sets
    (this interpreter's pyspark), else the folder above ``spark_submit``'s ``bin/``. None when
    it has no such jar. sparktrain's jar must be the build for that Spark's Scala."""
    home = os.environ.get("SPARK_HOME") or spark_home() or os.path.dirname(os.path.dirname(spark_submit))
    for path in sorted(glob.glob(os.path.join(home, "jars", "spark-core_*.jar"))):
        match = re.fullmatch(r"spark-core_[\d.]+-(\d+\.\d+\S*)\.jar", os.path.basename(path))
        if match:
            return match.group(1)
    return None


def spark_home() -> str | None:
    """The Spark of the pyspark package this interpreter imports, if any."""
    try:
        import pyspark
    except ImportError:
        return None
    return os.path.dirname(pyspark.__file__)


def find_spark_submit() -> str:
    """``$SPARK_HOME/bin/spark-submit``, else the one next to this interpreter (the pyspark
    wheel's), else the first on ``PATH``."""
    home = os.environ.get("SPARK_HOME")
    candidates = [os.path.join(home, "bin", "spark-submit")] if home else []
    candidates.append(os.path.join(os.path.dirname(sys.executable), "spark-submit"))
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("spark-submit")
    if found is None:
        raise InvalidArgumentError(
            "spark-submit not found: set SPARK_HOME, or pip install 'sparktrain[spark]' into this environment"
        )
    return found


__all__ = ["bundled_jar", "find_spark_submit", "spark_home", "spark_version_of"]
