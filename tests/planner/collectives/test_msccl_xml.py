"""MSCCL XML in: the reader and its checker (msccl-executor's parser rules), the translation
into a schedule, and both against a numpy interpreter of the XML that knows nothing of them
(tests/fixtures/msccl_interpreter.py).

The XML files in tests/fixtures/msccl/ are written as msccl-tools' ``ir_to_xml`` writes its
ring examples (``allreduce_a100_ring.py``, ``allgather_ring.py``); the smaller XMLs built here
cover the other step types and shapes (out of place, scratch and ``re``, reduce-scatter,
all-to-all, two GPUs per server)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from contract.errors import UsageError
from contract.schedule import ScheduleBuilder
from planner.collectives.msccl_xml import (
    MAX_STEPS,
    MscclXmlError,
    add_msccl_collective,
    check_algorithm,
    chunk_bytes,
    layout_of,
    parse_msccl_xml,
    read_msccl_xml,
    translate,
)
from planner.collectives.rings import multiring_allreduce, ring_allreduce
from planner.collectives.simulate import make_inputs, simulate_and_verify, simulate_schedule
from tests.fixtures import msccl_interpreter as interp

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "msccl"
RING4 = FIXTURES / "ring_allreduce_4.xml"
RING8 = FIXTURES / "ring_allreduce_8.xml"
RING8_BIDIR = FIXTURES / "ring_allreduce_8_bidirectional.xml"
ALLGATHER8 = FIXTURES / "ring_allgather_8.xml"
HAND_WRITTEN = [RING4, RING8, RING8_BIDIR, ALLGATHER8]


# ---- small XMLs of other shapes, in msccl-tools' format ---------------------------------------
def _step(s, t, sb, so, db, do, cnt=1, depid=-1, deps=-1, hasdep=0):
    return (
        f'      <step s="{s}" type="{t}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" cnt="{cnt}" '
        f'depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>'
    )


def _algo(name, coll, n, nchunks, gpus, inplace=1):
    head = (
        f'<algo name="{name}" proto="Simple" nchannels="1" nchunksperloop="{nchunks}" ngpus="{n}" coll="{coll}" '
        f'inplace="{inplace}" outofplace="{1 - inplace}" minBytes="0" maxBytes="0">'
    )
    return "\n".join([head, *gpus, "</algo>"]) + "\n"


def _gpu(g, ic, oc, sc, tbs):
    lines = [f'  <gpu id="{g}" i_chunks="{ic}" o_chunks="{oc}" s_chunks="{sc}">']
    for tid, (send, recv, steps) in enumerate(tbs):
        lines.append(f'    <tb id="{tid}" send="{send}" recv="{recv}" chan="0">')
        lines += [_step(s, **st) if isinstance(st, dict) else _step(s, *st) for s, st in enumerate(steps)]
        lines.append("    </tb>")
    lines.append("  </gpu>")
    return "\n".join(lines)


def out_of_place_ring_allreduce(n: int) -> str:
    """Reduce-scatter on the input (s, rrs), the last hop's sum into the output (rrcs i -> o),
    all-gather on the output (rcs, r): inplace=0."""
    gpus = []
    for g in range(n):

        def c(j, g=g):
            return (g + j) % n

        steps = [("s", "i", c(0), "o", 0)] + [("rrs", "i", c(-j), "o", 0) for j in range(1, n - 1)]
        steps += [("rrcs", "i", c(1), "o", c(1))] + [("rcs", "o", c(-j), "o", c(-j)) for j in range(n - 2)]
        steps += [("r", "o", c(2 - n), "o", c(2 - n))]
        gpus.append(_gpu(g, n, n, 0, [((g + 1) % n, (g - 1) % n, steps)]))
    return _algo("oop_ring", "allreduce", n, n, gpus, inplace=0)


def allpairs_allreduce(n: int) -> str:
    """msccl-tools' all-pairs AllReduce: chunk q of every GPU into GPU q's scratch, a local
    reduction threadblock (re), the sum back to everyone; dependencies across threadblocks."""
    gpus = []
    for g in range(n):
        peers = [q for q in range(n) if q != g]
        red = len(peers)
        tbs = []
        for t, q in enumerate(peers):
            tbs.append(
                (
                    q,
                    q,
                    [
                        ("s", "i", q, "s", 0),
                        dict(t="r", sb="i", so=g, db="s", do=t, hasdep=1),
                        dict(t="s", sb="i", so=g, db="i", do=g, depid=red, deps=red - 1),
                        ("r", "i", q, "i", q),
                    ],
                )
            )
        reductions = [
            dict(t="re", sb="s", so=t, db="i", do=g, depid=t, deps=1, hasdep=int(t == red - 1)) for t in range(red)
        ]
        tbs.append((-1, -1, reductions))
        gpus.append(_gpu(g, n, n, n - 1, tbs))
    return _algo("allpairs", "allreduce", n, n, gpus)


def ring_reducescatter(n: int) -> str:
    gpus = []
    for g in range(n):

        def c(j, g=g):
            return (g - 1 - j) % n

        steps = [("s", "i", c(0), "i", c(0))] + [("rrs", "i", c(j), "i", c(j)) for j in range(1, n - 1)]
        steps += [("rrc", "i", g, "i", g)]
        gpus.append(_gpu(g, n, 1, 0, [((g + 1) % n, (g - 1) % n, steps)]))
    return _algo("ring_rs", "reducescatter", n, n, gpus)


def direct_alltoall(n: int, m: int = 1) -> str:
    """Every pair directly, m chunks a message (cnt=m), the own piece by a local cpy; out of place."""
    gpus = []
    for g in range(n):
        tbs = [(q, q, [("s", "i", q * m, "o", g * m, m), ("r", "i", g * m, "o", q * m, m)]) for q in range(n) if q != g]
        tbs.append((-1, -1, [("cpy", "i", g * m, "o", g * m, m)]))
        gpus.append(_gpu(g, n * m, n * m, 0, tbs))
    return _algo("a2a", "alltoall", n, n * m, gpus, inplace=0)


def in_place_alltoall(n: int) -> str:
    """Every pair directly, in place: a GPU sends chunk q to q, then receives q's piece into it."""
    gpus = [
        _gpu(g, n, n, 0, [(q, q, [("s", "i", q, "i", g), ("r", "i", g, "i", q)]) for q in range(n) if q != g])
        for g in range(n)
    ]
    return _algo("a2a_in_place", "alltoall", n, n, gpus)


