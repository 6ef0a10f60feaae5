"""Link shaping with HTB (and netem where the kernel has it), and the read-back check.

HTB, not TBF or Mininet's TCLink: TBF with Mininet's burst collapses to 40-52% at >= 1
Gbit/s and TCLink leaves every link above 1000 Mbit/s unshaped without an error
(``docs/emulation.md`` section 3). One HTB class per interface carries the whole
egress at the link's rate; its leaf is netem with the dilated plan latency when netem exists.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from .errors import ShapingError

BURST_FLOOR = 65536 + 9014  # a veth hands HTB GSO packets of up to 64 KiB


@dataclass(frozen=True)
class Shaping:
    """What one interface must carry: ``rate_bps`` (bit/s) and ``delay_us`` (0: none)."""

    ifname: str
    rate_bps: int
    delay_us: float = 0.0


def tc_batch(items: list[Shaping], use_netem: bool) -> str:
    """``tc -batch`` text that shapes every interface of one host."""
    lines = []
    for s in items:
        # quantum: one class per qdisc, so it only silences the "quantum is big" warning.
        lines.append(f"qdisc replace dev {s.ifname} root handle 1: htb default 1")
        lines.append(_htb_class("add", s))
        if use_netem and s.delay_us > 0:
            lines.append(f"qdisc add dev {s.ifname} parent 1:1 handle 10: netem delay {s.delay_us:.1f}us limit 100000")
    return "\n".join(lines) + "\n"


def _htb_class(verb: str, s: Shaping) -> str:
    burst = max(BURST_FLOOR, s.rate_bps // 8 // 1000)  # 1 ms of the rate, at least one GSO packet
    return (
        f"class {verb} dev {s.ifname} parent 1: classid 1:1 htb rate {s.rate_bps}bit "
        f"ceil {s.rate_bps}bit burst {burst}b cburst {burst}b quantum 200000"
    )


def tc_rate_change(items: list[Shaping], use_netem: bool = False) -> str:
    """``tc -batch`` text that changes the HTB rate of interfaces already shaped by
    `tc_batch` (a live change: the qdiscs, their queues and any netem leaf stay)."""
    return "".join(_htb_class("change", s) + "\n" for s in items)


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
    "rate_bps": int|None, "leaf": kind|None, "delay_us": float|None}}``."""
    out: dict[str, dict] = {
        name: {"root": None, "rate_bps": None, "leaf": None, "delay_us": None} for name in index_to_name.values()
    }
    for q in ipr.get_qdiscs():
        name = index_to_name.get(q["index"])
        if name is None:
            continue
        kind = _attr(q, "TCA_KIND")
        if q["parent"] == 0xFFFFFFFF:
            out[name]["root"] = kind
        elif q["parent"] == 0x00010001:
            out[name]["leaf"] = kind
            if kind == "netem":
                opts = _attr(q, "TCA_OPTIONS")
                latency = opts.get("latency") if hasattr(opts, "get") else None
                out[name]["delay_us"] = _netem_delay_us(opts, latency)
    for index, name in index_to_name.items():
        for c in ipr.get_classes(index=index):
            if c["handle"] != 0x00010001 or _attr(c, "TCA_KIND") != "htb":
                continue
            opts = _attr(c, "TCA_OPTIONS")
            rate64 = opts.get_attr("TCA_HTB_RATE64") if opts is not None else None
            parms = opts.get_attr("TCA_HTB_PARMS") if opts is not None else None
            if rate64:
                out[name]["rate_bps"] = int(rate64) * 8
            elif parms is not None:
                out[name]["rate_bps"] = int(parms["rate"]) * 8
    return out


def _netem_delay_us(opts, latency) -> float | None:
    if opts is None:
        return None
    lat64 = opts.get_attr("TCA_NETEM_LATENCY64") if hasattr(opts, "get_attr") else None
    if lat64 is not None:
        return lat64 / 1000.0
    return None


def check(wanted: list[Shaping], actual: dict[str, dict], use_netem: bool, host: str) -> list[str]:
    """Mismatches between ``wanted`` and the kernel's ``actual`` qdiscs, one line each."""
    problems = []
    for s in wanted:
        got = actual.get(s.ifname)
        where = f"{host}:{s.ifname}"
        if got is None or got["root"] != "htb":
            problems.append(f"{where}: root qdisc is {got and got['root']!r}, expected htb")
            continue
        if got["rate_bps"] is None or abs(got["rate_bps"] - s.rate_bps) > max(8, s.rate_bps * 1e-3):
            problems.append(f"{where}: HTB rate {got['rate_bps']} bit/s, expected {s.rate_bps}")
        if use_netem and s.delay_us > 0 and got["leaf"] != "netem":
            problems.append(f"{where}: leaf qdisc is {got['leaf']!r}, expected netem delay {s.delay_us:.1f}us")
    return problems


def raise_on(problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ShapingError("links not shaped as planned: " + "; ".join(problems[:5]) + more)
