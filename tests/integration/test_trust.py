"""Figures a user can trust: on odd, damaged and real traces every figure is plausible, and the
quality report says what was repaired or is doubtful (docs/accounting.md, "Trace quality")."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from perfledger.analysis.quality import rank_checks
from perfledger.model import schema
from perfledger.model.accounts import GAPS_SCHEMA, Accounting, StepWindow, WindowAccount
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from perfledger.sources import load_traces
from tests import kineto_gen as gen
from tests.cli import perfledger
from tests.kineto_gen import write_kineto
from tests.odd_traces import VARIANTS, Variant, clean_run, variant_events
from tests.paths import DATA, data_file
from tests.synth import EventsBuilder

CATEGORIES = ("compute_ns", "communication_ns", "memcpy_ns", "memset_ns", "idle_ns")
IDLE_CAUSES = (
    "idle_host_dispatch_ns",
    "idle_sync_ns",
    "idle_dataloader_ns",
    "idle_launch_latency_ns",
    "idle_other_ns",
)
YEAR_US = 365 * 24 * 3600 * 1_000_000
# ``*_pct`` figures that are no share of a whole: changes, spreads, excesses, overheads
NOT_SHARES = ("spread", "excess", "change", "vs_median", "profiler_overhead")


def analyse(source: Path, out: Path) -> Path:
    build_profile(
        [source], out, console=Console(file=io.StringIO()), execution=Execution(workers=0)
    )
    return out


def _numbers(document: Any, key: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(document, dict):
        for k, v in document.items():
            yield from _numbers(v, k)
    elif isinstance(document, list):
        for v in document:
            yield from _numbers(v, key)
    elif isinstance(document, int | float) and not isinstance(document, bool):
        yield key, float(document)


def assert_plausible(profile: Path) -> dict[str, Any]:
    """Every step no longer than the trace, nothing negative, categories that sum to their
    window, every share within 0-100 %; returns summary.json."""
    events = pq.read_table(profile / "tables" / "events.parquet", columns=["start_ns", "dur_ns"])
    starts = events.column("start_ns")
    ends = pc.add(starts, events.column("dur_ns"))
    trace_ns = pc.max(ends).as_py() - pc.min(starts).as_py()
    with (profile / "step_trace.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows, "no step_trace row"
    for row in rows:
        values = {k: int(v) for k, v in row.items() if k.endswith("_ns")}
        assert all(v >= 0 for v in values.values()), row
        assert values["wall_ns"] == values["end_ns"] - values["start_ns"], row
        assert values["wall_ns"] <= trace_ns, f"step {row['step']} longer than the trace"
        if "compute_ns" in values:
            assert sum(values[c] for c in CATEGORIES) == values["wall_ns"], row
            assert sum(values[c] for c in IDLE_CAUSES) == values["idle_ns"], row
    summary: dict[str, Any] = json.loads((profile / "summary.json").read_text())
    for key, value in _numbers(summary):
        if key.endswith("_pct") and not any(w in key for w in NOT_SHARES):
            assert 0.0 <= value <= 100.0, (key, value)
        if key.endswith(("_ms", "_ns")):
            assert value >= 0.0, (key, value)
    if summary["step_time_ms"] is not None:  # rounded to the µs
        assert summary["step_time_ms"] * 1e6 <= trace_ns + 500
    return summary


def read_summary(profile: Path) -> dict[str, Any]:
    return json.loads((profile / "summary.json").read_text(encoding="utf-8"))


def check_ids(summary: dict[str, Any]) -> set[str]:
    return {c["id"] for c in summary["quality"]["checks"]}


# --- odd and damaged synthetic runs -------------------------------------------------------------


def test_the_clean_run_is_exact_and_trusted(tmp_path: Path) -> None:
    summary = assert_plausible(
        analyse(write_kineto(tmp_path / "clean.json", clean_run()), tmp_path / "p")
    )
    assert summary["quality"] == {"confidence": "high", "checks": []}
    assert summary["step_count"] == 4
    assert summary["step_time_ms"] == 10.0
    # per step: a 2 ms kernel and a 0.5 ms copy (step 2: a 3 ms all-reduce beside them)
    with (tmp_path / "p" / "step_trace.csv").open(newline="") as handle:
        steps = [r for r in csv.DictReader(handle) if r["step"] != "-1"]
    assert [int(r["compute_ns"]) for r in steps] == [2_000_000] * 4
    assert [int(r["memcpy_ns"]) for r in steps] == [500_000] * 4


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_odd_and_damaged_runs_give_plausible_figures_and_say_so(
    variant: Variant, tmp_path: Path
) -> None:
    trace = write_kineto(tmp_path / f"{variant.name}.json", variant_events(variant))
    summary = assert_plausible(analyse(trace, tmp_path / "p"))
    confidence = summary["quality"]["confidence"]
    if variant.damaged:
        assert confidence != "high", summary["quality"]
    else:
        assert confidence == "high", summary["quality"]
    assert set(variant.checks) <= check_ids(summary), summary["quality"]
    for check in summary["quality"]["checks"]:
        assert check["count"] > 0
        assert "\n" not in check["message"]
        assert check["message"].startswith(f"{variant.name}.json: ")


def test_each_repair_keeps_the_clean_figures(tmp_path: Path) -> None:
    """The repairs restore what the clean run shows: the step time of device times read as
    ns, of a kernel stamped years late, of a step number used twice."""
    for name in ("device_in_ns_host_in_us", "kernel_years_late", "duplicate_step_numbers"):
        (variant,) = [v for v in VARIANTS if v.name == name]
        trace = write_kineto(tmp_path / f"{name}.json", variant_events(variant))
        summary = assert_plausible(analyse(trace, tmp_path / name))
        assert summary["step_time_ms"] == 10.0, name
        assert summary["step_count"] == 4, name


def test_a_collective_running_into_the_next_step_leaves_that_step_its_work(
    tmp_path: Path,
) -> None:
    (variant,) = [v for v in VARIANTS if v.name == "collective_into_next_step"]
    trace = write_kineto(tmp_path / "t.json", variant_events(variant))
    profile = analyse(trace, tmp_path / "p")
    with (profile / "step_trace.csv").open(newline="") as handle:
        steps = {int(r["step"]): r for r in csv.DictReader(handle)}
    # step 3's kernel ran while step 2's all-reduce went on: it is step 3's, whose window
    # starts with it (31.5 ms after the first step's start)
    assert [int(steps[s]["compute_ns"]) for s in range(4)] == [2_000_000] * 4
    assert int(steps[3]["start_ns"]) - int(steps[0]["start_ns"]) == 31_500_000


def test_the_invariant_check_flags_a_broken_account() -> None:
    """Never expected from the accounting itself: a window whose categories do not sum."""
    events = EventsBuilder().kernel(0, 1_000).table()
    broken = WindowAccount(0, 0, 0, 0, 1_000, 600, 0, 0, 0, 0, 300, 300, 0, 0, 0, 0)
    checks = rank_checks(
        events,
        [StepWindow(0, 0, 0, 1_000, 0, 1_000)],
        Accounting(windows=(broken,), gaps=GAPS_SCHEMA.empty_table()),
    )
    (invariant,) = [c for c in checks if c.id == "invariants"]
    assert not invariant.repaired and "step_time" in invariant.affects


# --- damaged real traces -----------------------------------------------------------------------


def _document(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(gzip.decompress(data_file(f"kineto/{name}").read_bytes()))
    return document


def _kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "dur" in e]


def _late_kernel(doc: dict[str, Any]) -> None:
    _kernels(doc)[-1]["ts"] += 3 * YEAR_US


def _negative_durations(doc: dict[str, Any]) -> None:
    for kernel in _kernels(doc)[:5]:
        kernel["dur"] = -kernel["dur"] - 1


def _colliding_correlations(doc: dict[str, Any]) -> None:
    for event in doc["traceEvents"]:
        if event.get("cat") == "cuda_runtime" and "correlation" in event.get("args", {}):
            event["args"]["correlation"] = 7


def _non_nesting_slices(doc: dict[str, Any]) -> None:
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("dur", 0) > 10]
    op = ops[len(ops) // 2]
    crossing = dict(op, name="crossing::op", ts=op["ts"] + op["dur"] / 2, dur=op["dur"] * 4)
    doc["traceEvents"].append(crossing)


def _marks_in_another_clock(doc: dict[str, Any]) -> None:
    for event in doc["traceEvents"]:
        if str(event.get("name", "")).startswith("ProfilerStep#"):
            event["ts"] += 2 * YEAR_US


def _outer_annotation_without_steps(doc: dict[str, Any]) -> None:
    events = [
        e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    timed = [e for e in events if e.get("ph") == "X" and isinstance(e.get("pid"), int)]
    first = min(e["ts"] for e in timed)
    last = max(e["ts"] + e.get("dur", 0) for e in timed)
    start = first - 30_000_000
    host = next(e for e in timed if e.get("cat") == "cpu_op")
    outer = {"ph": "X", "cat": "user_annotation", "name": "[outer]", "pid": host["pid"],
             "tid": host["tid"], "ts": start, "dur": last - start}  # fmt: skip
    doc["traceEvents"] = [outer, *events]


DAMAGE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "kernel_years_late": (_late_kernel, "outlying_events"),
    "negative_durations": (_negative_durations, "negative_durations"),
    "colliding_correlations": (_colliding_correlations, "shared_correlation"),
    "non_nesting_slices": (_non_nesting_slices, "non_nesting_slices"),
    "marks_in_another_clock": (_marks_in_another_clock, "clock_domains"),
    "outer_annotation_without_steps": (_outer_annotation_without_steps, "window_beyond_device"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_real_traces_are_plausible_and_not_trusted(damage: str, tmp_path: Path) -> None:
    document = _document("v100_ns_timestamps.json.gz")
    change, expected = DAMAGE[damage]
    change(document)
    trace = tmp_path / f"{damage}.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(document).encode(), compresslevel=1))
    summary = assert_plausible(analyse(trace, tmp_path / "p"))
    assert summary["quality"]["confidence"] != "high", summary["quality"]
    assert expected in check_ids(summary)


@pytest.mark.parametrize(
    "relative",
    [
        *(f"kineto/{p.name}" for p in sorted((DATA / "kineto").glob("*.json.gz"))),
        "kineto/sampled_2ranks",
        "ascend/torch_npu_text/level1",
        "ascend/torch_npu_db/level2",
        "ascend/msprof_cli",
    ],
)
def test_real_traces_are_plausible_and_trusted_where_nothing_was_repaired(
    relative: str, tmp_path: Path
) -> None:
    out = tmp_path / "p"
    done = perfledger("analyze", DATA / relative, "-o", out, "--no-ledger", "--workers", "0")
    assert done.returncode == 0, done.stderr
    if not (out / "tables" / "events.parquet").exists():  # several ranks: one file per rank
        events = pa.concat_tables(
            pq.read_table(p) for p in sorted((out / "tables" / "events").glob("*.parquet"))
        )
        pq.write_table(events, out / "tables" / "events.parquet")
    summary = assert_plausible(out)
    repaired = [c for c in summary["quality"]["checks"] if c["repaired"]]
    if not repaired:
        assert summary["quality"]["confidence"] == "high", summary["quality"]
    if summary["quality"]["confidence"] != "high":
        assert "data quality" in done.stdout.splitlines()[0]


def test_a100_alexnet_window_is_the_device_span_and_copies_belong_to_copy_operators(
    tmp_path: Path,
) -> None:
    profile = analyse(data_file("kineto/a100_alexnet.json.gz"), tmp_path / "p")
    with (profile / "step_trace.csv").open(newline="") as handle:
        rows = {int(r["step"]): r for r in csv.DictReader(handle)}
    # the one window is the device's span: the [param|cuda] annotation 30 s earlier is not
    assert int(rows[0]["wall_ns"]) <= int(rows[-1]["wall_ns"])
    with (profile / "op_summary.csv").open(newline="") as handle:
        copies = [r for r in csv.DictReader(handle) if r["kind"] == "memcpy"]
    assert len(copies) == 16
    assert {r["host_op"] for r in copies} == {"aten::copy_"}
    summary = json.loads((profile / "summary.json").read_text())
    assert {"window_beyond_device", "relinked_tasks"} <= check_ids(summary)


def test_msprof_marks_in_another_clock_are_left_out_and_said(tmp_path: Path) -> None:
    profile = analyse(data_file("ascend/msprof_cli"), tmp_path / "p")
    summary = assert_plausible(profile)
    (clock,) = [c for c in summary["quality"]["checks"] if c["id"] == "clock_domains"]
    assert "years away" in clock["message"] and clock["message"].startswith("msprof_0.db: ")
    with (profile / "step_trace.csv").open(newline="") as handle:
        walls = [int(r["wall_ns"]) for r in csv.DictReader(handle)]
    assert max(walls) < 1_000_000_000  # the run's work, not 638 days


def test_msprof_communication_tasks_are_named_after_their_collective() -> None:
    # the db's task types of the HCCL sub-tasks read as compute kernels (aclnnLayerNormBackward);
    # their communication_task_info row names the collective: hcom_allGather__305_879_1
    (trace,) = load_traces([data_file("ascend/msprof_cli")])
    events = trace.events
    names = events.filter(pc.equal(events["kind"], schema.COMM))["name"].to_pylist()
    assert names and all(str(n).startswith("hcom_") for n in names)


# --- steps named by the user ---------------------------------------------------------------------


def _iterations_without_step_marks(path: Path) -> Path:
    """Three iterations marked by record_function("train_iter") inside one outer annotation
    (no ProfilerStep): each 10 ms, a 6 ms kernel launched at its start."""
    events = [gen.complete("user_annotation", "main", 0, 40_000)]
    for k in range(3):
        base = 1000 + 12_000 * k
        events.append(gen.complete("user_annotation", "train_iter", base, 10_000))
        events.append(gen.runtime("cudaLaunchKernel", base + 10, 5, correlation=k + 1))
        events.append(gen.device_task("kernel", "gemm", base + 100, 6000, correlation=k + 1))
    return write_kineto(path, events)


def test_step_mark_names_the_iterations(tmp_path: Path) -> None:
    trace = _iterations_without_step_marks(tmp_path / "run.json")
    out = tmp_path / "p"
    result = perfledger("analyze", trace, "-o", out, "--step-mark", "train_iter")
    assert result.returncode == 0, result.stderr
    summary = assert_plausible(out)
    assert summary["step_count"] == 3 and summary["step_time_ms"] == 10.0
    with (out / "step_trace.csv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["step"] != "-1"]
    assert [(r["step"], r["compute_ns"]) for r in rows] == [(str(k), "6000000") for k in range(3)]
    # without it the outer annotation is no step: one window, the device's span
    plain = tmp_path / "plain"
    assert perfledger("analyze", trace, "-o", plain).returncode == 0
    assert read_summary(plain)["step_count"] == 0


def test_step_mark_that_names_nothing_is_a_clear_error(tmp_path: Path) -> None:
    trace = _iterations_without_step_marks(tmp_path / "run.json")
    result = perfledger("analyze", trace, "-o", tmp_path / "p", "--step-mark", "no_such")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "run.json" in line and "--step-mark 'no_such'" in line and "Traceback" not in line
    assert not (tmp_path / "p").exists()


# --- several runs in one folder ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "runs"),
    [
        (
            "ascend",
            [
                "msprof_cli",
                "torch_npu_db/level0",
                "torch_npu_db/level1",
                "torch_npu_db/level2",
                "torch_npu_text/level0",
                "torch_npu_text/level1",
                "torch_npu_text/level2",
            ],
        ),
        ("ascend/torch_npu_text", ["level0", "level1", "level2"]),
    ],
)
def test_a_folder_of_several_runs_is_refused_naming_them(
    relative: str, runs: list[str], tmp_path: Path
) -> None:
    done = perfledger("analyze", DATA / relative, "-o", tmp_path / "p", "--no-ledger")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"{len(runs)} profiling runs found ({', '.join(runs)})" in done.stderr
    assert not (tmp_path / "p").exists()


def test_a_run_below_the_folder_named_is_analysed(tmp_path: Path) -> None:
    import shutil

    holder = tmp_path / "experiments" / "monday"
    shutil.copytree(DATA / "ascend" / "torch_npu_db" / "level1", holder / "level1")
    done = perfledger("analyze", tmp_path / "experiments", "-o", tmp_path / "p", "--no-ledger")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["ranks"] == [0, 1]


def test_one_message_per_problem_naming_its_file(tmp_path: Path) -> None:
    """A damaged row of an Ascend CSV: one message, naming that file and no other."""
    import shutil

    rank = tmp_path / "rank0_ascend_pt"
    shutil.copytree(DATA / "ascend/torch_npu_text/level1/rank0_ascend_pt", rank)
    kernels = rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = kernels.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = "broken,row\n"
    kernels.write_text("".join(lines), encoding="utf-8")
    summary = json.loads((analyse(rank, tmp_path / "p") / "summary.json").read_text())
    (message,) = summary["loss"].split("; ")
    assert message.startswith(f"{kernels}: skipped 1 malformed rows")
    assert "communication.json" not in message
