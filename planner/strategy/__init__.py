"""Parallelization strategies: fixed strategies and the traffic of any strategy (`strategies`).
The search over them is `planner.search`; device placement of fused operator groups is
`planner.placement`."""
