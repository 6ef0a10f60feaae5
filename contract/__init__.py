"""The contract topolab's layers share: plain data and the physics every layer agrees on.

Imports nothing of topolab. The planner produces it, the emulator and the workers consume it:

- `contract.plan`: the `Plan` (topology, routes, traffic, the strategy as a typed object);
- `contract.graph`: an imported model's operator graph (the documented file format
  ``topolab.opgraph/1``), which a plan's `Workload` carries;
- `contract.network`: `Network`, the part of a plan an emulator builds (nodes, cables with
  their rates, routes, latency);
- `contract.schedule`: collective and iteration schedules as data (streams of send / recv /
  compute ops), the format the workers execute;
- `contract.emulation`: `EmulationConfig`, the one schema of the ``[emulation]`` settings, and
  `emulated_rates`, the rates and MTU a network is emulated at (time scale, shaped rates,
  capacities);
- `contract.physics`: TCP goodput of a shaped cable, the default MTU, VXLAN's overhead, time
  dilation, compute time: each formula or constant defined once;
- `contract.errors`: the one error hierarchy (user error: exit 2; run failure: exit 1).
"""
