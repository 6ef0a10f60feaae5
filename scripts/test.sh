#!/usr/bin/env bash
# The README's second command, and exactly what CI runs: set-up (idempotent), then the checks
# that keep the code in shape (lint, format, layer contracts, types of the contract), then the
# whole test suite (with torch, for topolab train's tests).
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
exec .venv/bin/python -m pytest "$@"
