"""What runs inside a trainer for the TFoS shim: the ``ctx`` TFoS functions expect, the feed
behind ``ctx.mgr``, TensorBoard on the chief, and the wrapper around the user's ``map_fun``.

Roles. sparktrain's job has the chief (task 0), the workers, then its evaluator tasks; the shim
plays TFoS's parameter servers and evaluator on those evaluator tasks. ``TF_CONFIG`` and
``ctx`` name them as TFoS does: task 0 is ``master_node`` (``chief`` or ``master``), or
``worker`` 0 without one; then ``worker``, ``ps`` and ``evaluator``.

Foreground and background. As in TFoS, a parameter server's and an evaluator's ``map_fun``
runs in the background (typically ``server.join()``, which never returns), and the node ends
when training has ended. In a job with parameter servers the chief alone decides when that is
(ParameterServerStrategy's workers only serve, like the parameter servers; an Estimator's
workers stop at the same global step as the chief), so the workers run in the background too.
Without parameter servers, training ends when the chief and every worker have returned.

Every node meets the others at one barrier, :data:`RELEASE_BARRIER`: a foreground node when its
``map_fun`` has returned, a background node at once, waiting in short slices so that its
``map_fun`` failing fails the job at once. A background node still running when the barrier
completes is stopped with the trainer process; an evaluator first gets ``eval_grace_secs`` to
finish. Every wait ends when the job fails or is shut down (the driver aborts the barrier).

Reservations. As it starts, every node leaves its reservation with the driver's reservation
server (:mod:`sparktrain.tfos.reservation`), signed with the job's stream key: who it is,
its TensorFlow port, and in a streaming job the address where it takes micro-batches
(:mod:`sparktrain.tfos._stream`). It writes its ``executor_id`` to the working directory, as
TFoS's nodes do (:func:`sparktrain.tfos.util.read_executor_id`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparktrain.errors import BarrierTimeout, ClusterError, InvalidArgumentError
from sparktrain.tfos import util
from sparktrain.tfos._feed import DataFeed, FeedManager, FeedSource
from sparktrain.tfos._stream import MicroBatches, RowStream, StreamEndpoint, StreamFeed
from sparktrain.tfos._tf import export_saved_model, hdfs_path, start_cluster_server
from sparktrain.tfos.reservation import Client

if TYPE_CHECKING:
    from sparktrain.cluster.trainer.context import TrainerContext

#: Bits of a row's position that hold its offset in its partition (the partition index is
#: above them), as in Spark's ``monotonically_increasing_id``.
OFFSET_BITS = 33
#: The barrier every node reaches when training has ended for it (see the module's docstring).
RELEASE_BARRIER = "sparktrain.tfos.release"
#: Seconds a background node waits at the release barrier at a time before it looks at its
#: ``map_fun`` again.
RELEASE_POLL_SECONDS = 1.0
#: Epochs ``TFCluster.train`` feeds when it is given ``num_epochs=0``, as TFoS does.
DEFAULT_EPOCHS = 10
#: The kinds of stream a node can be fed: Spark Streaming's DStreams, Structured Streaming.
DSTREAM, STRUCTURED = "dstream", "structured"

_log = logging.getLogger(__name__)


@dataclass
class NodeContext:
    """The ``ctx`` a TFoS ``map_fun`` receives (TFoS's ``TFNodeContext``).

    ``executor_id`` and ``worker_num`` are the task's index in the whole job (0 is the chief;
    TFoS numbers its parameter servers first, sparktrain last). ``num_workers`` counts the
    training nodes (``chief``/``master`` and ``worker``), as TFoS does. ``trainer`` is
    sparktrain's own :class:`~sparktrain.cluster.trainer.context.TrainerContext`."""

    executor_id: int
    job_name: str
    task_index: int
    cluster_spec: dict[str, list[str]]
    defaultFS: str  # TFoS's spelling
    working_dir: str
    mgr: FeedSource | None
    trainer: TrainerContext
    num_workers: int = 0
    #: The bound socket that holds the node's TensorFlow port with ``release_port=False``
    #: (:meth:`release_port` closes it); None when the port was released before ``map_fun``.
    tmp_socket: socket.socket | None = field(default=None, repr=False)

    @property
    def worker_num(self) -> int:
        """TFoS's older name for :attr:`executor_id`."""
        return self.executor_id

    def absolute_path(self, path: str) -> str:
        """``path`` as a full URL (see :func:`~sparktrain.tfos.TFNode.hdfs_path`)."""
        return hdfs_path(self, path)

    def get_data_feed(
        self,
        train_mode: bool = True,
        qname_in: str = "input",
        qname_out: str = "output",
        input_mapping: dict[str, str] | None = None,
    ) -> DataFeed:
        """A :class:`~sparktrain.tfos.TFNode.DataFeed` over this node's share of the RDD."""
        return DataFeed(self.mgr, train_mode, qname_in, qname_out, input_mapping)

    def start_cluster_server(self, num_gpus: int = 1, rdma: bool = False) -> tuple[Any, Any]:
        """``(tf.train.ClusterSpec, tf.distribute.Server)`` for this node (see
        :func:`~sparktrain.tfos.TFNode.start_cluster_server`)."""
        return start_cluster_server(self, num_gpus, rdma)

    def export_saved_model(
        self, model_or_sess: Any, export_dir: str, tag_set: str | None = None, signatures: Any = None
    ) -> None:
        """Exports a SavedModel: a Keras model as :func:`~sparktrain.tfos.compat.export_saved_model`
        does (every node must call it under a multi-worker strategy; the chief's copy is kept),
        or a TF1 session with ``tag_set`` and ``signatures`` as
        :func:`~sparktrain.tfos.TFNode.export_saved_model` does."""
        if tag_set is not None or signatures is not None:
            if tag_set is None or signatures is None:
                raise InvalidArgumentError(
                    "export_saved_model of a TF1 session needs both tag_set and signatures"
                )
            export_saved_model(model_or_sess, export_dir, tag_set, signatures)
            return
        from sparktrain.tfos.compat import export_saved_model as export_keras

        export_keras(model_or_sess, export_dir, self.trainer.is_chief)

    def release_port(self) -> None:
        """Releases the node's TensorFlow port held for it with ``TFCluster.run(...,
        release_port=False)``, so that its server can bind it; warns when there is none."""
        if self.tmp_socket is None:
            _log.warning("release_port(): this node holds no reserved port (release_port=True releases it)")
            return
        self.tmp_socket.close()
        self.tmp_socket = None
        self.trainer.release_tf_port()

    def get_stream_feed(
        self, state_dir: str | None = None, last_batch_id: int | None = None, *, pickle: bool = False
    ) -> StreamFeed:
        """The micro-batches of the Structured Streaming query fed by ``cluster.stream_feeder()``
        (call it once, on every node)::

            feed = ctx.get_stream_feed(state_dir=args.state_dir)
            weights = feed.state["weights"] if feed.state else init()
            for batch in feed:              # this node's share of each micro-batch, in order
                weights = train(weights, batch.rows())
                feed.commit({"weights": weights})

        With ``state_dir`` (any storage URL) the chief's last committed state is restored
        (``feed.state``, shared with every node), and micro-batches it already holds are not
        handed out again when the query replays them. Without it, pass the id of the last
        micro-batch your own checkpoint holds as ``last_batch_id``. The loop ends when the
        driver ends the stream (``cluster.shutdown()``)."""
        if not isinstance(self.mgr, MicroBatches):
            raise InvalidArgumentError(
                "ctx.get_stream_feed() needs a node fed by cluster.stream_feeder() (Structured Streaming)"
            )
        return StreamFeed(self.trainer, self.mgr, state_dir, last_batch_id, pickle)


