"""Names that reach ssh (issue 45, finding 1): a scenario's ``[emulation] ssh_user`` and
``machines``, and the flags ``--machines``, ``clean --ssh-user``/``--machines``/
``--ssh-identity``/``--ssh-known-hosts``, are checked where they are read (contract/names.py),
and ssh gets them as data: ``ssh [options] -l USER -- HOST [command]``.

What ssh would do with an argv is asked of ssh itself with ``ssh -G``, which prints the
configuration it resolved and connects nowhere (and runs no ProxyCommand)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.errors import UsageError
from emulator.cluster import ssh as ssh_module
from emulator.cluster.ssh import Machine, SshOptions, clean_control_dirs
from emulator.nsutil import process_id
from planner import load_scenario
from topolab.cli import main

REPO = Path(__file__).resolve().parents[2]
BASE_SCENARIO = REPO / "scenarios" / "smoke-12.toml"
GOOD_MACHINE = "192.0.2.9"  # TEST-NET-1: nothing here connects to it
CLI_TIMEOUT_S = 30

# Each is refused as a user and as a machine: ssh options (the ProxyCommand user,
# a jump host), shell syntax, a newline, a zero-width space, Cyrillic look-alikes, empty.
HOSTILE = [
    "-oProxyCommand=id>/tmp/x;#",
    "-l",
    "-J192.0.2.77",
    "-machine",
    "$(id)",
    "`id`",
    "a;id",
    "root\nProxyCommand id",
    "192.0.2.9\n",  # a regex's $ would let a trailing newline through
    "ro\u200bot",  # zero-width space
    "r\u043e\u043et",  # Cyrillic o's: looks like "root"
    "\u0455erver",  # Cyrillic dze: looks like "server"
    "root@192.0.2.9",
    "a b",
    "a\tb",
    "",
]
HOSTILE_USERS = [*HOSTILE, "Root", "1root", "u" * 33, "r%h"]
LOOPBACK = ["::ffff:127.0.0.1", "0.0.0.0"]  # well-formed, refused where a network is built over them
HOSTILE_MACHINES = [
    *HOSTILE,
    *LOOPBACK,
    "127.1",  # the C resolver reads these as 127.0.0.1: malformed, as ipaddress sees it
    "0x7f000001",
    "2130706433",
    "fe80::1%eth0",
    "a..b",
    "-a.example",
    "a-.example",
    "x" * 64 + ".example",
    ".".join(["a" * 63] * 4) + ".b",  # 254 characters
]
GOOD_USERS = ["root", "_svc", "ops-user_9", "u" * 32]
GOOD_MACHINES = ["192.0.2.201", "2001:db8::1", "node-1.lab.example", "m0", "a" * 63 + ".lab"]


def _toml_string(value: str) -> str:
    """``value`` as a TOML basic string, every non-printable or non-ASCII character escaped."""
    out = []
    for c in value:
        if c.isascii() and c.isprintable() and c not in '"\\':
            out.append(c)
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
    return '"' + "".join(out) + '"'


def _scenario(tmp_path: Path, machines: list[str], user: str) -> Path:
    keys = f"machines = [{', '.join(_toml_string(m) for m in machines)}]\nssh_user = {_toml_string(user)}\n"
    text = BASE_SCENARIO.read_text()
    assert text.count("[emulation]\n") == 1
    path = tmp_path / "hostile.toml"
    path.write_text(text.replace("[emulation]\n", "[emulation]\n" + keys))
    return path


def _assert_one_line_naming(message: str, key: str, value: str) -> None:
    assert "\n" not in message.rstrip("\n") and "Traceback" not in message, message
    assert f"{key}: " in message and repr(value) in message, message


# -- (a) refused where they are read: the scenario loader ----------------------------------


@pytest.mark.parametrize("user", HOSTILE_USERS)
def test_scenario_ssh_user_is_a_login_name(tmp_path: Path, user: str) -> None:
    with pytest.raises(UsageError) as err:
        load_scenario(_scenario(tmp_path, [GOOD_MACHINE], user))
    _assert_one_line_naming(str(err.value), "emulation.ssh_user", user)


@pytest.mark.parametrize("machine", HOSTILE_MACHINES)
def test_scenario_machines_are_addresses_or_host_names(tmp_path: Path, machine: str) -> None:
    with pytest.raises(UsageError) as err:
        load_scenario(_scenario(tmp_path, [GOOD_MACHINE, machine], "root"))
    _assert_one_line_naming(str(err.value), "emulation.machines", machine)


def test_scenario_good_names_load(tmp_path: Path) -> None:
    for user in GOOD_USERS:
        emulation = load_scenario(_scenario(tmp_path, GOOD_MACHINES, user)).emulation
        assert (emulation.machines, emulation.ssh_user) == (tuple(GOOD_MACHINES), user)


@pytest.mark.parametrize("key", ["ssh_identity", "ssh_known_hosts"])
@pytest.mark.parametrize("path", ["-oProxyCommand=id", "/tmp/key\nProxyCommand id", "/tmp/k\x00", "/a b", "/k%d"])
def test_scenario_ssh_files_are_one_path_each(tmp_path: Path, key: str, path: str) -> None:
    # ssh gets them as "-i FILE" and "-o UserKnownHostsFile=FILE": an option's value, which
    # ssh splits at whitespace and expands '%' tokens in
    scenario = _scenario(tmp_path, [GOOD_MACHINE], "root")
    scenario.write_text(scenario.read_text().replace("[emulation]\n", f"[emulation]\n{key} = {_toml_string(path)}\n"))
    with pytest.raises(UsageError) as err:
        load_scenario(scenario)
    _assert_one_line_naming(str(err.value), f"emulation.{key}", path)


# -- (a) refused where they are read: the flags --------------------------------------------


def _cli(capsys, argv: list[str]) -> str:
    """``topolab ARGV`` in this process: exit 2 and its one line on stderr."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize("machine", HOSTILE_MACHINES)
