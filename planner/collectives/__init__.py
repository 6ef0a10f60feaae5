"""planner/collectives."""
