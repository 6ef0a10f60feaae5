"""PyTorch on topolab's emulated network: the ``topolab`` backend of ``torch.distributed``
and the step helper of `topolab train` (docs/train.md).

Under `topolab train` nothing needs importing: the backend is registered in every rank
before the script runs, so ``dist.init_process_group(os.environ["TOPOLAB_BACKEND"])`` works
with either backend. Elsewhere ``topolab_torch.register()`` registers it.

The step helper times the script's training steps for the report::

    for batch in batches:
        with topolab_torch.step():
            loss = model(batch).sum(); loss.backward(); opt.step(); opt.zero_grad()

Outside `topolab train` (no ``TOPOLAB_TRAIN_DIR``) it only runs the block. Importing this
package does not import torch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from . import protocol

__all__ = ["current_step", "register", "step"]

_step = {"index": -1}


def current_step() -> int:
    """The index of the step running now (-1 before the first, or outside any step)."""
    return _step["index"]


@contextmanager
def step() -> Iterator[int]:
    """Time one training step: one line in ``rank-<RANK>.steps.jsonl`` of the results folder
    (index, start and end on CLOCK_MONOTONIC, seconds); the collectives it issues are counted
    to it. Yields the step's index."""
    index = _step["index"] = _step.get("count", 0)
    _step["count"] = index + 1
    t0 = time.monotonic()
    try:
        yield index
    finally:
        t1 = time.monotonic()
        folder = os.environ.get(protocol.ENV_DIR)
        if folder:
            rank = int(os.environ.get("RANK", "0"))
            record = {"step": index, "t_start": t0, "t_end": t1, "seconds": t1 - t0}
            protocol.append_record(protocol.rank_file(folder, rank, "steps.jsonl"), record)
        _step["index"] = -1


def register() -> None:
    """Register the ``topolab`` backend with ``torch.distributed`` (imports torch)."""
    from .backend import register as register_backend

    register_backend()
