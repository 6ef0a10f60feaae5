"""Finding 7 of the security review: sockets. Every receiving socket of the workers caps the
frames it takes at what its schedule can send (`workers.protocol.limit_frames`), and the
machine probe's workers listen only in a network namespace of the probe's own."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from emulator.nsutil import netns_inode
from planner.collectives import ring_allreduce
from workers.channels import Channels
from workers.coordinator import Coordinator, WorkerFailure
from workers.spec import specs_for_schedule

REPO = Path(__file__).resolve().parents[2]
RUNUSER = Path("/usr/sbin/runuser")
LOOP = "127.0.0.1"
SEND_BYTES = 64 << 10  # the schedule's every send: two ranks, a 128 KiB AllReduce
WAIT_MS = 5000  # bound on every wait for an event that must come
HEADER = bytes(16)  # iteration 0, src 0, tag 0, 0 bytes: never parsed here


class Stranger:
    """PUSH sockets of a stranger, each with a monitor, all closed by `close`."""

    def __init__(self, ctx: zmq.Context) -> None:
        self.ctx = ctx
        self.sockets: list[tuple[zmq.Socket, zmq.Socket]] = []

    def connect(self, address: str) -> tuple[zmq.Socket, zmq.Socket]:
        """A new PUSH connected to ``address``, once its handshake succeeded, and its monitor."""
        push = self.ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        monitor = push.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        self.sockets.append((push, monitor))
        push.connect(f"tcp://{address}")
        assert next_event(monitor) == zmq.EVENT_HANDSHAKE_SUCCEEDED
        return push, monitor

    def close(self) -> None:
        for push, monitor in self.sockets:
            if not push.closed:
                push.disable_monitor()
                push.close(linger=0)
            monitor.close(linger=0)


def next_event(monitor: zmq.Socket) -> int | None:
    """The next event the monitor reports within `WAIT_MS` (None: none)."""
    if not monitor.poll(WAIT_MS):
        return None
    return recv_monitor_message(monitor)["event"]


def test_a_data_socket_refuses_a_frame_over_its_schedules_largest_chunk():
    """A stranger's frame over the largest chunk of the schedule is never delivered: libzmq
    drops its connection; a frame of the largest chunk, from another connection, is."""
    schedule = ring_allreduce(2, 2 * SEND_BYTES).to_dict()
    spec = specs_for_schedule(schedule, [LOOP, LOOP], "ipc://unused")[0]
    ctx = zmq.Context()
    channels = Channels(spec, ctx)
    stranger = Stranger(ctx)
    fits = [HEADER, bytes(SEND_BYTES)]
    try:
        push, _ = stranger.connect(channels.address)
        push.send_multipart(fits)
        assert channels.pull.poll(WAIT_MS)
        assert [len(f) for f in channels.pull.recv_multipart()] == [16, SEND_BYTES]

        push, monitor = stranger.connect(channels.address)
        push.send_multipart([HEADER, bytes(2 * SEND_BYTES)])
        assert next_event(monitor) == zmq.EVENT_DISCONNECTED  # refused before it was read
        push.close(linger=0)  # no reconnection
        assert not channels.pull.poll(0)

        push, _ = stranger.connect(channels.address)  # the socket still takes what fits
        push.send_multipart(fits)
        assert channels.pull.poll(WAIT_MS)
        assert [len(f) for f in channels.pull.recv_multipart()] == [16, SEND_BYTES]
    finally:
        stranger.close()
        channels.close()
        ctx.term()


def test_a_worker_refusing_its_peers_frames_fails_the_run_in_one_line_naming_a_rank():
    """A rank whose bound is under what its peers send (never so in one schedule: here set by
    hand) gets none of their data: the run fails within the workers' timeout, naming a rank,
    instead of hanging."""
    schedule = ring_allreduce(3, 3 * SEND_BYTES).to_dict()
    coordinator = Coordinator(schedule, [LOOP] * 3, timeout_s=2.0)
    coordinator.specs[1].largest_send = 4 << 10  # its peers' chunks are 64 KiB
    with pytest.raises(WorkerFailure) as failure:
        with coordinator:
            coordinator.run(1, warmup=0)
    message = str(failure.value)
    assert "\n" not in message and failure.value.rank in (0, 1, 2)
    assert f"worker rank {failure.value.rank}" in message


def _listening_inodes(net_dir: str) -> set[int]:
    """Socket inodes of the TCP listeners ``net_dir`` (a /proc/.../net folder) lists."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        with open(f"{net_dir}/{name}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    inodes.add(int(fields[9]))
    return inodes


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


@pytest.mark.root
def test_the_machine_probe_listens_in_no_namespace_but_its_own(monkeypatch):
    """While the probe's workers run, none lives in this machine's network namespace and none
    of their listening sockets is in it; they listen in one namespace of their own, which
    leaves with them. (A thread started before the probe stays in the machine's namespace and
    reads its listeners.)"""
    from topolab.run import machine_probe

    home = netns_inode("thread-self")
    machine = ThreadPoolExecutor(max_workers=1)
    machine.submit(lambda: None).result()  # the thread exists now, in the machine's namespace
    seen: list[dict] = []
    run = Coordinator.run

    def observed(self: Coordinator, iterations: int, warmup: int = 1):
        workers = {pid: _socket_inodes(pid) for pid in self.pids()}
        seen.append(
            {
                "namespaces": {netns_inode(pid) for pid in workers},
                "machine": machine.submit(_listening_inodes, "/proc/thread-self/net").result(),
                "own": _listening_inodes(f"/proc/{next(iter(workers))}/net"),
                "sockets": set().union(*workers.values()),
                "pids": list(workers),
            }
        )
        return run(self, iterations, warmup)

    monkeypatch.setattr(Coordinator, "run", observed)
    try:
        cost = machine_probe.probe()
    finally:
        machine.shutdown()
    assert cost.op_cpu_s > 0 and len(seen) == 2  # the per-op run and the per-byte run
    for run_seen in seen:
        (namespace,) = run_seen["namespaces"]  # every worker in one namespace
        assert namespace is not None and namespace != home
        listening = run_seen["sockets"] & run_seen["own"]
        assert len(listening) == machine_probe.PROBE_RANKS  # each worker's data socket, there
        assert not run_seen["sockets"] & run_seen["machine"]  # and none in the machine's
        assert all(netns_inode(pid) is None for pid in run_seen["pids"])  # ended, with their namespace
    assert netns_inode("thread-self") == home


@pytest.mark.root
@pytest.mark.skipif(not RUNUSER.exists(), reason="needs runuser")
def test_without_root_the_machine_probe_refuses_rather_than_listen_on_the_machines_loopback():
    """A user without root gets no namespace of the probe's own: the probe stops with one
    line saying so, before any worker starts (it never falls back to the machine's loopback)."""
    reachable = subprocess.run(
        [str(RUNUSER), "-u", "nobody", "--", "test", "-x", sys.executable, "-a", "-r", str(REPO / "topolab")],
        capture_output=True,
        timeout=10,
    )
    if reachable.returncode != 0:  # e.g. a checkout under /root, which only root may enter
        pytest.skip(f"user nobody cannot run {sys.executable} from this checkout")
    script = (
        "import sys\n"
        "from contract.errors import RunError\n"
        "from topolab.run.machine_probe import probe\n"
        "try:\n"
        "    probe()\n"
        "except RunError as err:\n"
        "    sys.exit(str(err))\n"
    )
    proc = subprocess.run(
        [str(RUNUSER), "-u", "nobody", "--", sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("machine probe: cannot make a network namespace of its own") and "root" in proc.stderr
