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


@pytest.mark.parametrize(
    "message,mtu,want",
    [(32768, 9000, 32768 - 3 * 8948), (32768, 4096, 32768 - 8 * 4044), (8948, 9000, 8948), (1, 1500, 1)],
)
def test_last_frame_bytes_is_what_the_full_frames_leave(message, mtu, want):
    from contract.physics import TCP_IPV4_HEADERS, last_frame_bytes, tcp_packets

    assert last_frame_bytes(message, mtu) == want
    assert (tcp_packets(message, mtu) - 1) * (mtu - TCP_IPV4_HEADERS) + want == message
    assert 0 < want <= mtu - TCP_IPV4_HEADERS


def test_frames_mtu_is_the_largest_whose_last_frames_carry_little():
    from contract.emulation import FRAMES_LAST_FRAME_SHARE, frames_mtu_for
    from contract.physics import DEFAULT_MTU, ETHERNET_MTU, ROCE_MTU

    def choice(transfers, ops=10**9):
        return frames_mtu_for(transfers, transfers, ops)

    ncf = choice([32 * 1024] * 1016)  # NCF's transfers: 18% of their bytes in last frames at 9000
    assert ncf.mtu == ROCE_MTU
    assert ncf.last_frame_shares[DEFAULT_MTU] == pytest.approx(5924 / 32768)
    assert ncf.last_frame_shares[ROCE_MTU] == pytest.approx(416 / 32768)
    assert ncf.last_frame_shares[ROCE_MTU] <= FRAMES_LAST_FRAME_SHARE
    assert ncf.added_frames == {DEFAULT_MTU: 0, ROCE_MTU: 5 * 1016, ETHERNET_MTU: 19 * 1016}
    assert choice([64 * 1024] * 352).mtu == DEFAULT_MTU  # DLRM's: 4.4% at 9000
    assert choice([8948 * 4 + 2000]).mtu == ROCE_MTU  # 5.3% at 9000: over the share
    # a transfer of one small frame ends in it at any MTU: the largest of equals
    assert choice([652] * 352).mtu == DEFAULT_MTU
    assert choice([652] * 352).last_frame_shares == {DEFAULT_MTU: 1.0, ROCE_MTU: 1.0, ETHERNET_MTU: 1.0}
    # none within the share: the one that leaves the least in last frames
    assert choice([2000] * 10).mtu == ETHERNET_MTU
    assert choice([]) == (DEFAULT_MTU, {}, {})  # no transfers


def test_a_smaller_mtu_only_where_its_frames_are_few_next_to_the_ops():
    """88 transfers of 32 KiB take 5 more frames each at 4096: 440 frames, more than 400 ops."""
    from contract.emulation import FRAMES_MTU_OPS_SHARE, frames_mtu_for
    from contract.physics import DEFAULT_MTU, ROCE_MTU

    transfers = [32 * 1024] * 88
    limit = round(5 * 88 / FRAMES_MTU_OPS_SHARE)  # the ops at which 4096's frames are exactly at the share
    small = frames_mtu_for(transfers, transfers, limit - 1)
    assert small.mtu == DEFAULT_MTU and list(small.last_frame_shares) == [DEFAULT_MTU]
    assert small.added_frames[ROCE_MTU] == 5 * 88
    assert frames_mtu_for(transfers, transfers, limit).mtu == ROCE_MTU
    # every cable a message crosses sends its frames: two hops each, twice the frames
    assert frames_mtu_for(transfers, transfers, limit, [2] * 88).mtu == DEFAULT_MTU
    assert frames_mtu_for(transfers, transfers, 2 * limit, [2] * 88).added_frames[ROCE_MTU] == 2 * 5 * 88
