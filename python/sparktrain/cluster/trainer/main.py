"""The trainer process: ``python -m sparktrain.cluster.trainer``, started by a task. Runs in
the trainer process.

It reads the :class:`~sparktrain.cluster.settings.JobSettings` from stdin as soon as it starts,
loads the user's function and connects to the driver while its task registers, then reads its
:class:`~sparktrain.cluster.settings.TrainerLaunch` (the cluster spec). It dies with its task
(the parent-death signal, and end-of-file on stdin), runs ``main_fun(args, ctx)``, waits at the
exit barrier so that no trainer leaves while others still run, and writes its pickled return
value where the task reads it. A failure prints its traceback to stderr, which reaches the
driver, and exits non-zero.
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from sparktrain import fs
from sparktrain.cluster.callbacks import JobCallback
from sparktrain.cluster.failures import FAILED, NOT_RETRYABLE, NOT_RETRYABLE_ERRORS, ORPHANED, PEER_LOST
from sparktrain.cluster.scripts import ScriptExit
from sparktrain.cluster.settings import EXIT_BARRIER, JobSettings, TrainerLaunch
from sparktrain.cluster.trainer.context import TrainerContext
from sparktrain.cluster.trainer.frameworks import framework_env, register_jax_cluster
from sparktrain.errors import (
    CollectiveTimeout,
    InvalidArgumentError,
    PeerFailed,
)

if TYPE_CHECKING:
    from sparktrain._native import ControlClient

_PR_SET_PDEATHSIG = 1


def exit_code_for(error: BaseException) -> int:
    """The exit code of a trainer that failed with ``error``. A collective that a peer broke
    or left waiting is the peer's failure, not this trainer's: its task then gives the driver
    time to hear of the peer first (see :data:`~sparktrain.cluster.failures.PEER_LOST`)."""
    if isinstance(error, PeerFailed | CollectiveTimeout):
        return PEER_LOST
    if isinstance(error, NOT_RETRYABLE_ERRORS):
        return NOT_RETRYABLE
    return FAILED


def _call(main_fun: Any, args: Any, ctx: TrainerContext) -> Any:
    """``main_fun(args, ctx)``, where ``sys.exit(0)`` (or ``sys.exit()``) is success with no
    result, as it is for a script, and any other exit status fails the trainer, naming it. The
    trainer's own exit codes tell the driver how it failed, so the user's status is named on
    stderr (and so in :class:`~sparktrain.errors.WorkerFailed`), not passed on."""
    try:
        return main_fun(args, ctx)
    except SystemExit as e:
        if e.code in (None, 0):
            return None
        name = getattr(main_fun, "__name__", "main_fun")
        raise ScriptExit(f"{name} called sys.exit({e.code!r})") from None


def _prove_liveness(interval: float) -> None:
    """Writes a byte to the task's liveness pipe every ``interval`` seconds, from a thread
    that needs the interpreter to run: a trainer stopped by SIGSTOP, or whose interpreter
    hangs, falls silent, and its task kills it after the heartbeat time-out."""
    fd = os.environ.get("SPARKTRAIN_ALIVE_FD")
    if fd is None:
        return

    def beat() -> None:
        try:
            while True:
                os.write(int(fd), b".")
                time.sleep(interval)
        except OSError:
            return  # the task is gone: the stdin watchdog ends this process

    threading.Thread(target=beat, name="sparktrain-liveness", daemon=True).start()


def _die_with_parent(expected_parent: int) -> None:
    """Asks the kernel to kill this process when the task that started it dies, and exits at
    once if that already happened."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # Not Linux: the stdin watchdog below still applies.
    if os.getppid() != expected_parent:
        os._exit(ORPHANED)


#: The reaper: a small process in the trainer's process group that kills the whole group (the
#: trainer's leftover children, and itself) as soon as the trainer is gone, however it went.
_REAPER = """
import ctypes, os, signal, sys
def reap(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGUSR1, reap)
ctypes.CDLL(None).prctl(1, signal.SIGUSR1, 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    reap()
while True:
    signal.pause()
"""


def _start_reaper() -> None:
    """Starts :data:`_REAPER` for this trainer.

    The trainer leads a process group of its own, which its children (multiprocessing and
    DataLoader workers, subprocesses) join. Its task kills that group whenever it stops the
    trainer or sees it exit; the reaper covers the paths the task does not see: the task
    itself killed, the trainer then killed by its parent-death signal. It gets a
    parent-death signal of its own, and answers it by killing the group."""
    try:
        subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _REAPER, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
    except OSError as e:
        print(f"sparktrain: no reaper for this trainer's children ({e})", file=sys.stderr)


