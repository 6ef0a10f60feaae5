"""Files topolab reads and writes as root: regular files with a size cap in, folders it may
own and files that never follow a planted link out.

topolab runs as root on files people share (a scenario from a course page, a graph file or
a Chakra trace from another tool, a results folder). So:

- every input file is read with `read_capped` (or `read_capped_text`): it must be a regular
  file (a FIFO, a device such as ``/dev/zero`` or ``/dev/urandom``, a socket or a folder is
  refused before a byte is read, and opening never blocks), and at most ``limit`` bytes are
  read: ``limit + 1`` bytes are asked for, so a file that grows or lies in ``st_size``
  (``/proc`` files say 0) is refused too. `gunzip_capped` decompresses as a stream under a cap
  (a gzip bomb stops at the cap, not at the end of memory).
- every folder a command writes into is checked with `check_owned_folder`: it must be owned
  by a trusted user (root, the effective user, or the user who ran ``sudo``) and not be
  writable by group or others unless its sticky bit is set (``/tmp``), and it must not be a
  symbolic link; otherwise another user could swap a file in it for a link between the check
  and the write.
- every output file is written with `write_file`: ``O_NOFOLLOW`` (a link planted at the
  file's name is refused, never followed), and ``O_EXCL`` where the file must be new.

A refusal is a `FileInputError` (a `UsageError`, exit 2): one line naming the path and the
problem; callers that name a scenario key or a flag catch it and add theirs.
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from collections.abc import Mapping
from pathlib import Path

from .errors import UsageError

_READ_CHUNK = 1 << 20


class FileInputError(UsageError):
    """A file that cannot be read or written safely: ``path`` and the ``problem``."""

    def __init__(self, path: str | os.PathLike[str], problem: str):
        self.path, self.problem = str(path), problem
        super().__init__(f"{self.path}: {problem}")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    return "is not a regular file"


def read_capped(path: str | os.PathLike[str], limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; a `FileInputError`
    naming ``path`` for a missing file, a folder, a special file, an unreadable one or one
    larger than ``limit`` (``what`` names the kind of file in that message)."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileInputError(path, f"no such {what}") from None
    except OSError as err:
        raise FileInputError(path, f"cannot read: {err.strerror}") from None
    except ValueError:  # a NUL byte in the name
        raise FileInputError(repr(str(path)), "a file name with a NUL byte") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileInputError(path, _kind(mode))
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(_READ_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise FileInputError(path, f"larger than {limit:,} bytes: not a {what}")
        return b"".join(chunks)
    except OSError as err:
        raise FileInputError(path, f"cannot read: {err.strerror}") from None
    finally:
        os.close(fd)


def read_capped_text(path: str | os.PathLike[str], limit: int, what: str = "file") -> str:
    """`read_capped`, decoded as UTF-8 (a byte-order mark is dropped); a file that is not
    UTF-8, or holds NUL bytes, is a `FileInputError` naming the first bad byte."""
    raw = read_capped(path, limit, what)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise FileInputError(
            path, f"not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}): not a {what}"
        ) from None
    if "\x00" in text:
        raise FileInputError(path, f"contains NUL bytes (UTF-16?): not a {what}")
    return text


def gunzip_capped(raw: bytes, limit: int, path: str | os.PathLike[str], what: str = "file") -> bytes:
    """``raw`` (gzip, one or more members) decompressed as a stream, at most ``limit`` bytes
    out; a bomb or a broken stream is a `FileInputError` naming ``path``."""
    out: list[bytes] = []
    size = 0
    data = raw
    try:
        while data:
            inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            while data:
                chunk = inflate.decompress(data, limit + 1 - size)
                out.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise FileInputError(path, f"decompresses to more than {limit:,} bytes: not a {what}")
                data = inflate.unconsumed_tail
                if inflate.eof:
                    break
                if not chunk and not data:
                    break
            if not inflate.eof:
                raise FileInputError(path, f"a broken gzip stream (it ends early): not a {what}")
            data = inflate.unused_data
    except zlib.error as err:
        raise FileInputError(path, f"a broken gzip stream ({err}): not a {what}") from None
    return b"".join(out)


def trusted_owners(environ: Mapping[str, str] = os.environ) -> frozenset[int]:
    """The users whose folders this process may write into: root, the effective user, and
    the user who ran ``sudo`` (``SUDO_UID``: they could run anything as root already)."""
    owners = {0, os.geteuid()}
    sudo = environ.get("SUDO_UID", "")
    if sudo.isdigit():
        owners.add(int(sudo))
    return frozenset(owners)


def folder_problem(path: str | os.PathLike[str], owners: frozenset[int] | None = None) -> str | None:
    """Why the existing folder ``path`` is not safe to write into, or None: a symbolic link,
    not a folder, owned by a user other than ``owners`` (`trusted_owners`), or writable by
    group or others without the sticky bit."""
    owners = trusted_owners() if owners is None else owners
    try:
        st = os.lstat(path)
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link; give the folder it points to"
    if not stat.S_ISDIR(st.st_mode):
        return "exists and is not a folder"
    if st.st_uid not in owners:
        return f"is owned by another user (uid {st.st_uid}); root writes only into folders it or you own"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return "is writable by other users (no sticky bit); choose a folder only you can write"
    return None


def nearest_existing(path: str | os.PathLike[str]) -> Path:
    """``path`` itself if it exists (even as a dangling link), else its nearest ancestor that does."""
    target = Path(path)
    while not os.path.lexists(target) and target != target.parent:
        target = target.parent
    return target


def check_owned_folder(path: str | os.PathLike[str], owners: frozenset[int] | None = None) -> Path:
    """``path`` (a folder, existing or to be made): the folder, or where it would be made (its
    nearest existing ancestor), passes `folder_problem`; a `FileInputError` names the one that
    does not. Nothing is created."""
    target = Path(path)
    existing = nearest_existing(target)
    problem = folder_problem(existing, owners)
    if problem is not None:
        shown = target if existing == target else f"{target} (its folder {existing})"
        raise FileInputError(shown, problem)
    return target


def make_owned_folder(path: str | os.PathLike[str], mode: int = 0o755) -> Path:
    """Create ``path`` and its missing parents (``mode``), after `check_owned_folder`; the
    folder itself is checked again once it exists (a link raced in is refused)."""
    target = check_owned_folder(path)
    os.makedirs(target, mode=mode, exist_ok=True)
    problem = folder_problem(target)
    if problem is not None:
        raise FileInputError(target, problem)
    return target


def write_file(path: str | os.PathLike[str], data: bytes | str, *, exclusive: bool = False, mode: int = 0o644) -> None:
    """Write ``data`` (text as UTF-8) to ``path``, never through a symbolic link at its name
    (``O_NOFOLLOW``); ``exclusive``: the file must not exist yet (``O_EXCL``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    flags |= os.O_EXCL if exclusive else os.O_TRUNC
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd = os.open(path, flags, mode)
    except ValueError:  # a NUL byte in the name
        raise FileInputError(repr(str(path)), "a file name with a NUL byte") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise FileInputError(path, "is a symbolic link; refusing to write through it") from None
        if err.errno == errno.EEXIST:
            raise FileInputError(path, "exists already; refusing to overwrite it") from None
        raise FileInputError(path, f"cannot write: {err.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileInputError(path, "is not a regular file; refusing to write to it")
        view = memoryview(payload)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError as err:
        raise FileInputError(path, f"cannot write: {err.strerror}") from None
    finally:
        os.close(fd)


def open_for_append(path: str | os.PathLike[str], mode: int = 0o644) -> int:
    """A descriptor to write ``path`` from its start, made new or truncated, never through a
    symbolic link (``O_NOFOLLOW``): for files written line by line (a journal)."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise FileInputError(path, "is a symbolic link; refusing to write through it") from None
        raise FileInputError(path, f"cannot write: {err.strerror}") from None
