#!/usr/bin/env bash
# The README's first command: set-up (idempotent), then one scenario end to end.
#   bash scripts/run.sh [SCENARIO] [topolab run options...]   (default scenarios/topoopt-12.toml)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/topolab run "$@"
