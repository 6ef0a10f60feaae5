"""Import a PyTorch model: trace it with ``torch.export`` and count every operator with torch's FLOP counter.

``[workload] model = "path/to/file.py:factory"`` (or ``"package.module:factory"``) names a
function returning ``(module, example_inputs)`` for one server's micro-batch (a tensor, a
tuple of them, or a tuple and a dict of keyword tensors); the micro-batch size is the first
dimension of the first input tensor. `import_model` turns it into an `OperatorGraph`
(contract.graph, docs/models.md):

1. ``torch.export.export(module, inputs, strict=False)``, then ``run_decompositions()``:
   the core ATen graph a compiler sees (BERT-large: about 1,700 operators). The module may
   live on the ``meta`` device (no memory for weights): tracing never runs its kernels.
2. Every ATen node that depends on the model's inputs is one operator; nodes computed from
   parameters and constants alone (a weight's transpose, position ids) are folded into the
   first operator that reads them. An operator's parameters are the parameters it (or what
   was folded into it) reads, each counted once, at the first reader. A parameter that
   several operators read (tied weights: one tensor, whatever its names) is recorded in the
   graph's ``shared`` list with all its readers (contract.graph.SharedParameter).
3. FLOPs: each node is re-run on ``meta`` tensors of its traced shapes under
   ``torch.utils.flop_counter.FlopCounterMode`` (forward), and its backward is
   ``torch.autograd.grad`` of its outputs with respect to the inputs that need a gradient
   (those that depend on a parameter), under the same counter. So the counts are torch's
   own (matrix products, convolutions, attention; elementwise operators count 0).
4. ``out_bytes``: the bytes of the outputs its consumers read, from the traced shapes.

Where the code comes from (docs/models.md): a file path is relative to ``base``, the
scenario's folder (the current folder for ``topolab import``'s argument), and nowhere else;
while the file is imported, called and traced its own folder is first on the import path, so
a helper module beside it imports, and the import path is restored afterwards. A
``package.module`` is imported from the installed environment only: neither the current
folder nor the scenario's is searched for it. Either way this runs the file's code, with the
rights of the user who runs topolab (root for ``run`` and ``train``); ``topolab import``
turns a model into a graph file that a root command reads without running code.

Bad input is one `UsageError` line naming the file (or module) and the cause: missing file,
module or factory, a factory that raises, a result that is not ``(module, inputs)``, inputs
that do not fit the model, a model that cannot be traced (data-dependent control flow: the
line of the model's code that branches on a tensor's value).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import io
import logging
import operator
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Any

from contract.errors import UsageError
from contract.files import FileInputError, read_capped
from contract.graph import GraphOperator, OperatorGraph, SharedParameter

from .paths import resolve_path

INSTALL_HINT = "pip install -e '.[models]' (torch==2.13.0, the CPU build)"
_KINDS = {
    "conv": ("convolution", "conv1d", "conv2d", "conv3d", "_convolution"),
    "dense": ("addmm", "mm", "bmm", "linear", "matmul", "baddbmm"),
    "embedding": ("embedding", "embedding_bag", "_embedding_bag"),
    "attention": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention"),
}
KIND_OF = {op: kind for kind, ops in _KINDS.items() for op in ops}


def import_model(spec: str, base: Path | None = None) -> OperatorGraph:
    """Trace the model ``spec`` names (module docstring); a relative file path is relative
    to ``base`` (the scenario's folder), by default the current folder."""
    target = spec.rpartition(":")[0]
    folder = model_file(target, base).parent if target.endswith(".py") else None
    with _folder_on_import_path(folder):
        factory, where = load_factory(spec, base)
        torch = _torch(spec)
        try:
            result = factory()
        except Exception as err:  # the user's code: any failure is bad input
            raise UsageError(f"{where}: {spec.rsplit(':', 1)[1]}() raised {_err_line(err)}") from None
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
            got = type(result[0]).__name__ if isinstance(result, tuple) and result else type(result).__name__
            raise UsageError(
                f"{where}: {spec.rsplit(':', 1)[1]}() returned {got}, not (torch.nn.Module, example_inputs)"
            )
        module, inputs = result
        name = Path(target).stem if target.endswith(".py") else target
        return trace_module(module, inputs, name, spec, where)


def model_file(target: str, base: Path | None = None) -> Path:
    """The file of ``file.py:factory``: relative to ``base`` (default: the current folder)
    and nowhere else (planner.model.paths)."""
    return resolve_path(target, base if base is not None else Path())


def load_factory(spec: str, base: Path | None = None) -> tuple[Callable[[], Any], str]:
    """The factory function ``spec`` names and the file or module it lives in (running the
    file's or module's top-level code; `import_model` puts a file's folder on the import path)."""
    target, sep, func = spec.rpartition(":")
    if not sep or not target or not func:
        raise UsageError(f"{spec}: expected 'file.py:factory' or 'package.module:factory'")
    if target.endswith(".py"):
        path = model_file(target, base)
        where = str(path)
        if not path.exists():
            hint = " (a relative path is relative to the scenario's folder)" if base is not None else ""
            raise UsageError(f"{where}: no such file{hint}")
        mod_name = f"{_MODEL_MODULE_PREFIX}{abs(hash(str(path.resolve())))}"
        loader = _ModelFileLoader(mod_name, str(path))
        loader_spec = importlib.util.spec_from_file_location(mod_name, path, loader=loader)
        if loader_spec is None:
            raise UsageError(f"{where}: not a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        try:
            loader.exec_module(module)
        except FileInputError:  # a FIFO, a device, a folder, a file over the cap: its own line
            del sys.modules[mod_name]
            raise
        except ModuleNotFoundError as err:
            _missing_torch(err, spec)
            raise UsageError(f"{where}: cannot import: {_err_line(err)}") from None
        except Exception as err:
            raise UsageError(f"{where}: cannot import: {_err_line(err)}") from None
    else:
        where = target
        try:
            with _installed_environment_only(base):
                module = importlib.import_module(target)
        except ModuleNotFoundError as err:
            _missing_torch(err, spec)
            if err.name and target.startswith(err.name):
                raise UsageError(
                    f"{target}: no such module in the installed environment (nor a file ending in .py)"
                ) from None
            raise UsageError(f"{target}: cannot import: {_err_line(err)}") from None
        except Exception as err:
            raise UsageError(f"{target}: cannot import: {_err_line(err)}") from None
    factory = getattr(module, func, None)
    if factory is None:
        raise UsageError(f"{where}: has no function {func!r}")
    if not callable(factory):
        raise UsageError(f"{where}: {func!r} is not a function (it is of type {type(factory).__name__})")
    return factory, where


_MODEL_MODULE_PREFIX = "_topolab_model_"  # the name a model file is imported under (sys.modules)
MAX_MODEL_FILE_BYTES = 16 << 20  # a model file is kB of Python (resnet50.py: 4 kB); more is not one


class _ModelFileLoader(importlib.machinery.SourceFileLoader):
    """A model file's loader: its source read as a regular file under `MAX_MODEL_FILE_BYTES`
    (contract.files.read_capped: never blocks on a FIFO nor reads /dev/zero), compiled
    afresh: no bytecode cache is read (a planted ``__pycache__`` file would run code the
    source does not show) or written (root would write into the model's folder)."""

    def get_code(self, fullname: str) -> Any:
        source = read_capped(self.path, MAX_MODEL_FILE_BYTES, "model file")
        return self.source_to_code(source, self.path)


@contextmanager
def _folder_on_import_path(folder: Path | None) -> Iterator[None]:
    """``folder`` (a model file's) first on ``sys.path`` inside the block, and ``sys.path``
    as it was afterwards. (A helper module, once imported, stays in ``sys.modules`` under its
    own name, as Python keeps every module: one process plans one model file's helpers.)"""
    if folder is None:
        yield
        return
    saved, no_bytecode = list(sys.path), sys.dont_write_bytecode
    sys.path.insert(0, str(folder.absolute()))
    sys.dont_write_bytecode = True  # a helper's __pycache__ is not root's to write
    try:
        yield
    finally:
        sys.path[:] = saved
        sys.dont_write_bytecode = no_bytecode


@contextmanager
def _installed_environment_only(base: Path | None) -> Iterator[None]:
    """``sys.path`` without the current folder (``''``, ``.``, its absolute path) and
    ``base`` inside the block: a ``package.module`` comes from the installed environment,
    never from a file that happens to sit where the command runs or beside the scenario."""
    here = {Path.cwd().resolve()} | ({base.resolve()} if base is not None else set())
    saved = list(sys.path)

    def local(entry: str) -> bool:
        try:
            return entry in ("", ".") or Path(entry).resolve() in here
        except (OSError, RuntimeError, TypeError):
            return False

    sys.path[:] = [entry for entry in saved if not local(entry)]
    try:
        yield
    finally:
        sys.path[:] = saved


def _torch(spec: str) -> Any:
    try:
        import torch
    except ModuleNotFoundError:
        raise UsageError(f"{spec}: a PyTorch model needs torch, not installed here: {INSTALL_HINT}") from None
    return torch


def _missing_torch(err: ModuleNotFoundError, spec: str) -> None:
    if err.name in ("torch", "transformers"):
        raise UsageError(f"{spec}: a PyTorch model needs {err.name}, not installed here: {INSTALL_HINT}") from None


def _err_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def trace_module(module: Any, inputs: Any, name: str, source: str, where: str = "") -> OperatorGraph:
    """The operator graph of ``module`` called on ``inputs`` (module docstring, steps 1-4)."""
    import torch

    where = where or source
    args, kwargs = _split_inputs(torch, inputs, where)
    tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
    if not tensors:
        raise UsageError(f"{where}: the example inputs hold no tensor")
    batch = int(tensors[0].shape[0]) if tensors[0].dim() else 1
    with _quiet():
        try:
            exported = torch.export.export(module, args, kwargs, strict=False).run_decompositions()
        except Exception as err:
            raise UsageError(f"{where}: {_trace_failure(err)}") from None
        ops, shared = _operators(torch, exported)
    if not ops:
        raise UsageError(f"{where}: the traced model computes nothing from its inputs")
    return OperatorGraph(name, source, max(batch, 1), tuple(ops), shared)


@contextmanager
def _quiet() -> Iterator[None]:
    """Tracing without torch's warnings, log lines and prints (its report on a failure is the
    one-line error instead): ``torch.export`` prints a failed trace's partial graph to
    ``sys.stderr`` (26 lines for a data-dependent branch), so the standard error is a
    discarded buffer inside the block, both Python's ``sys.stderr`` and file descriptor 2
    (what torch's C++ code writes to), and is restored afterwards."""
    log = logging.getLogger("torch")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), _fd_to_devnull(2), redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        log.setLevel(level)


@contextmanager
def _fd_to_devnull(fd: int) -> Iterator[None]:
    """File descriptor ``fd`` writes to /dev/null inside the block and to where it did
    afterwards (nothing is changed when ``fd`` is not open)."""
    try:
        saved = os.dup(fd)
    except OSError:
        yield
        return
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)


