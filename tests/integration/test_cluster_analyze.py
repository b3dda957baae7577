"""Many ranks: rank tasks on a process pool and on Dask, the cluster pass and its outputs."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from perfledger.analysis.advisor import diagnose
from perfledger.analysis.profile import analyze_traces
from perfledger.model.profile import ProfileAnalysis
from perfledger.profiledir import artefacts
from perfledger.render.csvs import csv_bytes
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from perfledger.sources import load_traces
from tests import ascend_gen
from tests.cli import perfledger
from tests.cluster_gen import ALL_REDUCE, write_ranks
from tests.paths import data_file

MS = 1_000_000


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def eight_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 synthetic ranks (tests/cluster_gen.py); rank 5 computes 20 % longer."""
    directory = tmp_path_factory.mktemp("ranks") / "run"
    write_ranks(directory, 8, slow_rank=5, slow_factor=1.2, steps=3)
    return directory


@pytest.fixture(scope="module")
def pool_profile(eight_ranks: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prof") / "pool"
    result = perfledger("analyze", eight_ranks, "-o", out, "--workers", "2")
    assert result.returncode == 0, result.stderr
    return out


def test_the_slow_rank_is_named_with_its_evidence(pool_profile: Path) -> None:
    cluster = read_json(pool_profile / "cluster_summary.json")
    assert cluster["ranks"] == list(range(8))
    assert cluster["compared"] == "steps"
    assert cluster["slow_ranks"] == [5]
    (evidence,) = cluster["slow_rank_evidence"]
    # per 14 ms step: rank 5 computes 12 ms and sits 1 ms in the all-reduce, the others
    # compute 10 ms and sit 3 ms: they wait 2 ms for it, and it arrives last every time
    assert evidence["compute_ms"] == 12.0 and evidence["others_compute_ms"] == 10.0
    assert evidence["compute_excess_pct"] == 20.0
    assert evidence["communication_ms"] == 1.0 and evidence["others_communication_ms"] == 3.0
    assert evidence["wait_caused_ms"] == 2.0
    assert (evidence["last_arrivals"], evidence["aligned_collectives"]) == (3, 3)
    per_rank = {r["rank"]: r for r in cluster["per_rank"]}
    assert per_rank[5]["step_time_ms"] == 14.0 and per_rank[0]["step_time_ms"] == 14.0
    assert (per_rank[0]["compute_ms"], per_rank[0]["communication_ms"]) == (10.0, 3.0)
    assert per_rank[0]["idle_ms"] == 1.0
    collectives = cluster["collectives"]
    assert collectives["aligned"] == 3 and collectives["unaligned_names"] == []
    assert collectives["arrival_spread_max_ms"] == 2.0
    assert {c["last_rank"] for c in collectives["most_skewed"]} == {5}
    assert {c["name"] for c in collectives["most_skewed"]} == {ALL_REDUCE}


def test_load_imbalance_is_measured_per_category(pool_profile: Path) -> None:
    cluster = read_json(pool_profile / "cluster_summary.json")
    spreads = {s["category"]: s for s in cluster["load_balance"]}
    # compute: (12 - 10) / ((7 * 10 + 12) / 8) = 19.51 %; communication (3 - 1) / 2.75
    assert spreads["compute"]["spread_pct"] == 19.51
    assert spreads["compute"]["max_rank"] == 5 and spreads["compute"]["mean_ms"] == 10.25
    assert spreads["communication"]["spread_pct"] == 72.73
    assert spreads["wall"]["spread_pct"] == 0.0


def test_cluster_findings_are_in_both_summaries(pool_profile: Path) -> None:
    cluster = read_json(pool_profile / "cluster_summary.json")
    summary = read_json(pool_profile / "summary.json")
    by_id = {f["id"]: f for f in cluster["findings"]}
    assert set(by_id) == {"slow_rank", "load_imbalance"}
    slow = by_id["slow_rank"]
    assert slow["title"].startswith("Slow rank 5:")
    assert slow["severity_ms"] == 2.0  # the wait it causes per step
    assert slow["severity_pct"] == pytest.approx(100 * 2 / 14, abs=0.01)
    imbalance = by_id["load_imbalance"]
    assert imbalance["evidence"]["imbalanced"] == ["compute", "communication"]
    assert imbalance["severity_ms"] == 1.75  # 12 ms - 10.25 ms mean
    in_summary = {f["id"]: f for f in summary["findings"]}
    assert in_summary["slow_rank"] == slow
    assert in_summary["load_imbalance"] == imbalance


def test_cluster_step_trace_has_a_row_per_step_and_rank(pool_profile: Path) -> None:
    with (pool_profile / "cluster_step_trace.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 * 3
    assert [(r["step"], r["rank"]) for r in rows[:2]] == [("1", "0"), ("1", "1")]
    slow = [r for r in rows if r["rank"] == "5"]
    assert {r["compute_ns"] for r in slow} == {str(12 * MS)}
    assert {r["compute_vs_median_pct"] for r in slow} == {"20"}
    for row in rows:
        parts = sum(
            int(row[c])
            for c in ("compute_ns", "communication_ns", "memcpy_ns", "memset_ns", "idle_ns")
        )
        assert parts == int(row["wall_ns"]) == 14 * MS


def test_events_are_written_per_rank_and_queried_as_one_table(pool_profile: Path) -> None:
    files = sorted(p.name for p in (pool_profile / "tables" / "events").iterdir())
    assert files == sorted(f"rank={r}.parquet" for r in range(8))
    assert not (pool_profile / ".ranks").exists()
    result = perfledger(
        "query",
        pool_profile,
        "SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    # each rank: 3 steps x (annotation, 2 launches, gemm, all-reduce)
    assert json.loads(result.stdout) == [{"rank": r, "n": 15} for r in range(8)]


def test_meta_says_how_the_ranks_ran(pool_profile: Path) -> None:
    meta = read_json(pool_profile / "meta.json")
    tasks = meta["tasks"]
    assert tasks["executor"] == "process pool of 2 workers"
    assert [r["rank"] for r in tasks["ranks"]] == list(range(8))
    assert len({r["worker"] for r in tasks["ranks"]}) <= 2
    assert all(r["worker_peak_rss_mb"] > 0 for r in tasks["ranks"])
    # each task copied its rank's trace for raw/: every source there, unchanged
    assert all(r["copy_s"] >= 0 for r in tasks["ranks"])


def test_raw_holds_every_rank_trace_unchanged(eight_ranks: Path, pool_profile: Path) -> None:
    sources = sorted(eight_ranks.iterdir())
    copies = sorted((pool_profile / "raw").iterdir())
    assert [c.name for c in copies] == [s.name for s in sources]
    for source, copy in zip(sources, copies, strict=True):
        assert copy.read_bytes() == source.read_bytes()
        assert copy.stat().st_nlink == 1
    assert not (pool_profile / ".ranks").exists()


def _report_data(html: bytes) -> bytes:
    """The report's embedded data without its copy of meta.json."""
    opening = b'<script type="application/json" id="perfledger-data">'
    start = html.index(opening) + len(opening)
    document = json.loads(html[start : html.index(b"</script>", start)])
    document.pop("meta")
    return json.dumps(document, sort_keys=True).encode()


def _outputs(profile: Path) -> dict[str, bytes]:
    """Every output file but meta.json (it records where and how the run happened)."""
    found = {}
    for path in sorted(profile.rglob("*")):
        if not path.is_file() or path.name == "meta.json" or "raw" in path.parts:
            continue
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        if path.name == "report.html":
            data = _report_data(data)
        if path.suffix == ".parquet":
            continue  # same rows, but Parquet embeds writer details; checked by query
        found[str(path.relative_to(profile))] = data
    return found


def test_dask_local_cluster_gives_the_pool_results(
    eight_ranks: Path, pool_profile: Path, tmp_path: Path
) -> None:
    out = tmp_path / "pool"  # same name as the pool's profile: the report shows it
    result = perfledger("analyze", eight_ranks, "-o", out, "--dask", "local", "--workers", "2")
    assert result.returncode == 0, result.stderr
    meta = read_json(out / "meta.json")
    assert meta["tasks"]["executor"] == "Dask LocalCluster of 2 workers"
    dask_files = _outputs(out)
    pool_files = _outputs(pool_profile)
    assert sorted(dask_files) == sorted(pool_files)
    assert "cluster_summary.json" in dask_files
    for name, data in pool_files.items():
        assert dask_files[name] == data, name


def _tables(analysis: ProfileAnalysis) -> dict[str, bytes]:
    cluster = analysis.cluster
    assert cluster is not None
    return {
        "op_summary": csv_bytes(analysis.op_summary),
        "op_statistic": csv_bytes(analysis.op_statistic),
        "kernel_details": csv_bytes(analysis.kernel_details),
        "api_statistic": csv_bytes(analysis.api_statistic),
        "transfers": csv_bytes(analysis.transfers),
        "communication": csv_bytes(analysis.communication),
        "step_trace": csv_bytes(artefacts.step_trace(analysis)),
        "gaps": csv_bytes(analysis.gaps),
        "worst_gaps": csv_bytes(analysis.gap_report.worst),
        "steps": csv_bytes(analysis.steps),
        "counters": csv_bytes(analysis.counters.select(["rank", "track", "name", "ts_ns"])),
        "cluster_steps": csv_bytes(cluster.steps),
        "cluster_links": csv_bytes(cluster.links),
        "cluster_matrix": csv_bytes(cluster.matrix),
        "cluster": repr((cluster.per_rank, cluster.balance, cluster.slow_ranks)).encode(),
        "collectives": repr(cluster.collectives).encode(),
        "gap_buckets": repr(analysis.gap_report.buckets).encode(),
        "events_rows": str(analysis.events.num_rows).encode(),
        "findings": json.dumps([f.to_dict() for f in diagnose(analysis).findings]).encode(),
    }


@pytest.mark.parametrize(
    "trace",
    [
        "kineto/sampled_2ranks",
        "ascend/torch_npu_text/level1",
        "ascend/torch_npu_db/level2",
    ],
)
def test_rank_tasks_give_the_tables_of_one_process(trace: str, tmp_path: Path) -> None:
    source = data_file(trace)
    whole = analyze_traces(load_traces([source]))
    built = build_profile(
        [source],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=2),
    )
    assert [r.rank for r in built.analysis.ranks] == [0, 1]
    # each rank was diagnosed in its task; here every rank is diagnosed in this process
    assert built.analysis.rank_advice is not None and whole.rank_advice is None
    expected = _tables(whole)
    got = _tables(built.analysis)
    for name, data in expected.items():
        assert got[name] == data, name


def test_ascend_collectives_carry_hccls_own_wait_and_link_figures(tmp_path: Path) -> None:
    source = data_file("ascend/torch_npu_text/level1")
    out = tmp_path / "ascend"
    result = perfledger("analyze", source, "-o", out, "--workers", "2")
    assert result.returncode == 0, result.stderr
    cluster = read_json(out / "cluster_summary.json")
    # HCCL's figures read here straight from each rank's communication.json
    expected_wait: dict[int, float] = {}
    expected_links: dict[tuple[int, str], list[float]] = {}
    for rank in (0, 1):
        path = source / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json"
        document = json.loads(path.read_text())
        wait = 0.0
        for step in document.values():
            for name, op in step["collective"].items():
                if name == "Total Op Info":
                    continue
                wait += op["Communication Time Info"]["Wait Time(ms)"]
                for link, figures in op["Communication Bandwidth Info"].items():
                    if figures["Transit Size(MB)"]:
                        entry = expected_links.setdefault((rank, link), [0.0, 0.0])
                        entry[0] += figures["Transit Size(MB)"] * 1e6
                        entry[1] += figures["Transit Time(ms)"]
        expected_wait[rank] = wait
    by_rank = {r["rank"]: r for r in cluster["collectives"]["by_rank"]}
    for rank, wait in expected_wait.items():
        assert by_rank[rank]["library_wait_ms"] == pytest.approx(wait, abs=0.01)
    links = {(row["rank"], row["link"]): row for row in cluster["links"]}
    assert set(links) == set(expected_links)
    for key, (size, time_ms) in expected_links.items():
        assert links[key]["transit_bytes"] == pytest.approx(size, abs=4)
        assert links[key]["gbps"] == pytest.approx(size / (time_ms * 1e6), rel=1e-3)
    # rank 0 waited ~5.9 ms in HCCL for rank 1, which worked longer outside communication
    assert cluster["slow_ranks"] == [1]
    assert expected_wait[0] > 20 * expected_wait[1]


def test_ranks_come_from_file_names_when_traces_do_not_say(tmp_path: Path) -> None:
    directory = tmp_path / "unnamed"
    write_ranks(directory, 2, slow_rank=1, distributed_info=False, rank_names=[3, 7])
    out = tmp_path / "p"
    result = perfledger("analyze", directory, "-o", out, "--workers", "2")
    assert result.returncode == 0, result.stderr
    cluster = read_json(out / "cluster_summary.json")
    assert cluster["ranks"] == [3, 7]
    assert cluster["slow_ranks"] == [7]
    files = sorted(p.name for p in (out / "tables" / "events").iterdir())
    assert files == ["rank=3.parquet", "rank=7.parquet"]
    with (out / "step_trace.csv").open() as f:
        assert {row["rank"] for row in csv.DictReader(f)} == {"3", "7"}


def test_ranks_follow_file_order_when_nothing_names_them(tmp_path: Path) -> None:
    directory = tmp_path / "anonymous"
    write_ranks(directory, 3, slow_rank=2, distributed_info=False, name_rank=False)
    out = tmp_path / "p"
    result = perfledger("analyze", directory, "-o", out, "--workers", "0")
    assert result.returncode == 0, result.stderr
    cluster = read_json(out / "cluster_summary.json")
    assert cluster["ranks"] == [0, 1, 2]
    assert cluster["slow_ranks"] == [2]  # trace-c.json, the third file
    assert read_json(out / "meta.json")["tasks"]["executor"] == "this process"


def test_a_bad_rank_is_left_out_and_said_the_others_analysed(tmp_path: Path) -> None:
    directory = tmp_path / "broken"
    write_ranks(directory, 3)
    (directory / "rank-1.json").write_text("this is not json")
    out = tmp_path / "p"
    result = perfledger("analyze", directory, "-o", out, "--workers", "2")
    assert result.returncode == 0, result.stderr
    summary = read_json(out / "summary.json")
    assert summary["ranks"] == [0, 2]
    (skipped,) = [c for c in summary["quality"]["checks"] if c["id"] == "skipped_ranks"]
    assert "rank-1.json" in skipped["message"] and skipped["count"] == 1
    assert summary["quality"]["confidence"] == "medium"
    assert "rank-1.json" in summary["loss"]
    assert "data quality medium" in result.stdout.splitlines()[0]
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_trace_names_on_what_is_not_a_file_are_ranks_left_out_not_waited_on(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "odd"
    write_ranks(directory, 2)
    (directory / "rank-5.json").symlink_to(tmp_path / "gone.json")  # a broken link
    os.mkfifo(directory / "rank-6.json")  # nothing ever writes to it: opening it would wait
    (directory / "rank-7.json").symlink_to("/dev/zero")  # never ends
    out = tmp_path / "p"
    result = perfledger("analyze", directory, "-o", out, "--workers", "0", timeout=120)
    assert result.returncode == 0, result.stderr
    summary = read_json(out / "summary.json")
    assert summary["ranks"] == [0, 1]
    (skipped,) = [c for c in summary["quality"]["checks"] if c["id"] == "skipped_ranks"]
    assert skipped["count"] == 3
    message = skipped["message"]
    assert f"rank-5.json: a broken link (to {tmp_path / 'gone.json'})" in message
    assert "rank-6.json: a named pipe, not a trace file" in message
    assert "rank-7.json: a character device, not a trace file" in message
    assert "Traceback" not in result.stderr
    # named alone, each is a one-line error (exit code 2), not a wait nor an empty profile
    for name, said in [
        ("rank-5.json", "a broken link"),
        ("rank-6.json", "a named pipe"),
        ("rank-7.json", "a character device"),
    ]:
        alone = perfledger("analyze", directory / name, "-o", tmp_path / name, timeout=120)
        assert alone.returncode == 2, alone.stderr
        assert alone.stderr.strip().splitlines() == [
            f"perfledger: error: {directory / name}: {said}"
            + (f" (to {tmp_path / 'gone.json'})" if name == "rank-5.json" else ", not a trace file")
        ]
        assert not (tmp_path / name).exists()


@pytest.mark.parametrize("kind", ["torch_npu_text", "torch_npu_db"])
@pytest.mark.parametrize("damage", ["empty files", "no profiler output"])
def test_an_ascend_rank_with_nothing_readable_is_left_out(
    tmp_path: Path, kind: str, damage: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(data_file(f"ascend/{kind}/level1"), run)
    rank1 = run / "rank1_ascend_pt"
    if damage == "empty files":
        for path in rank1.rglob("*"):
            if path.is_file():
                path.write_bytes(b"")
    else:
        shutil.rmtree(rank1)
        rank1.mkdir()  # named as a rank's output, holding none
    out = tmp_path / "p"
    result = perfledger("analyze", run, "-o", out, "--workers", "0")
    assert result.returncode == 0, result.stderr
    summary = read_json(out / "summary.json")
    assert summary["ranks"] == [0]
    (skipped,) = [c for c in summary["quality"]["checks"] if c["id"] == "skipped_ranks"]
    assert "rank1_ascend_pt" in skipped["message"] and skipped["count"] == 1
    assert "Traceback" not in result.stderr


def test_no_readable_rank_is_one_line_naming_the_first(tmp_path: Path) -> None:
    directory = tmp_path / "broken"
    write_ranks(directory, 2)
    for rank in (0, 1):
        (directory / f"rank-{rank}.json").write_text("this is not json")
    out = tmp_path / "p"
    result = perfledger("analyze", directory, "-o", out, "--workers", "0")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank-0.json" in lines[0]
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".p.partial-*"))


def test_a_single_rank_profile_has_no_cluster_outputs(tmp_path: Path) -> None:
    directory = tmp_path / "one"
    write_ranks(directory, 1)
    out = tmp_path / "p"
    result = perfledger("analyze", directory / "rank-0.json", "-o", out)
    assert result.returncode == 0, result.stderr
    assert not (out / "cluster_summary.json").exists()
    assert (out / "tables" / "events.parquet").is_file()
    summary = read_json(out / "summary.json")
    assert not {f["id"] for f in summary["findings"]} & {"slow_rank", "load_imbalance"}


def test_an_ascend_rank_copied_over_another_is_reported(tmp_path: Path) -> None:
    first = ascend_gen.write_text(tmp_path / "a")
    shutil.copytree(first, tmp_path / "runs" / "rank0_ascend_pt")
    shutil.copytree(first, tmp_path / "runs" / "rank1_ascend_pt")
    info = tmp_path / "runs" / "rank1_ascend_pt" / "profiler_info_0.json"
    document = json.loads(info.read_text())
    document["rank_id"] = 1
    info.write_text(json.dumps(document))
    built = build_profile(
        [tmp_path / "runs"],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=0),
    )
    ranks = built.analysis.ranks
    assert [r.rank for r in ranks] == [0, 1]
    assert [r.trace.meta["world_size"] for r in ranks] == [2, 2]
    assert ranks[0].trace.loss is None
    assert ranks[1].trace.loss is not None and "same content as rank 0" in ranks[1].trace.loss
    assert "same content as rank 0" in read_json(tmp_path / "p" / "summary.json")["loss"]
