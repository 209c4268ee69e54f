"""Makes ``format("tfrecord")`` resolve in every Spark session, with no import and no
``register`` call.

PySpark (4.0 and later) looks for top-level modules whose names start with ``pyspark_`` the first
time a session needs a data source, and registers each one's ``DefaultSource`` under its name.
That lookup imports every such module in one Python worker, so this module must never raise: an
error here would hide every other library's data source too.

A JVM data source of the same name (sparktrain's own file format from its jar, or another
library's) takes precedence over this one; ``sparktrain.tfrecord`` always names sparktrain's.
"""

from __future__ import annotations

import contextlib

# See the docstring: this module must never fail the lookup.
with contextlib.suppress(Exception):
    from sparktrain.tfrecord._source import TFRecordDataSource as DefaultSource

__all__ = ["DefaultSource"]
