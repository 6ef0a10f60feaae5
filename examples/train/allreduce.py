"""One AllReduce of --mb MiB of float32 through torch.distributed, timed: a warm-up, then
--repeat steps of one AllReduce each (topolab_torch.step), every result checked exactly.

    topolab train scenarios/topoopt-12.toml --backend topolab,gloo -- .venv/bin/python examples/train/allreduce.py

Rank r's input is r + 1 everywhere, so the sum is n (n + 1) / 2 in every element, exact in
float32 whatever the order of the additions.
"""

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist

try:
    from topolab_torch import step as timed_step
except ImportError:
    timed_step = contextlib.nullcontext

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--mb", type=float, default=64.0)
parser.add_argument("--repeat", type=int, default=3)
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group(os.environ.get("TOPOLAB_BACKEND", "gloo"))
rank, n = dist.get_rank(), dist.get_world_size()
count = int(args.mb * (1 << 20)) // 4
tensor = torch.empty(count)
for k in range(1 + args.repeat):
    tensor.fill_(rank + 1)
    dist.barrier()
    t0 = time.monotonic()
    with timed_step() if k else contextlib.nullcontext():
        dist.all_reduce(tensor)
    seconds = time.monotonic() - t0
    if not bool((tensor == n * (n + 1) / 2).all()):
        raise SystemExit(f"rank {rank}: wrong AllReduce result")
    if rank == 0:
        print(
            f"{'warm-up' if k == 0 else f'repeat {k}'}: {args.mb:g} MiB AllReduce {seconds:.3f} s, verified", flush=True
        )
dist.destroy_process_group()
