"""The emulated network over several machines, laid out as Mininet is: `emulator.cluster.net`
(`ClusterNetwork`, the life cycle on Mininet Cluster Edition), `emulator.cluster.ssh` (the
multiplexed, time-bounded ssh to the machines) and `emulator.cluster.state` (what a run
records on each machine; `clean_machines`). docs/cluster.md explains the construction."""

from .net import ClusterNetwork

__all__ = ["ClusterNetwork"]
