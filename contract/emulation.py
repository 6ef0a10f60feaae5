"""`EmulationConfig`: how a network is emulated, the one schema of a scenario's ``[emulation]``
table and of the settings a command adds when it builds a network; `EmulatedRates`: the
rates and MTU a network is emulated at.

The table's keys (`TABLE_KEYS`; docs/scenarios.md gives each its default, range and meaning)
are ``link_mbps``, ``mtu``, ``netem``, ``packets``, ``budget_mbps``, ``machines``, ``ssh_user``,
``ssh_identity`` and ``ssh_known_hosts``. The run-time fields ``reference_gbps``, ``run_dir``,
``lock_wait_s``, ``destination_classes``, ``fair_queues`` and ``host_memory_mib`` are set by a command with
``dataclasses.replace``; a scenario file cannot set them. Every field is checked whenever a
config is made (by the scenario loader, a constructor call or ``dataclasses.replace``): a bad
value raises `EmulationConfigError`, one line naming the key and the value.

Time dilation (docs/emulation.md section 2): a cable planned at ``gbps`` is emulated at
``gbps / reference_gbps * link_mbps`` Mbit/s, where ``reference_gbps`` is the real rate that
``link_mbps`` stands for: the config's ``reference_gbps`` when set (so plans of different
``link_gbps`` can share one time scale), else the network's ``link_gbps``. `emulated_rates`
makes that choice, once, for both emulators (one machine, several machines) and for the
prediction made before a network is built; the result, `EmulatedRates`, gives the time
scale, every cable's shaped rate and the network's directed goodput at the MTU its cables
really have.

Why ``link_mbps = 100`` is the highest default rate (``topolab run`` on a scenario that states
no rate picks one up to it, `auto_rate`; the other commands take it as it is): the emulated run must be
limited by the shaped links, not by the 2-core machine. At 100 Mbit/s per link the workers'
per-operation software cost stays small next to transfer times (the end-to-end prediction
error stays under 10%; at 400 Mbit/s it reached 70%), a 12-worker ring AllReduce measured
1.007x its TCP-limited ideal, and even the switch baseline, whose ports run at ``link_mbps``
as well (its plan's ``link_gbps`` is the port rate), moves under 10 Gbit/s of shaped traffic
in total, far below the 45-55 Gbit/s at which both cores saturate. HTB itself holds its rate
from 10 Mbit/s to 5 Gbit/s (docs/emulation.md section 3), so the default is chosen for the
workers, not for tc.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

from .errors import UsageError
from .names import LOOPBACK_NAMES as LOOPBACK_NAMES  # kept importable from here, where it was
from .names import SshInputError, check_ssh_file, check_ssh_user
from .names import check_machines as check_machine_list
from .network import Link, Network, cable_capacities, connection_capacities
from .physics import (
    DEFAULT_MTU,
    ETHERNET_HEADER,
    ETHERNET_MTU,
    MAX_MTU,
    MIN_MTU,
    OFFLOAD_PACKET_BYTES,
    ROCE_MTU,
    cable_goodput,
    last_frame_bytes,
    tcp_packets,
    time_scale,
)

NETEM_MODES = ("auto", "on", "off")
PACKET_MODES = ("auto", "offload", "frames")
"""``[emulation] packets``: ``offload``, the kernel's segmentation-offload packets of up to
`OFFLOAD_PACKET_BYTES` and a class per destination on every cable end; ``frames``, packets of
one MTU and a class per connection that only borrows the cable (per destination beyond
`FRAMES_MAX_CLASSES`), as the predictor's max-min sharing of every connection assumes (more
packets: more processor time); ``auto``, frames where most of a run's bytes, or of its
point-to-point transfers' bytes, go in messages of at most one offload packet (`packets_for`),
else offload."""
FRAMES_MAX_CLASSES = 65536
"""With frames, the cable ends share their rate by connection (a class per connection per
cable end it crosses) up to this many classes over all cable ends, else by destination: their
tc lines and read-back grow with them, and NCF on 128 servers of degree 4 (242,415 classes,
1,814 on one cable end) failed to build, where 47,998 (degree 8) built in 16-22 s
(`emulator.cable.shared_classes`, docs/emulation.md section 3)."""
FRAMES_SHARE = 0.5
"""``packets = "auto"`` takes frames when at least this share of the bytes a schedule sends,
or of the bytes of its point-to-point transfers, goes in messages of at most
`OFFLOAD_PACKET_BYTES` (`packets_for`)."""
FRAMES_MTUS = (DEFAULT_MTU, ROCE_MTU, ETHERNET_MTU)
"""The MTUs a run with frames and no stated ``mtu`` chooses from, largest first (`frames_mtu_for`)."""
FRAMES_LAST_FRAME_SHARE = 0.05
"""With frames and no stated ``mtu``, the cables take the largest of `FRAMES_MTUS` at which the
last frames of the point-to-point transfers carry at most this share of their bytes
(`frames_mtu_for`)."""
FRAMES_MTU_OPS_SHARE = 1.0
"""A smaller MTU for frames is weighed only where the frame crossings of a cable it adds are at
most this share of the schedule's sends and receives (`frames_mtu_for`)."""
AUTO_RATE = "auto"  # link_mbps = "auto": automatic time dilation (EmulationConfig.auto_rate)
AUTO_MTU = "auto"  # mtu = "auto", or no mtu: the frames' MTU chosen for the schedule (EmulationConfig.auto_mtu)
DEFAULT_LINK_MBPS = 100.0  # see the module docstring for why 100
MIN_LINK_MBPS, MAX_LINK_MBPS = 0.1, 100_000.0  # HTB on a veth; below 0.1 a 1 MB transfer takes minutes
HOST_MEMORY_MIB = 8.0  # measured cost of one emulated host (shell, namespace, link buffers), rounded up
DEFAULT_RUN_DIR = "/run/topolab"  # tmpfs: a reboot forgets the lock and state files, as it forgets namespaces
DEFAULT_SSH_USER = "root"  # the emulator creates namespaces and interfaces on every machine
TABLE_KEYS = (
    "link_mbps",
    "mtu",
    "netem",
    "packets",
    "budget_mbps",
    "machines",
    "ssh_user",
    "ssh_identity",
    "ssh_known_hosts",
)
"""The keys a scenario's ``[emulation]`` table may set; the other fields are run-time settings."""


