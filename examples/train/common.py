"""What the training examples share: flags, synthetic batches, the DDP loop, saving.

Every rank r trains on its own synthetic batches (seeded by rank and step, no download);
``--single W`` trains one process on the concatenation of ranks 0..W-1's batches, which
plain SGD on the mean loss makes the same training as DDP over W ranks (DDP averages the
ranks' gradients): `topolab train`'s tests compare the parameters of the two.

Run under `topolab train` (or torchrun): RANK / WORLD_SIZE from the environment, the
backend from TOPOLAB_BACKEND (default gloo), each step timed with topolab_torch.step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

try:  # the step helper; on the path under `topolab train`
    from topolab_torch import step as timed_step
except ImportError:  # elsewhere: steps are not timed
    timed_step = contextlib.nullcontext


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    parser.add_argument(
        "--save", metavar="FILE", help="rank 0 (or the single process) saves the parameters here; {backend} is replaced"
    )
    parser.add_argument("--single", type=int, metavar="W", help="one process on the batches of W ranks")
    parser.add_argument("--crash", type=int, nargs=2, metavar=("RANK", "STEP"), help="rank RANK fails at step STEP")
    parser.add_argument(
        "--double",
        action="store_true",
        help="train in float64: DDP and one process then agree to ~1e-15 (in float32 they add in other orders and "
        "agree to ~1e-7 until a ReLU input within rounding of 0 falls on the other side: 12 ranks of this CNN, "
        "step 11, then 4e-4)",
    )
    return parser.parse_args()


def train(model_fn: Callable[[], nn.Module], batch_fn: Callable[[int, int, int], tuple], loss_fn: Callable) -> None:
    """The loop: model_fn() builds the model (same seed on every rank); batch_fn(rank, step,
    batch) gives one rank's (inputs, targets) of a step."""
    args = arguments(__doc__ or "")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.double:
        torch.set_default_dtype(torch.float64)
    model = model_fn()
    if args.single:
        ranks, rank = range(args.single), 0
        net: nn.Module = model
    else:
        dist.init_process_group(os.environ.get("TOPOLAB_BACKEND", "gloo"))
        rank = dist.get_rank()
        ranks = range(rank, rank + 1)
        net = DDP(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    t0 = time.monotonic()
    for step in range(args.steps):
        if args.crash and args.crash == [rank, step] and not args.single:
            raise RuntimeError(f"rank {rank} fails at step {step} as asked (--crash)")
        batches = [batch_fn(r, step, args.batch) for r in ranks]
        inputs = torch.cat([b[0] for b in batches])
        targets = torch.cat([b[1] for b in batches])
        with timed_step():
            loss = loss_fn(net(inputs), targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {loss.item():.4f}  {time.monotonic() - t0:.1f} s", flush=True)
    if rank == 0 and args.save:
        backend = "single" if args.single else os.environ.get("TOPOLAB_BACKEND", "gloo")
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, args.save.format(backend=backend))
    if not args.single:
        # every rank done before any tears down: a gloo rank that destroyed its process group
        # while a peer was still saving aborted once ("terminate called without an active
        # exception", gloo's receive thread)
        dist.barrier()
        dist.destroy_process_group()
