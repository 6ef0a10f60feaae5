"""The data plane's sockets: one PULL bound on this rank's address, one PUSH per peer, and one
more PUSH per (peer, plane) this rank sends on with a plane p >= 1, connected from the spec's
``plane_sources[p]`` address (libzmq's ``tcp://SOURCE:0;DESTINATION:PORT``), so the emulator's
policy routing can steer that traffic by source onto the pair's p-th path.

Wire format: every message is two frames, a 16-byte `HEADER` (iteration, src, tag, nbytes;
little-endian u32) and one chunk, under twice ``chunk_bytes`` (pipelined 64 KB - 4 MB chunks
reach the TCP floor; one big message is slower; docs/emulation.md, pyzmq).

Chunks of at least ``ZERO_COPY_MIN`` are sent zero-copy *and tracked* (``copy=False,
track=True``), smaller ones copied (cheaper, docs/dataplane.md): `Channels.trackers` holds
every send libzmq may still read, and a region is never overwritten (by a recv or the next
iteration's inputs) until every send reading it has been released (`region_free`,
`wait_sends`). Untracked zero-copy corrupted AllReduce results at >= 5 Gbit/s.

Every PUSH socket has a monitor reporting its TCP connection coming up and dropping:
`peer_down` holds the peers whose connection dropped (their process ended).
"""

from __future__ import annotations

import struct
from collections import deque

import zmq
from zmq.utils.monitor import recv_monitor_message

from .protocol import PeerFailure, now
from .spec import WorkerSpec

HEADER = struct.Struct("<IIII")  # iteration, src rank, tag, chunk bytes
ZERO_COPY_MIN = 512 << 10
"""Chunks below this are copied into the message, larger ones go zero-copy and tracked. A
zero-copy frame costs a fixed ~30-50 us of CPU (pyzmq's tracker, and its garbage thread
taking the GIL to release each frame); a copy costs ~0.3 ms per MiB on the reference 2-core
machine. Measured on loopback (docs/dataplane.md): 128 KiB chunks cost 27 % less CPU per GB
copied than zero-copy, 1 MiB chunks 5 % more; 512 KiB sits between."""
QUEUE_MESSAGES = 4096
"""High-water mark of every data socket: 4096 chunks (>= 256 MB at 64 KB) queue before a send
would block, so a step's whole share is handed over at once."""
TRACKER_WAIT_S = 0.2  # one blocking wait on a send's tracker before re-checking the deadline


class Channels:
    """This rank's data-plane sockets, the peers' addresses, and the sends in flight."""

    def __init__(self, spec: WorkerSpec, ctx: zmq.Context) -> None:
        self.rank = spec.rank
        self.ctx = ctx
        self.pull = ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, QUEUE_MESSAGES)
        self.pull.setsockopt(zmq.LINGER, 0)
        host, _, port = spec.listen.rpartition(":")
        self.pull.bind(f"tcp://{host}:{port}")
        endpoint = self.pull.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.address = endpoint.removeprefix("tcp://")
        self.peers = sorted(spec.peers)
        self.plane_sources = dict(spec.plane_sources)
        self.send_planes = sorted(spec.send_planes())
        self.push: dict[tuple[int, int], zmq.Socket] = {}  # (peer, plane) -> PUSH
        self.monitors: dict[zmq.Socket, int] = {}
        self.peer_address: dict[int, str] = dict(spec.peers)
        self.peer_down: dict[int, float] = {}
        self.trackers: deque = deque()  # (buffer, lo, hi, MessageTracker, peer) of sends in flight
        self.keep_early = False
        """Keep a message of a later iteration for it (`workers.session`: each collective is
        an iteration and a peer may start the next before this rank finished the current
        one); off, such a message fails the iteration (the coordinator's barrier makes it
        impossible, so it would be a bug)."""
        self.early: dict[int, list[tuple[int, int, zmq.Frame]]] = {}  # iteration -> [(src, tag, frame)]

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
            mon = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
            sock.connect(endpoint)
            self.push[key] = sock
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

    def region_free(self, buffer: str, lo: int, hi: int) -> bool:
        """No tracked send of an overlapping region is still held by libzmq."""
        trackers = self.trackers
        while trackers and trackers[0][3].done:
            trackers.popleft()
        for buf, a, b, tracker, _ in trackers:
            if buf == buffer and a < hi and lo < b and not tracker.done:
                return False
        return True

    def wait_sends(self, timeout: float) -> None:
        """Block until libzmq has released every zero-copy send (before buffers change)."""
        deadline = now() + timeout
        while self.trackers:
            tracker, peer = self.trackers[0][3], self.trackers[0][4]
            if not tracker.done:
                left = deadline - now()
                if left <= 0:
                    raise PeerFailure(
                        f"rank {self.rank}: a send to {self.describe(peer)} was "
                        f"not taken by the network within {timeout:.1f} s",
                        peer,
                    )
                try:
                    tracker.wait(min(left, TRACKER_WAIT_S))
                except zmq.NotDone:
                    continue
            self.trackers.popleft()
