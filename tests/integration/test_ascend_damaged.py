"""Damaged Ascend output, one case per kind of damage the fuzzer (tests/fuzz) found: each is
read with what was lost said in one note per problem naming its file, or refused in one line
naming the file; never another exception, a multi-line message or a library's printout."""

from __future__ import annotations

import csv
import gc
import io
import json
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from perfledger.errors import TraceFormatError
from perfledger.model.trace import Trace
from perfledger.sources.ascend import load_ascend
from tests import ascend_gen as gen
from tests.paths import data_file


def only(traces: list[Trace]) -> Trace:
    (trace,) = traces
    return trace


def notes(trace: Trace) -> list[str]:
    return trace.loss.split("; ") if trace.loss else []


def names(trace: Trace) -> set[str]:
    return set(trace.events.column("name").to_pylist())


def _edit_timeline(rank: Path, edit: Any) -> Path:
    path = rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(path.read_text())
    edit(events)
    path.write_text(json.dumps(events))
    return path


def _rewrite_csv(path: Path, edit: Any) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    edit(rows)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8")


# --- timelines -----------------------------------------------------------------------------------


def test_a_timeline_cut_short_is_read_up_to_where_it_ends(tmp_path: Path) -> None:
    rank = gen.write_text(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    whole = path.read_bytes()
    cut = whole.index(b'"name": "aten::add"')  # inside the aten::add event
    path.write_bytes(whole[:cut])
    trace = only(load_ascend(rank))
    assert {"ProfilerStep#7", "aten::copy_", "aten::conv2d"} <= names(trace)
    assert "aten::add" not in names(trace)
    (note,) = notes(trace)
    assert note.startswith(f"{path}: the file ends early after ")
    assert note.endswith("events: the rest of the timeline is lost")


def test_malformed_timeline_events_are_skipped_and_counted(tmp_path: Path) -> None:
    def damage(events: list[dict[str, Any]]) -> None:
        for event in events:
            if event.get("name") == "aten::add":
                event["ph"] = 5  # a number where the phase letter belongs
            if event.get("name") == "aten::copy_":
                event["args"] = "@@deep@@"
            if event.get("name") == "aten::conv2d":
                event["ts"] = "not a time"

    rank = gen.write_text(tmp_path)
    path = _edit_timeline(rank, damage)
    deep = "[" * 5000 + "]" * 5000
    path.write_text(path.read_text().replace('"@@deep@@"', deep))
    trace = only(load_ascend(rank))
    assert not {"aten::add", "aten::copy_", "aten::conv2d"} & names(trace)
    assert {"ProfilerStep#7", "Conv2D", "Add"} <= names(trace)
    assert notes(trace) == [
        f"{path}: 2 malformed events were skipped",
        f"{path}: skipped 1 events without a readable start time",
    ]


def test_an_operator_with_a_text_thread_id_is_still_read(tmp_path: Path) -> None:
    def text_tid(events: list[dict[str, Any]]) -> None:
        next(e for e in events if e.get("name") == "aten::add")["tid"] = "main"

    rank = gen.write_text(tmp_path)
    _edit_timeline(rank, text_tid)
    trace = only(load_ascend(rank))
    assert "aten::add" in names(trace)
    assert trace.loss is None


def test_profiler_info_nested_deeper_than_the_stack_is_left_out_and_said(
    tmp_path: Path,
) -> None:
    rank = gen.write_text(tmp_path)
    info = rank / "profiler_info_0.json"
    info.write_text('{"rank_id": 0, "config": ' + "[" * 100_000 + "]" * 100_000 + "}")
    trace = only(load_ascend(rank))
    assert "aten::add" in names(trace)
    assert trace.rank == 0  # from the file's name
    (note,) = notes(trace)
    assert note.startswith(f"{info}: not valid JSON (")
    assert note.endswith(", left out")


def test_a_database_with_blobs_and_text_in_its_run_facts_is_read(tmp_path: Path) -> None:
    rank = gen.write_db(tmp_path)
    _edit_db(
        rank,
        "INSERT INTO NPU_INFO VALUES (1, x'ff00')",
        "INSERT INTO NPU_INFO VALUES ('x', 7)",
        "UPDATE RANK_DEVICE_MAP SET rankId = 'zero'",
        "CREATE TABLE SESSION_TIME_INFO (startTimeNs INTEGER, endTimeNs INTEGER)",
        "INSERT INTO SESSION_TIME_INFO VALUES (x'00', 1e999)",
    )
    trace = only(load_ascend(rank))
    json.dumps(trace.meta, allow_nan=False)  # meta.json can hold every fact
    assert trace.meta["device_properties"]["npu"] == {"0": "Ascend910B", "x": "7"}
    assert trace.meta["session_ns"] == [None, None]


# --- CSV tables ----------------------------------------------------------------------------------


def test_empty_and_repeated_header_cells_do_not_stop_the_kernel_table(tmp_path: Path) -> None:
    def headers(rows: list[list[str]]) -> None:
        rows[0][rows[0].index("Wait Time(us)")] = ""
        rows[0][rows[0].index("Block Dim")] = "Input Shapes"

    rank = gen.write_text(tmp_path)
    _rewrite_csv(rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", headers)
    trace = only(load_ascend(rank))
    kernels = trace.events.filter(
        [kind == "kernel" for kind in trace.events.column("kind").to_pylist()]
    )
    assert sorted(kernels.column("name").to_pylist()) == ["Add1", "Conv2D1"]
    assert trace.loss is None


def test_bytes_that_are_not_utf8_are_read_as_replacement_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    printed: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)
    rank = gen.write_text(tmp_path)
    kernels = rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    kernels.write_bytes(kernels.read_bytes().replace(b"Add1", b"Add\xff", 1))
    memory = data_file("ascend/torch_npu_text/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT")
    shutil.copy(memory / "op_statistic.csv", rank / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv")
    statistic = rank / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv"
    statistic.write_bytes(statistic.read_bytes().decode().encode("utf-16"))
    trace = only(load_ascend(rank))
    gc.collect()
    assert printed == []
    assert "Add\ufffd" in names(trace)
    assert notes(trace) == [f"{kernels}: 1 bytes that are not UTF-8 read as U+FFFD"]


def test_kernel_rows_without_a_name_or_a_start_are_skipped_and_counted(tmp_path: Path) -> None:
    source = data_file("ascend/msprof_cli/op_summary_1.csv")
    path = tmp_path / source.name
    shutil.copy(source, path)

    def damage(rows: list[list[str]]) -> None:
        rows[2][rows[0].index("Op Name")] = ""
        rows[3][rows[0].index("Start Time(us)")] = "abc"
        rows[4][rows[0].index("Start Time(us)")] = "-1e9"

    _rewrite_csv(path, damage)
    trace = only(load_ascend(path))
    assert trace.events.num_rows == 18  # 21 rows: one short of cells, two unreadable
    assert min(trace.events.column("start_ns").to_pylist()) == -1_000_000_000_000
    assert notes(trace) == [
        f"{path}: skipped 1 malformed rows (a row has 31 of 32 cells)",
        f"{path}: skipped 2 rows without a name or a readable start time",
    ]


def test_skipped_rows_are_one_note_naming_the_file_once(tmp_path: Path) -> None:
    rank = gen.write_text(tmp_path)
    kernels = rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kernels.read_text().splitlines(keepends=True)
    lines[1] = "broken,row\n"
    lines[2] = "another\n"
    kernels.write_text("".join(lines))
    trace = only(load_ascend(rank))
    (note,) = notes(trace)
    assert note == (
        f"{kernels}: skipped 2 malformed rows (a row has 2 of 14 cells, a row has 1 of 14 cells)"
    )


# --- databases -----------------------------------------------------------------------------------


def _edit_db(rank: Path, *statements: str) -> Path:
    path = rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(path)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return path


def test_a_database_without_its_string_table_is_read_without_names(tmp_path: Path) -> None:
    rank = gen.write_db(tmp_path)
    path = _edit_db(rank, "DROP TABLE STRING_IDS")
    trace = only(load_ascend(rank))
    # every name was a string id: what has no other name is left out, and said
    assert trace.events.num_rows > 0
    (note,) = notes(trace)
    assert note.startswith(f"{path}: skipped ") and "rows without a name or a start time" in note


def test_database_rows_without_a_thread_or_a_start_are_handled(tmp_path: Path) -> None:
    rank = gen.write_db(tmp_path)
    path = _edit_db(
        rank,
        "UPDATE PYTORCH_API SET globalTid = NULL WHERE rowid = 3",
        "UPDATE PYTORCH_API SET startNs = NULL WHERE rowid = 4",
    )
    trace = only(load_ascend(rank))
    assert "aten::copy_" in names(trace)  # its thread unknown, still an operator
    assert "aten::conv2d" not in names(trace)
    assert notes(trace) == [f"{path}: skipped 1 rows without a name or a start time"]


def test_a_kernel_table_without_its_columns_leaves_the_timeline_read(tmp_path: Path) -> None:
    rank = gen.write_text(tmp_path)
    kernels = rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    _rewrite_csv(kernels, lambda rows: rows[0].__setitem__(rows[0].index("Name"), "Nom"))
    trace = only(load_ascend(rank))
    assert {"aten::add", "Conv2D1", "Add1"} <= names(trace)  # the timeline's kernels
    (note,) = notes(trace)
    assert note.startswith(f"{kernels}: missing required columns ")
    assert note.endswith(", left out")


def test_a_timeline_that_is_not_json_leaves_the_kernel_table_read(tmp_path: Path) -> None:
    rank = gen.write_text(tmp_path)
    timeline = rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    timeline.write_bytes(b"\x00\x01 not json")
    trace = only(load_ascend(rank))
    assert names(trace) >= {"Conv2D1", "Add1", "hcom_allReduce__1_0_1"}
    (note,) = notes(trace)
    assert note == f"{timeline}: not a JSON array of trace events, left out"


def test_neither_timeline_nor_kernel_table_readable_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    rank = gen.write_text(tmp_path)
    (rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_bytes(b"{}")
    kernels = rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    kernels.write_text("a,b\n1,2\n")
    with pytest.raises(TraceFormatError) as raised:
        load_ascend(rank)
    assert str(raised.value).startswith(f"{kernels}: missing required columns ")


# --- summaries kept in meta ----------------------------------------------------------------------


def test_figures_that_are_not_finite_numbers_stay_out_of_the_figures(tmp_path: Path) -> None:
    rank = gen.write_text(tmp_path)
    output = rank / "ASCEND_PROFILER_OUTPUT"
    real = data_file("ascend/torch_npu_text/level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT")
    shutil.copy(real / "api_statistic.csv", output / "api_statistic.csv")
    _rewrite_csv(output / "api_statistic.csv", lambda rows: rows[1].__setitem__(2, "-inf"))
    communication = json.loads((real / "communication.json").read_text())
    step = next(iter(communication.values()))
    op = next(iter(step["collective"].values()))
    op["Communication Time Info"]["Elapse Time(ms)"] = 1e305  # beyond int64 once in ns
    op["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"] = "x"
    (output / "communication.json").write_text(json.dumps(communication))
    trace = only(load_ascend(rank))
    json.dumps(trace.meta, allow_nan=False)  # meta.json can hold every figure
    (first, *_) = trace.meta["profiler_summaries"]["api_statistic"]
    assert first[list(first)[2]] == "-inf"
    assert trace.loss is None


def test_analysis_database_figures_that_are_not_numbers_are_left_out(tmp_path: Path) -> None:
    rank = gen.write_db(tmp_path)
    analysis = rank / "ASCEND_PROFILER_OUTPUT" / "analysis.db"
    con = sqlite3.connect(analysis)
    con.execute("CREATE TABLE StepTraceTime (step TEXT, computing REAL)")
    con.execute("INSERT INTO StepTraceTime VALUES ('7', 1e999), (x'ff', 12.5)")
    con.execute("CREATE TABLE CommAnalyzerTime (hccl_op_name TEXT, elapse_time REAL)")
    con.execute("INSERT INTO CommAnalyzerTime VALUES ('hcom_allReduce__1_0_1@g', 1e999)")
    con.commit()
    con.close()
    trace = only(load_ascend(rank))
    json.dumps(trace.meta, allow_nan=False)
    assert trace.meta["profiler_summaries"]["step_trace_time"] == [
        {"step": "7", "computing": None},
        {"step": None, "computing": 12.5},
    ]


@pytest.mark.parametrize("rank_id", [10**30, 2**31, -3, "0", True])
def test_a_rank_id_that_is_not_a_rank_gives_way_to_the_file_name(
    tmp_path: Path, rank_id: Any
) -> None:
    rank = gen.write_text(tmp_path)
    info = rank / "profiler_info_0.json"
    document = json.loads(info.read_text())
    document["rank_id"] = rank_id
    info.write_text(json.dumps(document))
    trace = only(load_ascend(rank))
    assert trace.rank == 0 and trace.meta["rank"] == 0
