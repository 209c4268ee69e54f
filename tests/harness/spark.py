"""A Spark session on ``local-cluster[2,<cores>,1024]``: separate executor JVMs and Python workers, as
on a real cluster, everything bound to 127.0.0.1, with the sparktrain jar on the classpath."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]


def sparktrain_jar() -> Path:
    """The jar that ``tests/run.sh`` (or ``mvn -f jars/pom.xml package``) builds."""
    jars = sorted((ROOT / "jars" / "target").glob("sparktrain-hadoop-*.jar"))
    if not jars:
        raise RuntimeError("jars/target/sparktrain-hadoop-*.jar is missing: run mvn -f jars/pom.xml package")
    return jars[-1]


def local_cluster_session(app_name: str, cores: int = 1, conf: dict[str, str] | None = None) -> SparkSession:
    """A new session on two executors with ``cores`` cores and 1 GiB each, plus ``conf``;
    executors run this interpreter (``PYSPARK_PYTHON``), so they import the same sparktrain."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = (
        builder.master(f"local-cluster[2,{cores},1024]")
        .appName(app_name)
        .config("spark.jars", str(sparktrain_jar()))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.TF_CPP_MIN_LOG_LEVEL", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
