"""`EmulatedNetwork`: a `Plan` as Mininet hosts in network namespaces with shaped veth cables.

Build (`start`, or entering the ``with`` block), in this order, so a failure at any step
tears down what exists and nothing is created before the input is checked:
1. validate the plan and the config (`validate.validate`), detect netem;
2. take the run lock, write the state file, catch SIGINT/SIGTERM/SIGHUP;
3. one Mininet ``Host`` per node (servers ``h<i>``, switch nodes ``s<j>`` that only
   forward): hosts only, no switch, no controller, no Open vSwitch;
4. one veth per cable, created directly inside the two hosts' namespaces (never in the
   root namespace), MTU set on both ends;
5. per host, over netlink in its namespace (pyroute2): addresses, links up, identity /32 on
   ``lo``, sysctls (ip_forward, rp_filter off, cubic, no ICMP rate limit so traceroute sees
   every hop) and one static route per destination from ``plan.next_hop``, with the identity
   as preferred source;
6. per host, one ``tc -batch`` (all hosts in parallel): HTB at each cable's emulated rate,
   netem with the dilated latency where available;
7. read every qdisc back and raise `ShapingError` if any cable is not shaped as planned.

Teardown (`stop`, leaving the block, an exception or a signal): end the processes started in
the hosts (SIGTERM, then SIGKILL, by PID), then anything else living in our namespaces, then the
host shells; the kernel then frees each namespace and its cables. Mininet's ``net.stop()`` is
not used: it does not end ``popen``-ed processes and takes twice as long.
"""

from __future__ import annotations

import os
import pty
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyroute2  # noqa: F401  (imported up front: it takes 0.15 s)
from mininet.net import Mininet
from mininet.node import Host

from contract.physics import tcp_goodput_fraction, time_scale

from . import nlbatch, nsutil, shaping
from .addressing import Port, identity, node_name, ports_of
from .config import EmulationConfig
from .errors import EmulationError, EmulationInputError, ShapingError
from .state import ENV_MARK, RunLock, RunState, run_dir_path, terminate_pids
from .validate import validate

_netem_cache: bool | None = None
# How long a host's shell may take to start (prompt, own namespace); all hosts boot in parallel.
HOST_START_TIMEOUT_S = 8.0
# Cubic on every route (``ip route ... congctl cubic``): the default bbr leaves 10-27% of a
# shaped link unused, and a child namespace may only pick algorithms the ROOT namespace lists
# in tcp_allowed_congestion_control (here "reno bbr"), which we must not change. A route's
# congctl applies to every connection over it, both ends, whatever the namespace default.
CUBIC = {"cc_algo": "cubic"}
_netem_warned = False


def netem_present() -> bool:
    """Whether this kernel has netem (probed once per process)."""
    global _netem_cache
    if _netem_cache is None:
        _netem_cache = shaping.netem_available()
    return _netem_cache


class _PortIntf:
    """A cable end as Mininet's CLI lists it (``net``, ``dump``, ``intfs``)."""

    link = None

    def __init__(self, name: str, ip: str):
        self.name, self.ip = name, ip

    def IP(self) -> str:
        return self.ip

    updateIP = IP

    def MAC(self) -> None:
        return None

    def __str__(self) -> str:
        return self.name


class _IdentityIntf:
    """What Mininet's CLI asks a host's default interface for: its address. Our hosts are
    reached by their identity address, not by the address of one of their cables."""

    link = None

    def __init__(self, host: EmulatedHost):
        self.host, self.name = host, "lo"

    def IP(self) -> str:
        return self.host.identity

    updateIP = IP

    def MAC(self) -> None:
        return None

    def __str__(self) -> str:
        return self.name


