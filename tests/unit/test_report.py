"""The HTML report's payload and page, without a browser: figures derived by hand."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pyarrow as pa
import pytest

from perfledger.model import schema
from perfledger.model.accounts import StepWindow, WindowAccount
from perfledger.render.report.budgets import COUNTER_POINTS, TABLE_ROWS, TEXT_CHARS
from perfledger.render.report.data import Headline, ReportData, headline_from_summary
from perfledger.render.report.page import (
    MAX_REPORT_BYTES,
    render_report,
    script_json,
    write_report,
)
from perfledger.render.report.payload import report_payload
from tests.synth import EventsBuilder, gaps_table

US = 1_000
MS = 1_000_000
EVIL = "</script><img src=x onerror=alert(1)>"


def account(step: int, wall_us: int, compute_us: int, idle_sync_us: int) -> WindowAccount:
    start = step * 1000 * US
    return WindowAccount(
        rank=0,
        device=0,
        step=step,
        start_ns=start,
        end_ns=start + wall_us * US,
        compute_ns=compute_us * US,
        communication_ns=0,
        overlapped_communication_ns=0,
        memcpy_ns=0,
        memset_ns=0,
        idle_ns=idle_sync_us * US,
        idle_host_dispatch_ns=0,
        idle_sync_ns=idle_sync_us * US,
        idle_dataloader_ns=0,
        idle_launch_latency_ns=0,
        idle_other_ns=0,
    )


def three_steps() -> ReportData:
    """Steps 1, 2, 3 of 300, 500 and 400 µs: the median is step 3, slowest 2, fastest 1."""
    b = EventsBuilder()
    walls = {1: 300, 2: 500, 3: 400}
    for step, wall in walls.items():
        t0 = step * 1000 * US
        b.step_mark(t0, wall * US, step, step=step)
        b.cpu_op(t0 + 10 * US, 50 * US, EVIL if step == 2 else "aten::mm", step=step)
        b.launch(t0 + 20 * US, 5 * US, t0 + 100 * US, 100 * US, "gemm", step=step)
    windows = tuple(
        StepWindow(0, s, s * 1000 * US, (s * 1000 + w) * US, s * 1000 * US, (s * 1000 + w) * US)
        for s, w in walls.items()
    )
    gaps = gaps_table(
        [
            {"step": s, "start_ns": s * 1000 * US, "end_ns": (s * 1000 + 100) * US, "cause": "sync"}
            for s in walls
        ]
    )
    return ReportData(
        title="three steps",
        events=b.table(),
        windows=windows,
        accounts=tuple(account(s, w, 100, w - 100) for s, w in walls.items()),
        gaps=gaps,
        findings=(
            {
                "id": "excessive_sync",
                "title": "sync",
                "severity_ms": 0.1,
                "severity_pct": math.nan,
                "evidence": {"count": 3},
                "spans": [
                    {"rank": 0, "start_ns": 2_050 * US, "end_ns": 2_150 * US},
                    {"rank": 0, "start_ns": 2_200 * US, "end_ns": 2_210 * US},
                    {"rank": 0, "start_ns": 3_000 * US, "end_ns": 3_010 * US},
                ],
            },
        ),
        headline=Headline(step_time_ms=0.4, step_count=3, ranks=1),
    )


def test_script_json_cannot_close_the_script_element() -> None:
    value = {"name": EVIL, "comment": "<!-- & \u2028 \u2029", "nan": math.nan}
    text = script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == {"name": EVIL, "comment": "<!-- & \u2028 \u2029", "nan": None}


def test_page_has_exactly_its_three_scripts_and_no_external_url() -> None:
    html = render_report(three_steps())
    assert html.lower().count("</script") == 3
    assert EVIL not in html  # neither raw in the markup nor in the JSON
    assert "<img" not in html.split("<script", 1)[0]
    # nothing loads from anywhere: no src/href to a URL, and the policy forbids it anyway
    assert not re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)""", html, re.I)
    assert not re.findall(r"url\(\s*['\"]?(?:https?:|//)", html, re.I)
    assert "default-src 'none'" in html
    # the payload is the one JSON document of the page
    match = re.search(
        r'<script type="application/json" id="perfledger-data">(.*?)</script>', html, re.S
    )
    assert match is not None
    assert json.loads(match.group(1))["title"] == "three steps"


