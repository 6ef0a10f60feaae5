"""How a send op is cut into chunks (`workers.transfers.even_chunk`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workers.spec import MAX_CHUNK, MIN_CHUNK
from workers.transfers import CHUNK_ALIGN, even_chunk


@given(st.integers(1, 1 << 28), st.integers(MIN_CHUNK // CHUNK_ALIGN, MAX_CHUNK // CHUNK_ALIGN))
def test_even_chunks_are_as_few_as_fixed_ones_and_aligned(length, chunk_units):
    chunk_bytes = chunk_units * CHUNK_ALIGN
    chunk = even_chunk(length, chunk_bytes)
    assert chunk <= chunk_bytes and chunk % CHUNK_ALIGN == 0
    assert -(-length // chunk) == -(-length // chunk_bytes)  # no more chunks than fixed-size cutting


def test_a_tail_is_shared_out():
    length = (4 << 20) // 3  # 1.33 MiB: two chunks of 0.67 MiB, not 1 MiB and 0.33 MiB
    assert 2 * even_chunk(length, 1 << 20) - length < CHUNK_ALIGN * 2
    assert even_chunk(3 << 20, 1 << 20) == 1 << 20
