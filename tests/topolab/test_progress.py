"""The progress bar: one line per step off a terminal, the elapsed time from its clock."""

from __future__ import annotations

import io

from topolab.common.progress import Progress


def test_each_step_is_a_line_with_the_clocks_elapsed_time():
    now = [50.0]
    stream = io.StringIO()
    bar = Progress(4, "iterations", stream=stream, width=8, clock=lambda: now[0])
    now[0] += 1.25
    bar.step("warm-up 0.100 s verified")
    now[0] += 2.0
    bar.step("timed 0.200 s verified")
    bar.done()
    assert stream.getvalue().splitlines() == [
        "  iterations [##......] 1/4    1.2s warm-up 0.100 s verified",
        "  iterations [####....] 2/4    3.2s timed 0.200 s verified",
    ]
