"""What `topolab train` and the processes it starts share: environment variables, the files
each rank writes in the results folder, and the control messages (plain JSON).

Imports nothing but the standard library, so the driver can read it without torch.

Environment of every rank (beside torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT):

    TOPOLAB_BACKEND     the backend to pass to init_process_group: "topolab" or "gloo"
    TOPOLAB_TRAIN_DIR   the results folder, where the rank writes the files below
    TOPOLAB_CONTROL     ipc:// endpoint of the driver's control channel
    TOPOLAB_ADDRESS     this emulated host's address (the data plane binds it)
    TOPOLAB_TIMEOUT_S   a peer silent this long while data from it is awaited fails the job
    TOPOLAB_CHUNK_BYTES wire chunk of the pipelined sends

Control messages (rank -> driver, each answered): ``hello {rank, address}`` -> ``peers
{peers: {rank: address}}`` once every rank said hello; ``schedule {rank, key}`` ->
``schedule {algorithm, buffers: {name: bytes}, streams, predicted_s}`` or ``error {message}``.
A key names a collective: ``{kind, count, itemsize, root}`` (count: elements of one rank's
slot; root: broadcast only).
"""

from __future__ import annotations

import json
import os
from typing import Any

BACKEND = "topolab"
ENV_BACKEND = "TOPOLAB_BACKEND"
ENV_DIR = "TOPOLAB_TRAIN_DIR"
ENV_CONTROL = "TOPOLAB_CONTROL"
ENV_ADDRESS = "TOPOLAB_ADDRESS"
ENV_TIMEOUT = "TOPOLAB_TIMEOUT_S"
ENV_CHUNK = "TOPOLAB_CHUNK_BYTES"

KINDS = ("allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier", "calibration")
CALIBRATION_RUNS = 5
"""Runs of the calibration every rank makes right after connecting (recorded as kind
``calibration``, step `CALIBRATION_STEP`): the zero-payload twin of the plan's AllReduce
(its ops and dependencies, a few bytes each; the driver sizes its buffer). Their time is the
executor's software cost on these hosts, which the driver turns into a cost per op for its
predictions, as `topolab run` does with its iteration's twin."""
CALIBRATION_KEY = {"kind": "calibration", "count": 0, "itemsize": 4, "root": 0}
CALIBRATION_STEP = -2


def rank_file(folder: str, rank: int, what: str) -> str:
    """``rank-<rank>.<what>`` in ``folder``: what is stdout, stderr, init (written when the
    script calls init_process_group), steps.jsonl, collectives.jsonl."""
    return os.path.join(folder, f"rank-{rank}.{what}")


def key_name(key: dict[str, Any]) -> str:
    """A key as one string (a dict key on both sides)."""
    return f"{key['kind']}:{int(key['count'])}:{int(key['itemsize'])}:{int(key.get('root', 0))}"


def encode(kind: str, **fields: Any) -> bytes:
    fields["type"] = kind
    return json.dumps(fields).encode()


def decode(payload: bytes) -> dict[str, Any]:
    return json.loads(payload)


def append_record(path: str, record: dict[str, Any]) -> None:
    """One JSON line, appended and flushed at once (the driver may read it after a crash)."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
