"""Root writes only into folders it may own, and never through a link planted in them.

``--out`` (and the default ``results/...`` folder) and ``--run-dir`` are refused in one line
naming the flag (exit 2, no traceback) when the folder, or the existing parent it would be
made in, is a symbolic link, is owned by another user, or is writable by others without the
sticky bit. Inside a folder that passes, every result file, the run lock and the run's state
file are opened without following a link at their name: a link planted there is refused and
its target left as it was.

Refusals are checked with the real command in a new process. Where a command would go on to
build a network once its folders pass, the command line also carries a later bad flag
(``--run-dir /dev/full``, ``--cable-down bogus``), so a folder that is wrongly accepted shows
as that later flag's refusal, at once, instead of as a run.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from contract.files import FileInputError
from emulator.errors import EmulationInputError
from emulator.state import RunLock, RunState, run_dir_path

REPO = Path(__file__).resolve().parents[2]
TOPOLAB = str(REPO / ".venv" / "bin" / "topolab")
FOREIGN_UID = 1000  # any user but root and us
SCENARIO = "[cluster]\nservers = 12\ndegree = 4\n"
PRECIOUS = "a file of another user that root must not overwrite\n"

pytestmark = pytest.mark.root  # chown, and the commands that build networks need root


@pytest.fixture(autouse=True)
def _no_sudo_user(monkeypatch):
    """The user who ran sudo is trusted like root: no such user here, whoever runs the tests."""
    monkeypatch.delenv("SUDO_UID", raising=False)


def topolab(args: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SUDO_UID"}
    return subprocess.run([TOPOLAB, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def assert_refused(proc: subprocess.CompletedProcess[str], flag: str, *words: str) -> None:
    """Exit 2, one line on stderr naming ``flag`` (and ``words``), no traceback."""
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert len(err.splitlines()) == 1, err
    assert flag in err, err
    for word in words:
        assert word in err, err


def _scenario(tmp: Path) -> str:
    path = tmp / "s.toml"
    path.write_text(SCENARIO)
    return str(path)


# ---- folders: what each bad --out looks like -------------------------------------------------


def link_to_folder(tmp: Path) -> Path:
    (tmp / "real").mkdir()
    (tmp / "link").symlink_to(tmp / "real")
    return tmp / "link"


def inside_foreign_folder(tmp: Path) -> Path:
    foreign = tmp / "foreign"
    foreign.mkdir()
    os.chown(foreign, FOREIGN_UID, FOREIGN_UID)
    return foreign / "out"


def foreign_empty_folder(tmp: Path) -> Path:
    foreign = tmp / "foreign-out"
    foreign.mkdir()
    os.chown(foreign, FOREIGN_UID, FOREIGN_UID)
    return foreign


def inside_world_writable_folder(tmp: Path) -> Path:
    shared = tmp / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # no sticky bit: anyone may rename or replace what root makes there
    return shared / "out"


BAD_FOLDERS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "symlink to a folder": (link_to_folder, "symbolic link"),
    "inside a folder of uid 1000": (inside_foreign_folder, "another user"),
    "an empty folder of uid 1000": (foreign_empty_folder, "another user"),
    "inside a world-writable folder": (inside_world_writable_folder, "writable by other users"),
}

# a command line of each command with --out; after the folders, a flag that is refused at once
OUT_COMMANDS: dict[str, Callable[[str, str], list[str]]] = {
    "run": lambda s, out: ["run", s, "--out", out, "--run-dir", "/dev/full"],
    "collective": lambda s, out: ["collective", s, "--out", out, "--run-dir", "/dev/full"],
    "compare": lambda s, out: ["compare", s, "--out", out, "--run-dir", "/dev/full"],
}


@pytest.mark.parametrize("command", list(OUT_COMMANDS))
@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_out_folder_root_may_not_own_is_refused(tmp_path, command, case):
    make, why = BAD_FOLDERS[case]
    out = make(tmp_path)
    proc = topolab(OUT_COMMANDS[command](_scenario(tmp_path), str(out)))
    assert_refused(proc, "--out", why)
    assert not (out / "results.json").exists()


@pytest.mark.parametrize("command", list(OUT_COMMANDS))
def test_out_in_a_sticky_shared_folder_passes(tmp_path, command):
    """The control: a folder everyone may write with the sticky bit (as /tmp) is accepted, so
    the refusals above are the folder's, not the command line's."""
    shared = tmp_path / "sticky"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    proc = topolab(OUT_COMMANDS[command](_scenario(tmp_path), str(shared / "out")))
    assert_refused(proc, "--run-dir", "/dev/full")


def test_default_results_folder_in_a_foreign_folder_is_refused(tmp_path):
    """Without --out, results/<scenario> is made in the working folder: one of uid 1000 is refused."""
    scenario = _scenario(tmp_path)
    cwd = tmp_path / "foreign-cwd"
    cwd.mkdir()
    os.chown(cwd, FOREIGN_UID, FOREIGN_UID)
    proc = topolab(["run", scenario, "--run-dir", "/dev/full"], cwd=cwd)
    assert_refused(proc, "--out", "another user")
    assert not (cwd / "results").exists()


@pytest.mark.parametrize(
    "case", ["symlink to a folder", "an empty folder of uid 1000", "inside a world-writable folder"]
)
def test_plan_out_file_in_a_folder_root_may_not_own_is_refused(tmp_path, case):
    """``plan --out FILE``: the same rule on the folder the file is written in."""
    make, why = BAD_FOLDERS[case]
    folder = make(tmp_path)
    if case == "inside a world-writable folder":
        folder = folder.parent  # the world-writable folder itself
    proc = topolab(["plan", _scenario(tmp_path), "--out", str(folder / "plan.json")])
    assert_refused(proc, "--out", why)
    assert not (folder / "plan.json").exists()


def test_plan_out_file_that_is_a_link_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    (tmp_path / "plan.json").symlink_to(victim)
    proc = topolab(["plan", _scenario(tmp_path), "--out", str(tmp_path / "plan.json")])
    assert_refused(proc, "--out", "symbolic link")
    assert victim.read_text() == PRECIOUS


# ---- result files: a link planted at a file's name inside a good folder ------------------------


def _results():
    from tests.fixtures.sample_results import smoke_results

    return smoke_results("complete", [2.0, 2.0, 2.0], 2.0)


def _plant(folder: Path, name: str) -> Path:
    victim = folder.parent / f"victim-{name}"
    victim.write_text(PRECIOUS)
    (folder / name).symlink_to(victim)
    return victim


@pytest.mark.parametrize("name", ["report.md", "topology.png", "link_bytes.png"])
def test_report_refuses_a_link_planted_at_its_files(tmp_path, name):
    from topolab.results.journal import write_results_file
    from topolab.results.run_report import write_report

    folder = tmp_path / "out"
    results = _results()
    write_results_file(results, folder)
    victim = _plant(folder, name)
    with pytest.raises(FileInputError, match="symbolic link"):
        write_report(results, folder)
    assert victim.read_text() == PRECIOUS
    assert (folder / name).is_symlink()


def test_results_file_and_journal_refuse_a_planted_link(tmp_path):
    from topolab.results.journal import ITERATIONS_FILE, RESULTS_FILE, IterationJournal, write_results_file

    folder = tmp_path / "out"
    folder.mkdir()
    results_victim = _plant(folder, RESULTS_FILE)
    journal_victim = _plant(folder, ITERATIONS_FILE)
    with pytest.raises(FileInputError, match="symbolic link"):
        write_results_file(_results(), folder)
    with pytest.raises(FileInputError, match="symbolic link"):
        IterationJournal(folder / ITERATIONS_FILE)
    assert results_victim.read_text() == PRECIOUS
    assert journal_victim.read_text() == PRECIOUS


def test_sweep_files_refuse_a_planted_link(tmp_path):
    from topolab.results.sweep_report import write_sweep

    folder = tmp_path / "out"
    folder.mkdir()
    victim = _plant(folder, "sweep.txt")
    with pytest.raises(FileInputError, match="symbolic link"):
        write_sweep(folder, {"rows": []}, draw_plot=False)
    assert victim.read_text() == PRECIOUS


def test_results_folder_swapped_for_a_link_after_the_check_is_refused(tmp_path):
    """`check_output_dir` passed on a missing folder; by the time results are written, a link
    stands there: the folder is not made through it."""
    from contract.errors import UsageError
    from topolab.common.options import check_output_dir
    from topolab.results.journal import write_results_file

    out = check_output_dir(tmp_path / "out", "--out")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.symlink_to(elsewhere)
    with pytest.raises(UsageError, match="--out .*symbolic link"):
        write_results_file(_results(), out)
    assert list(elsewhere.iterdir()) == []


# ---- --run-dir --------------------------------------------------------------------------------


def foreign_run_dir(tmp: Path) -> Path:
    run_dir = tmp / "run"
    run_dir.mkdir()
    os.chown(run_dir, FOREIGN_UID, FOREIGN_UID)
    return run_dir


def linked_run_dir(tmp: Path) -> Path:
    (tmp / "real-run").mkdir()
    (tmp / "run").symlink_to(tmp / "real-run")
    return tmp / "run"


def world_writable_run_dir(tmp: Path) -> Path:
    run_dir = tmp / "run"
    run_dir.mkdir()
    os.chmod(run_dir, 0o777)
    return run_dir


BAD_RUN_DIRS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "owned by uid 1000": (foreign_run_dir, "another user"),
    "a symbolic link": (linked_run_dir, "symbolic link"),
    "world-writable": (world_writable_run_dir, "writable by other users"),
}


@pytest.mark.parametrize("case", list(BAD_RUN_DIRS))
def test_clean_refuses_a_run_dir_root_may_not_own(tmp_path, case):
    make, why = BAD_RUN_DIRS[case]
    proc = topolab(["clean", "--run-dir", str(make(tmp_path))])
    assert_refused(proc, "--run-dir", why)


@pytest.mark.parametrize("case", list(BAD_RUN_DIRS))
def test_network_command_refuses_a_run_dir_root_may_not_own(tmp_path, case):
    make, why = BAD_RUN_DIRS[case]
    run_dir = make(tmp_path)
    args = ["run", _scenario(tmp_path), "--out", str(tmp_path / "out"), "--run-dir", str(run_dir)]
    proc = topolab([*args, "--cable-down", "bogus"])  # past the run folder, refused at once
    assert_refused(proc, "--run-dir", why)
    assert not (run_dir / "lock").exists()


@pytest.mark.parametrize("case", list(BAD_RUN_DIRS))
def test_emulator_refuses_a_run_dir_root_may_not_own(tmp_path, case):
    """The emulator's own check, for the default folder no flag names (and any caller)."""
    make, why = BAD_RUN_DIRS[case]
    run_dir = make(tmp_path)
    with pytest.raises(EmulationInputError, match=f"--run-dir .*{why}"):
        run_dir_path(str(run_dir / "sub"))
    assert not (run_dir / "sub").exists()


def test_run_dir_is_made_0755_in_a_good_folder(tmp_path):
    run_dir = tmp_path / "a" / "run"
    assert run_dir_path(str(run_dir)) == str(run_dir)
    assert run_dir.stat().st_mode & 0o777 == 0o755


def test_lock_planted_as_a_link_is_refused_not_truncated(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "lock").symlink_to(victim)
    with pytest.raises(EmulationInputError, match="--run-dir .*lock.*symbolic link"):
        RunLock(str(run_dir)).acquire()
    assert victim.read_text() == PRECIOUS


def test_state_tmp_planted_as_a_link_is_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    state = RunState.new(str(run_dir))
    Path(state.path + ".tmp").symlink_to(victim)
    state.save()
    assert victim.read_text() == PRECIOUS
    assert json.loads(Path(state.path).read_text())["run_id"] == state.run_id
    assert not os.path.lexists(state.path + ".tmp")
