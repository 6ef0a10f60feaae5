"""`topolab clean` reads its run folder as evidence, not as orders.

A state file names processes and namespaces; clean ends processes only in a namespace that a
recorded process still holds and in which a process of root carries the run's mark
(``TOPOLAB_RUN=<run id>``). A forged state file naming a process in a namespace that is not
the run's (here one the test makes with ``unshare -n``, standing for a container or a
service's private network) gets nothing killed; state files of the wrong name, kind, owner,
size or shape are skipped with one line each.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from emulator import nsutil
from emulator.state import ENV_MARK, clean_dead_runs

REPO = Path(__file__).resolve().parents[2]
TOPOLAB = str(REPO / ".venv" / "bin" / "topolab")
FOREIGN_UID = 1000
DEAD_OWNER = 4242  # with start time 1 (a tick after boot): no process that runs now
RUN_ID = f"{DEAD_OWNER}-1"

pytestmark = pytest.mark.root


def _in_new_netns(*prefix: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``sleep 60`` in a network namespace of its own (``prefix``: run before sleep, in it),
    once it is there with its environment in place.

    The kernel names the new program (``/proc/PID/exe``) before it lays out the program's
    arguments and environment, so ``exe`` alone does not show that ``/proc/PID/environ`` holds
    the environment yet: read in that moment it is empty (the kernel sets its end last), and
    the run's mark is not seen."""
    proc = subprocess.Popen(["unshare", "-n", *prefix, "sleep", "60"], env=env)
    ours = nsutil.netns_inode(os.getpid())
    for _ in range(500):
        ino = nsutil.netns_inode(proc.pid)
        if ino is not None and ino != ours and os.readlink(f"/proc/{proc.pid}/exe").endswith("sleep"):
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                if f.read():
                    return proc
        proc.poll()
        assert proc.returncode is None, "unshare -n failed"
        subprocess.run(["true"])  # a moment, without a clock
    raise AssertionError("the process did not reach its namespace")


def _forged_state(outsider: subprocess.Popen) -> dict:
    """A state file of a dead run that claims ``outsider`` as its host shell and process."""
    entry = {"pid": outsider.pid, "start": nsutil.start_time(outsider.pid)}
    return {
        "run_id": RUN_ID,
        "owner_pid": DEAD_OWNER,
        "owner_start": 1,
        "argv": ["topolab", "run"],
        "hosts": {"h0": {**entry, "netns": nsutil.netns_inode(outsider.pid)}},
        "procs": [{**entry, "argv0": "sleep"}],
    }


