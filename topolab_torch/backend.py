"""The ``topolab`` backend of ``torch.distributed``: a Python ``ProcessGroup`` whose
collectives run the plan's schedules with the workers' executor (`workers.session`) over
the emulated cables, on the CPU tensors' own memory.

``init_process_group("topolab")`` inside a rank started by `topolab train` creates it:
the rank binds its data socket on its host's address, says ``hello`` to the driver over the
control channel (`topolab_torch.protocol`) and gets every peer's address. Each collective
is queued to one engine thread and returns at once (a ``Work`` on a future), so DDP's
buckets reduce while backward goes on; the engine runs them in call order (every rank calls
the same collectives in the same order, as torch.distributed requires). The first
collective of a kind and size asks the driver for this rank's part of its schedule, later
ones reuse it.

Supported: ``allreduce`` (SUM, AVG), ``broadcast``, ``allgather`` (and into one tensor),
``reduce_scatter`` (SUM, AVG; and from one tensor), ``alltoall`` (equal splits), ``barrier``,
on CPU tensors of float32, float64, float16, int32, int64, int8 or uint8. Sums run in the
schedule's fixed order and every rank ends with the same bits.

A collective that fails (a peer died or went silent) ends the rank at once with one line on
stderr naming the peer (`_Engine.fail`), which `topolab train` reads to name the rank that
failed first.

Every collective is one line of ``rank-<RANK>.collectives.jsonl`` in the results folder:
kind, bytes, algorithm, start and end (CLOCK_MONOTONIC), seconds, the model's prediction,
and the step (`topolab_torch.step`) it belongs to. Before the first, right after connecting,
every rank runs `protocol.CALIBRATION_RUNS` times the zero-payload twin of the plan's AllReduce
(kind ``calibration``): they measure the software's cost per op, which the driver's
predictions then include.
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import zmq
from torch._C._distributed_c10d import _create_work_from_future

from workers.program import Program
from workers.protocol import limit_frames
from workers.session import Session

from . import current_step, protocol

SUPPORTED = (torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.int8, torch.uint8)
CONTROL_TIMEOUT_S = 600.0  # waiting for the peers' hello: the slowest rank may still be importing torch
SCHEDULE_REPLY_BYTES = 64 << 20
"""The longest reply the control socket takes (libzmq disconnects a driver that sends more,
`workers.protocol.limit_frames`): a rank's part of one collective's schedule, about 100 bytes
an op, so over 600,000 ops (a ring AllReduce gives a rank 4 (n - 1) ops per ring: 16 rings
over 4096 servers, 262,000). The data socket's bound is the protocol's chunk bound
(`workers.session`)."""


class BackendError(RuntimeError):
    """A collective the backend cannot run, or the data plane failed (names the rank)."""


def _numpy(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a flat numpy array (no copy; the tensor is contiguous)."""
    return t.detach().reshape(-1).numpy()


