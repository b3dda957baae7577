"""The report's Ranks section in a real browser: rank x step heat maps of step time and idle."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from rich.console import Console

from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from tests.cluster_gen import write_ranks

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.browser


def open_report(browser: Browser, report: Path, errors: list[str]) -> Page:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)
    return page


def test_ranks_section_draws_heat_maps_and_names_the_slow_rank(
    browser: Browser, tmp_path: Path
) -> None:
    write_ranks(tmp_path / "run", 8, slow_rank=5, steps=3)
    built = build_profile(
        [tmp_path / "run"],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=0),
    )
    assert built.analysis.cluster is not None
    errors: list[str] = []
    page = open_report(browser, tmp_path / "p" / "report.html", errors)
    assert errors == []
    note = page.locator("#cluster-note").text_content() or ""
    assert "8 ranks" in note and "slow rank 5" in note
    assert "compute spread 19.5 %" in note
    # every step of every rank takes 14 ms with 1 ms idle (the slow rank's peers wait for it
    # in the collective, inside the step): one value per map, said in words, not drawn
    said = page.locator("#cluster .note", has_text="Every rank and step").all_text_contents()
    assert said == [
        "Every rank and step: step time 14.000 ms (one value, not drawn).",
        "Every rank and step: idle 1.000 ms (one value, not drawn).",
    ]
    assert page.locator("#chart-cluster-wall, #chart-cluster-idle").count() == 0
    rows = page.eval_on_selector_all(
        "#table-cluster_ranks tbody tr", "trs => trs.map(tr => tr.children[0].textContent)"
    )
    assert rows == [str(r) for r in range(8)]
    # the heat map's cells: 8 ranks x 3 steps of step time, as the accounting says (14 ms)
    cells = page.evaluate(
        "() => JSON.parse(document.getElementById('perfledger-data').textContent).cluster.wall_ms"
    )
    assert len(cells) == 24 and {c[2] for c in cells} == {14.0}
    page.close()


def test_a_single_rank_report_has_no_ranks_section(browser: Browser, tmp_path: Path) -> None:
    write_ranks(tmp_path / "run", 1)
    build_profile(
        [tmp_path / "run" / "rank-0.json"], tmp_path / "p", console=Console(file=io.StringIO())
    )
    errors: list[str] = []
    page = open_report(browser, tmp_path / "p" / "report.html", errors)
    assert errors == []
    assert page.locator("#cluster").count() == 0
    assert page.locator('nav a[href="#cluster"]').count() == 0
    page.close()
