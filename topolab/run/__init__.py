"""`topolab run`: plan a scenario, predict it, emulate its network, run verified training iterations, write
results.json and the report. Start with command.py (flags, closing line), then measured_run.py (the stages
in order); time_dilation.py, faults.py and machine_probe.py serve the stages."""
