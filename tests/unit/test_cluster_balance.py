"""The cluster pass on hand-built accounts and collectives: figures derived by hand."""

from __future__ import annotations

import pyarrow as pa
import pytest

from perfledger.analysis.cluster.balance import (
    cluster_report,
    cluster_windows,
    load_balance,
    rank_accounts,
    slow_ranks,
    step_table,
)
from perfledger.analysis.cluster.collectives import align_collectives
from perfledger.model.accounts import WindowAccount
from perfledger.model.cluster import COLLECTIVES_SCHEMA, MATRIX_SCHEMA

MS = 1_000_000


def window(
    rank: int,
    step: int,
    *,
    compute: int,
    comm: int,
    idle: int,
    memcpy: int = 0,
    start: int = 0,
) -> WindowAccount:
    """A window whose categories sum to its wall (idle attributed to host dispatch)."""
    wall = compute + comm + idle + memcpy
    return WindowAccount(
        rank=rank,
        device=rank,
        step=step,
        start_ns=start,
        end_ns=start + wall,
        compute_ns=compute,
        communication_ns=comm,
        overlapped_communication_ns=0,
        memcpy_ns=memcpy,
        memset_ns=0,
        idle_ns=idle,
        idle_host_dispatch_ns=idle,
        idle_sync_ns=0,
        idle_dataloader_ns=0,
        idle_launch_latency_ns=0,
        idle_other_ns=0,
    )


def eight_ranks(slow: int = 5) -> list[WindowAccount]:
    """8 ranks × 2 steps; every step 14 ms; the slow rank computes 12 ms, the others 10 ms."""
    return [
        window(
            r,
            s,
            compute=12 * MS if r == slow else 10 * MS,
            comm=1 * MS if r == slow else 3 * MS,
            idle=1 * MS,
            start=s * 20 * MS,
        )
        for r in range(8)
        for s in (1, 2)
    ]


def collectives(rows: list[tuple[int, str, int]]) -> pa.Table:
    """(rank, name, start_ms) rows as COLLECTIVES_SCHEMA, sorted by rank then start."""
    rows = sorted(rows, key=lambda r: (r[0], r[2]))
    return pa.table(
        {
            "rank": [r for r, _, _ in rows],
            "device": [r for r, _, _ in rows],
            "step": [1] * len(rows),
            "name": [n for _, n, _ in rows],
            "start_ns": [t * MS for _, _, t in rows],
            "dur_ns": [MS] * len(rows),
            "wait_ns": [-1] * len(rows),
            "row": list(range(len(rows))),
            "group": [""] * len(rows),
        },
        schema=COLLECTIVES_SCHEMA,
    )


def test_rank_accounts_sum_each_ranks_windows() -> None:
    accounts = rank_accounts(eight_ranks())
    assert [a.rank for a in accounts] == list(range(8))
    slow = accounts[5]
    assert (slow.windows, slow.steps) == (2, 2)
    assert (slow.wall_ns, slow.compute_ns, slow.communication_ns) == (28 * MS, 24 * MS, 2 * MS)
    assert slow.per_window("compute") == 12 * MS
    assert slow.outside_communication_ns == 26 * MS


def test_load_balance_is_max_minus_min_over_mean_of_the_per_rank_means() -> None:
    spreads = {s.category: s for s in load_balance(rank_accounts(eight_ranks()))}
    compute = spreads["compute"]
    # mean (7 * 10 + 12) / 8 = 10.25 ms; (12 - 10) / 10.25 = 19.51 %
    assert compute.mean_ns == pytest.approx(10.25 * MS)
    assert (compute.min_rank, compute.max_rank) == (0, 5)
    assert compute.spread_pct == pytest.approx(100 * 2 / 10.25)
    communication = spreads["communication"]
    # mean (7 * 3 + 1) / 8 = 2.75 ms; (3 - 1) / 2.75 = 72.73 %
    assert communication.spread_pct == pytest.approx(100 * 2 / 2.75)
    assert (communication.min_rank, communication.max_rank) == (5, 0)
    assert spreads["wall"].spread_pct == 0.0
    assert spreads["idle"].spread_pct == 0.0


