"""Names that reach ssh: the user it logs in as, the machines it connects to, the files it
is given. Each is checked where it is read (the scenario's ``[emulation]`` table, a flag) and
then passed to ssh as data (``ssh ... -l USER -- HOST``, `emulator.cluster.ssh`).

topolab runs as root and reads scenarios that users share; a value that ssh took for an
option (``-oProxyCommand=...`` as a user, ``-J...`` as a machine) would run a command here
as root. So the shapes are narrow, ASCII only (a Cyrillic letter or a zero-width space that
looks like a valid name is refused, not looked up):

- a user: ``[a-z_][a-z0-9_-]{0,31}`` (the portable login name of useradd);
- a machine: an IPv4 or IPv6 address (no ``%scope``), or a host name by RFC 1123: dot-separated
  labels of letters, digits and ``-``, none starting or ending with ``-``, each at most 63
  characters, 253 in all, the last not all digits (``127.1`` or ``2130706433`` would reach
  the C resolver as an IPv4 address in a short form);
- a file ssh is given (``-i FILE``, ``-o UserKnownHostsFile=FILE``): not starting with ``-``,
  without whitespace, quotes, backslashes, ``%`` or control characters (ssh splits an option's
  value at whitespace and expands ``%`` tokens in it).

A refusal is an `SshInputError` (a `UsageError`, exit 2): one line naming the key or flag and
the value (its ``repr``, so a newline or a zero-width space shows).
"""

from __future__ import annotations

import ipaddress
import re
import socket

from .errors import UsageError

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
"""Names of this machine that the other machines cannot reach it at (see `check_machines`)."""
MAX_HOST_NAME = 253  # RFC 1123 section 2.1 / RFC 1035 section 2.3.4, without the trailing dot
_SSH_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
SSH_USER_SHAPE = "a lowercase letter or '_', then up to 31 of a-z, 0-9, '_', '-'"
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")  # RFC 1123: 63 at most
MACHINE_SHAPE = "an IPv4 or IPv6 address, or a host name of letters, digits, '-' and '.'"
_SSH_FILE_REFUSED = frozenset("\"'\\%")
SSH_FILE_SHAPE = "a path not starting with '-', without whitespace, quotes, '\\', '%' or control characters"


class SshInputError(UsageError):
    """A value that reaches ssh and has not the shape it must have: ``key`` (the scenario key
    or the flag) and the ``problem``, which names the value. Exit 2."""

    def __init__(self, key: str, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"{key}: {problem}")


def check_ssh_user(value: object, key: str) -> str:
    """``value`` if it is a user name ssh may log in as (`SSH_USER_SHAPE`), else `SshInputError`."""
    if not isinstance(value, str) or _SSH_USER.fullmatch(value) is None:
        raise SshInputError(key, f"must be a user name, got {value!r} ({SSH_USER_SHAPE})")
    return value


def check_machine(value: object, key: str) -> str:
    """``value`` if it is a machine address ssh may connect to (`MACHINE_SHAPE`), else
    `SshInputError`. Loopback is `check_machines`' refusal (a machine address may be one)."""
    if not isinstance(value, str) or not value.isascii() or not value.isprintable():
        raise _not_a_machine(value, key)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        pass
    else:
        if "%" in value:  # fe80::1%eth0: the scope names an interface of this machine
            raise SshInputError(key, f"{value!r} has an interface scope; give an address without '%'")
        return value
    labels = value.split(".")
    if (
        len(value) > MAX_HOST_NAME
        or not all(_HOST_LABEL.fullmatch(label) for label in labels)
        or labels[-1].isdigit()
        or _is_short_ipv4(value)
    ):
        raise _not_a_machine(value, key)
    return value


def _not_a_machine(value: object, key: str) -> SshInputError:
    return SshInputError(key, f"{value!r} is not a machine address ({MACHINE_SHAPE})")


def _is_short_ipv4(name: str) -> bool:
    """``name`` is an IPv4 address the C resolver reads in a form `ipaddress` does not
    (``0x7f000001``, ``127.1``): ssh would connect to it, the checks here would miss it."""
    try:
        socket.inet_aton(name)
    except OSError:
        return False
    return True


def check_machines(machines: object, key: str, *, tunnels: bool = True) -> tuple[str, ...]:
    """``machines`` (a list) as a tuple if they are distinct machine addresses (`check_machine`)
    and, with ``tunnels`` (a network is to be built over them), addresses the other machines
    can reach (no loopback: the address carries the tunnels); else `SshInputError`."""
    if not isinstance(machines, (tuple, list)) or not all(isinstance(m, str) for m in machines):
        raise SshInputError(key, f"expected a list of machine addresses, got {machines!r}")
    for machine in machines:
        check_machine(machine, key)
        if tunnels and (machine.lower() in LOOPBACK_NAMES or _is_loopback(machine)):
            raise SshInputError(
                key, f"{machine!r} is this machine's loopback; give the address the other machines reach it at"
            )
    if len(set(machines)) != len(machines):
        raise SshInputError(key, f"a machine is listed twice in {list(machines)}")
    return tuple(machines)


def _is_loopback(address: str) -> bool:
    """A loopback or unspecified address (``0.0.0.0`` and ``::`` reach this machine too),
    IPv4-mapped ones included; a host name is resolved only when the network is built."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return any(a.is_loopback or a.is_unspecified for a in (ip, mapped) if a is not None)


def machines_from_text(text: str, key: str, *, tunnels: bool = True) -> tuple[str, ...]:
    """A comma-separated list of machines (``--machines A,B,C``; spaces around a name are
    dropped) as `check_machines` returns it."""
    names = [name.strip(" ") for name in text.split(",")]
    names = [name for name in names if name]
    if not names:
        raise SshInputError(key, f"give one or more machine addresses, separated by commas, got {text!r}")
    return check_machines(names, key, tunnels=tunnels)


def check_ssh_file(value: object, key: str) -> str:
    """``value`` if ssh reads it as one file name (`SSH_FILE_SHAPE`), else `SshInputError`.
    Whether the file exists is checked when the network is built."""
    if (
        not isinstance(value, str)
        or not value
        or value.startswith("-")
        or not value.isprintable()
        or any(c.isspace() or c in _SSH_FILE_REFUSED for c in value)
    ):
        raise SshInputError(key, f"must be a file path, got {value!r} ({SSH_FILE_SHAPE})")
    return value
