"""The compiled data-plane loop (workers/engine.c): moving one iteration's bytes and starting
its ops, at a few microseconds of CPU per op.

The loop that runs a rank's program (start every stream head whose dependencies are done,
send pieces, receive and reduce chunks, wake the streams waiting on what completed) is the
part of a worker that runs once per op. In Python it cost 70-250 us of CPU per op, and at 64
ranks on two cores that CPU, not the emulated cables, set the iteration time. It runs in C
here, on the same pyzmq sockets and the same wire format; `workers.scheduler` drives it a
slice at a time and keeps what is rare in Python (faults, control, heartbeats, monitors).

Wire and buffer rules (engine.c's header has the details): a send of ``L`` bytes goes as
`send_pieces` nearly equal chunks (`chunk_end`), each a 16-byte header (iteration, src, tag,
bytes; little-endian u32) and the chunk; chunks of at least `ZERO_COPY_MIN` go zero-copy and
tracked, and no receive or input fill writes into a region libzmq still holds
(`Engine.wait_sends`); a chunk is reduced (elementwise sum in the buffer's dtype, integers
modulo 2^bits as numpy) or copied into place from libzmq's message.

Build. The library is compiled from engine.c by the system C compiler (``cc``, Debian's gcc:
``scripts/setup.sh`` installs it and builds the library) into ``workers/_build/``, named by
the source's hash, so a changed source is rebuilt and never mixed up with an old build;
`library` builds it on first use where set-up did not. It calls libzmq through the copy pyzmq
loaded (``eng_load``), so it needs no libzmq headers and uses pyzmq's sockets as they are.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from contract.errors import TopolabError
from contract.schedule import COMPUTE, RECV, SEND  # op kinds, as engine.c numbers them too

SOURCE = Path(__file__).with_name("engine.c")
BUILD_DIR = Path(__file__).with_name("_build")
CFLAGS = ("-O3", "-std=gnu11", "-shared", "-fPIC", "-Wall")
BUILD_TIMEOUT_S = 120.0

DONE, YIELD, EXTRA = 0, 1, 2  # run_step's outcomes (engine.c; `constant` tells them too)
ERR_HEADER, ERR_ITERATION, ERR_TOO_MANY, ERR_SIZE, ERR_UNKNOWN, ERR_ZMQ, ERR_MEMORY = range(-1, -8, -1)
DTYPE_CODES = {"f4": 0, "f8": 1, "f2": 2, "i1": 3, "u1": 3, "i2": 4, "u2": 4, "i4": 5, "u4": 5, "i8": 6, "u8": 6}
"""The buffer dtypes a received chunk can be reduced in (numpy ``kind + itemsize``), and
engine.c's code for each: signed and unsigned integers add alike (modulo 2^bits)."""


class EngineError(TopolabError):
    """The compiled data-plane loop cannot be built or loaded (names what is missing)."""


def library_path(source: Path = SOURCE) -> Path:
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    return BUILD_DIR / f"engine-{digest}.so"