class EmulationConfigError(UsageError):
    """A bad emulation setting: ``key`` (``emulation.mtu``, or the flag that set it) and the
    ``problem``, which names the value. Exit 2."""

    def __init__(self, key: str, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"{key}: {problem}")


@dataclass(frozen=True)
class EmulationConfig:
    """How to emulate a network. The first eight fields are the ``[emulation]`` table's keys."""

    link_mbps: float = DEFAULT_LINK_MBPS
    """Emulated rate of a cable of ``reference_gbps`` (every other cable scales with it)."""
    mtu: int = DEFAULT_MTU
    """MTU of every cable built on one machine (several machines: their tunnels' MTU); with
    ``auto_mtu``, `topolab run` may take a smaller one for frames (`frames_mtu_for`)."""
    netem: str = "auto"
    """``auto``: apply the plan latency with netem where the kernel has it; ``on``: require
    netem; ``off``: never use it."""
    packets: str = "auto"
    """What a cable carries (`PACKET_MODES`): ``offload`` packets of up to 64 KiB, each
    destination a class; ``frames`` of one MTU, each connection a class (each destination
    beyond `FRAMES_MAX_CLASSES`); ``auto``: `topolab run` picks one for its schedule
    (`packets_for`), the other commands take ``offload``."""
    budget_mbps: float = 0.0
    """Hierarchical networks: the emulated budget of one server (the loader sets
    ``link_mbps`` to it); 0: unset."""
    machines: tuple[str, ...] = ()
    """ssh addresses of the machines to emulate the network over (docs/cluster.md); empty:
    this machine alone. Each is an IP address or an RFC 1123 host name
    (`contract.names.check_machine`). The same address carries the VXLAN tunnels, so it must
    be one the other machines reach: never ``localhost`` or a loopback address."""
    ssh_user: str = DEFAULT_SSH_USER
    """The user ssh logs in as on every machine (it must be root there); a login name
    (`contract.names.check_ssh_user`)."""
    ssh_identity: str | None = None
    """Private key file for ssh (None, or ``""`` in a scenario: ssh's own defaults); a path
    ssh reads as one file (`contract.names.check_ssh_file`), a regular file when the network
    is built."""
    ssh_known_hosts: str | None = None
    """known_hosts file holding the machines' host keys (None: ssh's own defaults); checked
    as ``ssh_identity``."""
    reference_gbps: float | None = None
    """The real rate that ``link_mbps`` stands for; None: the network's ``link_gbps``."""
    run_dir: str = DEFAULT_RUN_DIR
    """Where the run lock and the state files of running networks live."""
    lock_wait_s: float = 0.0
    """How long to wait for another run to release the lock before giving up."""
    destination_classes: bool = True
    """Enforce a per-destination allocation's rates with HTB classes (docs/emulation.md
    section 6); False keeps its planes' paths but shares each cable in one class, which is
    how the ablation measures multipath routing without the rates."""
    fair_queues: bool = True
    """Share every cable end among the destinations routed through it (one HTB class each,
    at an equal share, docs/emulation.md section 3), as the predictor's max-min sharing assumes;
    False leaves one FIFO queue per cable end, where a small message waits behind every byte
    queued before it (fewer classes, a faster start at 128 servers)."""
    host_memory_mib: float = HOST_MEMORY_MIB
    """Memory one emulated host costs, for the up-front check that the network fits."""
    auto_rate: bool = False
    """``link_mbps = "auto"`` in the table, or no ``link_mbps`` (nor ``budget_mbps``) at all:
    `topolab run` picks the rate, at most ``link_mbps`` (the default rate), at which this
    machine's cores keep up with the workers (topolab.run.time_dilation); the emulator itself
    always gets a number, and the other commands take ``link_mbps``."""
    auto_mtu: bool = False
    """``mtu = "auto"`` in the table, or no ``mtu``: where `topolab run` puts frames on the
    cables (``packets``), it picks their MTU for its schedule (`frames_mtu_for`); everywhere
    else the cables have ``mtu`` (`DEFAULT_MTU`)."""

    def __post_init__(self) -> None:
        _number(self, "link_mbps", MIN_LINK_MBPS, MAX_LINK_MBPS)
        _number(self, "mtu", MIN_MTU, MAX_MTU, integer=True)
        _choice(self, "netem", NETEM_MODES)
        _choice(self, "packets", PACKET_MODES)
        _number(self, "budget_mbps", 0.0, MAX_LINK_MBPS)
        try:  # the values that reach ssh: their shapes are contract.names'
            object.__setattr__(self, "machines", check_machine_list(self.machines, "emulation.machines"))
            check_ssh_user(self.ssh_user, "emulation.ssh_user")
            for key in ("ssh_identity", "ssh_known_hosts"):
                value = getattr(self, key)
                if value == "":  # the scenario's way to say "unset"
                    object.__setattr__(self, key, None)
                elif value is not None:
                    check_ssh_file(value, f"emulation.{key}")
        except SshInputError as err:
            raise EmulationConfigError(err.key, err.problem) from None
        _number(self, "reference_gbps", 0.0, math.inf, low_inclusive=False, optional=True)
        if not isinstance(self.run_dir, str) or not self.run_dir:
            raise EmulationConfigError("emulation.run_dir", f"must be a folder, got {self.run_dir!r}")
        _number(self, "lock_wait_s", 0.0, math.inf)
        if not isinstance(self.destination_classes, bool):
            raise EmulationConfigError(
                "emulation.destination_classes", f"expected true or false, got {self.destination_classes!r}"
            )
        if not isinstance(self.fair_queues, bool):
            raise EmulationConfigError("emulation.fair_queues", f"expected true or false, got {self.fair_queues!r}")
        _number(self, "host_memory_mib", 0.0, math.inf, low_inclusive=False)
        if not isinstance(self.auto_rate, bool):
            raise EmulationConfigError(
                "emulation.link_mbps", f"auto_rate must be true or false, got {self.auto_rate!r}"
            )
        if not isinstance(self.auto_mtu, bool):
            raise EmulationConfigError("emulation.mtu", f"auto_mtu must be true or false, got {self.auto_mtu!r}")

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> EmulationConfig:
        """The config a scenario's ``[emulation]`` table describes (only `TABLE_KEYS`)."""
        for key in table:
            if key not in TABLE_KEYS:
                raise EmulationConfigError(f"emulation.{key}", f"unknown key (known: {', '.join(TABLE_KEYS)})")
        rate, mtu = table.get("link_mbps"), table.get("mtu")
        if isinstance(rate, str) and rate != AUTO_RATE:
            raise EmulationConfigError("emulation.link_mbps", f'expected Mbit/s or "{AUTO_RATE}", got {rate!r}')
        if isinstance(mtu, str) and mtu != AUTO_MTU:
            raise EmulationConfigError("emulation.mtu", f'expected bytes or "{AUTO_MTU}", got {mtu!r}')
        settings = dict(table)
        if mtu is None or mtu == AUTO_MTU:
            settings.update(mtu=DEFAULT_MTU, auto_mtu=True)
        if rate == AUTO_RATE or (rate is None and not table.get("budget_mbps")):
            settings.update(link_mbps=DEFAULT_LINK_MBPS, auto_rate=True)
        return cls(**settings)

    @property
    def frames(self) -> bool:
        """Cables carry MTU-sized packets (``packets = "frames"``; their classes:
        `emulator.cable.shared_classes`)."""
        return self.packets == "frames"

    def frame_bytes(self, mtu: int) -> int:
        """The largest packet a cable end of ``mtu`` hands its classes, as HTB counts it: with
        frames, the frame and its Ethernet header (``mtu`` + 14, the classes' quantum:
        `emulator.shaping.Shaping.child_quantum`); 0 with offload packets."""
        return mtu + ETHERNET_HEADER if self.frames else 0

    def hosts_memory_mib(self, nodes: int) -> float:
        """Memory ``nodes`` emulated hosts take (``host_memory_mib`` each)."""
        return nodes * self.host_memory_mib

    def table(self) -> dict[str, Any]:
        """The table keys that differ from their defaults, as a scenario file would write them;
        ``link_mbps`` always (a table without it means "auto"), ``mtu`` unless it is chosen
        (``auto_mtu``: a table without it means "auto")."""
        defaults = {f.name: f.default for f in fields(self)}
        out = {key: getattr(self, key) for key in TABLE_KEYS if getattr(self, key) != defaults[key]}
        out["link_mbps"] = AUTO_RATE if self.auto_rate else self.link_mbps
        if self.auto_mtu:
            out.pop("mtu", None)
        else:
            out["mtu"] = self.mtu
        return out


