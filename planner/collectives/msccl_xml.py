"""MSCCL XML algorithms in: read the XML the MSCCL executors run, check it as their parser
does, and translate it into a `contract.schedule` program the workers execute (verifying the
collective's result) and the predictor replays.

The grammar (what msccl-tools writes, ``msccl/language/ir.py`` ``ir_to_xml`` in the
repository Azure/msccl-tools; what msccl-executor reads, ``src/misc/msccl/msccl_parser.cc``
``mscclGetAlgoFromXmlFile`` and ``mscclGetAlgoMetaFromXmlFile`` in Azure/msccl-executor-nccl)::

    <algo name proto nchannels nchunksperloop ngpus coll inplace outofplace minBytes maxBytes>
      <gpu id i_chunks o_chunks s_chunks>
        <tb id send recv chan>
          <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>

Step types (``Instruction`` in msccl-tools' ``msccl/language/types.py``; the transfer types of
the parser, whose data movement is ``mscclRunInterpreter`` in ``src/device/msccl_kernel.cu``):
``s`` send src; ``r`` dst = received; ``rcs`` dst = received, and send it on; ``rrs`` send
src + received (nothing stored); ``rrc`` dst = src + received; ``rrcs`` dst = src + received,
and send it on; ``cpy`` dst = src; ``re`` dst = dst + src (the kernel's ``MSCCL_REDUCE``);
``nop`` waits for its dependency only. ``cnt`` consecutive chunks move as one message; the
send and receive peers of a threadblock are its ``send`` and ``recv`` GPUs (-1: none), its
connection the pair's channel ``chan``. Buffers: ``i`` input, ``o`` output, ``s`` scratch.

What is checked, and where each rule comes from (msccl_parser.cc unless said otherwise):

- the text, as the executor's hand-written tokenizer reads it (``mscclXmlGetNode``,
  ``mscclXmlGetToken``, ``mscclXmlGetValue``): only spaces and line breaks between elements,
  every tag on one line with ``name="value"`` attributes separated by spaces, at most
  ``MAX_ATTRS`` attributes of at most ``MAX_STR_LEN`` characters (msccl_parser.h), comments
  allowed; an ``<?xml ...?>`` declaration is refused, because the executor's first node
  must be ``<algo>`` (``mscclGetAlgoMetaFromXmlFile`` reads the file's first node: ``<?xml``
  ends in ``expected >, got '?'``). topolab's exporter never writes one. The rest is read
  with expat (the parser under ``xml.etree``), with no DTD and so no entities;
- ``<algo>``: ``proto`` one of ``PROTOCOLS`` (``mscclProtocolStrToId``), ``coll`` one of
  ``COLLECTIVES`` (the executor has more; topolab translates these four), ``nchannels``,
  ``nchunksperloop``, ``ngpus``, ``inplace`` required; ``outofplace``, ``minBytes``,
  ``maxBytes`` required by msccl-executor-nccl (``strict=True``) but not by the older MSCCL
  executors, so optional by default (``outofplace`` defaults to ``1 - inplace``);
- ``<gpu>``: ids 0 .. ngpus-1 once each, ``s_chunks >= 0`` (and i_chunks, o_chunks);
- ``<tb>``: ids contiguous from 0 (``thread block %d is missing``), no duplicate, fewer
  than ``MAX_TBS``; ``send`` and ``recv`` -1 or another GPU (``must be different``); ``chan``
  below ``nchannels`` (the parser allows up to MAXCHANNELS, src/include/device.h; a channel
  past ``nchannels`` is never set up); at most ``MAX_TBS_PER_CHANNEL`` threadblocks that
  send (receive) on one channel (``too many sends per channel``);
- ``<step>``: every attribute present (``mscclXmlGetAttrInt`` fails on a missing one),
  ``0 <= s < MAX_STEPS`` (``MSCCL_MAX_NUM_STEPS``, 64 by default in makefiles/common.mk),
  numbered 0, 1, ... in order (the kernel's step counter, which dependencies name, counts
  them so), a known ``type`` and buffers ``i``/``o``/``s`` (``mscclGetBufferType``),
  ``0 <= cnt < MAX_COUNT`` (``MSCCL_MAX_COUNT``, msccl_struct.h), ``hasdep`` 0 or 1, a send
  (receive) only in a threadblock with a send (receive) peer, and the chunks a step reads or
  writes locally inside ``i_chunks``/``o_chunks``/``s_chunks`` (``mscclCheckBufferBounds``
  checks the first chunk of a step's local side and allows -1; here every chunk of it, and
  the ``rrc`` the parser forgets, must be inside);
- dependencies: ``depid``/``deps`` name an existing threadblock of the same GPU and one of
  its steps, a transfer (not a ``nop``) with ``hasdep="1"`` (the kernel sets a threadblock's
  flag only after such steps); a ``nop`` carries a dependency, and the step after a ``nop``
  must carry one too (``the last reduction must be a part of the first immediate
  instruction``);
- beyond the parser (an executor would hang or pair data wrongly): at most one threadblock
  of a GPU sends (receives) to (from) one peer on one channel; the k-th send of a connection
  is matched by the k-th receive at the peer, with the same ``cnt``; no cycle through
  threadblock order, dependencies and send-before-receive (a cycle is a deadlock); at most
  ``MAX_NODES - 1`` elements per GPU and ``MAX_SUBS`` children per element (msccl_parser.h).

Each problem is one line, ``FILE: gpu G tb T step S: problem``; `MscclXmlError` (a
`UsageError`, exit 2) carries them all and says the first.

Translation (`translate`, `add_msccl_collective`). GPU g runs on server ``g //
gpus_per_server`` (G GPUs per server: consecutive ranks share a server, NCCL's order); every
threadblock is a stream of its server's program; the k-th send of a connection (src GPU,
dst GPU, channel) pairs with the k-th receive by a tag of its own; a step's dependency is an
``after`` on the op that ends the step it names. Messages between GPUs of one server move
no bytes over the network. The buffer of the collective is cut into ``nchunksperloop``
chunks of equal size (the executor's ``sizePerMscclChunk``; the size is rounded up to whole
items, so the region may be a few bytes longer than asked) and the XML runs once over them
(the executor loops the same program over slices of every chunk; the workers pipeline each
message in wire chunks instead). LL and LL128 are timed as Simple.

topolab's programs have sends and receives (reducing or copying) but no local copy or
reduction, so local data movement is resolved when translating: the XML is executed
symbolically (every chunk's value a set of input chunks) in one order its dependencies
allow, and every value is kept in a *cell* (a chunk of a server's buffer or of a scratch
buffer). A ``cpy``, a message within a server, or a sum with a zero is an alias (the
destination names the cell that holds the value); ``rrs``/``rrc`` whose result goes elsewhere
than its source reduce into the source's cell when nothing reads that chunk again before it
is overwritten; a received value goes to the chunk where the collective's result belongs,
or to scratch. A plain receive (``r``) whose chunk an ``re`` then adds to another becomes a
reducing receive into that other chunk (msccl-tools' all-pairs AllReduce), and one whose
chunk a ``cpy`` then moves to the output receives into the output, its forwards reading it
there (TACCL's relays), when nothing touches either chunk in between. Hazards on shared
cells become ``after`` edges, so every interleaving the workers run computes the same. What
cannot be placed that way (a local reduction of two partial sums, a result left in another
chunk by a copy) is refused with one line naming the step. Local moves cost nothing unless
``local_bytes_per_s`` times them as compute ops. With G > 1 GPUs per server a server still
has one input per region, so in the sum collectives one GPU of the server holds each chunk
of its data (the one that first adds that chunk to a partial sum from another server, so the
sum meets the data in a receive) and the others hold zeros; the gather collectives give
every GPU its own region. The result is verified symbolically before any op is written: an
XML that does not compute its collective is refused.

Layout of the collective's buffer, in chunks of every server (the verification contract,
`contract.schedule.Check`): allreduce: chunk k of every GPU (an ``allreduce`` check);
allgather: GPU g's input at chunks ``g*m .. g*m+m-1`` of the output (``copy`` checks);
alltoall: the piece GPU h sends GPU g at ``(h*ngpus + g)*m ..`` on both (``copy`` checks,
``ngpus`` times the bytes); reducescatter: GPU g's result at ``g*m ..`` of the input, which
`contract.schedule.Check` cannot state (a sum on one member only), so it runs unchecked and
``params["unchecked"]`` says so. In-place algorithms (``inplace="1"``) run in place, as
the executor runs them when the input is inside the output.
"""

from __future__ import annotations

import dataclasses
import os
import re
import xml.parsers.expat
from bisect import bisect_right
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.errors import UsageError
from contract.files import read_capped_text
from contract.schedule import Check, Schedule, ScheduleBuilder

MAX_XML_BYTES = 64 << 20  # an MSCCL XML of 1024 GPUs x 32 threadblocks x 64 steps is ~250 MiB; ours are far smaller
MAX_STEPS = 64  # MSCCL_MAX_NUM_STEPS (makefiles/common.mk): steps per threadblock
MAX_COUNT = 72  # MSCCL_MAX_COUNT (msccl_struct.h): cnt < 72
MAX_CHANNELS = 32  # MAXCHANNELS (src/include/device.h)
MAX_TBS_PER_CHANNEL = 32  # MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL (msccl_struct.h)
MAX_TBS = MAX_TBS_PER_CHANNEL * MAX_CHANNELS  # MSCCL_MAX_NUM_THREAD_BLOCKS
MAX_NODES = 4096  # msccl_parser.h: elements the parser keeps for one GPU
MAX_SUBS = 1024  # msccl_parser.h: children of one element
MAX_ATTRS = 16  # MAX_ATTR_COUNT (msccl_parser.h): later attributes are ignored
MAX_STR_LEN = 255  # MAX_STR_LEN (msccl_parser.h): names and values

