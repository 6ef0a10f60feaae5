"""Cost: one training iteration as the schedule the workers run (`iteration`), the
flow-level predictor of any schedule (`predict`, with its replays in `replay`), the one entry
point that predicts a plan's iteration (`iteration_prediction`), and the search's fast
per-operator model (`costmodel`)."""
