"""The HTML report in a real browser: Debian's chromium driven by playwright.

Reports of a real GPU trace, of a real CPU recording (``perfledger record`` on the example
CNN) and of a synthetic profile whose op names try to inject markup. Each page must load with
no console error and no network request, draw every chart, sort and filter its tables,
redraw the step timeline for another step, and show the hostile names as text.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from perfledger.analysis.profile import analyze_traces
from perfledger.model import schema
from perfledger.model.trace import Trace
from perfledger.render.report.data import Headline, ReportData, report_data_from_profile
from perfledger.render.report.page import MAX_REPORT_BYTES, write_report
from perfledger.run.pipeline import build_profile
from perfledger.sources import load_traces
from tests.paths import DATA
from tests.synth import EventsBuilder

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
DOCS_IMAGES = ROOT / "docs" / "images"
EVIL = "</script><img src=x onerror=alert(1)>"
US = 1_000


class Visit:
    """A page of a report with everything the browser said while showing it."""

    def __init__(self, browser: Browser, path: Path) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.page: Page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page = self.page
        url = path.resolve().as_uri()
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: r.url != url and self.requests.append(r.url))
        page.goto(url)
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)

    def close(self) -> None:
        self.page.close()

    def chart_ids(self) -> list[str]:
        return list(self.page.eval_on_selector_all(".chart", "els => els.map(e => e.id)"))

    def inked_fraction(self, chart_id: str) -> float:
        """Share of the chart canvas' pixels that are drawn (not transparent)."""
        return float(
            self.page.evaluate(
                """id => {
                    const canvas = document.querySelector('#' + id + ' canvas');
                    if (!canvas || !canvas.width || !canvas.height) return 0;
                    const data = canvas.getContext('2d')
                        .getImageData(0, 0, canvas.width, canvas.height).data;
                    let inked = 0;
                    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) inked++;
                    return inked / (canvas.width * canvas.height);
                }""",
                chart_id,
            )
        )

    def canvas_picture(self, chart_id: str) -> str:
        return str(
            self.page.evaluate(
                "id => document.querySelector('#' + id + ' canvas').toDataURL()", chart_id
            )
        )

    def first_cells(self, table: str, column: int = 0, rows: int = 5) -> list[str]:
        return list(
            self.page.eval_on_selector_all(
                f"#table-{table} tbody tr",
                f"trs => trs.slice(0, {rows}).map(tr => tr.children[{column}].textContent)",
            )
        )


def check_page(visit: Visit, *, min_charts: int) -> list[str]:
    """What every report page must satisfy; returns the chart ids."""
    assert visit.errors == [], visit.errors
    assert visit.requests == [], f"the report fetched {visit.requests}"
    assert visit.dialogs == []
    charts = visit.chart_ids()
    assert len(charts) >= min_charts, charts
    for chart_id in charts:
        inked = visit.inked_fraction(chart_id)
        assert inked > 0.005, f"chart {chart_id} is empty ({inked:.4f} of its pixels drawn)"
    return charts


def check_sorting(visit: Visit, table: str, column: str) -> None:
    page = visit.page
    index = page.eval_on_selector_all(
        f"#table-{table} thead th", f"ths => ths.findIndex(t => t.dataset.column === '{column}')"
    )
    assert index >= 0, f"{table} has no column {column}"
    header = page.locator(f"#table-{table} thead th[data-column='{column}']")
    header.click()
    first = visit.first_cells(table, index, rows=50)
    header.click()
    second = visit.first_cells(table, index, rows=50)
    assert first != second, f"sorting {table} by {column} changed nothing"
    assert first[0] != second[0]


def show_step(visit: Visit, step: str) -> None:
    visit.page.select_option("#timeline-step", step)
    visit.page.wait_for_function(
        "s => document.getElementById('chart-timeline').dataset.step === s", arg=step
    )