class EmulatedHost(Host):
    """A Mininet host named by its identity address (``h0 ping h6`` pings the identity).

    Its shell is started in two halves (`startShell` spawns, `finishShell` waits for the
    prompt) so that all hosts boot in parallel: Mininet waits for each shell in turn."""

    identity: str = ""
    netns: int | None = None  # inode of its own network namespace, once started

    def startShell(self, mnopts=None):
        if self.shell:
            return
        opts = ("-cd" if mnopts is None else mnopts) + ("n" if self.inNamespace else "")
        cmd = ["mnexec", opts, "env", "PS1=" + chr(127), "bash", "--norc", "--noediting", "-is", "mininet:" + self.name]
        self.master, self.slave = pty.openpty()
        self.shell = self._popen(cmd, stdin=self.slave, stdout=self.slave, stderr=self.slave, close_fds=False)
        # the shell holds the terminal now; without our copy, its death is a hang-up we see at once
        os.close(self.slave)
        self.slave = None
        self.stdin = os.fdopen(self.master, "r")
        self.stdout = self.stdin
        self.pid = self.shell.pid
        self.pollOut = select.poll()
        # input only: Mininet registers every event, and a pty is always writable (POLLOUT),
        # which turns each wait for output into a busy loop and then a blocking read
        self.pollOut.register(self.stdout, select.POLLIN | select.POLLPRI)
        self.outToNode[self.stdout.fileno()] = self
        self.inToNode[self.stdin.fileno()] = self
        self.execed = False
        self.lastCmd = None
        self.lastPid = None
        self.readbuf = ""
        self.waiting = True

    def finishShell(self, deadline: float) -> None:
        """Wait until the shell is started: its prompt has arrived and it lives in a network
        namespace of its own (not the one of the process that created it). Bounded by
        ``deadline`` (``time.monotonic()``); past it, or if the shell exits, one error naming
        the host."""
        self._wait_prompt(deadline, "give its first prompt")
        ours = nsutil.netns_inode(os.getpid())
        while True:
            ino = nsutil.netns_inode(self.pid)
            if ino is not None and ino != ours:
                self.netns = ino
                break
            self._fail_if_exited("enter its own network namespace")
            if time.monotonic() > deadline:
                raise EmulationError(
                    f"host {self.name}: its shell (pid {self.pid}) is still in the creating "
                    f"process's network namespace after {HOST_START_TIMEOUT_S:g} s"
                )
            select.select([], [], [], 0.005)
        self.waiting = False
        self.write("unset HISTFILE; stty -echo; set +m\n")
        self._wait_prompt(deadline, "set up its shell")

    def _wait_prompt(self, deadline: float, what: str) -> None:
        """Read the shell's output until its prompt (PS1 is chr(127)), at most until ``deadline``."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EmulationError(
                    f"host {self.name}: its shell (pid {self.pid}) did not {what} within {HOST_START_TIMEOUT_S:g} s"
                )
            events = self.pollOut.poll(remaining * 1000)
            if not events:
                continue
            try:
                data = self.read(1024)
            except OSError:  # the pty's other end is closed: the shell is gone
                data = ""
            if data and data[-1] == chr(127):
                return
            self._fail_if_exited(what)

    def _fail_if_exited(self, what: str) -> None:
        code = self.shell.poll()
        if code is not None:
            raise EmulationError(f"host {self.name}: its shell exited (status {code}) before it could {what}")

    def defaultIntf(self):
        return _IdentityIntf(self)

    def IP(self, intf=None):
        return self.identity if intf is None else super().IP(intf)


class EmulatedNetwork:
    """A plan built as an emulated network; use as a context manager.

    ``net.host_address(i)``, ``net.popen(i, argv)``, ``net.time_scale``, ``net.link_mbps``,
    ``net.mtu``, ``net.netem`` and ``net.facts`` are the public interface."""

    def __init__(self, plan, config: Any = None, *, log: Callable[[str], None] | None = None):
        self.plan = plan
        self.config = EmulationConfig.from_any(config)
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        validate(plan, self.config)
        self.servers = int(plan.servers)
        self.nodes = int(plan.servers) + int(plan.switches)
        self.link_mbps = float(self.config.link_mbps)
        self.mtu = int(self.config.mtu)
        self.reference_gbps = float(self.config.reference_gbps or plan.link_gbps)
        self.time_scale = time_scale(self.reference_gbps, self.link_mbps)
        self.netem = False
        self.ports: list[list[Port]] = ports_of(plan.links, self.nodes, self.servers)
        self.link_rate_bps = [round(l.gbps / self.reference_gbps * self.link_mbps * 1e6) for l in plan.links]
        self.delay_us = float(plan.latency_us) * self.time_scale
        self.facts: dict[str, Any] = {}
        self.mininet: Mininet | None = None
        self.hosts: list[EmulatedHost] = []
        self._procs: list[subprocess.Popen] = []
        self._lock: RunLock | None = None
        self._state: RunState | None = None
        self._old_handlers: dict[int, Any] = {}
        self._started = self._stopped = False
        self._netns: set[int] = set()

    # ---- public interface ------------------------------------------------------------
    def host_address(self, i: int) -> str:
        """Identity IPv4 address of node ``i`` (reachable from every host)."""
        if not 0 <= i < self.nodes:
            raise IndexError(f"no node {i} (plan has {self.nodes} nodes)")
        return identity(i)

    def host_name(self, i: int) -> str:
        return node_name(i, self.servers)

    def popen(self, i: int, argv: Sequence[str], **kw) -> subprocess.Popen:
        """Start ``argv`` in node ``i``'s namespace, in its own session (a Ctrl-C at the
        terminal reaches the run, which ends its processes in order). Tracked and ended by
        PID at teardown; marked with ``TOPOLAB_RUN`` so `topolab clean` finds it if we die."""
        if not self._started or self._stopped:
            raise EmulationError("popen on a network that is not up")
        host = self.hosts[i] if 0 <= i < len(self.hosts) else None
        if host is None:
            raise IndexError(f"no node {i} (plan has {self.nodes} nodes)")
        env = dict(kw.pop("env", None) or os.environ)
        env[ENV_MARK] = self._state.run_id
        kw.setdefault("start_new_session", True)
        proc = subprocess.Popen(["mnexec", "-a", str(host.pid), *map(str, argv)], env=env, **kw)
        self._procs.append(proc)
        self._state.procs.append({"pid": proc.pid, "start": nsutil.start_time(proc.pid), "argv0": str(argv[0])})
        self._state.save()
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
            {
                "servers": self.servers,
                "switch_nodes": self.nodes - self.servers,
                "cables": len(self.plan.links),
                "link_mbps": self.link_mbps,
                "reference_gbps": self.reference_gbps,
                "time_scale": self.time_scale,
                "mtu": self.mtu,
                "rates_mbps": sorted({r / 1e6 for r in self.link_rate_bps}),
                "tcp_max_fraction": tcp_goodput_fraction(self.mtu),
                "netem": self.netem,
                "delay_us": self.delay_us if self.netem else 0.0,
                "plan_latency_us": float(self.plan.latency_us),
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
        try:
            self._end_processes()
            self._end_hosts()
        finally:
            if self._state is not None:
                self._state.remove()
            if self._lock is not None:
                self._lock.release()
            self._restore_signal_handlers(masked)
            self.facts["teardown_s"] = time.perf_counter() - t0

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
                f"(plan {self.plan.latency_us:g} us per hop, {self.delay_us:g} us dilated); recorded in facts"
            )

    def _build(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        Mininet.inited = True  # skip Mininet.init(): it raises sysctls of the ROOT namespace
        t_hosts = time.perf_counter()
        self.mininet = Mininet(topo=None, build=False, controller=None, ipBase="198.18.0.0/15")
        for u in range(self.nodes):
            host = self.mininet.addHost(self.host_name(u), cls=EmulatedHost)
            host.identity = identity(u)
            self.hosts.append(host)
        for u, host in enumerate(self.hosts):
            # what Mininet's CLI lists (pingall skips hosts without interfaces)
            host.intfs[0] = _IdentityIntf(host)
            for j, p in enumerate(self.ports[u], start=1):
                host.intfs[j] = _PortIntf(p.ifname, p.address)
            host.nameToIntf = {i.name: i for i in host.intfs.values()}
        deadline = time.monotonic() + HOST_START_TIMEOUT_S
        for host in self.hosts:
            host.finishShell(deadline)
            self._netns.add(host.netns)
            self._state.hosts[host.name] = {"pid": host.pid, "start": nsutil.start_time(host.pid), "netns": host.netns}
        self._state.save()
        phases = self.facts.setdefault("build_phases_s", {})
        t = time.perf_counter()
        phases["hosts"] = t - t_hosts
        self._make_cables()
        phases["cables"] = -t + (t := time.perf_counter())
        for u in range(self.nodes):
            self._configure_host(u)
        phases["addresses_routes"] = -t + (t := time.perf_counter())
        self._shape()
        phases["tc"] = -t + (t := time.perf_counter())
        self._check_shaping()
        phases["readback"] = -t + (t := time.perf_counter())

    def _make_cables(self) -> None:
        from pyroute2 import IPBatch

        batch, what = IPBatch(), []
        for k, link in enumerate(self.plan.links):
            a = next(p for p in self.ports[link.a] if p.link == k)
            b = next(p for p in self.ports[link.b] if p.link == k)
            batch.link(
                "add",
                ifname=a.ifname,
                kind="veth",
                mtu=self.mtu,
                net_ns_pid=self.hosts[link.a].pid,
                peer={"ifname": b.ifname, "mtu": self.mtu, "net_ns_pid": self.hosts[link.b].pid},
            )
            what.append(f"veth {a.ifname} -- {b.ifname} (plan.links[{k}])")
        nlbatch.send(batch.batch, what)

    def _configure_host(self, u: int) -> None:
        """Addresses, sysctls and routes of node ``u``: one netlink batch in its namespace."""
        from pyroute2 import IPBatch

        host = self.hosts[u]
        nh = self.plan.next_hop
        batch = IPBatch()  # only for multipath routes (parallel cables); the rest is encoded directly
        data, labels, seq = bytearray(), {}, 0

        def add(msg: bytes, label: str) -> None:
            nonlocal seq
            data.extend(msg)
            labels[seq] = label

        with nsutil.in_netns_of(host.pid):
            _write_sysctls([p.ifname for p in self.ports[u]])
            lo = socket.if_nametoindex("lo")
            index = {p.ifname: socket.if_nametoindex(p.ifname) for p in self.ports[u]}
            seq += 1
            add(nlbatch.link_up(seq, lo), f"{host.name}: lo up")
            seq += 1
            add(nlbatch.addr_add(seq, lo, host.identity, 32), f"{host.name}: identity {host.identity}/32")
            for p in self.ports[u]:
                idx = index[p.ifname]
                seq += 1
                add(nlbatch.addr_add(seq, idx, p.address, 31), f"{host.name}: {p.address}/31 on {p.ifname}")
                seq += 1
                add(nlbatch.link_up(seq, idx), f"{host.name}: {p.ifname} up")
            nlbatch.send(bytes(data), labels=labels)
            data.clear()
            labels.clear()
            for p in self.ports[u]:
                # the kernel's connected /31 again, now with cubic (see CUBIC above)
                seq += 1
                add(
                    nlbatch.connected_route(
                        seq, _subnet31(p.address), 31, index[p.ifname], p.address, CUBIC["cc_algo"]
                    ),
                    f"{host.name}: connected route of {p.ifname}",
                )
            by_peer: dict[int, list[Port]] = {}
            for p in self.ports[u]:
                by_peer.setdefault(p.peer, []).append(p)
            mp_what: list[str] = []
            encode_route = nlbatch.RouteEncoder(CUBIC["cc_algo"])
            for v in range(self.nodes):
                if v == u:
                    continue
                cables = by_peer[int(nh[u, v])]
                spec = dict(dst=identity(v), dst_len=32, prefsrc=host.identity, metrics=CUBIC)
                if len(cables) == 1:
                    data += encode_route(
                        100000 + v, identity(v), cables[0].peer_address, index[cables[0].ifname], host.identity
                    )
                else:  # parallel cables: spread flows over all of them (L4 hash)
                    batch.route(
                        "add", multipath=[{"gateway": c.peer_address, "oif": index[c.ifname]} for c in cables], **spec
                    )
                    mp_what.append(f"{host.name}: multipath route to {self.host_name(v)}")
                labels[100000 + v] = f"{host.name}: route to {self.host_name(v)} via {self.host_name(int(nh[u, v]))}"
            nlbatch.send(bytes(data), labels=labels)
            if batch.batch:
                nlbatch.send(bytes(batch.batch), mp_what)

    def _shaping_of(self, u: int) -> list[shaping.Shaping]:
        return [
            shaping.Shaping(p.ifname, self.link_rate_bps[p.link], self.delay_us if self.netem else 0.0)
            for p in self.ports[u]
        ]

    def _shape(self) -> None:
        procs = []
        for u, host in enumerate(self.hosts):
            if not self.ports[u]:
                continue
            proc = subprocess.Popen(
                ["mnexec", "-a", str(host.pid), "tc", "-batch", "-"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            proc.stdin.write(shaping.tc_batch(self._shaping_of(u), self.netem))
            proc.stdin.close()
            procs.append((host, proc))
        errors = []
        for host, proc in procs:
            err = proc.stderr.read()
            proc.stdout.read()
            if proc.wait() != 0:
                errors.append(f"{host.name}: {err.strip().splitlines()[-1] if err.strip() else 'tc failed'}")
        if errors:
            raise ShapingError("tc refused the shaping: " + "; ".join(errors[:3]))

    def _check_shaping(self) -> None:
        from pyroute2 import IPRoute

        problems: list[str] = []
        for u, host in enumerate(self.hosts):
            if not self.ports[u]:
                continue
            with nsutil.in_netns_of(host.pid):
                with IPRoute() as ipr:
                    names = {ipr.link_lookup(ifname=p.ifname)[0]: p.ifname for p in self.ports[u]}
                    actual = shaping.read_back(ipr, names)
            problems += shaping.check(self._shaping_of(u), actual, self.netem, host.name)
        shaping.raise_on(problems)
        self.facts["shaping_checked"] = sum(len(p) for p in self.ports)

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
        terminate_pids(sorted(set(ours) | set(strays)), grace_s=1.0)
        for p in self._procs:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass

    def _end_hosts(self) -> None:
        for host in self.hosts:
            if host.shell is not None and host.shell.poll() is None:
                try:
                    os.killpg(host.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for host in self.hosts:
            if host.shell is None:
                continue
            host.shell.wait()
            try:
                host.stdin.close()
            except OSError:
                pass
            host.shell = None

    # ---- signals ---------------------------------------------------------------------
    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise_on_signal)

    def _mask_signals(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        return True

    def _restore_signal_handlers(self, masked: bool) -> None:
        if not masked:
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
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


def _subnet31(address: str) -> str:
    import ipaddress

    return str(ipaddress.ip_network(f"{address}/31", strict=False).network_address)


def _write_sysctls(ifnames: list[str]) -> None:
    """Per-namespace sysctls of one host (the calling thread is in its namespace)."""
    values = {
        "net/ipv4/ip_forward": "1",
        "net/ipv4/conf/all/rp_filter": "0",
        "net/ipv4/conf/default/rp_filter": "0",
        "net/ipv4/conf/lo/rp_filter": "0",
        "net/ipv4/tcp_congestion_control": "cubic",  # where allowed; routes carry congctl cubic anyway
        "net/ipv4/icmp_ratelimit": "0",  # traceroute must see every hop, every time
        "net/ipv4/icmp_msgs_per_sec": "1000000",
        "net/ipv4/icmp_msgs_burst": "100000",
        "net/ipv4/fib_multipath_hash_policy": "1",  # parallel cables: hash on ports too
    }
    for name in ifnames:
        values[f"net/ipv4/conf/{name}/rp_filter"] = "0"
    optional = {
        "net/ipv4/icmp_msgs_per_sec",
        "net/ipv4/icmp_msgs_burst",
        "net/ipv4/fib_multipath_hash_policy",
        "net/ipv4/tcp_congestion_control",
    }
    for key, value in values.items():
        try:
            with open(f"/proc/sys/{key}", "w") as f:
                f.write(value)
        except OSError as exc:
            if key not in optional:
                raise EmulationError(f"cannot set sysctl {key.replace('/', '.')}={value} in a host: {exc}") from None