def out_of_place_ring_allgather(n: int) -> str:
    """The input copied to the output's own chunk, then the ring on the output."""
    gpus = []
    for g in range(n):
        steps = [("s", "i", 0, "o", g)] + [("rcs", "o", (g - j) % n, "o", (g - j) % n) for j in range(1, n - 1)]
        steps += [("r", "o", (g + 1) % n, "o", (g + 1) % n)]
        gpus.append(_gpu(g, 1, n, 0, [((g + 1) % n, (g - 1) % n, steps), (-1, -1, [("cpy", "i", 0, "o", g)])]))
    return _algo("oop_allgather", "allgather", n, n, gpus, inplace=0)


def hierarchical_allreduce_2x2() -> str:
    """4 GPUs, 2 a server ({0, 1}, {2, 3}): reduce-scatter within the server, AllReduce of
    each half between the servers, all-gather within the server."""
    gpus = []
    for g in range(4):
        s, l = divmod(g, 2)
        partner, remote = s * 2 + 1 - l, (1 - s) * 2 + l
        intra = [
            ("s", "i", 1 - l, "i", 1 - l),
            dict(t="rrc", sb="i", so=l, db="i", do=l, hasdep=1),
            dict(t="s", sb="i", so=l, db="i", do=l, depid=None, deps=1),
            ("r", "i", 1 - l, "i", 1 - l),
        ]
        inter = [
            dict(t="s", sb="i", so=l, db="i", do=l, depid=None, deps=1),
            dict(t="rrc", sb="i", so=l, db="i", do=l, hasdep=1),
        ]
        tbs = sorted([(partner, partner, intra), (remote, remote, inter)], key=lambda tb: tb[0])
        i_intra = 0 if tbs[0][2] is intra else 1
        intra[2]["depid"], inter[0]["depid"] = 1 - i_intra, i_intra
        gpus.append(_gpu(g, 2, 2, 0, tbs))
    return _algo("hierarchical", "allreduce", 4, 2, gpus)


def relayed_allgather_line() -> str:
    """GPUs 0 - 1 - 2 in a line; GPU 1 receives each end's chunk into scratch, passes it on,
    and copies it to its output (the shape TACCL's relays have)."""
    ends = [
        _gpu(0, 1, 3, 0, [(1, 1, [("s", "o", 0, "o", 0), ("r", "o", 1, "o", 1), ("r", "o", 2, "o", 2)])]),
        _gpu(2, 1, 3, 0, [(1, 1, [("s", "o", 2, "o", 2), ("r", "o", 1, "o", 1), ("r", "o", 0, "o", 0)])]),
    ]
    relay = _gpu(
        1,
        1,
        3,
        2,
        [
            (2, 0, [("r", "o", 0, "s", 0), ("s", "o", 1, "o", 1), ("s", "s", 0, "o", 0), ("cpy", "s", 0, "o", 0)]),
            (0, 2, [("r", "o", 2, "s", 1), ("s", "o", 1, "o", 1), ("s", "s", 1, "o", 2), ("cpy", "s", 1, "o", 2)]),
        ],
    )
    return _algo("relayed_allgather", "allgather", 3, 3, [ends[0], relay, ends[1]])


