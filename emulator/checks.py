"""Checks that an emulated network is the plan: reachability, paths, plane paths, per-link goodput.

- Paths: from every host, one ``traceroute`` per destination (UDP probes, all TTLs in
  flight at once); every hop answers with its identity address (routes carry it as
  preferred source), so the observed node sequence is read straight off the output and
  compared with ``network.path(src, dst)``. A traceroute that reaches its destination also
  proves the pair reachable both ways (the answer travels back).
- Plane paths (`check_plane_paths`): the same traceroute, its probes sent from the plane's
  source address (``traceroute -s``), so every hop forwards them by the plane's table; the
  observed sequence is compared with ``network.plane_path(src, dst, plane)``. A plane whose
  route is missing anywhere falls back to the main table and shows as a mismatch.
- Goodput: ``iperf3 --bidir`` between the two ends of a cable (bound to the cable's
  addresses, so the bytes cross exactly that cable), both directions at once, against the
  TCP maximum of the shaped rate at the MTU (`contract.physics.tcp_goodput_fraction`). Cables are measured
  in parallel batches whose total shaped traffic stays under a CPU budget (both cores of this
  machine saturate at 45-55 Gbit/s of shaped traffic, ``docs/emulation.md``).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field

from contract.limits import limit_s
from contract.physics import tcp_goodput_fraction

from .addressing import node_of_identity, plane_address

_HOP = re.compile(r"^\s*(\d+)\s+(.*)$")
_ADDR = re.compile(r"(\d+\.\d+\.\d+\.\d+)")


@dataclass
class PathResult:
    src: int
    dst: int
    expected: list[int]
    observed: list[int | None]
    reached: bool
    plane: int = 0

    @property
    def ok(self) -> bool:
        return self.reached and self.observed == self.expected


@dataclass
class LinkResult:
    link: int
    a: int
    b: int
    rate_mbps: float
    tcp_max_mbps: float
    a_to_b_mbps: float | None
    b_to_a_mbps: float | None
    error: str = ""
    tolerance: float = 0.05
    first_try: tuple[float | None, float | None] | None = None  # set when re-measured alone

    def ratio(self, mbps: float | None) -> float | None:
        return None if mbps is None else mbps / self.tcp_max_mbps

    @property
    def ok(self) -> bool:
        ratios = [self.ratio(self.a_to_b_mbps), self.ratio(self.b_to_a_mbps)]
        # above the maximum by more than the tolerance would mean the cable is not shaped
        return not self.error and all(r is not None and abs(r - 1) <= self.tolerance for r in ratios)


@dataclass
class GoodputReport:
    links: list[LinkResult] = field(default_factory=list)
    batches: int = 0
    budget_gbps: float = 0.0
    seconds: float = 0.0
    sampled: bool = False
    retried: int = 0


def parse_traceroute(text: str, src: int) -> list[int | None]:
    """Node sequence of one ``traceroute -n -q 1`` output (src first; None for a silent hop)."""
    path: list[int | None] = [src]
    for line in text.splitlines():
        m = _HOP.match(line)
        if not m:
            continue
        addr = _ADDR.search(m.group(2))
        path.append(node_of_identity(addr.group(1)) if addr else None)
    return path


def check_paths(
    net, pairs: list[tuple[int, int]] | None = None, timeout_s: float = 60.0, retries: int = 2
) -> list[PathResult]:
    """Traceroute every ordered pair of servers (or ``pairs``), all sources in parallel.
    Pairs with a silent hop are traced again (up to ``retries`` times): a lost probe or
    reply is not a wrong path, a wrong node answering is."""
    servers = int(net.network.servers)
    if pairs is None:
        pairs = [(s, d) for s in range(servers) for d in range(servers) if s != d]
    return _check([(s, d, 0) for s, d in pairs], net, timeout_s, retries)


def check_plane_paths(
    net, planes: list[tuple[int, int, int]] | None = None, timeout_s: float = 60.0, retries: int = 2
) -> list[PathResult]:
    """Traceroute every plane ``(src, dst, plane)`` of the network's allocation (or
    ``planes``) from the plane's source address, as `check_paths` does for plane 0."""
    network = net.network
    if planes is None:
        planes = [(a.src, a.dst, p) for a in network.allocation for p in range(1, len(a.paths) + 1)]
    return _check(planes, net, timeout_s, retries)


