"""How a send op is cut into wire chunks, which streams an op's completion wakes, and when a
peer whose connection dropped fails the run."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from workers import scheduler
from workers.engine import chunk_end, constant, send_pieces
from workers.program import Program
from workers.protocol import PeerFailure
from workers.scheduler import IterationRun


def chunk_sizes(length: int, chunk: int) -> list[int]:
    pieces = send_pieces(length, chunk)
    ends = [chunk_end(length, pieces, k) for k in range(1, pieces + 1)]
    return [hi - lo for lo, hi in zip([0, *ends], ends)]


@pytest.mark.parametrize("chunk", [4 << 10, 64 << 10, 1 << 20])
@pytest.mark.parametrize("length", [4, 4096, 100_000, 1_398_104, 5_592_404, 16 << 20])
def test_send_chunks_are_at_least_chunk_bytes_and_under_twice(chunk, length):
    sizes = chunk_sizes(length, chunk)
    assert sum(sizes) == length
    assert len(sizes) == max(1, length // chunk)  # no short tail beyond the full chunks
    CHUNK_ALIGN = constant("CHUNK_ALIGN")
    assert all(s % CHUNK_ALIGN == 0 for s in sizes[:-1])
    assert min(sizes) >= min(chunk, length) - CHUNK_ALIGN
    assert max(sizes) < 2 * chunk + CHUNK_ALIGN


def test_a_ring_piece_goes_as_one_message():
    # 12-server multi-ring, 64 MiB: 1.33 MiB pieces with the default 1 MiB chunk
    assert chunk_sizes(1_398_104, 1 << 20) == [1_398_104]


def test_completion_wakes_own_stream_and_waiters():
    prog = Program(
        {
            "a": [{"id": 0, "op": "compute", "seconds": 0.0}, {"id": 1, "op": "compute", "seconds": 0.0}],
            "b": [{"id": 2, "op": "compute", "seconds": 0.0, "after": [0]}],
            "c": [{"id": 3, "op": "compute", "seconds": 0.0, "after": [0, 1]}],
        }
    )
    assert prog.wakes[0] == (0, 1, 2)
    assert prog.wakes[1] == (0, 2)
    assert prog.wakes[2] == (1,)


@pytest.mark.parametrize("chunk", [4 << 10, 96 << 10])
def test_uneven_pieces_in_nearly_equal_chunks_verify_on_workers(chunk):
    # 5 ranks x 1 MiB: 209715-byte pieces, cut into chunks between chunk and 2 x chunk
    # (4 KiB: reduced through the scratch chunk; 96 KiB: straight from the frame)
    from planner.collectives import ring_allreduce
    from workers.coordinator import run_schedule

    sched = ring_allreduce(5, (1 << 20) - 4)
    for res in run_schedule(sched.to_dict(), iterations=2, chunk_bytes=chunk):
        assert res.ok, res.mismatches[:3]
        assert sum(r["bytes_received"] for r in res.ranks) == sum(sched.bytes_sent())


class _Down:
    """The parts of the channels `IterationRun.check_faults` reads: peer 1's connection
    dropped at t = 10."""

    def __init__(self) -> None:
        self.peer_down = {1: 10.0}
        self.push_keys: list = []

    def describe(self, peer: int) -> str:
        return f"rank {peer}"


def _run_with_peer_down(sends: int, recvs: int) -> IterationRun:
    """What the compiled loop reports (`workers.engine.NativeRun`): peer 1 last heard at 9.5,
    ``sends + recvs`` ops with it left, nothing awaited, no socket blocked."""
    run = IterationRun.__new__(IterationRun)
    run.channels = _Down()  # type: ignore[assignment]
    run.rank, run.control, run.timeout_s = 0, None, 300.0
    run.native = SimpleNamespace(  # type: ignore[assignment]
        stats=SimpleNamespace(last_progress=10.0, computes=0, ndone=0),
        remaining_with=np.array([0, sends + recvs]),
        sends_to=np.array([0, sends]),
        last_heard=np.array([0.0, 9.5]),
        waiting=lambda: np.zeros(2, dtype=np.int64),
        blocked=np.zeros(1, dtype=np.uint8),
    )
    return run


def test_a_peer_gone_after_its_last_send_may_still_deliver(monkeypatch):
    clock = {"t": 10.2}
    monkeypatch.setattr(scheduler, "now", lambda: clock["t"])
    receiving = _run_with_peer_down(sends=0, recvs=3)
    receiving.check_faults()  # its last chunks may be on the wire: no failure yet
    receiving.native.last_heard[1] = 10.9  # they arrive
    clock["t"] = 10.9 + scheduler.DOWN_GRACE_S - 0.01
    receiving.check_faults()
    clock["t"] = 10.9 + scheduler.DOWN_GRACE_S + 0.01  # nothing more from it
    with pytest.raises(PeerFailure, match="peer rank 1 disconnected .* with 3 ops"):
        receiving.check_faults()
    clock["t"] = 10.2
    with pytest.raises(PeerFailure, match="peer rank 1 disconnected"):  # it cannot take what we owe it
        _run_with_peer_down(sends=1, recvs=2).check_faults()
