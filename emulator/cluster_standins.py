"""Stand-in machines on one host: try and test a multi-machine emulation without machines.

Each stand-in is what the emulator needs of a real machine: its own network namespace with
one underlay interface, its own PID namespace (so its processes are its own, and all of them
die with it) and its own mount namespace with a private ``/proc`` and ``/run`` (so its sshd,
its state files and its ``/run/sshd`` are its own) that hides the driver's temporary files
(`StandIns.driver_dir`), and an sshd of its own on a throw-away
host key, listening only on its underlay address. The underlay is a bridge in one more
network namespace made for the purpose (never the root namespace), addressed from TEST-NET-1
(192.0.2.0/24, RFC 5737): the bridge side is ``192.0.2.200``, stand-in ``i`` is
``192.0.2.(201 + i)``. ssh to the stand-ins runs inside that underlay namespace (``nsenter``),
so nothing of this is reachable from, or visible in, the root namespace. No NAT, no route out.

Every namespace is held by a process of ours: ``unshare --kill-child`` for a stand-in (its
PID namespace's init is ``sleep``; when the ``unshare`` dies, the kernel kills the init and
with it every process of the stand-in, sshd and emulated hosts included) and ``unshare -n
sleep`` for the underlay. `StandIns.close` ends the ssh masters, then those holders by PID,
then any process still in one of our network namespaces (by namespace, which only our
processes can be in), and checks that nothing is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from contract.physics import ETHERNET_MTU  # what a real LAN has; its tunnels get 1450 (docs/cluster.md)

from .cluster_ssh import Machine, SshOptions

UNDERLAY_PREFIX = "192.0.2"  # TEST-NET-1, RFC 5737: documentation only, never routed
UNDERLAY_BITS = 24
# The top of the range: a host whose own uplink is numbered from TEST-NET-1 (gateway .1, as on
# some CI virtual machines) never sees these addresses anyway, but messages stay unambiguous.
BRIDGE_HOST = 200
FIRST_STANDIN_HOST = 201
# Sessions an sshd allows on one connection: one per emulated host, plus configuration and
# worker starts. The 64 is our test budget, not a tuned value.
MAX_SESSIONS = 64
START_TIMEOUT_S = 10.0
END_TIMEOUT_S = 5.0
_POLL_S = 0.02

SSHD_CONFIG = """\
ListenAddress {address}:22
HostKey {host_key}
PidFile none
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxSessions {max_sessions}
MaxStartups {max_sessions}
"""


@dataclass
class StandIn:
    machine: Machine
    holder: subprocess.Popen  # `unshare --kill-child`: its child is the PID namespace's init
    init_pid: int  # the namespace's init, in our PID namespace: nsenter target
    netns: str  # /proc/<init>/ns/net link text, e.g. "net:[4026532...]"


@dataclass
class StandIns:
    """``count`` stand-in machines and the underlay joining them; a context manager."""

    count: int
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tlcl-")))
    standins: list[StandIn] = field(default_factory=list)
    underlay: subprocess.Popen | None = None
    underlay_netns: str = ""
    ssh: SshOptions | None = None
    _sshd: list[subprocess.Popen] = field(default_factory=list)

    @property
    def machines(self) -> list[Machine]:
        return [s.machine for s in self.standins]

    @property
    def driver_dir(self) -> Path:
        """A directory of this host that no stand-in sees (each covers it with an empty
        tmpfs), as a real machine does not see the driver's files: a driver that keeps its
        temporary files here (``TMPDIR``) shows that nothing it starts on the machines reads them."""
        return self.workdir / "driver"

    def __enter__(self) -> StandIns:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def in_underlay(self, *argv: str) -> list[str]:
        assert self.underlay is not None
        return ["nsenter", f"--net=/proc/{self.underlay.pid}/ns/net", *argv]

    def in_standin(self, index: int, *argv: str) -> list[str]:
        return ["nsenter", "-t", str(self.standins[index].init_pid), "-n", "-m", "-p", "--", *argv]

    def _start(self) -> None:
        keys = self.workdir
        for name in ("host_key", "id_ed25519"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
        (keys / "authorized_keys").write_text((keys / "id_ed25519.pub").read_text())
        host_pub = (keys / "host_key.pub").read_text().split()[:2]
        (keys / "control").mkdir(mode=0o700)
        self.driver_dir.mkdir(mode=0o700)

        self.underlay = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"])
        self.underlay_netns = _wait_netns(self.underlay.pid, "the underlay")
        bridge = f"{UNDERLAY_PREFIX}.{BRIDGE_HOST}/{UNDERLAY_BITS}"
        _run(
            self.in_underlay("ip", "-batch", "-"),
            f"link set lo up\nlink add tlbr0 type bridge\naddr add {bridge} dev tlbr0\nlink set tlbr0 up\n",
        )

        known = []
        for i in range(self.count):
            address = f"{UNDERLAY_PREFIX}.{FIRST_STANDIN_HOST + i}"
            holder = subprocess.Popen(
                [
                    "unshare",
                    "--net",
                    "--pid",
                    "--mount",
                    "--fork",
                    "--kill-child",
                    "--mount-proc",
                    "--",
                    "sleep",
                    "infinity",
                ]
            )
            init = _wait_child(holder.pid, f"stand-in m{i}")
            standin = StandIn(Machine(f"m{i}", address), holder, init, _wait_netns(init, f"stand-in m{i}"))
            self.standins.append(standin)
            _run(
                self.in_underlay("ip", "-batch", "-"),
                f"link add u{i} mtu {ETHERNET_MTU} type veth peer name eth0 netns {init}\nlink set u{i} master tlbr0 up\n",
            )
            _run(
                self.in_standin(i, "sh", "-s"),
                f"set -e\nip link set lo up\nip addr add {address}/{UNDERLAY_BITS} dev eth0\nip link set eth0 up\n"
                f"mount -t tmpfs tlcl-run /run\nmkdir -m 755 /run/sshd\nmount -t tmpfs tlcl-hide {self.driver_dir}\n",
            )
            config = keys / f"sshd-{i}.conf"
            config.write_text(
                SSHD_CONFIG.format(
                    address=address, host_key=keys / "host_key", authorized_keys=keys / "authorized_keys",
                    max_sessions=MAX_SESSIONS,
                )
            )  # fmt: skip
            self._sshd.append(
                subprocess.Popen(
                    self.in_standin(i, "/usr/sbin/sshd", "-D", "-e", "-f", str(config)),
                    stdout=subprocess.DEVNULL,
                    stderr=open(keys / f"sshd-{i}.log", "w"),
                )  # fmt: skip
            )
            known.append(f"{address} {' '.join(host_pub)}")
        (keys / "known_hosts").write_text("\n".join(known) + "\n")
        self.ssh = SshOptions(
            control_dir=keys / "control",
            identity=keys / "id_ed25519",
            known_hosts=keys / "known_hosts",
            prefix=tuple(self.in_underlay()),
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        for i, s in enumerate(self.standins):
            while not _listening(s.init_pid, s.machine.address):
                if time.monotonic() > deadline or self._sshd[i].poll() is not None:
                    log = (keys / f"sshd-{i}.log").read_text().strip().splitlines()
                    raise RuntimeError(
                        f"stand-in {s.machine.name}: sshd did not start: {log[-1] if log else 'no output'}"
                    )
                time.sleep(_POLL_S)

    def kill_machine(self, index: int) -> None:
        """SIGKILL a stand-in's namespace holder: the whole machine dies at once, as a crash."""
        self.standins[index].holder.send_signal(signal.SIGKILL)
        self.standins[index].holder.wait(END_TIMEOUT_S)

    def close(self) -> None:
        if self.ssh is not None:
            for s in self.standins:
                if s.holder.poll() is None:
                    self.ssh.exit_master(s.machine)
        for s in self.standins:
            # unshare --fork ignores SIGTERM while it waits for its child: SIGKILL it, and
            # --kill-child takes the PID namespace's init, and so the whole stand-in, with it
            if s.holder.poll() is None:
                s.holder.kill()
                s.holder.wait(END_TIMEOUT_S)
        for p in self._sshd:
            _end(p)
        namespaces = {s.netns for s in self.standins} | ({self.underlay_netns} - {""})
        for pid in processes_in(namespaces):
            _kill(pid)
        if self.underlay is not None:
            _end(self.underlay)
        subprocess.run(["rm", "-rf", str(self.workdir)], check=False)

    def leftovers(self) -> list[str]:
        """What would still be alive of these stand-ins (empty after `close`)."""
        namespaces = {s.netns for s in self.standins} | ({self.underlay_netns} - {""})
        left = [f"process {pid} in a stand-in namespace" for pid in processes_in(namespaces)]
        left += [f"holder {s.holder.pid} of {s.machine.name}" for s in self.standins if s.holder.poll() is None]
        if self.underlay is not None and self.underlay.poll() is None:
            left.append(f"underlay holder {self.underlay.pid}")
        if self.workdir.exists():
            left.append(f"directory {self.workdir}")
        return left


