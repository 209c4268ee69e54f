"""Every shell command the README and ``docs/*.md`` show, run as written, as a new user would.

    python tests/docs_commands.py --list          # every command, and how it is run
    python tests/docs_commands.py                 # the cheap ones (what CI runs)
    python tests/docs_commands.py --all           # also the costly ones (builds, benchmarks)
    python tests/docs_commands.py --fresh-clone   # in a fresh clone, after the README's first command
    python tests/docs_commands.py --skip TEXT     # leaves out the commands containing TEXT

Commands come from the ```` ```bash ```` blocks; a line ending in ``\\`` goes on in the next,
and a block with a ``for ... done`` loop or a virtualenv's ``activate`` is one command. Each
is matched against :data:`RULES`, which says how it runs: ``cheap`` (seconds to a few
minutes: run by default), ``costly`` (builds, benchmarks, installs: run with ``--all``) or
``external`` (it needs what this machine does not have: a YARN or Kubernetes cluster, a
container registry, a published package, a GPU, nightly Rust; listed with the reason, never
run). A command no rule matches fails the run, so a new command in the docs must be
classified.

Commands run with ``bash -e`` from the repository root (the README's own commands assume
it), with ``.venv/bin`` first on ``PATH`` as ``submit/env.sh`` leaves it, each with a time
limit. With ``--fresh-clone`` they run in a ``git clone`` of this checkout (its committed
state) after the README's first command, ``bash submit/run-example.sh``, built it: from
nothing, that is a release build of the Rust workspace and the virtualenv.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
#: The README's first command, which installs what the others need.
FIRST = "bash submit/run-example.sh"


@dataclass(frozen=True)
class Rule:
    pattern: str
    kind: str  # cheap, costly or external
    why: str
    timeout: float = 900.0


#: How each documented command runs; the first rule whose pattern matches (re.search) wins.
RULES = [
    Rule(r"^bash submit/run-example\.sh", "cheap", "the main job on a local cluster (about a minute)", 1200),
    Rule(r"^bash docs/build\.sh", "cheap", "the API reference (under a minute)", 600),
    Rule(r"^bash tests/run\.sh --fast", "costly", "the fast test tier (minutes; CI runs the full suite)"),
    Rule(r"^bash tests/run\.sh", "external", "the full suite is what CI itself runs; not again inside it"),
    Rule(r"cargo \+nightly fuzz", "external", "nightly Rust and cargo-fuzz"),
    Rule(r"^bash submit/build-cuda\.sh", "costly", "the CUDA wheel: PyPI's nvcc, a release build"),
    Rule(r"^(GPU_CHECK_STEPS=\d+ )?bash tests/gpu/check\.sh", "external", "a GPU"),
    Rule(
        r"^pip install sparktrain\b|^pip install 'sparktrain\[", "external", "sparktrain is not on PyPI yet"
    ),
    Rule(r"--master (yarn|k8s://)|^spark-submit", "external", "a YARN or Kubernetes cluster"),
    Rule(r"spark://master\.example\.com", "external", "a standalone master"),
    Rule(r"^docker ", "external", "Docker and a container registry"),
    Rule(r"^export HADOOP_CONF_DIR=/etc/hadoop", "external", "a Hadoop cluster's configuration"),
    Rule(r"hdfs:///", "external", "a cluster's HDFS (fs.defaultFS)"),
    Rule(
        r"^jupyter lab",
        "external",
        "an interactive Jupyter server (tests/test_notebook.py runs the notebook)",
    ),
    Rule(r"^sparktrain pack\s*(#|$)", "costly", "packs the whole virtualenv (GBs with TensorFlow)"),
    Rule(r"^pip install \"\.\[spark\]\"|^pip install \.", "costly", "installs from source: a release build"),
    Rule(r"^python3 -m venv /tmp/wheel-build", "costly", "a release build of the wheel"),
    Rule(r"^pip install maturin|^maturin build|^pip install target/wheels", "costly", "the wheel's build"),
    Rule(r"^python3 -m venv \.venv && \.venv/bin/pip install", "costly", "the test environment's install"),
    Rule(r"maturin develop", "costly", "a release build of the extension"),
    Rule(r"^cargo build --release|^for n in", "costly", "release builds and scaling runs of the readers"),
    Rule(
        r"^(GPU_CHECK_\w+=\w+ )*RAYON_NUM_THREADS=1 target/release/examples/gpu_check",
        "costly",
        "the engine's step, timed",
    ),
    Rule(r"^target/release/examples/gpu_check allreduce", "costly", "the ring's all-reduce, timed"),
    Rule(r"^target/gpu-check/gpu_check", "costly", "the CUDA build's check binary, timed"),
    Rule(r"tests/gpu/gloo_peer\.py", "costly", "PyTorch's gloo all-reduce, from its virtualenv"),
    Rule(
        r"^cargo run --release -p [\w-]+ --example \w+",
        "costly",
        "a release build of a Rust example, then its run",
    ),
    Rule(r"requirements-peers\.txt", "costly", "installs the benchmarks' peers (TensorFlowOnSpark)"),
    Rule(r"tests/harness/torch_env\.py", "costly", "PyTorch's virtualenv (GBs)"),
    Rule(r"tests/bench/", "costly", "a benchmark (minutes)", 3600),
]


@dataclass(frozen=True)
class Command:
    document: str
    line: int
    text: str

    def rule(self) -> Rule | None:
        for rule in RULES:
            if re.search(rule.pattern, self.text.strip()):
                return rule
        return None


def commands(root: Path = ROOT) -> list[Command]:
    """The commands of the shell blocks of the README and ``docs/*.md``, in order."""
    found = []
    for document in DOCUMENTS:
        text = (root / document).read_text()
        for block in re.finditer(r"^```(?:bash|sh|shell)\n(.*?)^```", text, re.S | re.M):
            start = text[: block.start()].count("\n") + 2
            lines = block.group(1).splitlines()
            # A loop, or a block that activates a virtualenv for the lines after it, is one script.
            if any(re.match(r"\s*for .*; do$", line) or "/bin/activate" in line for line in lines):
                found.append(Command(document, start, "\n".join(lines)))
                continue
            pending, first = "", start
            for number, line in enumerate(lines, start):
                if not pending:
                    first = number
                if not line.strip() or (not pending and line.lstrip().startswith("#")):
                    continue
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                found.append(Command(document, first, (pending + line).strip()))
                pending = ""
    return found


def run(command: Command, rule: Rule, cwd: Path) -> tuple[bool, float, str]:
    """Runs ``command`` in ``cwd`` with ``.venv/bin`` first on PATH; (passed, seconds, tail)."""
    env = dict(os.environ)
    env["VIRTUAL_ENV"] = str(cwd / ".venv")
    env["PATH"] = f"{cwd / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-e", "-c", command.text],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=rule.timeout,
            start_new_session=True,
        )
        ok, tail = done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        ok, tail = False, f"ran past {rule.timeout} s\n{text[-2000:]}"
    return ok, time.monotonic() - started, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--list", action="store_true", help="list every command and how it runs")
    parser.add_argument("--all", action="store_true", help="also run the costly commands")
    parser.add_argument("--fresh-clone", action="store_true", help="run in a fresh clone of this checkout")
    parser.add_argument("-k", default=None, help="run only the commands containing this text")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="TEXT",
        help="leave out the commands containing this text (tests/run.sh: those it has run itself)",
    )
    args = parser.parse_args(argv)

    found = commands()
    unclassified = [c for c in found if c.rule() is None]
    for c in unclassified:
        print(f"UNCLASSIFIED {c.document}:{c.line}: {c.text}", file=sys.stderr)
    if args.list:
        for c in found:
            rule = c.rule()
            kind, why = (rule.kind, rule.why) if rule else ("?", "no rule matches")
            print(f"{kind:9} {c.document}:{c.line}: {c.text.splitlines()[0]}\n          ({why})")
        return 1 if unclassified else 0
    if unclassified:
        return 1

    cwd = ROOT
    if args.fresh_clone:
        cwd = Path(tempfile.mkdtemp(prefix="sparktrain-clone-")) / "sparktrain"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(cwd)], check=True)
        print(f"fresh clone in {cwd}; first: {FIRST}", flush=True)
        first = Command("README.md", 0, FIRST)
        ok, seconds, tail = run(first, RULES[0], cwd)
        if not ok:
            print(f"FAILED the README's first command ({seconds:.0f} s):\n{tail}")
            return 1
    wanted = {"cheap", "costly"} if args.all else {"cheap"}
    failed, passed = [], 0
    for c in found:
        rule = c.rule()
        assert rule is not None
        if rule.kind not in wanted or (args.k and args.k not in c.text):
            continue
        if any(text in c.text for text in args.skip):
            print(f"--- {c.document}:{c.line}: {c.text.splitlines()[0]}: left out (--skip)", flush=True)
            continue
        if args.fresh_clone and c.text == FIRST:
            continue  # ran first
        print(f"--- {c.document}:{c.line}: {c.text.splitlines()[0]}", flush=True)
        ok, seconds, tail = run(c, rule, cwd)
        print(f"    {'ok' if ok else 'FAILED'} in {seconds:.0f} s", flush=True)
        if ok:
            passed += 1
        else:
            failed.append(c)
            print(tail)
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
