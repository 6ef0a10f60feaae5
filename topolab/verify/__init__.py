"""The emulated network checked against the plan: `topolab verify` (verify_command.py: reachability, each
pair's path, every cable's goodput) and `topolab trace-route` (trace_route_command.py: the workers' 5-tuple
followed hop by hop with scapy beside the planned route)."""
