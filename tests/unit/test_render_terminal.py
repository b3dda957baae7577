"""Terminal summary: what a user reads, checked on the exported text of a 120-column console."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

from perfledger.analysis.gaps import gap_report
from perfledger.analysis.ops import op_statistic
from perfledger.analysis.transfers import transfers
from perfledger.model.accounts import HostWindowAccount, WindowAccount
from perfledger.render.terminal import MAX_STEP_ROWS, print_summary
from tests.synth import EventsBuilder, gaps_table

MS = 1_000_000
LONG_KERNEL = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4>" * 3


def window(step: int, start_ms: int, wall_ms: int) -> WindowAccount:
    """compute 60%, communication 10%, memcpy 5%, memset 5%, idle 20% (sync 15%, other 5%)."""
    w = wall_ms * MS
    return WindowAccount(
        rank=0,
        device=0,
        step=step,
        start_ns=start_ms * MS,
        end_ns=start_ms * MS + w,
        compute_ns=w * 60 // 100,
        communication_ns=w * 10 // 100,
        overlapped_communication_ns=0,
        memcpy_ns=w * 5 // 100,
        memset_ns=w * 5 // 100,
        idle_ns=w * 20 // 100,
        idle_host_dispatch_ns=0,
        idle_sync_ns=w * 15 // 100,
        idle_dataloader_ns=0,
        idle_launch_latency_ns=0,
        idle_other_ns=w * 5 // 100,
    )


def events() -> pa.Table:
    b = EventsBuilder()
    # twelve operator types, one kernel each, 1..12 µs: the top 10 are 12..3 µs
    for i in range(1, 13):
        b.cpu_op(i * 100_000, 50_000, f"aten::op{i:02d}", external_id=i)
        b.runtime(i * 100_000 + 1_000, 1_000, correlation=i, external_id=i)
        b.kernel(i * 100_000 + 10_000, i * 1_000, f"kernel{i}", correlation=i)
    b.kernel(5_000_000, 500, LONG_KERNEL)
    b.cpu_op(6_000_000, 10, "aten::[bold]index[/bold]", external_id=99)
    b.runtime(6_000_001, 1, correlation=99, external_id=99)
    b.kernel(6_000_100, 1, "index_kernel", correlation=99)
    b.memcpy(7_000_000, 100_000, bytes=1 << 20)
    return b.table()


def render(summary: dict[str, object], **results: object) -> str:
    console = Console(width=120, record=True, force_terminal=False)
    print_summary(console, summary, **results)  # type: ignore[arg-type]
    return console.export_text()


def headline(**overrides: object) -> dict[str, object]:
    summary: dict[str, object] = {
        "source": {"kind": "kineto", "files": ["rank0.json.gz"]},
        "ranks": [0],
        "step_count": 2,
        "step_time_ms": 15.0,
        "profiler_overhead_pct": None,
        "loss": None,
    }
    summary.update(overrides)
    return summary


def row(text: str, first_cell: str, after: str) -> str:
    """The first line below the ``after`` title starting with ``first_cell``, spaces squeezed."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if after in line)
    for line in lines[start:]:
        cells = line.split()
        if cells and cells[0] == first_cell:
            return " ".join(cells)
    raise AssertionError(f"no row {first_cell!r} after {after!r}")


def full_render() -> str:
    table = events()
    gaps = gaps_table(
        [
            {"start_ns": 0, "end_ns": 5_000, "cause": "sync"},
            {"start_ns": 10_000, "end_ns": 2_010_000, "cause": "other"},
            {"start_ns": 3_000_000, "end_ns": 3_500_000, "cause": "sync"},
        ]
    )
    return render(
        headline(loss="rank0.json.gz: truncated at byte 1 000"),
        windows=[window(-1, 0, 30), window(2, 10, 20), window(1, 0, 10)],
        op_statistic=op_statistic(table),
        transfers=transfers(table),
        gaps=gap_report(gaps, table),
        paths=[Path("prof_1/summary.json"), Path("prof_1/op_statistic.csv")],
    )


