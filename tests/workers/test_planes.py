"""Sends on a plane p >= 1 leave from the spec's plane-p source address, over their own
connection (loopback accepts any 127/8 source), and still land verified."""

from __future__ import annotations

import subprocess

import pytest

from planner.collectives import Check, ScheduleBuilder
from workers.coordinator import Coordinator
from workers.spec import SpecError, specs_for_schedule

LOOP = "127.0.0.1"
PLANE_SOURCES = {1: "127.0.0.2", 2: "127.0.0.3"}
PART = 256 << 10


def three_plane_schedule():
    """Rank 0 sends its buffer to rank 1 in three parts, on planes 0, 1 and 2 (three streams,
    so the three connections carry data at the same time)."""
    b = ScheduleBuilder(2, "planes")
    b.buffer("grad", 3 * PART)
    for plane in range(3):
        tag = b.new_tag()
        b.send(0, f"plane{plane}", 1, "grad", plane * PART, PART, tag, plane=plane)
        b.recv(1, f"plane{plane}", 0, "grad", plane * PART, PART, tag, mode="copy")
        b.check(Check("copy", "grad", plane * PART, PART, src=0, dst=1))
    return b.build()


def established(pid: int) -> list[tuple[str, str]]:
    """(local, peer) addresses of the established TCP connections of process ``pid``."""
    out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True, timeout=10)
    return [(line.split()[2], line.split()[3]) for line in out.stdout.splitlines() if f"pid={pid}," in line]


def test_plane_sends_leave_from_their_source_address():
    sched = three_plane_schedule()
    with Coordinator(sched.to_dict(), [LOOP, LOOP], plane_sources=[PLANE_SOURCES, {}]) as coord:
        res = coord.run_iteration(0)
        assert res.ok, res.mismatches
        assert res.ranks[1]["bytes_received"] == 3 * PART
        target = coord.addresses[1]
        sources = sorted(local.rpartition(":")[0] for local, peer in established(coord.procs[0].pid) if peer == target)
    # plane 0 from the host's own address, planes 1 and 2 from theirs: three connections
    assert sources == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def test_send_on_a_plane_without_a_source_is_a_one_line_spec_error():
    sched = three_plane_schedule().to_dict()
    with pytest.raises(SpecError) as err:
        specs_for_schedule(sched, [LOOP, LOOP], "ipc:///unused", plane_sources=[{1: "127.0.0.2"}, {}])
    message = str(err.value)
    assert "rank 0" in message and "plane 2" in message and "\n" not in message
    with pytest.raises(SpecError, match="not an IP address"):
        specs_for_schedule(sched, [LOOP, LOOP], "ipc:///unused", plane_sources=[{1: "x", 2: "127.0.0.3"}, {}])
