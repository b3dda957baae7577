"""The communication matrix: Ascend's rank-to-rank link figures, read and reduced over ranks."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from rich.console import Console

from perfledger.analysis.cluster.collectives import communication_matrix, slow_links
from perfledger.model import schema
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile
from perfledger.sources.ascend import load_ascend
from tests.paths import data_file

LEVEL1 = "ascend/torch_npu_text/level1"
MATRIX = "ASCEND_PROFILER_OUTPUT/communication_matrix.json"


def distinct_ops(path: Path, pair: str) -> dict[str, tuple[float, float]]:
    """Each operator named in the file's samples (top1, middle, bottom...): its MB and ms on
    ``pair`` — the operators the "total" entry sums, found without reading the total."""
    document = json.loads(path.read_text())
    ops: dict[str, tuple[float, float]] = {}
    for step in document.values():
        for key, pairs in step["collective"].items():
            if "-total@" in key:
                continue
            figures = pairs[pair]
            ops[figures["Op Name"]] = (figures["Transit Size(MB)"], figures["Transit Time(ms)"])
    return ops


def test_the_matrix_holds_each_pairs_totals_of_every_operator() -> None:
    source = data_file(LEVEL1)
    traces = load_ascend(source)
    assert [t.meta["rank"] for t in traces] == [0, 1]
    for trace, rank_dir in zip(traces, ("rank0_ascend_pt", "rank1_ascend_pt"), strict=True):
        matrix = trace.communication_matrix
        assert matrix is not None
        rows = matrix.to_pylist()
        rank = trace.meta["rank"]
        # one step, one collective type, the rank towards each of the group's 8 ranks
        assert len(rows) == 8
        assert {r["src_rank"] for r in rows} == {rank}
        assert sorted(r["dst_rank"] for r in rows) == list(range(8))
        assert {r["rank"] for r in rows} == {rank}
        assert {(r["step"], r["op"]) for r in rows} == {("step50", "allreduce")}
        peer = 1 - rank
        ops = distinct_ops(source / rank_dir / MATRIX, f"{rank}-{peer}")
        assert len(ops) == 4  # hcom_allReduce__586_0_1 ... _3_1
        link = next(r for r in rows if r["dst_rank"] == peer)
        assert link["transport"] == "HCCS"
        assert link["transit_bytes"] == round(sum(mb for mb, _ in ops.values()) * 1e6)
        assert link["transit_ns"] == pytest.approx(sum(t for _, t in ops.values()) * 1e6, abs=2)
        local = next(r for r in rows if r["dst_rank"] == rank)
        assert local["transport"] == "LOCAL"


def test_exports_without_a_matrix_have_none() -> None:
    for trace in load_ascend(data_file("ascend/torch_npu_db/level2")):
        assert trace.communication_matrix is None


def matrix_rows(
    *pairs: tuple[int, int, str, int, int], group: str = "g", rank: int | None = None
) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "rank": src if rank is None else rank,
                "step": "step1",
                "op": "allreduce",
                "group": group,
                "src_rank": src,
                "dst_rank": dst,
                "transport": transport,
                "transit_bytes": nbytes,
                "transit_ns": ns,
            }
            for src, dst, transport, nbytes, ns in pairs
        ],
        schema=schema.COMM_MATRIX_SCHEMA,
    )


def test_pairs_sum_over_steps_and_a_slow_link_is_named() -> None:
    # rank 0 -> 1, 2, 3 over HCCS at 10 GB/s (10 bytes per ns), except 0 -> 3 at 5 GB/s;
    # rank 1 sends the same pair figures twice (two steps) and a fast local copy
    first = matrix_rows(
        (0, 1, "HCCS", 1000, 100),
        (0, 2, "HCCS", 2000, 200),
        (0, 3, "HCCS", 500, 100),
        (0, 0, "LOCAL", 4000, 10),
    )
    second = matrix_rows((1, 0, "HCCS", 300, 30), (1, 0, "HCCS", 700, 70))
    second = second.set_column(1, "step", pa.array(["step1", "step2"]))
    matrix = communication_matrix([first, second])
    rows = {(r["src_rank"], r["dst_rank"]): r for r in matrix.to_pylist()}
    assert rows[(1, 0)]["steps"] == 2
    assert (rows[(1, 0)]["transit_bytes"], rows[(1, 0)]["transit_ns"]) == (1000, 100)
    assert rows[(0, 3)]["gbps"] == 5.0
    # HCCS pairs at 10, 10, 5, 10 GB/s: median 10
    assert rows[(0, 3)]["vs_transport_median_pct"] == 50.0
    assert rows[(0, 1)]["vs_transport_median_pct"] == 100.0
    assert rows[(0, 0)]["vs_transport_median_pct"] == 100.0  # LOCAL is its own transport
    assert [(r["src_rank"], r["dst_rank"]) for r in slow_links(matrix)] == [(0, 3)]


def test_groups_are_never_added_together_and_members_map_to_profiled_ranks() -> None:
    # Ranks 0-3 profiled; tensor-parallel groups {0,1} ("tp0") and {2,3} ("tp1") number their
    # members 0 and 1 each: global 0->1 at 10 GB/s and global 2->3 at 2.5 GB/s are both
    # "0->1" in their group. A data-parallel group {1,3} ("dp") numbers 1 as 0 and 3 as 1.
    tp0 = matrix_rows((0, 1, "HCCS", 1000, 100), group="tp0", rank=0)
    tp1 = matrix_rows((0, 1, "HCCS", 1000, 400), group="tp1", rank=2)
    dp = matrix_rows((0, 1, "HCCS", 1000, 100), group="dp", rank=1)
    dp_back = matrix_rows((1, 0, "HCCS", 1000, 100), group="dp", rank=3)
    rows = communication_matrix([tp0, tp1, dp, dp_back]).to_pylist()
    got = {(r["group"], r["src_rank"], r["dst_rank"]): r for r in rows}
    assert len(rows) == 4
    assert got[("tp0", 0, 1)]["gbps"] == 10.0 and got[("tp1", 0, 1)]["gbps"] == 2.5
    # member -> profiled rank: from the output each rank wrote (its own place in the group)
    assert (got[("tp0", 0, 1)]["src_global_rank"], got[("tp0", 0, 1)]["dst_global_rank"]) == (
        0,
        None,  # member 1 of tp0 (global 1) wrote no tp0 rows here
    )
    assert (got[("dp", 0, 1)]["src_global_rank"], got[("dp", 0, 1)]["dst_global_rank"]) == (1, 3)
    assert (got[("dp", 1, 0)]["src_global_rank"], got[("dp", 1, 0)]["dst_global_rank"]) == (3, 1)
    # HCCS median over 10, 2.5, 10, 10 GB/s = 10: the tp1 link is the slow one
    assert [
        (r["group"], r["src_rank"])
        for r in slow_links(communication_matrix([tp0, tp1, dp, dp_back]))
    ] == [("tp1", 0)]


def read_csv(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as stream:
        return list(csv.DictReader(stream))


@pytest.mark.parametrize("workers", [0, 2])
def test_the_cluster_outputs_carry_the_matrix(workers: int, tmp_path: Path) -> None:
    built = build_profile(
        [data_file(LEVEL1)],
        tmp_path / "p",
        console=Console(file=io.StringIO()),
        execution=Execution(workers=workers),
    )
    rows = read_csv(built.path / "cluster_communication_matrix.csv")
    assert len(rows) == 16  # 2 ranks x 8 destinations
    assert {r["src_rank"] for r in rows} == {"0", "1"}
    # both members 0 and 1 of the group are profiled: ranks 0 and 1
    assert {(r["dst_rank"], r["dst_global_rank"]) for r in rows if r["dst_rank"] in "01"} == {
        ("0", "0"),
        ("1", "1"),
    }
    assert {r["dst_global_rank"] for r in rows if r["dst_rank"] not in "01"} == {""}
    summary = json.loads((built.path / "cluster_summary.json").read_text())
    pairs = summary["communication_matrix"]["pairs"]
    assert len(pairs) == 16
    hccs = [p for p in pairs if p["transport"] == "HCCS"]
    # HCCL reports 15.1-16.0 GB/s on every HCCS pair of this run: none is slow
    assert all(15.0 < p["gbps"] < 16.1 for p in hccs)
    assert summary["communication_matrix"]["slow_links"] == []


def test_a_damaged_matrix_is_reported_not_fatal(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(data_file(LEVEL1), run)
    (run / "rank1_ascend_pt" / MATRIX).write_text('{"step50": {"collective": ')
    traces = load_ascend(run)
    assert traces[0].communication_matrix is not None
    assert traces[1].communication_matrix is None
    assert traces[1].loss is not None
    assert "communication_matrix.json: not a JSON communication matrix" in traces[1].loss
    assert "\n" not in traces[1].loss
