"""The git state a run is registered with (vcs): read from real repositories made here, the
answers checked against git's own, and the commands started beside a command's work."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from perfledger import vcs


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder git searches no repository above (the machine's own folders may be one)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def repo(outside: Path) -> Path:
    _git(outside, "init", "-q")
    _git(outside, "checkout", "-q", "-b", "trunk")
    (outside / "train.py").write_text("print(1)\n")
    _git(outside, "add", "train.py")
    _git(outside, "commit", "-q", "-m", "first")
    return outside


def test_revision_of_a_repository_is_gits_own(repo: Path) -> None:
    (repo / "notes.txt").write_text("untracked: not dirt\n")
    sub = repo / "sub"
    sub.mkdir()
    found = vcs.git_revision(sub)
    assert found == {
        "commit": _git(repo, "rev-parse", "HEAD"),
        "branch": "trunk",
        "dirty": False,
        "root": os.path.realpath(repo),
    }
    (repo / "train.py").write_text("print(2)\n")
    changed = vcs.git_revision(repo)
    assert changed is not None and changed["dirty"] is True


def test_no_revision_outside_a_repository_or_before_its_first_commit(outside: Path) -> None:
    assert vcs.git_revision(outside) is None
    _git(outside, "init", "-q")
    assert vcs.git_revision(outside) is None


def test_reading_the_state_leaves_the_index_alone(repo: Path) -> None:
    """git status refreshes a stale index and writes it, under the index's lock, unless told
    not to: a run registered while the user commits must not take that lock."""
    index = repo / ".git" / "index"
    os.utime(repo / "train.py", (1_000_000_000, 1_000_000_000))  # stale stat data, same text
    before = index.stat().st_mtime_ns
    assert vcs.git_revision(repo) is not None
    assert index.stat().st_mtime_ns == before
    _git(repo, "status", "--porcelain")  # the same status with git's default: rewritten
    assert index.stat().st_mtime_ns != before


def test_commands_started_beside_serve_the_later_read(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = vcs.git_revision(repo)
    started: list[tuple[str, ...]] = []
    start = vcs._start

    def counted(directory: Path, args: tuple[str, ...]) -> object:
        started.append(args)
        return start(directory, args)

    monkeypatch.setattr(vcs, "_start", counted)
    with vcs.revision_beside(repo):
        begun = len(started)
        # a block inside the first (a caller's own) starts nothing more
        with vcs.revision_beside(repo):
            assert len(started) == begun
        assert vcs.git_revision(repo / ".") == expected
        assert len(started) == begun == len(vcs._COMMANDS)
        # taken once: a second read asks git again
        assert vcs.git_revision(repo) == expected
        assert len(started) == 2 * begun


def test_commands_not_taken_are_ended_with_the_block(repo: Path) -> None:
    with vcs.revision_beside(repo):
        probe = vcs._probes[os.path.realpath(repo)]
        processes = [p for p in probe._processes if p is not None]
    assert processes and all(p.returncode is not None for p in processes)
    assert os.path.realpath(repo) not in vcs._probes