def test_flag_machines_is_refused_in_one_line(tmp_path: Path, capsys, machine: str) -> None:
    # clean takes what a network was built over; a loopback address it is given is only unreachable
    run_dir = str(tmp_path / "run")
    verify = _cli(capsys, ["verify", str(BASE_SCENARIO), f"--machines={machine}", "--run-dir", run_dir])
    errors = [verify]
    if machine not in LOOPBACK:
        listed = machine if machine.strip(" ") == "" else f"{GOOD_MACHINE},{machine}"  # "a,,b" is a and b
        errors.append(_cli(capsys, ["clean", "--run-dir", run_dir, f"--machines={listed}"]))
    for err in errors:
        if machine.strip(" ") == "":
            assert "--machines: give one or more machine addresses" in err, err
            continue
        _assert_one_line_naming(err, "--machines", machine)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("user", HOSTILE_USERS)
def test_flag_clean_ssh_user_is_refused_in_one_line(tmp_path: Path, capsys, user: str) -> None:
    err = _cli(capsys, ["clean", "--run-dir", str(tmp_path / "run"), "--machines", GOOD_MACHINE, f"--ssh-user={user}"])
    _assert_one_line_naming(err, "--ssh-user", user)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag", ["--ssh-identity", "--ssh-known-hosts"])
def test_flag_clean_ssh_files_are_refused_in_one_line(tmp_path: Path, capsys, flag: str) -> None:
    for path in ("-oProxyCommand=id", "/tmp/key\nProxyCommand id", "/a b"):
        err = _cli(capsys, ["clean", "--run-dir", str(tmp_path / "run"), "--machines", GOOD_MACHINE, f"{flag}={path}"])
        _assert_one_line_naming(err, flag, path)


