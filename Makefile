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

# Benchmarks print their figures and write JSON to benchmarks/results/ (the README's numbers).
# The last three build emulated networks and need root.
bench: setup
	$(VENV)/python benchmarks/plan_speed.py
	$(VENV)/python benchmarks/search_speed.py
	$(VENV)/python benchmarks/emulator_build.py
	$(VENV)/python benchmarks/run_accuracy.py
	$(VENV)/python benchmarks/collective_compare.py

clean:
	$(VENV)/topolab clean