def screenshots(visit: Visit, tmp_path: Path, prefix: str, sections: list[str]) -> None:
    """Screenshots of report sections; copied into docs/images when asked to update them."""
    # the sticky header would cover the top of sections scrolled under it
    visit.page.add_style_tag(content="header { position: static; }")
    # the timeline's slices are drawn a few hundred per frame
    visit.page.wait_for_selector("#chart-timeline[data-drawn], #timeline p.empty")
    for section in sections:
        shot = tmp_path / f"{prefix}_{section}.png"
        visit.page.locator(f"#{section}").screenshot(path=str(shot))
        assert shot.stat().st_size > 5_000
        if os.environ.get("PERFLEDGER_UPDATE_SCREENSHOTS") == "1":
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, DOCS_IMAGES / shot.name)


# --------------------------------------------------------------------------------------------
# A real GPU trace


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = DATA / "kineto" / "v100_rank1_ddp.json.gz"
    out = tmp_path_factory.mktemp("gpu") / "profile"
    result = build_profile([trace], out, console=Console(file=io.StringIO()))
    path = out.parent / "report.html"
    write_report(path, report_data_from_profile(result.analysis, result.summary, title=trace.name))
    return path


def test_gpu_trace_report(browser: Browser, gpu_report: Path, tmp_path: Path) -> None:
    assert gpu_report.stat().st_size < MAX_REPORT_BYTES
    visit = Visit(browser, gpu_report)
    try:
        charts = check_page(visit, min_charts=3)
        assert {"chart-accounting", "chart-gaps", "chart-timeline"} <= set(charts)
        # one copy direction (DtoD): its row in the table, no one-bar chart
        assert "chart-transfers" not in charts
        assert visit.page.locator("#table-transfers tbody tr").count() == 1
        check_sorting(visit, "op_statistic", "total_ns")
        check_sorting(visit, "op_summary", "dur_ns")
        # filtering keeps only the matching rows
        page = visit.page
        rows_before = page.locator("#table-op_statistic tbody tr").count()
        page.fill("#table-op_statistic input[type=search]", "aten::")
        names = visit.first_cells("op_statistic", 0, rows=1000)
        assert 0 < len(names) < rows_before
        assert all("aten::" in n for n in names)
        assert "record_param_comms" not in names

        # the median step first; choosing another step redraws the timeline
        options = page.eval_on_selector_all("#timeline-step option", "os => os.map(o => o.value)")
        assert len(options) >= 2
        assert "median" in page.locator("#timeline-step option").first.inner_text()
        before = visit.canvas_picture("chart-timeline")
        show_step(visit, options[1])
        assert visit.canvas_picture("chart-timeline") != before
        assert visit.inked_fraction("chart-timeline") > 0.005
        assert visit.errors == []
        show_step(visit, options[0])
        screenshots(
            visit,
            tmp_path,
            "gpu",
            ["headline", "accounting", "gaps", "findings", "critical-path", "timeline", "ops"],
        )
    finally:
        visit.close()


