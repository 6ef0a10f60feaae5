"""topolab: plan a training job's topology and parallelization, then prove it on an emulated network."""

__version__ = "0.1.0"