def test_load_balance_needs_two_ranks() -> None:
    assert load_balance(rank_accounts([w for w in eight_ranks() if w.rank == 0])) == ()


def test_the_rank_that_computes_longer_and_waits_less_is_the_slow_rank() -> None:
    (suspect,) = slow_ranks(rank_accounts(eight_ranks()))
    assert suspect.rank == 5
    assert suspect.compute_excess_pct == pytest.approx(20.0)  # 12 ms against 10 ms
    assert suspect.outside_excess_pct == pytest.approx(100 * (13 - 11) / 11)
    assert suspect.wait_caused_ns == pytest.approx(2 * MS)  # the others sit 3 ms, it 1 ms
    assert (suspect.others_compute_ns, suspect.others_communication_ns) == (10 * MS, 3 * MS)


def test_no_slow_rank_below_the_threshold_or_when_it_waits_as_much() -> None:
    balanced = [
        window(r, 1, compute=(10_400_000 if r == 3 else 10 * MS), comm=3 * MS, idle=MS)
        for r in range(4)
    ]
    # 4 % more compute: under the 5 % default
    assert slow_ranks(rank_accounts(balanced)) == ()
    assert [s.rank for s in slow_ranks(rank_accounts(balanced), excess_pct=3.0)] == []  # waits
    # as long in communication as the others: nobody waits for it
    waiting = [
        window(r, 1, compute=(12 * MS if r == 3 else 10 * MS), comm=3 * MS, idle=MS)
        for r in range(4)
    ]
    assert slow_ranks(rank_accounts(waiting)) == ()


def test_suspects_are_ordered_by_the_wait_they_cause() -> None:
    windows = [
        window(0, 1, compute=10 * MS, comm=4 * MS, idle=0),
        window(1, 1, compute=10 * MS, comm=4 * MS, idle=0),
        window(2, 1, compute=11 * MS, comm=3 * MS, idle=0),  # causes 1 ms
        window(3, 1, compute=13 * MS, comm=1 * MS, idle=0),  # causes 3 ms
    ]
    suspects = slow_ranks(rank_accounts(windows))
    assert [s.rank for s in suspects] == [3, 2]
    # rank 3 against the median of ranks 0, 1, 2: compute 10 ms, communication 4 ms
    assert suspects[0].wait_caused_ns == 3 * MS
    assert suspects[1].compute_excess_pct == pytest.approx(10.0)


def test_collectives_are_aligned_by_name_and_occurrence() -> None:
    # two all-reduces on 3 ranks; rank 2 arrives last at both; a broadcast only ranks 0, 1 issue
    table = collectives(
        [
            (0, "allreduce", 10),
            (1, "allreduce", 11),
            (2, "allreduce", 14),
            (0, "allreduce", 30),
            (1, "allreduce", 31),
            (2, "allreduce", 32),
            (0, "broadcast", 40),
            (1, "broadcast", 41),
        ]
    )
    alignment = align_collectives(table, [0, 1, 2])
    assert alignment.aligned == 2
    assert alignment.unaligned_names == ("broadcast",)
    assert [(c.occurrence, c.arrival_spread_ns) for c in alignment.worst] == [
        (0, 4 * MS),
        (1, 2 * MS),
    ]
    assert alignment.worst[0].first_rank == 0 and alignment.worst[0].last_rank == 2
    assert alignment.max_spread_ns == 4 * MS and alignment.median_spread_ns == 3 * MS
    by_rank = {a.rank: a for a in alignment.arrivals}
    assert [by_rank[r].last_arrivals for r in (0, 1, 2)] == [0, 0, 2]
    # rank 0 waited 4 + 2 ms, rank 1 3 + 1 ms, rank 2 never
    assert [by_rank[r].waited_ns for r in (0, 1, 2)] == [6 * MS, 4 * MS, 0]
    assert all(a.library_wait_ns == -1 for a in alignment.arrivals)


