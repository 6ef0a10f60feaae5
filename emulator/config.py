"""`EmulationConfig`: the scenario's ``[emulation]`` table, with the defaults we measured.

Time dilation: a plan link of ``plan.link_gbps`` is emulated at ``link_mbps``; every link is
scaled by the same factor, so ``time_scale = plan.link_gbps * 1000 / link_mbps`` converts
each measured time back to the planned network (a 25 Gbps link emulated at 500 Mbit/s runs
50x slower).

Why ``link_mbps = 400`` by default (see ../shared/reference/emulation-facts.md): with all 48
link directions of the 12-server degree-4 scenario busy, every TCP flow stays within 5% of the
HTB maximum up to 1000-1250 Mbit/s per link, and both cores saturate at 45-55 Gbit/s of
shaped traffic in total. At 500 Mbit/s the TopoOpt scenario moves 24 Gbit/s (half the CPU
ceiling) and the switch baseline, whose 4x ports carry every byte over two links, moves 48
Gbit/s only if all ports are saturated both ways at once; the 12-worker ring AllReduce was
measured 1.057x its TCP-limited ideal at 500 Mbit/s against 1.092x at 1000 Mbit/s.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .errors import EmulationInputError

NETEM_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class EmulationConfig:
    """How to emulate a plan. Field names match the scenario's ``[emulation]`` table."""

    link_mbps: float = 400.0
    """Emulated rate of one plan link of ``plan.link_gbps`` (other links scale with it)."""
    mtu: int = 9000
    """MTU of every emulated cable (RDMA clusters run jumbo frames)."""
    netem: str = "auto"
    """``auto``: apply the plan latency with netem where the kernel has it; ``on``: require
    netem; ``off``: never use it."""
    reference_gbps: float | None = None
    """The real rate that ``link_mbps`` stands for; None means ``plan.link_gbps``. Set it to
    the scenario's ``cluster.link_gbps`` so that plans whose ``link_gbps`` differs (a switch
    plan of 100 Gbps ports) share one time scale with the TopoOpt plan they are compared to."""
    run_dir: str = "/run/topolab"
    """Where the run lock and the state files of running networks live (tmpfs: a reboot
    forgets them, as it forgets the namespaces)."""
    lock_wait_s: float = 0.0
    """How long to wait for another run to release the lock before giving up."""
    host_memory_mib: float = 8.0
    """Memory one emulated host costs (its shell, namespace and link buffers), for the
    up-front check that the plan fits in this machine's memory."""

    @classmethod
    def from_any(cls, obj: Any | None) -> EmulationConfig:
        """Accept an `EmulationConfig`, the scenario loader's dataclass, a dict or None."""
        if obj is None:
            return cls()
        if isinstance(obj, cls):
            config = obj
        else:
            kwargs = {}
            for f in fields(cls):
                if isinstance(obj, dict):
                    if f.name in obj:
                        kwargs[f.name] = obj[f.name]
                elif hasattr(obj, f.name):
                    kwargs[f.name] = getattr(obj, f.name)
            config = cls(**kwargs)
        config.check()
        return config

    def check(self) -> None:
        """Raise `EmulationInputError` naming the first bad field."""
        try:
            rate = float(self.link_mbps)
        except (TypeError, ValueError):
            raise EmulationInputError(f"emulation.link_mbps = {self.link_mbps!r}: not a number") from None
        if not rate > 0 or rate != rate or rate == float("inf"):
            raise EmulationInputError(f"emulation.link_mbps = {self.link_mbps!r}: must be a positive rate in Mbit/s")
        if not isinstance(self.mtu, int) or isinstance(self.mtu, bool) or not 576 <= self.mtu <= 65535:
            raise EmulationInputError(f"emulation.mtu = {self.mtu!r}: must be an integer from 576 to 65535")
        if self.reference_gbps is not None and not float(self.reference_gbps) > 0:
            raise EmulationInputError(f"emulation.reference_gbps = {self.reference_gbps!r}: must be a positive rate")
        if self.netem not in NETEM_MODES:
            raise EmulationInputError(f"emulation.netem = {self.netem!r}: must be one of {', '.join(NETEM_MODES)}")
