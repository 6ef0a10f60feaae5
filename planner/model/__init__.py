"""The model: the zoo's layer graphs, the operator graph, operator fusion, and
models from outside the zoo (PyTorch models traced by `model_import`, Chakra traces by
`chakra`, operator-graph files by `graph_file`), resolved for a job by `workload_graph`."""