def test_a_name_issued_a_different_number_of_times_is_not_aligned() -> None:
    table = collectives([(0, "allreduce", 1), (0, "allreduce", 5), (1, "allreduce", 2)])
    alignment = align_collectives(table, [0, 1])
    assert alignment.aligned == 0
    assert alignment.unaligned_names == ("allreduce",)


def test_step_table_compares_each_window_with_the_median_of_its_step() -> None:
    table = step_table(eight_ranks())
    rows = table.to_pylist()
    assert [(r["step"], r["rank"]) for r in rows[:3]] == [(1, 0), (1, 1), (1, 2)]
    slow = next(r for r in rows if r["rank"] == 5 and r["step"] == 2)
    assert slow["compute_ns"] == 12 * MS and slow["wall_ns"] == 14 * MS
    assert slow["compute_vs_median_pct"] == 20.0  # median of the step: 10 ms
    assert slow["communication_vs_median_pct"] == pytest.approx(100 * (1 - 3) / 3, abs=0.01)
    assert slow["wall_vs_median_pct"] == 0.0


def test_without_steps_the_pass_compares_whole_spans() -> None:
    spans = [window(r, -1, compute=(r + 1) * MS, comm=MS, idle=0) for r in range(2)]
    basis, compared = cluster_windows(spans)
    assert basis == "span" and len(compared) == 2
    report = cluster_report(spans, COLLECTIVES_SCHEMA.empty_table())
    assert report.basis == "span"
    assert report.ranks == (0, 1)
    # compute 1 and 2 ms: mean 1.5, spread 66.67 %
    assert report.spread("compute") is not None
    assert report.spread("compute").spread_pct == pytest.approx(100 / 1.5)  # type: ignore[union-attr]


def test_cluster_report_names_the_slow_rank_with_its_votes() -> None:
    table = collectives([(r, "allreduce", 10 + (2 if r == 5 else 0)) for r in range(8)])
    report = cluster_report(eight_ranks(), table)
    assert [s.rank for s in report.slow_ranks] == [5]
    assert report.slow_ranks[0].last_arrivals == 1
    assert report.slow_ranks[0].collectives == 1
    assert report.collectives.max_spread_ns == 2 * MS


def test_cluster_report_finds_the_slow_links_of_its_matrix_once() -> None:
    # HCCS pairs at 10, 10, 4 and 10 GB/s (median 10): 2 -> 3 runs at 40 % of it; the LOCAL
    # copy at 1 % of HCCS is its own transport, never a slow link
    def pair(src: int, dst: int, transport: str, gbps: float, pct: float) -> dict[str, object]:
        return {
            "group": "g",
            "src_rank": src,
            "dst_rank": dst,
            "transport": transport,
            "steps": 1,
            "transit_bytes": 1000,
            "transit_ns": round(1000 / gbps),
            "gbps": gbps,
            "vs_transport_median_pct": pct,
        }

    rows = [pair(0, 1, "HCCS", 10.0, 100.0), pair(1, 0, "HCCS", 10.0, 100.0)]
    rows += [pair(2, 3, "HCCS", 4.0, 40.0), pair(3, 2, "HCCS", 10.0, 100.0)]
    rows.append(pair(0, 0, "LOCAL", 0.1, 100.0))
    matrix = pa.Table.from_pylist(rows, schema=MATRIX_SCHEMA)
    report = cluster_report(eight_ranks(), COLLECTIVES_SCHEMA.empty_table(), matrix=matrix)
    assert report.slow_links.schema == MATRIX_SCHEMA
    slow = report.slow_links.to_pylist()
    assert [(r["src_rank"], r["dst_rank"], r["vs_transport_median_pct"]) for r in slow] == [
        (2, 3, 40.0)
    ]
    # without a matrix: no slow link
    assert cluster_report(eight_ranks(), COLLECTIVES_SCHEMA.empty_table()).slow_links.num_rows == 0
