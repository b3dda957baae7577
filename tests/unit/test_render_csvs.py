"""CSV writer: exact bytes, quoting against the standard library, atomic writes, step_trace."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.model.accounts import (
    HOST_STEP_TRACE_COLUMNS,
    STEP_TRACE_COLUMNS,
    HostWindowAccount,
    WindowAccount,
    host_step_trace_table,
    step_trace_table,
)
from perfledger.render.csvs import csv_bytes, write_csv

# DESIGN.md's step_trace.csv columns, spelled out independently of the module.
DESIGN_STEP_TRACE = [
    "rank",
    "device",
    "step",
    "start_ns",
    "end_ns",
    "wall_ns",
    "compute_ns",
    "communication_ns",
    "overlapped_communication_ns",
    "memcpy_ns",
    "memset_ns",
    "idle_ns",
    "idle_host_dispatch_ns",
    "idle_sync_ns",
    "idle_dataloader_ns",
    "idle_launch_latency_ns",
    "idle_other_ns",
    # DESIGN.md, added in 0.2: the exposed communication split
    "communication_wait_ns",
    "communication_transfer_ns",
]


def test_exact_bytes() -> None:
    table = pa.table(
        {
            "name": pa.array(["aten::addmm", 'say "hi", then\nleave', None]).dictionary_encode(),
            "count": pa.array([2, None, -3], pa.int64()),
            "gbps": [10.48576, float("nan"), 1 / 3],
            "ratio": [0.5, float("inf"), -1e-9],
            "pageable": [True, False, None],
        }
    )
    assert csv_bytes(table) == (
        b"name,count,gbps,ratio,pageable\n"
        b"aten::addmm,2,10.48576,0.5,true\n"
        b'"say ""hi"", then\nleave",,,,false\n'
        b",-3,0.333333,0,\n"
    )


def test_floats_too_large_to_round_are_written_as_they_are() -> None:
    # a corrupt trace's figure (flops of 1.8e302): rounding to 6 decimals would overflow
    huge = pa.table({"flops": [1.797693134862316e302, -1e305, 2.5e299, 123.4567891]})
    assert csv_bytes(huge) == (b"flops\n1.797693134862316e+302\n-1e+305\n2.5e+299\n123.456789\n")


def test_write_csv_writes_the_same_bytes_atomically(tmp_path: Path) -> None:
    table = pa.table({"a": [1, 2], "b": ["x", "y"]})
    target = tmp_path / "op_statistic.csv"
    target.write_bytes(b"old")
    write_csv(table, target)
    assert target.read_bytes() == b"a,b\n1,x\n2,y\n" == csv_bytes(table)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["op_statistic.csv"]
    write_csv(table, target)  # twice: identical bytes
    assert target.read_bytes() == csv_bytes(table)


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "x.csv"
    target.write_bytes(b"old")
    bad = pa.table({"a": [1], "b": pa.array([[1, 2]])})  # a list column cannot be written
    with pytest.raises(TypeError, match="list"):
        write_csv(bad, target)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.csv"]


def test_many_rows_span_several_batches() -> None:
    n = 150_000
    table = pa.table({"i": pa.array(range(n), pa.int64()), "half": [i / 2 for i in range(n)]})
    lines = csv_bytes(table).decode().split("\n")
    assert len(lines) == n + 2  # header, rows, and the empty piece after the final newline
    assert lines[1] == "0,0"
    assert lines[70_001] == "70000,35000"
    assert lines[n] == f"{n - 1},{(n - 1) / 2}"
    assert lines[-1] == ""


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",))), max_size=20))
def test_strings_read_back_with_the_standard_library(texts: list[str]) -> None:
    got = csv_bytes(pa.table({"text": pa.array(texts, pa.string())})).decode()
    rows = list(csv.reader(io.StringIO(got, newline="")))
    assert rows[0] == ["text"]
    assert [row[0] if row else "" for row in rows[1:]] == texts
    # quoted exactly when the text holds a separator, a quote or a line break
    for text in texts:
        cell = csv_bytes(pa.table({"t": [text]})).decode().removeprefix("t\n")
        assert cell.startswith('"') == any(c in text for c in ',"\r\n'), text


def window(step: int, device: int = 0, rank: int = 0) -> WindowAccount:
    return WindowAccount(
        rank=rank,
        device=device,
        step=step,
        start_ns=1_000 * (step + 1),
        end_ns=1_000 * (step + 1) + 900,
        compute_ns=500,
        communication_ns=100,
        overlapped_communication_ns=7,
        memcpy_ns=50,
        memset_ns=10,
        idle_ns=240,
        idle_host_dispatch_ns=100,
        idle_sync_ns=60,
        idle_dataloader_ns=40,
        idle_launch_latency_ns=30,
        idle_other_ns=10,
    )


def test_step_trace_table_has_design_columns_and_span_rows_last() -> None:
    accounts = [window(-1), window(2), window(1, device=1), window(1), window(-1, rank=1)]
    table = step_trace_table(accounts)
    assert list(table.column_names) == DESIGN_STEP_TRACE == list(STEP_TRACE_COLUMNS)
    keys = [(r["rank"], r["device"], r["step"]) for r in table.to_pylist()]
    assert keys == [(0, 0, 1), (0, 0, 2), (0, 0, -1), (0, 1, 1), (1, 0, -1)]
    first = table.slice(0, 1).to_pylist()[0]
    assert first["start_ns"] == 2_000
    assert first["wall_ns"] == 900
    assert first["overlapped_communication_ns"] == 7
    assert first["idle_launch_latency_ns"] == 30
    # no split given: the exposed communication is all transfer
    assert (first["communication_wait_ns"], first["communication_transfer_ns"]) == (0, 100)
    text = csv_bytes(table).decode().split("\n")
    assert text[0] == ",".join(DESIGN_STEP_TRACE)
    assert text[1] == "0,0,1,2000,2900,900,500,100,7,50,10,240,100,60,40,30,10,0,100"


def host_window(step: int, scale: int) -> HostWindowAccount:
    # phases: 10 + 30 + 40 + 20 = 100; coverage: 10 + 70 + 20 = 100 (times scale)
    return HostWindowAccount(
        rank=0,
        step=step,
        start_ns=10 * scale,
        end_ns=110 * scale,
        dataloader_ns=10 * scale,
        forward_ns=30 * scale,
        backward_ns=40 * scale,
        optimizer_ns=20 * scale,
        operator_ns=70 * scale,
        overhead_ns=20 * scale,
    )


def test_host_step_trace_table() -> None:
    accounts = [host_window(-1, 10), host_window(3, 1)]
    for account in accounts:
        account.self_check()
    table = host_step_trace_table(accounts)
    assert list(table.column_names) == list(HOST_STEP_TRACE_COLUMNS)
    assert list(table.column_names) == [
        "rank",
        "device",
        "step",
        "start_ns",
        "end_ns",
        "wall_ns",
        "dataloader_ns",
        "forward_ns",
        "backward_ns",
        "optimizer_ns",
        "operator_ns",
        "overhead_ns",
    ]
    assert [tuple(row.values()) for row in table.to_pylist()] == [
        (0, -1, 3, 10, 110, 100, 10, 30, 40, 20, 70, 20),
        (0, -1, -1, 100, 1_100, 1_000, 100, 300, 400, 200, 700, 200),
    ]