def test_content_security_policy_allows_exactly_the_inlined_scripts() -> None:
    import base64
    import hashlib

    html = render_report(three_steps())
    policy = re.search(r"script-src ([^;]+);", html)
    assert policy is not None
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 2
    for body in scripts:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy.group(1)


def test_steps_median_slowest_fastest_and_the_embedded_timelines() -> None:
    payload = report_payload(three_steps())
    labels = {s["step"]: s["labels"] for s in payload["steps"]}
    assert labels == {3: ["median"], 2: ["slowest"], 1: ["fastest"]}
    assert [s["step"] for s in payload["steps"]] == [3, 2, 1]  # median first: the default
    assert set(payload["timelines"]) == {"1", "2", "3"}


def test_step_timeline_rows_host_above_device_gaps_above_streams() -> None:
    payload = report_payload(three_steps())
    t = payload["timelines"]["2"]
    assert t["rows"] == [
        "rank 0 main thread 1",
        "rank 0 device 0 idle",
        "rank 0 device 0 stream 7",
    ]
    names = payload["timeline_names"]
    drawn = sorted(
        (names[n], row, start, dur)
        for n, row, start, dur in zip(t["name"], t["row"], t["start_us"], t["dur_us"], strict=True)
    )
    # times in µs from the step start (2000 µs)
    assert drawn == [
        (EVIL, 0, 10.0, 50.0),
        ("ProfilerStep#2", 0, 0.0, 500.0),
        ("cudaLaunchKernel", 0, 20.0, 5.0),
        ("gemm", 2, 100.0, 100.0),
        ("idle: sync", 1, 0.0, 100.0),
    ]
    # the gap's band reaches down to the device's last stream row
    assert t["gap_band_end"] == [2]
    assert t["events_total"] == t["events_shown"] == 4


def test_accounting_shows_the_window_account_fields() -> None:
    payload = report_payload(three_steps())
    (device,) = payload["accounting"]
    assert device["label"] == "rank 0 device 0"
    assert device["steps"] == [1, 2, 3]
    series = {s["name"]: s["ms"] for s in device["series"]}
    assert series["compute"] == [0.1, 0.1, 0.1]
    assert series["idle: sync"] == [0.2, 0.4, 0.3]
    assert device["wall_ms"] == [0.3, 0.5, 0.4]


def test_finding_links_to_its_step_and_nan_becomes_null() -> None:
    payload = report_payload(three_steps())
    (finding,) = payload["findings"]
    # the span [2050, 2150) µs lies in step 2, which starts at 2000 µs; one link per step
    assert finding["targets"] == [
        {"step": 2, "start_us": 50.0, "end_us": 150.0},
        {"step": 3, "start_us": 0.0, "end_us": 10.0},
    ]
    assert finding["severity_pct"] is None
    assert finding["evidence"] == {"count": 3}


def test_tables_keep_the_longest_rows_cut_long_strings_and_null_nans() -> None:
    rows = 3000
    table = pa.table(
        {
            "name": [("x" * 400) if i == 2999 else f"op{i}" for i in range(rows)],
            "dur_ns": list(range(rows)),
            "gbps": [math.nan] + [1.5] * (rows - 1),
        }
    )
    data = ReportData(title="t", op_summary=table)
    t = report_payload(data)["tables"]["op_summary"]
    assert t["total_rows"] == 3000 and t["shown_rows"] == TABLE_ROWS["op_summary"]
    cols = {c["name"]: c for c in t["columns"]}
    kept = sorted(cols["dur_ns"]["values"])
    assert kept[0] == rows - TABLE_ROWS["op_summary"] and kept[-1] == rows - 1
    longest = cols["name"]["values"][cols["dur_ns"]["values"].index(rows - 1)]
    assert len(longest) == TEXT_CHARS and longest.endswith("…")
    assert cols["dur_ns"]["type"] == "ns" and cols["gbps"]["type"] == "float"
    assert None not in cols["gbps"]["values"]  # the NaN row (dur 0) is not among the longest

    small = ReportData(title="t", transfers=table.slice(0, 3))
    gbps = {c["name"]: c for c in report_payload(small)["tables"]["transfers"]["columns"]}["gbps"]
    assert gbps["values"] == [None, 1.5, 1.5]


