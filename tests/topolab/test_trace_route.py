"""`topolab trace-route`: probes with the workers' 5-tuple followed hop by hop with scapy.

Pure parts first (the stream and ZeroMQ readers, the walk over sightings, the arguments),
then, as root, the command on topoopt-12: the route 0 -> 11 -> 4 with a TTL one lower after
the relay, each plane of a multipath pair on its own path from its own source address, a
route changed under the plan caught at its first differing hop (exit 1), bad servers (exit 2),
and nothing left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from emulator.addressing import Port
from emulator.errors import EmulationError
from emulator.packets import (
    HOST_PROGRAM,
    Capture,
    Frame,
    Hop,
    ProbeTuple,
    Sightings,
    Trace,
    follow,
    tcp_stream,
    zmtp_messages,
)
from topolab.cli import build_parser, main
from topolab.verify import trace_route_command as trace_route

REPO = Path(__file__).resolve().parents[2]
TOPOOPT_12 = REPO / "scenarios" / "topoopt-12.toml"
TIMEOUT_S = 50


# ---- pure ---------------------------------------------------------------------------------


def _segment(seq: int, payload: bytes) -> Frame:
    return Frame(0, "h0-eth0", True, 0.0, "198.18.0.1", "198.18.0.5", 64, 40 + len(payload), 6, 1, 2, seq, payload)


def test_tcp_stream_orders_segments_drops_repeats_wraps_and_stops_at_a_gap():
    base = (1 << 32) - 3  # the sequence numbers wrap inside the stream
    segments = [
        _segment((base + 6) % (1 << 32), b"ghi"),
        _segment(base, b"abc"),
        _segment((base + 3) % (1 << 32), b"def"),
        _segment(base, b"abc"),  # a retransmission
        _segment((base + 4) % (1 << 32), b"efg"),  # overlaps: adds only what is new
        _segment((base + 20) % (1 << 32), b"zzz"),  # after a gap: not contiguous
    ]
    stream, placed = tcp_stream(segments)
    assert stream == b"abcdefghi"
    assert [offset for offset, _frame in placed] == [0, 0, 3, 4, 6]


def _zmtp(frames: list[tuple[int, bytes]]) -> bytes:
    out = b""
    for flags, body in frames:
        if len(body) > 255:
            out += bytes([flags | 0x02]) + len(body).to_bytes(8, "big") + body
        else:
            out += bytes([flags, len(body)]) + body
    return out


def test_zmtp_messages_skip_greeting_and_commands_and_keep_frame_offsets():
    greeting = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x01" + b"NULL".ljust(20, b"\0") + b"\0" + bytes(31)
    assert len(greeting) == 64
    header = bytes(range(16))
    chunk = bytes(300)  # a long frame (8-byte length)
    stream = greeting + _zmtp([(0x04, b"\x05READY"), (0x01, header), (0x00, chunk), (0x00, b"single")])
    messages = zmtp_messages(stream)
    assert [[body for _at, body in m.frames] for m in messages] == [[header, chunk], [b"single"]]
    at = messages[0].frames[1][0]
    assert stream[at : at + len(chunk)] == chunk
    assert zmtp_messages(stream[:-3])[-1].frames[-1][1] == chunk  # a cut frame is not a message
    assert zmtp_messages(b"not zmtp" * 10) == []


def _ports() -> list[list[Port]]:
    """A line 0 - 1 - 2 with a spur 1 - 3."""
    ports: list[list[Port]] = [[], [], [], []]
    for k, (a, b) in enumerate([(0, 1), (1, 2), (1, 3)]):
        ports[a].append(Port(a, f"h{a}-eth{len(ports[a])}", f"10.0.{k}.0", b, f"10.0.{k}.1", k))
        ports[b].append(Port(b, f"h{b}-eth{len(ports[b])}", f"10.0.{k}.1", a, f"10.0.{k}.0", k))
    return ports


def _seen(node: int, ifname: str, outgoing: bool, ttl: int) -> Frame:
    return Frame(node, ifname, outgoing, 1.0, "198.18.0.1", "198.18.0.3", ttl, 60, 6)


def test_follow_walks_the_interfaces_and_names_the_first_differing_hop():
    ports = _ports()
    probe = ProbeTuple(0, 2, 0, "198.18.0.1", "198.18.0.3", 1, 2)
    right = Sightings()
    for frame in (_seen(0, "h0-eth0", True, 64), _seen(1, "h1-eth0", False, 64), _seen(1, "h1-eth1", True, 63)):
        right.add(frame)
    right.add(_seen(2, "h2-eth0", False, 63))
    hops = follow(0, 2, right, ports, captured={0, 1, 2})
    assert [(h.node, h.in_ifname, h.out_ifname, h.ttl_in, h.ttl_out) for h in hops] == [
        (0, None, "h0-eth0", None, 64),
        (1, "h1-eth0", "h1-eth1", 64, 63),
        (2, "h2-eth0", None, 63, None),
    ]
    assert Trace(probe, 0, [0, 1, 2], hops, 0.0).ok
    # relay 1 sends it down the spur to 3, where nobody captures
    astray = Sightings()
    for frame in (_seen(0, "h0-eth0", True, 64), _seen(1, "h1-eth0", False, 64), _seen(1, "h1-eth2", True, 63)):
        astray.add(frame)
    hops = follow(0, 2, astray, ports, captured={0, 1, 2})
    assert [h.node for h in hops] == [0, 1, 3] and not hops[-1].seen
    wrong = Trace(probe, 0, [0, 1, 2], hops, 0.0)
    assert not wrong.ok
    assert wrong.first_difference(["h0", "h1", "h2", "h3"]) == "hop 2: the probe reached h3, the plan's is h2"
    # lost at the relay: seen coming in, never leaving
    lost = Trace(probe, 0, [0, 1, 2], [Hop(0, out_ifname="h0-eth0"), Hop(1, in_ifname="h1-eth0")], 0.0)
    assert lost.first_difference() == "hop 2: the plan's is node 2, the probe was not seen after node 1"


def test_server_arguments_and_ports():
    assert trace_route.server_argument("4", "DST", 12) == 4
    assert trace_route.server_argument("h11", "DST", 12) == 11
    for bad in ("12", "-1", "x", "h", "s0", "4.0"):
        with pytest.raises(Exception, match=f"DST '{bad}': no such server"):
            trace_route.server_argument(bad, "DST", 12)
    assert trace_route._ports("40000:40001") == (40000, 40001)
    for bad in ("40000", "0:1", "1:65536", "a:b"):
        with pytest.raises(Exception, match="SPORT:DPORT"):
            trace_route._ports(bad)


def test_the_subcommand_is_registered_with_the_shared_network_options():
    parser = build_parser(["trace-route"])
    args = parser.parse_args(["trace-route", str(TOPOOPT_12), "0", "4", "--run-dir", "/tmp/x", "--probes", "2"])
    assert args._run is trace_route.run_trace_route
    assert (args.src, args.dst, args.probes, args.run_dir, args.machines, args.wait) == (
        "0",
        "4",
        2,
        "/tmp/x",
        None,
        0.0,
    )


def test_it_needs_root_and_refuses_bad_flags_in_one_line_before_building(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["trace-route", str(TOPOOPT_12), "0", "4"]) == 2
    assert "topolab trace-route needs root" in capsys.readouterr().err
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # the refusals below come before anything is built
    run_dir = ["--run-dir", str(tmp_path / "run")]
    cases = [
        (["--pcap", "/dev/null/x"], "--pcap '/dev/null/x'"),
        (["--probes", "0"], "--probes"),
        (["--ports", "1:0"], "--ports"),
        (["--machines", "192.0.2.9,192.0.2.10"], "--machines: trace-route captures in the hosts of this machine"),
    ]
    for flags, fragment in cases:
        assert main(["trace-route", str(TOPOOPT_12), "0", "4", *run_dir, *flags]) == 2, flags
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, (flags, err)
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").iterdir())


def test_the_host_program_imports_no_project_module():
    """It runs by path with -P inside the hosts: standard library and scapy only."""
    text = HOST_PROGRAM.read_text()
    for package in ("emulator", "planner", "contract", "workers", "topolab"):
        assert f"from {package}" not in text and f"import {package}" not in text


class _NoSuchInterfaceNet:
    """A stand-in network whose one host has an interface that does not exist: the capture
    program runs here (no namespace) and fails opening its packet socket."""

    ports = [[Port(0, "topolab-none0", "198.19.0.0", 1, "198.19.0.1", 0)]]

    def __init__(self):
        self.procs = []

    def host_name(self, i: int) -> str:
        return f"h{i}"

    def popen(self, i, argv, **kw):
        self.procs.append(subprocess.Popen(argv, **kw))
        return self.procs[-1]


def test_a_capture_that_cannot_start_is_one_line_naming_the_host_and_leaves_nothing(tmp_path):
    net = _NoSuchInterfaceNet()
    with pytest.raises(EmulationError) as err:
        with Capture(net, [0], tmp_path):
            pytest.fail("the block must not run without a capture")
    message = str(err.value)
    assert message.startswith("packet capture in h0 did not start") and "\n" not in message
    assert "Error" in message  # the host program's own error (no such device, or no permission)
    assert net.procs[0].poll() is not None  # ended, not left running


# ---- root: the command on topoopt-12 ---------------------------------------------------------


def _ours_left() -> list[str]:
    """Command lines of host programs still running (the captures and the sender)."""
    left = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if str(HOST_PROGRAM).encode() in cmdline:
                    left.append(cmdline.replace(b"\0", b" ").decode())
    return left


def _topolab(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "topolab", *argv], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S
    )


@pytest.mark.root
def test_topoopt_12_route_0_to_4_crosses_h11_with_the_ttl_one_lower(tmp_path):
    proc = _topolab("trace-route", str(TOPOOPT_12), "0", "4", "--run-dir", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    [t] = report["traces"]
    assert report["ok"] and t["ok"] and t["expected"] == t["observed"] == [0, 11, 4]
    assert t["tuple"]["src_address"] == "198.18.0.1" and t["tuple"]["dst_address"] == "198.18.0.5"
    src, relay, dst = t["hops"]
    assert (src["out_ifname"], src["ttl_out"]) == ("h0-eth1", 64)
    assert (relay["in_ifname"], relay["ttl_in"], relay["out_ifname"], relay["ttl_out"]) == (
        "h11-eth1",
        64,
        "h11-eth3",
        63,
    )
    assert (dst["in_ifname"], dst["ttl_in"], dst["out_ifname"]) == ("h4-eth3", 63, None)
    assert src["time_out"] <= relay["time_in"] <= relay["time_out"] <= dst["time_in"]  # one clock, one order
    assert not _ours_left() and not list(tmp_path.glob("run-*.json"))  # nothing running, no state left


@pytest.mark.root
def test_the_table_shows_the_hops_beside_the_plan_and_keeps_the_pcaps(tmp_path):
    pcaps = tmp_path / "pcap"
    proc = _topolab("trace-route", str(TOPOOPT_12), "h0", "h4", "--run-dir", str(tmp_path), "--pcap", str(pcaps))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "  plan     h0 -> h11 -> h4\n  observed h0 -> h11 -> h4\n" in out
    relay_row = next(line.split() for line in out.splitlines() if line.split()[:2] == ["1", "h11"])
    assert relay_row[2:6] == ["h11-eth1", "h11-eth3", "64", "63"]
    assert "ok   1/1 probes took their plane's planned route" in out
    assert {p.name for p in pcaps.iterdir()} == {f"h{n}-eth{k}.pcap" for n in (0, 4, 11) for k in range(4)}
    from scapy.utils import rdpcap

    assert len(rdpcap(str(pcaps / "h11-eth1.pcap"))) == 1  # only the probe: the capture kept nothing else


@pytest.mark.root
def test_each_plane_of_a_multipath_pair_takes_its_path_from_its_source_address(tmp_path):
    scenario = tmp_path / "planned.toml"
    text = TOPOOPT_12.read_text()
    assert text.count('kind = "topoopt"\n') == 1
    scenario.write_text(text.replace('kind = "topoopt"\n', 'kind = "topoopt"\nrouting = "planned"\n'))
    from planner import build_plan, load_scenario

    network = build_plan(load_scenario(str(scenario))).network
    pair = network.allocation_of(0, 3)
    assert pair is not None and len(pair.paths) >= 2
    proc = _topolab("trace-route", str(scenario), "0", "3", "--run-dir", str(tmp_path / "run"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    traces = json.loads(proc.stdout)["traces"]
    assert [t["plane"] for t in traces] == list(range(len(pair.paths) + 1))
    for t in traces:
        assert t["ok"] and t["observed"] == network.plane_path(0, 3, t["plane"])
        ttls = [h["ttl_out"] for h in t["hops"][:-1]]
        assert ttls == list(range(64, 64 - len(ttls), -1))  # one lower at every relay
    assert traces[1]["tuple"]["src_address"] == "198.19.128.1"  # plane 1's source address
    assert len({tuple(t["observed"]) for t in traces}) == len(traces)  # each plane its own path


@pytest.mark.root
def test_a_route_that_differs_from_the_plan_exits_1_naming_the_first_differing_hop(tmp_path, monkeypatch, capsys):
    """The hosts' route 0 -> 4 is moved to 0 -> 5 -> 4 after the build (a live route change):
    the probe leaves the plan at hop 1."""
    opened = trace_route.open_network

    @contextlib.contextmanager
    def rerouted(plan, config, log):
        with opened(plan, config, log) as net:
            next_hop = np.array(net.network.next_hop)
            next_hop[0, 4] = 5
            net.live.replace_routes(next_hop)
            yield net

    monkeypatch.setattr(trace_route, "open_network", rerouted)
    code = main(["trace-route", str(TOPOOPT_12), "0", "4", "--run-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "  observed h0 -> h5 (last host: no capture there)" in out
    assert "FAIL hop 1: the probe reached h5, the plan's is h11" in out
    assert "FAIL 0/1 probes took their plane's planned route" in out
    assert not _ours_left()


@pytest.mark.root
@pytest.mark.parametrize(
    "src, dst, fragment",
    [("12", "4", "SRC '12': no such server"), ("0", "h99", "DST 'h99': no such server"), ("3", "h3", "same server")],
)
def test_a_bad_server_is_one_line_exit_2_before_any_network(tmp_path, src, dst, fragment):
    proc = _topolab("trace-route", str(TOPOOPT_12), src, dst, "--run-dir", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and fragment in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # no lock taken, no state written
