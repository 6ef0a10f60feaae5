"""emulator: a `contract.network.Network` (or a `Plan`'s network) as a real emulated network.

Mininet hosts in Linux network namespaces, one veth per cable shaped with HTB, IP forwarding
and static routes on the hosts (host-based multi-hop forwarding, as the TopoOpt prototype
relayed with RDMA forwarding), time dilation from the scenario's ``[emulation]`` table.
Laid out as Mininet is (node / link / net): `emulator.host` (hosts), `emulator.cable`
(veth cables and their shaping), `emulator.hostconfig` (per-host addresses, routes, qdiscs
and the read-back), `emulator.planes` (a bandwidth allocation as policy routing and
per-destination classes), `emulator.net` (`EmulatedNetwork`, the life cycle). The same network
over several machines is the sub-package `emulator.cluster` (its net, ssh and state), and
`emulator.interface.RunningNetwork` names what both offer a command. ``docs/emulation.md``
explains the whole construction.

    from emulator import EmulatedNetwork, EmulationConfig
    with EmulatedNetwork(plan, EmulationConfig(link_mbps=500)) as net:
        proc = net.popen(0, ["iperf3", "-c", net.host_address(5)])
"""

from .addressing import identity, link_addresses, node_of_identity, plane_address, plane_of_address
from .config import EmulationConfig
from .errors import EmulationBusyError, EmulationError, EmulationInputError, ShapingError
from .interface import RunningNetwork
from .net import EmulatedNetwork, netem_present
from .state import clean_dead_runs

__all__ = [
    "EmulatedNetwork",
    "RunningNetwork",
    "EmulationConfig",
    "EmulationError",
    "EmulationInputError",
    "EmulationBusyError",
    "ShapingError",
    "identity",
    "link_addresses",
    "node_of_identity",
    "plane_address",
    "plane_of_address",
    "netem_present",
    "clean_dead_runs",
]