@dataclass(frozen=True)
class NodePlan:
    """What every node of a TFoS job runs: the user's function and the cluster's shape."""

    map_fun: Callable[[Any, Any], Any]
    tf_args: Any
    master_node: str | None
    num_ps: int = 0
    #: How many passes over the fed data (``InputMode.SPARK``); 0 when nothing is fed.
    epochs: int = 0
    fed: bool = False
    #: Whether fed rows travel pickled (an RDD) or as the DataFrame's columns.
    pickled_rows: bool = False
    inference: bool = False
    tensorboard: bool = False
    log_dir: str | None = None
    #: Seconds an evaluator may still run once training has ended.
    eval_grace_secs: float = 600.0
    #: Whether the launcher releases TensorFlow's port before ``map_fun`` (else ``tmp_socket``).
    release_port: bool = True
    #: ``(host, port)`` of the driver's reservation server.
    server_addr: tuple[str, int] | None = None
    #: The job's stream key: signs reservations and authenticates stream connections.
    stream_key: bytes = field(default=b"", repr=False)
    #: :data:`DSTREAM` or :data:`STRUCTURED` for a streaming job, else None.
    stream: str | None = None


def tfos_roles(ctx: TrainerContext, plan: NodePlan) -> list[tuple[str, int]]:
    """TFoS's ``(job name, task index)`` of every task, by sparktrain task index."""
    roles: list[tuple[str, int]] = []
    for rank in range(ctx.num_workers):
        if plan.master_node is None:
            roles.append(("worker", rank))
        else:
            roles.append((plan.master_node, 0) if rank == 0 else ("worker", rank - 1))
    for j in range(ctx.num_evaluators):
        roles.append(("ps", j) if j < plan.num_ps else ("evaluator", j - plan.num_ps))
    return roles


