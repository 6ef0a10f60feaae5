"""Link shaping with HTB (and netem where the kernel has it), and the read-back check.

HTB, not TBF or Mininet's TCLink: TBF with Mininet's burst collapses to 40-52% at >= 1
Gbit/s and TCLink leaves every link above 1000 Mbit/s unshaped without an error
(``docs/emulation.md`` section 3). One HTB class per interface carries the whole
egress at the link's rate; its leaf is netem with the dilated plan latency when netem exists.

Under that class (1:1, the cable), a cable end gets one HTB class per destination
(1:``DESTINATION_CLASS_BASE + d``; ceil = the cable's rate, so idle bandwidth is borrowed)
selected by a u32 filter on the destination's identity, and a default class 1:2 for all
other traffic (rate = what the destination classes leave, at least `DEFAULT_SHARE_FLOOR` of
the cable; ceil = the cable's rate). A destination's rate is the planned rate towards it
through this cable where a bandwidth allocation plans one (`emulator.planes`,
``docs/emulation.md`` section 6), else an equal share of the rest among the destinations
routed through the cable end (`emulator.cable.cable_shaping`). Each class may send at its
own rate at any time, so a small message towards one destination no longer waits behind
every byte queued towards the others (one FIFO), and the cable is shared fairly among the
destinations busy on it, as the predictor's max-min sharing assumes (``docs/emulation.md``
section 3); what idle classes leave, the busy ones borrow round robin. netem, where present,
sits under every leaf class.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from .errors import ShapingError

BURST_FLOOR = 1514
"""The least burst (and cburst) of an HTB class, bytes: one standard Ethernet frame
(`htb_burst_bytes`)."""
BURST_S = 50e-6
"""An HTB class's burst in time at its rate, where that is more than `BURST_FLOOR`
(`htb_burst_bytes`)."""
CABLE_CLASS = 1
"""Minor of the class that carries a cable end's whole egress (1:1)."""
DEFAULT_CLASS = 2
"""Minor of the class of unplanned traffic on a cable end with destination classes (1:2)."""
DESTINATION_CLASS_BASE = 0x100
"""Class of destination node ``d``: 1:``DESTINATION_CLASS_BASE + d`` (up to 65279 nodes)."""
CONNECTION_CLASS_BASE = 0x8000
"""Class of the ``i``-th connection a cable end carries with ``packets = "frames"``:
1:``CONNECTION_CLASS_BASE + i`` (up to 32767 connections a cable end, beside destination
classes of nodes below 32512)."""
DEFAULT_SHARE_FLOOR = 0.01
"""The least share of a cable the default class is guaranteed when the plan fills the cable:
unplanned traffic (acks, plane 0) is never starved, and borrows the rest like any class."""
DESTINATION_QUANTUM = 9014
"""HTB quantum of a cable's child classes (a destination's, the default) without frames: the
bytes a class borrowing above its own rate may send at its turn, one jumbo frame with its
Ethernet header. HTB still sends a whole packet at a turn, and a veth hands it packets of up to
64 KiB, so among borrowing classes the turns are per packet; the fair share itself comes from
every class's own rate. With frames the quantum is one frame (`Shaping.child_quantum`). The
cable class 1:1, which has no siblings, keeps 200,000, which only silences HTB's "quantum is
big" warning."""
NETEM_HANDLE = 0x10
"""Handle of the netem qdisc under the default class (10:)."""
NETEM_LIMIT = 100000


@dataclass(frozen=True)
class DestinationClass:
    """The HTB class of one destination on one cable end: ``rate_bps`` guaranteed to packets
    for ``address`` (the identity of node ``node``); with ``source``, of one connection: the
    packets from that identity to ``address``, the ``slot``-th connection of its cable end."""

    node: int
    address: str
    rate_bps: int
    source: str = ""
    slot: int = 0

    @property
    def minor(self) -> int:
        return CONNECTION_CLASS_BASE + self.slot if self.source else DESTINATION_CLASS_BASE + self.node

    @property
    def match(self) -> str:
        """The u32 selector of its packets."""
        src = f" match ip src {self.source}/32" if self.source else ""
        return f"match ip dst {self.address}/32{src}"

    @property
    def label(self) -> str:
        return f"{self.source} to {self.address}" if self.source else self.address


