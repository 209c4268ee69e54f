"""sparktrain's jar, which the wheel carries: its path, for ``spark.jars``.

The jar holds the TFRecord file format for Spark SQL (``format("tfrecord")`` and
``format("sparktrain.tfrecord")`` read and written by the JVM, and usable from SQL) and the
Hadoop TFRecord input and output formats. ``sparktrain submit`` adds it to every job; a session
built by hand gets it with::

    SparkSession.builder.config("spark.jars", sparktrain.jar_path())
"""

from __future__ import annotations

from importlib import resources

from sparktrain.errors import PathNotFoundError


def jar_path() -> str:
    """The path of the jar inside the installed package.

    Raises :class:`PathNotFoundError` when this build of sparktrain has no jar (it was built
    where Maven was missing, e.g. by the test suite's fast tier)."""
    folder = resources.files("sparktrain") / "jars"
    jars = sorted(str(p) for p in folder.iterdir() if p.name.endswith(".jar")) if folder.is_dir() else []
    if not jars:
        raise PathNotFoundError(
            f"this sparktrain was built without its jar (nothing in {folder}); "
            "`bash submit/install.sh` builds it where Maven and a JDK are on PATH",
            path=str(folder),
        )
    return jars[-1]


__all__ = ["jar_path"]
