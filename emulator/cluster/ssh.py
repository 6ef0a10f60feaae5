"""ssh to the machines of a multi-machine emulation: one multiplexed connection per machine.

Every command the emulator runs on another machine goes through ``ssh`` with connection
sharing: the first use opens a master connection (``ControlMaster=auto``) on a socket in a
directory of ours (``ControlPath``), every later session rides on it without a new handshake,
and the master stays ``ControlPersist`` seconds after the last session. Every host shell,
worker and iperf3 is one session, so the machine's sshd must allow, on one connection,
5 x its hosts + 8 (``MaxSessions``, 10 by default; docs/cluster.md section 2).

Every name is passed as data: the user as ``-l USER`` among the options and the machine after
``--`` (``ssh [options] -l USER -- HOST [command]``), so neither can be read as an option
whatever it holds; and both are checked again here (`contract.names`), as they were where
they were read (the scenario's ``[emulation]``, a flag).

Every wait is bounded: ``ConnectTimeout`` for the TCP connect and key exchange, and
``ServerAliveInterval`` x ``ServerAliveCountMax`` for a machine that stops answering later.
`check_machines` asks every machine at once and names each one that does not answer, in one
line, within ``ANSWER_TIMEOUT_S``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from contract.errors import RunError
from contract.names import SshInputError, check_machine, check_ssh_file, check_ssh_user
from contract.processes import dead_process_dirs, process_temp_dir

CONNECT_TIMEOUT_S = 4  # TCP connect + key exchange on a LAN takes milliseconds
# A whole probe (connect, run `true`, report) must finish well inside the 10 s promised for
# naming a machine that does not answer.
ANSWER_TIMEOUT_S = 8.0
ALIVE_INTERVAL_S = 2  # a silent machine is dropped after ALIVE_INTERVAL_S * ALIVE_COUNT
ALIVE_COUNT = 3
CONTROL_PERSIST_S = 60  # the master outlives a pause between steps, not the run's end (exit_all)
CONTROL_DIR_PREFIX = "tlcl-"
SOCKET_PATH_MAX = 107  # sun_path's 108 bytes, NUL included
BIND_SUFFIX = 17  # ssh binds a master's socket as "<path>.<16 random characters>" first


@dataclass(frozen=True)
class Machine:
    """One machine: a name for messages and the address ssh connects to."""

    name: str
    address: str

    def __post_init__(self) -> None:
        check_machine(self.address, f"machine {self.name}")


@dataclass(frozen=True)
class SshOptions:
    """How to reach the machines. ``prefix`` runs ssh somewhere else (e.g. ``nsenter --net=..``
    for stand-in machines on an underlay that is not the root namespace's)."""

    control_dir: Path
    user: str = "root"
    identity: Path | None = None
    known_hosts: Path | None = None
    prefix: tuple[str, ...] = ()
    extra: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        check_ssh_user(self.user, "ssh user")
        for what, path in (("ssh identity", self.identity), ("ssh known_hosts", self.known_hosts)):
            if path is not None:
                check_ssh_file(str(path), what)

    @classmethod
    @contextmanager
    def session(cls, user: str, identity: str | None, known_hosts: str | None) -> Iterator[SshOptions]:
        """Options whose ssh control sockets live in a temporary directory of this run,
        ``tlcl-<pid>-<start time>-*`` (`contract.processes.process_temp_dir`), removed when the block ends (or, if this process is
        killed, by `clean_control_dirs`)."""
        control = process_temp_dir(CONTROL_DIR_PREFIX)
        try:
            yield cls(
                control_dir=control,
                user=user,
                identity=None if identity is None else Path(identity),
                known_hosts=None if known_hosts is None else Path(known_hosts),
            )
        finally:
            shutil.rmtree(control, ignore_errors=True)

    def base(self, tty: bool = False) -> list[str]:
        opts = [
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}",
            "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={self.control_dir}/%n",  # the machine's address: unique in our directory
            "-o", f"ControlPersist={CONTROL_PERSIST_S}",
            "-o", "LogLevel=ERROR",
        ]  # fmt: skip
        if self.identity is not None:
            opts += ["-i", str(self.identity), "-o", "IdentitiesOnly=yes"]
        if self.known_hosts is not None:
            opts += ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes"]
        return [*self.prefix, "ssh", "-F", "/dev/null", *opts, *self.extra, "-tt" if tty else "-T"]

    def command(self, machine: Machine, tty: bool = False) -> list[str]:
        """The argv prefix that runs a command on ``machine``; a one-line RunError if its
        control socket's path would be too long for a Unix socket."""
        socket = f"{self.control_dir}/{machine.address}"
        if len(socket) + BIND_SUFFIX > SOCKET_PATH_MAX:
            raise RunError(
                f"machine {machine.name}: ssh control socket {socket} is too long for a Unix socket "
                f"(at most {SOCKET_PATH_MAX - BIND_SUFFIX} characters); set TMPDIR to a shorter directory"
            )
        return [*self.base(tty), *self.destination(machine)]

    def destination(self, machine: Machine) -> list[str]:
        """The end of every ssh argv to ``machine``: the user as an option's value, then
        ``--``, then the address (a host name that cannot be read as an option), after which
        only the remote command may follow."""
        return ["-l", self.user, "--", machine.address]

    def run(self, machine: Machine, script: str, timeout_s: float, what: str) -> str:
        """Run shell ``script`` on ``machine`` (fed on stdin to ``sh -s``: no quoting, one
        round trip however long); its stdout, or one-line RunError naming the machine."""
        try:
            done = subprocess.run(
                [*self.command(machine), "sh", "-s"], input=script, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            raise RunError(f"machine {machine.name} ({machine.address}): {what} took over {timeout_s:g} s") from None
        if done.returncode != 0:
            detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise RunError(f"machine {machine.name} ({machine.address}): {what} failed: {detail}")
        return done.stdout

    def _to_master(self, machine: Machine, operation: str, *args: str) -> list[str]:
        """argv asking ``machine``'s master connection to do ``operation`` (``ssh -O``)."""
        return [*self.base(), "-O", operation, *args, *self.destination(machine)]

    def forward_socket(self, machine: Machine, remote: str, local: str) -> None:
        """Have ``machine``'s sshd listen on the Unix socket ``remote`` there and carry each
        connection to the socket ``local`` here, over the machine's master connection
        (``ssh -O forward -R remote:local``; sshd's ``AllowStreamLocalForwarding``, on by
        default, must allow it). Ends with the master."""
        try:
            done = subprocess.run(
                self._to_master(machine, "forward", "-R", f"{remote}:{local}"),
                capture_output=True,
                text=True,
                timeout=ANSWER_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise RunError(
                f"machine {machine.name} ({machine.address}): forwarding {remote} took over {ANSWER_TIMEOUT_S:g} s"
            ) from None
        if done.returncode != 0:
            detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise RunError(f"machine {machine.name} ({machine.address}): cannot forward {remote}: {detail}")

    def exit_master(self, machine: Machine) -> None:
        """End the shared connection to ``machine`` (``ssh -O exit``), if there is one."""
        subprocess.run(
            self._to_master(machine, "exit"),
            capture_output=True,
            timeout=ANSWER_TIMEOUT_S,
        )


def clean_control_dirs(log=print) -> list[str]:
    """Remove the ssh control directories (`SshOptions.session`) of runs whose process is
    gone, in this process's temporary directory: end each master still listening in one
    (``ssh -O exit``), then remove the directory. Returns the directories removed.

    Only folders that could be ours are touched: owned by this user (or root) and writable by
    no one else (`contract.files.folder_problem`; a session's folder is 0700), as a folder of
    that name in a shared ``/tmp`` may be anyone's; a master's socket is named after its
    machine's address, so only such names are given to ssh."""
    removed = []
    for path, run in dead_process_dirs(CONTROL_DIR_PREFIX):
        for socket in path.iterdir():
            if not _is_machine_address(socket.name):
                continue
            subprocess.run(  # the host is a placeholder: -O talks to the socket, whoever it is
                ["ssh", "-F", "/dev/null", "-o", f"ControlPath={socket}", "-O", "exit", "--", "master"],
                capture_output=True,
                timeout=ANSWER_TIMEOUT_S,
            )
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
        log(f"clean: removed the ssh control directory {path} of run {run}")
    return removed


def _is_machine_address(name: str) -> bool:
    try:
        check_machine(name, "control socket")
    except SshInputError:
        return False
    return True


def check_machines(machines: list[Machine], ssh: SshOptions) -> float:
    """Ask every machine at once; raise one line naming those that do not answer within
    ``ANSWER_TIMEOUT_S``. Returns the seconds the slowest answer took."""
    start = time.monotonic()

    def probe(machine: Machine) -> str | None:
        try:
            ssh.run(machine, "true\n", ANSWER_TIMEOUT_S, "ssh")
        except RunError as e:
            return str(e)
        return None

    with ThreadPoolExecutor(max_workers=max(1, len(machines))) as pool:
        failures = [f for f in pool.map(probe, machines) if f]
    if failures:
        raise RunError("machine(s) not answering: " + "; ".join(failures))
    return time.monotonic() - start
