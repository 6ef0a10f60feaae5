"""`topolab place`: a scenario's fused operator groups placed on its servers jointly with bandwidth
allocation, predicted, and with --run measured on the emulated network. All of it is in command.py;
the placement itself is planner.placement."""
