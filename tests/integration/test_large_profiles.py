"""What analyze does differently for large traces: the whole timeline and most step slices
written on demand above a number of events, and raw/ keeping a large source without a second
copy."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from perfledger.model.accounts import StepWindow
from perfledger.profiledir import artefacts, writer
from perfledger.run.pipeline import build_profile
from tests.cli import perfledger
from tests.paths import data_file

TRACE = "kineto/mi250_rocm_minitoy.json.gz"
STEPS_TRACE = "kineto/resnet50_gpu_2021.json.gz"  # 6 steps


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A copy of a small real trace in the test's folder (linked below: not the repo's)."""
    copy = tmp_path / "in" / Path(TRACE).name
    copy.parent.mkdir()
    shutil.copyfile(data_file(TRACE), copy)
    return copy


def _analyze(source: Path, out: Path) -> str:
    printed = io.StringIO()
    build_profile([source], out, console=Console(file=printed, width=200))
    return printed.getvalue()


def test_above_the_threshold_the_whole_timeline_is_left_to_the_timeline_command(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artefacts, "WHOLE_TIMELINE_ON_DEMAND_ABOVE", 100)
    out = tmp_path / "profile"
    printed = _analyze(source, out)
    meta = json.loads((out / "meta.json").read_text())
    events = meta["ranks"]["0"]["events"]
    assert events > 100
    assert not (out / "timeline.json.gz").exists()
    steps = sorted(p.name for p in (out / "timeline").iterdir())
    assert steps and all(name.startswith("step_") for name in steps)
    (note,) = meta[artefacts.OMITTED_KEY]
    assert f"{events:,} events" in note and "perfledger timeline PROFILE" in note
    assert "timeline.json.gz not written" in " ".join(printed.split())
    # on demand: the whole profile, every event
    whole = tmp_path / "whole.json.gz"
    done = perfledger("timeline", out, "-o", whole)
    assert done.returncode == 0, done.stderr
    other = json.loads(gzip.decompress(whole.read_bytes()))["otherData"]
    assert other["events_total"] == other["events_written"]
    assert other["truncated_at_ns"] is None


