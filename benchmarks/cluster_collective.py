"""The multi-ring AllReduce of topoopt-12 over three stand-in machines against one machine.

Stand-in machines (`tests.fixtures.standins`: each its own network, PID and mount namespace
with its own sshd, joined by an underlay in a namespace of ours) carry the network the
partitioner splits over them (`planner.topology.partition`, `emulator.cluster.ClusterNetwork`); the
one-machine network (`emulator.EmulatedNetwork`) gets the same MTU as the tunnels impose
(1450), so the two differ only in being spread over machines. Rounds alternate the two, so
both see the same machine; every AllReduce is verified. The stand-ins do not see the driver's
temporary files, so their workers run as on real machines (spec over ssh, control socket
forwarded by their sshd; docs/cluster.md section 2).

    sudo .venv/bin/python benchmarks/cluster_collective.py [--rounds 2] [--repeat 3] [--bytes 16]

Prints the medians and their ratio; writes benchmarks/results/cluster_collective.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from contract.emulation import EmulationConfig
from contract.physics import tunnel_mtu
from emulator import EmulatedNetwork
from emulator.cluster import ClusterNetwork
from planner import build_plan, load_scenario
from planner.topology.partition import partition_network
from tests.fixtures.standins import StandIns
from topolab.collective.command import measure

ROOT = Path(__file__).resolve().parent.parent
MACHINES = 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="alternated rounds (default 2)")
    ap.add_argument("--repeat", type=int, default=3, help="timed AllReduces per network and round (default 3)")
    ap.add_argument("--bytes", type=int, default=16, help="buffer in MiB (default 16)")
    args = ap.parse_args()
    plan = build_plan(load_scenario(ROOT / "scenarios" / "topoopt-12.toml"))
    cut = partition_network(plan.network, MACHINES)
    size = args.bytes << 20
    times: dict[str, list[float]] = {"machines": [], "one machine": []}
    verified = True
    with StandIns(MACHINES) as standins:
        # the driver's temporary files where the stand-ins cannot see them, as on real
        # machines: the workers there get their spec over ssh and a forwarded control socket
        tempfile.tempdir = str(standins.driver_dir)
        for _ in range(args.rounds):
            for label in times:
                if label == "machines":
                    net = ClusterNetwork(plan.network, cut.assignment, standins.machines, standins.ssh)
                else:
                    net = EmulatedNetwork(plan, EmulationConfig(mtu=tunnel_mtu()), log=lambda _m: None)
                with net:
                    (result,) = measure(net, plan, ["topoopt"], [size], repeat=args.repeat, log=lambda _m: None)
                times[label] += result.times_s
                verified = verified and result.verified
                print(f"  {label}: {[round(t, 3) for t in result.times_s]} verified {result.verified}", flush=True)
    tempfile.tempdir = None
    left = standins.leftovers()
    medians = {label: statistics.median(ts) for label, ts in times.items()}
    ratio = medians["machines"] / medians["one machine"]
    print(
        f"topoopt-12 multi-ring {args.bytes} MiB: {MACHINES} machines {medians['machines']:.3f} s, one machine "
        f"{medians['one machine']:.3f} s ({ratio:.3f}x); cut {cut.cut_cables}/{cut.cables} cables; "
        f"verified {verified}; left on the stand-ins: {left or 'nothing'}"
    )
    out = ROOT / "benchmarks" / "results" / "cluster_collective.json"
    doc = {"bytes": size, "times_s": times, "medians_s": medians, "ratio": ratio, "verified": verified}
    out.write_text(json.dumps(doc | {"cut_cables": cut.cut_cables, "leftovers": left}, indent=1) + "\n")
    return 0 if verified and not left else 1


if __name__ == "__main__":
    sys.exit(main())
