"""TFoS's ``TFCluster``: ``run`` a TensorFlow cluster on Spark executors, feed it RDDs in
``InputMode.SPARK`` (``train``, and ``inference``, which returns a lazy RDD of results), or a
stream (``train(dstream)``, and ``stream_feeder()`` for Structured Streaming), and
``shutdown``. Runs on the driver.

The cluster is one barrier stage of sparktrain's launcher: ``num_executors`` tasks, the
training nodes first (task 0 is the chief), then the ``num_ps`` parameter servers, then the
evaluator. ``TF_CONFIG`` and ``ctx`` name them as TFoS does (see :mod:`sparktrain.tfos._node`):
with ``master_node="chief"`` (or ``"master"``) task 0 is that node and the others are
``worker`` 0..n-2; without it every training node is a ``worker``. Parameter servers are
``ps``, listed in ``TF_CONFIG`` so that ParameterServerStrategy (or an Estimator's ps/worker
training) finds them; they run ``map_fun`` in the background and stop when training ends.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import random
import time
from collections.abc import Callable
from typing import Any

from sparktrain import _checks, _spark
from sparktrain._deps import require_spark
from sparktrain.cluster.driver.launcher import Cluster
from sparktrain.cluster.driver.restarts import DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_BACKOFF
from sparktrain.errors import InvalidArgumentError, SlotsUnavailable
from sparktrain.tfos import reservation
from sparktrain.tfos._feed import INDEX_COLUMN, ROW_COLUMN
from sparktrain.tfos._node import DEFAULT_EPOCHS, DSTREAM, OFFSET_BITS, STRUCTURED, NodePlan, run_map_fun
from sparktrain.tfos._streaming import StreamFeeder, StreamNodes, feed_rdd

#: How often ``run`` looks whether every node has registered.
_NODE_POLL_SECONDS = 0.1

_log = logging.getLogger("sparktrain.tfos")

#: The largest pickled inference output one node keeps for the result RDD.
INFERENCE_RESULT_BYTES = 512 << 20
#: Seconds between looks at the chief's report of its TensorBoard port.
_POLL_SECONDS = 0.2


class InputMode:
    """Where a TFoS job's data comes from."""

    #: The nodes read their data themselves (files, tf.data).
    TENSORFLOW = 0
    #: ``TFCluster.train`` / ``inference`` feed an RDD to the nodes.
    SPARK = 1


def _check_feed(data: Any) -> None:
    """Refuses a ``dataRDD`` that is neither an RDD nor a DataFrame, before any job starts."""
    from pyspark import RDD
    from pyspark.sql import DataFrame

    _checks.instance("dataRDD", data, (RDD, DataFrame), "an RDD or a DataFrame")
    if isinstance(data, DataFrame) and data.isStreaming:
        raise InvalidArgumentError(
            "dataRDD: a streaming DataFrame is fed by its query: "
            "df.writeStream.foreachBatch(cluster.stream_feeder())...start()"
        )


def _dstream_class() -> type | None:
    """PySpark's ``DStream``, or None where ``pyspark.streaming`` is gone."""
    try:
        from pyspark.streaming import DStream
    except ImportError:
        return None
    return DStream


def _is_streaming_context(value: Any) -> bool:
    try:
        from pyspark.streaming import StreamingContext
    except ImportError:
        return False
    return isinstance(value, StreamingContext)


def _server_host(sc: Any) -> str:
    """Where the reservation server listens: ``TFOS_SERVER_HOST``, else the driver's host as
    Spark knows it, else this host's outward address."""
    from sparktrain.tfos.util import get_ip_address

    host = os.environ.get(reservation.TFOS_SERVER_HOST) or sc.getConf().get("spark.driver.host")
    return str(host) if host else get_ip_address()


def _num_partitions(data: Any) -> int:
    from pyspark.sql import DataFrame

    return int((data.rdd if isinstance(data, DataFrame) else data).getNumPartitions())


