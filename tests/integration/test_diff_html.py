"""diff.html and the trend page in a real browser (chromium through playwright), offline."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfledger.analysis import diff
from perfledger.cli.diff_gates import parse_threshold
from perfledger.render.diff_html import write_diff_html, write_trend_html
from perfledger.render.diff_json import diff_document
from tests.unit.test_diff import op_summary, run

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.browser
HOSTILE = "</script><img src=x onerror=window.__pwned=1>"


def open_page(browser: Browser, path: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith("file:") else None)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready=true]", timeout=20_000)
    return page, errors, requests


def test_diff_page(browser: Browser, tmp_path: Path) -> None:
    base_ops = op_summary([("kernel", "ampere_sgemm_128x64_nn", HOSTILE, 1, 300_000)])
    current_ops = op_summary([("kernel", "ampere_sgemm_128x64_nn", HOSTILE, 1, 200_000)])
    base = run([1.0, 1.1, 0.9], idle_pct=[20, 20, 20], ops=base_ops, label="before")
    current = run([0.8, 0.8, 0.8], idle_pct=[5, 5, 5], ops=current_ops, label=HOSTILE)
    result = diff.diff_runs(base, current)
    checks = diff.evaluate_gates(result, [parse_threshold("idle>+2pp")])
    document = diff_document(result, checks)
    path = tmp_path / "diff.html"
    write_diff_html(path, document)
    html = path.read_text(encoding="utf-8")
    assert HOSTILE not in html
    page, errors, requests = open_page(browser, path)
    assert errors == []
    assert requests == []  # nothing fetched: the page is self-contained
    assert page.evaluate("window.__pwned") is None
    assert page.text_content("#run-current") == HOSTILE
    assert page.text_content("#verdict") == document["verdict"]
    # the figures shown are diff.json's, formatted
    cards = page.text_content("#cards") or ""
    assert "1.000 → 0.800 ms" in cards
    assert "-20.0%" in cards
    account = page.inner_text("#table-account")
    assert "idle\t0.200\t0.040\t-80.0%\t20.00\t5.00\t-15.00" in account
    movers = page.inner_text("#table-movers-time")
    assert HOSTILE in movers
    assert "0.1000\t0.0667\t-0.0333" in movers  # per step: 0.3 ms and 0.2 ms over 3 steps
    assert page.inner_text("#table-checks").split("\t")[-1].strip() == "ok"
    # every chart drew a canvas
    for chart in ("chart-steps", "chart-account", "chart-gaps", "chart-classes"):
        assert page.locator(f"#{chart} canvas").count() == 1, chart
    page.close()


def test_trend_page(browser: Browser, tmp_path: Path) -> None:
    runs = [
        {
            "id": i,
            "label": label,
            "time": f"2026-11-29 08:0{i}:00",
            "step_median_ms": step,
            "step_p90_ms": step * 1.1,
            "utilization_pct": 80.0,
            "accounting": {"compute": 80.0, "idle_sync": 20.0},
            "delta_pct": None if i == 1 else round(100 * (step - 10.0) / 10.0, 2),
            "is_baseline": i == 1,
            "note": HOSTILE if i == 2 else None,
            "device": "NVIDIA A100",
            "git_commit": "0123456789abcdef",
            "git_dirty": i == 2,
            "top_finding": "excessive_sync",
            "workload": "train.py · NVIDIA A100",
        }
        for i, (label, step) in enumerate((("base", 10.0), ("fused", 8.0)), start=1)
    ]
    path = tmp_path / "trend.html"
    write_trend_html(path, runs, title="2 runs")
    page, errors, requests = open_page(browser, path)
    assert errors == [] and requests == []
    assert page.evaluate("window.__pwned") is None
    table = page.inner_text("#table-runs")
    assert "baseline" in table
    assert "-20.00%" in table
    assert HOSTILE in table
    assert "0123456789+" in table
    assert table.splitlines()[0].endswith("workload")
    assert table.splitlines()[1].endswith("train.py · NVIDIA A100")
    assert page.locator("#chart-steps canvas").count() == 1
    assert json.loads(page.text_content("#perfledger-data") or "{}")["runs"][1]["note"] == HOSTILE
    page.close()


def test_diff_page_banners_for_another_workload_and_batch(browser: Browser, tmp_path: Path) -> None:
    base = run([1.0, 1.0, 1.0], label="cuda")
    current = run([0.5, 0.5, 0.5], label="ascend")
    base = replace(
        base,
        workload=diff.Workload(vendor="cuda", device="A100"),
        batch=diff.BatchSize(32, "aten::conv2d", 3, 3),
    )
    current = replace(
        current,
        workload=diff.Workload(vendor="ascend", device="Ascend910B"),
        batch=diff.BatchSize(16, "aten::conv2d", 3, 3),
    )
    document = diff_document(diff.diff_runs(base, current))
    path = tmp_path / "diff.html"
    write_diff_html(path, document)
    page, errors, _ = open_page(browser, path)
    assert errors == []
    banner = page.locator("#banner-workload")
    assert banner.is_visible()
    assert banner.text_content() == (
        "different workloads (vendors cuda vs ascend): not a like-for-like comparison"
    )
    note = page.locator("#banner-batch")
    assert note.is_visible()
    assert "batch sizes differ (32 vs 16 samples per step)" in (note.text_content() or "")
    # above the verdict, so that it is read first
    top = page.evaluate(
        "[document.getElementById('banner-workload').getBoundingClientRect().top,"
        " document.getElementById('verdict').getBoundingClientRect().top]"
    )
    assert top[0] < top[1]
    page.close()
    # per sample: 1.0 ms over 32 samples against 0.5 ms over 16 — the same time per sample
    per_sample = diff_document(diff.diff_runs(base, current, per_sample=True))
    write_diff_html(path, per_sample)
    page, errors, _ = open_page(browser, path)
    assert errors == []
    assert not page.locator("#banner-batch").is_visible()
    cards = page.text_content("#cards") or ""
    assert "0.0313 → 0.0313 ms" in cards and "32 vs 16 samples per step" in cards
    page.close()


def test_same_workload_page_has_no_banner(browser: Browser, tmp_path: Path) -> None:
    document = diff_document(diff.diff_runs(run([1.0, 1.1]), run([0.9, 1.0])))
    path = tmp_path / "diff.html"
    write_diff_html(path, document)
    page, errors, _ = open_page(browser, path)
    assert errors == []
    for banner in ("#banner-workload", "#banner-batch", "#banner-quality"):
        assert not page.locator(banner).is_visible(), banner
    page.close()