def build(source: Path = SOURCE) -> Path:
    """Compile engine.c (if its build is missing) and return the library's path. Safe to run
    from several processes at once: each compiles to its own file and renames it in place."""
    target = library_path(source)
    if target.exists():
        return target
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        raise EngineError(
            "no C compiler (cc) to build the workers' data-plane loop: run `bash scripts/setup.sh` (it installs gcc)"
        )
    BUILD_DIR.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=BUILD_DIR, prefix=".engine-", suffix=".so")
    os.close(fd)
    try:
        proc = subprocess.run(
            [compiler, *CFLAGS, "-o", tmp, str(source), "-ldl"],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise EngineError(f"building {source.name} failed: {proc.stderr.strip()[-2000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for old in BUILD_DIR.glob("engine-*.so"):  # builds of earlier sources
        if old != target:
            old.unlink(missing_ok=True)
    return target


def _loaded_libzmq() -> str:
    """The path of the libzmq this process loaded for pyzmq (its wheel's copy, or the system's)."""
    zmq.zmq_version()  # the backend, and its libzmq, are loaded
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rstrip("\n").split(maxsplit=5)[-1]
            if "libzmq" in os.path.basename(path) and ".so" in path:
                return path
    raise EngineError("pyzmq's libzmq is not among this process's libraries (/proc/self/maps)")


@cache
def library() -> ctypes.CDLL:
    """The loaded engine, bound to pyzmq's libzmq (built first if needed)."""
    lib = ctypes.CDLL(str(build()))
    rc = lib.eng_load(_loaded_libzmq().encode())
    if rc != 0:
        raise EngineError(f"the data-plane loop could not bind to pyzmq's libzmq (code {rc})")
    i64, f64, vp = ctypes.c_int64, ctypes.c_double, ctypes.c_void_p
    lib.eng_constant.restype = ctypes.c_long
    lib.eng_constant.argtypes = [ctypes.c_char_p]
    lib.send_pieces.restype = i64
    lib.send_pieces.argtypes = [i64, i64]
    lib.chunk_end.restype = i64
    lib.chunk_end.argtypes = [i64, i64, i64]
    lib.eng_add.restype = None
    lib.eng_add.argtypes = [ctypes.c_int, vp, vp, ctypes.c_size_t]
    lib.eng_new.restype = vp
    lib.eng_new.argtypes = []
    lib.eng_free.restype = None
    lib.eng_free.argtypes = [vp]
    lib.eng_set_keep_early.restype = None
    lib.eng_set_keep_early.argtypes = [vp, ctypes.c_int]
    lib.eng_in_flight.restype = i64
    lib.eng_in_flight.argtypes = [vp, ctypes.POINTER(ctypes.c_int32)]
    lib.eng_wait_sends.restype = i64
    lib.eng_wait_sends.argtypes = [vp, f64, ctypes.POINTER(ctypes.c_int32)]
    lib.run_new.restype = vp
    lib.run_new.argtypes = [vp, vp, vp]
    lib.run_free.restype = None
    lib.run_free.argtypes = [vp]
    lib.run_step.restype = ctypes.c_int
    lib.run_step.argtypes = [vp, f64]
    lib.run_waiting.restype = None
    lib.run_waiting.argtypes = [vp, vp]
    return lib


def constant(name: str) -> int:
    value = int(library().eng_constant(name.encode()))
    if value < 0:
        raise KeyError(name)
    return value


def send_pieces(length: int, chunk_bytes: int) -> int:
    """How many wire chunks a send of ``length`` bytes goes out as: ``length // chunk_bytes``
    (at least 1) nearly equal chunks (`chunk_end`), i.e. each at least ``chunk_bytes`` (or
    the whole op) and under twice that. Cutting ``chunk_bytes`` pieces off instead leaves a
    short tail: a 1.33 MiB ring piece went as 1 MiB + 0.33 MiB, two messages, the tail
    copied; as one message the 12-server multi-ring used less CPU per GB (docs/dataplane.md)."""
    return int(library().send_pieces(length, chunk_bytes))


def chunk_end(length: int, pieces: int, k: int) -> int:
    """End (relative to the op) of chunk ``k`` (1-based) of ``pieces``: on a ``CHUNK_ALIGN``
    boundary, except the last."""
    return int(library().chunk_end(length, pieces, k))


def dtype_code(dtype: np.dtype) -> int:
    code = DTYPE_CODES.get(f"{dtype.kind}{dtype.itemsize}")
    if code is None:
        raise ValueError(f"buffers of {dtype} cannot be reduced (supported: float16/32/64, integers)")
    return code


def add_into(target: np.ndarray, data: np.ndarray) -> None:
    """``target += data`` as the engine reduces a received chunk (for the tests)."""
    if target.dtype != data.dtype or target.nbytes != data.nbytes or not target.flags.c_contiguous:
        raise ValueError("add_into: target and data must be contiguous arrays of one dtype and size")
    library().eng_add(
        dtype_code(target.dtype), target.ctypes.data, np.ascontiguousarray(data).ctypes.data, target.nbytes
    )


# ---- the structures engine.c reads and writes (its prog_t, stats_t, io_t) -------------------
_P = ctypes.c_void_p


class ProgStruct(ctypes.Structure):
    _fields_ = [
        ("nops", ctypes.c_int64),
        ("nstreams", ctypes.c_int64),
        ("nkeys", ctypes.c_int64),
        *[(name, _P) for name in ("kind", "reduce", "stream", "peer", "buf", "sock", "key", "offset", "length")],
        *[(name, _P) for name in ("tag", "seconds", "after_ptr", "after_idx", "stream_ptr", "wakes_ptr", "wakes_idx")],
        *[(name, _P) for name in ("key_src", "key_tag", "key_ptr")],
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        *[(name, ctypes.c_int64) for name in ("ndone", "bytes_sent", "bytes_received", "computes", "stashed")],
        ("last_progress", ctypes.c_double),
        *[(name, ctypes.c_int64) for name in ("err", "err_src", "err_a", "err_b", "err_c")],
    ]


class IOStruct(ctypes.Structure):
    _fields_ = [
        ("pull", _P),
        ("socks", _P),
        ("extra_fd", _P),
        ("nsocks", ctypes.c_int64),
        ("nextra", ctypes.c_int64),
        ("npeers", ctypes.c_int64),
        ("bufs", _P),
        ("dtype", _P),
        ("started", _P),
        ("ended", _P),
        ("last_heard", _P),
        ("remaining_with", _P),
        ("sends_to", _P),
        ("blocked", _P),
        ("stats", ctypes.POINTER(Stats)),
        ("chunk_bytes", ctypes.c_int64),
        ("iteration", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
    ]


def _addr(a: np.ndarray) -> int:
    return a.ctypes.data


class Engine:
    """What outlives an iteration: the zero-copy sends libzmq still holds (their regions
    are not written until released) and the messages kept for later iterations."""

    def __init__(self) -> None:
        self.lib = library()
        self.handle = self.lib.eng_new()
        if not self.handle:
            raise MemoryError("engine")
        self._keep_early = False

    @property
    def keep_early(self) -> bool:
        return self._keep_early

    @keep_early.setter
    def keep_early(self, keep: bool) -> None:
        self._keep_early = bool(keep)
        self.lib.eng_set_keep_early(self.handle, int(keep))

    def in_flight(self) -> tuple[int, int]:
        """(zero-copy sends libzmq still holds, the oldest one's peer or -1)."""
        peer = ctypes.c_int32(-1)
        n = self.lib.eng_in_flight(self.handle, ctypes.byref(peer))
        return int(n), int(peer.value)

    def wait_sends(self, timeout_s: float) -> tuple[int, int]:
        """Wait (at most ``timeout_s``) until libzmq released every zero-copy send; returns
        what is still held, as `in_flight`."""
        peer = ctypes.c_int32(-1)
        n = self.lib.eng_wait_sends(self.handle, timeout_s, ctypes.byref(peer))
        return int(n), int(peer.value)

    def close(self) -> None:
        if self.handle:
            self.lib.eng_free(self.handle)
            self.handle = None


class PackedProgram:
    """A `workers.program.Program` as the arrays engine.c runs, for one mapping of buffer
    names and (peer, plane) sockets to indices."""

    def __init__(self, program: Any, buffer_index: dict[str, int], push_index: dict[tuple[int, int], int]) -> None:
        ops = program.ops
        n = len(ops)
        self.nops = n
        kind = np.array([op.kind for op in ops], dtype=np.int8)
        keys: dict[tuple[int, int], int] = {}
        key = np.full(n, -1, dtype=np.int32)
        for op in ops:
            if op.kind == RECV:
                key[op.index] = keys.setdefault((op.peer, op.tag), len(keys))
        counts = np.bincount(key[key >= 0], minlength=len(keys)) if keys else np.zeros(0, dtype=np.int64)
        unknown = [op.buffer for op in ops if op.kind != COMPUTE and op.buffer not in buffer_index]
        if unknown:
            raise ValueError(f"an op uses buffer {unknown[0]!r}, which this rank does not have")
        sock = np.full(n, -1, dtype=np.int32)
        for op in ops:
            if op.kind == SEND:
                sock[op.index] = push_index[(op.peer, op.plane)]
        self.arrays = {
            "kind": kind,
            "reduce": np.array([op.reduce for op in ops], dtype=np.int8),
            "stream": np.array([op.stream for op in ops], dtype=np.int32),
            "peer": np.array([op.peer for op in ops], dtype=np.int32),
            "buf": np.array([buffer_index.get(op.buffer, -1) for op in ops], dtype=np.int32),
            "sock": sock,
            "key": key,
            "offset": np.array([op.offset for op in ops], dtype=np.int64),
            "length": np.array([op.length for op in ops], dtype=np.int64),
            "tag": np.array([op.tag for op in ops], dtype=np.uint32),
            "seconds": np.array([op.seconds for op in ops], dtype=np.float64),
            "after_ptr": np.cumsum([0] + [len(op.after) for op in ops], dtype=np.int64),
            "after_idx": np.array([a for op in ops for a in op.after], dtype=np.int64),
            "stream_ptr": np.cumsum([0] + [len(s) for s in program.streams], dtype=np.int64),
            "wakes_ptr": np.cumsum([0] + [len(w) for w in program.wakes], dtype=np.int64),
            "wakes_idx": np.array([s for w in program.wakes for s in w], dtype=np.int64),
            "key_src": np.array([src for src, _ in keys], dtype=np.int32),
            "key_tag": np.array([tag for _, tag in keys], dtype=np.uint32),
            "key_ptr": np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        }
        for name, arr in self.arrays.items():  # an empty array still needs an address
            if arr.size == 0:
                self.arrays[name] = np.zeros(1, dtype=arr.dtype)
        self.struct = ProgStruct(
            n, len(program.streams), len(keys), *(_addr(self.arrays[f]) for f, _ in ProgStruct._fields_[3:])
        )
        self.buffer_end = np.zeros(max(buffer_index.values(), default=-1) + 1, dtype=np.int64)
        """Per buffer index: the end of the furthest region an op of the program touches."""
        for op in ops:
            if op.kind != COMPUTE:
                b = buffer_index[op.buffer]
                self.buffer_end[b] = max(self.buffer_end[b], op.offset + op.length)


class NativeRun:
    """One iteration of a packed program on given buffers (bytes, by buffer index, with the
    dtype each is reduced in) and sockets (engine.c's run_t)."""

    def __init__(
        self,
        engine: Engine,
        packed: PackedProgram,
        *,
        pull: zmq.Socket,
        push: Sequence[zmq.Socket],
        extra: Sequence[zmq.Socket],
        buffers: Sequence[np.ndarray],
        dtypes: Sequence[np.dtype],
        npeers: int,
        remaining_with: dict[int, int],
        sends_to: dict[int, int],
        chunk_bytes: int,
        iteration: int,
        rank: int,
    ) -> None:
        self.lib = engine.lib
        self.packed = packed
        for b, arr in enumerate(buffers):  # engine.c trusts the regions: check them here
            if b < len(packed.buffer_end) and packed.buffer_end[b] > arr.nbytes:
                raise ValueError(f"buffer {b} has {arr.nbytes} bytes, the program reaches byte {packed.buffer_end[b]}")
            if not arr.flags.c_contiguous:
                raise ValueError(f"buffer {b} is not contiguous")
        self.buffers = list(buffers)  # kept alive while the C side points at them
        n = packed.nops
        self.started = np.zeros(max(n, 1))
        self.ended = np.zeros(max(n, 1))
        self.last_heard = np.zeros(npeers)
        self.remaining_with = np.zeros(npeers, dtype=np.int64)
        self.sends_to = np.zeros(npeers, dtype=np.int64)
        for peer, count in remaining_with.items():
            self.remaining_with[peer] = count
        for peer, count in sends_to.items():
            self.sends_to[peer] = count
        self.blocked = np.zeros(max(len(push), 1), dtype=np.uint8)
        self._socks = (ctypes.c_void_p * max(len(push), 1))(*[s.underlying for s in push])
        # their ZMQ_FD, not the sockets: zmq_poll asks every socket item for ZMQ_EVENTS on each turn
        # (a system call each), and a rank has a monitor per peer
        self._extra = (ctypes.c_int32 * max(len(extra), 1))(*[s.get(zmq.FD) for s in extra])
        self._bufs = (ctypes.c_void_p * max(len(buffers), 1))(*[a.ctypes.data for a in buffers])
        self._dtype = np.array([dtype_code(np.dtype(d)) for d in dtypes] or [0], dtype=np.int32)
        self.stats = Stats()
        self.io = IOStruct(
            pull.underlying,
            ctypes.addressof(self._socks),
            ctypes.addressof(self._extra),
            len(push),
            len(extra),
            npeers,
            ctypes.addressof(self._bufs),
            _addr(self._dtype),
            _addr(self.started),
            _addr(self.ended),
            _addr(self.last_heard),
            _addr(self.remaining_with),
            _addr(self.sends_to),
            _addr(self.blocked),
            ctypes.pointer(self.stats),
            chunk_bytes,
            iteration,
            rank,
        )
        self.engine = engine
        self.handle = self.lib.run_new(ctypes.byref(packed.struct), ctypes.byref(self.io), engine.handle)
        if not self.handle:
            raise MemoryError("run")

    def step(self, slice_s: float) -> int:
        """Run for at most ``slice_s``: `DONE`, `YIELD` (the slice ended or a signal came),
        `EXTRA` (an extra socket has an event) or an error code (`stats` says more)."""
        return int(self.lib.run_step(self.handle, slice_s))

    def waiting(self) -> np.ndarray:
        """Bytes still awaited from every peer by the posted recvs."""
        out = np.zeros(len(self.remaining_with), dtype=np.int64)
        self.lib.run_waiting(self.handle, _addr(out))
        return out

    def close(self) -> None:
        if self.handle:
            self.lib.run_free(self.handle)
            self.handle = None

    def __del__(self) -> None:
        self.close()
