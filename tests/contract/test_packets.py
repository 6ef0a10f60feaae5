"""``[emulation] packets``: the choice between offload packets and MTU frames
(`contract.emulation.packets_for`) and its check."""

from __future__ import annotations

import pytest

from contract.emulation import FRAMES_SHARE, EmulationConfig, EmulationConfigError, packets_for
from contract.physics import OFFLOAD_PACKET_BYTES


def test_small_messages_take_frames_large_ones_offload():
    assert packets_for([32 * 1024] * 616) == ("frames", 1.0, 0.0)  # NCF's all-to-all on 12 servers
    mode, share, _ = packets_for([64 * 1024] * 10 + [1 << 20] * 10)  # mostly large ring steps
    assert mode == "offload" and share == pytest.approx(64 / (64 + 1024))
    assert packets_for([]) == ("offload", 0.0, 0.0)


def test_small_point_to_point_transfers_take_frames_whatever_their_share_of_the_bytes():
    """DLRM's: its 64 KiB model-parallel transfers are a tenth of the bytes, all of its
    transfers' bytes; a collective's small steps alone do not count as transfers."""
    messages = [64 * 1024] * 10 + [1 << 20] * 10
    choice = packets_for(messages, [64 * 1024] * 10)
    assert choice.mode == "frames" and choice.share < FRAMES_SHARE and choice.transfer_share == 1.0
    assert packets_for(messages, [1 << 20] * 10).mode == "offload"  # large transfers
    assert packets_for(messages, [64 * 1024, 1 << 20]).mode == "offload"  # 6% of the transfers' bytes
    assert packets_for([], [64 * 1024]).mode == "offload"  # nothing sent


def test_the_rule_is_a_share_of_the_bytes_at_the_offload_packet():
    # a message of exactly one offload packet counts as small, one byte more does not
    assert packets_for([OFFLOAD_PACKET_BYTES])[0] == "frames"
    assert packets_for([OFFLOAD_PACKET_BYTES + 1])[0] == "offload"
    small = [OFFLOAD_PACKET_BYTES] * 4
    large = round(sum(small) * (1 - FRAMES_SHARE) / FRAMES_SHARE)  # exactly at the share
    assert large > OFFLOAD_PACKET_BYTES
    assert packets_for([*small, large])[:2] == ("frames", pytest.approx(FRAMES_SHARE))
    assert packets_for([*small, large + 1000])[0] == "offload"


def test_packets_is_a_checked_table_key():
    assert EmulationConfig.from_table({"packets": "frames"}).frames
    assert not EmulationConfig().frames and EmulationConfig().packets == "auto"
    with pytest.raises(EmulationConfigError, match=r"emulation.packets: 'gso' is not one of auto, offload, frames"):
        EmulationConfig.from_table({"packets": "gso"})
    with pytest.raises(EmulationConfigError, match="emulation.packets: expected str"):
        EmulationConfig(packets=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "message,packet,want",
    [(1, 9000, 1), (8948, 9000, 1), (8949, 9000, 2), (65536, 65536, 2), (65484, 65536, 1), (0, 1500, 1)],
)
def test_tcp_packets_carries_a_message_in_payloads_of_packet_minus_headers(message, packet, want):
    from contract.physics import TCP_IPV4_HEADERS, tcp_packets

    assert tcp_packets(message, packet) == want
    assert tcp_packets(message, packet) * (packet - TCP_IPV4_HEADERS) >= message
