"""`topolab sweep`: iteration time per model and network at scale with the flow-level model (no
emulation). Start with command.py; inputs.py checks the lists, models and prices; the table and plot are
topolab.results.sweep_report."""