@dataclass(frozen=True)
class Shaping:
    """What one interface must carry: ``rate_bps`` (bit/s), ``delay_us`` (0: none) and the
    destination classes of a bandwidth allocation (none: one class for everything)."""

    ifname: str
    rate_bps: int
    delay_us: float = 0.0
    destinations: tuple[DestinationClass, ...] = ()
    frame_bytes: int = 0
    """With frames on the cable, its largest (MTU and Ethernet header): the child classes'
    quantum (`child_quantum`); 0: offload packets."""

    @property
    def child_quantum(self) -> int:
        """HTB quantum of the cable's child classes: with frames, one frame, so the classes
        take turns a frame each (HTB sends a packet at a turn and another while the class's
        deficit allows: a quantum of 9014 bytes sent 4110-byte frames two at a turn, and the
        last turns of k equal messages ended them up to 2 (k - 1) frames apart, 2.7 s of a
        1 Mbit/s cable for NCF's 42 messages on one cable end, docs/emulation.md section 3);
        else `DESTINATION_QUANTUM`."""
        return self.frame_bytes or DESTINATION_QUANTUM

    @property
    def default_minor(self) -> int:
        """The class unmatched traffic goes to."""
        return DEFAULT_CLASS if self.destinations else CABLE_CLASS

    @property
    def default_rate_bps(self) -> int:
        """The default class's guaranteed rate (the cable's, without destination classes)."""
        if not self.destinations:
            return self.rate_bps
        planned = sum(d.rate_bps for d in self.destinations)
        return max(self.rate_bps - planned, round(self.rate_bps * DEFAULT_SHARE_FLOOR))


def tc_batch(items: list[Shaping], use_netem: bool) -> str:
    """``tc -batch`` text that shapes every interface of one host."""
    lines = []
    for s in items:
        lines.append(f"qdisc replace dev {s.ifname} root handle 1: htb default {s.default_minor:x}")
        lines.append(_htb_class("add", s))
        netem = use_netem and s.delay_us > 0
        if s.destinations:
            lines.append(_htb_class("add", s, DEFAULT_CLASS, s.default_rate_bps))
            for d in s.destinations:
                lines.append(_htb_class("add", s, d.minor, d.rate_bps))
                lines.append(
                    f"filter add dev {s.ifname} parent 1: protocol ip prio 1 u32 {d.match} flowid 1:{d.minor:x}"
                )
                if netem:
                    lines.append(_netem(s, d.minor, d.minor))
        if netem:
            lines.append(_netem(s, s.default_minor, NETEM_HANDLE))
    return "\n".join(lines) + "\n"


def _netem(s: Shaping, parent_minor: int, handle: int) -> str:
    return (
        f"qdisc add dev {s.ifname} parent 1:{parent_minor:x} handle {handle:x}: "
        f"netem delay {s.delay_us:.1f}us limit {NETEM_LIMIT}"
    )


def htb_burst_bytes(rate_bps: int) -> int:
    """The burst (and cburst) of an HTB class of ``rate_bps``: `BURST_S` of the rate, at least
    `BURST_FLOOR` (100 Mbit/s: 1514 bytes; 1 Gbit/s: 6250).

    A class that has idled fills its token bucket up to its burst, then sends that much at
    once, faster than its cable's rate; no wire does that, and the predictor's cables do not.
    The burst was one GSO packet and a jumbo frame (74.5 KB: 6 ms of a 100 Mbit/s cable, 0.75 s
    at 0.8 Mbit/s), so a cable end made up for every pause shorter than that, and topoopt-12
    ran 1.7-2.9% faster than predicted. HTB charges a packet after it sends it, so even a
    small bucket sends one packet (up to a 64 KiB GSO packet) ahead; 50 us of the rate, where
    that is more than a frame, leaves HTB room for its timer's lateness at high rates
    (``topolab verify``: within 0.5% of the TCP maximum at 0.1-2.5 Gbit/s;
    ``docs/emulation.md`` section 3)."""
    return max(BURST_FLOOR, round(rate_bps * BURST_S / 8))


