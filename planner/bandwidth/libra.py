"""LIBRA bandwidth allocation for multi-dimensional networks (docs/algorithms.md section 3).

Per-dimension traffic model (bytes one server sends in dimension d per collective, the
group spanning dimensions d_1 < d_2 < ... of sizes p_d, message S):

- AllReduce = reduce-scatter dimension by dimension, then all-gather in reverse:
  ``a_d = 2 m_d (p_d - 1) / p_d`` with ``m_{d_1} = S`` and ``m_{next} = m_d / p_d``;
- reduce-scatter of S (input S, output S / prod p): ``a_d = m_d (p_d - 1) / p_d``, same m_d;
- all-gather to S (input S / prod p): the mirror of reduce-scatter, the same ``a_d``;
- all-to-all of S (S / N to every peer, forwarded dimension by dimension): the message keeps
  its size in every dimension, ``a_d = S (p_d - 1) / p_d``.

A workload's traffic is the sum over its collectives per iteration (data-parallel gradient
AllReduce over all dimensions, model-parallel collectives over the dimensions their group
spans). With ``B_d`` Gbit/s per server in dimension d, ``t_d = 8 a_d / B_d``:

- pipelined (chunks flow through the dimensions at once): ``T = compute + max_d t_d``;
- sequential (one dimension after the other): ``T = compute + sum_d t_d``.

Allocation under ``sum_d B_d = total`` and ``lo_d <= B_d <= hi_d``, both objectives convex in
``x_d = 1 / B_d``:

- objective ``"time"``: closed forms. Pipelined: ``B_d = clip(a_d / t, lo_d, hi_d)`` (every
  unclamped dimension finishes together at t, B_d proportional to a_d); sequential (Lagrange):
  ``B_d = clip(sqrt(a_d / lambda), lo_d, hi_d)`` (B_d proportional to sqrt(a_d)). The scalar t
  or lambda meeting the budget is found by scipy's brentq (the sum is monotone in it).
- objective ``"time_x_cost"``: T(B) x sum_d price_d B_d (price per Gbit/s of dimension d),
  minimized by scipy's SLSQP from several starts (the pipelined max is written as an epigraph
  variable), the best result kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod

import numpy as np

from contract.errors import UsageError

COLLECTIVE_KINDS = ("allreduce", "reduce_scatter", "all_gather", "all_to_all")
MODES = ("pipelined", "sequential")
OBJECTIVES = ("time", "time_x_cost")
BITS_PER_BYTE = 8
GBIT = 1e9
BUDGET_TOLERANCE = 1e-9  # relative slack when checking that bounds admit the budget
SOLVER_TOLERANCE = 1e-12


class AllocationInputError(UsageError):
    """A bad allocation input; the message names the field."""


@dataclass(frozen=True)
class Collective:
    """``count`` collectives of ``bytes`` per iteration over the groups spanning ``dims``
    (indices into the network's dimensions; empty = all dimensions)."""

    kind: str
    bytes: float
    dims: tuple[int, ...] = ()
    count: int = 1


@dataclass(frozen=True)
class Workload:
    """One training iteration: its collectives plus compute seconds not overlapped."""

    collectives: tuple[Collective, ...]
    compute_s: float = 0.0


@dataclass(frozen=True)
class Allocation:
    """Chosen bandwidth per dimension and what the model predicts for it."""

    gbps: tuple[float, ...]
    shares: tuple[float, ...]
    seconds: float  # modelled iteration time (compute + communication)
    dimension_bytes: tuple[float, ...]
    dimension_seconds: tuple[float, ...]
    mode: str
    objective: str
    cost: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)


