"""sparktrain's jar, which the wheel carries: its path, for ``spark.jars``, and whether a
session has it. Runs on the driver.

The jar holds the TFRecord file format for Spark SQL (``format("tfrecord")`` and
``format("sparktrain.tfrecord")`` read and written by the JVM, and usable from SQL) and the
Hadoop TFRecord input and output formats. It comes in two builds of the same sources: one for
Spark 4.x (Scala 2.13) and one for Spark 3.5 (Scala 2.12, ``...-spark3.5.jar``); a JVM loads
only the build of its own Scala. ``sparktrain submit`` adds the right one to every job; a
session built by hand gets it with::

    SparkSession.builder.config("spark.jars", sparktrain.jar_path())
"""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING

from sparktrain.errors import InvalidArgumentError, PathNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The format name that is always sparktrain's: the jar's file format when the session has the
#: jar, else the Python data source. ``tfrecord`` may belong to another library's jar.
OWN_FORMAT = "sparktrain.tfrecord"

#: The name of the Python data source alone (PySpark 4), registered by ``tfrecord.register``.
PYTHON_FORMAT = "sparktrain.tfrecord.python"

#: The class that makes ``format("sparktrain.tfrecord")`` resolve to the jar's file format.
JVM_FORMAT_CLASS = "sparktrain.tfrecord.DefaultSource"

#: The end of the Spark 3.5 build's file name (jars/pom.xml's ``spark3.5`` profile); the
#: Spark 4.x build's is ``sparktrain-hadoop-<version>.jar``.
SPARK35_JAR_SUFFIX = "-spark3.5.jar"


def spark_line(version: str) -> str:
    """``"4"`` or ``"3.5"``: the build of the jar for a Spark version (``"4.1.0"``,
    ``"3.5.1-amzn-0"``). Raises :class:`InvalidArgumentError` for a Spark before 3.5."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    if match is None:
        raise InvalidArgumentError(f"not a Spark version: {version!r}", parameter="spark_version")
    major, minor = int(match.group(1)), int(match.group(2))
    if major >= 4:
        return "4"
    if (major, minor) == (3, 5):
        return "3.5"
    raise InvalidArgumentError(
        f"sparktrain supports Spark 3.5 and 4.x, not Spark {version}", parameter="spark_version"
    )


def _installed_spark_version() -> str | None:
    """The version of the pyspark this interpreter imports, None without one."""
    try:
        import pyspark
    except ImportError:
        return None
    return str(pyspark.__version__)


def jar_path(spark_version: str | None = None) -> str:
    """The path of the jar inside the installed package, for ``spark_version`` (a session's
    ``spark.version``; by default the version of the installed pyspark, else Spark 4.x): the
    Spark 3.5 build for 3.5.x, the Spark 4.x build for 4.x.

    Raises :class:`PathNotFoundError` when this build of sparktrain has no jar for that Spark
    (it was built where Maven was missing, e.g. by the test suite's fast tier), and
    :class:`InvalidArgumentError` for a Spark before 3.5."""
    version = spark_version if spark_version is not None else _installed_spark_version()
    line = spark_line(version) if version is not None else "4"
    folder = resources.files("sparktrain") / "jars"
    jars = sorted(p.name for p in folder.iterdir() if p.name.endswith(".jar")) if folder.is_dir() else []
    matching = [name for name in jars if name.endswith(SPARK35_JAR_SUFFIX) == (line == "3.5")]
    if not matching:
        has = f" (it has {', '.join(jars)})" if jars else ""
        raise PathNotFoundError(
            f"this sparktrain was built without its jar for Spark {line}{'.x' if line == '4' else ''} "
            f"in {folder}{has}; `bash submit/install.sh` builds both where Maven and a JDK are on PATH",
            path=str(folder),
        )
    return str(folder / matching[-1])


def has_jvm_format(spark: SparkSession) -> bool:
    """Whether ``spark``'s driver JVM has sparktrain's TFRecord file format (the jar is on
    ``spark.jars``). False for Spark Connect sessions, which have no JVM in this process."""
    context = getattr(spark, "sparkContext", None)
    jvm = getattr(context, "_jvm", None) if context is not None else None
    if jvm is None:
        return False
    from py4j.protocol import Py4JError

    try:
        # Spark's own lookup loads data sources through the thread's context class loader,
        # which is where spark.jars lands.
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(JVM_FORMAT_CLASS, False, loader)
    except Py4JError:
        return False
    return True


__all__ = ["jar_path"]
