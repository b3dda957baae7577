"""What a dead launcher leaves: process identities, staging owners, and what may be removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfledger.record.leftovers import (
    OWNER_FILE,
    claim,
    keep,
    owner_gone,
    remove_dead_recordings,
    staging_name,
)
from perfledger.record.lifeline import identity, is_running, process_start

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

NO_SUCH_PID = 99_999_999  # beyond any pid_max


def staging_of(output: Path, pid: int, *files: str) -> Path:
    staging = staging_name(output, pid)
    staging.mkdir()
    for name in files:
        (staging / name).write_text("")
    return staging


def test_a_process_is_named_by_its_pid_and_start_so_a_reused_pid_is_another() -> None:
    me = identity(os.getpid())
    assert me is not None and me.startswith(f"{os.getpid()}:")
    assert is_running(me)
    start = process_start(os.getpid())
    assert start is not None
    assert not is_running(f"{os.getpid()}:{start + 1}")  # same pid, started at another time
    assert identity(NO_SUCH_PID) is None
    assert not is_running(f"{NO_SUCH_PID}:1")


def test_a_zombie_does_not_run() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 30
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert process_start(child.pid) is None  # exited, not reaped yet
    finally:
        child.wait()


def test_the_owner_file_tells_a_live_owner_from_a_dead_or_reused_pid(tmp_path: Path) -> None:
    mine = staging_of(tmp_path / "prof", os.getpid())
    claim(mine)
    assert not owner_gone(mine)  # ours
    # A live process whose pid the folder names, but not the process that claimed it.
    parent = os.getppid()
    reused = staging_of(tmp_path / "reused", parent)
    owner = json.loads((mine / OWNER_FILE).read_text())
    start = process_start(parent)
    assert start is not None
    (reused / OWNER_FILE).write_text(json.dumps({**owner, "process": f"{parent}:{start + 1}"}))
    assert owner_gone(reused)
    # The same, claimed on another machine (another boot): not ours to judge.
    elsewhere = staging_of(tmp_path / "elsewhere", parent)
    (elsewhere / OWNER_FILE).write_text(
        json.dumps({**owner, "process": f"{parent}:{start + 1}", "boot_id": "another-boot"})
    )
    assert not owner_gone(elsewhere)
    # Without an owner file (an older recording's folder), the pid alone decides.
    assert owner_gone(staging_of(tmp_path / "legacy", NO_SUCH_PID))
    assert not owner_gone(staging_of(tmp_path / "legacy", parent))
    # A dead owner's folder is gone, unless kept on purpose (its traces could not be analysed).
    failed = staging_of(tmp_path / "failed", NO_SUCH_PID)
    (failed / OWNER_FILE).write_text(json.dumps({**owner, "process": f"{NO_SUCH_PID}:1"}))
    assert owner_gone(failed)
    keep(failed)
    assert not owner_gone(failed)
    # Names not of a recording's staging folder are never judged.
    assert not owner_gone(tmp_path / f".prof.partial-{NO_SUCH_PID}")


def test_only_dead_recordings_holding_only_recording_files_are_removed(tmp_path: Path) -> None:
    staged = ["steps-12.jsonl", "trace-12-00000.json", ".trace-12-00001.json.partial",
              "rank0.json.gz", OWNER_FILE]  # fmt: skip
    dead = staging_of(tmp_path / "prof", NO_SUCH_PID, *staged)
    (dead / OWNER_FILE).write_text("{}")  # an owner file naming no process: unknown, kept
    assert remove_dead_recordings(tmp_path) == []
    (dead / OWNER_FILE).unlink()
    live = staging_name(tmp_path / "live", os.getpid())
    live.mkdir()
    foreign = tmp_path / f".notes.record-{NO_SUCH_PID}"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("")
    nested = tmp_path / f".deep.record-{NO_SUCH_PID}"
    (nested / "sub").mkdir(parents=True)
    link = tmp_path / f".link.record-{NO_SUCH_PID}"
    link.symlink_to(nested, target_is_directory=True)
    plain = tmp_path / f".plain.record-{NO_SUCH_PID}"
    plain.write_text("")
    other_kind = tmp_path / f".prof.partial-{NO_SUCH_PID}"
    other_kind.mkdir()
    assert remove_dead_recordings(tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (live, foreign, nested, link, plain, other_kind)
    )