def _feed_frame(sc: Any, data: Any) -> tuple[Any, bool]:
    """``data`` as a DataFrame whose first column is the row's position (its partition in the
    bits above :data:`OFFSET_BITS`, its offset there below); for an RDD the second column
    holds each row pickled (True), for a DataFrame its own columns follow (False). Starts no
    Spark job."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    if isinstance(data, DataFrame):
        return data.select(F.monotonically_increasing_id().alias(INDEX_COLUMN), "*"), False
    session = _spark.session(sc)
    shift = OFFSET_BITS

    def tag(split: int, rows: Any) -> Any:
        base = split << shift
        for offset, row in enumerate(rows):
            yield base + offset, pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL)

    pairs = data.mapPartitionsWithIndex(tag)
    return session.createDataFrame(pairs, f"{INDEX_COLUMN} long, {ROW_COLUMN} binary"), True


def _in_input_order(kept: Any, partitions: int) -> Any:
    """The nodes' ``(position, result)`` pairs (an RDD of one list per node) as an RDD of the
    results alone, partitioned like the input and in its order, computed on the executors."""
    shift = OFFSET_BITS

    def in_order(pairs: Any) -> Any:
        return [result for _, result in sorted(pairs, key=lambda p: p[0])]

    by_input = kept.flatMap(lambda results: results or []).partitionBy(partitions, lambda pos: pos >> shift)
    return by_input.mapPartitions(in_order, preservesPartitioning=True)


def _lazy_rdd_class() -> type:
    """:class:`pyspark.RDD`'s subclass for results computed on first use (pyspark is imported
    only when a Spark job is at hand)."""
    from pyspark import RDD

    class InferenceRDD(RDD):  # type: ignore[type-arg]
        """The RDD ``TFCluster.inference`` returns, and every RDD mapped from it: the nodes'
        job runs at the first action (``collect``, ``count``, ``saveAsTextFile``...), and the
        results are read from the executors where the nodes left them.

        ``map``, ``flatMap``, ``filter``, ``mapPartitions`` and the like (all of which go
        through ``mapPartitionsWithIndex``) stay lazy, as does ``getNumPartitions``; an
        operation that needs the JVM RDD itself (``union``, ``persist``, ``partitionBy``)
        runs the job when it is called."""

        def __init__(self, sc: Any, compute: Callable[[], Any], num_partitions: int) -> None:
            # RDD.__init__ takes the JVM RDD, which exists only once the job has run.
            self.ctx = sc
            self.is_cached = False
            self.is_checkpointed = False
            self.has_resource_profile = False
            self.partitioner = None
            self._compute = compute
            self._num_partitions = num_partitions
            self._results: Any = None
            self._failure: BaseException | None = None

        def _materialized(self) -> Any:
            if self._failure is not None:
                raise self._failure
            if self._results is None:
                try:
                    self._results = self._compute()
                except BaseException as e:
                    self._failure = e
                    raise
            return self._results

        def __getattr__(self, name: str) -> Any:
            # Only what RDD.__init__ would have set from the JVM RDD is missing here.
            if name == "_jrdd":
                rdd = self._materialized()
                if self.__dict__.get("_bypass_serializer"):
                    # partitionBy sets this on the RDD it keys (this one) before it reads
                    # _jrdd: the RDD that really runs must write its pairs unbatched too.
                    rdd._bypass_serializer = True
                serializer = self.__dict__.get("_jrdd_deserializer")
                if serializer is not None:
                    # zip (through _reserialize) sets the batching this RDD is to be written
                    # with before it reads _jrdd: the RDD that really runs must write so.
                    rdd._jrdd_deserializer = serializer
                return rdd._jrdd
            if name == "_jrdd_deserializer":
                return self._materialized()._jrdd_deserializer
            if name == "_id":
                return self._materialized().id()
            raise AttributeError(name)

        def mapPartitionsWithIndex(self, f: Any, preservesPartitioning: bool = False) -> Any:
            """Lazy: ``f`` applies to the results once an action needs them."""
            parent = self

            def compute() -> Any:
                return RDD.mapPartitionsWithIndex(parent._materialized(), f, preservesPartitioning)

            return type(self)(self.ctx, compute, self._num_partitions)

        def getNumPartitions(self) -> int:
            """The input's number of partitions, known without running the job."""
            return self._num_partitions

        def __repr__(self) -> str:
            if self._results is None:
                return "TFCluster.inference results (not computed yet)"
            return repr(self._results)

    return InferenceRDD


