"""`topolab report DIR`: the report and plots of a results folder drawn again: a run (also a killed one),
compare, collective, sweep. Start with command.py, which tells the folder's kind; the documents and their
reports are in topolab.results."""
