#!/usr/bin/env bash
# The documentation: the README, docs/*.md and the examples as narrative pages, and the API
# reference generated from the docstrings of every public name, built with Sphinx into
# target/docs/html with warnings as errors and every cross-reference checked (nitpicky); then
# the examples in the docstrings run (Sphinx's doctest builder). Needs the installed package
# and Sphinx (tests/requirements.txt). Usage: bash docs/build.sh [output folder]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/docs}
# One read of the sources serves both builders.
python -m sphinx -W --keep-going -n -q -d "$out/doctrees" -b html docs "$out/html"
python -m sphinx -W --keep-going -n -q -d "$out/doctrees" -b doctest docs "$out/doctest"
echo "documentation: $out/html/index.html"
