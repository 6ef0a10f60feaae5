"""The Vagrant VM (vagrant/): its scripts parse, its network stays out of the emulated range, and
(opt-in, marked `vm`) vagrant/check.sh boots the VM, runs the default scenario verified inside it,
brings results/topoopt-12 back and leaves nothing behind.

The full check takes 30-60 minutes under software emulation on 2 cores, so it runs only with
TOPOLAB_VM_CHECK=1, as root (`TOPOLAB_VM_CHECK=1 flock /tmp/topolab-emu.lock .venv/bin/python -m
pytest tests/vagrant -m vm`); CI's default run skips it."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VAGRANT = REPO / "vagrant"
EMULATED = ipaddress.ip_network("198.18.0.0/15")


def local_env() -> dict[str, str]:
    lines = (VAGRANT / "local.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


@pytest.mark.parametrize("script", sorted(p.name for p in VAGRANT.glob("*.sh")))
def test_script_parses(script: str) -> None:
    result = subprocess.run(["bash", "-n", str(VAGRANT / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_local_network_is_outside_the_emulated_range() -> None:
    net = ipaddress.ip_network(local_env()["TOPOLAB_VM_NETWORK_ADDRESS"])
    assert net.prefixlen == 24  # libvirt.sh builds a /24
    assert not net.overlaps(EMULATED)


def _leftovers() -> str:
    return subprocess.run(
        ["bash", str(VAGRANT / "libvirt.sh"), "status"], capture_output=True, text=True, timeout=120
    ).stdout.strip()


@pytest.mark.vm
@pytest.mark.slow
@pytest.mark.root
@pytest.mark.timeout(4 * 3600)
@pytest.mark.skipif(
    os.environ.get("TOPOLAB_VM_CHECK") != "1", reason="boots a VM for up to an hour: set TOPOLAB_VM_CHECK=1"
)
def test_check_sh_runs_the_default_scenario_in_the_vm() -> None:
    results = REPO / "results" / "topoopt-12" / "results.json"
    before = results.read_text() if results.exists() else None

    done = subprocess.run(["bash", str(VAGRANT / "check.sh")], capture_output=True, text=True, timeout=4 * 3600 - 60)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nothing of the VM is left" in done.stdout
    assert results.exists()
    after = results.read_text()
    assert after != before  # a new run, not an earlier one left on the host
    run = json.loads(after)
    assert run["status"] == "complete"
    assert run["summary"]["verified"] is True
    assert run["summary"]["iterations"] >= 1
    assert _leftovers() == ""


def test_the_vms_copy_leaves_out_only_the_root_folders_it_names() -> None:
    """rsync reads an exclude without a leading "/" at every depth: "results/" dropped the
    topolab/results/ package from the VM's copy, and the run inside failed to import it."""
    import re

    text = (VAGRANT / "Vagrantfile").read_text()
    excludes = re.findall(r'"([^"]+)"', re.search(r"rsync__exclude:\s*\[([^\]]*)\]", text).group(1))
    assert excludes, "no rsync__exclude in the Vagrantfile"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for pattern in excludes:
        assert pattern.startswith("/"), f"{pattern!r} would match at any depth of the copy"
        folder = pattern.strip("/")
        dropped = [path for path in tracked if path == folder or path.startswith(folder + "/")]
        assert not dropped, f"{pattern!r} leaves tracked files out of the VM: {dropped[:3]}"
