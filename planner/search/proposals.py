"""The MCMC proposal distribution over strategies (docs/algorithms.md section 5)."""

from __future__ import annotations

import random

from ..model.opgraph import OpGraph
from ..strategy.strategies import OpChoice, Strategy, mp_options, shard_options
from .config import SearchConfig


def propose(graph: OpGraph, strategy: Strategy, n: int, rng: random.Random, cfg: SearchConfig) -> Strategy:
    """Change one operator's choice (local moves more often than jumps), or, with
    probability `SearchConfig.block_moves`, give every dense operator the same
    tensor-parallel degree (a coordinated move: mixed layouts pay re-distribution
    all-gathers, so single moves towards a uniformly sharded model look worse than they
    are)."""
    dense = [i for i, op in enumerate(graph.ops) if not op.is_embedding]
    if len(dense) > 1 and rng.random() < cfg.block_moves:
        m = rng.choice(mp_options(n, cfg.max_mp))
        out = list(strategy)
        for i in dense:
            out[i] = OpChoice(mp=m)
        return tuple(out)
    movable = [i for i, op in enumerate(graph.ops) if op.is_embedding or len(mp_options(n, cfg.max_mp)) > 1]
    i = rng.choice(movable)
    op, cur = graph.ops[i], strategy[i]
    if op.is_embedding:
        shards = shard_options(n, cfg.max_shards)
        r = rng.random()
        if cur.owner < 0:
            new = OpChoice(owner=rng.randrange(n), shards=1)
        elif r < 0.6:
            new = OpChoice(owner=rng.randrange(n), shards=cur.shards)
        elif r < 0.95:
            new = OpChoice(owner=cur.owner, shards=rng.choice([s for s in shards if s != cur.shards] or shards))
        else:
            new = OpChoice(owner=-1)
    else:
        opts = mp_options(n, cfg.max_mp)
        k = opts.index(cur.mp) if cur.mp in opts else 0
        if rng.random() < 0.5:
            k = min(len(opts) - 1, max(0, k + rng.choice((-1, 1))))
            if opts[k] == cur.mp:
                k = (k + 1) % len(opts)
        else:
            k = rng.choice([j for j in range(len(opts)) if j != k] or [k])
        new = OpChoice(mp=opts[k])
    return strategy[:i] + (new,) + strategy[i + 1 :]
