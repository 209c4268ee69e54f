"""The ``sparktrain`` console script: ``sparktrain pack``, ``sparktrain submit`` and
``sparktrain doctor``, each a thin front for its module in :mod:`sparktrain.deploy`, and
``sparktrain export-onnx`` (:mod:`sparktrain.servable`). Runs in the ``sparktrain`` command."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

#: Subcommand -> (module whose ``main(argv) -> int`` runs it, one-line summary).
COMMANDS = {
    "pack": ("sparktrain.deploy.pack", "pack this Python environment for --archives"),
    "submit": ("sparktrain.deploy.submit", "spark-submit a training job with the confs it needs"),
    "doctor": ("sparktrain.deploy.doctor", "check a Spark cluster and its storage for a training job"),
    "export-onnx": ("sparktrain.servable", "write the ONNX model of an export folder, for serving"),
}


def _usage() -> str:
    lines = ["usage: sparktrain <command> [options]   (sparktrain <command> --help for its options)", ""]
    lines += [f"  {name:11} {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the subcommand named by ``argv[0]`` (default: ``sys.argv[1:]``); returns its exit
    status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from sparktrain import __version__

        print(f"sparktrain {__version__}")
        return 0
    entry = COMMANDS.get(args[0])
    if entry is None:
        print(f"sparktrain: unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(entry[0])
    try:
        status: int = module.main(args[1:])
    except KeyboardInterrupt:
        # Ctrl-C while packing or starting Spark, not during a job (submit stops its job
        # itself): nothing is left running, so a line rather than a traceback.
        print(f"sparktrain {args[0]}: interrupted", file=sys.stderr)
        return 130
    return status
