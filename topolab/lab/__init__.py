"""`topolab lab`: the course exercises in labs/: list them, check a student's solution (PASS or what is
wrong). All of it is in command.py, with the helpers the exercises' checkers share
(allreduce_real_seconds, predicted_real_seconds)."""
