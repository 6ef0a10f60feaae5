"""`clean_control_dirs` (what `topolab clean` runs): it removes the ssh control directories of
multi-machine drivers that are gone, and nothing else."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from contract.errors import RunError
from emulator.cluster.ssh import Machine, SshOptions, clean_control_dirs
from emulator.nsutil import process_id


def test_cluster_control_dirs_of_dead_drivers_only(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead_id = process_id(dead.pid)  # read while it runs or as a zombie: same start time
    dead.wait()
    gone = tmp_path / f"tlcl-{dead_id}-abc123_x"
    alive = tmp_path / f"tlcl-{process_id()}-def456"
    standins = tmp_path / "tlcl-k2j4h5g6"  # another of ours without a driver id: not this kind
    other = tmp_path / f"tlclx-{dead_id}-abc"
    for path in (gone, alive, standins, other):
        path.mkdir()
    (gone / "0123abcd").write_text("")  # where a master's socket was
    lines: list[str] = []
    assert clean_control_dirs(log=lines.append) == [str(gone)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (alive, standins, other))
    assert len(lines) == 1 and dead_id in lines[0]


def test_cluster_session_dir_names_its_driver(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with SshOptions.session("root", None, None) as ssh:
        assert ssh.control_dir.name.startswith(f"tlcl-{process_id()}-")
        assert clean_control_dirs(log=lambda _m: None) == []  # its driver (we) is alive
    assert list(tmp_path.iterdir()) == []


def test_cluster_control_socket_path_too_long_is_one_line(tmp_path) -> None:
    ssh = SshOptions(control_dir=Path("/tmp") / ("d" * 80))
    with pytest.raises(RunError, match=r"machine m1: ssh control socket .* too long .* set TMPDIR"):
        ssh.command(Machine("m1", "192.0.2.202"))
    argv = SshOptions(control_dir=tmp_path).command(Machine("m1", "192.0.2.202"))
    assert argv[-4:] == ["-l", "root", "--", "192.0.2.202"]  # the user an option's value, the host after --
