"""`topolab shell`: Mininet's CLI on a scenario's emulated network (h0 ping h6, link h0 h1 down, ...), for
the course labs. All of it is in command.py; the network is built as every command builds it
(topolab.common.network)."""
