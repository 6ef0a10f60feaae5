"""Send many rtnetlink requests compiled by pyroute2's `IPBatch` in a few writes.

pyroute2 0.9 spends about 1.5 ms per synchronous request (its asyncio round trip); a
12-host network needs ~450 requests and a 64-host one ~4500. Compiling the same requests
with `IPBatch` and writing them to a netlink socket 64 KiB at a time, then counting the
acks, brings that to a few ms per host. Errors are reported per request, not swallowed,
and every wait for the kernel's acks is bounded (`batch_limit_s`: at least
`NETLINK_TIMEOUT_S`, more for a batch of more work).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time

from contract.limits import limit_s, work_limit_s

from .errors import EmulationError

NLMSG_ERROR = 2
_HDR = struct.Struct("IHHII")
CHUNK = 64 * 1024  # bytes of requests per write: the default netlink socket buffer takes them
RCVBUF = 1 << 20  # room for the acks of a whole chunk
MAIN_TABLE = 254
"""The kernel's main routing table (``RT_TABLE_MAIN``)."""
COMPAT_TABLE = 252
"""``RT_TABLE_COMPAT``: the 8-bit table field of a request whose table, in ``RTA_TABLE``, is above 255."""
FR_ACT_TO_TBL = 1
"""Action of a routing rule that looks up a table."""
_RTM_NEWLINK, _NLM_F_CREATE = 16, 0x400  # linux/rtnetlink.h, linux/netlink.h: a link created
NETLINK_FLOOR_S = 5.0
"""The least time one batch may wait for the kernel's acks, native (`batch_limit_s`)."""
NETLINK_TIMEOUT_S = limit_s(NETLINK_FLOOR_S)
"""... on this machine (a host's batches at 128 hosts need a few ms each)."""
NEW_LINK_S = 400e-6
"""What the kernel spends on one link created (a veth pair with its two ends in two
namespaces): 331-375 us measured on a 2-core machine with 500 and 2,000 pairs in one batch
(`send` of pyroute2's ``IPBatch`` veth requests between two namespaces of our own, timed by
``sudo .venv/bin/python -m tests.emulator.test_build_limits``)."""
REQUEST_S = 25e-6
"""... on any other request (a route, an address, a neighbour, a link up): 7.4-21 us a route,
5,000 and 20,000 `RouteEncoder` routes in one batch, measured the same way."""


def _messages(data: bytes):
    off = 0
    while off < len(data):
        length, _typ, _flags, seq, _pid = _HDR.unpack_from(data, off)
        yield seq, data[off : off + length]
        off += (length + 3) & ~3


def batch_limit_s(data: bytes, floor_s: float = NETLINK_FLOOR_S) -> float:
    """How long the kernel may take to answer every request of a batch: `work_limit_s` of
    its links created (`NEW_LINK_S` each) and other requests (`REQUEST_S` each), at least
    ``floor_s`` (native). A build's batches are sent one after another, so none shares the
    kernel with another of ours."""
    created = others = 0
    for _seq, msg in _messages(bytes(data)):
        _length, typ, flags, *_rest = _HDR.unpack_from(msg)
        if typ == _RTM_NEWLINK and flags & _NLM_F_CREATE:
            created += 1
        else:
            others += 1
    return work_limit_s(floor_s, created * NEW_LINK_S + others * REQUEST_S)


def send(
    data: bytes,
    what: list[str] | None = None,
    labels: dict[int, str] | None = None,
    timeout_s: float = NETLINK_TIMEOUT_S,
) -> None:
    """Send the compiled requests in ``data`` on a NETLINK_ROUTE socket of the calling
    thread's namespace; raise `EmulationError` naming the first refused request, or the
    first unanswered one if the acks take longer in all than ``timeout_s`` or, for a batch
    of more work, its `batch_limit_s` (the error states the limit)."""
    msgs = list(_messages(bytes(data)))
    if not msgs:
        return
    timeout_s = max(timeout_s, batch_limit_s(data))
    labels = dict(labels or {})
    if what:  # the IPBatch part of data: its requests in order
        labels.update(zip((seq for seq, _ in msgs[: len(what)]), what))
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    try:
        sock.bind((0, 0))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        deadline = time.monotonic() + timeout_s
        failures = []
        i = 0
        while i < len(msgs):
            chunk, pending = bytearray(), set()
            while i < len(msgs) and len(chunk) + len(msgs[i][1]) <= CHUNK:
                chunk += msgs[i][1]
                pending.add(msgs[i][0])
                i += 1
            sock.send(chunk)
            while pending:
                remaining = deadline - time.monotonic()
                try:
                    if remaining <= 0:
                        raise TimeoutError
                    sock.settimeout(remaining)
                    reply = sock.recv(RCVBUF)
                except TimeoutError:
                    seq = min(pending)
                    raise EmulationError(
                        f"netlink did not answer {labels.get(seq, f'request {seq}')} within {timeout_s:.3g} s "
                        f"(a batch of {len(msgs)} requests)"
                    ) from None
                for seq, msg in _messages(reply):
                    if _HDR.unpack_from(msg)[1] != NLMSG_ERROR:
                        continue
                    (code,) = struct.unpack_from("i", msg, _HDR.size)
                    pending.discard(seq)
                    if code != 0:
                        failures.append((seq, -code))
        if failures:
            seq, err = failures[0]
            label = labels.get(seq, f"request {seq}")
            raise EmulationError(
                f"netlink refused {label}: {os.strerror(err)} ({errno.errorcode.get(err, err)})"
                + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else "")
            )
    finally:
        sock.close()