class PacketsChoice(NamedTuple):
    """`packets_for`'s answer: the ``mode`` and the shares it was taken from."""

    mode: str  # "frames" or "offload"
    share: float  # of all the bytes sent, in messages of at most one offload packet
    transfer_share: float  # of the point-to-point transfers' bytes, in transfers of at most one


def packets_for(message_bytes: Iterable[int], transfer_bytes: Iterable[int] = ()) -> PacketsChoice:
    """The packets for a run that sends messages of ``message_bytes`` and whose point-to-point
    transfers (model-parallel activations and gradients: the schedule's ``copy`` checks, not
    its collectives' steps) are ``transfer_bytes`` long: frames when the share of the bytes
    sent in messages of at most `OFFLOAD_PACKET_BYTES`, or the share of the transfers' bytes
    in transfers of at most that, is at least `FRAMES_SHARE`.

    A cable end's HTB sends an offload packet whole, so messages that fit in one cross every
    cable one after another rather than sharing it, the first at once: the connections of an
    all-to-all of small messages end one by one where the predictor's max-min sharing ends them
    together, and the work waiting for them starts early (NCF on 12 servers: 22.4% faster than
    predicted with offload packets, 3.0% with frames, docs/emulation.md section 3). That holds
    for a job whose all-to-all carries few of its bytes too: topoopt-12's 64 KiB model-parallel
    transfers are 11% of its bytes and lead its iteration (2.1-2.8% faster than predicted at
    25-100 Mbit/s with offload packets, 0.4-0.6% with frames). A collective's steps go one
    after another on a ring, and messages of many packets interleave finely enough, while
    frames cost the kernel more per byte, so the other schedules keep offload."""
    total, share = _bytes_in_one_packet(message_bytes)
    transfer_share = _bytes_in_one_packet(transfer_bytes)[1]
    frames = total > 0 and (share >= FRAMES_SHARE or transfer_share >= FRAMES_SHARE)
    return PacketsChoice("frames" if frames else "offload", share, transfer_share)