def collective_bytes(dims: Sequence[int], collective: Collective) -> np.ndarray:
    """Bytes one server sends in each dimension for one collective (module docstring)."""
    if collective.kind not in COLLECTIVE_KINDS:
        raise AllocationInputError(
            f"workload.collectives.kind = {collective.kind!r}: expected one of {', '.join(COLLECTIVE_KINDS)}"
        )
    if not collective.bytes >= 0:
        raise AllocationInputError(f"workload.collectives.bytes = {collective.bytes!r}: must be >= 0")
    span = sorted(collective.dims) if collective.dims else list(range(len(dims)))
    if any(not 0 <= d < len(dims) for d in span) or len(set(span)) != len(span):
        raise AllocationInputError(f"workload.collectives.dims = {list(collective.dims)}: not dimensions of {dims}")
    out = np.zeros(len(dims))
    m = float(collective.bytes)
    factor = 2.0 if collective.kind == "allreduce" else 1.0
    for d in span:
        p = dims[d]
        out[d] = factor * m * (p - 1) / p
        if collective.kind != "all_to_all":
            m /= p
    return out * collective.count


def workload_bytes(dims: Sequence[int], workload: Workload) -> np.ndarray:
    """Bytes per server per dimension for one iteration of ``workload``."""
    total = np.zeros(len(dims))
    for c in workload.collectives:
        total += collective_bytes(dims, c)
    return total


def model_seconds(dimension_bytes: Sequence[float], gbps: Sequence[float], mode: str, compute_s: float = 0.0) -> float:
    """The iteration time model: compute + max (pipelined) or sum (sequential) of t_d."""
    t = np.asarray(dimension_bytes, float) * BITS_PER_BYTE / (np.asarray(gbps, float) * GBIT)
    return float(compute_s + (t.max() if mode == "pipelined" else t.sum()))


def _bounds(count: int, total: float, lower, upper) -> tuple[np.ndarray, np.ndarray]:
    lo = np.zeros(count) if lower is None else np.asarray(lower, float)
    hi = np.full(count, total) if upper is None else np.asarray(upper, float)
    if lo.shape != (count,) or hi.shape != (count,):
        raise AllocationInputError(f"allocation.lower/upper: need {count} values, one per dimension")
    if (lo < 0).any() or (hi < lo).any():
        raise AllocationInputError(f"allocation.lower {lo.tolist()} / upper {hi.tolist()}: need 0 <= lower <= upper")
    if lo.sum() > total * (1 + BUDGET_TOLERANCE) or hi.sum() < total * (1 - BUDGET_TOLERANCE):
        raise AllocationInputError(
            f"allocation bounds: lower sums to {lo.sum():g}, upper to {hi.sum():g}; the budget {total:g} must lie between"
        )
    return lo, hi


def _fill(shape, lo: np.ndarray, hi: np.ndarray, total: float) -> np.ndarray:
    """``clip(shape(s), lo, hi)`` with the scalar s (found by brentq) meeting the budget;
    ``shape`` is increasing in s."""
    from scipy.optimize import brentq  # a second to import: only the allocations that need it pay

    def excess(log_s: float) -> float:
        return float(np.clip(shape(np.exp(log_s)), lo, hi).sum() - total)

    a, b = -60.0, 60.0
    if excess(a) >= 0:
        return np.clip(shape(np.exp(a)), lo, hi)
    if excess(b) <= 0:
        return np.clip(shape(np.exp(b)), lo, hi)
    return np.clip(shape(np.exp(brentq(excess, a, b, xtol=SOLVER_TOLERANCE))), lo, hi)


def _time_optimal(a: np.ndarray, mode: str, lo: np.ndarray, hi: np.ndarray, total: float) -> np.ndarray:
    """Closed form (clipped water-filling) of the time objective; zero-traffic dimensions get
    their lower bound plus whatever the others cannot absorb."""
    weight = a if mode == "pipelined" else np.sqrt(a)
    if not weight.any():
        weight = np.ones_like(a)
    return _fill(lambda s: weight * s, lo, hi, total)