def _htb_class(verb: str, s: Shaping, minor: int = CABLE_CLASS, rate_bps: int | None = None) -> str:
    """The cable's class 1:1 (``minor`` 1), or a child of it at ``rate_bps`` with the cable's ceil."""
    rate = s.rate_bps if rate_bps is None else rate_bps
    parent = "1:" if minor == CABLE_CLASS else f"1:{CABLE_CLASS:x}"
    quantum = 200000 if minor == CABLE_CLASS else s.child_quantum
    return (
        f"class {verb} dev {s.ifname} parent {parent} classid 1:{minor:x} htb rate {rate}bit "
        f"ceil {s.rate_bps}bit burst {htb_burst_bytes(rate)}b cburst {htb_burst_bytes(s.rate_bps)}b quantum {quantum}"
    )


def tc_rate_change(items: list[Shaping], use_netem: bool = False) -> str:
    """``tc -batch`` text that changes the HTB rate of interfaces already shaped by
    `tc_batch` (a live change: the qdiscs, their queues and any netem leaf stay); the
    destination classes keep their rates and take the new rate as their ceil."""
    lines = []
    for s in items:
        lines.append(_htb_class("change", s))
        if s.destinations:
            lines.append(_htb_class("change", s, DEFAULT_CLASS, s.default_rate_bps))
            lines.extend(_htb_class("change", s, d.minor, d.rate_bps) for d in s.destinations)
    return "".join(line + "\n" for line in lines)


_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_HTB_CLASS_LINE = re.compile(r"^class htb 1:(\w+) .*?\brate (\d+)([KMGT]?)bit\b")


def htb_rates_from_text(text: str) -> dict[int, int]:
    """``{minor: rate in bit/s}`` of the HTB classes of handle 1: in ``tc class show dev X``
    text (this tc, iproute2 6.1, prints HTB classes as text even with ``-j``, and
    ``tc -j class show`` without a device prints nothing). tc prints a rate in the largest
    unit that keeps it whole or under 1000 of the next, so the value read is within 0.1%."""
    rates = {}
    for line in text.splitlines():
        m = _HTB_CLASS_LINE.match(line)
        if m:
            rates[int(m.group(1), 16)] = int(m.group(2)) * _UNITS[m.group(3)]
    return rates


