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
exec .venv/bin/python -m pytest "$@"
