"""A Spark session on ``local-cluster[<executors>,<cores>,1024]`` (two executors unless told
otherwise): separate executor JVMs and Python workers, as on a real cluster, everything bound to
127.0.0.1, with the sparktrain jar on the classpath."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]


def _version() -> str:
    """The project's version, as ``Cargo.toml`` (and so the jar's name) gives it."""
    for line in (ROOT / "Cargo.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise RuntimeError("Cargo.toml names no version")


def sparktrain_jar() -> Path:
    """The jar that ``tests/run.sh`` builds, for the installed pyspark's Spark line (the Spark
    3.5 build, ``-spark3.5``, under PySpark 3.5); built here with Maven when it is missing, so a
    benchmark or a single test runs from a fresh clone too."""
    import pyspark

    from sparktrain.jvm import spark_line

    version = _version()
    spark35 = spark_line(pyspark.__version__) == "3.5"
    jar = ROOT / "jars" / "target" / f"sparktrain-hadoop-{version}{'-spark3.5' if spark35 else ''}.jar"
    if not jar.exists():
        pom = str(ROOT / "jars" / "pom.xml")
        profile = ["-Pspark3.5"] if spark35 else []
        subprocess.run(
            ["mvn", "-q", "-B", "-f", pom, "package", "-DskipTests", f"-Drevision={version}", *profile],
            check=True,
        )
    return jar


def local_cluster_session(
    app_name: str,
    cores: int = 1,
    conf: dict[str, str] | None = None,
    jars: tuple[str, ...] = (),
    executors: int = 2,
) -> SparkSession:
    """A new session on ``executors`` executors with ``cores`` cores and 1 GiB each, plus
    ``conf`` and ``jars`` beside sparktrain's; executors run this interpreter
    (``PYSPARK_PYTHON``), so they import the same sparktrain."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = (
        builder.master(f"local-cluster[{executors},{cores},1024]")
        .appName(app_name)
        .config("spark.jars", ",".join([str(sparktrain_jar()), *jars]))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.TF_CPP_MIN_LOG_LEVEL", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
