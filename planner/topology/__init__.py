"""Topologies: TotientPerms and SelectPermutations, TopologyFinder, model-parallel
matchings, connectivity repair, baseline graphs, routes, multi-dimensional layouts,
partitioning over machines, rerouting around failed cables, and the summary figures."""
