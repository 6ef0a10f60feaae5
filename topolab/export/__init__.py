"""`topolab export`: the plan as files for real servers and other tools: cabling, MSCCL and NCCL XML,
ASTRA-sim (no root). All of it is in command.py; each format's limits are in docs/export.md."""