PROTOCOLS = ("Simple", "LL", "LL128")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")
BUFFERS = ("i", "o", "s")
STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})  # steps that send to the threadblock's send peer
RECEIVES = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})  # steps that receive from its recv peer
LOCAL_SOURCE = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})  # steps that read srcbuf here
LOCAL_DEST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})  # steps that write dstbuf here
ITEMSIZE = 4  # float32, the workers' buffers
STREAM_PREFIX = "msccl."
MSCCL_PREFIX = "msccl:"  # an algorithm named msccl:FILE is the MSCCL XML in FILE (`msccl_file`)
SUM_COLLECTIVES = frozenset({"allreduce", "reducescatter"})


class MscclXmlError(UsageError):
    """An MSCCL XML topolab cannot run: ``problems`` are one line each (``FILE: where:
    problem``); the message is the first, with how many more."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        more = len(self.problems) - 1
        super().__init__(self.problems[0] + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""))


# ---- the model ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One ``<step>``: what it does (``type``), its local or remote chunks, its dependency."""

    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int

    @property
    def sends(self) -> bool:
        return self.type in SENDS

    @property
    def receives(self) -> bool:
        return self.type in RECEIVES


@dataclass(frozen=True)
class Threadblock:
    """One ``<tb>``: a sequence of steps with one send peer, one receive peer (-1: none) and
    a channel."""

    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Gpu:
    """One ``<gpu>``: its buffers' sizes in chunks and its threadblocks (by id)."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[Threadblock, ...]

    def chunks(self, buffer: str) -> int:
        return {"i": self.i_chunks, "o": self.o_chunks, "s": self.s_chunks}[buffer]


@dataclass(frozen=True)
class Algorithm:
    """An MSCCL algorithm as read (`parse_msccl_xml`); ``gpus[g].id == g``. ``path`` names
    the file in every problem."""

    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int
    min_bytes: int
    max_bytes: int
    gpus: tuple[Gpu, ...]
    path: str = "<msccl xml>"

    def step_count(self) -> int:
        return sum(len(tb.steps) for gpu in self.gpus for tb in gpu.tbs)


StepKey = tuple[int, int, int]  # (gpu, tb, s)


def _where(gpu: int | None = None, tb: int | None = None, step: int | None = None) -> str:
    parts = []
    if gpu is not None:
        parts.append(f"gpu {gpu}")
    if tb is not None:
        parts.append(f"tb {tb}")
    if step is not None:
        parts.append(f"step {step}")
    return " ".join(parts) or "algo"


# ---- the text, as the executor's tokenizer reads it ----------------------------------------
_NAME = r"[A-Za-z_][A-Za-z0-9_.:-]*"
_TAG = re.compile(rf'<(?P<close>/)?(?P<name>{_NAME})(?P<attrs>(?: +{_NAME}="[^"\r\n]*")*)(?P<space> *)(?P<single>/)?>')
_ATTR = re.compile(rf'({_NAME})="([^"\r\n]*)"')
_INTEGER = re.compile(r"-?[0-9]+")


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _lexical_problem(text: str) -> str | None:
    """The first thing msccl-executor's tokenizer would refuse or misread in ``text``, as
    ``line L: problem``; None when every tag is one it reads."""
    pos, n, elements = 0, len(text), 0
    while True:
        while pos < n and text[pos] in " \r\n":
            pos += 1
        if pos == n:
            return None if elements else "empty: no <algo> element"
        if text[pos] != "<":
            what = "a tab" if text[pos] == "\t" else f"text {text[pos : pos + 20].splitlines()[0]!r}"
            if not elements and what != "a tab":
                return f"line {_line(text, pos)}: {what} where <algo> should begin: not an MSCCL XML file"
            return (
                f"line {_line(text, pos)}: {what} between elements (msccl-executor's parser reads only "
                "spaces and line breaks there)"
            )
        if text.startswith("<!--", pos):
            end = text.find("-->", pos + 4)
            if end < 0:
                return f"line {_line(text, pos)}: a comment that never ends"
            pos = end + 3
            continue
        if text.startswith("<?", pos):
            return (
                f"line {_line(text, pos)}: an <?xml ...?> declaration or processing instruction: msccl-executor's "
                "parser refuses it (its first node must be <algo>); remove it"
            )
        if text.startswith("<!", pos):
            return f"line {_line(text, pos)}: a DOCTYPE or CDATA section, which MSCCL XML does not have"
        m = _TAG.match(text, pos)
        if m is None:
            snippet = text[pos : pos + 60].splitlines()[0] if text[pos : pos + 60].strip() else text[pos : pos + 60]
            return (
                f"line {_line(text, pos)}: the tag {snippet!r}... is not one msccl-executor's parser reads: "
                'a name, then name="value" attributes separated by spaces, all on one line'
            )
        attrs = _ATTR.findall(m["attrs"])
        if m["close"] and (attrs or m["single"] or m["space"]):
            return f"line {_line(text, pos)}: the closing tag {m.group(0)!r} must be </{m['name']}>"
        if len(attrs) > MAX_ATTRS:
            return (
                f"line {_line(text, pos)}: <{m['name']}> has {len(attrs)} attributes; msccl-executor's parser "
                f"ignores those past the {MAX_ATTRS}th"
            )
        for key, value in [(m["name"], "")] + attrs:
            if len(key) > MAX_STR_LEN or len(value) > MAX_STR_LEN:
                return f"line {_line(text, pos)}: a name or value longer than {MAX_STR_LEN} characters"
        elements += 0 if m["close"] else 1
        pos = m.end()


@dataclass
class _Node:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list[_Node] = field(default_factory=list)


def _tree(text: str, path: str) -> _Node:
    """The elements of ``text`` (expat; no DTD, so no entities), or `MscclXmlError`."""
    parser = xml.parsers.expat.ParserCreate()
    stack: list[_Node] = []
    roots: list[_Node] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        node = _Node(tag, dict(attrs), parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)

    def end(tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as err:
        raise MscclXmlError(
            [
                f"{path}: line {err.lineno} column {err.offset + 1}: not well-formed XML ({xml.parsers.expat.ErrorString(err.code)})"
            ]
        ) from None
    if not roots or roots[0].tag != "algo":
        raise MscclXmlError([f"{path}: the root element is <{roots[0].tag if roots else ''}>, not <algo>"])
    return roots[0]


# ---- attributes ------------------------------------------------------------------------------
class _Attrs:
    """Reads one element's attributes, adding a problem line for each missing or bad one."""

    def __init__(self, node: _Node, where: str, path: str, problems: list[str]):
        self.node, self.where, self.path, self.problems = node, where, path, problems
        self.ok = True

    def problem(self, text: str) -> None:
        self.problems.append(f"{self.path}: {self.where}: {text}")
        self.ok = False

    def text(self, name: str, choices: tuple[str, ...] | None = None, default: str | None = None) -> str:
        value = self.node.attrs.get(name)
        if value is None:
            if default is None:
                self.problem(f'no {name}="..." (line {self.node.line})')
            return default or ""
        if choices is not None and value not in choices:
            self.problem(f"{name}={value!r} is not one of {', '.join(choices)}")
        return value

    def integer(self, name: str, lo: int | None = None, hi: int | None = None, default: int | None = None) -> int:
        value = self.node.attrs.get(name)
        if value is None:
            if default is None:
                self.problem(f'no {name}="..." (line {self.node.line})')
                return 0
            return default
        if not _INTEGER.fullmatch(value.strip()):
            self.problem(f"{name}={value!r} is not an integer")
            return 0
        number = int(value)
        if (lo is not None and number < lo) or (hi is not None and number > hi):
            bounds = (
                f"from {lo} to {hi}"
                if lo is not None and hi is not None
                else f">= {lo}"
                if lo is not None
                else f"<= {hi}"
            )
            self.problem(f"{name}={number} must be {bounds}")
        return number


def _children(node: _Node, tag: str) -> list[_Node]:
    """``node``'s children named ``tag`` (the executor ignores elements it has no handler for)."""
    return [c for c in node.children if c.tag == tag]


