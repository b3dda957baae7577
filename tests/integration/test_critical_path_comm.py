"""A step whose critical path runs through an all-reduce that waited for its peer, analysed
as users analyse it: the wait and the transfer in summary.json, the terminal, whatif, the
critical-path table, the timeline's critical-path track and the report.

One V100-SXM2 rank (150 GB/s per direction to its peers): a 1 ms gemm from 30 µs, then on
the same stream an all-reduce of 18.75 M floats (75 MB) among 2 ranks from 1,030 to 3,530 µs.
Its transfer is 75 MB x 2(2-1)/2 / 150 GB/s = 500 µs, so it waited 2,000 µs for its peer.
The step's path: host work 10 µs, launch latency 20 µs, the gemm 1,000 µs, the all-reduce
2,500 µs (3,530 µs in all).
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from tests.cli import perfledger
from tests.kineto_gen import complete, cpu_op, device_task, runtime, write_kineto

if TYPE_CHECKING:
    from playwright.sync_api import Browser

ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float"
ELEMENTS = 18_750_000  # float32: 75 MB
WAIT_MS, TRANSFER_MS = 2.0, 0.5
STEP_MS = 3.53
V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16945512448, "numSms": 80}


def _trace(path: Path) -> Path:
    message = {"In msg nelems": ELEMENTS, "Out msg nelems": ELEMENTS, "dtype": "Float"}
    events = [
        complete("user_annotation", "ProfilerStep#1", 0, 200),
        cpu_op("aten::mm", 10, 6, external_id=100),
        runtime("cudaLaunchKernel", 10, 5, correlation=1, external_id=100),
        device_task("kernel", "gemm_kernel", 30, 1000, correlation=1, external_id=100),
        cpu_op("nccl:all_reduce", 20, 6, external_id=101),
        runtime("cudaLaunchKernel", 20, 5, correlation=2, external_id=101),
        device_task(
            "kernel",
            ALLREDUCE,
            1030,
            2500,
            correlation=2,
            external_id=101,
            **message,
            **{"Group size": 2},
        ),
    ]
    return write_kineto(path, events, deviceProperties=[V100])


class Analysed:
    def __init__(self, profile: Path, stdout: str) -> None:
        self.profile = profile
        self.stdout = stdout


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Analysed:
    root = tmp_path_factory.mktemp("comm_path")
    out = root / "profile"
    done = perfledger("analyze", _trace(root / "trace.json"), "-o", out)
    assert done.returncode == 0, done.stderr
    return Analysed(out, done.stdout)


def test_summary_gives_the_wait_and_the_transfer_beside_the_communication(
    analysed: Analysed,
) -> None:
    summary = json.loads((analysed.profile / "summary.json").read_text())
    bound = summary["critical_path"]["bound_by_ms"]
    assert bound["communication"] == pytest.approx(WAIT_MS + TRANSFER_MS, abs=1e-3)
    # the classes make up the step; the parts are beside them, not among them
    assert sum(bound.values()) == pytest.approx(STEP_MS, abs=1e-3)
    parts = summary["critical_path"]["bound_by_parts_ms"]
    assert set(parts) == {"communication"}
    assert parts["communication"]["wait"] == pytest.approx(WAIT_MS, abs=1e-3)
    assert parts["communication"]["transfer"] == pytest.approx(TRANSFER_MS, abs=1e-3)
    assert sum(parts["communication"].values()) == pytest.approx(bound["communication"])
    assert "unmatched_collectives" not in {c["id"] for c in summary["quality"]["checks"]}
    # communication.csv splits the task alike
    with (analysed.profile / "communication.csv").open() as rows:
        (row,) = list(csv.DictReader(rows))
    assert (int(row["wait_ns"]), int(row["transfer_ns"])) == (2_000_000, 500_000)


def test_the_terminal_says_how_much_of_the_path_waits_for_peers(analysed: Analysed) -> None:
    # 2.5 / 3.53 = 71 %, of which 2.0 / 3.53 = 57 % waiting
    assert "critical path: communication 71% (waiting for peers 57%)" in analysed.stdout


def test_whatif_splits_the_stored_profile_alike(analysed: Analysed) -> None:
    done = perfledger("whatif", analysed.profile, "--json")
    assert done.returncode == 0, done.stderr
    path = json.loads(done.stdout)["critical_path"]
    assert sum(path["bound_by_ms"].values()) == pytest.approx(STEP_MS, abs=1e-3)
    assert path["bound_by_parts_ms"] == {
        "communication": {"wait": WAIT_MS, "transfer": TRANSFER_MS}
    }
    # the text: the wait inside communication's entry, the shares adding up to the step
    done = perfledger("whatif", analysed.profile)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("critical path per step:")]
    assert "communication 2.500 ms (71%; waiting for peers 2.000 ms)" in line
    assert "communication:" not in line
    shares = [int(x) for x in re.findall(r"\((\d+)%", line)]
    assert sum(shares) == pytest.approx(100, abs=len(shares))  # each rounded to 1 %
    # the gemm twice as fast: alone, with no peer to wait for, the all-reduce keeps what it
    # lasted (its wait too) and the step ends 500 µs earlier
    done = perfledger("whatif", analysed.profile, "--scale", "kernel:gemm_kernel=0.5", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    (step,) = document["steps"]
    assert step["predicted_ns"] == round((STEP_MS - 0.5) * 1e6)
    parts = document["critical_path"]["bound_by_parts_ms"]["communication"]
    assert parts == {"wait": WAIT_MS, "transfer": TRANSFER_MS}
    assert "bound_by_parts_ns" not in step and "bound_by_ns" not in step


def _pieces(rows: list[dict[str, Any]]) -> dict[tuple[str, str | None], float]:
    return {(r["label"], r["part"]): (r["end_ns"] - r["start_ns"]) / 1e6 for r in rows}


def test_the_path_s_piece_of_the_all_reduce_is_in_two(analysed: Analysed) -> None:
    table = pq.read_table(analysed.profile / "tables" / "critical_path.parquet")
    assert table.schema.field("part").nullable
    rows = table.to_pylist()
    pieces = _pieces(rows)
    # the label is the collective's name: filtering by it finds both parts
    assert pieces[(ALLREDUCE, "wait")] == pytest.approx(WAIT_MS)
    assert pieces[(ALLREDUCE, "transfer")] == pytest.approx(TRANSFER_MS)
    assert {r["category"] for r in rows if r["label"] == ALLREDUCE} == {"communication"}
    assert {r["part"] for r in rows if r["label"] != ALLREDUCE} == {None}
    # the wait comes first, the transfer right after it
    (wait,) = [r for r in rows if r["part"] == "wait"]
    (transfer,) = [r for r in rows if r["part"] == "transfer"]
    assert wait["end_ns"] == transfer["start_ns"]
    # the timeline's critical-path track draws the same two slices (µs)
    document = json.loads(gzip.decompress((analysed.profile / "timeline.json.gz").read_bytes()))
    events = document["traceEvents"] if isinstance(document, dict) else document
    track = {e["name"]: e["dur"] for e in events if e.get("cat") == "critical_path"}
    assert track[f"{ALLREDUCE} (waiting for peers)"] == pytest.approx(WAIT_MS * 1e3)
    assert track[f"{ALLREDUCE} (transfer)"] == pytest.approx(TRANSFER_MS * 1e3)


def test_a_timeline_written_from_the_tables_names_the_parts(
    analysed: Analysed, tmp_path: Path
) -> None:
    out = tmp_path / "timeline.json.gz"
    done = perfledger("timeline", analysed.profile, "-o", out)
    assert done.returncode == 0, done.stderr
    document = json.loads(gzip.decompress(out.read_bytes()))
    events = document["traceEvents"] if isinstance(document, dict) else document
    track = {e["name"]: e["dur"] for e in events if e.get("cat") == "critical_path"}
    assert track[f"{ALLREDUCE} (waiting for peers)"] == pytest.approx(WAIT_MS * 1e3)
    assert track[f"{ALLREDUCE} (transfer)"] == pytest.approx(TRANSFER_MS * 1e3)


@pytest.mark.browser
def test_the_report_stacks_the_wait_and_the_transfer(analysed: Analysed, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((analysed.profile / "report.html").resolve().as_uri())
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)
    option = page.evaluate(
        """id => {
            const o = echarts.getInstanceByDom(document.getElementById(id)).getOption();
            return JSON.parse(JSON.stringify(o, (k, v) => typeof v === 'function' ? null : v));
        }""",
        "chart-critical-path",
    )
    series = {s["name"]: s["data"][0] for s in option["series"]}
    # the bars add up to the step: communication is drawn as its two parts
    assert "communication" not in series
    assert series["communication: waiting for peers"] == pytest.approx(WAIT_MS, abs=1e-3)
    assert series["communication: transfer"] == pytest.approx(TRANSFER_MS, abs=1e-3)
    assert sum(series.values()) == pytest.approx(STEP_MS, abs=1e-3)
    rows = page.eval_on_selector_all(
        "#table-critical-path-mean tbody tr",
        "trs => trs.map(tr => tr.children[1].textContent)",
    )
    at = rows.index("communication")
    assert rows[at + 1 : at + 3] == ["communication:wait", "communication:transfer"]
    assert errors == []
    page.close()
