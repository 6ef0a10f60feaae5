"""Planning without root: `topolab plan` (plan_command.py: strategy, topology, routes), `topolab predict`
(predict_command.py: the iteration time a run would measure) and `topolab import` (import_command.py: a
PyTorch model or a Chakra trace as an operator-graph file)."""