@pytest.mark.parametrize(
    ("argv", "flag", "value"),
    [
        (
            ["clean", "--machines", GOOD_MACHINE, "--ssh-user=-oProxyCommand=id>/tmp/x;#"],
            "--ssh-user",
            "-oProxyCommand=id>/tmp/x;#",
        ),
        (["clean", "--machines", GOOD_MACHINE, "--ssh-user=ro\u200bot"], "--ssh-user", "ro\u200bot"),
        (["clean", "--machines=-J192.0.2.77"], "--machines", "-J192.0.2.77"),
        (["clean", "--machines", "192.0.2.9\n"], "--machines", "192.0.2.9\n"),
        (["verify", str(BASE_SCENARIO), "--machines=$(id)"], "--machines", "$(id)"),
        (["verify", str(BASE_SCENARIO), "--machines", "-J192.0.2.77"], "--machines", None),  # argparse: no value
    ],
)
def test_installed_command_refuses_in_one_line(tmp_path: Path, argv: list[str], flag: str, value: str | None) -> None:
    # the real entry point, in a process of its own: exit 2, one line, no traceback
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "topolab", *argv, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=CLI_TIMEOUT_S,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and flag in done.stderr and "Traceback" not in done.stderr, done.stderr
    if value is not None:
        assert repr(value) in done.stderr, done.stderr
    assert done.stdout == "" and not run_dir.exists()


# -- (b), (c) what ssh gets: -l USER -- HOST, as ssh -G resolves it --------------------------

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")


def _ssh_calls(monkeypatch, ssh: SshOptions, machine: Machine) -> list[list[str]]:
    """Every argv `SshOptions` gives subprocess for ``machine``: a script, a forwarded
    socket, the master's exit (nothing is run)."""
    calls: list[list[str]] = []

    def record(argv, **_kwargs):
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, stdout="", stderr="")

    with monkeypatch.context() as patch:
        patch.setattr(ssh_module.subprocess, "run", record)
        ssh.run(machine, "true\n", 5, "probe")
        ssh.forward_socket(machine, "/run/topolab/ctl.sock", "/tmp/ctl.sock")
        ssh.exit_master(machine)
    assert len(calls) == 3
    return calls


SCRIPT_COMMAND = ["sh", "-s"]  # what `SshOptions.run` has the machine run (the script on stdin)
STAND_IN_COMMAND = "true"  # the remote command ssh -G is given instead: a word that could pass for a host


def _resolved(argv: list[str]) -> dict[str, list[str]]:
    """``ssh -G`` of ``argv`` with its remote command replaced by ``true`` (every option
    kept): the configuration ssh resolved, keyword -> values; ``{}`` if ssh refused the argv."""
    if argv[-len(SCRIPT_COMMAND) :] == SCRIPT_COMMAND:
        argv = argv[: -len(SCRIPT_COMMAND)]
    start = argv.index("ssh")
    done = subprocess.run(
        ["ssh", "-G", *argv[start + 1 :], STAND_IN_COMMAND], capture_output=True, text=True, timeout=10
    )
    config: dict[str, list[str]] = {}
    if done.returncode != 0:
        return config
    for line in done.stdout.splitlines():
        keyword, _, value = line.partition(" ")
        config.setdefault(keyword.lower(), []).append(value)
    return config