def relayed_alltoall_line() -> str:
    """GPUs 0 - 1 - 2 in a line, out of place; GPU 1 relays 0 -> 2 through s[0] and, later,
    2 -> 0 through s[1], on other threadblocks: one scratch chunk serves both."""
    gpu0 = _gpu(
        0,
        3,
        3,
        0,
        [
            (1, 1, [("s", "i", 1, "o", 0), ("s", "i", 2, "s", 0), ("r", "i", 0, "o", 1), ("r", "s", 1, "o", 2)]),
            (-1, -1, [("cpy", "i", 0, "o", 0)]),
        ],
    )
    gpu2 = _gpu(
        2,
        3,
        3,
        0,
        [
            (1, 1, [("s", "i", 1, "o", 2), ("r", "i", 2, "o", 1), ("r", "s", 0, "o", 0), ("s", "i", 0, "s", 1)]),
            (-1, -1, [("cpy", "i", 2, "o", 2)]),
        ],
    )
    gpu1 = _gpu(
        1,
        3,
        3,
        2,
        [
            (-1, 0, [("r", "i", 1, "o", 0), dict(t="r", sb="i", so=2, db="s", do=0, hasdep=1)]),
            (0, -1, [("s", "i", 0, "o", 1), dict(t="s", sb="s", so=1, db="o", do=2, depid=2, deps=1)]),
            (-1, 2, [("r", "i", 1, "o", 2), dict(t="r", sb="i", so=0, db="s", do=1, hasdep=1)]),
            (2, -1, [("s", "i", 2, "o", 1), dict(t="s", sb="s", so=0, db="o", do=0, depid=0, deps=1)]),
            (-1, -1, [("cpy", "i", 1, "o", 1)]),
        ],
    )
    return _algo("relayed_alltoall", "alltoall", 3, 3, [gpu0, gpu1, gpu2], inplace=0)


SHAPES = {  # name: (xml text, GPUs per server)
    "in-place alltoall": (in_place_alltoall(4), 1),
    "out-of-place ring allgather (cpy)": (out_of_place_ring_allgather(4), 1),
    "8-GPU ring allreduce, 2 GPUs a server": (RING8.read_text(), 2),
    "8-GPU ring allreduce, 4 GPUs a server": (RING8_BIDIR.read_text(), 4),
    "8-GPU ring allgather, 2 GPUs a server": (ALLGATHER8.read_text(), 2),
    "relayed allgather (scratch, forward, cpy)": (relayed_allgather_line(), 1),
    "relayed alltoall (scratch reused)": (relayed_alltoall_line(), 1),
    "out-of-place ring allreduce": (out_of_place_ring_allreduce(5), 1),
    "all-pairs allreduce (scratch, re)": (allpairs_allreduce(4), 1),
    "ring reducescatter": (ring_reducescatter(4), 1),
    "direct alltoall (cnt 2, cpy)": (direct_alltoall(3, 2), 1),
    "hierarchical allreduce, 2 GPUs a server": (hierarchical_allreduce_2x2(), 2),
}


# ---- the interpreter: what each XML computes ------------------------------------------------
@pytest.mark.parametrize("path", HAND_WRITTEN, ids=lambda p: p.name)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hand_written_xml_computes_its_collective(path, seed):
    inputs = interp.random_inputs(path, seed=seed)
    result = interp.run(path, inputs, seed=seed)
    expected, got = interp.expected_outputs(result), interp.outputs(result)
    for g in expected:
        np.testing.assert_array_equal(got[g], expected[g], err_msg=f"gpu {g}")
    if result.coll == "allreduce":  # the sum, by hand for one element
        assert got[0][0] == sum(inputs[g][0] for g in inputs)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_other_shapes_compute_their_collective(name):
    text, _ = SHAPES[name]
    for seed in range(3):
        result = interp.run(text, interp.random_inputs(text, seed=seed), seed=seed)
        expected, got = interp.expected_outputs(result), interp.outputs(result)
        for g in expected:
            np.testing.assert_array_equal(got[g], expected[g], err_msg=f"{name}: gpu {g} seed {seed}")


def test_interpreter_catches_a_wrong_xml():
    """A ring whose last hop receives the wrong chunk: the interpreter's result differs."""
    text = RING4.read_text().replace(
        'type="r" srcbuf="i" srcoff="2" dstbuf="i" dstoff="2"',
        'type="r" srcbuf="i" srcoff="3" dstbuf="i" dstoff="3"',
        1,
    )
    result = interp.run(text, interp.random_inputs(text))
    expected, got = interp.expected_outputs(result), interp.outputs(result)
    assert not all(np.array_equal(got[g], expected[g]) for g in expected)