def tfos_tf_config(ctx: TrainerContext, plan: NodePlan) -> dict[str, Any]:
    """``TF_CONFIG`` as TFoS writes it: every node's job name and TensorFlow address, this
    node's own ``task``, and ``"environment": "cloud"`` with a master node. Without a master
    node TFoS sets no ``TF_CONFIG``; the shim still writes one, every training node a
    ``worker``, so that MultiWorkerMirroredStrategy finds its peers."""
    roles = tfos_roles(ctx, plan)
    cluster: dict[str, list[str]] = {}
    for task, (job, _) in zip(ctx.tasks, roles, strict=True):
        cluster.setdefault(job, []).append(f"{task.host}:{task.tf_port}")
    job, index = roles[ctx.rank]
    config: dict[str, Any] = {"cluster": cluster, "task": {"type": job, "index": index}}
    if plan.master_node is not None:
        config["environment"] = "cloud"
    return config


def default_fs(fs: str) -> str:
    """``fs.defaultFS`` as TFoS hands it to ``ctx``: ``file:///`` loses its last slash."""
    if fs.startswith("file://") and len(fs) > 7 and fs.endswith("/"):
        return fs[:-1]
    return fs


class _TensorBoard:
    """TensorBoard on this node, stopped with it (and killed if the trainer dies first)."""

    #: Runs TensorBoard after asking the kernel to stop it when the trainer that started it dies.
    _BOOT = (
        "import ctypes, os, runpy, signal, sys\n"
        "try:\n"
        "    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
        "except (OSError, AttributeError):\n"
        "    pass\n"
        "if os.getppid() != int(sys.argv[1]):\n"
        "    sys.exit(0)\n"
        "sys.argv = ['tensorboard'] + sys.argv[2:]\n"
        "runpy.run_module('tensorboard.main', run_name='__main__')\n"
    )

    def __init__(self, host: str, log_dir: str) -> None:
        port = int(os.environ.get("TENSORBOARD_PORT", "0")) or _free_port(host)
        if "://" not in log_dir:
            os.makedirs(log_dir, exist_ok=True)
        self.url = f"http://{host}:{port}"
        self.port = port
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                self._BOOT,
                str(os.getpid()),
                f"--logdir={log_dir}",
                f"--port={port}",
                f"--host={host}",
            ],
            stdin=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        return int(self._process.pid)

    def stop(self) -> None:
        """Stops TensorBoard: SIGTERM, then SIGKILL after 5 s."""
        self._process.terminate()
        try:
            self._process.wait(5.0)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(5.0)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class _Background:
    """``map_fun`` on a thread of its own; its error, if any, is kept for the main thread."""

    def __init__(self, map_fun: Callable[[Any, Any], Any], args: Any, node: NodeContext) -> None:
        self.error: BaseException | None = None

        def run() -> None:
            try:
                map_fun(args, node)
            except BaseException as e:  # handed to the main thread, which fails the node
                self.error = e

        self._thread = threading.Thread(target=run, name=f"tfos-{node.job_name}", daemon=True)
        self._thread.start()

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def finish(self, grace: float) -> None:
        """Waits up to ``grace`` seconds for ``map_fun`` to return; raises its error."""
        self._thread.join(grace)
        self.raise_error()
        if self._thread.is_alive():
            print(
                f"sparktrain.tfos: map_fun still ran {grace:g} s after training ended; it was stopped",
                file=sys.stderr,
            )


def _await_release(ctx: TrainerContext, background: _Background | None) -> None:
    """Arrives at the release barrier and waits until every node has. A foreground node waits
    at most the job's ``barrier_timeout``; a background node as long as the job runs, in short
    slices, raising its ``map_fun``'s error as soon as it fails. The driver aborting the job
    ends either wait (``JobAborted``)."""
    client = ctx.control_client()
    if background is None:
        client.barrier(ctx.rank, RELEASE_BARRIER, ctx.barrier_timeout)
        return
    while True:
        background.raise_error()
        try:
            client.barrier(ctx.rank, RELEASE_BARRIER, RELEASE_POLL_SECONDS)
            return
        except BarrierTimeout:
            continue


def _allow_remote_calls(num_tasks: int) -> None:
    """Raises ``TF_NUM_INTEROP_THREADS`` (one per task's CPU, as the launcher sets it) to at
    least ``num_tasks + 1``. With parameter servers, an op a node runs for another one can wait
    on a third node, holding an inter-op thread meanwhile: with one thread the job deadlocks."""
    current = int(os.environ.get("TF_NUM_INTEROP_THREADS") or 0)
    os.environ["TF_NUM_INTEROP_THREADS"] = str(max(current, num_tasks + 1))