def _receive() -> object:
    """The next message from the task. End-of-file means the task died."""
    stdin = sys.stdin.buffer
    size = int.from_bytes(stdin.read(8), "little")
    data = stdin.read(size)
    if size == 0 or len(data) != size:
        os._exit(ORPHANED)
    # The bytes come from the parent task over a private pipe, not from the network.
    return pickle.loads(data)


def _watch_stdin() -> None:
    """Exits when the task's end of the stdin pipe closes: the task has died."""
    sys.stdin.buffer.read()
    os._exit(ORPHANED)


def _context(
    job: JobSettings, launch: TrainerLaunch, client: ControlClient, callbacks: tuple[JobCallback, ...] = ()
) -> TrainerContext:
    me = launch.tasks[launch.rank]
    return TrainerContext(
        job_name=me.role,
        task_index=me.index,
        rank=launch.rank,
        num_workers=job.num_workers,
        num_evaluators=job.num_evaluators,
        tasks=launch.tasks,
        tf_config=launch.tf_config,
        default_fs=job.default_fs,
        working_dir=launch.working_dir,
        executor_id=me.executor_id,
        gpus=launch.gpus,
        data_listener=socket.socket(fileno=launch.data_fd),
        feed_path=launch.feed_path,
        _client=client,
        generation=job.generation,
        job_id=job.job_id,
        _barrier_timeout=job.barrier_timeout,
        _secret=job.secret,
        _collective_timeout=job.collective_timeout,
        _collective_streams=job.collective_streams,
        _collective_chunk_bytes=job.collective_chunk_bytes,
        _collective_sealed=job.collective_sealed,
        _collective_local=job.collective_local,
        callbacks=callbacks,
    )


def main() -> int:
    from sparktrain._native import ControlClient

    _die_with_parent(int(os.environ.get("SPARKTRAIN_SUPERVISOR_PID", os.getppid())))
    _start_reaper()
    job = _receive()
    assert isinstance(job, JobSettings)
    _prove_liveness(job.heartbeat_interval)
    fs.configure(job.storage)
    try:
        main_fun, args = pickle.loads(job.function)
        callbacks = pickle.loads(job.callbacks) if job.callbacks else ()
        client = ControlClient(job.address, job.secret, job.heartbeat_timeout, job.tls_ca, job.tls_domain)
    except BaseException:
        traceback.print_exc()
        return FAILED
    launch = _receive()
    assert isinstance(launch, TrainerLaunch)
    if launch.token is not None:
        client.use_token(launch.token)
    threading.Thread(target=_watch_stdin, name="sparktrain-parent-watch", daemon=True).start()
    os.environ["TF_CONFIG"] = json.dumps(launch.tf_config)
    # PyTorch's and JAX's own variables, so their process groups start with no arguments.
    os.environ.update(framework_env(launch.tasks, launch.rank, job.num_workers))
    os.environ["SPARKTRAIN_GENERATION"] = str(job.generation)  # ctx.generation, for scripts
    register_jax_cluster()
    ctx = _context(job, launch, client, callbacks)
    try:
        # Release TensorFlow's port as late as possible: just before user code may start a
        # server; or, when the job says so, let user code release it (ctx.release_tf_port()).
        tf_port = socket.socket(fileno=launch.tf_fd)
        if job.release_tf_port:
            tf_port.close()
        else:
            ctx.tf_port_socket = tf_port
        value = _call(main_fun, args, ctx)
        result = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        if len(result) > job.max_result_bytes:
            raise InvalidArgumentError(
                f"main_fun returned {len(result)} bytes once pickled, more than the limit of "
                f"{job.max_result_bytes}; write large results to storage and return their path"
            )
        with open(launch.result_path, "wb") as f:
            f.write(result)
        sys.stdout.flush()
        client.barrier(launch.rank, EXIT_BARRIER, job.barrier_timeout)
    except BaseException as e:
        traceback.print_exc()
        code = exit_code_for(e)
        if code == PEER_LOST and job.num_workers > 1:
            from sparktrain.cluster.trainer.reach import describe_reach

            print(describe_reach(launch.tasks, launch.rank, job.num_workers), file=sys.stderr)
        sys.stderr.flush()
        return code
    return 0