RTO_MIN_MS = 5000
"""TCP's least retransmission timeout on every emulated route, locked (``ip route`` shows
``rto_min lock 5s``). The default 200 ms is far above the RTT TCP samples on an emulated
cable (12-34 us: the cables add no latency of their own), but a segment can wait longer than
that in a shaped class at the time-dilated rates (a 64 KB packet takes 0.5 s at 1 Mbit/s):
the timeouts then fire for segments that were queued, not lost, each resending them and
shrinking the window to one segment. dlrm-128 at 0.6 and 1 Mbit/s: 55 timeouts and 125-180
resent segments in 20 s on 8 of its hosts with 200 ms, none with 5 s (docs/emulation.md
section 3). A segment really lost (a cable taken down under it) is resent after 5 s."""
RTAX_RTO_MIN = 13  # linux/rtnetlink.h: the metric, and its bit in RTAX_LOCK


def route_metrics(cc_algo: str) -> dict[str, int | str]:
    """The metrics of every emulated route (pyroute2's names): congestion control ``cc_algo``
    and TCP's least retransmission timeout `RTO_MIN_MS`, locked (an unlocked rto_min is
    ignored)."""
    return {"cc_algo": cc_algo, "lock": 1 << RTAX_RTO_MIN, "rto_min": RTO_MIN_MS}


def route_metrics_text(cc_algo: str) -> str:
    """`route_metrics` as ``ip route`` words (a multi-machine network's ``ip -batch``; ``ip``
    locks an ``rto_min`` itself)."""
    return f"congctl {cc_algo} rto_min {RTO_MIN_MS}ms"


def _metric_attrs(cc_algo: str) -> dict[str, list[tuple[str, int | str]]]:
    """`route_metrics` as the ``RTA_METRICS`` attribute of an encoded `rtmsg`."""
    return {"attrs": [(f"RTAX_{k.upper()}", v) for k, v in route_metrics(cc_algo).items()]}


def route_add(
    seq: int,
    dst: str,
    gateway: str,
    oif: int,
    prefsrc: str,
    cc_algo: str,
    replace: bool = False,
    *,
    table: int = MAIN_TABLE,
    dst_len: int = 32,
) -> bytes:
    """RTM_NEWROUTE for ``dst/dst_len via gateway dev oif src prefsrc congctl cc_algo`` in
    ``table``, encoded by pyroute2's `rtmsg` directly (about 8x faster than going through
    `IPBatch`); ``replace`` replaces a route to ``dst`` that exists (or creates it) instead of
    failing on it."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWROUTE
    from pyroute2.netlink.rtnl.rtmsg import rtmsg

    m = rtmsg()
    m["family"], m["dst_len"], m["proto"], m["scope"], m["type"] = socket.AF_INET, dst_len, 4, 0, 1
    m["table"] = table if table < 256 else COMPAT_TABLE
    m["attrs"] = [
        ("RTA_DST", dst),
        ("RTA_GATEWAY", gateway),
        ("RTA_OIF", oif),
        ("RTA_PREFSRC", prefsrc),
        ("RTA_METRICS", _metric_attrs(cc_algo)),
        ("RTA_TABLE", table),
    ]
    m["header"]["type"] = RTM_NEWROUTE
    m["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | (NLM_F_REPLACE if replace else NLM_F_EXCL)
    m["header"]["sequence_number"] = seq
    m.encode()
    return bytes(m.data)


def rule_add(seq: int, src: str, table: int, priority: int) -> bytes:
    """RTM_NEWRULE ``from src/32 lookup table priority priority`` (IPv4)."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWRULE
    from pyroute2.netlink.rtnl.fibmsg import fibmsg

    m = fibmsg()
    m["family"], m["src_len"], m["action"] = socket.AF_INET, 32, FR_ACT_TO_TBL
    m["table"] = table if table < 256 else COMPAT_TABLE
    m["attrs"] = [("FRA_SRC", src), ("FRA_TABLE", table), ("FRA_PRIORITY", priority)]
    return _finish(m, RTM_NEWRULE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, seq)


