"""Every file perfledger writes gets the usual mode: 0666 less the umask, whatever wrote it
(Parquet, gzip, the timeline writer, the report), in a profile and beside it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import DATA

TRACE = DATA / "kineto" / "cpu_only_rank34.json.gz"


def run_with_umask(umask: int, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfledger", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "120"},
        timeout=600,
        umask=umask,
        check=False,
    )


def modes(folder: Path) -> dict[str, int]:
    return {
        str(path.relative_to(folder)): stat.S_IMODE(path.stat().st_mode)
        for path in folder.rglob("*")
        if path.is_file()
    }


@pytest.mark.parametrize(("umask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_every_output_file_has_the_mode_the_umask_gives(
    tmp_path: Path, umask: int, expected: int
) -> None:
    done = run_with_umask(umask, "analyze", TRACE, "-o", "prof", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = modes(tmp_path / "prof")
    # the whole profile: tables, CSVs, summary, timelines (whole and per step), report, raw/
    assert {
        "summary.json",
        "report.html",
        "timeline.json.gz",
        "raw/cpu_only_rank34.json.gz",
    } <= set(written)
    assert any(name.startswith("timeline/step_") for name in written)
    assert {name: mode for name, mode in written.items() if mode != expected} == {}
    timeline = run_with_umask(
        umask, "timeline", "prof", "--step", "551", "-o", "step.json.gz", cwd=tmp_path
    )
    assert timeline.returncode == 0, timeline.stderr
    assert stat.S_IMODE((tmp_path / "step.json.gz").stat().st_mode) == expected


def test_the_source_is_copied_with_the_output_mode_not_its_own(tmp_path: Path) -> None:
    source = tmp_path / "private.json.gz"
    source.write_bytes(TRACE.read_bytes())
    os.chmod(source, 0o600)  # a trace only its owner reads
    done = run_with_umask(0o022, "analyze", source, "-o", "prof", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE((tmp_path / "prof" / "raw" / source.name).stat().st_mode) == 0o644
    assert stat.S_IMODE(source.stat().st_mode) == 0o600  # the user's file is left alone
