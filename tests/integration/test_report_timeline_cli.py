"""``perfledger timeline PROFILE --step N | --window A:B`` on a profile of a real trace."""

from __future__ import annotations

import argparse
import errno
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from perfledger.cli import timeline as timeline_cli
from perfledger.errors import PerfledgerError
from perfledger.run.pipeline import build_profile
from tests.paths import DATA
from tests.timeline_check import load, perfetto_ns, validate

MS = 1_000_000


def cli(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="perfledger")
    timeline_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["timeline", *argv])
    return int(args.run(args))


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = DATA / "kineto" / "v100_rank1_ddp.json.gz"
    out = tmp_path_factory.mktemp("cli") / "ddp"
    build_profile([trace], out, console=Console(file=io.StringIO()))
    return out


def test_step_timeline_holds_that_step_on_the_profile_time_base(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = pq.read_table(profile / "tables" / "steps.parquet")
    step = int(steps.column("step")[1].as_py())
    lo = int(steps.column("start_ns")[1].as_py())
    hi = int(steps.column("end_ns")[1].as_py())
    out = tmp_path / "step.json.gz"
    assert cli([str(profile), "--step", str(step), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    summary = validate(load(out))
    events = pq.read_table(profile / "tables" / "events.parquet")
    origin = int(pc.min(events.column("start_ns")).as_py())
    assert summary.other["origin_ns"] == origin
    assert summary.other["window_ns"] == [lo, hi]
    marks = [
        ev for evs in summary.by_track.values() for ev in evs if ev["name"].startswith("Profiler")
    ]
    assert [m["name"] for m in marks] == [f"ProfilerStep#{step}"]
    assert perfetto_ns(marks[0]["ts"]) + origin == steps.column("host_start_ns")[1].as_py()
    # every slice overlaps the step
    for evs in summary.by_track.values():
        for ev in evs:
            start = perfetto_ns(ev["ts"]) + origin
            assert start < hi and start + perfetto_ns(ev["dur"]) >= lo
    # the same slices as the profile's own step file
    own = validate(load(profile / "timeline" / f"step_{step}.json.gz"))
    assert own.slices == summary.slices and own.flows == summary.flows


def test_window_in_ms_from_the_profile_start(profile: Path, tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    assert cli([str(profile), "--window", "100:150", "-o", str(out)]) == 0
    summary = validate(load(out))
    origin = summary.other["origin_ns"]
    assert summary.other["window_ns"] == [origin + 100 * MS, origin + 150 * MS]
    assert summary.slices > 0
    out2 = tmp_path / "w2.json"
    assert cli([str(profile), "--window", "0.1s:150000us", "-o", str(out2)]) == 0
    assert validate(load(out2)).slices == summary.slices


def test_max_events_cuts_and_says_where(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cut.json.gz"
    assert cli([str(profile), "--max-events", "1000", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "wrote" in printed and "1000 of" in printed and "cut at" in printed
    summary = validate(load(out))
    # the analysis tracks (idle gaps, findings, critical path) are cut at the same instant,
    # not counted
    analysis = {"idle", "finding", "critical_path"}
    events = [ev for evs in summary.by_track.values() for ev in evs if ev["cat"] not in analysis]
    assert summary.other["events_written"] == 1000 == len(events)
    cut = summary.other["truncated_at_ns"] - summary.other["origin_ns"]
    assert all(perfetto_ns(ev["ts"]) < cut for evs in summary.by_track.values() for ev in evs)


def test_bad_requests_are_one_line_errors(profile: Path, tmp_path: Path) -> None:
    with pytest.raises(PerfledgerError, match=r"no step 999 \(steps: "):
        cli([str(profile), "--step", "999", "-o", str(tmp_path / "x.json")])
    with pytest.raises(PerfledgerError, match="--window"):
        cli([str(profile), "--window", "abc:1", "-o", str(tmp_path / "x.json")])
    with pytest.raises(PerfledgerError, match="ends before it starts"):
        cli([str(profile), "--window", "5:1", "-o", str(tmp_path / "x.json")])
    with pytest.raises(PerfledgerError, match="no such profile"):
        cli([str(tmp_path / "nothing"), "--step", "1"])
    existing = tmp_path / "exists.json"
    assert cli([str(profile), "--window", "0:1", "-o", str(existing)]) == 0
    with pytest.raises(PerfledgerError, match="already exists"):
        cli([str(profile), "--window", "0:1", "-o", str(existing)])
    assert cli([str(profile), "--window", "0:1", "-o", str(existing), "--force"]) == 0


@pytest.mark.parametrize("name", ["mine.json", "mine.json.gz", "mine.txt"])
def test_force_replaces_only_a_timeline_perfledger_wrote(
    profile: Path, tmp_path: Path, name: str
) -> None:
    users = tmp_path / name
    users.write_bytes(b'{"traceEvents": [{"ph": "X"}]}')  # another tool's trace
    with pytest.raises(PerfledgerError, match="not a timeline perfledger wrote"):
        cli([str(profile), "--window", "0:1", "-o", str(users), "--force"])
    assert users.read_bytes() == b'{"traceEvents": [{"ph": "X"}]}'
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file either


def test_outputs_that_are_folders_or_a_profiles_files_are_refused(
    profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = (profile / "summary.json").read_bytes()
    for inside in ("summary.json", "op_summary.csv", "timeline/step_3.json.gz"):
        with pytest.raises(PerfledgerError, match="inside a profile"):
            cli([str(profile), "--step", "3", "-o", str(profile / inside), "--force"])
    with pytest.raises(PerfledgerError, match="inside a profile"):  # a step is not the whole
        cli([str(profile), "--step", "3", "-o", str(profile / "timeline.json.gz"), "--force"])
    assert (profile / "summary.json").read_bytes() == summary
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    for folder in (".", "..", "folder", str(tmp_path)):
        with pytest.raises(PerfledgerError, match="not a folder"):
            cli([str(profile), "--step", "3", "-o", folder, "--force"])
    assert [p.name for p in tmp_path.iterdir()] == ["folder"]


def test_a_full_disk_names_the_timeline_not_its_temporary_file(tmp_path: Path) -> None:
    output = tmp_path / "t.json.gz"
    full = OSError(errno.ENOSPC, "No space left on device")
    error = timeline_cli._output_error(output, full)
    assert str(error) == f"{output}: cannot write the timeline: No space left on device"
    refused = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".t.json.gz.1.tmp"))
    assert str(timeline_cli._output_error(output, refused)).startswith(f"{output}: ")
    elsewhere = PermissionError(errno.EACCES, "Permission denied", "/elsewhere/events.parquet")
    assert timeline_cli._output_error(output, elsewhere) is None  # an input's: not the output's
    not_profile = tmp_path / "empty"
    not_profile.mkdir()
    with pytest.raises(PerfledgerError, match="is not a perfledger profile"):
        cli([str(not_profile), "--window", "0:1", "-o", str(tmp_path / "y.json")])


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sampled_2ranks analysed as rank tasks: its events are one Parquet file per rank."""
    out = tmp_path_factory.mktemp("cli") / "two"
    build_profile(
        [DATA / "kineto" / "sampled_2ranks"],
        out,
        console=Console(file=io.StringIO()),
    )
    assert len(list((out / "tables" / "events").glob("rank=*.parquet"))) == 2
    return out


def test_a_step_of_several_ranks_is_the_step_slice_analyze_wrote(
    two_ranks: Path, tmp_path: Path
) -> None:
    import gzip
    import json

    steps = pq.read_table(two_ranks / "tables" / "steps.parquet")
    step = int(steps.column("step")[0].as_py())
    out = tmp_path / "step.json.gz"
    assert cli([str(two_ranks), "--step", str(step), "-o", str(out)]) == 0
    validate(load(out))
    mine = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    written = two_ranks / "timeline" / f"step_{step}.json.gz"
    theirs = json.loads(gzip.decompress(written.read_bytes()))["traceEvents"]
    # read and written rank by rank here, as analyze wrote its slice: the same slices on the
    # same tracks (the device-busy counters at the window's edges come from the events read,
    # here only those starting before the window ends)

    def slices(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (e["pid"], e["tid"], e["ts"], e["dur"], e["name"]) for e in records if e["ph"] == "X"
        )

    assert slices(mine) == slices(theirs)
    assert len(slices(mine)) > 1000
    names = {e["args"]["name"] for e in mine if e.get("name") == "process_name"}
    assert any("rank 0" in n for n in names) and any("rank 1" in n for n in names)


def test_max_events_of_several_ranks_is_shared_between_them(
    two_ranks: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cut.json.gz"
    assert cli([str(two_ranks), "--max-events", "10", "-o", str(out)]) == 0
    summary = validate(load(out))
    # each rank keeps its earliest ceil(10 / 2) events
    assert summary.other["max_events_per_rank"] == 5
    assert [r["events_written"] for r in summary.other["ranks"]] == [5, 5]


def test_the_critical_paths_are_stored_for_later_timelines(profile: Path) -> None:
    import json

    paths = pq.read_table(profile / "tables" / "critical_path.parquet").to_pylist()
    steps = pq.read_table(profile / "tables" / "steps.parquet").to_pylist()
    windows = {(s["rank"], s["step"]): (s["start_ns"], s["end_ns"]) for s in steps}
    replayed = {
        (s["rank"], s["step"]): s["replayed_ms"]
        for s in json.loads((profile / "summary.json").read_text())["critical_path"]["steps"]
    }
    assert set(replayed) == {(r["rank"], r["step"]) for r in paths}
    for key, ms in replayed.items():
        pieces = [(r["start_ns"], r["end_ns"]) for r in paths if (r["rank"], r["step"]) == key]
        lo, hi = windows[key]
        # in time order, not overlapping, inside the measured step
        assert all(a < b for a, b in pieces)
        assert all(b <= c for (_, b), (c, _) in zip(pieces, pieces[1:], strict=False))
        assert lo <= pieces[0][0] and pieces[-1][1] <= hi
        # and they are the whole replayed step (the replay matches this trace's steps)
        assert sum(b - a for a, b in pieces) == pytest.approx(ms * MS, rel=1e-3)
