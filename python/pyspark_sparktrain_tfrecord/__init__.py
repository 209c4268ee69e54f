"""Makes ``format("sparktrain.tfrecord")``, the name no other library claims, resolve in every
Spark session (see :mod:`pyspark_sparktrain`, which does the same for ``tfrecord``; PySpark
registers one source per module). sparktrain's jar, when loaded, answers to the name first."""

from __future__ import annotations

import contextlib

# Never fail: PySpark's lookup imports every pyspark_* module in one worker.
with contextlib.suppress(Exception):
    from sparktrain.tfrecord._source import SparktrainTFRecordDataSource as DefaultSource

__all__ = ["DefaultSource"]
