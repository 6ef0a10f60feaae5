"""`topolab compare`: the same job on several topologies, each through `topolab run`'s measured run
(topolab.run.measured_run), side by side. Start with command.py; the time axis, each arm's scenario, the
table and the plot are topolab.results.comparison."""
