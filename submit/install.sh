# Sourced after submit/env.sh: builds the release wheel (incrementally) and installs it into
# .venv, the way users get sparktrain.
rm -rf target/wheels
maturin build --release --locked -q -o target/wheels
python -m pip install -q --force-reinstall --no-deps target/wheels/sparktrain-*.whl