def test_headline_and_step_tables() -> None:
    text = full_render()
    assert "step time 15.000 ms (median)" in text
    assert "1 rank · 2 steps" in text
    assert "overhead unknown" in text
    title = "rank 0 · device 0: time account"
    # step 1: wall 10 ms, compute 6 ms (60%), communication 1 ms (10%), ... idle 2 ms (20%)
    assert row(text, "1", title) == (
        "1 10.000 6.000 (60.0%) 1.000 (10.0%) 0.500 (5.0%) 0.500 (5.0%) 2.000 (20.0%)"
    )
    assert row(text, "span", title).startswith("span 30.000 18.000 (60.0%)")
    # steps in order, span last
    lines = text.split("\n")
    first_cells = [line.split()[0] for line in lines if line.split()]
    table_start = first_cells.index("rank")
    assert first_cells[table_start:].index("1") < first_cells[table_start:].index("2")
    assert first_cells[table_start:].index("2") < first_cells[table_start:].index("span")
    # idle 4 ms of 20: sync 3 ms (15%), other 1 ms (5%), the rest zero
    assert row(text, "2", "idle by cause") == (
        "2 4.000 (20.0%) 0.000 (0.0%) 3.000 (15.0%) 0.000 (0.0%) 0.000 (0.0%) 1.000 (5.0%)"
    )
    assert all(len(line) <= 120 for line in lines)


def test_top_operators_transfers_gaps_loss_and_paths() -> None:
    text = full_render()
    section = text[text.index("top 10 operators") : text.index("memory copies")]
    # the copy (100 µs) leads, then aten::op12 .. aten::op04: ten rows, op03 and below cut
    names = [line.split()[0] for line in section.split("\n")[4:] if line.strip()]
    assert names[0] == "Memcpy"
    assert names[1:] == [f"aten::op{i:02d}" for i in range(12, 3, -1)]
    assert "aten::op03" not in section
    # 12 µs of 178.501 µs of device time in all (100 + 1 + .. + 12 + 0.5 + 0.001)
    assert row(text, "aten::op12", "top 10") == "aten::op12 kernel 1 0.012 12.000 6.7%"
    assert row(text, "HtoD", "memory copies") == "HtoD 1 1.0 MiB 0.100 10.49 1 0"
    gaps = "idle gaps"
    assert row(text, "<10us", gaps) == "<10us 1 0.005 0.000 0.005 0.000 0.000 0.000"
    assert row(text, "0.1-1ms", gaps) == "0.1-1ms 1 0.500 0.000 0.500 0.000 0.000 0.000"
    assert row(text, "1-10ms", gaps) == "1-10ms 1 2.000 0.000 0.000 0.000 0.000 2.000"
    assert "trace incomplete: rank0.json.gz: truncated at byte 1 000" in text
    assert text.rstrip().endswith("wrote:\n  prof_1/summary.json\n  prof_1/op_statistic.csv")


def test_trace_strings_are_not_markup_and_long_names_are_cut() -> None:
    table = events()
    statistic = op_statistic(table)
    text = render(headline(), op_statistic=statistic, top_operators=20)
    assert "aten::[bold]index[/bold]" in text
    long_line = next(line for line in text.split("\n") if "cutlass" in line)
    assert "…" in long_line
    assert len(long_line) <= 120


def test_host_only_table_and_no_steps() -> None:
    host = HostWindowAccount(
        rank=3,
        step=-1,
        start_ns=0,
        end_ns=8 * MS,
        dataloader_ns=2 * MS,
        forward_ns=2 * MS,
        backward_ns=3 * MS,
        optimizer_ns=1 * MS,
        operator_ns=5 * MS,
        overhead_ns=1 * MS,
    )
    text = render(headline(step_time_ms=None, step_count=0), host_windows=[host])
    assert "no step marks" in text
    assert row(text, "span", "rank 3 · host") == (
        "span 8.000 2.000 (25.0%) 2.000 (25.0%) 3.000 (37.5%) 1.000 (12.5%) "
        "5.000 (62.5%) 1.000 (12.5%)"
    )
    assert "trace incomplete" not in text
    assert "wrote:" not in text


