# Quick start: `make run` (set-up, then the default 12-server scenario end to end)
# and `make test` (set-up, then the whole test suite). Both run scripts/setup.sh first.
SCENARIO ?= scenarios/topoopt-12.toml
VENV := .venv/bin

.PHONY: setup run test bench clean

setup:
	@bash scripts/setup.sh

run: setup
	$(VENV)/topolab run $(SCENARIO)

test: setup
	$(VENV)/python -m pytest

bench: setup
	$(VENV)/python benchmarks/plan_speed.py

clean:
	$(VENV)/topolab clean
