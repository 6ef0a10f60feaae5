"""Exercise 5's packet part: what its README says the capture on the relay shows is what the
plan and the schedule give (no root), and, as root, what scapy captures on h11 during the
groups' AllReduce (`relay_capture`): the relayed chunk, its TTL one lower on the way out, and
the forwarding tax, exact to the byte."""

from __future__ import annotations

import re

import pytest

from emulator.addressing import identity, ports_of
from planner import build_plan, load_scenario
from planner.collectives.rings import subgroup_allreduce
from topolab.lab.command import exercises, load_checker, load_module

MIB = 1 << 20


def _readme_section() -> str:
    text = (exercises()[5] / "README.md").read_text()
    return " ".join(text.split("## Packets: the forwarding tax\n", 1)[1].split("\n## ", 1)[0].split())


def _setup():
    checker = load_checker(5)
    plan = build_plan(load_scenario(str(checker.EMULATED_SCENARIO)))
    schedule = subgroup_allreduce(plan.servers, checker.GRADIENT_BYTES, checker.GROUP_SIZE)
    return checker, plan, schedule


def _iface(plan, node: int, peer: int) -> str:
    ports = ports_of(plan.network.links, plan.network.nodes, plan.servers)
    return next(p.ifname for p in ports[node] if p.peer == peer)


def test_the_readme_says_what_the_plan_and_the_schedule_give():
    checker, plan, schedule = _setup()
    text = _readme_section()
    src, dst = checker.RELAYED_PAIR
    route = plan.path(src, dst)
    relay = route[1]
    assert route == [0, 11, 4] and f"{' -> '.join(map(str, route))}" in (exercises()[5] / "README.md").read_text()
    assert f"TCP from {identity(src)} to {identity(dst)}" in text
    into, out = _iface(plan, relay, src), _iface(plan, relay, dst)
    assert f"leaves h{src} on {_iface(plan, src, relay)} at TTL 64" in text
    assert f"comes into h{relay} on {into} at TTL 64 and leaves on {out} at TTL 63" in text
    assert f"reaches h{dst} on {_iface(plan, dst, relay)} at TTL 63" in text
    # the pairs whose planned route crosses the relay, and the relay's own
    forwarded, own = {}, {}
    for edge in schedule.edge_bytes():
        pair = (edge["src"], edge["dst"])
        where = forwarded if relay in plan.path(*pair)[1:-1] else own if pair[0] == relay else None
        if where is not None:
            where[pair] = where.get(pair, 0) + edge["bytes"]
    assert set(forwarded.values()) == set(own.values()) == {2 * MIB}
    pairs = " and ".join(f"{s} -> {d}" for s, d in sorted(forwarded))
    mine = " and ".join(f"{s} -> {d}" for s, d in sorted(own))
    assert f"h{relay} forwards {pairs}, 2 MiB each, and sends {mine} of its own, 2 MiB each" in text
    assert f"a tax of {sum(forwarded.values()) / sum(own.values()):.2f}" in text
    # the formula the README gives for 2 MiB
    g, half = checker.GROUP_SIZE, checker.GRADIENT_BYTES / 2
    assert 2 * (g - 1) / g * half == 2 * MIB and f"g = {g}: 2 x 2/3 x {half / MIB:g} MiB = 2 MiB" in text
    # one chunk: a third of a ring's half, one message (under the workers' 1 MiB chunks)
    piece = checker.GRADIENT_BYTES // 2 // g
    program = schedule.programs[src]
    sends = {op.length for stream in program for op in program[stream] if op.kind == "send" and op.peer == dst}
    assert sends == {piece}
    assert f"{piece} bytes of rank {src}'s gradient, in on {into} at TTL 64, out on {out} at TTL 63" in text
    assert re.search(r"groups of three: servers 0, 4, 8; 1, 5, 9; 2, 6, 10; 3, 7, 11", text)


def test_the_packet_part_runs_only_with_emulate_and_after_the_table_passes(monkeypatch):
    checker = load_checker(5)
    ran = []
    monkeypatch.setattr(checker, "relay_capture", lambda student: ran.append(student))
    starter = load_module(exercises()[5] / "starter" / checker.STUDENT_FILE, "lab5_starter")
    solution = load_module(exercises()[5] / "solution" / checker.STUDENT_FILE, "lab5_solution")
    assert checker.check(starter, emulate=True) and not ran  # a wrong table: no emulation
    assert checker.check(solution, emulate=False) == [] and not ran


@pytest.mark.root
def test_the_capture_on_the_relay_reads_one_chunk_and_counts_the_tax(tmp_path, capsys):
    checker, plan, _schedule = _setup()
    solution = load_module(exercises()[5] / "solution" / checker.STUDENT_FILE, "lab5_solution")
    found = checker.relay_capture(solution, run_dir=str(tmp_path))
    assert found.problems == [] and found.drops == 0
    relay = found.relay
    assert relay == 11 and found.student_relay == 11
    assert found.forwarded == found.expected_forwarded == {(0, 4): 2 * MIB, (10, 6): 2 * MIB}
    assert found.own == found.expected_own == {(11, 3): 2 * MIB, (11, 7): 2 * MIB}
    assert found.tax == 1.0
    # on the wire, headers and ACKs included, a little over the gradient bytes either way
    assert 4 * MIB < found.forwarded_ip_bytes < 4.2 * MIB and 4 * MIB < found.own_ip_bytes < 4.2 * MIB
    chunk = found.chunk
    assert (chunk["src"], chunk["iteration"], chunk["nbytes"]) == (0, 0, checker.GRADIENT_BYTES // 2 // 3)
    assert (chunk["in"], chunk["ttl_in"], chunk["out"], chunk["ttl_out"]) == ("h11-eth1", 64, "h11-eth3", 63)
    assert chunk["segments"] >= 1
    found.show()
    assert "forwarding tax: 1.00" in capsys.readouterr().out