def _split_inputs(torch: Any, inputs: Any, where: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, list | tuple):
        if len(inputs) == 2 and isinstance(inputs[0], list | tuple) and isinstance(inputs[1], dict):
            return tuple(inputs[0]), dict(inputs[1])
        return tuple(inputs), {}
    raise UsageError(
        f"{where}: example inputs must be a tensor, a tuple of tensors or a dict, got {type(inputs).__name__}"
    )


def _trace_failure(err: BaseException) -> str:
    """Why ``torch.export`` failed, as one clause naming the model's line where it can."""
    text = str(err)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/torch/" not in f.filename]
    user = next((f for f in reversed(frames) if "planner/model/model_import.py" not in f.filename), None)
    at = f" at {_relative(user.filename)}:{user.lineno} `{(user.line or '').split('#')[0].strip()}`" if user else ""
    if "data-dependent" in text or "DataDependent" in type(err).__name__ or "GuardOn" in type(err).__name__:
        return f"cannot be traced: data-dependent control flow{at} (a branch or size that depends on a tensor's value)"
    return f"the example inputs do not fit the model{at}: {_err_line(err)}"


def _relative(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def _operators(torch: Any, exported: Any) -> tuple[list[GraphOperator], tuple[SharedParameter, ...]]:
    """Steps 2-4 of the module docstring on the exported program, and the parameters that
    several operators read (step 2)."""
    from torch.utils.flop_counter import FlopCounterMode

    sig = exported.graph_signature
    param_of = dict(sig.inputs_to_parameters)
    state = exported.state_dict
    user = set(sig.user_inputs)
    # A parameter is its tensor: tied weights are one tensor under several names (torch.export
    # lifts them once; the tensor's identity holds even where it would not).
    tensor_names: dict[int, list[str]] = {}
    for fqn, t in state.items():
        tensor_names.setdefault(id(t), []).append(fqn)
    live: dict[Any, bool] = {}  # depends on the model's inputs
    needs_grad: dict[Any, bool] = {}
    owner: dict[Any, Any] = {}  # node -> the operator node it belongs to (getitem -> its producer)
    pending: dict[Any, dict[str, Any]] = {}  # folded constant nodes -> what they carry
    reads: dict[Any, frozenset[int]] = {}  # a parameter or folded node -> the parameters it reads
    ops: dict[Any, dict[str, Any]] = {}
    claimed: set[int] = set()
    names: dict[Any, str] = {}

    def carry() -> dict[str, Any]:
        return {"params": 0, "param_bytes": 0, "fwd": 0.0, "bwd": 0.0, "kind": "other", "counts": set()}

    for node in exported.graph.nodes:
        if node.op == "placeholder":
            live[node] = node.name in user
            needs_grad[node] = node.name in param_of
            if node.name in param_of:
                reads[node] = frozenset({id(state[param_of[node.name]])})
            continue
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:
            src = node.args[0]
            live[node], needs_grad[node], owner[node] = live[src], needs_grad[src], owner.get(src, src)
            continue
        inputs = node.all_input_nodes
        live[node] = any(live.get(n, False) for n in inputs)
        here = carry()
        here["kind"] = KIND_OF.get(_op_name(node), "other")
        for n in inputs:  # parameters read here (counted once)
            fqn = param_of.get(n.name)
            if fqn is not None and id(state[fqn]) not in claimed:
                claimed.add(id(state[fqn]))
                here["counts"].add(id(state[fqn]))
                t = state[fqn]
                here["params"] += t.numel()
                here["param_bytes"] += t.numel() * t.element_size()
        here["fwd"], here["bwd"], needs_grad[node] = _flops(torch, FlopCounterMode, node, needs_grad)
        # The parameters it reads, itself or through folded nodes (not through an operator's output).
        read = frozenset().union(*(reads.get(owner.get(n, n), frozenset()) for n in inputs))
        for n in inputs:  # what folded constant producers carry comes here
            src = owner.get(n, n)
            if src in pending:
                _absorb(here, pending.pop(src))
        if not live[node]:
            pending[node] = here
            owner[node] = node
            reads[node] = read
            continue
        owner[node] = node
        ops[node] = here
        names[node] = _op_label(node)
        here["reads"] = read
        here["inputs"] = sorted({owner.get(n, n) for n in inputs if owner.get(n, n) in ops}, key=list(ops).index)
        here["out_bytes"] = _out_bytes(torch, node)
    shared = _shared_parameters(state, tensor_names, ops, names)
    out: list[GraphOperator] = []
    for node, d in ops.items():
        out.append(
            GraphOperator(
                names[node],
                d["kind"],
                int(d["params"]),
                int(d["param_bytes"]),
                float(d["fwd"]),
                float(d["bwd"]),
                int(d["out_bytes"]),
                tuple(names[p] for p in d["inputs"]),
            )
        )
    return out, shared


def _shared_parameters(
    state: dict[str, Any], tensor_names: dict[int, list[str]], ops: dict[Any, dict[str, Any]], names: dict[Any, str]
) -> tuple[SharedParameter, ...]:
    """Every parameter that two or more operators read (tied weights), with the operator
    that counts it first and the others in graph order (contract.graph.SharedParameter)."""
    readers: dict[int, list[Any]] = {}
    for node, d in ops.items():
        for key in d["reads"]:
            readers.setdefault(key, []).append(node)
    counter = {key: node for node, d in ops.items() for key in d["counts"]}
    shared: list[SharedParameter] = []
    for key, nodes in readers.items():
        if len(nodes) < 2 or key not in counter:  # one reader; or counted nowhere (read by no operator)
            continue
        t = state[tensor_names[key][0]]
        first = counter[key]
        order = [first, *(n for n in nodes if n is not first)]
        shared.append(
            SharedParameter(
                tensor_names[key][0], t.numel(), t.numel() * t.element_size(), tuple(names[n] for n in order)
            )
        )
    return tuple(shared)


def _absorb(here: dict[str, Any], folded: dict[str, Any]) -> None:
    for key in ("params", "param_bytes", "fwd", "bwd"):
        here[key] += folded[key]
    here["counts"] |= folded["counts"]
    if here["kind"] == "other":
        here["kind"] = folded["kind"]


def _op_name(node: Any) -> str:
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    return str(getattr(packet, "__name__", getattr(target, "__name__", str(target))))


def _op_label(node: Any) -> str:
    """``module.path/node``: where in the model the operator is, unique (the node's name)."""
    stack = node.meta.get("nn_module_stack") or {}
    path = ""
    if stack:
        path = str(list(stack.values())[-1][0])
    label = f"{path}/{node.name}" if path else node.name
    return label.replace("+", "_")


def _meta_like(torch: Any, value: Any, grad: bool) -> Any:
    if isinstance(value, torch.Tensor):
        t = torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device="meta")
        if grad and (value.dtype.is_floating_point or value.dtype.is_complex):
            t.requires_grad_(True)
        return t
    return value