# ---- parse -----------------------------------------------------------------------------------
def parse_msccl_xml(text: str, path: str = "<msccl xml>", strict: bool = False) -> Algorithm:
    """The algorithm in ``text``, every element's attributes checked (module docstring), or
    `MscclXmlError` listing every problem. ``strict``: also require what only
    msccl-executor-nccl requires (``outofplace``, ``minBytes``, ``maxBytes``). Threadblock
    order, dependencies and send/receive matching are `check_algorithm`'s."""
    lexical = _lexical_problem(text)
    if lexical:
        raise MscclXmlError([f"{path}: {lexical}"])
    root = _tree(text, path)
    problems: list[str] = []
    if len(root.children) > MAX_SUBS:
        problems.append(f"{path}: algo: {len(root.children)} children; msccl-executor's parser holds {MAX_SUBS}")
    a = _Attrs(root, "algo", path, problems)
    name = a.text("name", default="msccl")
    proto = a.text("proto", PROTOCOLS)
    nchannels = a.integer("nchannels", 1, MAX_CHANNELS)
    nchunks = a.integer("nchunksperloop", 1)
    ngpus = a.integer("ngpus", 1, MAX_SUBS)
    coll = a.text("coll", COLLECTIVES)
    inplace = a.integer("inplace", 0, 1)
    optional = None if strict else 1 - inplace
    outofplace = a.integer("outofplace", 0, 1, default=optional)
    min_bytes = a.integer("minBytes", 0, default=None if strict else 0)
    max_bytes = a.integer("maxBytes", 0, default=None if strict else 0)
    if a.ok and not inplace and not outofplace:
        a.problem("inplace=0 and outofplace=0: the executor never selects it")
    if a.ok and max_bytes and max_bytes < min_bytes:
        a.problem(f"maxBytes={max_bytes} is below minBytes={min_bytes}")
    if not a.ok:
        raise MscclXmlError(problems)

    gpus: dict[int, Gpu] = {}
    for index, gnode in enumerate(_children(root, "gpu")):
        ga = _Attrs(gnode, f"gpu #{index} (line {gnode.line})", path, problems)
        gid = ga.integer("id", 0, ngpus - 1)
        if ga.ok:
            ga.where = _where(gid)
        i_chunks, o_chunks, s_chunks = (ga.integer(k, 0) for k in ("i_chunks", "o_chunks", "s_chunks"))
        if ga.ok and gid in gpus:
            ga.problem(f"a second <gpu id={gid}> (line {gnode.line})")
        tnodes = _children(gnode, "tb")
        steps_here = sum(len(_children(t, "step")) for t in tnodes)
        if 1 + ngpus + len(tnodes) + steps_here >= MAX_NODES:
            ga.problem(
                f"{len(tnodes)} threadblocks and {steps_here} steps: msccl-executor's parser holds {MAX_NODES - 1} elements per GPU"
            )
        if len(tnodes) > MAX_SUBS:
            ga.problem(f"{len(tnodes)} threadblocks: msccl-executor's parser holds {MAX_SUBS} children")
        tbs = _parse_tbs(tnodes, gid, ngpus, nchannels, (i_chunks, o_chunks, s_chunks), path, problems)
        if ga.ok:
            gpus[gid] = Gpu(gid, i_chunks, o_chunks, s_chunks, tbs)
    missing = [g for g in range(ngpus) if g not in gpus]
    if missing and not problems:
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        problems.append(f"{path}: algo: ngpus={ngpus} but no <gpu> for id {shown}")
    if problems:
        raise MscclXmlError(problems)
    return Algorithm(
        name, proto, nchannels, nchunks, ngpus, coll, inplace, outofplace, min_bytes, max_bytes,
        tuple(gpus[g] for g in range(ngpus)), path,
    )  # fmt: skip


def _parse_tbs(
    tnodes: list[_Node],
    gid: int,
    ngpus: int,
    nchannels: int,
    sizes: tuple[int, int, int],
    path: str,
    problems: list[str],
) -> tuple[Threadblock, ...]:
    """The threadblocks of GPU ``gid``, ordered by id, each checked; ids contiguous from 0."""
    tbs: dict[int, Threadblock] = {}
    chunks = dict(zip(BUFFERS, sizes))
    for index, tnode in enumerate(tnodes):
        ta = _Attrs(tnode, f"{_where(gid)} tb #{index} (line {tnode.line})", path, problems)
        tid = ta.integer("id", 0, MAX_TBS - 1)
        if ta.ok:
            ta.where = _where(gid, tid)
        send, recv = ta.integer("send", -1, ngpus - 1), ta.integer("recv", -1, ngpus - 1)
        chan = ta.integer("chan", 0, nchannels - 1)
        if gid in (send, recv):
            ta.problem(f"send={send} recv={recv}: a threadblock's peers must be other GPUs than {gid}")
        if ta.ok and tid in tbs:
            ta.problem(f"a second <tb id={tid}> (line {tnode.line})")
        steps = _parse_steps(_children(tnode, "step"), ta, send, recv, chunks)
        if ta.ok:
            tbs[tid] = Threadblock(tid, send, recv, chan, steps)
    gap = next((t for t in range(len(tbs)) if t not in tbs), None)
    if gap is not None:
        problems.append(
            f"{path}: {_where(gid)}: threadblock ids {sorted(tbs)} are not contiguous from 0 (tb {gap} is missing)"
        )
    for direction in ("send", "recv"):
        per_channel = defaultdict(list)
        for tb in tbs.values():
            peer = getattr(tb, direction)
            if peer >= 0:
                per_channel[tb.chan].append(tb.id)
                same = [t.id for t in tbs.values() if getattr(t, direction) == peer and t.chan == tb.chan]
                if same[0] != tb.id:
                    word = "send to" if direction == "send" else "receive from"
                    problems.append(
                        f"{path}: {_where(gid, tb.id)}: tb {same[0]} and tb {tb.id} both {word} gpu {peer} on channel "
                        f"{tb.chan}: one connection, two threadblocks (the executor would interleave them)"
                    )
        for chan, ids in per_channel.items():
            if len(ids) > MAX_TBS_PER_CHANNEL:
                problems.append(
                    f"{path}: {_where(gid)}: {len(ids)} threadblocks {direction} on channel {chan}; the executor allows {MAX_TBS_PER_CHANNEL}"
                )
    return tuple(tbs[t] for t in sorted(tbs))


def _parse_steps(snodes: list[_Node], ta: _Attrs, send: int, recv: int, chunks: dict[str, int]) -> tuple[Step, ...]:
    steps: list[Step] = []
    gid_tb = ta.where
    carried = False  # a nop before this step carried a dependency
    for index, snode in enumerate(snodes):
        sa = _Attrs(snode, f"{gid_tb} step #{index} (line {snode.line})", ta.path, ta.problems)
        s = sa.integer("s", 0)
        if sa.ok:
            sa.where = f"{gid_tb} step {s}"
        if sa.ok and s >= MAX_STEPS:
            sa.problem(f"s={s}: more than {MAX_STEPS} steps in a threadblock (MSCCL_MAX_NUM_STEPS)")
        elif sa.ok and s != index:
            sa.problem(f"s={s} where step {index} comes: steps are numbered 0, 1, 2, ... in order")
        kind = sa.text("type", STEP_TYPES)
        srcbuf, dstbuf = sa.text("srcbuf", BUFFERS), sa.text("dstbuf", BUFFERS)
        srcoff, dstoff = sa.integer("srcoff", -1), sa.integer("dstoff", -1)
        cnt = sa.integer("cnt", 0, MAX_COUNT - 1) if kind != "nop" else sa.integer("cnt")
        depid, deps = sa.integer("depid", -1, MAX_TBS - 1), sa.integer("deps", -1)
        hasdep = sa.integer("hasdep", 0, 1)
        if sa.ok:
            if kind in SENDS and send < 0:
                sa.problem(f"type={kind} sends, but the threadblock has send=-1")
            if kind in RECEIVES and recv < 0:
                sa.problem(f"type={kind} receives, but the threadblock has recv=-1")
            for role, used, buf, off in (("src", LOCAL_SOURCE, srcbuf, srcoff), ("dst", LOCAL_DEST, dstbuf, dstoff)):
                if kind in used and cnt and not (0 <= off and off + cnt <= chunks[buf]):
                    sa.problem(
                        f"{role}buf={buf} {role}off={off} cnt={cnt}: chunks {off}..{off + cnt - 1} are outside "
                        f"the {chunks[buf]} chunks of {buf} ({'i_chunks' if buf == 'i' else 'o_chunks' if buf == 'o' else 's_chunks'})"
                    )
            if depid >= 0 and deps < 0:
                sa.problem(f"depid={depid} with deps={deps}: a dependency names a step >= 0")
            if kind == "nop" and depid < 0:
                sa.problem(
                    "a nop without a dependency (nops carry extra dependencies; the executor's step count skips them)"
                )
            if kind != "nop" and carried and depid < 0:
                sa.problem("follows a nop that carries a dependency but carries none itself (the executor refuses it)")
        carried = kind == "nop" and depid >= 0 or (carried and kind == "nop")
        if sa.ok:
            steps.append(Step(s, kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep))
    return tuple(steps)


# ---- check: dependencies, matching, cycles ------------------------------------------------
@dataclass(frozen=True)
class Matching:
    """Every send step's receive step (``pairs``), each connection's messages in order, and
    an order of all steps that respects threadblock order, dependencies and send before
    receive (`check_algorithm` found no cycle)."""

    pairs: dict[StepKey, StepKey]
    order: tuple[StepKey, ...]


def _tb(algo: Algorithm, gpu: int, tb: int) -> Threadblock | None:
    tbs = algo.gpus[gpu].tbs
    return tbs[tb] if 0 <= tb < len(tbs) else None


