"""TFoS's ``TFCluster``: ``run`` a TensorFlow cluster on Spark executors, feed it RDDs in
``InputMode.SPARK``, and ``shutdown``.

``TF_CONFIG`` is exactly TFoS's: with ``master_node="chief"`` task 0 is the ``chief`` and the
others are ``worker`` 0..n-2; without it every node is a ``worker``. ``eval_node=True`` makes the
last node an ``evaluator``.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any

from sparktrain import _checks
from sparktrain._deps import require_spark
from sparktrain.cluster import Cluster
from sparktrain.cluster.launcher import spark_context
from sparktrain.cluster.restarts import DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_BACKOFF
from sparktrain.errors import InvalidArgumentError
from sparktrain.tfos._node import INDEX_COLUMN, ROW_COLUMN, run_map_fun

#: The largest pickled inference output one trainer sends back through the driver.
INFERENCE_RESULT_BYTES = 512 << 20


class InputMode:
    """Where a TFoS job's data comes from."""

    #: The trainers read their data themselves (files, tf.data).
    TENSORFLOW = 0
    #: ``TFCluster.train`` / ``inference`` feed an RDD to the trainers.
    SPARK = 1


def _check_feed(data: Any) -> None:
    """Refuses a ``dataRDD`` that is neither an RDD nor a DataFrame, before any job starts."""
    from pyspark import RDD
    from pyspark.sql import DataFrame

    _checks.instance("dataRDD", data, (RDD, DataFrame), "an RDD or a DataFrame")


def _num_partitions(data: Any) -> int:
    from pyspark.sql import DataFrame

    return int((data.rdd if isinstance(data, DataFrame) else data).getNumPartitions())


def _feed_frame(sc: Any, data: Any) -> tuple[Any, bool]:
    """``data`` as a DataFrame whose first column is the row's position; for an RDD the second
    column holds each row pickled (True), for a DataFrame its own columns follow (False)."""
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F

    if isinstance(data, DataFrame):
        return data.select(F.monotonically_increasing_id().alias(INDEX_COLUMN), *data.columns), False
    session = SparkSession.getActiveSession() or SparkSession(sc)
    pairs = data.zipWithIndex().map(lambda p: (p[1], pickle.dumps(p[0], protocol=pickle.HIGHEST_PROTOCOL)))
    return session.createDataFrame(pairs, f"{INDEX_COLUMN} long, {ROW_COLUMN} binary"), True


class TFCluster:
    """A TFoS job: started by :func:`run`."""

    def __init__(
        self,
        sc: Any,
        map_fun: Callable[[Any, Any], Any],
        tf_args: Any,
        num_workers: int,
        num_evaluators: int,
        input_mode: int,
        master_node: str | None,
        reservation_timeout: float,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        restart_backoff: float = DEFAULT_RESTART_BACKOFF,
    ) -> None:
        self.sc = sc
        self._max_restarts, self._restart_backoff = max_restarts, restart_backoff
        self.input_mode = input_mode
        self._map_fun, self._tf_args, self._master_node = map_fun, tf_args, master_node
        self._num_workers, self._num_evaluators = num_workers, num_evaluators
        self._reservation_timeout = reservation_timeout
        self._cluster: Cluster | None = None
        if input_mode == InputMode.TENSORFLOW:
            self._cluster = self._start(epochs=1, data=None, pickled=False)

    def _start(self, epochs: int, data: Any, pickled: bool, max_result_bytes: int = 64 << 20) -> Cluster:
        packed = (self._map_fun, self._tf_args, self._master_node, epochs, data is not None, pickled)
        return Cluster.run(
            self.sc,
            run_map_fun,
            packed,
            self._num_workers,
            num_evaluators=self._num_evaluators,
            input_mode="spark" if data is not None else "files",
            data=data,
            reservation_timeout=self._reservation_timeout,
            max_result_bytes=max_result_bytes,
            max_restarts=self._max_restarts,
            restart_backoff=self._restart_backoff,
        )

    def _check_spark_mode(self, what: str) -> None:
        if self.input_mode != InputMode.SPARK:
            raise InvalidArgumentError(f"TFCluster.{what} needs input_mode=InputMode.SPARK")

    def train(
        self,
        dataRDD: Any,  # TFoS's name
        num_epochs: int = 0,
        feed_timeout: float = 600,
        qname: str = "input",
    ) -> None:
        """Starts the trainers with ``dataRDD`` (an RDD or a DataFrame) as their input and waits
        until they finish. Every trainer reads its share ``num_epochs`` times (0 means once),
        replayed from a local spool instead of a ``union`` of copies."""
        del feed_timeout, qname
        self._check_spark_mode("train")
        _check_feed(dataRDD)
        num_epochs = _checks.integer("num_epochs", num_epochs, minimum=0)
        frame, pickled = _feed_frame(self.sc, dataRDD)
        self._cluster = self._start(num_epochs, frame, pickled)
        self._cluster.wait()

    def inference(self, dataRDD: Any, feed_timeout: float = 600, qname: str = "input") -> Any:
        """Starts the trainers with ``dataRDD`` as input and returns an RDD of the results they
        passed to ``DataFeed.batch_results``: one per input row, in the input's order."""
        del feed_timeout, qname
        self._check_spark_mode("inference")
        _check_feed(dataRDD)
        frame, pickled = _feed_frame(self.sc, dataRDD)
        self._cluster = self._start(1, frame, pickled, INFERENCE_RESULT_BYTES)
        self._cluster.wait()
        pairs = sorted((p for per_task in self._cluster.results() for p in per_task), key=lambda p: p[0])
        return self.sc.parallelize([result for _, result in pairs], max(1, _num_partitions(dataRDD)))

    def shutdown(self, ssc: Any = None, grace_secs: float = 0, timeout: float = 259200) -> None:
        """Waits for the trainers to finish (at most ``timeout`` seconds, -1 for no limit) and
        raises the first failure. ``ssc`` (Spark Streaming) is not supported."""
        if ssc is not None:
            raise InvalidArgumentError("Spark Streaming (ssc) is not supported")
        if self._cluster is not None:
            try:
                self._cluster.wait(timeout if timeout > 0 else None)
            finally:
                self._cluster.shutdown()
        if grace_secs > 0:
            time.sleep(grace_secs)

    def tensorboard_url(self) -> None:
        """TensorBoard is not started by the shim: run it on ``log_dir`` yourself."""
        return None


