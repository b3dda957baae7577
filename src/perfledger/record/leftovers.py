"""Staging folders of recordings whose launcher died: who owns one, and their removal.

A recording stages its traces in ``.NAME.record-PID/`` beside its output (PID: the launcher's,
or the program's under the Python API) and removes it when it ends. A launcher killed with
``kill -9`` leaves it behind; the next recording into the same folder removes it. A staging
folder names its owner in an ``owner`` file (pid, start time, boot and pid namespace), so that a
pid reused by another process since, or a recording of another machine sharing the folder, is
told apart from a live owner. A folder kept on purpose (its traces could not be analysed) says
so in its owner file and is left for the user.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Final

from perfledger.files import STAGING_NAME, write_json
from perfledger.record.inprocess import (
    CHUNK_PREFIX,
    PROFILER_LOG_PREFIX,
    PROFILER_LOG_SUFFIX,
    STEP_LOG_PREFIX,
    STEP_LOG_SUFFIX,
    TRACE_PREFIX,
    TRACE_SUFFIX,
)
from perfledger.record.lifeline import identity, is_running, process_start, system_identity

OWNER_FILE: Final = "owner"

# Everything a recording writes into its staging folder; a folder holding anything else is
# not (only) ours and is never removed.
_STAGED_NAME: Final = re.compile(
    "|".join(
        (
            re.escape(OWNER_FILE),
            rf"{re.escape(STEP_LOG_PREFIX)}\d+{re.escape(STEP_LOG_SUFFIX)}",
            rf"{re.escape(CHUNK_PREFIX)}[\d-]+{re.escape(TRACE_SUFFIX)}",
            rf"{re.escape(TRACE_PREFIX)}[\d-]+{re.escape(TRACE_SUFFIX)}(\.gz)?",
            rf"{re.escape(PROFILER_LOG_PREFIX)}\d+{re.escape(PROFILER_LOG_SUFFIX)}",
            r"\..+\.partial",  # a trace being exported
            r"\..+\.tmp",  # a file being written through a temporary name
        )
    )
)


def staging_name(output: Path, pid: int) -> Path:
    """The staging folder of a recording into ``output`` owned by process ``pid``."""
    return output.with_name(f".{output.name}.record-{pid}")


def claim(staging: Path, pid: int | None = None) -> None:
    """Write the owner file of ``staging``: this process (or ``pid``) on this machine."""
    pid = os.getpid() if pid is None else pid
    write_json(staging / OWNER_FILE, {"process": identity(pid), **system_identity()})


def keep(staging: Path) -> None:
    """Mark ``staging`` as kept on purpose (its traces could not be analysed): never removed."""
    try:
        owner: Any = json.loads((staging / OWNER_FILE).read_text())
    except (OSError, ValueError):
        owner = {}
    write_json(staging / OWNER_FILE, {**(owner if isinstance(owner, dict) else {}), "kept": True})


def owner_gone(staging: Path) -> bool:
    """Whether the recording that staged into ``staging`` is over (its owner does not run).

    Unknown owners count as running: another machine's or pid namespace's, an unreadable file.
    """
    match = STAGING_NAME.match(staging.name)
    if match is None or match.group("kind") != "record":
        return False
    pid = int(match.group("pid"))
    if pid == os.getpid():
        return False
    try:
        owner: Any = json.loads((staging / OWNER_FILE).read_text())
    except FileNotFoundError:
        # An older recording's folder: its pid alone says whether it runs.
        return process_start(pid) is None
    except (OSError, ValueError):
        return False
    if (
        not isinstance(owner, dict)
        or owner.get("kept")
        or not isinstance(owner.get("process"), str)
    ):
        return False
    here = system_identity()
    if any(owner.get(key) != value for key, value in here.items()):
        return False
    process = str(owner["process"])
    return process.partition(":")[0] == str(pid) and not is_running(process)


def remove_dead_recordings(parent: Path) -> list[Path]:
    """Remove the staging folders in ``parent`` of recordings whose owner died; return them.

    Only folders named ``.NAME.record-PID`` (never a link), holding nothing but what a
    recording writes, whose owner is gone, are removed.
    """
    removed: list[Path] = []
    try:
        children = sorted(parent.iterdir())
    except OSError:
        return removed
    for child in children:
        try:
            if child.is_symlink() or not child.is_dir() or not owner_gone(child):
                continue
            if not all(_STAGED_NAME.fullmatch(entry.name) for entry in child.iterdir()):
                continue
            if any(entry.is_symlink() or not entry.is_file() for entry in child.iterdir()):
                continue
            shutil.rmtree(child)
        except OSError:
            continue
        removed.append(child)
    return removed