def _check(probes: list[tuple[int, int, int]], net, timeout_s: float, retries: int) -> list[PathResult]:
    results = {(r.src, r.dst, r.plane): r for r in _trace(net, probes, timeout_s)}
    for _ in range(retries):
        again = [k for k, r in results.items() if not r.reached or None in r.observed]
        if not again:
            break
        results.update({(r.src, r.dst, r.plane): r for r in _trace(net, again, timeout_s)})
    return [results[p] for p in probes]


def _trace(net, probes: list[tuple[int, int, int]], timeout_s: float) -> list[PathResult]:
    network = net.network
    by_src: dict[int, list[tuple[int, int]]] = {}
    for s, d, plane in probes:
        by_src.setdefault(s, []).append((d, plane))
    procs = {}
    for s, targets in by_src.items():
        # probe a little beyond the planned length: a longer path shows as a mismatch
        script = "; ".join(
            f"echo '## {d} {plane}'; traceroute -n -q 1 -w 1 -N 8 -m {len(network.plane_path(s, d, plane)) + 1}"
            + (f" -s {plane_address(s, plane)}" if plane else "")
            + f" {net.host_address(d)} 2>&1"
            for d, plane in targets
        )
        procs[s] = net.popen(s, ["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = []
    for s, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:  # its pairs count as unreached (and are traced again)
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: sh and its traceroutes
            out, _ = proc.communicate()
        chunks = re.split(r"^## (\d+) (\d+)\n", out, flags=re.M)
        texts = {(int(chunks[i]), int(chunks[i + 1])): chunks[i + 2] for i in range(1, len(chunks) - 2, 3)}
        for d, plane in by_src[s]:
            observed = parse_traceroute(texts.get((d, plane), ""), s)
            expected = network.plane_path(s, d, plane)
            results.append(PathResult(s, d, expected, observed, observed[-1] == d, plane))
    return results


def _iperf_mbps(doc: dict, key: str) -> float | None:
    try:
        return float(doc["end"][key]["bits_per_second"]) / 1e6
    except (KeyError, TypeError, ValueError):
        return None


def check_goodput(
    net,
    links: list[int] | None = None,
    seconds: float = 3.0,
    omit_s: int = 1,
    budget_gbps: float = 8.0,
    tolerance: float = 0.05,
    progress=None,
    retries_max: int = 8,
) -> GoodputReport:
    """Measure every cable in ``links`` (default: all) both ways at once with iperf3; up to
    ``retries_max`` cables that miss the tolerance are measured once more, alone."""
    network = net.network
    all_links = list(range(len(network.links)))
    chosen = all_links if links is None else links
    report = GoodputReport(budget_gbps=budget_gbps, sampled=len(chosen) < len(all_links))
    frac = tcp_goodput_fraction(net.mtu)
    # batches: greedy, keeping sum of shaped traffic (both directions) <= budget, and no
    # host in more than 4 measurements at once
    batches: list[list[int]] = []
    current, load, per_host = [], 0.0, {}
    for k in chosen:
        bidir_gbps = 2 * net.link_rate_bps[k] / 1e9
        a, b = network.links[k].a, network.links[k].b
        if current and (load + bidir_gbps > budget_gbps or per_host.get(a, 0) >= 4 or per_host.get(b, 0) >= 4):
            batches.append(current)
            current, load, per_host = [], 0.0, {}
        current.append(k)
        load += bidir_gbps
        per_host[a] = per_host.get(a, 0) + 1
        per_host[b] = per_host.get(b, 0) + 1
    if current:
        batches.append(current)
    t0 = time.perf_counter()
    for i, batch in enumerate(batches):
        if progress:
            progress(f"goodput: batch {i + 1}/{len(batches)}: {len(batch)} cable(s)")
        report.links += _measure_batch(net, batch, seconds, omit_s, frac, tolerance)
    # A cable that missed under load (the machine is shared) is measured again, alone: a
    # shaping fault fails alone too, CPU contention does not. Both results are kept.
    retry = [i for i, r in enumerate(report.links) if not r.ok]
    for n, i in enumerate(retry[:retries_max]):
        if progress:
            progress(
                f"goodput: re-measuring cable {report.links[i].link} alone ({n + 1}/{min(len(retry), retries_max)})"
            )
        again = _measure_batch(net, [report.links[i].link], seconds, omit_s, frac, tolerance)[0]
        again.first_try = (report.links[i].a_to_b_mbps, report.links[i].b_to_a_mbps)
        report.links[i] = again
        report.retried += 1
    report.batches = len(batches)
    report.seconds = time.perf_counter() - t0
    return report


LISTEN_TIMEOUT_S = limit_s(5.0)
"""How long the iperf3 servers of one batch may take to listen (locally ~0.1 s; a server
started over ssh on another machine takes longer, and a client started before its server
listens fails with "Connection refused")."""


def _wait_listening(net, servers: list[tuple[int, int]]) -> None:
    """Return once every (host, TCP port) listens, or after `LISTEN_TIMEOUT_S` (a server that
    never listens shows up as that cable's client error)."""
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    waiting = list(servers)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.05)
        waiting = [
            (u, port) for u, port in waiting if f":{port} " not in net.hosts[u].cmd(f"ss -Hltn 'sport = :{port}'") + " "
        ]


def _measure_batch(
    net, batch: list[int], seconds: float, omit_s: int, frac: float, tolerance: float
) -> list[LinkResult]:
    network = net.network
    servers, clients = [], []
    for k in batch:
        link = network.links[k]
        pa = next(p for p in net.ports[link.a] if p.link == k)
        port = 20000 + k
        servers.append(
            net.popen(
                link.b,
                ["iperf3", "-s", "-1", "-B", pa.peer_address, "-p", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    _wait_listening(net, [(network.links[k].b, 20000 + k) for k in batch])
    for k in batch:
        link = network.links[k]
        pa = next(p for p in net.ports[link.a] if p.link == k)
        clients.append(
            net.popen(
                link.a,
                [
                    "iperf3",
                    "-c",
                    pa.peer_address,
                    "-B",
                    pa.address,
                    "-p",
                    str(20000 + k),
                    "-t",
                    f"{seconds:g}",
                    "-O",
                    str(omit_s),
                    "--bidir",
                    "-J",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    results = []
    for k, client in zip(batch, clients):
        link = network.links[k]
        rate = net.link_rate_bps[k] / 1e6
        try:
            out, _ = client.communicate(timeout=seconds + omit_s + 30)
            doc = json.loads(out)
            error = doc.get("error", "")
        except (subprocess.TimeoutExpired, ValueError) as exc:
            client.kill()
            doc, error = {}, f"iperf3: {exc}"
        results.append(
            LinkResult(
                k,
                link.a,
                link.b,
                rate,
                rate * frac,
                _iperf_mbps(doc, "sum_received"),
                _iperf_mbps(doc, "sum_received_bidir_reverse"),
                error,
                tolerance,
            )
        )
    for s in servers:
        try:
            s.wait(timeout=5)
        except subprocess.TimeoutExpired:
            s.kill()
    return results


def sample_links(n_links: int, count: int, seed: int = 0) -> list[int]:
    """A reproducible sample of ``count`` cable indices (all of them if count >= n_links)."""
    if count >= n_links:
        return list(range(n_links))
    return sorted(random.Random(seed).sample(range(n_links), count))