def _end(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_forged_state_file_does_not_kill_a_process_of_another_namespace(tmp_path):
    outsider = _in_new_netns()
    try:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / f"run-{DEAD_OWNER}.json").write_text(json.dumps(_forged_state(outsider)))
        proc = subprocess.run(
            [TOPOLAB, "clean", "--run-dir", str(run_dir), "--json"], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["killed"] == []
        assert outsider.poll() is None, "clean killed a process of a namespace that is not the run's"
        assert "left 1 namespace(s) alone" in proc.stderr
    finally:
        _end(outsider)


def test_a_mark_set_by_another_user_proves_nothing(tmp_path):
    """A user who can run processes in a namespace can set any environment: a process of uid
    1000 carrying the run's mark there does not make that namespace the run's."""
    env = {**os.environ, ENV_MARK: RUN_ID}
    outsider = _in_new_netns("setpriv", f"--reuid={FOREIGN_UID}", f"--regid={FOREIGN_UID}", "--clear-groups", env=env)
    try:
        (tmp_path / f"run-{DEAD_OWNER}.json").write_text(json.dumps(_forged_state(outsider)))
        report = clean_dead_runs(str(tmp_path), log=lambda msg: None)
        assert report.killed == []
        assert report.runs_cleaned == [RUN_ID]  # the stale file itself is gone
        assert outsider.poll() is None
    finally:
        _end(outsider)


def test_a_root_process_carrying_the_mark_makes_the_namespace_the_runs(tmp_path):
    """The control: the same state file, and the namespace holds a process of root carrying
    the run's mark (as `EmulatedNetwork.popen` starts them): clean ends it."""
    outsider = _in_new_netns(env={**os.environ, ENV_MARK: RUN_ID})
    try:
        (tmp_path / f"run-{DEAD_OWNER}.json").write_text(json.dumps(_forged_state(outsider)))
        report = clean_dead_runs(str(tmp_path), log=lambda msg: None)
        assert report.killed == [outsider.pid]
        outsider.wait(timeout=10)
    finally:
        _end(outsider)


def _valid(owner: int = DEAD_OWNER) -> dict:
    return {"run_id": f"{owner}-1", "owner_pid": owner, "owner_start": 1, "argv": [], "hosts": {}, "procs": []}


def _write(path: Path, doc: object) -> None:
    path.write_text(json.dumps(doc))


def _state_cap() -> int:
    from emulator.state import MAX_STATE_BYTES

    return MAX_STATE_BYTES


BAD_FILES = {
    "a link to a valid state file": lambda d: (
        _write(d.parent / "elsewhere.json", _valid(11)) or (d / "run-11.json").symlink_to(d.parent / "elsewhere.json")
    ),
    "a file of uid 1000": lambda d: (
        _write(d / "run-12.json", _valid(12)) or os.chown(d / "run-12.json", FOREIGN_UID, 0)
    ),
    "a folder": lambda d: (d / "run-13.json").mkdir(),
    "a FIFO": lambda d: os.mkfifo(d / "run-14.json"),
    "larger than the cap": lambda d: _write(d / "run-15.json", {**_valid(15), "argv": ["x" * _state_cap()]}),
    "not JSON": lambda d: (d / "run-16.json").write_text("{not json"),
    "deeply nested JSON": lambda d: (d / "run-17.json").write_text("[" * 100_000 + "]" * 100_000),
    "a name without a pid": lambda d: _write(d / "run-x.json", _valid()),
    "owner_pid a string": lambda d: _write(d / "run-18.json", {**_valid(18), "owner_pid": "18"}),
    "owner_pid not the name's": lambda d: _write(d / "run-19.json", _valid(20)),
    "run_id not the owner's": lambda d: _write(d / "run-21.json", {**_valid(21), "run_id": "1-1"}),
    "hosts a list": lambda d: _write(d / "run-22.json", {**_valid(22), "hosts": [{"pid": 1}]}),
    "a host pid a float": lambda d: _write(
        d / "run-23.json", {**_valid(23), "hosts": {"h0": {"pid": 1.5, "start": 1, "netns": 5}}}
    ),
    "a process pid true": lambda d: _write(
        d / "run-24.json", {**_valid(24), "procs": [{"pid": True, "start": 1, "argv0": "x"}]}
    ),
    "a netns a string": lambda d: _write(
        d / "run-25.json", {**_valid(25), "hosts": {"h0": {"pid": 2, "start": 1, "netns": "4026531840"}}}
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_state_files_not_of_the_expected_kind_and_shape_are_skipped_with_one_line(tmp_path, case):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    BAD_FILES[case](run_dir)
    lines: list[str] = []
    report = clean_dead_runs(str(run_dir), log=lines.append)
    assert report.runs_cleaned == [] and report.killed == []
    assert len(lines) == 1 and "skipped" in lines[0], lines
    assert len(os.listdir(run_dir)) == 1  # left as it was, for a person to look at


def test_lock_and_tmp_files_are_not_state_files(tmp_path):
    (tmp_path / "lock").write_text("pid 1: topolab run")
    _write(tmp_path / f"run-{DEAD_OWNER}.json.tmp", _valid())
    lines: list[str] = []
    report = clean_dead_runs(str(tmp_path), log=lines.append)
    assert report.runs_cleaned == [] and lines == []
