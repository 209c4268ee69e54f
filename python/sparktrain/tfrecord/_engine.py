"""Which implementation reads and writes a session's TFRecords: sparktrain's jar (the JVM file
format) or the Python one (Rust through ``mapInArrow`` and the Python data source). Runs on
the driver; the one place that makes this choice, for ``write`` and ``read_dataframe`` alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparktrain import _checks
from sparktrain.errors import InvalidArgumentError
from sparktrain.jvm import has_jvm_format

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Which implementation ``write`` and ``read_dataframe`` use: the jar's when the session has it
#: (``auto``), or the one named.
ENGINES = ("auto", "jvm", "python")
#: The session's default for ``engine="auto"`` (``spark.conf.set(ENGINE_CONF, "python")``).
ENGINE_CONF = "spark.sparktrain.tfrecord.engine"


def choose(engine: object, spark: SparkSession, path: str) -> str:
    """``"jvm"`` or ``"python"``: the implementation ``engine`` asks for in ``spark``; ``auto``
    takes the session's :data:`ENGINE_CONF`, else the jar's where the session has it and its
    Hadoop can reach ``path`` (an ``s3://`` URL needs Hadoop's S3 connector in the session,
    which sparktrain's own client does not)."""
    name = _checks.text("engine", engine).lower()
    if name == "auto":
        configured = spark.conf.get(ENGINE_CONF, "auto")
        name = (configured or "auto").lower()
        if name not in ENGINES:
            raise _checks.refuse(ENGINE_CONF, configured, f"must be one of {', '.join(ENGINES)}")
    if name not in ENGINES:
        raise _checks.refuse("engine", engine, f"must be one of {', '.join(ENGINES)}")
    if name == "python":
        return name
    if not has_jvm_format(spark):
        if name == "jvm":
            raise InvalidArgumentError(
                "engine='jvm' needs sparktrain's jar in the session: "
                "SparkSession.builder.config('spark.jars', sparktrain.jar_path())"
            )
        return "python"
    if name == "auto" and not _hadoop_reaches(spark, path):
        return "python"
    return "jvm"


def _hadoop_reaches(spark: SparkSession, path: str) -> bool:
    """Whether the session's Hadoop has a file system for ``path``'s scheme (bare paths and the
    schemes Hadoop always has are taken as reachable without asking)."""
    scheme = path.split("://", 1)[0].lower() if "://" in path else ""
    if scheme in ("", "file", "hdfs", "viewfs"):
        return True
    from py4j.protocol import Py4JError

    context = spark.sparkContext
    jvm, jsc = context._jvm, context._jsc
    if jvm is None or jsc is None:
        return False
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, jsc.hadoopConfiguration())
    except Py4JError:
        return False
    return True