def _finish(m, msg_type: int, flags: int, seq: int) -> bytes:
    m["header"]["type"] = msg_type
    m["header"]["flags"] = flags
    m["header"]["sequence_number"] = seq
    m.encode()
    return bytes(m.data)


def addr_add(seq: int, index: int, address: str, prefixlen: int) -> bytes:
    """RTM_NEWADDR ``address/prefixlen`` on interface ``index``."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWADDR
    from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg

    m = ifaddrmsg()
    m["family"], m["prefixlen"], m["index"], m["scope"] = socket.AF_INET, prefixlen, index, 0
    m["attrs"] = [("IFA_LOCAL", address), ("IFA_ADDRESS", address)]
    return _finish(m, RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, seq)


def link_up(seq: int, index: int, up: bool = True) -> bytes:
    """RTM_NEWLINK setting (or, ``up`` False, clearing) IFF_UP on interface ``index``."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWLINK
    from pyroute2.netlink.rtnl.ifinfmsg import IFF_UP, ifinfmsg

    m = ifinfmsg()
    m["family"], m["index"], m["flags"], m["change"] = 0, index, IFF_UP if up else 0, IFF_UP
    m["attrs"] = []
    return _finish(m, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq)


def permanent_neighbour(seq: int, index: int, address: str, lladdr: str) -> bytes:
    """RTM_NEWNEIGH (replace): ``address`` is at Ethernet address ``lladdr`` on interface
    ``index``, for good (NUD_PERMANENT: never probed, never garbage-collected)."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWNEIGH
    from pyroute2.netlink.rtnl.ndmsg import NUD_PERMANENT, ndmsg

    m = ndmsg()
    m["family"], m["ifindex"], m["state"], m["flags"], m["ndm_type"] = socket.AF_INET, index, NUD_PERMANENT, 0, 0
    m["attrs"] = [("NDA_DST", address), ("NDA_LLADDR", lladdr)]
    return _finish(m, RTM_NEWNEIGH, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, seq)


def connected_route(seq: int, subnet: str, prefixlen: int, oif: int, prefsrc: str, cc_algo: str) -> bytes:
    """RTM_NEWROUTE (replace) of the kernel's connected route of a cable, with its metrics
    (`route_metrics`)."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWROUTE
    from pyroute2.netlink.rtnl.rtmsg import rtmsg

    m = rtmsg()
    m["family"], m["dst_len"], m["table"], m["proto"], m["scope"], m["type"] = (
        socket.AF_INET,
        prefixlen,
        MAIN_TABLE,
        2,
        253,
        1,
    )
    m["attrs"] = [
        ("RTA_DST", subnet),
        ("RTA_OIF", oif),
        ("RTA_PREFSRC", prefsrc),
        ("RTA_METRICS", _metric_attrs(cc_algo)),
    ]
    return _finish(m, RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, seq)


class RouteEncoder:
    """`route_add` messages, encoded by pyroute2 once per (gateway, oif, prefsrc, table,
    prefix length) and then copied with only the sequence number and the destination
    changed: a host's routes differ in nothing else, and a 64-host network has 4032 of them."""

    def __init__(self, cc_algo: str, replace: bool = False):
        self.cc_algo, self.replace = cc_algo, replace
        self.templates: dict[tuple, bytes] = {}

    def __call__(
        self, seq: int, dst: str, gateway: str, oif: int, prefsrc: str, table: int = MAIN_TABLE, dst_len: int = 32
    ) -> bytes:
        key = (gateway, oif, prefsrc, table, dst_len)
        tpl = self.templates.get(key)
        if tpl is None:
            tpl = self.templates[key] = route_add(
                0, "0.0.0.0", gateway, oif, prefsrc, self.cc_algo, self.replace, table=table, dst_len=dst_len
            )
            # RTA_DST is the first attribute: nla header at 28 (len 8, type 1), address at 32
            assert struct.unpack_from("HH", tpl, 28) == (8, 1)
        msg = bytearray(tpl)
        struct.pack_into("I", msg, 8, seq)
        msg[32:36] = socket.inet_aton(dst)
        return bytes(msg)
