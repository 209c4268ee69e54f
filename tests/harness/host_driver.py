"""A driver program for :class:`harness.hosts.HostCluster`: ``python -m harness.host_driver
'<spec json>'`` starts a Spark session with the spec's confs, runs
``<module>.<function>(spark, **kwargs)`` and writes ``RESULT {json}`` with what it returned, or
``ERROR {json}`` with the error's type, message and traceback. Runs in the driver host.

These lines, and the ``STATUS`` lines a job writes with :func:`emit`, go to a pipe of their own
(the descriptor in ``HOSTS_PROTOCOL_FD``): on stdout and stderr they would be cut into by the
JVM's log and the trainers' output.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import threading
import traceback
from typing import Any

_lock = threading.Lock()
_channel = os.fdopen(int(os.environ.get("HOSTS_PROTOCOL_FD", "1")), "w", buffering=1, closefd=False)


def emit(kind: str, value: Any) -> None:
    """Writes one ``KIND {json}`` line to the test, whole."""
    line = f"{kind} {json.dumps(value)}\n"
    with _lock:
        _channel.write(line)
        _channel.flush()


def main() -> int:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"hosts-{spec['function']}")
    for key, value in spec["conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        module = importlib.import_module(spec["module"])
        # The trainers get the job's functions by value, as a user's own script's would be.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)
        function = getattr(module, spec["function"])
        value = function(spark, **spec["kwargs"])
    except BaseException as e:
        error = {"type": type(e).__name__, "error": str(e), "traceback": traceback.format_exc()}
        emit("ERROR", error)
        return 1
    finally:
        spark.stop()
    emit("RESULT", value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