def run(
    sc: Any,
    map_fun: Callable[[Any, Any], Any],
    tf_args: Any,
    num_executors: int,
    num_ps: int = 0,
    tensorboard: bool = False,
    input_mode: int = InputMode.TENSORFLOW,
    log_dir: str | None = None,
    driver_ps_nodes: bool = False,
    master_node: str | None = None,
    reservation_timeout: float = 600,
    queues: Any = None,
    eval_node: bool = False,
    release_port: bool = True,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    restart_backoff: float = DEFAULT_RESTART_BACKOFF,
) -> TFCluster:
    """Starts a TFoS-style cluster of ``num_executors`` nodes running ``map_fun(tf_args, ctx)``.

    In ``InputMode.TENSORFLOW`` the nodes start now; in ``InputMode.SPARK`` they start with
    their data when ``train`` or ``inference`` is called. Parameter servers are refused:
    sparktrain trains with MultiWorkerMirroredStrategy-style all-reduce only.

    A node that dies restarts the cluster up to ``max_restarts`` times (see
    :meth:`sparktrain.Cluster.run`); ``map_fun`` sees ``ctx.generation`` and resumes from its
    own checkpoints (Keras: ``tf.keras.callbacks.BackupAndRestore``).

    The arguments are checked at once, on the driver, even in ``InputMode.SPARK``."""
    del tensorboard, log_dir, queues, release_port
    require_spark("sparktrain.tfos.TFCluster.run", arrow_udfs=input_mode == InputMode.SPARK)
    _checks.function("map_fun", map_fun)
    num_executors = _checks.integer("num_executors", num_executors, minimum=1)
    num_ps = _checks.integer("num_ps", num_ps, minimum=0)
    reservation_timeout = _checks.seconds("reservation_timeout", reservation_timeout)
    max_restarts = _checks.integer("max_restarts", max_restarts, minimum=0)
    restart_backoff = _checks.seconds("restart_backoff", restart_backoff, allow_zero=True)
    if num_ps > 0 or driver_ps_nodes:
        raise InvalidArgumentError(
            f"num_ps={num_ps}: parameter servers are not supported; use MultiWorkerMirroredStrategy "
            "(num_ps=0) with master_node='chief'"
        )
    if master_node not in (None, "chief"):
        raise InvalidArgumentError(f"master_node={master_node!r}: use None or 'chief'")
    if input_mode not in (InputMode.TENSORFLOW, InputMode.SPARK):
        raise InvalidArgumentError(f"input_mode={input_mode!r}: use InputMode.TENSORFLOW or InputMode.SPARK")
    num_evaluators = 1 if eval_node else 0
    num_workers = num_executors - num_evaluators
    if num_workers < 1:
        raise InvalidArgumentError(f"num_executors={num_executors} leaves no training node")
    spark_context(sc)
    return TFCluster(
        sc,
        map_fun,
        tf_args,
        num_workers,
        num_evaluators,
        input_mode,
        master_node,
        reservation_timeout,
        max_restarts,
        restart_backoff,
    )


__all__ = [
    "InputMode",
    "TFCluster",
    "run",
]