def _write_executor_id(rank: int) -> None:
    """Writes ``executor_id`` where TFoS's nodes do; a read-only working directory only
    loses that file."""
    try:
        util.write_executor_id(rank)
    except OSError as e:
        print(f"sparktrain.tfos: could not write {util.EXECUTOR_ID_FILE}: {e}", file=sys.stderr)


def _register(
    plan: NodePlan,
    ctx: TrainerContext,
    role: tuple[str, int],
    board: _TensorBoard | None,
    endpoint: StreamEndpoint | None,
) -> None:
    """Leaves this node's reservation with the driver (see the module's docstring). A
    streaming node cannot be fed without it and fails; another node only warns."""
    if plan.server_addr is None:
        return
    me = ctx.tasks[ctx.rank]
    reservation = {
        "executor_id": ctx.rank,
        "host": me.host,
        "job_name": role[0],
        "task_index": role[1],
        "port": me.tf_port,
        "tb_pid": board.pid if board is not None else 0,
        "tb_port": board.port if board is not None else 0,
        "addr": list(endpoint.address) if endpoint is not None else None,
        "authkey": None,
        "generation": ctx.generation,
    }
    try:
        client = Client(plan.server_addr)
        try:
            client.register_signed(reservation, plan.stream_key)
        finally:
            client.close()
    except ClusterError as e:
        if endpoint is not None:
            raise
        print(f"sparktrain.tfos: this node's reservation was not recorded: {e}", file=sys.stderr)


def run_map_fun(plan: NodePlan, ctx: TrainerContext) -> Any:
    """The trainer's ``main_fun``: builds TFoS's ``ctx`` and ``TF_CONFIG``, starts TensorBoard
    on the chief when asked, opens a streaming node's endpoint, registers the node, and runs
    the user's ``map_fun`` in the foreground or the background (see the module's docstring).

    A fed inference node returns its results as ``(position, result)`` pairs."""
    tf_config = tfos_tf_config(ctx, plan)
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    if plan.num_ps > 0:
        _allow_remote_calls(len(ctx.tasks))
    if isinstance(plan.tf_args, list):
        sys.argv = list(plan.tf_args)  # TFoS hands an ARGV list over as the command line
    job_name, task_index = tf_config["task"]["type"], tf_config["task"]["index"]
    mgr: FeedSource | None = None
    if plan.stream == DSTREAM:
        mgr = RowStream()
    elif plan.stream == STRUCTURED:
        mgr = MicroBatches()
    elif plan.fed:
        mgr = FeedManager(ctx, plan.epochs, plan.pickled_rows, plan.inference)
    cluster = tf_config["cluster"]
    node = NodeContext(
        executor_id=ctx.rank,
        job_name=job_name,
        task_index=task_index,
        cluster_spec=cluster,
        defaultFS=default_fs(ctx.default_fs),
        working_dir=ctx.working_dir,
        mgr=mgr,
        trainer=ctx,
        num_workers=sum(len(v) for k, v in cluster.items() if k in ("chief", "master", "worker")),
        tmp_socket=ctx.tf_port_socket,
    )
    if node.tmp_socket is not None:
        _log.warning(
            "release_port=False: call ctx.release_port() before this node's TensorFlow server starts"
        )
    _write_executor_id(ctx.rank)
    board = None
    endpoint = None
    try:
        if isinstance(mgr, RowStream | MicroBatches):
            endpoint = StreamEndpoint(
                ctx.tasks[ctx.rank].host, plan.stream_key, mgr, f"{job_name}:{task_index}"
            )
        if plan.tensorboard and ctx.rank == 0:
            log_dir = plan.log_dir or os.path.join(ctx.working_dir, f"tensorboard_{ctx.rank}")
            board = _TensorBoard(ctx.tasks[ctx.rank].host, log_dir)
            print(f"TensorBoard running at: {board.url}", flush=True)
            ctx.report(tensorboard_port=board.port)
        _register(plan, ctx, (job_name, task_index), board, endpoint)
        if job_name in ("ps", "evaluator") or (plan.num_ps > 0 and ctx.rank != 0):
            background = _Background(plan.map_fun, plan.tf_args, node)
            _await_release(ctx, background)
            if job_name == "evaluator":
                background.finish(plan.eval_grace_secs)
            return None
        plan.map_fun(plan.tf_args, node)
        if mgr is not None:
            mgr.check_answered()
        _await_release(ctx, None)
    finally:
        if board is not None:
            board.stop()
        if endpoint is not None:
            endpoint.close()
    return mgr.results if isinstance(mgr, FeedManager) and plan.inference else None