def test_counters_are_sampled_evenly_keeping_both_ends() -> None:
    n = 10_001
    counters = pa.table(
        {
            "rank": [0] * n,
            "track": ["host"] * n,
            "name": ["rss"] * n,
            "ts_ns": [i * MS for i in range(n)],
            "value": [float(i) for i in range(n)],
        },
        schema=schema.COUNTERS_SCHEMA,
    )
    events = EventsBuilder().cpu_op(0, 10, "op").table()
    (series,) = report_payload(ReportData(title="t", events=events, counters=counters))["counters"]
    assert len(series["t_s"]) == COUNTER_POINTS
    assert series["t_s"][0] == 0.0 and series["t_s"][-1] == 10.0  # seconds from profile start
    assert series["value"][0] == 0.0 and series["value"][-1] == 10_000.0
    assert series["samples"] == n


def test_headline_reads_the_summary_document() -> None:
    summary = {
        "step_time_ms": 12.5,
        "profiler_overhead_pct": None,
        "step_count": 4,
        "ranks": [0, 1],
        "devices": [{"rank": 0, "device": 0, "utilization_pct": 61.25}],
        "throughput": {"value": 812.0, "unit": "samples/s"},
        "loss": None,
    }
    h = headline_from_summary(summary)
    assert h == Headline(
        step_time_ms=12.5,
        device_utilization_pct=61.25,
        throughput=812.0,
        throughput_unit="samples/s",
        profiler_overhead_pct=None,
        step_count=4,
        ranks=2,
        loss=None,
        device_utilization=(("rank 0 device 0", 61.25),),
    )


def test_report_stays_under_the_size_limit_on_a_huge_profile(tmp_path: Path) -> None:
    # 200k events in one step, every name unique and long: the payload must shrink to fit
    b = EventsBuilder()
    n = 200_000
    for i in range(n):
        b.kernel(i * 10, 8, f"kernel_{i}_" + "t" * 150)
    events = b.table()
    table = pa.table(
        {"name": [f"op_{i}_" + "s" * 200 for i in range(20_000)], "dur_ns": list(range(20_000))}
    )
    data = ReportData(
        title="huge",
        events=events,
        windows=(StepWindow(0, 0, 0, n * 10, 0, n * 10),),
        op_summary=table,
        op_statistic=table,
        kernel_details=table,
    )
    path = tmp_path / "report.html"
    write_report(path, data)
    size = path.stat().st_size
    assert size <= MAX_REPORT_BYTES
    payload = json.loads(
        re.search(r'id="perfledger-data">(.*?)</script>', path.read_text(), re.S).group(1)  # type: ignore[union-attr]
    )
    assert 0 < payload["timelines"]["0"]["events_shown"] < n


def test_rendering_twice_gives_identical_bytes(tmp_path: Path) -> None:
    write_report(tmp_path / "a.html", three_steps())
    write_report(tmp_path / "b.html", three_steps())
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    assert not list(tmp_path.glob(".*"))


def test_empty_profile_renders() -> None:
    payload = report_payload(ReportData(title="empty"))
    assert payload["steps"] == [] and payload["tables"] == {} and payload["counters"] == []
    assert "<title>empty" in render_report(ReportData(title="empty"))


def test_title_is_escaped_in_the_markup() -> None:
    html = render_report(ReportData(title=EVIL))
    assert "<title>&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html


@pytest.mark.parametrize("bad", [{"start_ns": "x", "end_ns": 1}, {"end_ns": 5}, "nonsense"])
def test_malformed_finding_spans_are_ignored(bad: object) -> None:
    data = three_steps()
    finding = {"id": "x", "title": "t", "spans": [bad]}
    payload = report_payload(ReportData(title="t", windows=data.windows, findings=(finding,)))
    assert payload["findings"][0]["targets"] == []


def test_instants_in_tables_count_from_the_profile_start() -> None:
    data = three_steps()
    table = pa.table(
        {
            "name": ["a", "b"],
            "start_ns": [1_000 * US + 1_234, 3_000 * US],
            "launch_ns": [-1, 2_990 * US],
            "dur_ns": [5, 7],
        }
    )
    payload = report_payload(
        ReportData(title="t", events=data.events, windows=data.windows, op_summary=table)
    )
    # the profile starts with step 1's mark at 1000 µs
    assert payload["origin_ns"] == 1_000 * US
    cols = {c["name"]: c for c in payload["tables"]["op_summary"]["columns"]}
    assert cols["start_ns"] == {"name": "start_ns", "type": "instant", "values": [1_234, 2 * MS]}
    assert cols["launch_ns"]["values"] == [None, 1_990 * US]
    assert cols["dur_ns"]["type"] == "ns"
