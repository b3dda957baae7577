"""One step time and one utilisation: the terminal, summary.json, the report's data, the ledger
and diff show the same figures for the same profile (each reads the one definition of
perfledger.analysis.figures, or what it returned)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from tests.cli import perfledger
from tests.paths import DATA

CASES = {
    "one GPU, four steps": "kineto/v100_rank1_ddp.json.gz",
    "two ranks": "kineto/sampled_2ranks",
    "Ascend, two ranks": "ascend/torch_npu_text/level1",
    "CPU only": "kineto/cpu_only_rank34.json.gz",
}


def report_payload(path: Path) -> dict[str, object]:
    html = path.read_text(encoding="utf-8")
    match = re.search(
        r'<script type="application/json" id="perfledger-data">(.*?)</script>', html, re.S
    )
    assert match is not None, "the report has no data payload"
    payload: dict[str, object] = json.loads(match.group(1))
    return payload


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_view_shows_the_same_step_time_and_utilisation(case: str, tmp_path: Path) -> None:
    profile = tmp_path / "p"
    ledger = tmp_path / "ledger.db"
    done = perfledger("analyze", DATA / CASES[case], "-o", profile, "--ledger", ledger)
    assert done.returncode == 0, done.stderr

    summary = json.loads((profile / "summary.json").read_text(encoding="utf-8"))
    step_ms, utilization = summary["step_time_ms"], summary["device_utilization_pct"]
    assert step_ms is not None or summary["step_count"] == 0
    assert (utilization is None) == (case == "CPU only")

    # the terminal's headline line
    headline = next(line for line in done.stdout.splitlines() if line.startswith("perfledger "))
    if step_ms is None:
        assert "no step marks" in headline
    else:
        assert f"step time {step_ms:.3f} ms" in headline
    compute = summary["device_compute_pct"]
    if utilization is None:
        assert "device utilisation" not in headline and compute is None
    else:
        assert f"device utilisation {utilization:.2f}% · compute {compute:.2f}%" in headline

    # the report's data
    shown = report_payload(profile / "report.html")["headline"]
    assert isinstance(shown, dict)
    assert shown["step_time_ms"] == step_ms
    assert shown["device_utilization_pct"] == utilization
    assert shown["device_compute_pct"] == compute

    # the ledger
    listed = perfledger("runs", "--ledger", ledger, "--format", "csv")
    assert listed.returncode == 0, listed.stderr
    (run,) = list(csv.DictReader(io.StringIO(listed.stdout)))
    assert (float(run["step_ms"]) if run["step_ms"] else None) == step_ms
    assert (float(run["utilization_pct"]) if run["utilization_pct"] else None) == utilization

    # diff of the profile with itself
    compared = perfledger("diff", profile, profile, "-o", tmp_path / "d", "--no-html")
    assert compared.returncode == 0, compared.stderr
    diff = json.loads((tmp_path / "d" / "diff.json").read_text(encoding="utf-8"))
    base_step = diff["step_time_ms"]["base"]
    assert (round(base_step, 3) if base_step is not None else None) == step_ms
    base_utilization = diff["utilization_pct"]["base"]
    assert (round(base_utilization, 2) if base_utilization is not None else None) == utilization
