"""Bandwidth allocations: LIBRA's per-dimension split of a server's budget (`libra`)
and the per-destination multipath rates (`multipath`). (Placement's pair rates live with
the placement, `planner.placement.joint`.)"""
