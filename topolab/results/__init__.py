"""The results documents the features write and read back, and how they are shown: a run's (run_results.py,
journal.py, run_report.py, trace_events.py, junit.py), and collective's, compare's and sweep's
(collective_results.py, comparison.py, sweep_report.py). `topolab report` redraws any of them."""