def match_steps(algo: Algorithm) -> tuple[Matching, list[str]]:
    """Pair sends with receives and order the steps; the problems found (empty: none)."""
    path = algo.path
    problems: list[str] = []
    # dependencies
    for gpu in algo.gpus:
        for tb in gpu.tbs:
            for st in tb.steps:
                if st.depid < 0:
                    continue
                where = f"{path}: {_where(gpu.id, tb.id, st.s)}"
                target_tb = _tb(algo, gpu.id, st.depid)
                if target_tb is None:
                    problems.append(f"{where}: depends on tb {st.depid}, which gpu {gpu.id} does not have")
                elif not 0 <= st.deps < len(target_tb.steps):
                    problems.append(
                        f"{where}: depends on tb {st.depid} step {st.deps}, which has {len(target_tb.steps)} steps"
                    )
                else:
                    target = target_tb.steps[st.deps]
                    if target.type == "nop" or not target.hasdep:
                        what = "a nop" if target.type == "nop" else "hasdep=0"
                        problems.append(
                            f"{where}: depends on tb {st.depid} step {st.deps}, which is {what} (the executor signals only "
                            'steps with hasdep="1" that move data)'
                        )
    # connections: the k-th send of (src, dst, chan) pairs with the k-th receive
    sends: dict[tuple[int, int, int], list[StepKey]] = defaultdict(list)
    receives: dict[tuple[int, int, int], list[StepKey]] = defaultdict(list)
    for gpu in algo.gpus:
        for tb in gpu.tbs:
            for st in tb.steps:
                if st.sends:
                    sends[(gpu.id, tb.send, tb.chan)].append((gpu.id, tb.id, st.s))
                if st.receives:
                    receives[(tb.recv, gpu.id, tb.chan)].append((gpu.id, tb.id, st.s))
    pairs: dict[StepKey, StepKey] = {}
    for conn in sorted(set(sends) | set(receives)):
        src, dst, chan = conn
        out, into = sends.get(conn, []), receives.get(conn, [])
        for k, (skey, rkey) in enumerate(zip(out, into)):
            scnt, rcnt = _step(algo, skey).cnt, _step(algo, rkey).cnt
            if scnt != rcnt:
                problems.append(
                    f"{path}: {_where(*rkey)}: receives cnt={rcnt} from gpu {src} on channel {chan}, but the matching "
                    f"send ({_where(*skey)}, its message {k + 1}) sends cnt={scnt}"
                )
            pairs[skey] = rkey
        for skey in out[len(into) :]:
            problems.append(
                f"{path}: {_where(*skey)}: sends to gpu {dst} on channel {chan}, but gpu {dst} has no receive for it "
                f"({len(out)} sends, {len(into)} receives on that connection)"
            )
        for rkey in into[len(out) :]:
            problems.append(
                f"{path}: {_where(*rkey)}: receives from gpu {src} on channel {chan}, but gpu {src} sends nothing for it "
                f"({len(out)} sends, {len(into)} receives on that connection)"
            )
    if problems:
        return Matching(pairs, ()), problems
    order, cycle = _order(algo, pairs)
    if cycle:
        shown = " -> ".join(_where(*k) for k in cycle[:6]) + (
            " -> ..." if len(cycle) > 6 else f" -> {_where(*cycle[0])}"
        )
        problems.append(f"{path}: {_where(*cycle[0])}: a cycle of dependencies (a deadlock): {shown}")
    return Matching(pairs, tuple(order)), problems


def _step(algo: Algorithm, key: StepKey) -> Step:
    return algo.gpus[key[0]].tbs[key[1]].steps[key[2]]


def _predecessors(algo: Algorithm, pairs: Mapping[StepKey, StepKey]) -> dict[StepKey, list[StepKey]]:
    """Per step, the steps that must end (or, for a send, start) before it."""
    preds: dict[StepKey, list[StepKey]] = {}
    for gpu in algo.gpus:
        for tb in gpu.tbs:
            for st in tb.steps:
                key = (gpu.id, tb.id, st.s)
                before = [(gpu.id, tb.id, st.s - 1)] if st.s else []
                if st.depid >= 0:
                    before.append((gpu.id, st.depid, st.deps))
                preds[key] = before
    for skey, rkey in pairs.items():
        preds[rkey].append(skey)
    return preds


def _order(algo: Algorithm, pairs: Mapping[StepKey, StepKey]) -> tuple[list[StepKey], list[StepKey]]:
    """Steps by depth (the longest chain of predecessors before them), then by key: an order
    every edge respects, close to the order the steps run in; or a cycle when there is one."""
    preds = _predecessors(algo, pairs)
    succs: dict[StepKey, list[StepKey]] = defaultdict(list)
    indegree = {k: len(v) for k, v in preds.items()}
    for k, before in preds.items():
        for p in before:
            succs[p].append(k)
    depth = dict.fromkeys(preds, 0)
    ready = deque(sorted(k for k, d in indegree.items() if d == 0))
    seen = []
    while ready:
        k = ready.popleft()
        seen.append(k)
        for nxt in succs[k]:
            depth[nxt] = max(depth[nxt], depth[k] + 1)
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    if len(seen) < len(preds):
        return [], _find_cycle(preds, {k for k, d in indegree.items() if d > 0})
    return sorted(seen, key=lambda k: (depth[k], k)), []


def _find_cycle(preds: Mapping[StepKey, list[StepKey]], stuck: set[StepKey]) -> list[StepKey]:
    """A cycle among the ``stuck`` steps (each has a stuck predecessor), in execution order."""
    walk: list[StepKey] = []
    index: dict[StepKey, int] = {}
    k = min(stuck)
    while k not in index:
        index[k] = len(walk)
        walk.append(k)
        k = next(p for p in preds[k] if p in stuck)
    return list(reversed(walk[index[k] :]))


def check_algorithm(algo: Algorithm) -> list[str]:
    """Every problem of dependencies, send/receive matching and cycles (empty: none)."""
    return match_steps(algo)[1]


def checked_algorithm(text: str, path: str = "<msccl xml>", strict: bool = False) -> Algorithm:
    """The algorithm in ``text`` (`parse_msccl_xml`) with `check_algorithm`'s rules too, or
    `MscclXmlError` listing every problem."""
    algo = parse_msccl_xml(text, path, strict=strict)
    problems = check_algorithm(algo)
    if problems:
        raise MscclXmlError(problems)
    return algo


def read_msccl_text(path: str | os.PathLike[str], strict: bool = False) -> tuple[Algorithm, str]:
    """`read_msccl_xml`, and the file's text (what a plan records of a scenario's
    ``[collectives] allreduce``, so the plan alone determines its iteration)."""
    text = read_capped_text(path, MAX_XML_BYTES, "MSCCL XML file")
    return checked_algorithm(text, str(path), strict), text


def read_msccl_xml(path: str | os.PathLike[str], strict: bool = False) -> Algorithm:
    """The checked algorithm in the file ``path`` (read capped at `MAX_XML_BYTES`), or
    `MscclXmlError` (or `contract.files.FileInputError`) naming the file."""
    return read_msccl_text(path, strict)[0]


def msccl_file(algorithm: str) -> str | None:
    """The file an algorithm named ``msccl:FILE`` reads (a scenario's ``[collectives]
    allreduce``, ``topolab collective --algorithm``); None for any other name. An empty
    ``FILE`` is a `UsageError`."""
    if not algorithm.startswith(MSCCL_PREFIX):
        return None
    path = algorithm[len(MSCCL_PREFIX) :]
    if not path or "\x00" in path:
        raise UsageError(f"{algorithm!r}: expected {MSCCL_PREFIX}FILE, the path of an MSCCL XML file")
    return path


# ---- layout: where the collective's data is -----------------------------------------------
Slot = tuple[int, str, int]  # (gpu, buffer, chunk), after in-place aliasing
DATA, SCRATCH, ZERO, JUNK = (
    0,
    1,
    2,
    3,
)  # cell areas: the collective's buffer, scratch, a region sent for zeros, bytes nobody reads
Cell = tuple[int, int, int]  # (server, area, chunk)