def _time_x_cost(
    a: np.ndarray, mode: str, lo: np.ndarray, hi: np.ndarray, total: float, price: np.ndarray, compute_s: float
) -> np.ndarray:
    from scipy.optimize import minimize

    scale = a.max() * BITS_PER_BYTE / (total * GBIT) or 1.0  # seconds of the largest dimension at full budget
    bytes_s = a * BITS_PER_BYTE / GBIT / scale  # so t_d = bytes_s / B_d is O(1)
    c = compute_s / scale
    count = len(a)

    def objective(z: np.ndarray) -> float:
        b = z[:count]
        t = z[count] if mode == "pipelined" else float((bytes_s / b).sum())
        return (c + t) * float(price @ b) / total

    cons = [{"type": "eq", "fun": lambda z: z[:count].sum() - total}]
    bnds = [(max(l, total * 1e-9), h) for l, h in zip(lo, hi)]
    if mode == "pipelined":
        cons.append({"type": "ineq", "fun": lambda z: z[count] * z[:count] - bytes_s})
        bnds.append((0.0, None))
    starts = [
        _time_optimal(a, mode, lo, hi, total),
        _time_optimal(a, "sequential" if mode == "pipelined" else "pipelined", lo, hi, total),
        _fill(lambda s: s / price, lo, hi, total),
        _fill(lambda s: np.ones(count) * s, lo, hi, total),
    ]
    best, best_value = starts[0], np.inf
    for b0 in starts:
        z0 = np.append(b0, (bytes_s / b0).max()) if mode == "pipelined" else b0
        res = minimize(objective, z0, method="SLSQP", bounds=bnds, constraints=cons, options={"ftol": 1e-12})
        b = np.clip(res.x[:count], lo, hi)
        b *= total / b.sum()
        value = model_seconds(a, b, mode, compute_s) * float(price @ b)
        if value < best_value:
            best, best_value = b, value
    return best


def allocate(
    dims: Sequence[int],
    workload: Workload,
    total_gbps: float,
    *,
    mode: str = "pipelined",
    objective: str = "time",
    price: Sequence[float] | None = None,
    lower: Sequence[float] | None = None,
    upper: Sequence[float] | None = None,
) -> Allocation:
    """Split ``total_gbps`` per server over the dimensions ``dims`` for ``workload``."""
    if mode not in MODES:
        raise AllocationInputError(f"allocation.mode = {mode!r}: expected one of {', '.join(MODES)}")
    if objective not in OBJECTIVES:
        raise AllocationInputError(f"allocation.objective = {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    if not total_gbps > 0:
        raise AllocationInputError(f"allocation.total_gbps = {total_gbps!r}: must be a positive rate")
    if not dims or any(p < 2 for p in dims):
        raise AllocationInputError(f"topology.dims {list(dims)}: every dimension needs at least 2 servers")
    lo, hi = _bounds(len(dims), total_gbps, lower, upper)
    prices = np.ones(len(dims)) if price is None else np.asarray(price, float)
    if prices.shape != (len(dims),) or (prices <= 0).any():
        raise AllocationInputError(f"allocation.price {list(prices)}: need one positive price per dimension")
    a = workload_bytes(dims, workload)
    if objective == "time":
        b = _time_optimal(a, mode, lo, hi, total_gbps)
    else:
        b = _time_x_cost(a, mode, lo, hi, total_gbps, prices, workload.compute_s)
    seconds = a * BITS_PER_BYTE / (b * GBIT)
    return Allocation(
        gbps=tuple(float(x) for x in b),
        shares=tuple(float(x / total_gbps) for x in b),
        seconds=model_seconds(a, b, mode, workload.compute_s),
        dimension_bytes=tuple(float(x) for x in a),
        dimension_seconds=tuple(float(x) for x in seconds),
        mode=mode,
        objective=objective,
        cost=float(prices @ b),
        notes=(f"{prod(dims)} servers as {' x '.join(map(str, dims))}",),
    )


def allreduce_workload(nbytes: float, compute_s: float = 0.0) -> Workload:
    """One data-parallel AllReduce of ``nbytes`` over all dimensions per iteration."""
    return Workload((Collective("allreduce", float(nbytes)),), compute_s)
