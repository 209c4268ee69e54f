# Sourced by tests/run.sh and submit/run-example.sh: makes .venv with the pinned Python packages
# (tests/requirements*.txt: PySpark, pyarrow, tensorflow-cpu, tf-keras, maturin, ...) and puts
# it first on PATH. Reinstalls only when the requirement files change.
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
stamp=.venv/.requirements.sha
want=$(cat tests/requirements.txt tests/requirements-nodeps.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    python -m pip install -q --upgrade pip
    python -m pip install -q -r tests/requirements.txt
    python -m pip install -q --no-deps -r tests/requirements-nodeps.txt
    echo "$want" > "$stamp"
fi
