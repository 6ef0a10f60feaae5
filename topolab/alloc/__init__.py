"""`topolab alloc`: how LIBRA splits a hierarchical network's per-server budget over its dimensions, beside
equal shares; --sweep [--measure] over AllReduce sizes, measured on the emulated network. All of it is in
command.py; the split itself is planner.bandwidth."""
