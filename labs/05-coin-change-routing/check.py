"""Checker of exercise 5: the student's first-stride table must route every ordered pair
along a shortest path of the circulant (BFS on the graph, as networkx computes it), and
agree in hop count with planner.topology.routing.coin_change_first_strides (docs/algorithms.md section 4)."""

import networkx as nx

from planner.topology.routing import circulant_hop_counts, coin_change_first_strides
from planner.topology.totient import circulant_cables

TITLE = "Coin-change routing: one first stride per offset"
STUDENT_FILE = "routing.py"
FUNCTIONS = ("first_strides(n, strides)",)
HINT = (
    "hint: strides go both ways (use -p too) and the first coin must start a SHORTEST sequence: "
    "breadth-first search over offsets from 0"
)
CASES = [(12, [1, 5]), (16, [1, 3, 5, 9]), (32, [1, 7]), (128, [1, 5, 13, 39]), (101, [1, 10, 31])]


def check(student, emulate: bool) -> list[str]:
    problems = []
    for n, strides in CASES:
        first = [int(c) for c in student.first_strides(n, list(strides))]
        if len(first) != n:
            problems.append(f"n={n}: table has {len(first)} entries, expected one per offset 0..{n - 1}")
            continue
        coins = {c % n for p in strides for c in (p, -p)}
        graph = nx.Graph(circulant_cables(n, list(strides)))
        shortest = nx.single_source_shortest_path_length(graph, 0)  # circulant: same from every server
        planner_hops = circulant_hop_counts(coin_change_first_strides(n, list(strides)))
        for target in range(1, n):
            node, hops = 0, 0
            while node != target and hops <= n:
                step = first[(target - node) % n]
                if step % n not in coins:
                    problems.append(
                        f"n={n}, strides {strides}: offset {(target - node) % n} starts with {step}, "
                        "not a stride or its negative (there is no such cable)"
                    )
                    break
                node, hops = (node + step) % n, hops + 1
            else:
                if node != target:
                    problems.append(f"n={n}, strides {strides}: the route 0 -> {target} loops")
                elif hops != shortest[target] or hops != planner_hops[0][target]:
                    problems.append(
                        f"n={n}, strides {strides}: 0 -> {target} takes {hops} hops, BFS gives {shortest[target]}"
                    )
                continue
            break  # a broken table: one message is enough for this case
    return problems