class _Engine:
    """The thread that owns the data plane and the control socket, and runs every job."""

    def __init__(self, rank: int, size: int, env: dict[str, str]) -> None:
        self.rank, self.size = rank, size
        self.folder = env.get(protocol.ENV_DIR, "")
        self.control = env[protocol.ENV_CONTROL]
        self.address = env[protocol.ENV_ADDRESS]
        self.timeout_s = float(env.get(protocol.ENV_TIMEOUT, "120"))
        self.chunk = int(env.get(protocol.ENV_CHUNK, str(1 << 20)))
        self.jobs: queue.Queue = queue.Queue()
        self.cache: dict[str, dict[str, Any]] = {}
        self.failed: BaseException | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"topolab-rank{rank}", daemon=True)
        self._thread.start()
        self._started.wait()
        if self.failed is not None:
            raise BackendError(f"topolab backend, rank {rank}: {self.failed}")

    # ---- the engine thread -----------------------------------------------------------
    def _main(self) -> None:
        try:
            self.ctx = zmq.Context()
            self.sock = self.ctx.socket(zmq.DEALER)
            self.sock.setsockopt(zmq.LINGER, 0)
            limit_frames(self.sock, SCHEDULE_REPLY_BYTES)
            self.sock.connect(self.control)
            self.session = Session(
                self.rank,
                self.size,
                f"{self.address}:0",
                chunk_bytes=self.chunk,
                timeout_s=self.timeout_s,
                ctx=self.ctx,
            )
            reply = self._ask("hello", address=self.session.address)
            self.session.connect({int(r): a for r, a in reply["peers"].items() if int(r) != self.rank})
            twin = self.schedule(protocol.CALIBRATION_KEY)  # the software's cost per op, for the predictions
            zeros = {name: np.zeros(nbytes // 4, dtype=np.float32) for name, nbytes in twin["buffers"].items()}
            for _ in range(protocol.CALIBRATION_RUNS):
                self.execute(protocol.CALIBRATION_KEY, zeros, protocol.CALIBRATION_STEP)
        except BaseException as exc:  # reported by the constructor
            self.failed = exc
            self._started.set()
            return
        self._started.set()
        while True:
            job = self.jobs.get()
            if job is None:
                break
            run, future, what = job
            try:
                result = run()
            except BaseException as exc:
                self.fail(what, exc)
            future.set_result(result)
        self.session.close()
        self.sock.close(linger=0)
        self.ctx.term()

    def fail(self, what: str, exc: BaseException) -> None:
        """A collective failed (a peer died or went silent, ...): one line on stderr and the
        process ends at once, as NCCL's asynchronous error handling does. A future completed
        with an exception under DDP crashes its reducer (SIGSEGV in torch 2.13), which would
        hide which rank failed first."""
        sys.stderr.write(f"topolab backend, rank {self.rank}: {what}: {exc}\n")
        sys.stderr.flush()
        os._exit(1)

    def _ask(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.sock.send(protocol.encode(kind, rank=self.rank, **fields))
        if not self.sock.poll(CONTROL_TIMEOUT_S * 1000):
            raise BackendError(f"no answer from topolab train to {kind!r} within {CONTROL_TIMEOUT_S:g} s")
        reply = protocol.decode(self.sock.recv())
        if reply.get("type") == "error":
            raise BackendError(reply.get("message", "error"))
        return reply

    def schedule(self, key: dict[str, Any]) -> dict[str, Any]:
        name = protocol.key_name(key)
        if name not in self.cache:
            reply = self._ask("schedule", key=key)
            reply["program"] = Program(reply["streams"])
            self.cache[name] = reply
        return self.cache[name]

    def execute(self, key: dict[str, Any], buffers: dict[str, np.ndarray], step: int, kind: str = "") -> None:
        """Run the key's schedule on ``buffers`` and record it (as ``kind``, default the key's)
        (engine thread)."""
        made = self.schedule(key)
        # a schedule may need more than the tensor holds (an MSCCL algorithm runs whole chunks)
        # or a buffer of its own (its scratch): those run on zero-padded copies, and the
        # tensor's part is copied back after the run
        run_on, copy_back = dict(buffers), []
        for name, nbytes in made["buffers"].items():
            given = buffers.get(name)
            if given is not None and given.nbytes >= nbytes:
                continue
            like = given if given is not None else next(iter(buffers.values()))
            padded = np.zeros(-(-nbytes // like.itemsize), dtype=like.dtype)
            if given is not None:
                padded[: given.size] = given.reshape(-1)
                copy_back.append((given, padded))
            run_on[name] = padded
        timing = self.session.run(made["program"], run_on)
        for given, padded in copy_back:
            given.reshape(-1)[:] = padded[: given.size]
        if self.folder:
            record = {
                "kind": kind or key["kind"],
                "bytes": int(key["count"]) * int(key["itemsize"]),
                "algorithm": made["algorithm"],
                "t_start": timing.t_start,
                "t_end": timing.t_end,
                "seconds": timing.t_end - timing.t_start,
                "predicted_s": made["predicted_s"],
                "step": step,
            }
            protocol.append_record(protocol.rank_file(self.folder, self.rank, "collectives.jsonl"), record)

    # ---- the caller's side ---------------------------------------------------------------
    def submit(self, what: str, run: Callable[[], Any]) -> dist._Work:
        future: torch.futures.Future = torch.futures.Future()
        self.jobs.put((run, future, what))
        return _create_work_from_future(future)

    def close(self) -> None:
        """Run what is queued, then close the sockets and end the thread (idempotent). Also
        called at exit: a daemon thread still holding ZeroMQ sockets while the interpreter
        finalizes can crash the process (SIGSEGV seen at the end of a run)."""
        if self._thread.is_alive():
            self.jobs.put(None)
            self._thread.join(self.timeout_s)


def _check(tensors: list[torch.Tensor], what: str) -> None:
    for t in tensors:
        if t.device.type != "cpu":
            raise BackendError(f"topolab backend: {what} of a {t.device.type} tensor (CPU tensors only)")
        if t.dtype not in SUPPORTED:
            raise BackendError(f"topolab backend: {what} of {t.dtype} (supported: {', '.join(map(str, SUPPORTED))})")


def _reduce_op(opts: Any, what: str) -> bool:
    """True for AVG, False for SUM; anything else is refused."""
    op = opts.reduceOp
    if op == dist.ReduceOp.SUM:
        return False
    if op == dist.ReduceOp.AVG:
        return True
    raise BackendError(f"topolab backend: {what} with {op} (SUM and AVG only: the schedules add)")


class TopolabProcessGroup(dist.ProcessGroup):
    """The process group ``init_process_group("topolab")`` returns (module docstring)."""

    def __init__(self, rank: int, size: int, env: dict[str, str] | None = None) -> None:
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self.engine = _Engine(rank, size, dict(os.environ if env is None else env))
        atexit.register(self.engine.close)

    def getBackendName(self) -> str:
        return protocol.BACKEND

    def _key(self, kind: str, count: int, t: torch.Tensor, root: int = 0) -> dict[str, Any]:
        return {"kind": kind, "count": int(count), "itemsize": t.element_size(), "root": int(root)}

    def _contiguous(self, t: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None]]:
        """A contiguous tensor to work on, and what copies the result back."""
        if t.is_contiguous():
            return t, lambda: None
        work = t.contiguous()
        return work, lambda: t.copy_(work)

    # ---- collectives -----------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist._Work:
        opts = opts or dist.AllreduceOptions()
        _check(tensors, "allreduce")
        avg = _reduce_op(opts, "allreduce")
        step = current_step()

        def run() -> list[torch.Tensor]:
            for t in tensors:
                work, back = self._contiguous(t)
                if work.numel():
                    self.engine.execute(self._key("allreduce", work.numel(), work), {"grad": _numpy(work)}, step)
                if avg:
                    work.div_(self._size) if work.is_floating_point() else work.floor_divide_(self._size)
                back()
            return tensors

        return self.engine.submit("allreduce", run)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> dist._Work:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> dist._Work:
        opts = opts or dist.BroadcastOptions()
        _check(tensors, "broadcast")
        root = int(opts.rootRank)
        step = current_step()

        def run() -> list[torch.Tensor]:
            for t in tensors:
                work, back = self._contiguous(t)
                if work.numel():
                    key = self._key("broadcast", work.numel(), work, root)
                    self.engine.execute(key, {"buf": _numpy(work)}, step)
                back()
            return tensors

        return self.engine.submit("broadcast", run)

    def allgather(
        self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor], opts: Any = None
    ) -> dist._Work:
        _check(input_tensors, "allgather")
        step = current_step()

        def run() -> list[list[torch.Tensor]]:
            for outs, inp in zip(output_tensors, input_tensors):
                flat = torch.empty(self._size * inp.numel(), dtype=inp.dtype)
                self._gather_into(flat, inp, step)
                for r, out in enumerate(outs):
                    out.copy_(flat[r * inp.numel() : (r + 1) * inp.numel()].view_as(out))
            return output_tensors

        return self.engine.submit("allgather", run)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist._Work:
        _check([input, output], "all_gather_into_tensor")
        step = current_step()

        def run() -> list[torch.Tensor]:
            work, back = self._contiguous(output)
            self._gather_into(work.view(-1), input, step)
            back()
            return [output]

        return self.engine.submit("all_gather_into_tensor", run)

    all_gather_single = _allgather_base  # the name torch.distributed calls in recent versions

    def _gather_into(self, flat: torch.Tensor, inp: torch.Tensor, step: int) -> None:
        """Engine thread: rank r's ``inp`` into slot r of ``flat`` on every rank."""
        count = inp.numel()
        flat[self._rank * count : (self._rank + 1) * count].copy_(inp.reshape(-1))
        if count:
            self.engine.execute(self._key("allgather", count, inp), {"out": _numpy(flat)}, step)

    def reduce_scatter(
        self, output_tensors: list[torch.Tensor], input_tensors: list[list[torch.Tensor]], opts: Any = None
    ) -> dist._Work:
        opts = opts or dist.ReduceScatterOptions()
        _check(output_tensors, "reduce_scatter")
        avg = _reduce_op(opts, "reduce_scatter")
        step = current_step()

        def run() -> list[torch.Tensor]:
            for out, ins in zip(output_tensors, input_tensors):
                flat = torch.cat([t.reshape(-1) for t in ins])
                self._scatter_from(flat, out, avg, step)
            return output_tensors

        return self.engine.submit("reduce_scatter", run)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> dist._Work:
        opts = opts or dist.ReduceScatterOptions()
        _check([input, output], "reduce_scatter_tensor")
        avg = _reduce_op(opts, "reduce_scatter_tensor")
        step = current_step()

        def run() -> list[torch.Tensor]:
            self._scatter_from(input.reshape(-1).clone(), output, avg, step)
            return [output]

        return self.engine.submit("reduce_scatter_tensor", run)

    reduce_scatter_single = _reduce_scatter_base

    def _scatter_from(self, flat: torch.Tensor, out: torch.Tensor, avg: bool, step: int) -> None:
        """Engine thread: slot r of the sum over ranks of ``flat`` into rank r's ``out``."""
        count = out.numel()
        if count:
            self.engine.execute(self._key("reduce_scatter", count, out), {"buf": _numpy(flat)}, step)
        mine = flat[self._rank * count : (self._rank + 1) * count].view_as(out)
        out.copy_(mine / self._size if avg and out.is_floating_point() else mine)

    def alltoall(
        self, output_tensors: list[torch.Tensor], input_tensors: list[torch.Tensor], opts: Any = None
    ) -> dist._Work:
        _check(input_tensors + output_tensors, "alltoall")
        sizes = {t.numel() for t in input_tensors + output_tensors}
        if len(sizes) != 1:
            raise BackendError("topolab backend: alltoall with tensors of different sizes (equal splits only)")
        step = current_step()

        def run() -> list[torch.Tensor]:
            inp = torch.cat([t.reshape(-1) for t in input_tensors])
            self._exchange(inp, output_tensors, step)
            return output_tensors

        return self.engine.submit("alltoall", run)

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> dist._Work:
        _check([input, output], "all_to_all_single")
        if len(set(output_split_sizes)) > 1 or len(set(input_split_sizes)) > 1:
            raise BackendError("topolab backend: all_to_all_single with uneven splits (equal splits only)")
        step = current_step()

        def run() -> list[torch.Tensor]:
            work, back = self._contiguous(output)
            self._exchange(input.reshape(-1).contiguous(), list(work.view(-1).chunk(self._size)), step)
            back()
            return [output]

        return self.engine.submit("all_to_all_single", run)

    all_to_all_single = alltoall_base

    def _exchange(self, inp: torch.Tensor, outs: list[torch.Tensor], step: int) -> None:
        """Engine thread: slot d of this rank's ``inp`` to rank d's ``outs[rank]``."""
        count = inp.numel() // self._size
        flat = torch.empty_like(inp)
        if count:
            self.engine.execute(self._key("alltoall", count, inp), {"in": _numpy(inp), "out": _numpy(flat)}, step)
        mine = slice(self._rank * count, (self._rank + 1) * count)
        flat[mine] = inp[mine]
        for r, out in enumerate(outs):
            out.copy_(flat[r * count : (r + 1) * count].view_as(out))

    def barrier(self, opts: Any = None) -> dist._Work:
        step = current_step()

        def run() -> list[torch.Tensor]:
            token = torch.zeros(self._size, dtype=torch.float32)
            self.engine.execute(self._key("barrier", 1, token), {"grad": _numpy(token)}, step)
            return []

        return self.engine.submit("barrier", run)

    def shutdown(self) -> None:
        self.engine.close()

    def abort(self) -> None:
        self.engine.close()


def create(store: Any, rank: int, size: int, timeout: timedelta) -> TopolabProcessGroup:
    """``Backend.register_backend``'s creator: the process group of this rank."""
    if protocol.ENV_CONTROL not in os.environ or protocol.ENV_ADDRESS not in os.environ:
        raise BackendError(
            "topolab backend: no TOPOLAB_CONTROL / TOPOLAB_ADDRESS in the environment; "
            "run the script under `topolab train`"
        )
    return TopolabProcessGroup(rank, size)


def register() -> None:
    """Register ``topolab`` with torch.distributed (once; CPU tensors)."""
    if protocol.BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(protocol.BACKEND, create, devices=["cpu"])
