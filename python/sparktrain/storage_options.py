"""Object-store settings (S3, GCS, Azure), carried from a Spark session to every process that
touches storage. :func:`of_session` runs on the driver, :func:`from_options` in the tasks of
the ``tfrecord`` data source; the tasks and trainers apply what they are given with
:func:`sparktrain.fs.configure`.

sparktrain's native client reads Hadoop's object-store keys (``fs.s3a.*``, ``fs.gs.*``,
``fs.azure.*``) from ``core-site.xml``, from :func:`sparktrain.fs.configure`, and each cloud's
environment variables (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``). Spark users set those keys as
``spark.hadoop.fs.s3a.endpoint`` and the like, which live in the driver's JVM: the Spark entry
points (``tfrecord.write``, ``read_dataframe``, ``Cluster.run``, ``train``, ``predict``) take them
with :func:`of_session`, apply them in the driver's process, and carry them in their tasks,
which apply them with :func:`sparktrain.fs.configure` before touching storage. Like the job secret, the keys
travel in the Spark task closures; see ``docs/security.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktrain import fs

#: The prefixes of the keys the object stores read.
KEY_PREFIXES = ("fs.s3a.", "fs.gs.", "fs.azure.")

_HADOOP_CONF = "spark.hadoop."


def is_object_store_key(key: str) -> bool:
    """Whether ``key`` is one the object stores read."""
    return key.startswith(KEY_PREFIXES)


def of_session(spark: Any) -> dict[str, str]:
    """The object-store keys of ``spark`` (a session or its SparkContext: its
    ``spark.hadoop.fs.s3a.*`` etc. confs), over the ones configured in this process, applied to
    this process too so that the driver's own checks see the same store as the tasks."""
    options = fs.configured()
    context = spark if hasattr(spark, "getConf") else getattr(spark, "sparkContext", None)
    if context is not None:
        for key, value in context.getConf().getAll():
            if key.startswith(_HADOOP_CONF) and is_object_store_key(key[len(_HADOOP_CONF) :]):
                options[key[len(_HADOOP_CONF) :]] = value
    fs.configure(options)
    return options


def from_options(options: Mapping[str, str]) -> dict[str, str]:
    """The object-store keys among a data source's options (``.option("fs.s3a.endpoint",
    ...)``), as Spark's own file sources take Hadoop settings per read or write."""
    return {k: v for k, v in options.items() if is_object_store_key(k.lower())}


__all__ = ["KEY_PREFIXES", "from_options", "is_object_store_key", "of_session"]
