#!/usr/bin/env bash
# The test suite's other virtualenvs, each made once and reused while its requirements file is
# unchanged: PyTorch's (.venv-torch), the MLflow tracking server's (.venv-mlflow) and PySpark
# 3.5's (.venv-spark35). Making them (downloads, unpacking, byte-compiling) needs no Rust build,
# so tests/run.sh runs this script in the background while the release wheel compiles, and
# waits for it before the first test that needs one. The sparktrain wheel goes into them afterwards, once it is built.
# Usage: bash tests/environments.sh   (from the repository root, with .venv's python on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
python tests/harness/torch_env.py --without-wheel
echo ".venv-torch ready after $((SECONDS - started)) s"

python tests/harness/mlflow_server.py
echo ".venv-mlflow ready after $((SECONDS - started)) s"

venv=.venv-spark35
want=$(sha256sum tests/requirements-spark35.txt | cut -d' ' -f1)
if [ "$(cat "$venv/.requirements.sha" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv" # from scratch: a pin removed from the file leaves nothing behind
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -r tests/requirements-spark35.txt
    echo "$want" >"$venv/.requirements.sha"
fi
echo "$venv ready after $((SECONDS - started)) s"
