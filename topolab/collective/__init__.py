"""`topolab collective`: an nccl-tests style AllReduce benchmark on the emulated network, and with
--routing one all-to-all phase per routing (routing_phase.py). Start with command.py; its documents and
tables are topolab.results.collective_results."""
