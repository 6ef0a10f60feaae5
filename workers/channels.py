"""The data plane's sockets: one PULL bound on this rank's address, one PUSH per peer, and one
more PUSH per (peer, plane) this rank sends on with a plane p >= 1, connected from the spec's
``plane_sources[p]`` address (libzmq's ``tcp://SOURCE:0;DESTINATION:PORT``), so the emulator's
policy routing can steer that traffic by source onto the pair's p-th path.

Wire format: every message is two frames, a 16-byte header (iteration, src, tag, nbytes;
little-endian u32) and one chunk, under twice ``chunk_bytes`` (pipelined 64 KB - 4 MB chunks
reach the TCP floor; one big message is slower; docs/emulation.md, pyzmq). The compiled loop
(`workers.engine`) writes and reads them on these sockets.

Large chunks go zero-copy *and tracked*: `Channels.engine` knows every send libzmq may still
read, and a region is never overwritten (by a recv or the next iteration's inputs) until
every send reading it has been released (`wait_sends`). Untracked zero-copy corrupted
AllReduce results at >= 5 Gbit/s.

Every PUSH socket has a monitor reporting its TCP connection coming up and dropping:
`peer_down` holds the peers whose connection dropped (their process ended).

The PULL socket refuses a frame longer than `frame_limit` (the spec's largest chunk plus the
header, `workers.protocol.limit_frames`): libzmq disconnects whoever sends one before reading
it, so a stranger that connects cannot make this rank allocate more than that per frame. A
peer running the same schedule never sends one; one that did (a bug) would see its connection
drop and fail naming this rank (`workers.scheduler`), or this rank would fail on its timeout
naming the peer whose data it awaits. The PUSH sockets take nothing but the handshake.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

from . import engine
from .engine import Engine
from .protocol import HANDSHAKE_BYTES, PeerFailure, limit_frames, now
from .spec import WorkerSpec

QUEUE_MESSAGES = 4096
"""High-water mark of every data socket: 4096 chunks (>= 256 MB at 64 KB) queue before a send
would block, so a step's whole share is handed over at once."""


class Channels:
    """This rank's data-plane sockets, the peers' addresses, and the sends in flight."""

    def __init__(self, spec: WorkerSpec, ctx: zmq.Context) -> None:
        self.rank = spec.rank
        self.ctx = ctx
        self.pull = ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, QUEUE_MESSAGES)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.frame_limit = limit_frames(self.pull, spec.largest_chunk() + engine.constant("HEADER_BYTES"))
        host, _, port = spec.listen.rpartition(":")
        self.pull.bind(f"tcp://{host}:{port}")
        endpoint = self.pull.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.address = endpoint.removeprefix("tcp://")
        self.peers = sorted(spec.peers)
        self.plane_sources = dict(spec.plane_sources)
        self.send_planes = sorted(spec.send_planes())
        self.push: dict[tuple[int, int], zmq.Socket] = {}  # (peer, plane) -> PUSH
        self.push_keys: list[tuple[int, int]] = []  # the compiled loop's socket indices
        self.push_index: dict[tuple[int, int], int] = {}
        self.push_sockets: list[zmq.Socket] = []
        self.monitors: dict[zmq.Socket, int] = {}
        self.peer_address: dict[int, str] = dict(spec.peers)
        self.peer_down: dict[int, float] = {}
        self.engine = Engine()  # the zero-copy sends in flight, the messages kept for later

    @property
    def keep_early(self) -> bool:
        """Keep a message of a later iteration for it (`workers.session`: each collective is
        an iteration and a peer may start the next before this rank finished the current
        one); off, such a message fails the iteration (the coordinator's barrier makes it
        impossible, so it would be a bug)."""
        return self.engine.keep_early

    @keep_early.setter
    def keep_early(self, keep: bool) -> None:
        self.engine.keep_early = keep

    def connect(self, peers: dict[int, str]) -> None:
        """Connect a PUSH socket (and its monitor) to every peer, at the bound addresses, and
        one per (peer, plane >= 1) from the plane's source address."""
        self.peer_address.update(peers)
        for key in [(peer, 0) for peer in self.peers] + self.send_planes:
            peer, plane = key
            endpoint = f"tcp://{self.peer_address[peer]}"
            if plane:
                source = self.plane_sources[plane]
                source = f"[{source}]" if ":" in source else source  # an IPv6 source
                endpoint = f"tcp://{source}:0;{self.peer_address[peer]}"
            sock = self.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, QUEUE_MESSAGES)
            sock.setsockopt(zmq.LINGER, 0)
            limit_frames(sock, HANDSHAKE_BYTES)
            mon = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
            sock.connect(endpoint)
            self.push[key] = sock
            self.push_index[key] = len(self.push_keys)
            self.push_keys.append(key)
            self.push_sockets.append(sock)
            self.monitors[mon] = peer

    def close(self, linger_ms: int = 0) -> None:
        """Close every socket; ``linger_ms``: how long the context's end may still spend
        delivering messages queued on the PUSH sockets (0: drop them)."""
        for sock in self.push.values():
            sock.disable_monitor()
        for mon in self.monitors:
            mon.close(linger=0)
        for sock in self.push.values():
            sock.close(linger=linger_ms)
        self.pull.close(linger=0)
        self.engine.close()

    def describe(self, peer: int) -> str:
        return f"rank {peer} ({self.peer_address.get(peer, '?')})"

    def check_monitor(self, mon: zmq.Socket) -> None:
        """Take the monitor's pending events: record a peer's connection dropping or returning."""
        while True:
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            peer = self.monitors[mon]
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self.peer_down[peer] = now()
            elif event["event"] == zmq.EVENT_CONNECTED:
                self.peer_down.pop(peer, None)

    def wait_sends(self, timeout: float) -> None:
        """Block until libzmq has released every zero-copy send (before buffers change)."""
        held, peer = self.engine.wait_sends(timeout)
        if held:
            raise PeerFailure(
                f"rank {self.rank}: a send to {self.describe(peer)} was "
                f"not taken by the network within {timeout:.1f} s",
                peer,
            )
