"""`EmulatedHost`: one node of the network as a Mininet host in a network namespace of its own.

A host is a bash shell started by ``mnexec -dn`` (new network namespace), as Mininet's
``Host`` is (Popen closes the inherited descriptors that Mininet's ``mnexec -c`` would), named
``h<i>`` (server) or ``s<j>`` (switch node, which only forwards). Its shell is started in
two halves (`EmulatedHost.startShell` spawns, `EmulatedHost.finishShell` waits for the
prompt, bounded) so that all hosts boot in parallel: Mininet waits for each shell in turn.
A shell counts as started only once it lives in a namespace that is not the creator's.

Mininet's CLI (``topolab shell``) lists a host by its interfaces: `IdentityIntf` answers with
the host's identity address (``h0 ping h6`` pings the identity), `PortIntf` is one cable end.

`end_hosts` ends the shells (SIGKILL to each shell's process group, by PID) and waits for
them at most `HOST_END_TIMEOUT_S`; the kernel then frees each namespace and its cables in a
worker of its own, after the shells are gone, and `wait_kernel_cleanup` waits for it, bounded by
`kernel_cleanup_limit_s` of what the network had: a tc or netlink change made while it runs
waits for it (a tc batch of 201 lines took 0.68 s 0.7 s after 64 namespaces of 102,912 tc lines
were deleted, 0.007 s once they were freed), so the next build (a rebuilt rate, the next run)
starts on a quiet kernel, and the run leaves the machine as it found it when it ends.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mininet.node import Host

from contract.limits import limit_s, work_limit_s

from . import nsutil
from .errors import EmulationError
from .state import ENV_MARK

HOST_START_TIMEOUT_S = limit_s(8.0)
"""How long a host's shell may take to start (prompt, own namespace); all hosts boot in parallel."""
HOST_END_TIMEOUT_S = limit_s(5.0)
"""How long the SIGKILLed shells may take to be reaped, all together."""
KERNEL_CLEANUP_FLOOR_S = 2.0
"""The least time the kernel may take to free a network's namespaces, native
(`kernel_cleanup_limit_s`)."""
KERNEL_CLEANUP_LINE_S = 12e-6
"""What the kernel's freeing costs for each line of the hosts' tc batches (an HTB class, a u32
filter, a qdisc): 6.5-11 us a line for one namespace of 8,024-20,240 lines, 1.22 s (12 us a
line) for 64 namespaces of 256 veth pairs and 102,912 lines, on a 2-core machine
(``sudo .venv/bin/python -m tests.emulator.test_build_limits``, 2026-11-29)."""
KERNEL_CLEANUP_PAIR_S = 400e-6
"""... and for each veth pair (a cable): 289-393 us a pair for 500 and 2,000 pairs with 5,000
and 20,000 routes, no tc (the same measurement)."""
KERNEL_BUSY_WAIT_S = limit_s(120.0)
"""How long a build waits for the kernel to finish freeing network namespaces before it starts
(a network just torn down whose freeing outlasted its estimate, or another run's), and how much
longer than its limit a host's ``tc -batch`` may take while the kernel frees them: every tc and
netlink change waits for the routing-netlink lock that work holds, so a batch is hung only once
the kernel is not freeing namespaces. A failed build of `scenarios/ncf-128.toml` (128
namespaces, 99,068 tc lines) was still being freed 2.1 s after its hosts ended, and the next
build's 1,230-line tc batch overran its 5 s limit behind it."""
KERNEL_CLEANUP_POLL_S = 0.02
"""How often `wait_kernel_cleanup` looks at the kernel's workers."""
KERNEL_CLEANUP_QUIET_POLLS = 3
"""How many looks in a row must find no worker freeing namespaces: the work may start a few
milliseconds after the last shell is reaped."""
PROMPT = chr(127)
"""The shell's PS1: a byte no command prints, so its arrival means "ready"."""
_READ_CHUNK = 1024
_NETNS_POLL_S = 0.005


class PortIntf:
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


