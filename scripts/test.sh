#!/usr/bin/env bash
# The README's second command, and exactly what CI runs: set-up (idempotent), then the checks
# that keep the code in shape (lint, format, layer contracts, types of the contract, the docs
# site built with --strict), then the whole test suite (with torch, for topolab train's tests).
set -euo pipefail
cd "$(dirname "$0")/.."
# torch for topolab train's tests; the models extra because the suite traces PyTorch models
# (the run needs neither)
bash scripts/setup.sh --with-torch --models
echo "test: ruff (lint and format)"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "test: import contracts (layers, no cycles)"
.venv/bin/lint-imports
echo "test: mypy (contract/)"
.venv/bin/mypy
echo "test: mkdocs (the docs site, --strict: a broken link or a missing page fails)"
site_dir=$(mktemp -d)
trap 'rm -rf "$site_dir"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site_dir"  # not --quiet: it hides the warnings --strict counts
rm -rf "$site_dir"
trap - EXIT
# the tests' temporary folders (pytest's and torch's compile cache) in one folder of this run,
# removed when it ends: the suite leaves /tmp as it found it
scratch=$(mktemp -d -t tl-tests-XXXXXX)  # short: sockets under tmp_path stay within 107 bytes
trap 'rm -rf "$scratch"' EXIT
export TORCHINDUCTOR_CACHE_DIR="$scratch/torchinductor"
.venv/bin/python -m pytest --basetemp "$scratch/p" "$@"
