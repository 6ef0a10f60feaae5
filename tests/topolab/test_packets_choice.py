"""`topolab run`'s ``[emulation] packets = "auto"``: frames for a schedule of small messages,
offload packets otherwise (`topolab.run.measured_run.choose_packets`)."""

from __future__ import annotations

from dataclasses import replace

from planner import load_scenario
from topolab.common.prediction import prepare
from topolab.run.measured_run import choose_packets


def _choice(scenario_dir, name: str, **emulation):
    s = load_scenario(scenario_dir / name)
    s = replace(s, emulation=replace(s.emulation, **emulation))
    prepared = prepare(s)
    return choose_packets(s, prepared.schedule, prepared.plan)


def test_ncf_all_to_all_takes_frames(scenario_dir):
    """NCF's 32 KiB transfers end in a last frame of 5,924 bytes at MTU 9000, 416 at 4096; on 12
    servers frames of 4096 would cost more than its ops, so its cables keep 9000."""
    s, why = _choice(scenario_dir, "ncf-12.toml")
    assert s.emulation.packets == "frames" and s.emulation.frames
    assert s.emulation.mtu == 9000 and not s.emulation.auto_mtu
    assert why.startswith("frames: 100% of the bytes sent go in messages of at most 64 KiB")
    assert why.endswith(
        "so the cables carry frames of 9000 bytes (the transfers' last frames: 18.1% of their bytes at 9000; "
        "4096 would add 155% of the ops in frames crossing cables, 1500 would add 562% of the ops in frames "
        "crossing cables)"
    )


def test_ncf_on_128_servers_takes_smaller_frames(scenario_dir):
    s, why = _choice(scenario_dir, "ncf-128.toml")
    assert s.emulation.frames and s.emulation.mtu == 4096
    assert why.endswith(
        "so the cables carry frames of 4096 bytes (the transfers' last frames: 18.1% of their bytes at 9000, "
        "1.3% at 4096, 2.8% at 1500)"
    )


def test_a_stated_mtu_is_kept_for_frames(scenario_dir):
    s, why = _choice(scenario_dir, "ncf-12.toml", mtu=9000, auto_mtu=False)
    assert s.emulation.frames and s.emulation.mtu == 9000
    assert why.endswith("so the cables carry frames of their MTU, 9000 bytes")


def test_dlrm_model_parallel_transfers_take_frames(scenario_dir):
    """11% of DLRM's bytes go in small messages, all of them its 64 KiB model-parallel transfers."""
    s, why = _choice(scenario_dir, "topoopt-12.toml")
    assert s.emulation.frames and s.emulation.mtu == 9000  # their last frames: 4.4% of them
    assert why.startswith(
        "frames: 11% of the bytes sent go in messages of at most 64 KiB, 100% of the point-to-point "
        "transfers' bytes in transfers of at most 64 KiB"
    )


def test_data_parallel_jobs_keep_offload_packets(scenario_dir):
    """ResNet-50 (no transfers) keeps offload, on 128 servers too, where a third of its bytes go
    in small ring steps of its AllReduce."""
    s, why = _choice(scenario_dir, "resnet50-topoopt-12.toml")
    assert s.emulation.packets == "offload" and why.startswith("offload: 0% of the bytes")
    assert s.emulation.mtu == 9000 and s.emulation.auto_mtu  # offload leaves the MTU as it was
    s, why = _choice(scenario_dir, "resnet50-128.toml")
    assert s.emulation.packets == "offload" and why.startswith("offload: 33% of the bytes")


def test_a_stated_choice_is_kept(scenario_dir):
    s, why = _choice(scenario_dir, "ncf-12.toml", packets="offload")
    assert s.emulation.packets == "offload" and why == ""
    s, why = _choice(scenario_dir, "topoopt-12.toml", packets="frames")
    assert s.emulation.packets == "frames" and why == ""


def test_hop_counts_are_the_routes_cables(scenario_dir):
    from planner.topology.routing import hop_counts

    plan = prepare(load_scenario(scenario_dir / "expander-12.toml")).plan
    hops = hop_counts(plan.next_hop, plan.servers)
    n = plan.servers
    assert all(hops[u, v] == len(plan.path(u, v)) - 1 for u in range(n) for v in range(n))
    assert hops.max() >= 2 and not hops.diagonal().any()