def netem_available() -> bool:
    """Try a netem qdisc on the loopback of a throw-away namespace (``unshare -n``): the
    namespace and the qdisc vanish with the tc process, nothing of the host is touched."""
    try:
        proc = subprocess.run(
            ["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def _attr(msg, name, default=None):
    get = getattr(msg, "get_attr", None)
    return get(name, default) if get else default


def read_back(ipr, index_to_name: dict[int, str]) -> dict[str, dict]:
    """What the kernel actually does on each interface: ``{ifname: {"root": kind,
    "classes": {minor: {"parent": minor|None, "rate_bps": int, "ceil_bps": int}},
    "leaves": {class minor: qdisc kind}, "filters": {class minor a u32 filter selects}}}``
    (HTB classes of handle 1: only; a parent None is the root)."""
    out: dict[str, dict] = {
        name: {"root": None, "classes": {}, "leaves": {}, "filters": set()} for name in index_to_name.values()
    }
    for q in ipr.get_qdiscs():
        name = index_to_name.get(q["index"])
        if name is None:
            continue
        kind = _attr(q, "TCA_KIND")
        if q["parent"] == _ROOT:
            out[name]["root"] = kind
        elif q["parent"] >> 16 == 1:
            out[name]["leaves"][q["parent"] & 0xFFFF] = kind
    for index, name in index_to_name.items():
        for c in ipr.get_classes(index=index):
            if c["handle"] >> 16 != 1 or _attr(c, "TCA_KIND") != "htb":
                continue
            opts = _attr(c, "TCA_OPTIONS")
            if opts is None:
                continue
            parms = opts.get_attr("TCA_HTB_PARMS")
            rate = opts.get_attr("TCA_HTB_RATE64") or (parms and parms["rate"]) or 0
            ceil = opts.get_attr("TCA_HTB_CEIL64") or (parms and parms["ceil"]) or 0
            parent = None if c["parent"] == _ROOT else c["parent"] & 0xFFFF
            out[name]["classes"][c["handle"] & 0xFFFF] = {
                "parent": parent,
                "rate_bps": int(rate) * 8,
                "ceil_bps": int(ceil) * 8,
            }
        # pyroute2 0.9 misreads the u32 selector's keys, so only the filter's class is read
        # back here; that each destination's filter matches its identity shows in traffic
        # (emulator.checks.check_plane_paths and the tests).
        for f in ipr.get_filters(index=index, parent=0x10000):
            opts = _attr(f, "TCA_OPTIONS")
            flow = opts.get_attr("TCA_U32_CLASSID") if hasattr(opts, "get_attr") else None
            if flow is not None and flow >> 16 == 1:
                out[name]["filters"].add(flow & 0xFFFF)
    return out


_ROOT = 0xFFFFFFFF


def _rate_off(got: int | None, want: int) -> bool:
    return got is None or abs(got - want) > max(8, want * 1e-3)


def check(wanted: list[Shaping], actual: dict[str, dict], use_netem: bool, host: str) -> list[str]:
    """Mismatches between ``wanted`` and the kernel's ``actual`` qdiscs, one line each."""
    problems = []
    for s in wanted:
        got = actual.get(s.ifname)
        where = f"{host}:{s.ifname}"
        if got is None or got["root"] != "htb":
            problems.append(f"{where}: root qdisc is {got and got['root']!r}, expected htb")
            continue
        classes = got["classes"]
        cable = classes.get(CABLE_CLASS, {})
        if _rate_off(cable.get("rate_bps"), s.rate_bps):
            problems.append(f"{where}: HTB rate {cable.get('rate_bps')} bit/s, expected {s.rate_bps}")
        children = [(DEFAULT_CLASS, s.default_rate_bps, "default class")] if s.destinations else []
        children += [(d.minor, d.rate_bps, f"class of {d.label}") for d in s.destinations]
        for minor, rate, what in children:
            c = classes.get(minor)
            if c is None or c["parent"] != CABLE_CLASS:
                problems.append(f"{where}: no HTB {what} 1:{minor:x} under 1:{CABLE_CLASS:x}")
            elif _rate_off(c["rate_bps"], rate) or _rate_off(c["ceil_bps"], s.rate_bps):
                problems.append(
                    f"{where}: HTB {what} 1:{minor:x} rate {c['rate_bps']} ceil {c['ceil_bps']} bit/s, "
                    f"expected {rate} ceil {s.rate_bps}"
                )
        missing = [d.label for d in s.destinations if d.minor not in got["filters"]]
        if missing:
            problems.append(f"{where}: no u32 filter into the class of {', '.join(missing)}")
        leaves = [s.default_minor] + [d.minor for d in s.destinations]
        if use_netem and s.delay_us > 0:
            for minor in leaves:
                if got["leaves"].get(minor) != "netem":
                    problems.append(
                        f"{where}: leaf qdisc of 1:{minor:x} is {got['leaves'].get(minor)!r}, "
                        f"expected netem delay {s.delay_us:.1f}us"
                    )
    return problems


def raise_on(problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ShapingError("links not shaped as planned: " + "; ".join(problems[:5]) + more)