def test_at_the_threshold_analyze_writes_the_whole_timeline(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "profile"
    _analyze(source, out)
    events = json.loads((out / "meta.json").read_text())["ranks"]["0"]["events"]
    monkeypatch.setattr(artefacts, "WHOLE_TIMELINE_ON_DEMAND_ABOVE", events)
    again = tmp_path / "again"
    _analyze(source, again)
    assert (again / "timeline.json.gz").exists()
    assert artefacts.OMITTED_KEY not in json.loads((again / "meta.json").read_text())


def _step_walls(profile: Path) -> dict[int, int]:
    """Each step's wall over the ranks (latest end - earliest start), from steps.parquet."""
    hulls: dict[int, tuple[int, int]] = {}
    for row in pq.read_table(profile / "tables" / "steps.parquet").to_pylist():
        lo, hi = hulls.get(row["step"], (row["start_ns"], row["end_ns"]))
        hulls[row["step"]] = (min(lo, row["start_ns"]), max(hi, row["end_ns"]))
    return {step: hi - lo for step, (lo, hi) in hulls.items()}


def test_above_the_threshold_some_step_slices_are_left_to_the_timeline_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = data_file(STEPS_TRACE)
    every = tmp_path / "every"
    _analyze(source, every)  # below the threshold: a slice per step
    walls = _step_walls(every)
    assert len(walls) >= 3
    assert sorted(p.name for p in (every / "timeline").iterdir()) == sorted(
        f"step_{s}.json.gz" for s in walls
    )
    monkeypatch.setattr(artefacts, "STEP_SLICES_ON_DEMAND_ABOVE", 100)
    monkeypatch.setattr(artefacts, "STEP_SLICES_KEPT", 2)
    out = tmp_path / "profile"
    printed = _analyze(source, out)
    # the two steps the report shows first: the median (the lower one) and the slowest
    by_wall = sorted(walls, key=lambda s: (walls[s], s))
    kept = {by_wall[(len(by_wall) - 1) // 2], by_wall[-1]}
    assert sorted(p.name for p in (out / "timeline").iterdir()) == sorted(
        f"step_{s}.json.gz" for s in kept
    )
    meta = json.loads((out / "meta.json").read_text())
    events = meta["ranks"]["0"]["events"]
    notes = [n for n in meta[artefacts.OMITTED_KEY] if n.startswith("timeline/")]
    assert notes == [
        f"timeline/: 2 of {len(walls)} step slices written ({events:,} events, more than 100): "
        "the median, slowest and fastest steps, those the findings point at, then the first; "
        "`perfledger timeline PROFILE --step N` writes any other step's"
    ]
    assert "2 of" in " ".join(printed.split())
    # the slices written are those of the profile written whole; a step left out is written
    # on demand as analyze writes it below the threshold
    for step in kept:
        name = f"step_{step}.json.gz"
        assert _records(out / "timeline" / name) == _records(every / "timeline" / name)
    (left,) = sorted(set(walls) - kept)[:1]
    made = tmp_path / "made.json.gz"
    done = perfledger("timeline", out, "--step", str(left), "-o", made)
    assert done.returncode == 0, done.stderr
    assert _records(made) == _records(every / "timeline" / f"step_{left}.json.gz")


def _records(path: Path) -> list[object]:
    return list(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])


def test_kept_steps_are_the_reports_first_choices() -> None:
    # walls (ms): step 1: 10, 2: 30, 3: 20, 4: 5, 5: 25, 6: 15; two ranks, rank 1 later
    walls = {1: 10, 2: 30, 3: 20, 4: 5, 5: 25, 6: 15}
    windows, start = [], 0
    for step, wall in walls.items():
        for rank, late in ((0, 0), (1, 1)):
            lo, hi = start + late, start + wall * 1_000_000 + late
            windows.append(StepWindow(rank, step, lo, hi, lo, hi))
        start += 100_000_000
    # a finding whose first span lies in step 5, another in no step
    finding = {"spans": [{"start_ns": 4 * 100_000_000 + 10, "end_ns": 4 * 100_000_000 + 20}]}
    outside = {"spans": [{"start_ns": 10**12, "end_ns": 10**12 + 1}]}
    # median (lower of 6): 15 ms, step 6; slowest 2; fastest 4; then the finding's, 5; then
    # the first steps in order: 1, 3
    assert artefacts.kept_steps(windows, [finding, outside], 3) == [2, 4, 6]
    assert artefacts.kept_steps(windows, [finding, outside], 4) == [2, 4, 5, 6]
    assert artefacts.kept_steps(windows, [finding], 5) == [1, 2, 4, 5, 6]
    assert artefacts.kept_steps(windows, [], 5) == [1, 2, 3, 4, 6]
    assert artefacts.kept_steps(windows, [], 10) == [1, 2, 3, 4, 5, 6]
    assert artefacts.kept_steps([], [finding], 3) == []


def test_a_small_source_is_copied(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "profile"
    _analyze(source, out)
    kept = out / "raw" / source.name
    assert kept.read_bytes() == source.read_bytes()
    assert kept.stat().st_ino != source.stat().st_ino


def test_a_large_source_is_hard_linked(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "RAW_COPY_MAX_BYTES", 1000)
    source.chmod(0o600)  # the profile's permission pass must not touch the user's file
    out = tmp_path / "profile"
    _analyze(source, out)
    kept = out / "raw" / source.name
    assert kept.stat().st_ino == source.stat().st_ino
    assert source.stat().st_mode & 0o777 == 0o600
    # replacing the profile removes its link, never the source
    build_profile([source], out, force=True, console=Console(file=io.StringIO()))
    assert source.exists() and source.stat().st_nlink == 2


def test_a_large_source_that_cannot_be_linked_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "RAW_COPY_MAX_BYTES", 2)

    def refuse(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(writer.os, "link", refuse)
    big = tmp_path / "big.json"
    big.write_bytes(b"abc")
    kept = writer.copy_source(big, tmp_path / "raw" / "big.json")
    assert kept == tmp_path / "raw" / "big.json.source.json"
    assert not (tmp_path / "raw" / "big.json").exists()
    record = json.loads(kept.read_text())
    # SHA-256 of "abc" (FIPS 180-2, appendix B.1)
    assert record["sha256"] == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert record["sha256"] == hashlib.sha256(b"abc").hexdigest()
    assert record["size_bytes"] == 3 and record["path"] == str(big.resolve())


def test_a_recorded_source_is_named_as_recorded_in_the_profile(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "RAW_COPY_MAX_BYTES", 1000)

    def refuse(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(writer.os, "link", refuse)
    out = tmp_path / "profile"
    _analyze(source, out)
    assert sorted(p.name for p in (out / "raw").iterdir()) == [source.name + ".source.json"]
    record = json.loads((out / "raw" / (source.name + ".source.json")).read_text())
    assert record["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    for document in ("meta.json", "summary.json"):
        files = json.loads((out / document).read_text())["source"]["files"]
        assert files == [f"raw/{source.name}.source.json"], document