@dataclass(frozen=True)
class MscclLayout:
    """Where every GPU's input and output chunks are in the servers' buffer (in chunks of
    ``chunk`` positions; module docstring), and how in-place buffers alias."""

    coll: str
    ngpus: int
    gpus_per_server: int
    nchunks: int  # nchunksperloop: the collective's (largest) buffer in chunks
    in_place: bool
    data_holders: tuple[tuple[int, ...], ...] = ()  # [server][input chunk]: the GPU whose chunk holds data

    @property
    def factor(self) -> int:
        """m: chunks per GPU in the small buffer (allgather's input, reducescatter's output),
        or per (GPU, peer) pair (alltoall)."""
        return self.nchunks // self.ngpus if self.coll != "allreduce" else self.nchunks

    @property
    def input_chunks(self) -> int:
        return self.factor if self.coll == "allgather" else self.nchunks

    @property
    def output_chunks(self) -> int:
        return self.factor if self.coll == "reducescatter" else self.nchunks

    @property
    def data_chunks(self) -> int:
        """The buffer every server holds, in chunks (alltoall: a region per pair)."""
        return self.ngpus * self.nchunks if self.coll == "alltoall" else self.nchunks

    def server(self, gpu: int) -> int:
        return gpu // self.gpus_per_server

    def slot(self, gpu: int, buffer: str, chunk: int) -> Slot:
        """A chunk of a GPU's buffer, the input and output being one buffer when in place
        (as msccl-tools' ``get_buffer_index`` and the executor's in-place call)."""
        if self.in_place:
            m = self.factor
            if self.coll in ("allreduce", "alltoall") and buffer == "o":
                return (gpu, "i", chunk)
            if self.coll == "allgather" and buffer == "i":
                return (gpu, "o", gpu * m + chunk)
            if self.coll == "reducescatter" and buffer == "o":
                return (gpu, "i", gpu * m + chunk)
        return (gpu, buffer, chunk)

    def input_chunk(self, gpu: int, c: int) -> int:
        """The data chunk (of ``gpu``'s server) that holds input chunk ``c`` of ``gpu``."""
        m = self.factor
        if self.coll == "allgather":
            return gpu * m + c
        if self.coll == "alltoall":
            return (gpu * self.ngpus + c // m) * m + c % m
        return c

    def output_chunk(self, gpu: int, k: int) -> int:
        """The data chunk (of ``gpu``'s server) where output chunk ``k`` of ``gpu`` belongs."""
        m = self.factor
        if self.coll == "reducescatter":
            return gpu * m + k
        if self.coll == "alltoall":
            return ((k // m) * self.ngpus + gpu) * m + k % m
        return k

    def atom(self, gpu: int, c: int) -> int:
        """The bit of input chunk ``c`` of ``gpu`` in a symbolic value."""
        return gpu * self.input_chunks + c

    def expected(self, gpu: int, k: int) -> int:
        """The symbolic value output chunk ``k`` of ``gpu`` ends with (a set of input bits)."""
        m, n = self.factor, self.ngpus
        if self.coll == "allreduce":
            return sum(1 << self.atom(h, k) for h in range(n))
        if self.coll == "reducescatter":
            return sum(1 << self.atom(h, gpu * m + k) for h in range(n))
        if self.coll == "allgather":
            return 1 << self.atom(k // m, k % m)
        return 1 << self.atom(k // m, gpu * m + k % m)  # alltoall

    def holds_data(self, gpu: int, c: int) -> bool:
        """Does input chunk ``c`` of ``gpu`` hold data? Sum collectives with G > 1: only on
        one GPU of its server (``data_holders``), zero on the others."""
        if self.gpus_per_server == 1 or self.coll not in SUM_COLLECTIVES:
            return True
        holders = self.data_holders[self.server(gpu)] if self.data_holders else ()
        return (holders[c] if c < len(holders) else self.server(gpu) * self.gpus_per_server) == gpu

    def checks(self, buffer: str, offset: int, chunk: int, servers: int) -> list[Check]:
        """The verification contract of the collective's region (module docstring)."""
        m = self.factor
        if self.coll == "allreduce":
            return [Check("allreduce", buffer, offset, self.data_chunks * chunk, groups=[list(range(servers))])]
        out: dict[tuple[int, int, int], Check] = {}
        if self.coll == "allgather":
            for h in range(self.ngpus):
                for g in range(self.ngpus):
                    src, dst = self.server(h), self.server(g)
                    if src != dst:
                        out[(h, src, dst)] = Check("copy", buffer, offset + h * m * chunk, m * chunk, src=src, dst=dst)
        elif self.coll == "alltoall":
            for h in range(self.ngpus):
                for g in range(self.ngpus):
                    src, dst = self.server(h), self.server(g)
                    if src != dst:
                        region = offset + (h * self.ngpus + g) * m * chunk
                        out[(h * self.ngpus + g, src, dst)] = Check("copy", buffer, region, m * chunk, src=src, dst=dst)
        return list(out.values())


def layout_of(algo: Algorithm, gpus_per_server: int = 1) -> MscclLayout:
    """The layout of ``algo`` run with ``gpus_per_server`` GPUs per server; `MscclXmlError`
    when its buffers' sizes are not those of its collective."""
    layout = MscclLayout(algo.coll, algo.ngpus, gpus_per_server, algo.nchunksperloop, bool(algo.inplace))
    problems = []
    n, c = algo.ngpus, algo.nchunksperloop
    if algo.coll != "allreduce" and c % n:
        problems.append(f"{algo.path}: algo: nchunksperloop={c} for a {algo.coll} of {n} GPUs is not a multiple of {n}")
    else:
        want_i, want_o = layout.input_chunks, layout.output_chunks
        for gpu in algo.gpus:
            # msccl-tools writes i_chunks of an in-place allgather (o_chunks of an in-place
            # reducescatter) as the small buffer's size; the in-place side is never read
            if gpu.i_chunks < want_i or gpu.o_chunks < want_o:
                problems.append(
                    f"{algo.path}: {_where(gpu.id)}: i_chunks={gpu.i_chunks} o_chunks={gpu.o_chunks}, but a {algo.coll} "
                    f"of {n} GPUs in {c} chunks per loop needs i_chunks={want_i} o_chunks={want_o}"
                )
                break
    if problems:
        raise MscclXmlError(problems)
    if gpus_per_server > 1 and algo.coll in SUM_COLLECTIVES:
        layout = dataclasses.replace(layout, data_holders=_data_holders(algo, layout))
    return layout


def _data_holders(algo: Algorithm, layout: MscclLayout) -> tuple[tuple[int, ...], ...]:
    """Per server and input chunk, the GPU whose chunk stands for the server's data (the
    others are zero): the first (in step order) that adds that chunk to a partial sum from
    another server, so the sum meets the data in a receive, not in a local reduction; else
    the server's first GPU."""
    g_per = layout.gpus_per_server
    holders = [[server * g_per] * layout.input_chunks for server in range(layout.ngpus // g_per)]
    chosen: set[tuple[int, int]] = set()
    for gpu in algo.gpus:
        server = layout.server(gpu.id)
        for tb in gpu.tbs:
            if tb.recv < 0 or layout.server(tb.recv) == server:
                continue
            for st in tb.steps:
                if st.type not in ("rrs", "rrc", "rrcs"):
                    continue
                for k in range(st.cnt):
                    _, buf, c = layout.slot(gpu.id, st.srcbuf, st.srcoff + k)
                    if buf == "i" and c < layout.input_chunks and (server, c) not in chosen:
                        chosen.add((server, c))
                        holders[server][c] = gpu.id
    return tuple(tuple(h) for h in holders)


# ---- translation ---------------------------------------------------------------------------
READ, WRITE, FOLD = "read", "write", "fold"  # how an op touches a cell
_Access = tuple[int, str, StepKey, int]  # (position, READ/WRITE/FOLD, step, chunk of the step)


class _Opaque:
    """A value no input set describes (a sum that counts an input twice): real data, wrong."""


Value = int | _Opaque | None  # None: never written (garbage)


def _add(a: Value, b: Value) -> Value:
    if a is None or b is None:
        return None
    if isinstance(a, _Opaque) or isinstance(b, _Opaque) or a & b:
        return _Opaque()
    return a | b


def _describe(value: Value, layout: MscclLayout) -> str:
    if value is None:
        return "nothing (never written)"
    if isinstance(value, _Opaque):
        return "a sum that counts an input chunk twice"
    if value == 0:
        return "zero"
    bits = [b for b in range(value.bit_length()) if value >> b & 1]
    per = layout.input_chunks
    shown = ", ".join(f"gpu {b // per} chunk {b % per}" for b in bits[:3])
    return (
        f"the sum of {len(bits)} input chunks ({shown}{', ...' if len(bits) > 3 else ''})" if len(bits) > 1 else shown
    )


@dataclass
class _Plan:
    """What one step does on the network: per chunk, the cell a send reads, and the cell a
    receive writes with its mode; plus the chunks it moves within its server."""

    send: list[Cell] | None = None
    recv: list[tuple[Cell, str]] | None = None
    local_chunks: int = 0
    local_sender: StepKey | None = None  # a message from a GPU of the same server


class _Placement:
    """The symbolic execution of the XML (module docstring): each step's `_Plan`, and the
    cells of the scratch buffer it needs."""

    def __init__(self, algo: Algorithm, layout: MscclLayout, matching: Matching):
        self.algo, self.layout, self.matching = algo, layout, matching
        self.position = {k: i for i, k in enumerate(matching.order)}
        self.value: dict[Slot, Value] = {}
        self.cell_of: dict[Slot, Cell | None] = {}
        self.occupants: dict[Cell, set[Slot]] = defaultdict(set)
        self.content: dict[Cell, Value] = {}
        self.scratch_used: dict[int, int] = defaultdict(int)  # server -> scratch chunks
        self.junk_used: dict[int, int] = defaultdict(int)
        self.zero_chunks = 0
        self.plans: dict[StepKey, _Plan] = {}
        self.final: dict[Slot, Cell] = {}
        # a slot whose value a plain receive (r) wrote into its cell: (step, chunk, position,
        # cell), while it keeps that value; and every op's access to every cell
        self.received: dict[Slot, tuple[StepKey, int, int, Cell]] = {}
        self.accesses: dict[Cell, list[_Access]] = defaultdict(list)
        self.refusal = ""
        self.mask = 0
        for g in range(layout.ngpus):
            for c in range(layout.input_chunks):
                if layout.holds_data(g, c):
                    self.mask |= 1 << layout.atom(g, c)
        self._accesses()
        self._initial()

    # -- liveness
    def _accesses(self) -> None:
        """Per slot, the positions of its reads and writes (a read and write at one position:
        a read), for `live_after`."""
        events: dict[Slot, list[tuple[int, bool]]] = defaultdict(list)
        layout = self.layout
        for pos, key in enumerate(self.matching.order):
            st, g = _step(self.algo, key), key[0]
            for k in range(st.cnt):
                src, dst = layout.slot(g, st.srcbuf, st.srcoff + k), layout.slot(g, st.dstbuf, st.dstoff + k)
                if st.type in LOCAL_SOURCE:
                    events[src].append((pos, True))
                if st.type in LOCAL_DEST:
                    events[dst].append((pos, st.type == "re"))  # re reads dst, then writes it
        self.events = {slot: ([p for p, _ in ev], [r for _, r in ev]) for slot, ev in events.items()}
        for g in range(layout.ngpus):
            for k in range(layout.output_chunks):
                slot = layout.slot(g, "o", k)
                self.final[slot] = (layout.server(g), DATA, layout.output_chunk(g, k))

    def live_after(self, slot: Slot | tuple[str, int], pos: int) -> bool:
        """Is ``slot`` read after position ``pos`` (before being overwritten), or an output?"""
        if slot[0] == "message":  # a message within a server not yet received
            return True
        ev = self.events.get(slot)  # type: ignore[arg-type]
        if ev is not None:
            i = bisect_right(ev[0], pos)
            if i < len(ev[0]):
                return ev[1][i]
        return slot in self.final

    # -- cells
    def _initial(self) -> None:
        layout = self.layout
        for g in range(layout.ngpus):
            for c in range(layout.input_chunks):
                slot = layout.slot(g, "i", c)
                value = 1 << layout.atom(g, c)
                self.value[slot] = value
                cell = (layout.server(g), DATA, layout.input_chunk(g, c)) if value & self.mask else None
                self.bind(slot, cell)
                if cell is not None:
                    self.content[cell] = value & self.mask

    def phys(self, value: Value) -> Value:
        return value & self.mask if isinstance(value, int) else value

    def bind(self, slot: Slot, cell: Cell | None) -> None:
        self.received.pop(slot, None)
        old = self.cell_of.get(slot)
        if old is not None:
            self.occupants[old].discard(slot)
        self.cell_of[slot] = cell
        if cell is not None:
            self.occupants[cell].add(slot)

    def free(self, cell: Cell, pos: int, keep: Iterable[Any] = ()) -> bool:
        """Can ``cell`` be overwritten at ``pos`` (every slot in it other than ``keep`` is dead)?"""
        keep = set(keep)
        return all(s in keep or not self.live_after(s, pos) for s in self.occupants.get(cell, ()))

    def junk(self, server: int) -> Cell:
        cell = (server, JUNK, self.junk_used[server])
        self.junk_used[server] += 1
        return cell

    def scratch(self, server: int, pos: int) -> Cell:
        """A scratch cell of ``server`` free at ``pos`` (a new one when none is)."""
        for i in range(self.scratch_used[server]):
            if self.free((server, SCRATCH, i), pos):
                return (server, SCRATCH, i)
        self.scratch_used[server] += 1
        return (server, SCRATCH, self.scratch_used[server] - 1)

    def send_cell(self, server: int, k: int, value: Value, cell: Cell | None) -> Cell:
        """The cell the ``k``-th chunk of a send reads: the value's cell, or the k-th chunk of
        the zero region when there are no bytes to send (zero, or never written)."""
        p = self.phys(value)
        return (server, ZERO, k) if cell is None or p is None or p == 0 else cell

    # -- the steps
    def run(self) -> None:
        fifo: dict[tuple[int, int, int], deque[tuple[StepKey, list[Value], list[Cell]]]] = defaultdict(deque)
        algo, layout = self.algo, self.layout
        for pos, key in enumerate(self.matching.order):
            g, t, _ = key
            tb, st = algo.gpus[g].tbs[t], _step(algo, key)
            where = f"{algo.path}: {_where(*key)}"
            plan = self.plans[key] = _Plan()
            server = layout.server(g)
            srcs = [layout.slot(g, st.srcbuf, st.srcoff + k) for k in range(st.cnt)]
            dsts = [layout.slot(g, st.dstbuf, st.dstoff + k) for k in range(st.cnt)]
            incoming: list[Value] = []
            sender_cells: list[Cell] = []
            remote_in = False
            recv: list[tuple[Cell, str]] = []
            if st.receives:
                sender, incoming, sender_cells = fifo[(tb.recv, g, tb.chan)].popleft()
                remote_in = layout.server(tb.recv) != server
                if not remote_in:
                    plan.local_sender, plan.local_chunks = sender, st.cnt
                    for k in range(st.cnt):
                        self.occupants[sender_cells[k]].discard(("message", sender, k))
            out: list[tuple[Value, Cell | None]] = []  # what a send part sends: (value, cell)
            for k in range(st.cnt):
                src, dst = srcs[k], dsts[k]
                if st.type == "s":
                    out.append((self.value.get(src), self.cell_of.get(src)))
                elif st.type in ("r", "rcs"):
                    cell, mode = self.copy_in(dst, incoming[k], pos, remote_in, sender_cells[k], where)
                    if remote_in:
                        recv.append((cell or self.junk(server), mode))
                        if cell is not None:
                            self.accesses[cell].append((pos, WRITE, key, k))
                            if st.type == "r":
                                self.received[dst] = (key, k, pos, cell)
                    out.append((self.value[dst], self.cell_of.get(dst)))
                elif st.type in ("rrc", "rrcs", "rrs"):
                    target = None if st.type == "rrs" else dst
                    cell, mode, held = self.reduce_in(target, src, incoming[k], pos, remote_in, sender_cells[k], where)
                    if remote_in:
                        recv.append((cell or self.junk(server), mode))
                        if cell is not None:
                            self.accesses[cell].append((pos, WRITE, key, k))
                    out.append(held)
                elif st.type == "cpy":
                    plan.local_chunks = st.cnt
                    self.copy(dst, src, pos)
                elif st.type == "re":
                    plan.local_chunks = st.cnt
                    self.local_reduce(dst, src, pos, where)
            if st.receives and remote_in:
                plan.recv = recv
            if st.sends:
                cells = [self.send_cell(server, k, v, c) for k, (v, c) in enumerate(out)]
                if layout.server(tb.send) != server:
                    plan.send = cells
                    for k, c in enumerate(cells):
                        self.accesses[c].append((pos, READ, key, k))
                        if c[1] == ZERO:
                            self.zero_chunks = max(self.zero_chunks, c[2] + 1)
                else:  # the receiver will name these cells: keep them until it has
                    for k, c in enumerate(cells):
                        if c[1] != ZERO:
                            self.occupants[c].add(("message", key, k))  # type: ignore[arg-type]
                fifo[(g, tb.send, tb.chan)].append((key, [v for v, _ in out], cells))
        self.verify()
        self.compact_scratch()

    def compact_scratch(self) -> None:
        """Number the scratch cells the ops use densely, per server (a receive folded into
        another cell leaves the one it was given unused)."""
        used: dict[int, set[int]] = defaultdict(set)
        for plan in self.plans.values():
            for cell in (plan.send or []) + [c for c, _ in plan.recv or []]:
                if cell[1] == SCRATCH:
                    used[cell[0]].add(cell[2])
        renumber = {(server, i): n for server, ids in used.items() for n, i in enumerate(sorted(ids))}

        def moved(cell: Cell) -> Cell:
            return (cell[0], SCRATCH, renumber[(cell[0], cell[2])]) if cell[1] == SCRATCH else cell

        for plan in self.plans.values():
            if plan.send is not None:
                plan.send = [moved(c) for c in plan.send]
            if plan.recv is not None:
                plan.recv = [(moved(c), mode) for c, mode in plan.recv]
        self.scratch_used = defaultdict(int, {server: len(ids) for server, ids in used.items()})

    def copy_in(
        self, dst: Slot, value: Value, pos: int, remote: bool, sender_cell: Cell | None, where: str
    ) -> tuple[Cell | None, str]:
        """``dst`` = a received ``value``: where its bytes go (None: nowhere, or junk when
        they arrive over the network) and how."""
        self.value[dst] = value
        p = self.phys(value)
        if p is None or p == 0:
            self.bind(dst, None)
            return None, "copy"
        if not remote:  # within a server: the value stays where the sender has it
            if sender_cell is None or sender_cell[1] == ZERO or self.content.get(sender_cell) != p:
                self.refuse(f"{where}: receives from a GPU of the same server a chunk since overwritten there")
            self.bind(dst, sender_cell)
            return None, "copy"
        cell = self.place(dst, p, pos)
        return cell, "copy"

    def place(self, dst: Slot, p: Value, pos: int) -> Cell | None:
        """A cell for ``dst`` to receive ``p`` into: where the result belongs, its own cell,
        or scratch; None when a cell already holds ``p`` (the bytes then go to junk)."""
        server = self.layout.server(dst[0])
        candidates = [c for c in (self.final.get(dst), self.cell_of.get(dst)) if c is not None]
        for cell in candidates:
            if self.content.get(cell) == p and cell == candidates[0]:
                self.bind(dst, cell)
                return None
            if self.free(cell, pos, keep=(dst,)):
                self.bind(dst, cell)
                self.content[cell] = p
                return cell
        cell = self.scratch(server, pos)
        self.bind(dst, cell)
        self.content[cell] = p
        return cell

    def reduce_in(
        self, dst: Slot | None, src: Slot, incoming: Value, pos: int, remote: bool, sender_cell: Cell | None, where: str
    ) -> tuple[Cell | None, str, tuple[Value, Cell | None]]:
        """``dst`` (None for rrs) = ``src`` + a received value: the cell the bytes go to, the
        receive's mode, and (value, cell) of the sum for a send."""
        total = _add(self.value.get(src), incoming)
        ps, pin = self.phys(self.value.get(src)), self.phys(incoming)
        server = self.layout.server(src[0])
        if ps is None or pin is None:  # garbage in, garbage out
            if dst is not None:
                self.value[dst] = total
                self.bind(dst, None)
            return None, "copy", (total, None)
        if pin == 0:  # nothing arrives: the sum is the source
            cell = self.cell_of.get(src)
            if dst is not None:
                self.value[dst] = total
                self.bind(dst, cell if ps else None)
            return None, "copy", (total, cell)
        if ps == 0:  # the sum is what arrives
            if dst is not None:
                cell, mode = self.copy_in(dst, total, pos, remote, sender_cell, where)
                return cell, mode, (total, self.cell_of.get(dst))
            if not remote:
                return None, "copy", (total, sender_cell)
            cell = self.scratch(server, pos)
            self.content[cell] = pin
            return cell, "copy", (total, cell)
        if not remote:
            self.refuse(
                f"{where}: adds a chunk received from a GPU of the same server to a partial sum: "
                "topolab's programs have no local reduction"
            )
        cell = self.cell_of.get(src)
        assert cell is not None
        others = [s for s in self.occupants[cell] if s != dst and self.live_after(s, pos)]
        if others:
            shown = ", ".join(_slot_name(s) for s in sorted(others, key=str)[:3])
            self.refuse(
                f"{where}: the sum must not replace {_slot_name(src)}, which is needed later ({shown}: read "
                "again, or part of the result), and topolab's receives add in place: they have no local copy"
            )
        self.content[cell] = self.phys(total)
        if dst is not None:
            self.value[dst] = total
            self.bind(dst, cell)
        return cell, "reduce", (total, cell)

    def copy(self, dst: Slot, src: Slot, pos: int) -> None:
        """``cpy``: ``dst`` names ``src``'s cell; when ``dst`` is an output and ``src``'s value
        came by a plain receive that can write where ``dst`` belongs instead, it does."""
        value = self.value.get(src)
        p = self.phys(value)
        final = self.final.get(dst)
        if final is not None and p and self.cell_of.get(src) != final and self.retarget(src, final, pos, keep=(dst,)):
            self.content[final] = p
        self.value[dst] = value
        self.bind(dst, self.cell_of.get(src) if p else None)

    def retarget(self, slot: Slot, target: Cell, pos: int, keep: Iterable[Any] = ()) -> bool:
        """Make the plain receive that wrote ``slot``'s value write it into ``target``, and
        the sends that read it since read it there (``slot`` then names ``target``), if
        nothing else touched either cell since and no other live slot is in them."""
        rec = self.received.get(slot)
        if rec is None:
            return False
        key, k, at, cell = rec
        since = [a for a in self.accesses[cell] if a[0] > at]
        if target[0] != cell[0] or any(a[0] > at for a in self.accesses[target]) or any(a[1] != READ for a in since):
            return False
        if not self.free(target, pos, keep=set(keep) | {slot}) or not self.free(cell, pos, keep=(slot,)):
            return False
        for at_, kind, step, chunk in [(at, WRITE, key, k), *since]:
            plan = self.plans[step]
            if kind == WRITE:
                assert plan.recv is not None
                plan.recv[chunk] = (target, plan.recv[chunk][1])
            else:
                assert plan.send is not None
                plan.send[chunk] = target
            self.accesses[target].append((at_, kind, step, chunk))
        self.accesses[cell] = [a for a in self.accesses[cell] if a[0] < at]
        self.bind(slot, target)
        self.received[slot] = (key, k, at, target)
        return True

    def fold(self, into: Slot, received: Slot, pos: int) -> bool:
        """Make the plain receive that wrote ``received``'s value reduce it into ``into``'s
        cell instead, if nothing touched either cell since (the sum is then there when the
        ``re`` runs, and ``received``'s own cell is never written); receives folded into one
        cell commute."""
        rec = self.received.get(received)
        target = self.cell_of.get(into)
        if rec is None or target is None:
            return False
        key, k, at, cell = rec
        touched = [a for a in self.accesses[target] if a[1] != FOLD] + self.accesses[cell]
        if target == cell or target[0] != cell[0] or any(a[0] > at for a in touched):
            return False
        others = [s for s in self.occupants[target] if s != into and self.live_after(s, pos)]
        others += [s for s in self.occupants[cell] if s != received and self.live_after(s, pos)]
        if others:
            return False
        recv = self.plans[key].recv
        assert recv is not None
        recv[k] = (target, "reduce")
        self.accesses[target].append((at, FOLD, key, k))
        self.accesses[cell] = [a for a in self.accesses[cell] if a[0] < at]
        return True

    def local_reduce(self, dst: Slot, src: Slot, pos: int, where: str) -> None:
        """``re``: dst = dst + src. With a zero on one side an alias; two partial sums only
        when one of them came by a plain receive that can reduce into the other (`fold`)."""
        vd, vs = self.value.get(dst), self.value.get(src)
        total = _add(vd, vs)
        pd, ps = self.phys(vd), self.phys(vs)
        self.value[dst] = total
        if pd is None or ps is None:
            self.bind(dst, None)
        elif ps == 0:
            self.received.pop(dst, None)  # dst keeps its cell and physical value
        elif pd == 0:
            self.bind(dst, self.cell_of.get(src))
        elif not self.live_after(src, pos) and self.fold(dst, src, pos):
            self.content[self.cell_of[dst]] = self.phys(total)  # type: ignore[index]
            self.received.pop(dst, None)
        elif not self.live_after(src, pos) and self.fold(src, dst, pos):
            cell = self.cell_of[src]
            self.content[cell] = self.phys(total)  # type: ignore[index]
            self.bind(dst, cell)
        else:
            self.refuse(
                f"{where}: a local reduction (re) of two partial sums neither of which a receive can add "
                "in place: topolab's programs have no local reduction"
            )
            self.bind(dst, None)

    def refuse(self, problem: str) -> None:
        """Note the first step topolab cannot place; raised by `verify` once the XML is known
        to compute its collective (a wrong XML is named as wrong first)."""
        self.refusal = self.refusal or problem

    def verify(self) -> None:
        """Refuse an XML that does not compute its collective, or whose result is not where
        the collective's result belongs."""
        layout, path = self.layout, self.algo.path
        outputs = [(g, k, layout.slot(g, "o", k)) for g in range(layout.ngpus) for k in range(layout.output_chunks)]
        for g, k, slot in outputs:
            got, want = self.value.get(slot), layout.expected(g, k)
            if got != want:
                raise MscclXmlError(
                    [
                        f"{path}: {_where(g)}: output chunk {k} ends holding {_describe(got, layout)}, where the "
                        f"{layout.coll} needs {_describe(want, layout)}"
                    ]
                )
        if self.refusal:
            raise MscclXmlError([self.refusal])
        for g, k, slot in outputs:
            cell = self.cell_of.get(slot)
            if cell != self.final[slot] or self.content.get(cell) != self.phys(layout.expected(g, k)):
                raise MscclXmlError(
                    [
                        f"{path}: {_where(g)}: output chunk {k} is left in {_cell_name(cell)}, not in its place "
                        f"(chunk {self.final[slot][2]}): it needs a local copy, which topolab's programs do not have"
                    ]
                )


def _slot_name(slot: Any) -> str:
    if slot[0] == "message":
        return f"a message of {_where(*slot[1])}"
    return f"gpu {slot[0]} {slot[1]}[{slot[2]}]"


def _cell_name(cell: Cell | None) -> str:
    if cell is None:
        return "no chunk"
    return f"{'scratch' if cell[1] == SCRATCH else 'the buffer'} chunk {cell[2]} of server {cell[0]}"


@dataclass(frozen=True)
class MscclAdded:
    """What `add_msccl_collective` appended: per server the ops that end its part, the chunk
    size, and the bytes it uses of the collective's buffer (from its offset) and of the
    scratch buffer."""

    done: dict[int, list[int]]
    chunk_bytes: int
    region_bytes: int
    scratch_bytes: int
    layout: MscclLayout


def chunk_bytes(algo: Algorithm, nbytes: int) -> int:
    """The bytes of one chunk when the collective moves ``nbytes`` (its largest buffer,
    nccl-tests' size): ``nbytes / nchunksperloop`` rounded up to whole float32 items."""
    if nbytes <= 0:
        raise UsageError(f"{algo.path}: the collective's size must be > 0 bytes, not {nbytes}")
    per = -(-nbytes // algo.nchunksperloop)
    return -(-per // ITEMSIZE) * ITEMSIZE


def add_msccl_collective(
    b: ScheduleBuilder,
    algo: Algorithm,
    buffer: str,
    offset: int,
    nbytes: int,
    gpus_per_server: int = 1,
    stream_prefix: str = STREAM_PREFIX,
    after: Mapping[int, Iterable[int]] | None = None,
    scratch_buffer: str = "scratch",
    check: bool = True,
    local_bytes_per_s: float | None = None,
) -> MscclAdded:
    """Append ``algo`` moving ``nbytes`` (rounded up to whole chunks) of ``buffer`` from
    ``offset`` to ``b``: one stream per threadblock (``{stream_prefix}tb{t}``, or
    ``{stream_prefix}gpu{l}.tb{t}`` for the l-th GPU of a server), the first op of each
    waiting for ``after[server]``. Grows ``buffer`` and ``scratch_buffer`` (its own region
    from the buffer's end) as needed; adds the collective's checks when ``check``.
    ``local_bytes_per_s``: time the data a step moves within a server (a ``cpy``, an ``re``,
    a message between GPUs of a server) as a compute op of bytes / rate on its stream
    (None: free). `MscclXmlError` when the XML is not one topolab can run (module docstring).
    """
    if gpus_per_server < 1:
        raise UsageError(f"gpus per server must be >= 1, not {gpus_per_server}")
    if algo.ngpus % gpus_per_server:
        raise MscclXmlError(
            [f"{algo.path}: algo: ngpus={algo.ngpus} is not a multiple of {gpus_per_server} GPUs per server"]
        )
    servers = algo.ngpus // gpus_per_server
    if servers > b.ranks:
        raise MscclXmlError(
            [
                f"{algo.path}: algo: ngpus={algo.ngpus} needs {servers} servers of {gpus_per_server} GPUs, but there are {b.ranks}"
            ]
        )
    matching, problems = match_steps(algo)
    if problems:
        raise MscclXmlError(problems)
    layout = layout_of(algo, gpus_per_server)
    chunk = chunk_bytes(algo, nbytes)
    placement = _Placement(algo, layout, matching)
    placement.run()

    region = layout.data_chunks * chunk
    b.buffer(buffer, offset + region)
    scratch_chunks = max(placement.scratch_used.values(), default=0)
    junk_chunks = max(placement.junk_used.values(), default=0)
    scratch_bytes = (scratch_chunks + placement.zero_chunks + junk_chunks) * chunk
    scratch_base = b.buffers[scratch_buffer].bytes if scratch_buffer in b.buffers else 0
    if scratch_bytes:
        b.buffer(scratch_buffer, scratch_base + scratch_bytes)
    bases = {
        DATA: (buffer, offset),
        SCRATCH: (scratch_buffer, scratch_base),
        ZERO: (scratch_buffer, scratch_base + scratch_chunks * chunk),
        JUNK: (scratch_buffer, scratch_base + (scratch_chunks + placement.zero_chunks) * chunk),
    }
    emitter = _Emitter(
        b, algo, layout, matching, placement, chunk, bases, stream_prefix, after or {}, local_bytes_per_s
    )
    done = emitter.run()
    if check:
        for c in layout.checks(buffer, offset, chunk, servers):
            b.check(c)
    return MscclAdded(done, chunk, region, scratch_bytes, layout)


class _Emitter:
    """Writes the ops of every step in the placement's order: receives, then sends (split
    where either side's cells are not consecutive), dependencies and hazards as ``after``."""

    def __init__(
        self,
        b: ScheduleBuilder,
        algo: Algorithm,
        layout: MscclLayout,
        matching: Matching,
        placement: _Placement,
        chunk: int,
        bases: Mapping[int, tuple[str, int]],
        prefix: str,
        after: Mapping[int, Iterable[int]],
        local_bytes_per_s: float | None,
    ):
        self.b, self.algo, self.layout, self.matching, self.placement = b, algo, layout, matching, placement
        self.chunk, self.bases, self.prefix, self.after = chunk, bases, prefix, after
        self.local_rate = local_bytes_per_s
        self.receiver = {r: s for s, r in matching.pairs.items()}
        self.tags: dict[tuple[int, int, int], int] = {}
        self.marker: dict[StepKey, tuple[int, ...]] = {}
        self.stream_of_op: dict[tuple[int, int], str] = {}
        self.last_in_stream: dict[tuple[int, str], int] = {}
        self.pending: dict[tuple[int, str], set[int]] = defaultdict(set)
        self.writer: dict[Cell, tuple[int, str]] = {}
        self.readers: dict[Cell, list[tuple[int, str]]] = defaultdict(list)

    def stream(self, gpu: int, tb: int) -> str:
        if self.layout.gpus_per_server == 1:
            return f"{self.prefix}tb{tb}"
        return f"{self.prefix}gpu{gpu % self.layout.gpus_per_server}.tb{tb}"

    def region(self, cell: Cell, count: int) -> tuple[str, int, int]:
        name, base = self.bases[cell[1]]
        return name, base + cell[2] * self.chunk, count * self.chunk

    def pieces(self, send: list[Cell], recv: list[tuple[Cell, str]]) -> list[tuple[int, int]]:
        """(first chunk, chunks) runs of a message: a new run wherever the sender's or the
        receiver's cell does not follow the one before, or the receive's mode changes."""
        runs: list[tuple[int, int]] = []
        for k in range(len(send)):
            joins = (
                k
                and _follows(send[k - 1], send[k])
                and _follows(recv[k - 1][0], recv[k][0])
                and recv[k - 1][1] == recv[k][1]
            )
            if joins:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((k, 1))
        return runs

    def emit(self, server: int, stream: str, wait: set[int], kind: str, **op: Any) -> int:
        key = (server, stream)
        wait = set(wait) | self.pending.pop(key, set())
        if key not in self.last_in_stream:
            wait |= set(self.after.get(server, ()))
        last = self.last_in_stream.get(key, -1)
        deps = sorted(a for a in wait if a > last or self.stream_of_op.get((server, a)) != stream)
        if kind == "send":
            op_id = self.b.send(server, stream, after=deps, **op)
        elif kind == "recv":
            op_id = self.b.recv(server, stream, after=deps, **op)
        else:
            op_id = self.b.compute(server, stream, after=deps, **op)
        self.stream_of_op[(server, op_id)] = stream
        self.last_in_stream[key] = op_id
        return op_id

    def hazards(self, server: int, stream: str, cells: Iterable[Cell], write: bool) -> set[int]:
        wait = set()
        for cell in cells:
            if cell[1] in (ZERO, JUNK):
                continue
            if cell in self.writer and self.writer[cell][1] != stream:
                wait.add(self.writer[cell][0])
            if write:
                wait |= {op for op, s in self.readers[cell] if s != stream}
        return wait

    def touched(self, op: int, stream: str, cells: Iterable[Cell], write: bool) -> None:
        for cell in cells:
            if cell[1] in (ZERO, JUNK):
                continue
            if write:
                self.writer[cell] = (op, stream)
                self.readers[cell] = []
            else:
                self.readers[cell].append((op, stream))

    def tag(self, src: int, dst: int, chan: int) -> int:
        key = (src, dst, chan)
        if key not in self.tags:
            self.tags[key] = self.b.new_tag()
        return self.tags[key]

    def run(self) -> dict[int, list[int]]:
        algo, layout, placement = self.algo, self.layout, self.placement
        for key in self.matching.order:
            g, t, s = key
            tb, st, plan = algo.gpus[g].tbs[t], _step(algo, key), placement.plans[key]
            server, stream = layout.server(g), self.stream(g, t)
            waits = set()
            if s:
                waits |= set(self.marker[(g, t, s - 1)])
            if st.depid >= 0:
                waits |= set(self.marker[(g, st.depid, st.deps)])
            if plan.local_sender is not None:
                waits |= set(self.marker[plan.local_sender])
            ops: list[int] = []
            if plan.recv is not None:
                sender = self.receiver[key]
                send_cells = placement.plans[sender].send
                assert send_cells is not None
                peer, tag = layout.server(tb.recv), self.tag(tb.recv, g, tb.chan)
                for first, count in self.pieces(send_cells, plan.recv):
                    cells = [c for c, _ in plan.recv[first : first + count]]
                    need = (waits if not ops else set()) | self.hazards(server, stream, cells, write=True)
                    buf, off, length = self.region(cells[0], count)
                    op = self.emit(
                        server,
                        stream,
                        need,
                        "recv",
                        peer=peer,
                        buffer=buf,
                        offset=off,
                        length=length,
                        tag=tag,
                        mode=plan.recv[first][1],
                    )
                    self.touched(op, stream, cells, write=True)
                    ops.append(op)
            if plan.local_chunks and self.local_rate:
                need = waits if not ops else set()
                ops.append(
                    self.emit(server, stream, need, "compute", seconds=plan.local_chunks * self.chunk / self.local_rate)
                )
            if plan.send is not None:
                receiver = self.matching.pairs[key]
                recv_cells = placement.plans[receiver].recv
                assert recv_cells is not None
                peer, tag = layout.server(tb.send), self.tag(g, tb.send, tb.chan)
                for first, count in self.pieces(plan.send, recv_cells):
                    cells = plan.send[first : first + count]
                    need = (waits if not ops else set()) | self.hazards(server, stream, cells, write=False)
                    buf, off, length = self.region(cells[0], count)
                    op = self.emit(
                        server, stream, need, "send", peer=peer, buffer=buf, offset=off, length=length, tag=tag
                    )
                    self.touched(op, stream, cells, write=False)
                    ops.append(op)
            if ops:
                self.marker[key] = (ops[-1],)
            else:
                self.marker[key] = tuple(sorted(waits))
                self.pending[(server, stream)] |= waits
        done: dict[int, list[int]] = {}
        servers = self.layout.ngpus // self.layout.gpus_per_server
        for server in range(servers):
            lasts = {op for (r, _), op in self.last_in_stream.items() if r == server}
            lasts |= {op for (r, _), ops in self.pending.items() if r == server for op in ops}
            done[server] = sorted(lasts) or list(self.after.get(server, ()))
        return done


def _follows(a: Cell, b: Cell) -> bool:
    return a[0] == b[0] and a[1] == b[1] and b[2] == a[2] + 1


def translate(
    algo: Algorithm,
    servers: int,
    nbytes: int,
    gpus_per_server: int = 1,
    ranks: int | None = None,
    local_bytes_per_s: float | None = None,
) -> Schedule:
    """The schedule of ``algo`` moving ``nbytes`` (nccl-tests' size of the collective: the
    AllReduce's buffer, the AllGather's output, the ReduceScatter's input, the AllToAll's
    buffer; rounded up to whole chunks) on ``servers`` servers of ``gpus_per_server`` GPUs
    (ngpus must be their product), as ``ranks`` ranks (default ``servers``; servers past
    the algorithm's stay idle). Buffer ``grad`` (AllReduce) or ``data``, and ``scratch``.
    `MscclXmlError` names the first thing topolab cannot run."""
    if algo.ngpus != servers * gpus_per_server:
        raise MscclXmlError(
            [
                f"{algo.path}: algo: ngpus={algo.ngpus}, but {servers} servers x {gpus_per_server} GPU"
                f"{'s' if gpus_per_server > 1 else ''} per server = {servers * gpus_per_server}"
            ]
        )
    total = servers if ranks is None else ranks
    if total < servers:
        raise UsageError(f"{algo.path}: {servers} servers do not fit in {total} ranks")
    b = ScheduleBuilder(total, f"msccl:{algo.name}")
    buffer = "grad" if algo.coll == "allreduce" else "data"
    added = add_msccl_collective(b, algo, buffer, 0, nbytes, gpus_per_server, local_bytes_per_s=local_bytes_per_s)
    b.params.update(
        nbytes=nbytes,
        padded_bytes=added.chunk_bytes * algo.nchunksperloop,
        chunk_bytes=added.chunk_bytes,
        collective=algo.coll,
        msccl=dict(
            name=algo.name,
            file=algo.path,
            proto=algo.proto,
            timed_as="Simple",
            nchannels=algo.nchannels,
            nchunksperloop=algo.nchunksperloop,
            ngpus=algo.ngpus,
            gpus_per_server=gpus_per_server,
            in_place=bool(algo.inplace),
        ),
    )
    if algo.coll == "reducescatter":
        b.params["unchecked"] = "a reduce-scatter's result is on one member per region: no check states it"
    return b.build()
