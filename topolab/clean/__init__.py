"""`topolab clean`: remove what killed topolab runs left behind, and only that (their processes,
namespaces and links, as each run recorded them in its run folder), here or on --machines. All of it is
in command.py."""