# --------------------------------------------------------------------------------------------
# A CPU recording


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("cpu")
    profile = base / "recorded"
    command = [
        sys.executable,
        "-m",
        "perfledger",
        "record",
        "-o",
        str(profile),
        "--no-ledger",
        "--skip",
        "1",
        "--steps",
        "3",
        "--",
        sys.executable,
        str(ROOT / "examples" / "train_cnn.py"),
        "--epochs",
        "1",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, cwd=base, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    raw = sorted((profile / "raw").glob("*.json*"))
    assert raw, f"the recording wrote no trace under {profile / 'raw'}"
    counters = pq.read_table(profile / "tables" / "counters.parquet")
    analysis = analyze_traces(load_traces(raw), counters)
    summary = json.loads((profile / "summary.json").read_text())
    path = base / "report.html"
    write_report(path, report_data_from_profile(analysis, summary, title="train_cnn.py on CPU"))
    return path


def test_cpu_recording_report(browser: Browser, cpu_report: Path, tmp_path: Path) -> None:
    visit = Visit(browser, cpu_report)
    try:
        charts = check_page(visit, min_charts=3)
        assert "chart-accounting" in charts and "chart-timeline" in charts
        # host counters of the recorder are drawn over time
        assert any(c.startswith("chart-counter-") for c in charts)
        check_sorting(visit, "op_statistic", "total_ns")
        options = visit.page.eval_on_selector_all(
            "#timeline-step option", "os => os.map(o => o.value)"
        )
        assert len(options) >= 2
        before = visit.canvas_picture("chart-timeline")
        show_step(visit, options[-1])
        assert visit.canvas_picture("chart-timeline") != before
        # no device: no device cards
        labels = visit.page.eval_on_selector_all(
            "#headline-cards .label", "ls => ls.map(l => l.textContent)"
        )
        assert "Median step time" in labels
        assert not [x for x in labels if x.startswith(("Device utilisation", "Compute"))]
        screenshots(visit, tmp_path, "cpu", ["accounting", "timeline", "counters"])
    finally:
        visit.close()


# --------------------------------------------------------------------------------------------
# Hostile strings


def hostile_profile() -> ReportData:
    """Four steps whose ops, kernels, finding and title carry markup."""
    b = EventsBuilder()
    for step in range(1, 5):
        t0 = step * 1000 * US
        b.step_mark(t0, (800 + 40 * step) * US, step)
        for i in range(6):
            h = t0 + i * 120 * US
            b.cpu_op(h, 70 * US, EVIL if i == 2 else f"aten::op{i}", external_id=step * 10 + i)
            b.launch(
                h + 5 * US,
                10 * US,
                h + 30 * US,
                (40 + i) * US,
                EVIL if i == 4 else f"kernel_{i}",
                external_id=step * 10 + i,
            )
    analysis = analyze_traces(
        [Trace(events=b.table(), counters=schema.empty_counters(), source_kind="synthetic")]
    )
    finding: dict[str, Any] = {
        "id": "excessive_sync",
        "title": EVIL,
        "severity_ms": 0.2,
        "severity_pct": 20.0,
        "evidence": {"op": EVIL, "count": 4},
        "suggestion": EVIL,
        "verify": "re-run",
        "spans": [{"rank": 0, "start_ns": 3_240 * US, "end_ns": 3_310 * US}],
    }
    summary = {"step_time_ms": 0.9, "step_count": 4, "ranks": [0], "findings": [finding]}
    data = report_data_from_profile(analysis, summary, title=EVIL, meta={"source_kind": EVIL})
    return data


def test_hostile_names_are_text_and_run_nothing(browser: Browser, tmp_path: Path) -> None:
    path = tmp_path / "hostile.html"
    write_report(path, hostile_profile())
    visit = Visit(browser, path)
    try:
        check_page(visit, min_charts=2)
        page = visit.page
        assert page.locator("img").count() == 0
        assert page.title().startswith(EVIL)
        # shown as text: in the op tables and the finding
        assert page.get_by_text(EVIL, exact=True).count() >= 3
        cells = page.locator("#table-op_statistic td", has_text=EVIL)
        assert cells.count() >= 1
        # hovering a hostile slice of the timeline renders its tooltip as text too
        page.locator("#chart-timeline").hover(position={"x": 400, "y": 120})
        # the finding's link opens its step and zooms there
        page.locator(".show-on-timeline").first.click()
        page.wait_for_function("document.getElementById('chart-timeline').dataset.step === '3'")
        assert page.eval_on_selector("#timeline-step", "s => s.value") == "3"
        assert visit.dialogs == []
        assert visit.errors == []
        assert page.evaluate("document.querySelectorAll('img, iframe, object').length") == 0
    finally:
        visit.close()


def test_report_headline_without_figures_says_so(browser: Browser, tmp_path: Path) -> None:
    path = tmp_path / "bare.html"
    write_report(path, ReportData(title="bare", headline=Headline()))
    visit = Visit(browser, path)
    try:
        assert visit.errors == []
        values = visit.page.eval_on_selector_all(
            "#headline-cards .value", "vs => vs.map(v => v.textContent)"
        )
        assert values == ["n/a"] * 7
        assert visit.chart_ids() == []  # nothing to draw: no empty chart either
    finally:
        visit.close()