def _step_cells(text: str, title: str) -> list[str]:
    """The first cells of the rows of the table titled ``title`` (up to the next title)."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if title in line)
    cells = []
    for line in lines[start + 1 :]:
        if line.strip() and not line.startswith(" "):
            break  # the caption or the next table's title
        first = line.split()[:1]
        if first and (first[0].isdigit() or first[0] == "span"):
            cells.append(first[0])
    return cells


def _host(step: int, wall_ms: int) -> HostWindowAccount:
    w = wall_ms * MS
    return HostWindowAccount(
        rank=0,
        step=step,
        start_ns=max(step, 0) * 1_000 * MS,
        end_ns=max(step, 0) * 1_000 * MS + w,
        dataloader_ns=0,
        forward_ns=w // 2,
        backward_ns=w // 2,
        optimizer_ns=0,
        operator_ns=w // 2,
        overhead_ns=w // 2,
    )


def test_a_long_run_lists_its_first_and_representative_steps() -> None:
    # GIVEN 40 steps of 100 to 139 ms, in no order of their walls, and the whole span
    walls = {step: 100 + (step * 7) % 40 for step in range(1, 41)}
    windows = [window(step, step * 1_000, wall) for step, wall in walls.items()]
    windows.append(window(-1, 0, 50_000))
    hosts = [_host(step, wall) for step, wall in walls.items()]
    hosts.append(_host(-1, 50_000))
    # WHEN the summary is printed
    text = render(headline(step_count=40), windows=windows, host_windows=hosts)
    # THEN each table lists the first step, the median, slowest and fastest, and the span
    by_wall = sorted(walls, key=lambda step: (walls[step], step))
    slowest, fastest, median = by_wall[-1], by_wall[0], by_wall[(len(by_wall) - 1) // 2]
    listed = [str(step) for step in sorted({1, slowest, fastest, median})] + ["span"]
    for title in ("device 0: time account", "idle by cause", "host (main thread)"):
        assert _step_cells(text, title) == listed, title
    note = (
        f"4 of 40 steps listed (first 1, median {median}, slowest {slowest}, fastest "
        f"{fastest}); step_trace.csv has every step's row"
    )
    assert " ".join(text.split()).count(note) == 3
    assert row(text, str(slowest), "time account").startswith(f"{slowest} {walls[slowest]}.000")


def test_a_short_run_lists_every_step() -> None:
    steps = range(1, MAX_STEP_ROWS + 1)
    windows = [window(step, step * 100, 10 + step) for step in steps]
    text = render(headline(step_count=len(steps)), windows=windows)
    assert _step_cells(text, "time account") == [str(step) for step in steps]
    assert "steps listed" not in text


def test_rendering_twice_gives_the_same_text() -> None:
    assert full_render() == full_render()


def test_a_narrow_console_stacks_figures_instead_of_cutting_them() -> None:
    console = Console(width=80, record=True, force_terminal=False)
    table = events()
    gaps = gaps_table([{"start_ns": 0, "end_ns": 2_000_000, "cause": "host_dispatch"}])
    windows = [window(1, 0, 1_234), window(-1, 0, 1_234)]
    print_summary(
        console,
        headline(),
        windows=windows,
        op_statistic=op_statistic(table),
        transfers=transfers(table),
        gaps=gap_report(gaps, table),
    )
    text = console.export_text()
    lines = text.split("\n")
    assert all(len(line) <= 80 for line in lines)
    # step 1 of 1234 ms: compute 740.4 ms (60%) over two lines, nothing cut
    first = next(i for i, line in enumerate(lines) if line.split()[:2] == ["1", "1234.000"])
    assert " ".join(lines[first].split()) == "1 1234.000 740.400 123.400 61.700 61.700 246.800"
    assert " ".join(lines[first + 1].split()) == "(60.0%) (10.0%) (5.0%) (5.0%) (20.0%)"
    assert "…" not in text[: text.index("top 10")]
    assert row(text, "1-10ms", "idle gaps") == "1-10ms 1 2.000 2.000 0.000 0.000 0.000 0.000"


def test_the_host_table_says_how_its_columns_nest() -> None:
    host = HostWindowAccount(
        rank=0,
        step=-1,
        start_ns=0,
        end_ns=8 * MS,
        dataloader_ns=2 * MS,
        forward_ns=2 * MS,
        backward_ns=3 * MS,
        optimizer_ns=1 * MS,
        operator_ns=5 * MS,
        overhead_ns=1 * MS,
    )
    text = " ".join(render(headline(), host_windows=[host]).split())
    # 2 + 2 + 3 + 1 = 8 ms by phase; 2 + 5 + 1 = 8 ms by coverage: the note names both sums
    assert "dataloader + forward + backward + optimizer = wall" in text
    assert "dataloader + operators + overhead = wall" in text


def finding(rule: str, ms: float) -> dict[str, object]:
    return {
        "id": rule,
        "title": f"{rule} title",
        "severity_ms": ms,
        "severity_pct": ms,
        "suggestion": "Do this. Then that.",
    }


def test_every_finding_is_named_with_its_gain_and_what_to_do_next() -> None:
    findings = [finding(f"rule_{i}", 10.0 - i) for i in range(7)]
    text = render(headline(findings=findings), paths=[Path("prof_x"), Path("prof_x/summary.json")])
    table_rows = [line for line in text.split("\n") if line.startswith(" rule_")]
    assert [line.split()[0] for line in table_rows] == [f"rule_{i}" for i in range(5)]
    also = next(line for line in text.split("\n") if line.startswith("also:"))
    assert "rule_5 5.000 ms/step" in also and "rule_6 4.000 ms/step" in also
    assert "rule_4" not in also  # listed once, in the table
    assert "next:" in text and "perfledger diff prof_x NEW" in text
    assert "also:" not in render(headline(findings=findings[:5]))
    assert "next:" not in render(headline())
    assert "no finding: no rule's threshold is crossed" in render(headline())


@pytest.mark.parametrize(
    ("overhead", "noise", "said"),
    [
        (None, None, "overhead unknown"),
        (22.0, None, "profiler overhead 22.00%"),
        (22.0, 4.0, "profiler overhead 22.00% ± 4.00%"),
        (3.0, 4.0, "profiler overhead within noise (+3.00% ± 4.00%)"),
        (-12.79, 15.0, "profiler overhead within noise (-12.79% ± 15.00%)"),
        (-12.79, 5.0, "profiler overhead none measured (profiled steps 12.79% ± 5.00% faster)"),
        (-12.79, None, "profiler overhead none measured (profiled steps 12.79% faster)"),
    ],
)
def test_the_profiler_overhead_is_read_against_its_noise(
    overhead: float | None, noise: float | None, said: str
) -> None:
    summary = headline(
        profiler_overhead_pct=overhead,
        profiler_overhead_noise_pct=noise,
        unprofiled_step_ms=12.5 if overhead is not None else None,
    )
    text = " ".join(render(summary).split())
    assert said in text
    assert ("unprofiled 12.500 ms" in text) == (overhead is not None)
    if overhead is not None and overhead < 0:
        assert f"overhead {overhead:.2f}%" not in text  # never a negative cost


def test_unread_input_is_said_under_its_new_name_or_its_old_one() -> None:
    assert "trace incomplete: a.json: cut" in render(headline(unread_input="a.json: cut"))
    assert "trace incomplete: b.json: cut" in render(headline(loss="b.json: cut"))


def test_rules_that_cannot_apply_are_counted_by_reason() -> None:
    host_only = "no device activity: host-only profile"
    skipped = [{"rule": r, "reason": host_only} for r in ("a", "b", "c")]
    skipped.append({"rule": "d", "reason": "no host CPU counters"})
    text = " ".join(render(headline(advisor_skipped=skipped)).split())
    assert f"not applicable: 3 rules: {host_only}; 1 rule: no host CPU counters" in text
    assert "not applicable" not in render(headline(advisor_skipped=[]))
