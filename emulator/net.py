"""`EmulatedNetwork`: a `contract.network.Network` as Mininet hosts in network namespaces
with shaped veth cables; its life cycle.

Build (`start`, or entering the ``with`` block), in this order, so a failure at any step
tears down what exists and nothing is created before the input is checked:
1. validate the network and the config (`validate.validate`), detect netem;
2. take the run lock (bounded wait), write the state file, catch SIGINT/SIGTERM/SIGHUP;
3. one Mininet host per node (`emulator.host`: servers ``h<i>``, switch nodes ``s<j>`` that
   only forward): hosts only, no switch, no controller, no Open vSwitch;
4. one veth per cable, created directly inside the two hosts' namespaces (never in the
   root namespace), MTU set on both ends (`emulator.cable`);
5. per host, over netlink in its namespace: addresses, links up, identity /32 on ``lo``,
   sysctls and one static route per destination from ``network.next_hop``
   (`emulator.hostconfig`); with an allocation, also the plane addresses, rules and tables
   (`emulator.planes`);
6. per host, one ``tc -batch`` (one host per core at a time, each bounded by a limit that
   grows with its lines, `emulator.hostconfig.tc_limit_s`): HTB at each cable's
   emulated rate, with a class per destination routed through it (planned rates of an
   allocation, equal shares otherwise, so destinations share the cable), netem with the
   dilated latency where available;
7. read every qdisc back and raise `ShapingError` if any cable is not shaped as planned.

Teardown (`stop`, leaving the block, an exception or a signal): end the processes started in
the hosts (SIGTERM, then SIGKILL, by PID), then anything else living in our namespaces, then the
host shells (bounded waits); the kernel then frees each namespace and its cables. Mininet's
``net.stop()`` is not used: it does not end ``popen``-ed processes and takes twice as long.
The state file goes last, and stays if a host shell would not die, so `topolab clean` can
finish the job (``docs/emulation.md`` section 4).

The build order, the signal handling and the teardown share one state (the hosts, the run's
processes, the lock and the state file) and must stay in one place to keep the guarantee
above, hence one module over 300 lines.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyroute2  # noqa: F401  (imported up front: it takes 0.15 s)
from mininet.net import Mininet

from contract.emulation import emulated_rates
from contract.limits import limit_s
from contract.network import Network

from . import counters, nsutil, shaping
from .addressing import RANGE, Port, identity, node_name, plane_address, ports_of
from .cable import cable_shaping, make_cables, shared_classes
from .config import EmulationConfig
from .errors import EmulationError, EmulationInputError
from .host import (
    HOST_START_TIMEOUT_S,
    KERNEL_BUSY_WAIT_S,
    EmulatedHost,
    end_hosts,
    kernel_cleanup_limit_s,
    wait_kernel_cleanup,
)
from .hostconfig import apply_qdiscs, check_qdiscs, configure_host
from .interface import BuiltRates
from .live import LiveChanges
from .planes import destination_rates, node_planes
from .state import ENV_MARK, RunLock, RunState, run_dir_path, terminate_pids
from .validate import validate

PROCESS_GRACE_S = 1.0
"""How long processes started in the hosts get between SIGTERM and SIGKILL."""
PROCESS_REAP_S = 2.0
"""How long each of our own (SIGKILLed) processes may take to be reaped."""
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_netem_cache: bool | None = None
_netem_warned = False


def netem_present() -> bool:
    """Whether this kernel has netem (probed once per process)."""
    global _netem_cache
    if _netem_cache is None:
        _netem_cache = shaping.netem_available()
    return _netem_cache


def as_network(description: Any) -> Network:
    """A `Network` as is; anything else (a `contract.plan.Plan`) through `Plan.network`."""
    return description if isinstance(description, Network) else description.network


POPEN_ENTER_TIMEOUT_S = limit_s(5.0)  # mnexec's setns takes microseconds; seconds only on a stalled machine


class EmulatedNetwork(BuiltRates):
    """A network (or a plan's network) built as an emulated network; use as a context manager.

    ``net.host_address(i)``, ``net.popen(i, argv)``, the rates (``net.rates``, the
    `contract.emulation.EmulatedRates` it is built at, and from them ``net.time_scale``,
    ``net.link_mbps``, ``net.reference_gbps``, ``net.mtu``, ``net.link_rate_bps`` per cable,
    ``net.capacities``), ``net.netem``, ``net.facts``, ``net.plane_address(i, p)`` and
    ``net.live`` (live changes: `emulator.live.LiveChanges`) are the public interface, the
    same as `emulator.cluster.ClusterNetwork`'s;
    ``net.network`` is the `Network` it builds, ``net.mininet`` Mininet's view of it (for
    Mininet's CLI)."""

    def __init__(
        self, network: Any, config: EmulationConfig | None = None, *, log: Callable[[str], None] | None = None
    ):
        self.network = as_network(network)
        self.config = EmulationConfig() if config is None else config
        if not isinstance(self.config, EmulationConfig):
            raise TypeError(f"config must be an EmulationConfig, got {type(self.config).__name__}")
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        validate(self.network, self.config)
        self.servers = int(self.network.servers)
        self.nodes = self.network.nodes
        self.rates = emulated_rates(self.network, self.config)
        self.netem = False
        self.ports: list[list[Port]] = ports_of(self.network.links, self.nodes, self.servers)
        self.link_rate_bps = self.rates.link_rate_bps(self.network.links)  # live changes update it
        self.delay_us = float(self.network.latency_us) * self.time_scale
        self.planes = node_planes(self.network)  # per node: plane addresses, rules, routes
        # (node, ifname) -> {dst: bit/s}
        self.destination_bps = (
            destination_rates(self.network, self.ports, self.rates.bps_per_gbps)
            if self.config.destination_classes
            else {}
        )
        # what each cable end shares its rate among: destinations or, with frames, connections
        self.shared = shared_classes(self.network.next_hop, self.ports, self.servers, self.config)
        self.facts: dict[str, Any] = {}
        self.mininet: Mininet | None = None
        self.hosts: list[EmulatedHost] = []
        self._procs: list[subprocess.Popen] = []
        self._lock: RunLock | None = None
        self._state: RunState | None = None
        self._old_handlers: dict[int, Any] = {}
        self._started = self._stopped = False
        self._netns: set[int] = set()
        self.live = LiveChanges(self)  # cable down/up, rate, routes while running (emulator.live)

    # ---- public interface ------------------------------------------------------------

    def host_address(self, i: int) -> str:
        """Identity IPv4 address of node ``i`` (reachable from every host)."""
        if not 0 <= i < self.nodes:
            raise IndexError(f"no node {i} (network has {self.nodes} nodes)")
        return identity(i)

    def plane_address(self, i: int, plane: int) -> str:
        """Source address of node ``i``'s traffic on ``plane`` (0: its identity); bind a socket
        to it (``tcp://SRC:0;DST:PORT`` in ZeroMQ) and its packets take the plane's path."""
        if plane == 0:
            return self.host_address(i)
        if plane not in self.planes[i].planes:
            raise IndexError(f"node {i} sends on no plane {plane} (its planes: {list(self.planes[i].planes)})")
        return plane_address(i, plane)

    def plane_addresses(self, i: int) -> dict[int, str]:
        """``{plane: source address}`` of every plane node ``i`` sends on (empty: plane 0 only)."""
        return {plane: plane_address(i, plane) for plane in self.planes[i].planes}

    def relay_control(self, i: int, path: str) -> None:
        """None: every host shares this machine's files, the workers' control socket
        included (a `emulator.cluster.ClusterNetwork` forwards it to its other machines)."""
        return None

    def cable_tx_bytes(self) -> dict[tuple[int, int], int]:
        """``{(node, peer): bytes sent}`` over every cable so far (`emulator.counters`)."""
        return counters.cable_tx_bytes(self)

    def host_name(self, i: int) -> str:
        return node_name(i, self.servers)

    @property
    def running(self) -> bool:
        """Whether the network is up (started and not yet torn down)."""
        return self._started and not self._stopped and self._state is not None

    def popen(self, i: int, argv: Sequence[str], **kw) -> subprocess.Popen:
        """Start ``argv`` in node ``i``'s namespace, in its own session (a Ctrl-C at the
        terminal reaches the run, which ends its processes in order). Tracked and ended by
        PID at teardown; marked with ``TOPOLAB_RUN`` so `topolab clean` finds it if we die."""
        if not self._started or self._stopped or self._state is None:
            raise EmulationError("popen on a network that is not up")
        if not 0 <= i < len(self.hosts):
            raise IndexError(f"no node {i} (network has {self.nodes} nodes)")
        env = dict(kw.pop("env", None) or os.environ)
        env[ENV_MARK] = self._state.run_id
        kw.setdefault("start_new_session", True)
        host = self.hosts[i]
        proc = subprocess.Popen(["mnexec", "-a", str(host.pid), *map(str, argv)], env=env, **kw)
        self._procs.append(proc)
        self._state.procs.append({"pid": proc.pid, "start": nsutil.start_time(proc.pid), "argv0": str(argv[0])})
        self._state.save()
        # mnexec enters the host's namespaces after it started: the process counts as started
        # in the host only once it is there (or has already exited), bounded like a host's start
        deadline = time.monotonic() + POPEN_ENTER_TIMEOUT_S
        while nsutil.netns_inode(proc.pid) != host.netns and proc.poll() is None:
            if time.monotonic() > deadline:
                raise EmulationError(
                    f"host {host.name}: {argv[0]} (pid {proc.pid}) did not enter the host's network namespace "
                    f"within {POPEN_ENTER_TIMEOUT_S:g} s"
                )
            time.sleep(0.001)
        return proc

    # ---- life cycle ------------------------------------------------------------------
    def __enter__(self) -> EmulatedNetwork:
        self.start()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def start(self) -> None:
        if self._started:
            raise EmulationError("network already started")
        t0 = time.perf_counter()
        self._decide_netem()
        run_dir = run_dir_path(self.config.run_dir)
        self._lock = RunLock(run_dir)
        self._lock.acquire(self.config.lock_wait_s)
        self.facts["lock_wait_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._started = True
        try:
            self._install_signal_handlers()
            self._state = RunState.new(run_dir)
            self._state.save()
            self._build()
        except BaseException:
            self.stop()
            raise
        self.facts.update(
            self.rate_facts()
            | {
                "netem": self.netem,
                "delay_us": self.delay_us if self.netem else 0.0,
                "latency_note": (
                    "plan latency applied with netem (dilated)"
                    if self.netem
                    else "netem absent or off: links add no latency; model it per hop in the workers"
                ),
                "build_s": time.perf_counter() - t0,
            }
        )

    def stop(self) -> None:
        """Tear down everything this network created. Safe to call twice."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        t0 = time.perf_counter()
        masked = self._mask_signals()
        stuck: list[str] = []
        try:
            self._end_processes()
            stuck = end_hosts(self.hosts)
            if self.hosts and not stuck:
                self._wait_kernel_cleanup()
        finally:
            if stuck:
                self.log(
                    f"emulator: host shell(s) {', '.join(stuck)} did not end; their namespaces may remain "
                    "until `topolab clean` runs"
                )
            elif self._state is not None:
                self._state.remove()
            if self._lock is not None:
                self._lock.release()
            self._restore_signal_handlers(masked)
            self.facts["teardown_s"] = time.perf_counter() - t0

    def _wait_kernel_idle(self) -> None:
        """Before building: if the kernel is freeing network namespaces (a network torn down just
        before whose freeing outlasted its estimate, or another run's), wait until it is done,
        `KERNEL_BUSY_WAIT_S` at most (recorded as ``kernel_busy_before_build_s``), so that the
        build's own limits measure the build; past the bound, say so and go on."""
        if not nsutil.kernel_freeing_namespaces():
            return
        busy = wait_kernel_cleanup(KERNEL_BUSY_WAIT_S, nsutil.kernel_freeing_namespaces)
        self.facts["kernel_busy_before_build_s"] = busy.waited_s
        if not busy.done:
            self.log(
                f"emulator: the kernel was still freeing network namespaces {busy.waited_s:.1f} s into the build's "
                "wait for it; building beside it"
            )

    def _wait_kernel_cleanup(self) -> None:
        """Wait for the kernel to free the namespaces just ended (`host.wait_kernel_cleanup`),
        bounded by what the network had; past the bound, say so and go on."""
        tc_lines = self.facts.get("tc_batches", {}).get("lines", 0)  # none: the build ended before tc
        cleanup = wait_kernel_cleanup(kernel_cleanup_limit_s(tc_lines, len(self.network.links)))
        self.facts["kernel_cleanup_s"] = cleanup.waited_s
        if not cleanup.done:
            self.log(
                f"emulator: the kernel was still freeing network namespaces {cleanup.waited_s:.1f} s after "
                f"the hosts ended (limit {cleanup.limit_s:.3g} s); it finishes alone, and a build started "
                "meanwhile waits for it"
            )

    # ---- build -----------------------------------------------------------------------
    def _decide_netem(self) -> None:
        global _netem_warned
        mode = self.config.netem
        if mode == "off":
            self.netem = False
            return
        present = netem_present()
        if mode == "on" and not present:
            raise EmulationInputError("emulation.netem = 'on': this kernel has no netem qdisc (use 'auto' or 'off')")
        self.netem = present
        if not present and not _netem_warned:
            _netem_warned = True
            self.log(
                "emulator: this kernel has no netem: links add no latency "
                f"(plan {self.network.latency_us:g} us per hop, {self.delay_us:g} us dilated); recorded in facts"
            )

    def _build(self) -> None:
        assert self._state is not None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        Mininet.inited = True  # skip Mininet.init(): it raises sysctls of the ROOT namespace
        self._wait_kernel_idle()
        t_hosts = time.perf_counter()
        self.mininet = Mininet(topo=None, build=False, controller=None, ipBase=str(RANGE))
        for u in range(self.nodes):
            host = self.mininet.addHost(self.host_name(u), cls=EmulatedHost, run_mark=self._state.run_id)
            host.identity = identity(u)
            self.hosts.append(host)
        for u, host in enumerate(self.hosts):
            host.list_interfaces((p.ifname, p.address) for p in self.ports[u])
        deadline = time.monotonic() + HOST_START_TIMEOUT_S
        for host in self.hosts:
            host.finishShell(deadline)
            self._netns.add(host.netns)
            self._state.hosts[host.name] = {"pid": host.pid, "start": nsutil.start_time(host.pid), "netns": host.netns}
        self._state.save()
        phases = self.facts.setdefault("build_phases_s", {})
        t = time.perf_counter()
        phases["hosts"] = t - t_hosts
        gso = self.mtu if self.config.frames else None  # frames: TCP hands a cable one MTU at a time
        make_cables(self.network.links, self.ports, self.hosts, self.mtu, gso_max_size=gso)
        phases["cables"] = -t + (t := time.perf_counter())
        next_hop = self.network.next_hop
        for u, host in enumerate(self.hosts):
            configure_host(host, u, self.ports[u], next_hop, self.host_name, planes=self.planes[u])
        phases["addresses_routes"] = -t + (t := time.perf_counter())
        delay_us = self.delay_us if self.netem else 0.0
        work = [(host, self.shaping_of(u, delay_us)) for u, host in enumerate(self.hosts) if self.ports[u]]
        tc = apply_qdiscs(work, self.netem)
        phases["tc"] = -t + (t := time.perf_counter())
        self.facts["tc_batches"] = {
            "parallel": tc.parallel,
            "most_lines": tc.most_lines,
            "lines": tc.lines,
            "limit_s": tc.limit_s,
        }
        check_qdiscs(work, self.netem)
        self.facts["shaping_checked"] = sum(len(items) for _host, items in work)
        self.facts["destination_classes"] = sum(len(s.destinations) for _host, items in work for s in items)
        self.facts["packets"] = "frames" if self.config.frames else "offload"
        self.facts["shared_by"] = (
            "connection" if self.shared.connections else "destination" if self.shared.destinations else "none"
        )
        if self.network.allocation:
            self.facts["planes"] = {
                "pairs": len(self.network.allocation),
                "planes": self.network.planes,
                "plane_routes": sum(len(p.hops) for p in self.planes),
                "rules": sum(len(p.rules) for p in self.planes),
                "destination_classes": sum(len(r) for r in self.destination_bps.values()),
            }
        phases["readback"] = -t + (t := time.perf_counter())

    def shaping_of(self, u: int, delay_us: float) -> list[shaping.Shaping]:
        """What each of node ``u``'s cable ends carries (rates as now, destination classes)."""
        planned = {ifname: rates for (w, ifname), rates in self.destination_bps.items() if w == u}
        shared, carried = self.shared.of(u)
        frame = self.config.frame_bytes(self.mtu)
        return cable_shaping(
            self.ports[u], self.link_rate_bps, delay_us, planned, shared, carried, self.shared.borrow, frame
        )

    # ---- teardown --------------------------------------------------------------------
    def _end_processes(self) -> None:
        shells = {h.pid for h in self.hosts if h.shell is not None}
        live_ns = ({nsutil.netns_inode(pid) for pid in shells} & self._netns) - nsutil.protected_netns()
        ours = [p.pid for p in self._procs if p.poll() is None]
        strays = [pid for pid in nsutil.pids_in_netns(live_ns) if pid not in shells and pid != os.getpid()]
        for pid in ours:  # signal whole sessions we started, so their children go too
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        terminate_pids(sorted(set(ours) | set(strays)), grace_s=PROCESS_GRACE_S)
        for p in self._procs:
            try:
                p.wait(timeout=PROCESS_REAP_S)
            except subprocess.TimeoutExpired:
                pass

    # ---- signals ---------------------------------------------------------------------
    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in _SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, _raise_on_signal)

    def _mask_signals(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        return True

    def _restore_signal_handlers(self, masked: bool) -> None:
        if not masked:
            return
        for sig in _SIGNALS:
            old = self._old_handlers.get(sig)
            signal.signal(sig, old if old is not None else _default_handler(sig))


def _default_handler(sig: int):
    return signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL


def _raise_on_signal(signum: int, frame) -> None:
    """SIGINT raises KeyboardInterrupt, SIGTERM/SIGHUP raise SystemExit(128 + signum): both
    unwind through ``with EmulatedNetwork(...)``, whose exit tears the network down."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)
