# Shortcuts for the README's two commands (scripts/run.sh and scripts/test.sh), for machines
# that have make. A bare Debian 12 has no make: use the scripts directly.
SCENARIO ?= scenarios/topoopt-12.toml
VENV := .venv/bin

.PHONY: setup run test bench docs clean

setup:
	@bash scripts/setup.sh

run:
	bash scripts/run.sh $(SCENARIO)

test:
	bash scripts/test.sh

# Benchmarks print their figures and write JSON to benchmarks/results/ (the README's numbers).
# Those that build emulated networks need root.
bench: setup
	$(VENV)/python benchmarks/plan_speed.py
	$(VENV)/python benchmarks/search_speed.py
	$(VENV)/python benchmarks/emulator_build.py
	$(VENV)/python benchmarks/run_accuracy.py
	$(VENV)/python benchmarks/collective_compare.py

# The documentation as a site (mkdocs.yml: docs/, the labs and this README), served at
# http://127.0.0.1:8000 and rebuilt on every change; scripts/test.sh builds it with --strict.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/mkdocs serve

clean:
	$(VENV)/topolab clean