# ---- reading and checking -----------------------------------------------------------------
@pytest.mark.parametrize("path", HAND_WRITTEN, ids=lambda p: p.name)
def test_hand_written_xml_passes_the_checker(path):
    algo = read_msccl_xml(path, strict=True)
    assert check_algorithm(algo) == []
    assert algo.path == str(path)
    assert algo.proto == "Simple" and algo.inplace == 1 and algo.outofplace == 0
    assert all(len(tb.steps) <= MAX_STEPS for gpu in algo.gpus for tb in gpu.tbs)


def test_model_of_the_four_gpu_ring():
    algo = read_msccl_xml(RING4)
    assert (algo.ngpus, algo.coll, algo.nchannels, algo.nchunksperloop) == (4, "allreduce", 1, 4)
    tb = algo.gpus[0].tbs[0]
    assert (tb.send, tb.recv, tb.chan) == (1, 3, 0)
    assert [st.type for st in tb.steps] == ["s", "rrs", "rrs", "rrcs", "rcs", "rcs", "r"]
    assert [st.srcoff for st in tb.steps] == [0, 3, 2, 1, 0, 3, 2]


def test_optional_algo_attributes_default_unless_strict():
    text = RING4.read_text().replace(' outofplace="0" minBytes="0" maxBytes="0"', "")
    algo = parse_msccl_xml(text, "old.xml")
    assert (algo.outofplace, algo.min_bytes, algo.max_bytes) == (0, 0, 0)
    with pytest.raises(MscclXmlError, match=r'old\.xml: algo: no outofplace="\.\.\."'):
        parse_msccl_xml(text, "old.xml", strict=True)


def test_comments_unknown_attributes_and_space_before_slash_are_read():
    """What the executor's tokenizer reads too: comments, attributes it ignores, ' />'."""
    text = "<!-- a ring -->\n" + RING4.read_text().replace('chan="0">', 'chan="0" extra="x">', 1).replace(
        'hasdep="0"/>', 'hasdep="0" />', 1
    )
    assert check_algorithm(parse_msccl_xml(text)) == []


def _mutate(text: str, old: str, new: str, count: int = 1) -> str:
    assert old in text, old
    return text.replace(old, new, count)


RING4_TEXT = RING4.read_text()
GPU0 = '  <gpu id="0" i_chunks="4" o_chunks="4" s_chunks="0">\n'
BIDIR_TEXT = RING8_BIDIR.read_text()


def _extra_tb(steps: int) -> str:
    lines = ['    <tb id="1" send="-1" recv="-1" chan="0">']
    lines += [_step(s, "cpy", "i", 0, "i", 1) for s in range(steps)]
    return "\n".join(lines + ["    </tb>"]) + "\n"


def _cycle(text: str) -> str:
    """gpu 0: tb 0 step 0 waits for tb 1 step 1, and tb 1 step 0 for tb 0 step 1."""
    lines = text.splitlines(keepends=True)
    start = lines.index(GPU0.replace('i_chunks="4" o_chunks="4"', 'i_chunks="16" o_chunks="16"'))
    tb0 = start + 2  # step 0 of tb 0
    tb1 = next(i for i in range(start, len(lines)) if '<tb id="1"' in lines[i]) + 1
    for first, other in ((tb0, 1), (tb1, 0)):
        lines[first] = lines[first].replace('depid="-1" deps="-1"', f'depid="{other}" deps="1"')
        lines[first + 1] = lines[first + 1].replace('hasdep="0"', 'hasdep="1"')
    return "".join(lines)


