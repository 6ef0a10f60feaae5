"""The coordinator's folder (its control socket, the ranks' specs and logs): named after its
process, removed when it closes, and removed by `clean_dead_workdirs` (what ``topolab clean``
runs) once that process is gone, and nothing else."""

from __future__ import annotations

import subprocess
import tempfile

import pytest

from contract.processes import process_id
from planner.collectives import ring_allreduce
from workers.coordinator import WORKDIR_PREFIX, Coordinator, WorkerFailure, clean_dead_workdirs


def _dead_process_id() -> str:
    dead = subprocess.Popen(["true"])
    name = process_id(dead.pid)  # read while it runs or as a zombie: same start time
    dead.wait()
    return name


def test_coordinator_folder_names_its_process_and_goes_when_it_closes(short_tmp, monkeypatch) -> None:
    tmp_path = short_tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    schedule = ring_allreduce(3, 3 * 1024).to_dict()
    with Coordinator(schedule, ["127.0.0.1"] * 3, timeout_s=30) as coord:
        assert coord.workdir.parent == tmp_path
        assert coord.workdir.name.startswith(f"{WORKDIR_PREFIX}{process_id()}-")
        assert coord.workdir.stat().st_mode & 0o777 == 0o700
        (result,) = coord.run(1, warmup=0)
        assert result.ok
        assert sorted(p.name for p in coord.workdir.glob("rank-*.log")) == ["rank-0.log", "rank-1.log", "rank-2.log"]
        assert clean_dead_workdirs(log=lambda _m: None) == []  # its process (we) is alive
        assert coord.workdir.exists()
    assert list(tmp_path.iterdir()) == []


def test_clean_removes_the_folders_of_dead_coordinators_only(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead_id = _dead_process_id()
    gone = tmp_path / f"{WORKDIR_PREFIX}{dead_id}-ab12_xyz"
    alive = tmp_path / f"{WORKDIR_PREFIX}{process_id()}-cd34efgh"
    old_style = tmp_path / f"{WORKDIR_PREFIX}7pjotcu5"  # no process in its name: not this kind
    other = tmp_path / f"topolab-collx-{dead_id}-ab12"
    shared = tmp_path / f"{WORKDIR_PREFIX}{dead_id}-open1234"  # anyone could have made it
    for path in (gone, alive, old_style, other, shared):
        path.mkdir(mode=0o700)
    shared.chmod(0o777)
    (gone / "rank-0.log").write_text("a log\n")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("")
    link = tmp_path / f"{WORKDIR_PREFIX}{dead_id}-link1234"
    link.symlink_to(target)  # a link named like one: never followed, never removed
    lines: list[str] = []
    assert clean_dead_workdirs(log=lines.append) == [str(gone)]
    assert not gone.exists()
    assert all(p.exists() for p in (alive, old_style, other, shared, link, target / "keep"))
    assert len(lines) == 1 and dead_id in lines[0] and str(gone) in lines[0]


def test_control_socket_path_too_long_is_one_line_naming_tmpdir(tmp_path, monkeypatch) -> None:
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    schedule = ring_allreduce(2, 2 * 1024).to_dict()
    with pytest.raises(WorkerFailure, match=r"control endpoint .* over the 107 a Unix socket allows: set TMPDIR"):
        with Coordinator(schedule, ["127.0.0.1"] * 2, timeout_s=30):
            pass
    assert list(deep.iterdir()) == []  # the folder went with the failed start
