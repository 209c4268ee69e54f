"""The trainer process: ``python -m sparktrain.cluster.trainer``, started by a task.

It reads its :class:`~sparktrain.cluster.settings.TrainerLaunch` from stdin, dies with its task
(the parent-death signal, and end-of-file on stdin), runs ``main_fun(args, ctx)``, waits at the
exit barrier so that no trainer leaves while others still run, and writes its pickled return
value where the task reads it. A failure prints its traceback to stderr, which reaches the
driver, and exits non-zero.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import socket
import sys
import threading
import traceback

from sparktrain.cluster.context import EXIT_BARRIER, TrainerContext
from sparktrain.cluster.settings import TrainerLaunch
from sparktrain.errors import InvalidArgumentError

#: Exit code when the supervising task disappeared.
ORPHANED = 70
#: Exit code when ``main_fun`` raised.
FAILED = 1

_PR_SET_PDEATHSIG = 1


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


def _read_launch() -> TrainerLaunch:
    stdin = sys.stdin.buffer
    size = int.from_bytes(stdin.read(8), "little")
    data = stdin.read(size)
    if len(data) != size:
        os._exit(ORPHANED)
    # The bytes come from the parent task over a private pipe, not from the network.
    return pickle.loads(data)


def _watch_stdin() -> None:
    """Exits when the task's end of the stdin pipe closes: the task has died."""
    sys.stdin.buffer.read()
    os._exit(ORPHANED)


def _context(launch: TrainerLaunch) -> TrainerContext:
    from sparktrain._native import ControlClient

    job = launch.job
    me = launch.tasks[launch.rank]
    client = ControlClient(job.address, job.secret, job.heartbeat_timeout)
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
        feed_path=launch.feed_path,
        _client=client,
    )


def main() -> int:
    _die_with_parent(int(os.environ.get("SPARKTRAIN_SUPERVISOR_PID", os.getppid())))
    launch = _read_launch()
    threading.Thread(target=_watch_stdin, name="sparktrain-parent-watch", daemon=True).start()
    ctx = _context(launch)
    ctx.data_listener = socket.socket(fileno=launch.data_fd)
    try:
        main_fun, args = pickle.loads(launch.job.function)
        # Release TensorFlow's port as late as possible: just before user code may start a server.
        socket.socket(fileno=launch.tf_fd).close()
        value = main_fun(args, ctx)
        result = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        if len(result) > launch.job.max_result_bytes:
            raise InvalidArgumentError(
                f"main_fun returned {len(result)} bytes once pickled, more than the limit of "
                f"{launch.job.max_result_bytes}; write large results to storage and return their path"
            )
        with open(launch.result_path, "wb") as f:
            f.write(result)
        sys.stdout.flush()
        ctx._control().barrier(launch.rank, EXIT_BARRIER, None)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        return FAILED
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: user threads (TensorFlow's, for one) must not hold the exit.
    os._exit(code)
