"""The rank task's events.parquet: the events table itself, a dictionary only for the columns
of few distinct values."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from perfledger.pages import PieceSink
from perfledger.run import filled_columns, mapped_files
from perfledger.run.tasks import RankResult, RankTask, loaded, run_rank_task
from tests.synth import assert_same_events

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"


def test_events_parquet_reads_back_as_the_events_table(tmp_path: Path) -> None:
    task = RankTask(0, "kineto", DATA / "v100_rank1_ddp.json.gz", tmp_path / "task", spill=False)
    result = run_rank_task(task)
    assert isinstance(result, RankResult)
    events = result.tables["events"]
    stored = pq.read_table(result.events_parquet)
    assert_same_events(stored, events)
    metadata = pq.ParquetFile(result.events_parquet).metadata
    assert metadata.num_rows == events.num_rows > 0
    chunks = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    coded = {
        name
        for position, name in enumerate(events.column_names)
        if any("DICTIONARY" in e for g in chunks for e in g.column(position).encodings)
    }
    # few distinct values: a dictionary; times, ids, sizes and args: none tried
    assert {"kind", "name", "rank", "device", "step"} <= coded
    unique = {"start_ns", "dur_ns", "correlation", "external_id", "bytes", "flops", "args"}
    assert not coded & unique, coded
    # ranges kept for the numbers (a reader's filter on times or steps skips row groups by
    # them), none for the texts
    ranged = {
        name
        for position, name in enumerate(events.column_names)
        if all(g.column(position).is_stats_set for g in chunks)
    }
    unranged = {
        name
        for position, name in enumerate(events.column_names)
        if not any(g.column(position).is_stats_set for g in chunks)
    }
    assert ranged == {"rank", "device", "stream", "pid", "step", *unique} - {"args"}, ranged
    assert unranged == {"kind", "name", "shapes", "dtypes", "args"}, unranged
    first = chunks[0].column(events.column_names.index("start_ns")).statistics
    starts = events.column("start_ns")
    assert first.min == pc.min(starts.slice(0, chunks[0].num_rows)).as_py()


def _mapped_files(table_column: pa.ChunkedArray) -> set[str]:
    """The files whose maps hold the buffers of a column (from /proc/self/maps)."""
    maps = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        low, high = (int(x, 16) for x in fields[0].split("-"))
        maps.append((low, high, fields[5] if len(fields) > 5 else ""))
    found = set()
    for chunk in table_column.chunks:
        for buffer in chunk.buffers():
            if buffer is not None and buffer.size:
                found |= {p for low, high, p in maps if low <= buffer.address < high}
    return found


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
@pytest.mark.parametrize("spill", [False, True])
def test_the_events_plain_columns_are_read_through_a_map_of_a_file(
    tmp_path: Path, spill: bool
) -> None:
    task = RankTask(0, "kineto", DATA / "v100_rank1_ddp.json.gz", tmp_path / "task", spill=spill)
    result = run_rank_task(task)
    assert isinstance(result, RankResult)
    events = loaded(result).tables["events"]
    stored = pq.read_table(result.events_parquet)
    # the whole table, columns in order (spilled: put together from the task's two files)
    assert_same_events(events, stored)

    def only(column: str, name: str) -> bool:
        files = _mapped_files(events[column])
        return bool(files) and all(f.removesuffix(" (deleted)").endswith(name) for f in files)

    # mapped since the import (the task's own table, or the parent's map of the file): the
    # plain columns the passes read and left as they were
    assert only("args", "events-text.arrow")
    assert only("start_ns", "events-plain.arrow")
    # the numbers in one piece (the text's pieces do not cut them): read where they lie
    assert events["start_ns"].num_chunks == 1
    assert events["args"].num_chunks > 1 or events.num_rows <= 1 << 16
    # the steps the passes assigned: mapped from a file written after them, not twice
    late = "events.arrow" if spill else "events-made.arrow"
    assert only("step", late)
    # the columns mapped since the import are not written again
    with pa.memory_map(str(task.work_dir / late)) as source:
        written = set(pa.ipc.open_file(source).schema.names)
    assert "step" in written and not written & {"args", "start_ns", "dur_ns"}, written
    if not spill:  # the dictionary columns stay where the analysis made them
        assert not any(".arrow" in f for f in _mapped_files(events["name"]))


@pytest.mark.parametrize("failing", ["map", "write"])
def test_a_task_whose_folder_cannot_be_mapped_keeps_its_events_in_the_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    trace = DATA / "v100_rank1_ddp.json.gz"
    expected = run_rank_task(RankTask(0, "kineto", trace, tmp_path / "mapped", spill=False))
    assert isinstance(expected, RankResult)

    def refused(*args: object, **kwargs: object) -> None:
        # what a filesystem without memory maps (some FUSE and network mounts) or a full
        # disk answers
        raise OSError(19 if failing == "map" else 28, "refused", str(args[0]))

    if failing == "map":
        monkeypatch.setattr(pa, "memory_map", refused)
    else:
        # the files the tables are written to (in pieces: perfledger.pages)
        monkeypatch.setattr(mapped_files, "PieceSink", refused)
        # the numbers' file, made to be filled in place: no room to reserve for them
        monkeypatch.setattr(filled_columns.os, "posix_fallocate", refused)
    task = RankTask(0, "kineto", trace, tmp_path / "heap", spill=False)
    result = run_rank_task(task)
    assert isinstance(result, RankResult)  # a memory saving, not a condition of the analysis
    assert_same_events(result.tables["events"], expected.tables["events"])
    assert result.advice == expected.advice
    # nothing left of the files it could not map
    assert not list(task.work_dir.glob("*.arrow"))


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
def test_a_spilled_task_whose_text_file_cannot_be_written_hands_on_the_text_with_its_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = DATA / "v100_rank1_ddp.json.gz"
    original = mapped_files.PieceSink

    def refusing_text(path: Path) -> PieceSink:
        if "events-text" in str(path):
            raise OSError(28, "No space left on device", str(path))
        return original(path)

    reserve = filled_columns.os.posix_fallocate

    def no_room_for_text(fd: int, offset: int, length: int) -> None:
        # the text's file, made to be filled in place: no room to reserve for it
        if "events-text" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(28, "No space left on device")
        reserve(fd, offset, length)

    monkeypatch.setattr(mapped_files, "PieceSink", refusing_text)
    monkeypatch.setattr(filled_columns.os, "posix_fallocate", no_room_for_text)
    task = RankTask(0, "kineto", trace, tmp_path / "task", spill=True)
    result = run_rank_task(task)
    assert isinstance(result, RankResult)
    # the numbers' file alone is handed on; the text goes with the passes' columns
    assert [p.name for p in result.events_plain] == ["events-plain.arrow"]
    events = loaded(result).tables["events"]
    assert_same_events(events, pq.read_table(result.events_parquet))
    assert events.column_names == list(result.events_columns)
    assert all(
        f.removesuffix(" (deleted)").endswith("events.arrow") for f in _mapped_files(events["args"])
    )
    assert all(
        f.removesuffix(" (deleted)").endswith("events-plain.arrow")
        for f in _mapped_files(events["start_ns"])
    )
    assert not (task.work_dir / "events-text.arrow").exists()


@pytest.mark.parametrize("spill", [False, True])
def test_a_task_told_so_writes_its_large_csvs_as_the_profile_would(
    tmp_path: Path, spill: bool
) -> None:
    from perfledger.render.csvs import csv_bytes

    task = RankTask(
        0, "kineto", DATA / "v100_rank1_ddp.json.gz", tmp_path / "task", spill=spill, csvs=True
    )
    result = run_rank_task(task)
    assert isinstance(result, RankResult)
    tables = loaded(result).tables
    assert set(result.csv_files) == {"op_summary.csv", "kernel_details.csv"}
    for name, table in (("op_summary.csv", "op_summary"), ("kernel_details.csv", "kernel_details")):
        assert tables[table].num_rows > 0
        assert result.csv_files[name].read_bytes() == csv_bytes(tables[table])
    assert result.timings["rank_csv_s"] >= 0


def test_a_task_not_told_writes_no_csv(tmp_path: Path) -> None:
    task = RankTask(0, "kineto", DATA / "v100_rank1_ddp.json.gz", tmp_path / "task", spill=False)
    result = run_rank_task(task)
    assert isinstance(result, RankResult)
    assert result.csv_files == {}
    assert "rank_csv_s" not in result.timings
    assert not list((tmp_path / "task").rglob("*.csv"))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_profile_of_one_rank_has_its_large_csvs(tmp_path: Path, workers: int) -> None:
    import io
    import json

    from rich.console import Console

    from perfledger.analysis.profile import analyze_traces
    from perfledger.render.csvs import csv_bytes
    from perfledger.run.execution import Execution
    from perfledger.run.pipeline import build_profile
    from perfledger.sources import load_traces

    source = DATA / "v100_rank1_ddp.json.gz"
    # the whole-profile analysis in this process, without rank tasks
    whole = analyze_traces(load_traces([source]))
    out = tmp_path / "p"
    build_profile(
        [source], out, console=Console(file=io.StringIO()), execution=Execution(workers=workers)
    )
    assert (out / "op_summary.csv").read_bytes() == csv_bytes(whole.op_summary)
    assert (out / "kernel_details.csv").read_bytes() == csv_bytes(whole.kernel_details)
    assert whole.op_summary.num_rows > 0 and whole.kernel_details.num_rows > 0
    timings = json.loads((out / "meta.json").read_text())["timings"]
    # one trace is analysed in this process: the profile's writer writes its large CSVs
    # with the others, beside the timelines and the report, not its task
    assert "rank_csv_s" not in timings and timings["csv_s"] > 0
    assert not list(out.rglob(".ranks"))


def test_the_task_csvs_wait_for_the_replay_and_its_wait_is_no_copy_time(tmp_path: Path) -> None:
    import threading
    import time

    from perfledger.run import tasks

    done = run_rank_task(
        RankTask(0, "kineto", DATA / "v100_rank1_ddp.json.gz", tmp_path / "first", spill=False)
    )
    assert isinstance(done, RankResult)
    task = RankTask(
        0, "kineto", DATA / "v100_rank1_ddp.json.gz", tmp_path / "task", spill=False, csvs=True
    )
    task.work_dir.mkdir()
    replayed = threading.Event()
    outcome: list[tuple[object, ...]] = []
    writer = threading.Thread(
        target=lambda: outcome.append(
            tasks._write_files(task, done.tables, {}, (), threading.Event(), replayed)
        )
    )
    writer.start()
    # the events' Parquet file written meanwhile, then no CSV before the replay is done
    deadline = time.monotonic() + 30
    while not (task.work_dir / "events.parquet").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert (task.work_dir / "events.parquet").exists()
    assert not list(task.work_dir.rglob("*.csv"))
    replayed.set()
    writer.join(30)
    (_, _, _, csvs, timings) = outcome[0]
    assert isinstance(csvs, dict) and isinstance(timings, dict)
    assert set(csvs) == {"op_summary.csv", "kernel_details.csv"}
    assert all(path.exists() for path in csvs.values())
    assert timings["copy_s"] < 0.4  # the half second waited is not the copies'


def test_the_only_rank_of_a_profile_gathers_no_collectives_for_the_cluster_pass(
    tmp_path: Path,
) -> None:
    """A task told its rank is the profile's only one leaves the collectives and the link
    usage empty (only the cluster pass of two ranks or more reads them); the rest of what it
    hands back is the same."""
    trace = DATA / "v100_rank1_ddp.json.gz"  # NCCL all-reduces: collectives to gather
    shared = run_rank_task(RankTask(0, "kineto", trace, tmp_path / "one_of_many", spill=False))
    alone = run_rank_task(RankTask(0, "kineto", trace, tmp_path / "alone", spill=False, alone=True))
    assert isinstance(shared, RankResult) and isinstance(alone, RankResult)
    assert shared.collectives.num_rows > 0
    assert alone.collectives.num_rows == 0
    assert alone.collectives.schema == shared.collectives.schema
    assert alone.links.num_rows == 0 and alone.links.schema == shared.links.schema
    assert alone.accounts == shared.accounts
    assert alone.advice is not None and shared.advice is not None
    assert alone.advice.findings == shared.advice.findings
    assert alone.replay == shared.replay