MALFORMED = {  # name: (text, what the one line says)
    "missing receive": (
        _mutate(
            RING4_TEXT,
            '      <step s="6" type="r" srcbuf="i" srcoff="3" dstbuf="i" dstoff="3" cnt="1" depid="-1" deps="-1" hasdep="0"/>\n',
            "",
        ),
        r"gpu 0 tb 0 step 5: sends to gpu 1 on channel 0, but gpu 1 has no receive for it",
    ),
    "self peer": (
        _mutate(RING4_TEXT, 'send="1" recv="3"', 'send="0" recv="3"'),
        r"gpu 0 tb 0: send=0 recv=3: a threadblock's peers must be other GPUs",
    ),
    "cycle of dependencies": (
        _cycle(BIDIR_TEXT),
        r"gpu 0 tb \d step \d: a cycle of dependencies \(a deadlock\): gpu 0 tb",
    ),
    "bad cnt": (_mutate(RING4_TEXT, 'cnt="1"', 'cnt="72"'), r"gpu 0 tb 0 step 0: cnt=72 must be from 0 to 71"),
    "tb ids not contiguous": (
        _mutate(RING4_TEXT, '<tb id="0" send="1"', '<tb id="1" send="1"'),
        r"gpu 0: threadblock ids \[1\] are not contiguous from 0 \(tb 0 is missing\)",
    ),
    "unknown step type": (
        _mutate(RING4_TEXT, 'type="rrs"', 'type="rrx"'),
        r"gpu 0 tb 0 step 1: type='rrx' is not one of s, r, rcs",
    ),
    "missing attribute": (
        _mutate(RING4_TEXT, ' hasdep="0"/>', "/>"),
        r'gpu 0 tb 0 step 0: no hasdep="\.\.\." \(line 4\)',
    ),
    "offset out of range": (
        _mutate(RING4_TEXT, 'srcoff="3" dstbuf="i" dstoff="3"', 'srcoff="4" dstbuf="i" dstoff="4"'),
        r"gpu 0 tb 0 step 1: srcbuf=i srcoff=4 cnt=1: chunks 4\.\.4 are outside the 4 chunks of i \(i_chunks\)",
    ),
    "more than 64 steps": (
        _mutate(RING4_TEXT, "    </tb>\n", "    </tb>\n" + _extra_tb(MAX_STEPS + 1)),
        r"gpu 0 tb 1 step 64: s=64: more than 64 steps in a threadblock",
    ),
    "ngpus mismatch": (_mutate(RING4_TEXT, 'ngpus="4"', 'ngpus="5"'), r"algo: ngpus=5 but no <gpu> for id 4"),
    "not XML": (
        "server_a,port_a,server_b,port_b\n0,0,1,0\n",
        r"line 1: text 'server_a,port_a,serv' where <algo> should begin: not an MSCCL XML file",
    ),
    "empty": ("", r"empty: no <algo> element"),
    "only spaces": ("  \n\n", r"empty: no <algo> element"),
    "xml declaration": (
        '<?xml version="1.0" encoding="utf-8"?>\n' + RING4_TEXT,
        r"line 1: an <\?xml \.\.\.\?> declaration .* refuses it",
    ),
    "attributes on two lines": (
        _mutate(RING4_TEXT, ' recv="3" chan="0">', '\n      recv="3" chan="0">'),
        r"line 3: the tag .* is not one msccl-executor's parser reads",
    ),
    "single quotes": (
        _mutate(RING4_TEXT, 'chan="0"', "chan='0'"),
        r"line 3: the tag .* is not one msccl-executor's parser reads",
    ),
    "tab indentation": (_mutate(RING4_TEXT, "    <tb", "\t<tb"), r"line 3: a tab between elements"),
    "duplicate gpu": (_mutate(RING4_TEXT, '<gpu id="1"', '<gpu id="0"'), r"gpu 0: a second <gpu id=0>"),
    "dependency on a missing tb": (
        _mutate(RING4_TEXT, 'depid="-1" deps="-1"', 'depid="5" deps="0"'),
        r"gpu 0 tb 0 step 0: depends on tb 5, which gpu 0 does not have",
    ),
    "dependency on a step without hasdep": (
        _mutate(
            _mutate(RING4_TEXT, "    </tb>\n", "    </tb>\n" + _extra_tb(1)),
            'type="cpy" srcbuf="i" srcoff="0" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1"',
            'type="cpy" srcbuf="i" srcoff="0" dstbuf="i" dstoff="1" cnt="1" depid="0" deps="2"',
        ),
        r"gpu 0 tb 1 step 0: depends on tb 0 step 2, which is hasdep=0",
    ),
    "send and receive counts differ": (
        _mutate(
            RING4_TEXT.replace(GPU0, "", 0),
            '<step s="1" type="rrs" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1"',
            '<step s="1" type="rrs" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="2"',
        ),
        r"gpu 1 tb 0 step 1: receives cnt=2 from gpu 0 on channel 0, but the matching send \(gpu 0 tb 0 step 0, its message 1\) sends cnt=1",
    ),
    "send without a send peer": (
        _mutate(RING4_TEXT, 'send="1" recv="3"', 'send="-1" recv="3"'),
        r"gpu 0 tb 0 step 0: type=s sends, but the threadblock has send=-1",
    ),
    "unknown collective": (
        _mutate(RING4_TEXT, 'coll="allreduce"', 'coll="broadcast"'),
        r"algo: coll='broadcast' is not one of allreduce, allgather, reducescatter, alltoall",
    ),
    "unknown protocol": (
        _mutate(RING4_TEXT, 'proto="Simple"', 'proto="LL256"'),
        r"algo: proto='LL256' is not one of Simple, LL, LL128",
    ),
    "channel past nchannels": (_mutate(RING4_TEXT, 'chan="0"', 'chan="1"'), r"gpu 0 tb 0: chan=1 must be from 0 to 0"),
    "not an integer": (_mutate(RING4_TEXT, 'cnt="1"', 'cnt="one"'), r"gpu 0 tb 0 step 0: cnt='one' is not an integer"),
    "root is not algo": (
        RING4_TEXT.replace("<algo ", "<algorithm ").replace("</algo>", "</algorithm>"),
        r"the root element is <algorithm>, not <algo>",
    ),
    "not well-formed": (
        _mutate(RING4_TEXT, "  </gpu>\n", "", 1),
        r"line \d+ column \d+: not well-formed XML \(mismatched tag\)",
    ),
    "two threadblocks on one connection": (
        _mutate(RING4_TEXT, "    </tb>\n", '    </tb>\n    <tb id="1" send="1" recv="-1" chan="0">\n    </tb>\n'),
        r"gpu 0 tb 1: tb 0 and tb 1 both send to gpu 1 on channel 0",
    ),
    "never selected": (
        _mutate(RING4_TEXT, 'inplace="1"', 'inplace="0"'),
        r"algo: inplace=0 and outofplace=0: the executor never selects it",
    ),
    "nop without a dependency": (
        _mutate(RING4_TEXT, 'type="s" srcbuf="i" srcoff="0"', 'type="nop" srcbuf="i" srcoff="0"'),
        r"gpu 0 tb 0 step 0: a nop without a dependency",
    ),
    "doctype with entities": ('<!DOCTYPE a [<!ENTITY x "xx">]>\n' + RING4_TEXT, r"line 1: a DOCTYPE or CDATA section"),
    "comment never ends": ("<!-- a ring\n" + RING4_TEXT, r"line 1: a comment that never ends"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_xml_is_refused_in_one_line(name, tmp_path):
    text, says = MALFORMED[name]
    path = tmp_path / "bad.xml"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        read_msccl_xml(path)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"{path}: "), message
    assert re.search(says, message), message
    assert err.value.exit_code == 2


def test_malformed_count():
    assert len(MALFORMED) >= 25


def test_every_problem_is_listed(tmp_path):
    text = _mutate(_mutate(RING4_TEXT, 'cnt="1"', 'cnt="72"'), 'type="rrs"', 'type="rrx"')
    with pytest.raises(MscclXmlError) as err:
        parse_msccl_xml(text, "two.xml")
    assert len(err.value.problems) == 2
    assert all(p.startswith("two.xml: gpu 0 tb 0 step ") for p in err.value.problems)
    assert str(err.value).endswith("(and 1 more problem)")


def test_files_that_are_not_files_are_refused(tmp_path):
    with pytest.raises(UsageError, match="is a folder"):
        read_msccl_xml(tmp_path)
    with pytest.raises(UsageError, match="no such MSCCL XML file"):
        read_msccl_xml(tmp_path / "missing.xml")


# ---- translation -------------------------------------------------------------------------
def _gpu_inputs(sched, layout, chunk, inputs):
    """The MSCCL inputs the schedule's buffers amount to: each GPU's input chunks read from
    its server's buffer (sum collectives with G > 1: zeros but on the chunk's data holder)."""
    buffer = "grad" if layout.coll == "allreduce" else "data"
    items = chunk // 4
    data = inputs[buffer]
    out = {}
    for g in range(layout.ngpus):
        server, pieces = layout.server(g), []
        for c in range(layout.input_chunks):
            at = layout.input_chunk(g, c) * items
            piece = data[server, at : at + items].astype(np.float64)
            pieces.append(piece if layout.holds_data(g, c) else np.zeros(items))
        out[g] = np.concatenate(pieces)
    return out


def _translated_outputs(layout, chunk, final, buffer):
    items = chunk // 4
    return {
        g: np.concatenate(
            [
                final[buffer][
                    layout.server(g), layout.output_chunk(g, k) * items : (layout.output_chunk(g, k) + 1) * items
                ]
                for k in range(layout.output_chunks)
            ]
        ).astype(np.float64)
        for g in range(layout.ngpus)
    }


def _same_as_interpreter(text, gpus_per_server, nbytes, seed):
    algo = parse_msccl_xml(text)
    servers = algo.ngpus // gpus_per_server
    sched = translate(algo, servers, nbytes, gpus_per_server=gpus_per_server)
    layout = layout_of(algo, gpus_per_server)
    chunk = chunk_bytes(algo, nbytes)
    inputs = make_inputs(sched, seed)
    final = simulate_schedule(sched, inputs, seed).buffers
    buffer = "grad" if algo.coll == "allreduce" else "data"
    result = interp.run(text, _gpu_inputs(sched, layout, chunk, inputs), chunk=chunk // 4, seed=seed)
    want, got = interp.outputs(result), _translated_outputs(layout, chunk, final, buffer)
    for g in range(algo.ngpus):
        np.testing.assert_array_equal(got[g], want[g], err_msg=f"gpu {g}")
    return sched


@pytest.mark.parametrize("path", HAND_WRITTEN, ids=lambda p: p.name)
@pytest.mark.parametrize("seed", [0, 3])
def test_translation_computes_what_the_xml_computes(path, seed):
    sched = _same_as_interpreter(path.read_text(), 1, 96 << 10, seed)
    assert simulate_and_verify(sched, seed) == []  # and the workers' checks hold
    assert sched.checks


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_other_shapes_translate_to_what_they_compute(name):
    text, per_server = SHAPES[name]
    for seed in (0, 5):
        sched = _same_as_interpreter(text, per_server, 24 << 10, seed)
        assert simulate_and_verify(sched, seed) == []


def test_ring_translates_to_the_same_traffic_as_topolabs_ring():
    """The 8-GPU ring moves what topolab's own ring moves, in as many ops; the 2-channel
    ring what the bidirectional ring moves: the same bytes, timed the same way."""
    nbytes = 8 << 20
    ring = translate(read_msccl_xml(RING8), 8, nbytes)
    native = ring_allreduce(8, nbytes)
    assert ring.bytes_sent() == native.bytes_sent()
    assert ring.op_count() == native.op_count()
    assert [list(p.streams) for p in ring.programs] == [["msccl.tb0"]] * 8
    bidir = translate(read_msccl_xml(RING8_BIDIR), 8, nbytes)
    both = multiring_allreduce(8, nbytes, [list(range(8)), [0, *range(7, 0, -1)]])
    assert bidir.bytes_sent() == both.bytes_sent()
    assert all(len(p.streams) == 2 for p in bidir.programs)
    assert bidir.params["msccl"]["nchannels"] == 2 and bidir.algorithm == "msccl:allreduce_ring_8gpus_2channels"


def test_translation_keeps_the_connections_apart():
    """Each (src GPU, dst GPU, channel) has its own tag; a threadblock is one stream."""
    sched = translate(read_msccl_xml(RING8_BIDIR), 8, 1 << 20)
    tags = {
        (rank, op.peer, op.tag)
        for rank, p in enumerate(sched.programs)
        for ops in p.values()
        for op in ops
        if op.kind == "send"
    }
    assert len(tags) == 16  # 8 GPUs x 2 channels
    assert len({t for _, _, t in tags}) == 16


def test_sizes_are_whole_chunks():
    algo = read_msccl_xml(RING4)
    sched = translate(algo, 4, 1000)  # 1000 / 4 chunks = 250 bytes -> 252, whole floats
    assert sched.params["chunk_bytes"] == 252 and sched.params["padded_bytes"] == 1008
    assert sched.buffers["grad"].bytes == 1008 and sched.params["nbytes"] == 1000
    assert simulate_and_verify(sched) == []
    with pytest.raises(UsageError, match="must be > 0 bytes"):
        translate(algo, 4, 0)


def test_ngpus_must_match_the_servers():
    algo = read_msccl_xml(RING8)
    with pytest.raises(
        MscclXmlError, match=r"ring_allreduce_8\.xml: algo: ngpus=8, but 12 servers x 1 GPU per server = 12"
    ):
        translate(algo, 12, 1 << 20)
    with pytest.raises(MscclXmlError, match=r"ngpus=8, but 8 servers x 2 GPUs per server = 16"):
        translate(algo, 8, 1 << 20, gpus_per_server=2)


def test_a_scenario_with_more_servers_runs_it_on_the_first():
    sched = translate(read_msccl_xml(RING8), 8, 1 << 20, ranks=12)
    assert sched.ranks == 12 and sched.checks[0].groups == [list(range(8))]
    assert all(p.op_count == 0 for p in sched.programs[8:])
    assert simulate_and_verify(sched) == []


def test_four_gpus_on_two_servers_move_only_between_servers():
    """The 4-GPU ring on 2 servers of 2 GPUs: hops within a server are no ops; the sum is
    the two servers' data."""
    sched = translate(read_msccl_xml(RING4), 2, 64 << 10, gpus_per_server=2)
    assert simulate_and_verify(sched) == []
    peers = {(rank, op.peer) for rank, p in enumerate(sched.programs) for ops in p.values() for op in ops}
    assert peers == {(0, 1), (1, 0)}
    assert sorted(sched.programs[0].streams) == ["msccl.gpu0.tb0", "msccl.gpu1.tb0"]


def test_reducescatter_runs_unchecked_and_says_so():
    sched = translate(parse_msccl_xml(ring_reducescatter(4)), 4, 16 << 10)
    assert sched.checks == [] and "no check" in sched.params["unchecked"]


def test_alltoall_checks_every_pair():
    sched = translate(parse_msccl_xml(direct_alltoall(3, 2)), 3, 24 << 10)
    pairs = {(c.src, c.dst) for c in sched.checks}
    assert pairs == {(a, b) for a in range(3) for b in range(3) if a != b}
    assert sched.buffers["data"].bytes == 3 * (24 << 10)  # a region per pair


def test_what_topolab_cannot_run_is_refused_in_one_line():
    """A local reduction of two partial sums (no receive to fold it into), and an XML that
    does not compute its collective."""
    gpus = []  # 3 GPUs, 1 chunk: each passes its chunk on twice, then adds what it got locally
    for g in range(3):
        steps = [
            ("s", "i", 0, "i", 0),
            ("rcs", "i", 0, "s", 0),
            ("r", "i", 0, "s", 1),
            ("re", "s", 0, "i", 0),
            ("re", "s", 1, "i", 0),
        ]
        gpus.append(_gpu(g, 1, 1, 2, [((g + 1) % 3, (g - 1) % 3, steps)]))
    local = _algo("local_re", "allreduce", 3, 1, gpus)
    result = interp.run(local, interp.random_inputs(local))
    np.testing.assert_array_equal(interp.outputs(result)[1], interp.expected_outputs(result)[1])
    with pytest.raises(
        MscclXmlError, match=r"local\.xml: gpu 0 tb 0 step 3: a local reduction \(re\) of two partial sums"
    ):
        translate(parse_msccl_xml(local, "local.xml"), 3, 4096)
    wrong = RING4_TEXT.replace(
        'type="r" srcbuf="i" srcoff="2" dstbuf="i" dstoff="2"',
        'type="r" srcbuf="i" srcoff="3" dstbuf="i" dstoff="3"',
        1,
    )
    with pytest.raises(
        MscclXmlError,
        match=r"wrong\.xml: gpu 0: output chunk 2 ends holding gpu 0 chunk 2, where the allreduce needs the sum of 4 input chunks \(gpu 0 chunk 2, gpu 1 chunk 2, gpu 2 chunk 2, \.\.\.\)",
    ):
        translate(parse_msccl_xml(wrong, "wrong.xml"), 4, 4096)


def test_a_relayed_chunk_lands_where_the_output_belongs():
    """Received into scratch, passed on, copied to the output: the receive writes the output
    chunk and the send reads it there (no scratch at all)."""
    sched = translate(parse_msccl_xml(relayed_allgather_line()), 3, 3 << 10)
    assert "scratch" not in sched.buffers
    relay = [op for ops in sched.programs[1].values() for op in ops]
    into = {(op.peer, op.offset) for op in relay if op.kind == "recv"}
    out = {(op.peer, op.offset) for op in relay if op.kind == "send"}
    assert into == {(0, 0), (2, 2048)} and out == {(2, 1024), (2, 0), (0, 1024), (0, 2048)}


def test_a_reused_scratch_chunk_waits_for_its_last_reader():
    """GPU 1's s[1] arrives into the scratch chunk s[0] had, on another threadblock than the
    one that sent s[0] on: the receive waits for that send."""
    sched = translate(parse_msccl_xml(relayed_alltoall_line()), 3, 3 << 10)
    assert sched.buffers["scratch"].bytes == 1 << 10  # one chunk for both
    program = sched.programs[1]
    forward = next(op for op in program["msccl.tb3"] if op.buffer == "scratch")
    second = next(op for op in program["msccl.tb2"] if op.buffer == "scratch")
    assert forward.kind == "send" and second.kind == "recv" and forward.offset == second.offset
    assert forward.id in second.after


def test_composes_into_a_builder_after_other_ops():
    """`add_msccl_collective` on a region of a shared buffer, after compute: every stream's
    first op waits for it, the checks cover its region, the scratch has its own region."""
    algo = parse_msccl_xml(allpairs_allreduce(4))
    b = ScheduleBuilder(4, "iteration")
    b.buffer("grad", 4096)
    computes = {r: [b.compute(r, "compute", 0.001)] for r in range(4)}
    added = add_msccl_collective(b, algo, "grad", 4096, 16 << 10, after=computes, stream_prefix="ar.")
    sched = b.build()
    assert added.region_bytes == 16 << 10 and sched.buffers["grad"].bytes == 4096 + (16 << 10)
    assert sched.checks[0].offset == 4096
    for rank, program in enumerate(sched.programs):
        for name, ops in program.items():
            if name != "compute":
                assert computes[rank][0] in ops[0].after, (rank, name)
        assert set(added.done[rank]) <= {op.id for ops in program.values() for op in ops}
    assert simulate_and_verify(sched) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", [RING4, ALLGATHER8], ids=lambda p: p.name)
def test_translated_xml_runs_and_verifies_on_workers(path):
    from workers.coordinator import run_schedule

    algo = read_msccl_xml(path)
    sched = translate(algo, algo.ngpus, 256 << 10)
    results = run_schedule(sched.to_dict(), iterations=1, chunk_bytes=64 << 10)
    assert results and all(r.ok for r in results), results[0].mismatches[:3]
