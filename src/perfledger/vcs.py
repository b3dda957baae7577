"""The version-control state of a folder: the git commit, branch and dirtiness a run was
made from (the recorder's metadata and the ledger's records keep it).

Four git commands answer it (``rev-parse`` for the commit, the branch and the root, ``status``
for the dirtiness), run at once. ``git status`` reads every tracked file's state: seconds in a
large repository. A command that registers its run once its work is done starts them as the
work begins (:func:`revision_beside`), so that they run beside it rather than after it. They
take no lock of the repository (``GIT_OPTIONAL_LOCKS=0``, git's setting for status read in
the background): a ``git commit`` the user runs meanwhile never finds the index locked.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

# the longest any one git command may take (a hung filesystem, a prompt nobody answers)
GIT_TIMEOUT_S: Final = 10.0
# the commands of the commit, the branch, the root and the dirtiness (any line: dirty)
_COMMANDS: Final = (
    ("rev-parse", "HEAD"),
    ("rev-parse", "--abbrev-ref", "HEAD"),
    ("rev-parse", "--show-toplevel"),
    ("status", "--porcelain", "--untracked-files=no"),
)


class RevisionProbe:
    """The git commands of :func:`git_revision` for one folder, started when this is made;
    :meth:`result` reads their answers, :meth:`close` ends those still running."""

    def __init__(self, directory: Path) -> None:
        self._processes = [_start(directory, args) for args in _COMMANDS]

    def result(self) -> dict[str, Any] | None:
        """Commit, branch, dirtiness and root (None: not in a repository with a commit)."""
        commit, branch, root, status = (_answer(p) for p in self._processes)
        if not commit:
            return None
        return {"commit": commit, "branch": branch, "dirty": bool(status), "root": root}

    def close(self) -> None:
        """End the commands still running (their answers not read)."""
        for process in self._processes:
            if process is None:
                continue
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def git_revision(directory: Path) -> dict[str, Any] | None:
    """Commit, branch and dirtiness of the git repository holding ``directory``, if any: the
    answers of the commands :func:`revision_beside` started for it, where it did."""
    with _probes_lock:
        probe = _probes.pop(_key(directory), None)
    probe = probe or RevisionProbe(directory)
    try:
        return probe.result()
    finally:
        probe.close()


@contextlib.contextmanager
def revision_beside(directory: Path) -> Iterator[None]:
    """:func:`git_revision`'s commands for ``directory`` started now: a ``git_revision`` of
    the same folder inside the block takes their answers. Not taken, they are ended with
    the block."""
    key = _key(directory)
    with _probes_lock:
        # one running already (a caller's own block) serves this block too
        probe = None if key in _probes else _probes.setdefault(key, RevisionProbe(directory))
    try:
        yield
    finally:
        with _probes_lock:
            left = _probes.pop(key) if probe is not None and _probes.get(key) is probe else None
        if left is not None:
            left.close()


_probes_lock = threading.Lock()
_probes: dict[str, RevisionProbe] = {}


def _key(directory: Path) -> str:
    return os.path.realpath(directory)


def _start(directory: Path, args: tuple[str, ...]) -> subprocess.Popen[str] | None:
    try:
        return subprocess.Popen(
            ["git", "-C", str(directory), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _answer(process: subprocess.Popen[str] | None) -> str | None:
    """What a started command wrote (stripped), None where it failed or took too long."""
    if process is None:
        return None
    try:
        out, _ = process.communicate(timeout=GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return None
    return out.strip() if process.returncode == 0 else None