@pytest.fixture
def control_dir() -> Iterator[Path]:
    """A short folder for the control sockets' paths (a socket's path must fit in 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="tls-", dir="/tmp") as folder:
        yield Path(folder)


def _options(tmp_path: Path, control_dir: Path, user: str) -> SshOptions:
    identity, known = tmp_path / "id_key", tmp_path / "known_hosts"
    identity.write_text("")
    known.write_text("")
    return SshOptions(control_dir=control_dir, user=user, identity=identity, known_hosts=known)


@needs_ssh
@pytest.mark.parametrize("machine", GOOD_MACHINES)
@pytest.mark.parametrize("user", GOOD_USERS[:2])
def test_ssh_resolves_the_machine_and_the_user_and_nothing_else(
    tmp_path, control_dir, monkeypatch, user, machine
) -> None:
    ssh = _options(tmp_path, control_dir, user)
    for argv in _ssh_calls(monkeypatch, ssh, Machine("m0", machine)):
        config = _resolved(argv)
        assert config.get("hostname") == [machine.lower()], (argv, config)
        assert config.get("user") == [user], (argv, config)
        assert "proxycommand" not in config and "localcommand" not in config and "proxyjump" not in config
        assert config.get("userknownhostsfile") == [str(tmp_path / "known_hosts")]  # one file, as given
        # (c) the user is an option's value and the host comes right after "--"
        dashes = argv.index("--")
        assert argv.count("--") == 1 and argv[dashes - 2 : dashes + 2] == ["-l", user, "--", machine], argv
        assert not any("@" in arg for arg in argv), argv


@needs_ssh
@pytest.mark.parametrize("hostile", ["-oProxyCommand=id>/tmp/x;#", "-oLocalCommand=id", "-J192.0.2.77"])
def test_even_an_unchecked_name_stays_data(tmp_path, control_dir, monkeypatch, hostile) -> None:
    # past the checks (set on the frozen objects by force), the argv's shape alone keeps a
    # name from becoming an option: ssh takes it as a user name or a host name, or refuses it
    ssh = _options(tmp_path, control_dir, "root")
    machine = Machine("m0", GOOD_MACHINE)
    object.__setattr__(ssh, "user", hostile)
    as_user = _ssh_calls(monkeypatch, ssh, machine)
    object.__setattr__(ssh, "user", "root")
    object.__setattr__(machine, "address", hostile)
    as_machine = _ssh_calls(monkeypatch, ssh, machine)
    for argv in as_user + as_machine:
        config = _resolved(argv)
        assert not {"proxycommand", "localcommand", "proxyjump"} & set(config), (argv, config)
        assert config.get("hostname", [None]) != [STAND_IN_COMMAND], (argv, config)  # nor the command the host


def test_clean_control_dirs_passes_the_host_after_dashes(tmp_path, monkeypatch) -> None:
    # a dead driver's control directory: its masters are ended with "-O exit -- master"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead_id = process_id(dead.pid)
    dead.wait()
    gone = tmp_path / f"tlcl-{dead_id}-abc123"
    gone.mkdir(mode=0o700)
    (gone / "192.0.2.201").write_text("")  # a master's socket, named after its machine
    (gone / "-oProxyCommand=id").write_text("")  # not a name a session makes: never given to ssh
    calls: list[list[str]] = []
    monkeypatch.setattr(
        ssh_module.subprocess,
        "run",
        lambda argv, **_kw: calls.append(list(argv)) or subprocess.CompletedProcess(argv, 0),
    )
    assert clean_control_dirs(log=lambda _m: None) == [str(gone)]
    (argv,) = calls
    assert argv[-3:] == ["exit", "--", "master"] and argv[-4] == "-O"
    assert argv[argv.index("-o") + 1] == f"ControlPath={gone / '192.0.2.201'}"
    assert not gone.exists()


def test_clean_control_dirs_leaves_a_folder_others_can_write(tmp_path, monkeypatch) -> None:
    # a folder of that name in a shared /tmp may be anyone's: not ours to run ssh in or remove
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead_id = process_id(dead.pid)
    dead.wait()
    planted = tmp_path / f"tlcl-{dead_id}-abc123"
    planted.mkdir()
    planted.chmod(0o777)
    (planted / "192.0.2.201").write_text("")
    calls: list[list[str]] = []
    monkeypatch.setattr(ssh_module.subprocess, "run", lambda argv, **_kw: calls.append(list(argv)))
    assert clean_control_dirs(log=lambda _m: None) == []
    assert calls == [] and (planted / "192.0.2.201").exists()
