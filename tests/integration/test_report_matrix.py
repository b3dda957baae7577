"""The communication matrix of the report's Ranks section.

On the Ascend level1 export (two profiled ranks, each with pairs towards the eight ranks of its
group) the payload must hold the 16 pairs with the figures of the profile's
cluster_communication_matrix.csv; in chromium the heat map is drawn with the rank's copies to
itself outside the colour scale, its tooltip gives each pair's figures, and a profile without a
matrix (Kineto sampled_2ranks) has no such chart. A hand-built matrix checks the caps, the
choice of a cell's transport and the slow-link table.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from rich.console import Console

from perfledger.analysis.cluster.collectives import slow_links
from perfledger.model.cluster import MATRIX_SCHEMA, ClusterReport
from perfledger.render.report.budgets import MATRIX_SRC_RANKS
from perfledger.render.report.data import ReportData
from perfledger.render.report.page import write_report
from perfledger.render.report.payload import report_payload
from perfledger.run.pipeline import build_profile
from tests.paths import data_file

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.browser

LEVEL1 = "ascend/torch_npu_text/level1"


@dataclasses.dataclass(frozen=True)
class Built:
    profile: Path
    cluster: ClusterReport


def _build(source: Path, out: Path) -> Built:
    built = build_profile([source], out, console=Console(file=io.StringIO()))
    assert built.analysis.cluster is not None, f"{source}: no cluster pass"
    return Built(out, built.analysis.cluster)


@pytest.fixture(scope="module")
def level1(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _build(data_file(LEVEL1), tmp_path_factory.mktemp("level1") / "p")


def with_matrix(cluster: ClusterReport, matrix: pa.Table) -> ClusterReport:
    """The cluster pass's report with another matrix, and that matrix's slow links."""
    slow = pa.Table.from_pylist(slow_links(matrix), schema=MATRIX_SCHEMA)
    return dataclasses.replace(cluster, matrix=matrix, slow_links=slow)


def payload_of(report: Path) -> dict[str, Any]:
    """The JSON document embedded in a report page."""
    text = report.read_text("utf-8")
    found = re.search(
        r'<script type="application/json" id="perfledger-data">(.*?)</script>', text, re.S
    )
    assert found, f"{report}: no payload"
    document: dict[str, Any] = json.loads(found.group(1))
    return document


class Visit:
    """A report page with its console errors and the requests it made."""

    def __init__(self, browser: Browser, report: Path) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        url = report.resolve().as_uri()
        self.page: Page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: r.url != url and self.requests.append(r.url))
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready=true]", timeout=30_000)

    def inked(self, chart_id: str) -> float:
        """Share of the chart's pixels drawn on some layer other than the first.

        ECharts draws a heat map's cells on a layer of their own above the axes' canvas.
        """
        return float(
            self.page.evaluate(
                """id => {
                    const layers = Array.from(document.querySelectorAll('#' + id + ' canvas'));
                    if (layers.length < 2 || !layers[0].width) return 0;
                    const size = layers[0].width * layers[0].height;
                    const inked = new Uint8Array(size);
                    for (const canvas of layers.slice(1)) {
                        const data = canvas.getContext('2d')
                            .getImageData(0, 0, canvas.width, canvas.height).data;
                        for (let i = 0; i < size; i++) if (data[4 * i + 3] > 0) inked[i] = 1;
                    }
                    return inked.reduce((a, b) => a + b, 0) / size;
                }""",
                chart_id,
            )
        )

    def cell_centre(self, series: int, x: int, y: int) -> tuple[float, float]:
        """Where the centre of cell (x, y) of a matrix series is, in chart pixels."""
        point = self.page.evaluate(
            """([s, x, y]) => echarts
                .getInstanceByDom(document.getElementById('chart-cluster-matrix'))
                .convertToPixel({seriesIndex: s}, [x, y])""",
            [series, x, y],
        )
        return float(point[0]), float(point[1])

    def pixel(self, px: float, py: float) -> tuple[int, int, int]:
        """The colour of the matrix at a chart pixel: that of its topmost opaque layer."""
        rgba = self.page.evaluate(
            """([x, y]) => {
                const layers = Array.from(
                    document.querySelectorAll('#chart-cluster-matrix canvas'));
                for (const canvas of layers.reverse()) {
                    const ratio = canvas.width / canvas.clientWidth;
                    const rgba = canvas.getContext('2d')
                        .getImageData(Math.round(x * ratio), Math.round(y * ratio), 1, 1).data;
                    if (rgba[3] === 255) return Array.from(rgba);
                }
                return [0, 0, 0, 0];
            }""",
            [px, py],
        )
        return int(rgba[0]), int(rgba[1]), int(rgba[2])

    def tooltip_at(self, px: float, py: float) -> str:
        chart = self.page.locator("#chart-cluster-matrix")
        chart.scroll_into_view_if_needed()
        box = chart.bounding_box()
        assert box is not None
        self.page.mouse.move(box["x"] + px, box["y"] + py)
        self.page.wait_for_timeout(300)
        return str(
            self.page.eval_on_selector(
                "#chart-cluster-matrix",
                "e => Array.from(e.children).filter(c => !c.querySelector('canvas'))"
                ".map(c => c.innerText).join('\\n')",
            )
        )


# --------------------------------------------------------------------------------------------
# The payload of a real profile against its CSV file.


def test_level1_payload_holds_the_16_pairs_of_the_csv(level1: Built) -> None:
    with (level1.profile / "cluster_communication_matrix.csv").open(newline="") as f:
        expected = list(csv.DictReader(f))
    assert len(expected) == 16  # 2 profiled ranks x 8 ranks of their group
    matrix = payload_of(level1.profile / "report.html")["cluster"]["matrix"]
    rows = matrix["rows"]
    assert len(rows["src_rank"]) == 16 and matrix["total_rows"] == 16
    got = {
        (rows["src_rank"][i], rows["dst_rank"][i], rows["transport"][i]): i
        for i in range(len(rows["src_rank"]))
    }
    assert set(got) == {(int(e["src_rank"]), int(e["dst_rank"]), e["transport"]) for e in expected}
    for e in expected:
        i = got[(int(e["src_rank"]), int(e["dst_rank"]), e["transport"])]
        assert rows["steps"][i] == int(e["steps"])
        assert rows["transit_bytes"][i] == int(e["transit_bytes"])
        assert rows["transit_ns"][i] == int(e["transit_ns"])
        # the CSV keeps 6 decimals
        assert rows["gbps"][i] == pytest.approx(float(e["gbps"]), abs=1e-6)
        assert rows["vs_transport_median_pct"][i] == pytest.approx(
            float(e["vs_transport_median_pct"]), abs=1e-6
        )
    assert matrix["src_ranks"] == [0, 1] and matrix["dst_ranks"] == list(range(8))
    # one cell per pair: 14 links coloured by their GB/s, the two LOCAL copies apart
    local = {
        (int(e["dst_rank"]), int(e["src_rank"])): e for e in expected if e["transport"] == "LOCAL"
    }
    assert {(c[0], c[1]) for c in matrix["local_cells"]} == set(local) == {(0, 0), (1, 1)}
    assert len(matrix["cells"]) == 14
    for x, y, gbps, row in matrix["cells"]:
        e = next(e for e in expected if (int(e["dst_rank"]), int(e["src_rank"])) == (x, y))
        assert e["transport"] == "HCCS" and rows["transport"][row] == "HCCS"
        assert gbps == pytest.approx(float(e["gbps"]), abs=1e-6)
    # every HCCS link is within 3.1 % of the median: none is slow
    assert matrix["slow_links_total"] == 0 and matrix["slow_links"]["columns"][0]["values"] == []


# --------------------------------------------------------------------------------------------
# A hand-built matrix: caps, a pair of two transports, slow links.

GB = 16_000_000  # bytes moved in 1 ms at 16 GB/s


def _hand_matrix() -> pa.Table:
    """70 ranks, each sending to its partner ``r ^ 1`` over HCCS at 16 GB/s, except:
    0 -> 1 also over RDMA (fewer bytes), 0 -> 0 LOCAL, 4 -> 5 without time, and three slow
    links 2 -> 3 (25 %), 6 -> 7 (50 %), 66 -> 67 (10 %, beyond the shown source ranks)."""
    rows: list[dict[str, Any]] = []

    def add(src: int, dst: int, transport: str, nbytes: int, ns: int, pct: float) -> None:
        gbps = nbytes / ns if ns else math.nan
        rows.append(
            {
                "src_rank": src,
                "dst_rank": dst,
                "transport": transport,
                "steps": 2,
                "transit_bytes": nbytes,
                "transit_ns": ns,
                "gbps": gbps,
                "vs_transport_median_pct": pct,
            }
        )

    slow = {2: 4_000_000, 6: 2_000_000, 66: 10_000_000}
    for r in range(70):
        if r == 0:
            add(0, 0, "LOCAL", GB, 40_000, 100.0)
        if r == 4:
            add(4, 5, "HCCS", GB, 0, math.nan)
        elif r in slow:
            add(r, r ^ 1, "HCCS", GB, slow[r], 100.0 * 1_000_000 / slow[r])
        else:
            add(r, r ^ 1, "HCCS", GB, 1_000_000, 100.0)
        if r == 0:
            add(0, 1, "RDMA", GB // 4, 1_000_000, 100.0)
    return pa.Table.from_pylist(rows, schema=MATRIX_SCHEMA)


def test_payload_caps_the_ranks_picks_the_main_transport_and_lists_slow_links(
    level1: Built,
) -> None:
    cluster = with_matrix(level1.cluster, _hand_matrix())
    matrix = report_payload(ReportData(title="hand", cluster=cluster))["cluster"]["matrix"]
    assert MATRIX_SRC_RANKS == 64
    assert matrix["src_ranks"] == list(range(64)) and matrix["total_src_ranks"] == 70
    assert matrix["dst_ranks"] == list(range(64)) and matrix["total_dst_ranks"] == 70
    assert matrix["total_rows"] == 72
    rows = matrix["rows"]
    # 64 HCCS pairs among the first 64 ranks, the RDMA row of 0 -> 1, the LOCAL row of rank 0
    assert len(rows["src_rank"]) == 66 and max(rows["src_rank"]) == 63
    assert matrix["local_cells"] == [[0, 0, GB / 40_000, 0]]
    cells = {(c[0], c[1]): c for c in matrix["cells"]}
    # 4 -> 5 has no time, hence no bandwidth: no cell, though its row is there for the record
    assert (5, 4) not in cells and len(cells) == 63
    assert rows["gbps"][rows["src_rank"].index(4)] is None
    # 0 -> 1: HCCS carries 4x the bytes of RDMA, so the cell is coloured by HCCS
    x, y, gbps, row = cells[(1, 0)]
    assert (gbps, rows["transport"][row]) == (16.0, "HCCS")
    assert cells[(3, 2)][2] == 4.0 and cells[(7, 6)][2] == 8.0
    # slow links of the whole matrix, slowest first (66 -> 67 is beyond the shown ranks)
    slow = {c["name"]: c["values"] for c in matrix["slow_links"]["columns"]}
    assert matrix["slow_links_total"] == 3 and matrix["slow_below_pct"] == 80.0
    assert list(zip(slow["src_rank"], slow["dst_rank"], strict=True)) == [(66, 67), (2, 3), (6, 7)]
    assert slow["vs_transport_median_pct"] == [10.0, 25.0, 50.0]


def test_several_groups_draw_the_one_that_moved_the_most_bytes(level1: Built) -> None:
    # the same member numbers in two groups: "tp" moved 3 GB, "dp" 1 GB
    def pair(group: str, src: int, dst: int, nbytes: int) -> dict[str, Any]:
        return {
            "group": group,
            "src_rank": src,
            "dst_rank": dst,
            "transport": "HCCS",
            "steps": 1,
            "transit_bytes": nbytes,
            "transit_ns": nbytes // 16,
            "gbps": 16.0,
            "vs_transport_median_pct": 100.0,
        }

    rows = [pair("dp", 0, 1, GB), pair("tp", 0, 1, 2 * GB), pair("tp", 1, 0, GB)]
    cluster = with_matrix(level1.cluster, pa.Table.from_pylist(rows, schema=MATRIX_SCHEMA))
    matrix = report_payload(ReportData(title="groups", cluster=cluster))["cluster"]["matrix"]
    assert (matrix["group"], matrix["groups"]) == ("tp", 2)
    assert matrix["total_rows"] == 2
    pairs = zip(matrix["rows"]["src_rank"], matrix["rows"]["dst_rank"], strict=True)
    assert sorted(pairs) == [(0, 1), (1, 0)]


def test_a_cluster_without_matrix_rows_has_no_matrix_in_the_payload(level1: Built) -> None:
    cluster = with_matrix(level1.cluster, MATRIX_SCHEMA.empty_table())
    assert report_payload(ReportData(title="none", cluster=cluster))["cluster"]["matrix"] is None


# --------------------------------------------------------------------------------------------
# In chromium.


def test_level1_matrix_is_drawn_with_local_outside_the_scale(
    browser: Browser, level1: Built
) -> None:
    visit = Visit(browser, level1.profile / "report.html")
    page = visit.page
    assert visit.errors == [] and visit.requests == []
    assert visit.inked("chart-cluster-matrix") > 0.05
    note = page.locator("#cluster-matrix-note").text_content() or ""
    assert note.startswith("16 pairs") and "no slow link" in note
    assert "No slow link" in (page.locator("#cluster-slow-links").text_content() or "")
    # rank 0's copy to itself: grey (not a colour of the scale), its tooltip the CSV's figures
    cx, cy = visit.cell_centre(1, 0, 0)
    assert visit.pixel(cx + 30, cy + 10) == (0xD0, 0xD0, 0xD0)
    tip = visit.tooltip_at(cx, cy)
    assert "rank 0 → rank 0" in tip
    assert "LOCAL: 61.2 MB in 145.8 µs · 419.82 GB/s · 99.0 % of the LOCAL median" in tip
    # rank 1 -> 7 over HCCS: 60332352 bytes in 3983940 ns
    cx, cy = visit.cell_centre(0, 7, 1)
    assert visit.pixel(cx + 30, cy + 10) != (0xD0, 0xD0, 0xD0)
    tip = visit.tooltip_at(cx, cy)
    assert "rank 1 → rank 7" in tip
    assert "HCCS: 60.3 MB in 3.984 ms · 15.14 GB/s · 96.9 % of the HCCS median" in tip
    page.close()


def test_slow_links_are_listed_under_the_matrix(
    browser: Browser, level1: Built, tmp_path: Path
) -> None:
    cluster = with_matrix(level1.cluster, _hand_matrix())
    write_report(tmp_path / "report.html", ReportData(title="hand", cluster=cluster))
    visit = Visit(browser, tmp_path / "report.html")
    page = visit.page
    assert visit.errors == [] and visit.requests == []
    assert visit.inked("chart-cluster-matrix") > 0.01
    note = page.locator("#cluster-matrix-note").text_content() or ""
    assert "showing the first 64 of 70 source ranks and 64 of 70 destination ranks" in note
    assert "3 slow links" in note
    first_cells = page.eval_on_selector_all(
        "#cluster-slow-links tbody tr",
        # after the group column: source and destination
        "trs => trs.map(tr => [tr.children[1].textContent, tr.children[2].textContent])",
    )
    assert first_cells == [["66", "67"], ["2", "3"], ["6", "7"]]
    page.close()


def test_a_profile_without_matrix_has_no_matrix_chart(browser: Browser, tmp_path: Path) -> None:
    built = _build(data_file("kineto/sampled_2ranks"), tmp_path / "p")
    assert built.cluster.matrix.num_rows == 0
    assert payload_of(tmp_path / "p" / "report.html")["cluster"]["matrix"] is None
    visit = Visit(browser, tmp_path / "p" / "report.html")
    page = visit.page
    assert visit.errors == [] and visit.requests == []
    assert page.locator("#cluster").count() == 1  # two ranks: the section is there
    assert page.locator("#cluster-matrix").count() == 0
    assert page.locator("#chart-cluster-matrix").count() == 0
    page.close()
