"""`topolab train`: a PyTorch training script on the emulated network, one rank per server, with the topolab
backend or Gloo. Start with command.py; jobs.py starts and watches the ranks, schedules.py serves the
backend its schedules, report.py reads back what the ranks measured."""