class MtuChoice(NamedTuple):
    """`frames_mtu_for`'s answer: the ``mtu`` and, at each MTU it weighed, the share of the
    transfers' bytes their last frames carry and the frames it adds to the largest's."""

    mtu: int
    last_frame_shares: dict[int, float]
    added_frames: dict[int, int]


def frames_mtu_for(
    transfer_bytes: Iterable[int],
    message_bytes: Iterable[int],
    ops: int,
    message_hops: Iterable[int] | None = None,
    mtus: Iterable[int] = FRAMES_MTUS,
) -> MtuChoice:
    """The MTU of cables that carry frames for a run whose point-to-point transfers are
    ``transfer_bytes`` long, among its ``ops`` sends and receives of ``message_bytes``, each
    crossing ``message_hops`` cables (None: one): of the ``mtus`` whose frames add at most
    `FRAMES_MTU_OPS_SHARE` x ``ops`` frame crossings of a cable to what the largest takes
    (`contract.physics.tcp_packets` x hops: every cable end sends, every relay forwards, each
    frame), the largest at which the transfers' last frames
    (`contract.physics.last_frame_bytes`) carry at most `FRAMES_LAST_FRAME_SHARE` of their
    bytes, else the one at which they carry the least (the largest of equals); the largest
    without transfers.

    A cable end sends its connections' frames in turn, one frame each, where the predictor
    shares the cable between them continuously: k transfers of m bytes that share a cable end
    end together in the fluid model, at k x m / r, while frame by frame each ends with its
    last frame, in the order they took turns, the first (k - 1) last frames earlier. The work
    each transfer starts then starts early by up to that, on average half of it: a share
    L / m of the last frame's L bytes. NCF's 32 KiB transfers end in a last frame of 5,924
    bytes at MTU 9000 (18% of their bytes): NCF on 32 servers of degree 8 measured 8.1% faster
    than predicted, at MTU 4096 (416 bytes, 1.3%) 0.9%, at 1500 (912 bytes, 2.8%) 0.5%; on 128
    servers 7.4% at 9000, 0.9% at 4096 and 0.1% at 1500 (docs/emulation.md section 3). Each
    frame costs the cores about as much as an op, and more than the automatic rate counts:
    on 12 servers, where NCF's frames of 4096 would add 155% of its ops in frame crossings,
    they measured 6.6% at the rate chosen for them (0.4% at less than half of it), 9000
    0.5-1.1%. On 128 servers of degree 4 (62%) 4096 measured 6.6% and 8.3% faster than
    predicted where 9000 measured 16.8% and 22.0%. DLRM's 64 KiB transfers (4.4% at 9000)
    measured within 0.6% at 9000 and 1.6-2.5% at 1500."""
    array = np.fromiter(transfer_bytes, np.int64)
    messages = np.fromiter(message_bytes, np.int64)
    hops = np.ones_like(messages) if message_hops is None else np.fromiter(message_hops, np.int64)
    total = int(array.sum())
    ordered = sorted(mtus, reverse=True)
    if not total:
        return MtuChoice(ordered[0], {}, {})
    crossings = {mtu: int((tcp_packets(messages, mtu) * hops).sum()) for mtu in ordered}
    added = {mtu: crossings[mtu] - crossings[ordered[0]] for mtu in ordered}
    affordable = [mtu for mtu in ordered if added[mtu] <= FRAMES_MTU_OPS_SHARE * ops]
    shares = {mtu: int(last_frame_bytes(array, mtu).sum()) / total for mtu in affordable}
    within = [mtu for mtu in affordable if shares[mtu] <= FRAMES_LAST_FRAME_SHARE]
    mtu = within[0] if within else min(affordable, key=lambda m: (shares[m], -m))
    return MtuChoice(mtu, shares, added)


