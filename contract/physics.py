"""Physics every layer agrees on, each formula defined once.

- TCP goodput of an HTB-shaped veth cable at a given MTU: HTB on a veth counts the Ethernet
  header (14 bytes) but no FCS, preamble or gap, and each TCP segment carries IPv4 (20) + TCP
  (20) + timestamps (12) bytes of headers, so a shaped cable delivers (mtu - 52) payload bytes
  per (mtu + 14) shaped bytes: 95.6% at MTU 1500 and 99.3% at 9000, the ceilings iperf3
  measures on this kernel (docs/emulation.md). `cable_goodput` is a cable's payload rate in
  bytes/s; `contract.network.cable_capacities` sums it per direction over a network's cables.
- MTU: every cable runs jumbo frames (`DEFAULT_MTU`) unless a scenario says otherwise; a
  VXLAN tunnel takes `VXLAN_OVERHEAD` bytes of its underlay's MTU (`tunnel_mtu`: 1450 on a
  1500-byte Ethernet LAN).
- Time dilation: a cable planned at ``planned_gbps`` and emulated at ``emulated_mbps`` runs
  ``planned_gbps * 1000 / emulated_mbps`` times slower; every measured time is divided by this
  factor and every compute wait multiplied by it, so compute and communication keep the real
  cluster's ratio.
- Compute time of ``flops`` per sample at ``device_tflops`` effective throughput.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

TCP_IPV4_HEADERS = 52  # IPv4 (20) + TCP (20) + timestamps option (12)
ETHERNET_HEADER = 14  # bytes HTB counts on a veth beyond the IP packet
DEFAULT_MTU = 9000  # jumbo frames, as RDMA clusters run: 99.3% goodput instead of 95.6% at 1500
MIN_MTU = 576  # the smallest datagram every IPv4 host must accept (RFC 791)
MAX_MTU = 65535  # the largest IP packet, and the largest veth MTU
ETHERNET_MTU = 1500  # a plain Ethernet LAN: the underlay of a multi-machine network
ROCE_MTU = 4096  # the largest path MTU of RDMA over Converged Ethernet: the packets an RDMA NIC sends
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8 bytes
# The largest packet TCP's segmentation offload hands a veth (the kernel's GSO_MAX_SIZE): a
# cable end's qdisc sends it whole, so a message of at most this many bytes crosses a cable as
# one packet, not in frames interleaved with other connections' (docs/emulation.md section 3).
OFFLOAD_PACKET_BYTES = 65536
# Rate at which a worker reduces (adds) received float32 gradients into its buffer, bytes/s,
# and copies them (numpy on one core of the 2-core reference machine, with the workers busy);
# the predictor charges it for the part of a received message not hidden by pipelining.
REDUCE_BYTES_PER_S = 2e9


def tcp_goodput_fraction(mtu: int) -> float:
    """Payload share of a shaped cable at ``mtu``: (mtu - 52) / (mtu + 14)."""
    return (mtu - TCP_IPV4_HEADERS) / (mtu + ETHERNET_HEADER)


def tcp_packets(message_bytes: ArrayLike, packet_bytes: int) -> np.ndarray:
    """Packets of at most ``packet_bytes`` (IPv4 and TCP headers included) that carry a
    ``message_bytes`` message (or each of an array of them): ceil(message / (packet - 52)), at
    least one. ``packet_bytes``: the MTU (frames) or `OFFLOAD_PACKET_BYTES` (segmentation
    offload)."""
    payload = packet_bytes - TCP_IPV4_HEADERS
    return np.maximum(1, -(-np.asarray(message_bytes, np.int64) // payload))


def extra_frames(message_bytes: ArrayLike, mtu: int) -> int:
    """The packets messages of ``message_bytes`` take as frames of ``mtu`` beyond what they
    take as offload packets: the sum of tcp_packets(m, mtu) - tcp_packets(m, 64 KiB)."""
    return int((tcp_packets(message_bytes, mtu) - tcp_packets(message_bytes, OFFLOAD_PACKET_BYTES)).sum())


def last_frame_bytes(message_bytes: ArrayLike, mtu: int) -> np.ndarray:
    """The payload bytes of the last of the `tcp_packets` frames of ``mtu`` that carry a
    ``message_bytes`` message (or each of an array of them): message - (packets - 1) x (mtu - 52)."""
    message = np.asarray(message_bytes, np.int64)
    full_frames: np.ndarray = tcp_packets(message, mtu) - 1
    return np.asarray(message - full_frames * (mtu - TCP_IPV4_HEADERS))


def cable_goodput(bps: float, mtu: int) -> float:
    """TCP payload bytes/s of a cable shaped at ``bps`` bit/s with MTU ``mtu``."""
    return bps * tcp_goodput_fraction(mtu) / 8.0


def tunnel_mtu(underlay_mtu: int = ETHERNET_MTU) -> int:
    """MTU of a VXLAN tunnel over an underlay of ``underlay_mtu`` (1450 over Ethernet)."""
    return underlay_mtu - VXLAN_OVERHEAD


def time_scale(planned_gbps: float, emulated_mbps: float) -> float:
    """Emulated seconds per real second for a cable planned at ``planned_gbps`` and emulated at
    ``emulated_mbps`` (250 for 25 Gbit/s emulated at 100 Mbit/s)."""
    return planned_gbps * 1000.0 / emulated_mbps


def compute_seconds(
    flops: float, batch: int, device_tflops: float, *, split: int = 1, time_scale: float = 1.0
) -> float:
    """Seconds one server spends on ``flops`` per sample for ``batch`` samples at
    ``device_tflops``, its share ``1 / split`` of a sharded layer, dilated by ``time_scale``."""
    return flops * batch / (device_tflops * 1e12) / split * time_scale