class TFCluster:
    """A TFoS job, started by :func:`run`.

    ``server`` is the job's :class:`~sparktrain.tfos.reservation.Server` and
    ``cluster_meta["server_addr"]`` its address (the one TFoS's ``stop_streaming.py`` takes);
    both, and ``cluster_meta["default_fs"]``, are there once the nodes start (at ``run`` in
    ``InputMode.TENSORFLOW``, else at ``train``, ``stream_feeder`` or the first action on
    ``inference``'s RDD); ``cluster_info`` lists the nodes' reservations."""

    def __init__(
        self,
        sc: Any,
        plan: NodePlan,
        num_executors: int,
        num_ps: int,
        num_evaluators: int,
        input_mode: int,
        reservation_timeout: float,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        restart_backoff: float = DEFAULT_RESTART_BACKOFF,
    ) -> None:
        self.sc = sc
        self.input_mode = input_mode
        self.num_executors = num_executors
        self._num_ps, self._num_evaluators = num_ps, num_evaluators
        self._reservation_timeout = reservation_timeout
        self._max_restarts, self._restart_backoff = max_restarts, restart_backoff
        self._cluster: Cluster | None = None
        self._tensorboard: str | None = None
        self._stream: StreamNodes | None = None
        self._stream_kind: str | None = None
        self._stream_ended = False
        self._shut_down = False
        # Signs the nodes' reservations and authenticates the stream's connections.
        self._key = os.urandom(32)
        self._plan = dataclasses.replace(plan, stream_key=self._key)
        self.server: reservation.Server | None = None
        self.cluster_meta: dict[str, Any] = {
            "id": random.getrandbits(64),
            "num_executors": num_executors,
            "working_dir": os.getcwd(),
            "release_port": plan.release_port,
        }
        if input_mode == InputMode.TENSORFLOW:
            self._cluster = self._start(self._plan, data=None)
            self._await_nodes(self._cluster)

    def _await_nodes(self, cluster: Cluster) -> None:
        """Waits, as TFoS's ``run`` does, until every node has registered its reservation, so
        that ``cluster_info`` is complete when ``run`` returns. Stops waiting when the job has
        ended or failed (``shutdown`` reports its failure) or after ``reservation_timeout``
        (the launcher fails a job whose tasks do not register by then)."""
        assert self.server is not None
        deadline = time.monotonic() + self._reservation_timeout
        while not self.server.reservations.done() and time.monotonic() < deadline:
            if cluster.status()["state"] in ("succeeded", "failed", "shut down"):
                return
            time.sleep(_NODE_POLL_SECONDS)

    def _serve_reservations(self) -> tuple[str, int]:
        """Starts the job's reservation server (once); returns its address."""
        if self.server is None:
            server = reservation.Server(self.num_executors, host=_server_host(self.sc), key=self._key)
            address = server.start()
            _log.info(
                "TFoS reservation server at %s (reservation.Client(addr).request_stop() stops a stream)",
                address,
            )
            self.server = server
            self.cluster_meta["server_addr"] = address
            # Read as the nodes start, like the server: nothing touches Spark before them.
            self.cluster_meta.setdefault("default_fs", self.sc._jsc.hadoopConfiguration().get("fs.defaultFS"))
        host, port = self.cluster_meta["server_addr"]
        return str(host), int(port)

    def _stop_server(self) -> None:
        """Stops the job's reservation server, if it started (stopping it twice is harmless)."""
        if self.server is not None:
            self.server.stop()

    @property
    def cluster_info(self) -> list[Any]:
        """The nodes' reservations (TFoS's ``cluster_info``): one dict per node that started,
        with its ``executor_id``, ``host``, ``job_name``, ``task_index``, TensorFlow ``port``,
        ``tb_port``, and in a streaming job its stream endpoint as ``addr``."""
        return self.server.reservations.get() if self.server is not None else []

    def _start(self, plan: NodePlan, data: Any, keep_results: bool = False) -> Cluster:
        """Starts the nodes, and the reservation server with the first of them. A first start
        that fails leaves no server running (the next start gets a fresh one); a start after
        ``shutdown`` is refused, since nothing would stop what it started."""
        if self._shut_down:
            raise InvalidArgumentError(
                "this TFCluster was shut down: its nodes do not start again; "
                "start a new cluster with TFCluster.run"
            )
        first = self._cluster is None
        server_addr = self._serve_reservations()
        try:
            return self._launch(dataclasses.replace(plan, server_addr=server_addr), data, keep_results)
        except BaseException:
            if first:
                self._stop_server()
                self.server = None
                del self.cluster_meta["server_addr"]
            raise

    def _launch(self, plan: NodePlan, data: Any, keep_results: bool) -> Cluster:
        extra = self._num_ps + self._num_evaluators
        return Cluster.run(
            self.sc,
            run_map_fun,
            plan,
            self.num_executors - extra,
            num_evaluators=extra,
            evaluator_roles=["ps"] * self._num_ps + ["evaluator"] * self._num_evaluators,
            input_mode="spark" if data is not None else "files",
            data=data,
            reservation_timeout=self._reservation_timeout,
            max_result_bytes=INFERENCE_RESULT_BYTES if plan.inference else 64 << 20,
            max_restarts=self._max_restarts,
            restart_backoff=self._restart_backoff,
            keep_results=keep_results,
            release_tf_port=plan.release_port,
        )

    def _check_spark_mode(self, what: str) -> None:
        if self.input_mode != InputMode.SPARK:
            raise InvalidArgumentError(f"TFCluster.{what} needs input_mode=InputMode.SPARK")

    def _fed_plan(self, frame_pickled: bool, epochs: int, inference: bool) -> NodePlan:
        return dataclasses.replace(
            self._plan, epochs=epochs, fed=True, pickled_rows=frame_pickled, inference=inference
        )

    def _running(self) -> Cluster:
        assert self._cluster is not None
        return self._cluster

    def _start_stream(self, kind: str) -> StreamNodes:
        """Starts the nodes of a streaming job (once), after checking that the cluster has
        task slots left for the Spark tasks that feed them."""
        if self._stream is not None and self._stream_kind == kind == STRUCTURED and not self._stream_ended:
            return self._stream
        if self._cluster is not None:
            raise InvalidArgumentError(
                "this TFCluster has started its nodes already: start one TFCluster per train call or stream"
            )
        nodes = self.num_executors
        slots = _spark.available_slots(self.sc)
        if slots <= nodes:
            raise SlotsUnavailable(
                f"a stream is fed by Spark tasks that run beside its {nodes} nodes, and this cluster has "
                f"{slots} task slots: give it at least {nodes + 1} (more executors or cores)",
                needed=nodes + 1,
                available=slots,
            )
        self._cluster = self._start(dataclasses.replace(self._plan, stream=kind), data=None)
        assert self.server is not None
        self._stream = StreamNodes(self._running, self.server, self._key, nodes, self._reservation_timeout)
        self._stream_kind = kind
        return self._stream

    def train(
        self,
        dataRDD: Any,  # TFoS's name
        num_epochs: int = 0,
        feed_timeout: float = 600,
        qname: str = "input",
    ) -> None:
        """Starts the nodes with ``dataRDD`` (an RDD or a DataFrame) as their input and waits
        until they finish. Every node reads its share ``num_epochs`` times (0 means 10, as in
        TFoS), replayed from a local spool instead of a ``union`` of copies. A node that calls
        ``terminate()`` reads no more. ``qname`` is accepted for compatibility.

        ``dataRDD`` may also be a Spark Streaming ``DStream``: the nodes start now and this
        returns at once; start the ``StreamingContext`` next, then call ``shutdown(ssc)``. Each
        partition of each of its RDDs is sent to one node, whose ``TFNode.DataFeed(ctx.mgr)``
        reads the rows of every micro-batch in turn, waiting for more, until ``shutdown``;
        the Spark task that sent them waits up to ``feed_timeout`` seconds for the node to read
        them. A node that calls ``terminate()`` reads no more, and the streaming job is then
        stopped at ``shutdown``. The nodes run for as long as the stream, so the cluster needs
        a task slot beside theirs for the tasks that feed them."""
        del qname
        self._check_spark_mode("train")
        dstream = _dstream_class()
        if dstream is not None and isinstance(dataRDD, dstream):
            self._train_dstream(dataRDD, _checks.seconds("feed_timeout", feed_timeout))
            return
        _check_feed(dataRDD)
        num_epochs = _checks.integer("num_epochs", num_epochs, minimum=0) or DEFAULT_EPOCHS
        frame, pickled = _feed_frame(self.sc, dataRDD)
        self._cluster = self._start(self._fed_plan(pickled, num_epochs, inference=False), frame)
        self._cluster.wait()

    def _train_dstream(self, dstream: Any, feed_timeout: float) -> None:
        nodes = self._start_stream(DSTREAM)

        def feed(rdd: Any) -> None:
            if self._stream_ended:
                return  # shutdown ended the stream on the nodes; what is left is not fed
            if feed_rdd(nodes, feed_timeout, rdd, self._max_restarts) and self.server is not None:
                self.server.done = True  # a node terminated its feed: shutdown(ssc) stops the stream

        dstream.foreachRDD(feed)

    def stream_feeder(self, feed_timeout: float = 600) -> StreamFeeder:
        """The ``foreachBatch`` function that trains the nodes on a Structured Streaming query,
        each micro-batch exactly once::

            feeder = cluster.stream_feeder()
            query = (df.writeStream.foreachBatch(feeder)
                     .option("checkpointLocation", checkpoint).start())
            ...
            cluster.shutdown(query)     # when the query ends, or is asked to stop

        The nodes start on the first call; later calls (for a restarted query) return a
        feeder over the same nodes. Each ``map_fun`` reads its share of every micro-batch
        with ``ctx.get_stream_feed(state_dir)`` and commits it after training (see
        :meth:`sparktrain.tfos._node.NodeContext.get_stream_feed`). Each micro-batch call
        returns once every node has committed it, within ``feed_timeout`` seconds; a query
        that restarts with the same checkpoint replays the micro-batches Spark had not
        recorded, and those the nodes' state already holds are skipped, unread. The nodes
        run for as long as the stream, so the cluster needs task slots beside theirs."""
        self._check_spark_mode("stream_feeder")
        feed_timeout = _checks.seconds("feed_timeout", feed_timeout)
        nodes = self._start_stream(STRUCTURED)
        return StreamFeeder(nodes, feed_timeout, self._max_restarts, lambda: self._stream_ended)

    def inference(self, dataRDD: Any, feed_timeout: float = 600, qname: str = "input") -> Any:
        """An RDD of the results the nodes pass to ``batch_results``: one per input row,
        partitioned like ``dataRDD`` (an RDD or a DataFrame) and in its order.

        As in TFoS the RDD is lazy: the nodes start, with the data, at the first action on it
        or on an RDD mapped from it (``collect``, ``count``, ``saveAsTextFile``...), and that
        action waits for them; ``map`` and the like start nothing. The results stay on the
        executors (nothing is collected on the driver); they are kept there while the RDD is
        referenced. ``feed_timeout`` and ``qname`` are accepted for compatibility."""
        del feed_timeout, qname
        self._check_spark_mode("inference")
        dstream = _dstream_class()
        if dstream is not None and isinstance(dataRDD, dstream):
            raise InvalidArgumentError(
                "dataRDD: inference over a DStream is not supported; train on it instead"
            )
        _check_feed(dataRDD)
        partitions = max(1, _num_partitions(dataRDD))
        frame, pickled = _feed_frame(self.sc, dataRDD)
        plan = self._fed_plan(pickled, 1, inference=True)

        def compute() -> Any:
            self._cluster = self._start(plan, frame, keep_results=True)
            return _in_input_order(self._cluster.result_rdd(), partitions)

        return _lazy_rdd_class()(self.sc, compute, partitions)

    def shutdown(self, ssc: Any = None, grace_secs: float = 0, timeout: float = 259200) -> None:
        """Waits for the nodes to finish (at most ``timeout`` seconds, -1 for no limit), stops
        the job and raises its first failure. The parameter servers and the evaluator have
        stopped by then: they end with training. ``grace_secs`` is accepted for compatibility:
        the chief finishes its own work (export, evaluation) before training ends, so no grace
        period is needed.

        In a streaming job, ``ssc`` is the ``StreamingContext`` (or the Structured Streaming
        ``StreamingQuery``) that feeds the nodes: ``shutdown`` waits until it ends, or stops it
        (gracefully) when a node terminated its feed or a client of the reservation server
        asked to stop (TFoS's ``stop_streaming.py``). Then it ends the stream on the nodes,
        whose feeds return what is left, and waits for them.

        The reservation server stops too, and the nodes do not start again: ``train``, or a
        first action on an ``inference`` RDD, after ``shutdown`` raises
        :class:`~sparktrain.errors.InvalidArgumentError`."""
        del grace_secs
        query = None
        if ssc is not None and not _is_streaming_context(ssc):
            from pyspark.sql.streaming.query import StreamingQuery

            if not isinstance(ssc, StreamingQuery):
                raise InvalidArgumentError(f"ssc={ssc!r}: a StreamingContext or a Structured StreamingQuery")
            query, ssc = ssc, None
        self._shut_down = True
        deadline = None if timeout <= 0 else time.monotonic() + timeout
        try:
            if ssc is not None or query is not None:
                self._await_stream(ssc, query, deadline)
            if self._stream is not None and not self._stream_ended:
                self._stream_ended = True
                self._stream.end()
            if self._cluster is not None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._cluster.wait(left)
        finally:
            if self._cluster is not None:
                self._cluster.shutdown()
            self._stop_server()

    def _nodes_ended(self) -> bool:
        if self._cluster is None:
            return False
        return self._cluster.status()["state"] in ("succeeded", "failed", "shut down")

    def _await_stream(self, ssc: Any, query: Any, deadline: float | None) -> None:
        """Waits until the stream ends; stops it when asked to (see :meth:`shutdown`), when
        the nodes ended, or at ``deadline`` (then raising ``TimeoutError``)."""

        def stop(gracefully: bool) -> None:
            if ssc is not None:
                ssc.stop(stopSparkContext=False, stopGraceFully=gracefully)
            else:
                query.stop()

        while True:
            try:
                ended = ssc.awaitTerminationOrTimeout(1) if ssc is not None else query.awaitTermination(1)
            except Exception:
                # The stream failed: the nodes' failure, when they failed, says why.
                stop(False)
                if self._nodes_ended():
                    self._running().wait(0)
                raise
            if ended:
                return
            asked = self.server is not None and self.server.done
            if asked or self._nodes_ended():
                _log.info("stopping the stream: %s", "asked to" if asked else "the nodes ended")
                stop(True)
                return
            if deadline is not None and time.monotonic() > deadline:
                stop(False)
                raise TimeoutError("the stream was still running at shutdown's time-out; it was stopped")

    def tensorboard_url(self) -> str | None:
        """``http://host:port`` of the TensorBoard the chief started (``tensorboard=True``),
        or None. Waits up to ``reservation_timeout`` for the chief to start it; None when the
        job has not started (``InputMode.SPARK`` before ``train``) or ended without it."""
        if not self._plan.tensorboard or self._cluster is None:
            return self._tensorboard
        deadline = time.monotonic() + self._reservation_timeout
        while self._tensorboard is None and time.monotonic() < deadline:
            status = self._cluster.status()
            port = status["metrics"].get("chief:0", {}).get("tensorboard_port")
            host = status["hosts"].get("chief:0")
            if port is not None and host is not None:
                self._tensorboard = f"http://{host}:{int(port)}"
            elif status["state"] not in ("starting", "running", "restarting"):
                break
            else:
                time.sleep(_POLL_SECONDS)
        return self._tensorboard


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
    *,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    restart_backoff: float = DEFAULT_RESTART_BACKOFF,
    eval_grace_secs: float = 600,
) -> TFCluster:
    """Starts a TFoS-style cluster of ``num_executors`` nodes running ``map_fun(tf_args, ctx)``:
    ``num_ps`` parameter servers, an evaluator with ``eval_node=True``, and training nodes for
    the rest (the first one the chief, named ``master_node``).

    In ``InputMode.TENSORFLOW`` the nodes start now, and ``run`` returns once all of them
    have registered (``cluster_info`` then lists every node, as in TFoS), or the job has
    failed (``shutdown`` raises it); in ``InputMode.SPARK`` they start with
    their data when ``train`` is called or ``inference``'s RDD is used. ``tensorboard=True``
    starts TensorBoard on the chief, on ``log_dir`` (by default ``tensorboard_<n>`` in the
    task's working directory; ``TENSORBOARD_PORT`` picks its port), for as long as training
    runs; :meth:`TFCluster.tensorboard_url` says where.

    Parameter servers and the evaluator run ``map_fun`` in the background and stop when
    training has ended: when the chief and every worker have returned, or with parameter
    servers when the chief has returned (the workers then stop too). An evaluator still running
    then has ``eval_grace_secs`` more to finish.

    A node that dies restarts the cluster up to ``max_restarts`` times (see
    :meth:`sparktrain.Cluster.run`); ``map_fun`` sees ``ctx.trainer.generation`` and resumes
    from its own checkpoints (Keras: ``tf.keras.callbacks.BackupAndRestore``).

    Not supported, and refused: ``driver_ps_nodes=True``, and parameter servers or an
    evaluator in ``InputMode.SPARK`` (the data would also go to them). ``queues`` is
    accepted for compatibility.

    ``release_port=False`` keeps each node's TensorFlow port bound while ``map_fun`` runs, as
    ``ctx.tmp_socket``, so that no other process takes it; ``map_fun`` calls
    ``ctx.release_port()`` before its server binds the port. By default the port is released
    just before ``map_fun`` starts.

    Every argument is checked at once, on the driver. A reservation server
    (:mod:`sparktrain.tfos.reservation`) starts with the nodes, and its address is logged
    (``cluster.cluster_meta["server_addr"]``)."""
    del queues
    require_spark("sparktrain.tfos.TFCluster.run", arrow_udfs=input_mode == InputMode.SPARK)
    _checks.function("map_fun", map_fun)
    num_executors = _checks.integer("num_executors", num_executors, minimum=1)
    num_ps = _checks.integer("num_ps", num_ps, minimum=0)
    reservation_timeout = _checks.seconds("reservation_timeout", reservation_timeout)
    max_restarts = _checks.integer("max_restarts", max_restarts, minimum=0)
    restart_backoff = _checks.seconds("restart_backoff", restart_backoff, allow_zero=True)
    eval_grace_secs = _checks.seconds("eval_grace_secs", eval_grace_secs, allow_zero=True)
    log_dir = _checks.optional_text("log_dir", log_dir)
    if isinstance(input_mode, bool) or input_mode not in (InputMode.TENSORFLOW, InputMode.SPARK):
        raise InvalidArgumentError(f"input_mode={input_mode!r}: use InputMode.TENSORFLOW or InputMode.SPARK")
    if master_node not in (None, "chief", "master"):
        raise InvalidArgumentError(f"master_node={master_node!r}: use None, 'chief' or 'master'")
    if driver_ps_nodes:
        raise InvalidArgumentError(
            "driver_ps_nodes=True: parameter servers run as tasks of the job; "
            "count them in num_executors and leave driver_ps_nodes False"
        )
    if input_mode == InputMode.SPARK and num_ps > 0:
        raise InvalidArgumentError(
            f"num_ps={num_ps}: parameter servers need input_mode=InputMode.TENSORFLOW "
            "(in InputMode.SPARK every node receives a share of the data)"
        )
    if input_mode == InputMode.SPARK and eval_node:
        raise InvalidArgumentError(
            "eval_node=True: an evaluator needs input_mode=InputMode.TENSORFLOW, as in TFoS"
        )
    num_evaluators = 1 if eval_node else 0
    if num_executors - num_ps - num_evaluators < 1:
        raise InvalidArgumentError(
            f"num_executors={num_executors} leaves no training node beside num_ps={num_ps} "
            f"and eval_node={bool(eval_node)}"
        )
    # A SparkSession is taken for its SparkContext, as the Structured Streaming example passes one.
    sc = _spark.context(sc)
    plan = NodePlan(
        map_fun=map_fun,
        tf_args=tf_args,
        master_node=master_node,
        num_ps=num_ps,
        tensorboard=bool(tensorboard),
        log_dir=log_dir,
        eval_grace_secs=eval_grace_secs,
        release_port=bool(release_port),
    )
    return TFCluster(
        sc,
        plan,
        num_executors,
        num_ps,
        num_evaluators,
        input_mode,
        reservation_timeout,
        max_restarts,
        restart_backoff,
    )


__all__ = [
    "InputMode",
    "TFCluster",
    "run",
]
