"""Files written whole or not at all: a temporary name beside the target, renamed at the end.

Every file perfledger writes goes through :func:`replacing` (or the helpers on top of it), so
an interrupted run never leaves a half-written file under its final name. Also here: what
tells perfledger's own folders from the user's (profiles, staging folders), and the opening of
an input that must be a regular file (:func:`open_regular`: a named pipe or a device named
like a trace is refused, never waited on nor read).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from perfledger.errors import PerfledgerError


def temporary_name(path: Path) -> Path:
    """The hidden name a file is written under before it is renamed to ``path``."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path to write; renamed onto ``path`` when the block ends, removed on error.

    The file gets the usual permissions (0666 less the umask), whatever wrote it.
    """
    temporary = temporary_name(path)
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name."""
    with replacing(path) as temporary:
        temporary.write_bytes(data)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary name."""
    write_bytes(path, text.encode("utf-8"))


def json_text(document: Any) -> str:
    """Deterministic JSON: key order as given, 2-space indent, no NaN, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, document: Any) -> None:
    """Write ``document`` as :func:`json_text` through a temporary name."""
    write_text(path, json_text(document))


# --- perfledger's own outputs -------------------------------------------------------------------

# The two documents every profile directory has (profiledir.layout names them too).
PROFILE_META: Final = "meta.json"
PROFILE_SUMMARY: Final = "summary.json"
# Folders a run works in before its output takes its final name: ``.NAME.partial-PID`` (a
# profile being written), ``.NAME.old-PID`` (the profile it replaces), ``.NAME.record-PID``
# (the traces of a recording), and files written through ``.NAME.PID.tmp``.
STAGING_NAME: Final = re.compile(r"^\.(?P<name>.+)\.(?P<kind>partial|old|record)-(?P<pid>\d+)$")
_TEMPORARY_NAME: Final = re.compile(r"^\..+\.\d+\.tmp$")
# The file each profile staging folder (partial, old) holds while it is perfledger's: the pid of
# the run that made it. A folder is removed as a dead run's leftover only with this mark inside:
# a name alone (``.emacs.d.old-2023``) is the user's.
STAGING_MARK: Final = ".perfledger-staging"


def is_profile_dir(path: Path) -> bool:
    """Whether ``path`` is a folder perfledger wrote: its meta.json says so.

    The meta.json must be a file of its own (not a link), a JSON object with an integer
    ``format_version`` and a ``tool_version``, beside a summary.json.
    """
    try:
        if path.is_symlink() or not path.is_dir():
            return False
        meta = path / PROFILE_META
        if meta.is_symlink() or not meta.is_file() or not (path / PROFILE_SUMMARY).is_file():
            return False
        if meta.stat().st_size > 1 << 24:
            return False
        data = meta.read_bytes()
    except OSError:
        return False
    return own_document(data) is not None


def own_document(data: bytes) -> dict[str, Any] | None:
    """The JSON object ``data`` holds when perfledger wrote it (an integer
    ``format_version`` and a ``tool_version``: meta.json, diff.json), else None."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    version = document.get("format_version")
    if isinstance(version, int) and not isinstance(version, bool):
        return document if isinstance(document.get("tool_version"), str) else None
    return None


def is_own_output(path: Path) -> bool:
    """A profile, staging folder or temporary file of perfledger: never read as a trace."""
    name = path.name
    return bool(STAGING_NAME.match(name) or _TEMPORARY_NAME.match(name)) or is_profile_dir(path)


# A file perfledger may replace is read whole to tell whether it wrote it; its files of fixed
# names (diff.json, diff.html, trend.html, table exports) are far below this.
_OWN_FILE_MAX_BYTES: Final = 64 << 20


def check_replaceable(path: Path, ours: Callable[[bytes], bool], hint: str) -> None:
    """Refuse to write ``path`` over anything perfledger did not write there.

    Nothing there, or a file ``ours`` recognises from its bytes (an earlier run's output of
    the same kind): it may be replaced. Anything else — a file of the user's, a link, a
    folder — raises a one-line error that names it and ends with ``hint`` (what to do).
    """
    try:
        found = path.lstat()
    except FileNotFoundError:
        return
    except OSError as error:
        raise PerfledgerError(f"{path}: cannot check it ({error.strerror or error})") from None
    if not stat.S_ISREG(found.st_mode):
        raise PerfledgerError(f"{path} exists and is not a file perfledger wrote: {hint}")
    try:
        known = found.st_size <= _OWN_FILE_MAX_BYTES and ours(path.read_bytes())
    except OSError as error:
        raise PerfledgerError(f"{path}: cannot read it ({error.strerror or error})") from None
    if not known:
        raise PerfledgerError(f"{path} exists and was not written by perfledger: {hint}")


def process_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs (a process of another user counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False
    return False


def mark_staging(folder: Path) -> None:
    """Put the mark of this run in ``folder`` (:data:`STAGING_MARK`): a staging folder of its
    own, which a later run may remove once this one is gone."""
    (folder / STAGING_MARK).write_text(f"{os.getpid()}\n", encoding="ascii")


def unmark_staging(folder: Path) -> None:
    """Take the mark out of ``folder`` (it becomes the user's profile)."""
    (folder / STAGING_MARK).unlink(missing_ok=True)


def _marked_by(folder: Path, pid: int) -> bool:
    """Whether ``folder`` holds the staging mark of process ``pid``."""
    mark = folder / STAGING_MARK
    try:
        if mark.is_symlink() or not mark.is_file() or mark.stat().st_size > 32:
            return False
        return mark.read_bytes().strip() == str(pid).encode("ascii")
    except OSError:
        return False


def remove_stale_staging(parent: Path, kinds: tuple[str, ...] = ("partial", "old")) -> list[Path]:
    """Remove the staging folders in ``parent`` left by runs that died; return them.

    Only folders named as perfledger's staging folders (:data:`STAGING_NAME`) of the given
    kinds, holding the mark of the run that made them (:data:`STAGING_MARK`), whose process no
    longer runs, are touched — never a link, never anything else.
    """
    removed: list[Path] = []
    try:
        children = list(parent.iterdir())
    except OSError:
        return removed
    for child in children:
        match = STAGING_NAME.match(child.name)
        if match is None or match.group("kind") not in kinds:
            continue
        pid = int(match.group("pid"))
        if pid == os.getpid() or not process_gone(pid):
            continue
        try:
            if child.is_symlink() or not child.is_dir() or not _marked_by(child, pid):
                continue
            shutil.rmtree(child)
        except OSError:
            continue
        removed.append(child)
    return removed


class NotAFile(OSError):
    """A path that names something other than a regular file (``kind`` says what)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


_FILE_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def open_regular(path: Path) -> io.BufferedReader:
    """``path`` opened for reading in binary mode when it is a regular file (or a link to
    one); else :class:`NotAFile`. A named pipe is not waited on (nothing may ever write to
    it) and a device is not read (``/dev/zero`` never ends): the kind is told from the open
    file itself, so a name replaced between a check and the open cannot slip through."""
    nonblocking = getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, os.O_RDONLY | nonblocking | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
            raise NotAFile(kind)
        if nonblocking:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def broken_link(path: Path) -> str | None:
    """Where ``path`` points when it is a symbolic link whose target does not exist."""
    if not path.is_symlink() or path.exists():
        return None
    try:
        return os.readlink(path)
    except OSError:
        return None
