"""What several features use: the shared command-line checks (options.py), the emulated network and
its flags (network.py), the prediction a run is compared with (prediction.py, phases.py, calibrate.py),
plans in words (plan_text.py), one schedule run on the network (schedule_run.py), the progress bar."""