class IdentityIntf:
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
        # Popen's close_fds, not Mininet's `mnexec -c`: mnexec closes every descriptor number
        # up to RLIMIT_NOFILE, which the network raises to the hard limit (a million under
        # systemd), a minute per host where system calls are slow (software emulation in a VM);
        # Popen closes only the open ones.
        opts = ("-d" if mnopts is None else mnopts) + ("n" if self.inNamespace else "")
        # the run's mark (`emulator.state.ENV_MARK`, the ``run_mark`` parameter of addHost): how
        # `topolab clean` proves that a namespace is a run's own before it ends what lives there
        mark = self.params.get("run_mark")
        marks = [f"{ENV_MARK}={mark}"] if mark else []
        cmd = ["mnexec", opts, "env", *marks, "PS1=" + PROMPT, "bash", "--norc", "--noediting", "-is"]
        cmd.append("mininet:" + self.name)
        self.master, self.slave = pty.openpty()
        self.shell = self._popen(cmd, stdin=self.slave, stdout=self.slave, stderr=self.slave, close_fds=True)
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
            select.select([], [], [], _NETNS_POLL_S)
        self.waiting = False
        self.write("unset HISTFILE; stty -echo; set +m\n")
        self._wait_prompt(deadline, "set up its shell")

    def _wait_prompt(self, deadline: float, what: str) -> None:
        """Read the shell's output until its prompt, at most until ``deadline``."""
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
                data = self.read(_READ_CHUNK)
            except OSError:  # the pty's other end is closed: the shell is gone
                data = ""
            if data and data[-1] == PROMPT:
                return
            self._fail_if_exited(what)

    def _fail_if_exited(self, what: str) -> None:
        code = self.shell.poll()
        if code is not None:
            raise EmulationError(f"host {self.name}: its shell exited (status {code}) before it could {what}")

    def defaultIntf(self):
        return IdentityIntf(self)

    def IP(self, intf=None):
        return self.identity if intf is None else super().IP(intf)

    def list_interfaces(self, ports: Iterable[tuple[str, str]]) -> None:
        """Show the identity and the cable ends ``(ifname, address)`` to Mininet's CLI
        (``pingall`` skips hosts without interfaces)."""
        self.intfs[0] = IdentityIntf(self)
        for j, (ifname, address) in enumerate(ports, start=1):
            self.intfs[j] = PortIntf(ifname, address)
        self.nameToIntf = {i.name: i for i in self.intfs.values()}


def end_hosts(hosts: list[EmulatedHost], timeout_s: float = HOST_END_TIMEOUT_S) -> list[str]:
    """SIGKILL every host shell's process group and reap the shells, all within
    ``timeout_s``; returns the names of the hosts whose shell is still not gone."""
    for host in hosts:
        if host.shell is not None and host.shell.poll() is None:
            try:
                os.killpg(host.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout_s
    stuck = []
    for host in hosts:
        if host.shell is None:
            continue
        try:
            host.shell.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # a shell stuck in the kernel
            stuck.append(host.name)
            continue
        try:
            host.stdin.close()
        except OSError:
            pass
        host.shell = None
    return stuck


def kernel_cleanup_limit_s(tc_lines: int, cables: int) -> float:
    """How long the kernel may take to free a network of ``cables`` veth pairs whose hosts' tc
    batches had ``tc_lines`` lines: `contract.limits.work_limit_s` of `KERNEL_CLEANUP_LINE_S` a
    line and `KERNEL_CLEANUP_PAIR_S` a pair, at least `KERNEL_CLEANUP_FLOOR_S`."""
    return work_limit_s(KERNEL_CLEANUP_FLOOR_S, tc_lines * KERNEL_CLEANUP_LINE_S + cables * KERNEL_CLEANUP_PAIR_S)


@dataclass(frozen=True)
class KernelCleanup:
    """What `wait_kernel_cleanup` saw: ``waited_s`` from its start to its end, and whether the
    kernel was done (``False``: still freeing namespaces at the limit ``limit_s``)."""

    waited_s: float
    done: bool
    limit_s: float


def wait_kernel_cleanup(
    limit_s: float,
    freeing: Callable[[], bool] = nsutil.kernel_freeing_namespaces,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> KernelCleanup:
    """Wait until ``freeing`` (the kernel frees network namespaces now) is false
    `KERNEL_CLEANUP_QUIET_POLLS` looks in a row, `KERNEL_CLEANUP_POLL_S` apart, or ``limit_s``
    has passed (then ``done`` is False: the caller says so and goes on; the kernel finishes
    alone). It waits for any namespace the kernel frees, ours or not: the next change waits for
    all of them alike."""
    start = clock()
    quiet = 0
    while True:
        quiet = 0 if freeing() else quiet + 1
        now = clock()
        if quiet >= KERNEL_CLEANUP_QUIET_POLLS:
            return KernelCleanup(now - start, True, limit_s)
        if now - start >= limit_s:
            return KernelCleanup(now - start, False, limit_s)
        sleep(KERNEL_CLEANUP_POLL_S)
