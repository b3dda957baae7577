"""The report tells its story on a GPU, an Ascend and a CPU profile, checked in chromium.

Three profiles: the real V100 DDP trace (tests/data/kineto), the real two-rank torch_npu text
export (tests/data/ascend/torch_npu_text/level2, 20 source files) and a CPU trace written by
the Kineto generator whose steps have known phases (data loading 20 ms, forward 30 ms, backward
40 ms, optimizer 10 ms). On each page: a verdict line naming the top finding and its gain, a
timeline legend and labelled slices, table headings whose unit is that of the cells, evidence
in words, a one-line source list, no empty or constant chart, counter charts marking the
profiled steps, a heat map scaled from zero and a utilisation tile on one line.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from rich.console import Console

from perfledger.render.report.data import Headline, ReportData
from perfledger.render.report.page import write_report
from perfledger.run.pipeline import build_profile
from tests import kineto_gen as kg
from tests.paths import data_file

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.browser

STEP_MS = 100.0  # the generated CPU trace: data loading 20 ms, then 80 ms of host work
LOADER_MS = 20.0

MS = 1_000  # µs, the unit of Kineto timestamps


# --------------------------------------------------------------------------------------------
# The profiles


def cpu_trace(path: Path) -> Path:
    """Four 100 ms steps on one thread: data loading 20 ms, forward (two operators of 15 ms),
    backward (two autograd operators of 20 ms), optimizer 10 ms; a worker thread idles."""
    events: list[dict[str, Any]] = [
        kg.metadata("process_name", 100, name="python"),
        kg.metadata("thread_name", 100, 100, name="MainThread"),
    ]
    eid = 0
    t0 = 1_000_000
    for step in range(1, 5):
        s = t0 + (step - 1) * 100 * MS
        events.append(kg.complete("user_annotation", f"ProfilerStep#{step}", s, 100 * MS))
        events.append(
            kg.complete(
                "user_annotation",
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                s,
                20 * MS,
            )
        )
        for i, name in enumerate(("aten::conv2d", "aten::linear")):
            eid += 1
            events.append(kg.cpu_op(name, s + (20 + 15 * i) * MS, 15 * MS, external_id=eid))
        for i, name in enumerate(("ConvolutionBackward0", "AddmmBackward0")):
            eid += 1
            events.append(
                kg.cpu_op(
                    f"autograd::engine::evaluate_function: {name}",
                    s + (50 + 20 * i) * MS,
                    20 * MS,
                    external_id=eid,
                )
            )
        events.append(
            kg.complete("user_annotation", "Optimizer.step#SGD.step", s + 90 * MS, 10 * MS)
        )
    return kg.write_kineto(path, events, schemaVersion=1)


def analyzed(source: Path, out: Path) -> Path:
    """The profile directory of ``source`` (its report.html written by the pipeline)."""
    build_profile([source], out, console=Console(file=io.StringIO()))
    assert (out / "report.html").is_file()
    return out


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("story")
    return {
        "gpu": analyzed(data_file("kineto/v100_rank1_ddp.json.gz"), base / "gpu"),
        "ascend": analyzed(data_file("ascend/torch_npu_text/level2"), base / "ascend"),
        "cpu": analyzed(cpu_trace(base / "cpu_trace.json"), base / "cpu"),
    }


KINDS = ("gpu", "ascend", "cpu")


class Shown:
    """A report open in chromium, with the errors it printed."""

    def __init__(self, page: Page, errors: list[str], profile: Path) -> None:
        self.page = page
        self.errors = errors
        self.profile = profile


@pytest.fixture(scope="module")
def shown(browser: Browser, profiles: dict[str, Path]) -> Iterator[dict[str, Shown]]:
    """Each profile's report, opened once for the module's read-only checks."""
    opened = {}
    for kind, profile in profiles.items():
        page, errors = open_page(browser, profile / "report.html")
        opened[kind] = Shown(page, errors, profile)
    yield opened
    for s in opened.values():
        assert s.errors == [], s.errors
        s.page.close()


def open_page(browser: Browser, path: Path, width: int = 1400) -> tuple[Page, list[str]]:
    page = browser.new_page(viewport={"width": width, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)
    # the timeline's slices are drawn a few hundred per frame
    page.wait_for_selector("#chart-timeline[data-drawn], #timeline p.empty", timeout=30_000)
    return page, errors


def summary_of(profile: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((profile / "summary.json").read_text())
    return document


def drawn_texts(page: Page, chart_id: str) -> list[str]:
    """The texts ECharts drew on a chart (labels, axis labels, titles)."""
    return list(
        page.evaluate(
            """id => {
                const chart = echarts.getInstanceByDom(document.getElementById(id));
                const out = [];
                chart.getZr().storage.getDisplayList().forEach(e => {
                    if (e.style && typeof e.style.text === 'string') out.push(e.style.text);
                });
                return out;
            }""",
            chart_id,
        )
    )


def chart_option(page: Page, chart_id: str) -> dict[str, Any]:
    option: dict[str, Any] = page.evaluate(
        """id => {
            const o = echarts.getInstanceByDom(document.getElementById(id)).getOption();
            return JSON.parse(JSON.stringify(o, (k, v) => typeof v === 'function' ? null : v));
        }""",
        chart_id,
    )
    return option


# --------------------------------------------------------------------------------------------
# Verdict


def gain_words(ms: float) -> str:
    """A gain as the page writes it (ms with three decimals, or s)."""
    return f"{ms / 1000:.3f} s" if ms >= 1000 else f"{ms:.3f} ms"


@pytest.mark.parametrize("kind", KINDS)
def test_verdict_names_the_top_finding_and_its_gain(shown: dict[str, Shown], kind: str) -> None:
    page = shown[kind].page
    summary = summary_of(shown[kind].profile)
    verdict = page.locator("#verdict")
    text = verdict.inner_text()
    box = verdict.bounding_box()
    cards = page.locator("#headline-cards").bounding_box()
    # the first line of the headline, above its cards
    assert box is not None and cards is not None and box["y"] < cards["y"]
    findings = summary["findings"]
    assert findings, "each of the three profiles has findings"
    top = findings[0]
    assert text.startswith("Fix first: ")
    assert top["title"] in text and top["id"] in text
    gain = top.get("whatif_ms")
    if gain is None:
        gain = top["severity_ms"]
    assert gain_words(gain) + " per step" in text
    combined = summary.get("whatif_combined")
    if combined and len(combined["findings"]) > 1:
        # the fixes replayed together, not the sum of their gains
        assert f"The top {len(combined['findings'])} fixes together" in text
        assert ", ".join(combined["findings"]) in text
        assert gain_words(combined["gain_ms"]) + " per step" in text
        assert sum(f["whatif_ms"] or 0 for f in findings) != combined["gain_ms"]
    elif combined and combined["findings"] != [top["id"]]:
        # the top finding's fix is not a graph change: the one that is, with its gain
        fix = combined["findings"][0]
        assert f"{fix} gives the most: {gain_words(combined['gain_ms'])} per step" in text


def test_verdict_without_findings(browser: Browser, tmp_path: Path) -> None:
    path = tmp_path / "bare.html"
    write_report(path, ReportData(title="bare", headline=Headline()))
    page, errors = open_page(browser, path)
    try:
        assert "no finding" in page.locator("#verdict").inner_text()
        assert errors == []
    finally:
        page.close()


# --------------------------------------------------------------------------------------------
# Timeline: legend, labels, phase colours

# the labels of the timeline's slices (the critical path's own left out), with their colour
LABELLED = """() => {
    const c = echarts.getInstanceByDom(document.getElementById('chart-timeline'));
    const out = {};
    c.getZr().storage.getDisplayList().forEach(e => {
        if (typeof (e.style && e.style.text) !== 'string') return;
        // a label's group holds the slice's rect first
        let g = e.parent;
        while (g && !(g.childAt && g.childAt(0) && g.childAt(0).type === 'rect')) g = g.parent;
        if (g && g.name !== 'critical path') out[e.style.text] = g.childAt(0).style.fill;
    });
    return out;
}"""


@pytest.mark.parametrize("kind", KINDS)
def test_timeline_has_a_legend_and_labelled_slices(shown: dict[str, Shown], kind: str) -> None:
    page = shown[kind].page
    items = page.eval_on_selector_all(
        "#timeline-legend .legend-item",
        "xs => xs.map(x => [x.dataset.key, x.dataset.colour, x.textContent])",
    )
    assert len(items) >= 2, items
    # one colour per entry of the legend, and each is drawn on the chart
    assert len({c for _, c, _ in items}) == len(items), items
    fills = set(
        page.evaluate(
            """() => echarts.getInstanceByDom(document.getElementById('chart-timeline'))
                .getZr().storage.getDisplayList()
                .filter(e => e.type === 'rect').map(e => e.style.fill)"""
        )
    )
    assert {c for _, c, _ in items} <= fills, (items, fills)
    # slices wide enough carry their names (the step mark spans the whole chart)
    labelled = page.evaluate(LABELLED)
    assert [t for t in labelled if t.startswith("ProfilerStep#")], sorted(labelled)[:20]
    assert len(labelled) >= 3, labelled


def test_cpu_timeline_colours_the_phases_apart(shown: dict[str, Shown]) -> None:
    page = shown["cpu"].page
    # an entry's keys: every kind of slice drawn in its colour
    legend = {
        key: colour
        for keys, colour in page.eval_on_selector_all(
            "#timeline-legend .legend-item", "xs => xs.map(x => [x.dataset.key, x.dataset.colour])"
        )
        for key in keys.split()
    }
    phases = ["phase:forward", "phase:backward", "phase:optimizer", "phase:dataloader"]
    assert set(phases) <= set(legend), legend
    assert len({legend[p] for p in phases}) == 4
    # each slice in its phase's colour (the generator's phases), its name written on it
    labelled = page.evaluate(LABELLED)
    by_prefix = {
        "autograd::": "phase:backward",
        "aten::conv2d": "phase:forward",
        "aten::linear": "phase:forward",
        "Optimizer.step": "phase:optimizer",
        "enumerate(Data": "phase:dataloader",
    }
    for prefix, phase in by_prefix.items():
        hits = [fill for text, fill in labelled.items() if text.startswith(prefix)]
        assert hits, (prefix, sorted(labelled))
        assert set(hits) == {legend[phase]}, (prefix, hits)


# --------------------------------------------------------------------------------------------
# Tables: units in the headings, filters over every text column


UNITS = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}


@pytest.mark.parametrize("kind", KINDS)
def test_table_headings_carry_the_cells_unit(shown: dict[str, Shown], kind: str) -> None:
    page = shown[kind].page
    headings = page.eval_on_selector_all("table.data th", "ths => ths.map(t => t.textContent)")
    assert headings
    assert not [h for h in headings if re.search(r"_(ns|pct|bytes)\b", h)], headings
    # op statistic: the heading's unit applied to the CSV's ns gives the cells
    with (shown[kind].profile / "op_statistic.csv").open() as f:
        rows = list(csv.DictReader(f))
    columns = page.eval_on_selector_all(
        "#table-op_statistic thead th", "ths => ths.map(t => [t.dataset.column, t.textContent])"
    )
    cells = page.eval_on_selector_all(
        "#table-op_statistic tbody tr",
        "trs => trs.map(tr => Array.from(tr.children).map(td => td.textContent))",
    )
    index = [c for c, _ in columns]
    assert len(cells) == len(rows)
    for column in ("total_ns", "max_ns"):
        heading = columns[index.index(column)][1]
        unit = re.fullmatch(r"\w+ \((s|ms|µs|ns)\)", heading)
        assert unit, heading
        factor = UNITS[unit.group(1)]
        decimals = {"s": 3, "ms": 3, "µs": 1, "ns": 0}[unit.group(1)]
        shown_cells = {
            (r[index.index("name")], r[index.index("kind")]): r[index.index(column)] for r in cells
        }
        for row in rows:
            expected = f"{int(row[column]) / factor:.{decimals}f}"
            assert shown_cells[(row["name"], row["kind"])] == expected, (column, row)


def test_op_statistic_filter_finds_an_operator_by_its_kernels(shown: dict[str, Shown]) -> None:
    profile = shown["gpu"].profile
    # the NCCL kernels of v100_rank1_ddp run under record_param_comms: no row is named nccl
    with (profile / "op_statistic.csv").open() as f:
        names = [r["name"] for r in csv.DictReader(f)]
    assert not [n for n in names if "nccl" in n.lower()]
    with (profile / "op_summary.csv").open() as f:
        expected = {
            r["host_op"] or r["name"] for r in csv.DictReader(f) if "nccl" in r["name"].lower()
        }
    assert expected == {"record_param_comms"}
    page = shown["gpu"].page
    box = "#table-op_statistic input[type=search]"
    try:
        page.fill(box, "nccl")
        found = page.eval_on_selector_all(
            "#table-op_statistic tbody tr", "trs => trs.map(tr => tr.children[0].textContent)"
        )
        assert set(found) == expected
        info = page.locator("#table-op_statistic .table-info").inner_text()
        assert info.startswith(f"{len(found)} of {len(names)} rows match")
        # and the kind column is searched too
        page.fill(box, "memset")
        kinds = page.eval_on_selector_all(
            "#table-op_statistic tbody tr", "trs => trs.map(tr => tr.children[1].textContent)"
        )
        assert kinds and set(kinds) == {"memset"}
    finally:
        page.fill(box, "")


@pytest.mark.parametrize("kind", KINDS)
def test_evidence_is_in_words(shown: dict[str, Shown], kind: str) -> None:
    page = shown[kind].page
    labels = page.eval_on_selector_all(
        "#findings-list dt, #findings-list summary, #findings-list th",
        "xs => xs.map(x => x.textContent)",
    )
    assert labels
    assert not [x for x in labels if "_" in x.split(" (")[0]], labels
    pairs = dict(
        page.eval_on_selector_all(
            "#findings-list dt", "xs => xs.map(x => [x.dataset.key, x.textContent])"
        )
    )
    if "idle_host_dispatch_ms_per_step" in pairs:
        assert pairs["idle_host_dispatch_ms_per_step"] == "Idle host dispatch (ms per step)"
    if "host_caused_pct_of_idle" in pairs:
        assert pairs["host_caused_pct_of_idle"] == "Host caused (% of idle)"


# --------------------------------------------------------------------------------------------
# Header, headline tile


@pytest.mark.parametrize("kind", KINDS)
def test_source_list_is_one_line(shown: dict[str, Shown], kind: str) -> None:
    files = summary_of(shown[kind].profile)["source"]["files"]
    page = shown[kind].page
    meta = page.locator("#report-meta")
    line = page.evaluate(
        "() => parseFloat(getComputedStyle(document.getElementById('report-meta')).lineHeight)"
    )
    box = meta.bounding_box()
    assert box is not None and box["height"] <= 1.5 * line, box
    if len(files) == 1:
        assert files[0] in meta.inner_text()
        return
    summary = page.locator("#report-sources summary")
    assert summary.inner_text().startswith(f"{len(files)} files")
    header_before = page.locator("header").bounding_box()
    try:
        summary.click()
        items = page.eval_on_selector_all(
            "#report-sources li", "xs => xs.filter(x => x.offsetParent).map(x => x.textContent)"
        )
        # every file, named from the folder they share
        folder = summary.inner_text().split(" in ", 1)[1]
        assert [f"{folder}/{item}" for item in items] == files
        # the list opens over the page: the sticky header keeps its height
        assert page.locator("header").bounding_box() == header_before
    finally:
        page.evaluate("() => { document.getElementById('report-sources').open = false; }")


def test_ascend_source_list_of_twenty_files(profiles: dict[str, Path]) -> None:
    assert len(summary_of(profiles["ascend"])["source"]["files"]) == 20


def check_one_line_values(page: Page) -> None:
    sizes = page.eval_on_selector_all(
        "#headline-cards .value",
        """vs => vs.map(v => [v.textContent, v.getBoundingClientRect().height,
                              parseFloat(getComputedStyle(v).lineHeight) ||
                                1.45 * parseFloat(getComputedStyle(v).fontSize),
                              v.scrollWidth, v.clientWidth])""",
    )
    assert sizes
    for text, height, line, scroll, client in sizes:
        assert height <= 1.2 * line, (text, height, line)
        assert scroll <= client, (text, scroll, client)


@pytest.mark.parametrize("kind", KINDS)
def test_headline_values_fit_one_line(shown: dict[str, Shown], kind: str) -> None:
    page = shown[kind].page
    try:
        for width in (1400, 900, 700):
            page.set_viewport_size({"width": width, "height": 1000})
            check_one_line_values(page)
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})


def test_utilisation_of_many_devices_fits_one_line(browser: Browser, tmp_path: Path) -> None:
    devices = tuple((f"rank {r} device {r}", 60.0 + r * 1.5) for r in range(8))
    path = tmp_path / "devices.html"
    write_report(path, ReportData(title="devices", headline=Headline(device_utilization=devices)))
    page, errors = open_page(browser, path, width=700)
    try:
        check_one_line_values(page)
        tile = page.locator("#headline-cards .card").nth(1)
        assert "8 devices" in tile.locator(".label").inner_text()
        # the range of the devices, each device in the tooltip
        assert tile.locator(".value").inner_text() == "60.0–70.5 %"
        assert "rank 7 device 7: 70.5 %" in (tile.locator(".value").get_attribute("title") or "")
        assert errors == []
    finally:
        page.close()


# --------------------------------------------------------------------------------------------
# Charts: none empty or constant, counters mark the steps, honest colour scales


def chart_ids(page: Page) -> list[str]:
    return list(page.eval_on_selector_all(".chart", "els => els.map(e => e.id)"))


@pytest.mark.parametrize("kind", KINDS)
def test_no_empty_or_constant_chart(shown: dict[str, Shown], kind: str) -> None:
    page = shown[kind].page
    charts = chart_ids(page)
    assert "chart-timeline" in charts
    for chart_id in charts:
        values: set[str] = set()
        for series in chart_option(page, chart_id).get("series", []):
            for point in series.get("data", []):
                values.add(json.dumps(point[-1] if isinstance(point, list) else point))
        assert len(values) >= 2, f"{chart_id} draws one value or none: {values}"
    for chart_id in [c for c in charts if c.startswith("chart-counter-")]:
        series = chart_option(page, chart_id)["series"][0]["data"]
        assert len({p[1] for p in series}) >= 2, chart_id
        # the y axis labels are told apart (no "1 B, 1 B, 0 B")
        labels = [t for t in drawn_texts(page, chart_id) if re.fullmatch(r"[\d.]+ \w?i?B", t)]
        assert len(labels) == len(set(labels)), (chart_id, labels)


def test_constant_counters_are_said_not_drawn(shown: dict[str, Shown]) -> None:
    # v100_rank1_ddp: the host's reserved bytes stay 0 over the whole trace
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    counters = pq.read_table(shown["gpu"].profile / "tables" / "counters.parquet")
    reserved = counters.filter(
        pc.and_(pc.equal(counters["track"], "cpu"), pc.equal(counters["name"], "reserved_bytes"))
    )
    assert reserved.num_rows > 2 and set(reserved.column("value").to_pylist()) == {0.0}
    page = shown["gpu"].page
    note = page.locator("#counters-note").inner_text()
    assert "rank 1 · cpu · reserved_bytes = 0 B" in note
    titles = [
        chart_option(page, c)["title"][0]["text"]
        for c in chart_ids(page)
        if c.startswith("chart-counter-")
    ]
    assert titles and "rank 1 · cpu · reserved_bytes" not in titles


def test_ascend_transfers_draw_no_chart(shown: dict[str, Shown]) -> None:
    # one copy direction ("unknown"): the table says it, a one-bar chart would not say more
    with (shown["ascend"].profile / "transfers.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 1
    page = shown["ascend"].page
    assert page.locator("#chart-transfers canvas").count() == 0
    assert page.locator("#table-transfers tbody tr").count() == 1


@pytest.mark.parametrize("kind", ["gpu", "ascend"])
def test_counter_charts_mark_the_profiled_steps(shown: dict[str, Shown], kind: str) -> None:
    import pyarrow.parquet as pq

    steps = pq.read_table(shown[kind].profile / "tables" / "steps.parquet").to_pylist()
    numbers = sorted({s["step"] for s in steps if s["step"] >= 0})
    page = shown[kind].page
    charts = [c for c in chart_ids(page) if c.startswith("chart-counter-")]
    assert charts
    for chart_id in charts:
        marks = chart_option(page, chart_id)["series"][0]["markArea"]["data"]
        marked = sorted(int(m[0]["name"].split()[1]) for m in marks)
        assert marked == numbers, (chart_id, marked, numbers)
        assert all(m[0]["xAxis"] < m[1]["xAxis"] for m in marks)


def test_rank_heat_map_scales_from_zero(shown: dict[str, Shown]) -> None:
    # two ranks whose step times differ by a few %: their cells must look alike
    page = shown["ascend"].page
    option = chart_option(page, "chart-cluster-wall")
    assert option["visualMap"][0]["min"] == 0
    values = [c[2] for c in option["series"][0]["data"]]
    assert len(values) == 2 and values[0] != values[1]
    spread = abs(values[0] - values[1]) / max(values)
    assert spread < 0.1
    colours = page.evaluate(
        """() => {
            const c = echarts.getInstanceByDom(document.getElementById('chart-cluster-wall'));
            const data = c.getModel().getSeriesByIndex(0).getData();
            return [0, 1].map(i => data.getItemVisual(i, 'style').fill);
        }"""
    )
    rgb = [tuple(int(x) for x in re.findall(r"\d+", c)[:3]) for c in colours]
    distance = sum((a - b) ** 2 for a, b in zip(*rgb, strict=True)) ** 0.5
    # a colour apart no further than the values are (the scale's two ends are ~400 apart)
    assert distance <= 450 * spread + 10, (colours, spread)


# --------------------------------------------------------------------------------------------
# Critical path: the section's chart per step, the timeline's critical-path row


def test_cpu_critical_path_is_the_generated_phases(shown: dict[str, Shown]) -> None:
    # one thread, nothing to wait on: the path is the step itself, 20 ms of data loading
    # and 80 ms of host work (forward, backward, optimizer), every step
    page = shown["cpu"].page
    option = chart_option(page, "chart-critical-path")
    bars = {s["name"]: s["data"] for s in option["series"]}
    assert set(bars) == {"data loading", "host work (Python, framework)"}
    assert bars["data loading"] == [pytest.approx(LOADER_MS)] * 4
    assert bars["host work (Python, framework)"] == [pytest.approx(STEP_MS - LOADER_MS)] * 4
    # on the timeline: 20 ms of data loading, then the host's operators for 80 ms
    path = page.evaluate(
        """() => JSON.parse(document.getElementById('perfledger-data').textContent)
            .timelines[document.getElementById('chart-timeline').dataset.step].path"""
    )
    spans = timeline_path(page)
    classes = [path["categories"][path["category"][int(k)]] for _r, _s, _e, k in spans]
    lengths = [end - start for _row, start, end, _k in spans]
    assert classes[0] == "dataloader" and lengths[0] == pytest.approx(LOADER_MS * 1e3)
    assert set(classes[1:]) == {"host"}
    assert sum(lengths[1:]) == pytest.approx((STEP_MS - LOADER_MS) * 1e3)


@pytest.mark.parametrize("kind", KINDS)
def test_critical_path_per_step_adds_up_to_the_replayed_step(
    shown: dict[str, Shown], kind: str
) -> None:
    page = shown[kind].page
    summary = summary_of(shown[kind].profile)["critical_path"]
    option = chart_option(page, "chart-critical-path")
    labels = option["xAxis"][0]["data"]
    steps = summary["steps"]
    assert len(labels) == len(steps)
    totals = [sum(s["data"][i] for s in option["series"]) for i in range(len(labels))]
    for total, step in zip(totals, steps, strict=True):
        assert total == pytest.approx(step["replayed_ms"], abs=1e-3), step
    # the mean of each class over the steps is summary.json's bound_by_ms
    table = page.eval_on_selector_all(
        "#table-critical-path-mean tbody tr",
        "trs => trs.map(tr => Array.from(tr.children).map(td => td.textContent))",
    )
    # (with the parts of a class, bound_by_parts_ms, listed as class:part)
    assert sum(summary["bound_by_ms"].values()) == pytest.approx(
        sum(s["replayed_ms"] for s in steps) / len(steps), abs=1e-3 * len(summary["bound_by_ms"])
    )
    expected = dict(summary["bound_by_ms"])
    for whole, parts in summary["bound_by_parts_ms"].items():
        assert sum(parts.values()) == pytest.approx(expected.get(whole, 0.0), abs=1e-9)
        expected.update({f"{whole}:{k}": ms for k, ms in parts.items() if ms > 0})
    assert {c: float(ms) for _w, c, ms in table} == pytest.approx(expected, abs=1e-3)
    by_name = {s["name"]: s["data"] for s in option["series"]}
    words_of = {klass: words for words, klass, _ms in table}
    for words, klass, _ms in table:
        mean = expected[klass]
        # a class split in parts (communication: wait, transfer) is drawn as its parts
        drawn = (
            [words]
            if words in by_name
            else [words_of[k] for k in parts_of(klass, table, summary["bound_by_parts_ms"])]
        )
        assert drawn, klass
        total = sum(sum(by_name[w]) for w in drawn)
        assert total / len(steps) == pytest.approx(mean, abs=1e-3 * len(drawn)), klass
    note = page.locator("#critical-path-note").inner_text()
    assert f"{summary['replay_error_pct']['median']:.1f} %" in note


def parts_of(klass: str, table: list[list[str]], parts: dict[str, dict[str, float]]) -> list[str]:
    """The rows of the table that are parts of ``klass`` (``communication:wait`` ...)."""
    return [k for _w, k, _ms in table if k in {f"{klass}:{p}" for p in parts.get(klass, {})}]


def timeline_path(page: Page) -> list[list[float]]:
    """The critical-path series of the step timeline: [row, start µs, end µs, index]."""
    option = chart_option(page, "chart-timeline")
    series = [s for s in option["series"] if s["name"] == "critical path"]
    assert len(series) == 1
    data: list[list[float]] = series[0]["data"]
    return data


@pytest.mark.parametrize("kind", KINDS)
def test_timeline_draws_each_ranks_critical_path(shown: dict[str, Shown], kind: str) -> None:
    page = shown[kind].page
    summary = summary_of(shown[kind].profile)["critical_path"]
    step = int(page.eval_on_selector("#chart-timeline", "e => e.dataset.step"))
    rows = chart_option(page, "chart-timeline")["yAxis"][0]["data"]
    spans = timeline_path(page)
    assert spans
    replayed = {(s["rank"], s["step"]): s["replayed_ms"] for s in summary["steps"]}
    ranks = sorted(r for r, st in replayed if st == step)
    assert [r for r in rows if r.endswith("critical path")] == [
        f"rank {r} critical path" for r in ranks
    ]
    wall_us = page.evaluate(
        """() => JSON.parse(document.getElementById('perfledger-data').textContent)
            .timelines[document.getElementById('chart-timeline').dataset.step].wall_us"""
    )
    for r in ranks:
        row = rows.index(f"rank {r} critical path")
        mine = sorted((start, end) for rw, start, end, _k in spans if rw == row)
        # in time order, not overlapping, inside the step; they add up to the replayed step
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(mine, mine[1:], strict=False))
        assert mine[0][0] >= -1e-3 and mine[-1][1] <= wall_us + 1e-3
        covered_ms = sum(end - start for start, end in mine) / 1e3
        assert covered_ms == pytest.approx(replayed[(r, step)], abs=0.01 + 1e-3 * len(mine))
    legend = page.eval_on_selector_all(
        "#timeline-legend .legend-item", "xs => xs.map(x => x.dataset.key)"
    )
    assert [k for k in legend if "path:" in k]


def test_timeline_draws_the_paths_of_the_first_ranks(tmp_path: Path) -> None:
    # twelve ranks: each step timeline draws the critical paths of the first eight, and says so
    from perfledger.render.report.budgets import TIMELINE_PATH_RANKS
    from perfledger.render.report.data import report_data_from_profile
    from perfledger.render.report.payload import report_payload
    from tests.cluster_gen import write_ranks

    traces = write_ranks(tmp_path / "ranks", 12, slow_rank=11, steps=2)
    result = build_profile(traces, tmp_path / "profile", console=Console(file=io.StringIO()))
    replayed = {s["rank"] for s in result.summary["critical_path"]["steps"]}
    assert replayed == set(range(12))
    payload = report_payload(report_data_from_profile(result.analysis, result.summary, title="t"))
    assert payload["timelines"]
    for timeline in payload["timelines"].values():
        path_rows = [r for r, p in zip(timeline["rows"], timeline["row_is_path"], strict=True) if p]
        assert path_rows == [f"rank {r} critical path" for r in range(TIMELINE_PATH_RANKS)]
        assert timeline["path_ranks_total"] == 12
        drawn = {timeline["rows"][row] for row in timeline["path"]["row"]}
        assert drawn == set(path_rows)


@pytest.mark.parametrize(
    ("overhead", "noise", "value", "sub"),
    [
        (22.0, None, "22.0 %", None),
        (-12.79, None, "none measured", "profiled steps 12.8 % faster"),
        (3.0, 4.0, "within noise", "+3.00 % ± 4.00 %"),
        (-12.79, 5.0, "none measured", "profiled steps 12.79 % ± 5.00 % faster"),
        (22.0, 4.0, "22.0 %", "± 4.00 %"),
    ],
)
def test_profiler_overhead_is_never_a_negative_cost(
    browser: Browser,
    tmp_path: Path,
    overhead: float,
    noise: float | None,
    value: str,
    sub: str | None,
) -> None:
    from perfledger.render.report.data import headline_from_summary

    summary = {
        "step_time_ms": 85.0,
        "unprofiled_step_ms": 54.2,
        "profiler_overhead_pct": overhead,
        "profiler_overhead_noise_pct": noise,
        "unread_input": "rank 3: the trace ends mid-event",
        "loss": "an older summary's key, not read when unread_input is there",
    }
    path = tmp_path / "overhead.html"
    write_report(path, ReportData(title="o", headline=headline_from_summary(summary)))
    page, errors = open_page(browser, path)
    try:
        cards = {
            c[0]: c[1:]
            for c in page.eval_on_selector_all(
                "#headline-cards .card",
                """cs => cs.map(c => [c.querySelector('.label').textContent,
                    c.querySelector('.value').textContent,
                    c.querySelector('.sub') ? c.querySelector('.sub').textContent : null])""",
            )
        }
        assert cards["Profiler overhead"] == [value, sub]
        assert cards["Median step time"] == ["85.000 ms", "unprofiled 54.200 ms"]
        warning = page.locator("#unread-input").inner_text()
        assert warning == "Part of the input could not be read: rank 3: the trace ends mid-event"
        check_one_line_values(page)
        assert errors == []
    finally:
        page.close()
