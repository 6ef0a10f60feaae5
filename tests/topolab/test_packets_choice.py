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
    return choose_packets(s, prepare(s).schedule)


def test_ncf_all_to_all_takes_frames(scenario_dir):
    s, why = _choice(scenario_dir, "ncf-12.toml")
    assert s.emulation.packets == "frames" and s.emulation.frames
    assert why.startswith("frames: 100% of the bytes sent go in messages of at most 64 KiB")


def test_dlrm_model_parallel_transfers_take_frames(scenario_dir):
    """11% of DLRM's bytes go in small messages, all of them its 64 KiB model-parallel transfers."""
    s, why = _choice(scenario_dir, "topoopt-12.toml")
    assert s.emulation.frames
    assert why.startswith(
        "frames: 11% of the bytes sent go in messages of at most 64 KiB, 100% of the point-to-point "
        "transfers' bytes in transfers of at most 64 KiB"
    )


def test_data_parallel_jobs_keep_offload_packets(scenario_dir):
    """ResNet-50 (no transfers) keeps offload, on 128 servers too, where a third of its bytes go
    in small ring steps of its AllReduce."""
    s, why = _choice(scenario_dir, "resnet50-topoopt-12.toml")
    assert s.emulation.packets == "offload" and why.startswith("offload: 0% of the bytes")
    s, why = _choice(scenario_dir, "resnet50-128.toml")
    assert s.emulation.packets == "offload" and why.startswith("offload: 33% of the bytes")


def test_a_stated_choice_is_kept(scenario_dir):
    s, why = _choice(scenario_dir, "ncf-12.toml", packets="offload")
    assert s.emulation.packets == "offload" and why == ""
    s, why = _choice(scenario_dir, "topoopt-12.toml", packets="frames")
    assert s.emulation.packets == "frames" and why == ""