def _bytes_in_one_packet(lengths: Iterable[int]) -> tuple[int, float]:
    """The bytes of ``lengths`` and the share of them in lengths of at most one offload packet."""
    array = np.fromiter(lengths, np.int64)
    total = int(array.sum())
    return total, (int(array[array <= OFFLOAD_PACKET_BYTES].sum()) / total if total else 0.0)


def _number(
    config: EmulationConfig,
    name: str,
    low: float,
    high: float,
    *,
    integer: bool = False,
    low_inclusive: bool = True,
    optional: bool = False,
) -> None:
    """Check the number ``config.<name>`` (a float field also takes an int, stored as float)."""
    key, value = f"emulation.{name}", getattr(config, name)
    if value is None and optional:
        return
    want = "int" if integer else "float"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise EmulationConfigError(key, f"expected {want}, got {type(value).__name__} {value!r}")
    if not integer:
        if isinstance(value, int) and abs(value) > 2**53:  # beyond every maximum; float() may overflow
            raise EmulationConfigError(key, f"out of range, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise EmulationConfigError(key, f"expected a finite number, got {value!r}")
        object.__setattr__(config, name, value)
    if value < low or (not low_inclusive and value == low):
        raise EmulationConfigError(key, f"must be {'>=' if low_inclusive else '>'} {low:g}, got {value!r}")
    if value > high:
        raise EmulationConfigError(key, f"must be <= {high:g}, got {value!r}")


def _choice(config: EmulationConfig, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(config, name)
    if not isinstance(value, str):
        raise EmulationConfigError(f"emulation.{name}", f"expected str, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise EmulationConfigError(f"emulation.{name}", f"{value!r} is not one of {', '.join(choices)}")


def check_machines(machines: object, key: str) -> None:
    """Raise `EmulationConfigError` naming ``key`` unless ``machines`` are distinct machine
    addresses (`contract.names.check_machine`: an IP address or an RFC 1123 host name, never
    an ssh option) that other machines can reach (no loopback: the address carries tunnels)."""
    try:
        check_machine_list(machines, key)
    except SshInputError as err:
        raise EmulationConfigError(err.key, err.problem) from None


@dataclass(frozen=True)
class EmulatedRates:
    """The rates and MTU a network is emulated at: a cable of ``reference_gbps`` runs at
    ``link_mbps``, every other in proportion, all with MTU ``mtu``."""

    reference_gbps: float
    link_mbps: float
    mtu: int = DEFAULT_MTU

    @property
    def time_scale(self) -> float:
        """Emulated seconds per real second (`contract.physics.time_scale`)."""
        return time_scale(self.reference_gbps, self.link_mbps)

    @property
    def bps_per_gbps(self) -> float:
        """Emulated bit/s of one planned Gbit/s."""
        return self.link_mbps * 1e6 / self.reference_gbps

    def rate_bps(self, gbps: float) -> int:
        """The shaped rate (whole bit/s, as tc takes it) of a cable planned at ``gbps``."""
        return round(gbps * self.bps_per_gbps)

    def link_rate_bps(self, links: Iterable[Link]) -> list[int]:
        """The shaped rate of every cable, in order."""
        return [self.rate_bps(link.gbps) for link in links]

    def goodput(self, gbps: float) -> float:
        """Bytes/s of TCP goodput of ``gbps`` planned (a cable's, or an allocated path's)."""
        return cable_goodput(gbps * self.bps_per_gbps, self.mtu)

    def capacities(self, links: Iterable[Link]) -> dict[tuple[int, int], float]:
        """Directed goodput (bytes/s) of ``links`` as emulated (`cable_capacities`)."""
        links = list(links)
        return cable_capacities(links, self.mtu, self.link_rate_bps(links))

    def connection_capacities(self, links: Iterable[Link]) -> dict[tuple[int, int], float]:
        """What one connection gets over parallel cables as emulated (`connection_capacities`)."""
        links = list(links)
        return connection_capacities(links, self.mtu, self.link_rate_bps(links))


def emulated_rates(network: Network, config: EmulationConfig, mtu: int | None = None) -> EmulatedRates:
    """The rates ``network`` is emulated at under ``config``: ``link_mbps`` stands for the
    config's ``reference_gbps``, else for the network's ``link_gbps``; cables of MTU ``mtu``
    (default: the config's; a network over several machines passes its tunnels')."""
    reference = network.link_gbps if config.reference_gbps is None else config.reference_gbps
    return EmulatedRates(float(reference), float(config.link_mbps), config.mtu if mtu is None else mtu)