def processes_in(namespaces: set[str]) -> list[int]:
    """PIDs of processes whose network namespace is one of ``namespaces``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") in namespaces:
                    found.append(int(entry))
            except OSError:
                continue  # gone meanwhile, or a kernel thread
    return found


def _run(argv: list[str], stdin: str) -> None:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}: {done.stderr.strip()}")


def _wait_child(pid: int, what: str) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        time.sleep(_POLL_S)
    raise RuntimeError(f"{what}: its namespace did not start within {START_TIMEOUT_S:g} s")


def _wait_netns(pid: int, what: str) -> str:
    mine = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            ns = mine
        if ns != mine:
            return ns
        time.sleep(_POLL_S)
    raise RuntimeError(f"{what}: no network namespace of its own within {START_TIMEOUT_S:g} s")


def _listening(init_pid: int, address: str) -> bool:
    """Whether something listens on ``address``:22 in the namespace of ``init_pid``."""
    try:
        text = Path(f"/proc/{init_pid}/net/tcp").read_text()
    except OSError:
        return False
    want = "".join(f"{int(o):02X}" for o in reversed(address.split("."))) + ":0016"
    return any(line.split()[1] == want and line.split()[3] == "0A" for line in text.splitlines()[1:])


def _end(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(END_TIMEOUT_S)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