def _flops(torch: Any, counter: Any, node: Any, needs_grad: dict[Any, bool]) -> tuple[float, float, bool]:
    """Forward and backward FLOPs of one node on meta tensors, and whether its output needs
    a gradient (some input does)."""
    from torch.fx.node import map_aggregate
    from torch.utils._pytree import tree_leaves

    def materialize(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return _meta_like(torch, a.meta.get("val"), needs_grad.get(a, False))
        if isinstance(a, torch.device):
            return torch.device("meta")
        return a

    try:
        args = map_aggregate(node.args, materialize)
        kwargs = {k: materialize(v) for k, v in node.kwargs.items()}
        if "device" in kwargs:
            kwargs["device"] = torch.device("meta")
        with counter(display=False) as fc:
            out = node.target(*args, **kwargs)
        forward = float(fc.get_total_flops())
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        ins = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor) and a.requires_grad]
        backward = 0.0
        if outs and ins:
            with counter(display=False) as bc:
                torch.autograd.grad(outs, ins, [torch.ones_like(o) for o in outs], allow_unused=True)
            backward = float(bc.get_total_flops())
        return forward, backward, bool(outs)
    except Exception:  # an op without a meta kernel: no FLOPs known (elementwise in practice)
        return 0.0, 0.0, any(needs_grad.get(n, False) for n in node.all_input_nodes)


def _out_bytes(torch: Any, node: Any) -> int:
    """Bytes of the outputs ``node``'s consumers read (all of them for a sink)."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return int(val.numel() * val.element_size())
    if isinstance(val, list | tuple):
        used = {u.args[1] for u in node.users if u.target is operator.getitem}
        picked = [v for i, v in enumerate(val) if (i in used or not used) and isinstance(v, torch.Tensor)]
        return int(sum(v.numel() * v.element_size() for v in picked))
    return 0
