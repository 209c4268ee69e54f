"""``sparktrain submit``: the ``spark-submit`` command of a training job, built
(:mod:`sparktrain.deploy.spec`) and run (:mod:`sparktrain.deploy.process`), optionally with the
current environment packed for the executors (:mod:`sparktrain.deploy.pack`). Runs in the
``sparktrain submit`` command, on the machine that submits.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from typing import Final

from sparktrain.deploy.pack import PackedEnv, current_env, pack
from sparktrain.deploy.process import TIME_LIMIT_EXIT, run
from sparktrain.deploy.spec import PACK_PLACEHOLDER, SubmitSpec, duration_s, key_value, local_cluster_size
from sparktrain.errors import SparktrainError

#: The file name ``--pack`` gives the archive (each container unpacks it under the alias).
PACKED_NAME: Final = "sparktrain-env.tar.gz"


def parser() -> argparse.ArgumentParser:
    """The ``sparktrain submit`` command line."""
    p = argparse.ArgumentParser(
        prog="sparktrain submit",
        description="spark-submit a training job (a Python entry point) with the confs it needs: one "
        "trainer per executor, dynamic allocation off, thread pools sized to the cores, an enforced "
        "time limit.",
    )
    p.add_argument(
        "entry_point", help="the job's Python file (the driver's; with --per-worker, each trainer's)"
    )
    p.add_argument("entry_args", nargs=argparse.REMAINDER, help="its arguments")
    p.add_argument(
        "--master", default="local-cluster", help="local-cluster (default), spark://, yarn, k8s://"
    )
    p.add_argument("--deploy-mode", choices=("client", "cluster"))
    # No defaults here: a local-cluster[N,C,M] master gives them (spec_from_args).
    p.add_argument("--workers", type=int, help="trainers, one per executor (default 2)")
    p.add_argument("--cores-per-worker", type=int, help="executor cores = task cpus (default 1)")
    p.add_argument("--memory", help="executor memory (default 1g)")
    p.add_argument("--driver-memory")
    p.add_argument("--gpus-per-worker", type=int, default=0)
    p.add_argument("--queue", help="YARN queue")
    p.add_argument("--archives", action="append", default=[], help="ARCHIVE[#ALIAS], repeatable")
    p.add_argument("--pack", action="store_true", help="pack this environment and run Python from it")
    p.add_argument("--python", help="the executors' Python, e.g. ./environment/bin/python of an archive")
    p.add_argument("--py-files", action="append", default=[])
    p.add_argument("--files", action="append", default=[])
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="trainers' environment")
    p.add_argument("--name", help="the application's name")
    p.add_argument("--image", help="Kubernetes: the container image with sparktrain")
    p.add_argument("--time-limit", help="kill the application after this long: 3600, 90m, 1h30m")
    p.add_argument("--principal", help="Kerberos principal spark-submit logs in as (with --keytab)")
    p.add_argument(
        "--keytab",
        help="keytab of --principal: Spark renews the job's delegation tokens with it (YARN, Kubernetes)",
    )
    p.add_argument("--spark-submit", help="the spark-submit to run (default: $SPARK_HOME's, then PATH's)")
    p.add_argument(
        "--per-worker",
        action="store_true",
        help="run the entry point in every trainer as __main__, as torchrun does (a PyTorch, JAX or "
        "TensorFlow script), under sparktrain's own driver",
    )
    p.add_argument("--dry-run", action="store_true", help="print the command and exit")
    return p


def spec_from_args(
    args: argparse.Namespace, archives: Sequence[str] = (), python: str | None = None
) -> SubmitSpec:
    """The :class:`SubmitSpec` of parsed ``sparktrain submit`` arguments. The sizes not given
    come from a ``local-cluster[N,C,M]`` master, else from the defaults (2 workers, 1 core, 1g)."""
    sized = local_cluster_size(args.master)
    workers, cores, memory = (sized[0], sized[1], f"{sized[2]}m") if sized else (2, 1, "1g")
    return SubmitSpec(
        entry_point=args.entry_point,
        entry_args=tuple(args.entry_args),
        master=args.master,
        deploy_mode=args.deploy_mode,
        workers=workers if args.workers is None else args.workers,
        cores_per_worker=cores if args.cores_per_worker is None else args.cores_per_worker,
        memory=memory if args.memory is None else args.memory,
        driver_memory=args.driver_memory,
        gpus_per_worker=args.gpus_per_worker,
        queue=args.queue,
        archives=(*args.archives, *archives),
        py_files=tuple(args.py_files),
        files=tuple(args.files),
        conf=tuple(key_value("--conf", c) for c in args.conf),
        env=tuple(key_value("--env", e) for e in args.env),
        name=args.name,
        image=args.image,
        time_limit=None if args.time_limit is None else duration_s(args.time_limit),
        spark_submit=args.spark_submit,
        python=python or args.python,
        principal=args.principal,
        keytab=args.keytab,
        per_worker=args.per_worker,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``sparktrain submit``; returns the job's exit status, or 2 when sparktrain refused the
    options or could not pack the environment or start ``spark-submit``."""
    args = parser().parse_args(argv)
    try:
        if not args.pack:
            spec = spec_from_args(args)
        else:
            # Until the archive is made its placeholder stands in, so that every check (the
            # Kubernetes upload folder's too) runs before the slow pack.
            _, kind = current_env()
            placeholder = PackedEnv(PACK_PLACEHOLDER, kind)
            spec = spec_from_args(args, [placeholder.shipped], placeholder.python)
        if args.dry_run:
            print(shlex.join(spec.command()))
            return 0
        if not args.pack:
            return run(spec)
        with tempfile.TemporaryDirectory(prefix="sparktrain-submit-") as scratch:
            packed = pack(os.path.join(scratch, PACKED_NAME), overwrite=True)
            return run(spec_from_args(args, [packed.shipped], packed.python))
    except SparktrainError as e:
        print(f"sparktrain submit: {e}", file=sys.stderr)
        return 2


__all__ = ["TIME_LIMIT_EXIT", "SubmitSpec", "main", "parser", "run", "spec_from_args"]
