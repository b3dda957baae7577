"""Communication on the critical path split into waiting for peers and transfer, on hand-built
traces of known answers.

One rank: a 1 ms kernel from 30 µs, then a 2,500 µs all-reduce queued behind it (1,030 to
3,530 µs) whose message is 12.5 M floats (50 MB) among 2 ranks: on a 100 GB/s link its
transfer is 50 MB x 2(2-1)/2 / 100 GB/s = 500 µs, so it waited 2,000 µs for its peer.

Two ranks (as tests/unit/test_replay_ranks.py): rank 0's kernel takes 1 ms, rank 1's 3 ms;
rank 0 arrives at the all-reduce at 1,030 µs, rank 1 at 3,030 µs; both transfer for 500 µs
and end at 3,530 µs. Every expected figure is derived by hand in the test.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from perfledger.analysis.comm_split import comm_split
from perfledger.analysis.critical_path import replay_profile, replay_rank
from perfledger.analysis.quality import replay_invariants, unmatched_collectives
from perfledger.model import schema
from perfledger.model.whatif import (
    NO_CHANGE,
    ReplayReport,
    Scale,
    StepReplay,
    WhatIf,
    path_spans_by_rank,
    path_spans_table,
)
from tests.synth import EventsBuilder

US = 1_000
KERNEL_START = 30 * US
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float"
LINK_GBPS = 100.0
ELEMENTS = 12_500_000  # float32: 50 MB
TRANSFER = 500 * US
END = KERNEL_START + 3_000 * US + TRANSFER  # 3,530 µs


def one_rank_step(*, sized: bool = True) -> pa.Table:
    """One rank: its 1 ms kernel, then the all-reduce until 3,530 µs (its message given by
    NCCL's arguments when ``sized``)."""
    b = EventsBuilder().step_mark(0, 100 * US, 1)
    b.launch(10 * US, 5 * US, KERNEL_START, 1_000 * US, "gemm")
    arrival = KERNEL_START + 1_000 * US
    args = {"In msg nelems": ELEMENTS, "Out msg nelems": ELEMENTS, "dtype": "Float"}
    b.launch(
        20 * US,
        5 * US,
        arrival,
        END - arrival,
        ALLREDUCE,
        kind=schema.COMM,
        args={**args, "Group size": 2} if sized else None,
    )
    return b.table()


def rank_step(rank: int, kernel: str, kernel_us: int, clock_ns: int = 0, runs: int = 1) -> pa.Table:
    """One of two ranks: its kernel, then the all-reduce (``runs`` times, one after the
    other, 5 ms apart), which ends when the slower rank (3 ms of kernel) has arrived plus
    the transfer. ``clock_ns``: how far its clock runs ahead."""
    b = EventsBuilder(rank=rank, pid=100 + rank).step_mark(clock_ns, 100 * US, 1)
    b.launch(clock_ns + 10 * US, 5 * US, clock_ns + KERNEL_START, kernel_us * US, kernel)
    arrival = KERNEL_START + kernel_us * US
    for run in range(runs):
        at = run * 5_000 * US
        b.launch(
            clock_ns + 20 * US + run * US,
            5 * US,
            clock_ns + arrival + at,
            END - arrival,
            ALLREDUCE,
            kind=schema.COMM,
        )
    return b.table()


def two_ranks(clock_ns: int = 0) -> pa.Table:
    return pa.concat_tables(
        [rank_step(0, "gemm", 1_000), rank_step(1, "slow_gemm", 3_000, clock_ns)]
    )


def _split(step: StepReplay) -> tuple[int, int, int]:
    bound = step.bound_by_ns
    assert step.broken_invariant() is None
    # the classes alone sum to the step; the parts are beside them, adding up to their class
    assert "communication:wait" not in bound and "communication:transfer" not in bound
    assert sum(bound.values()) == step.predicted_ns
    parts = step.bound_by_parts_ns["communication"]
    assert set(parts) == {"wait", "transfer"}
    assert parts["wait"] + parts["transfer"] == bound["communication"]
    return bound["communication"], parts["wait"], parts["transfer"]


def _one_rank(change: WhatIf = NO_CHANGE, *, sized: bool = True) -> StepReplay:
    events = one_rank_step(sized=sized)
    waits = comm_split(events, LINK_GBPS).wait_by_row(events.num_rows)
    report = replay_rank(events, change, comm_wait=waits)
    assert len(report.steps) == 1
    return report.steps[0]


def test_one_rank_the_estimated_wait_and_transfer_are_on_the_path() -> None:
    step = _one_rank()
    assert step.predicted_ns == END
    # the whole all-reduce is on the path: 2,000 µs waiting, then 500 µs of transfer
    assert _split(step) == (2_500 * US, 2_000 * US, TRANSFER)
    # and on the measured trace, as two pieces of the path
    arrival = KERNEL_START + 1_000 * US
    pieces = {(s.label, s.part, s.start_ns, s.end_ns) for s in step.path_spans}
    assert (ALLREDUCE, "wait", arrival, arrival + 2_000 * US) in pieces
    assert (ALLREDUCE, "transfer", arrival + 2_000 * US, END) in pieces
    assert {s.category for s in step.path_spans if s.label == ALLREDUCE} == {"communication"}
    assert {s.shown for s in step.path_spans if s.label == ALLREDUCE} == {
        f"{ALLREDUCE} (waiting for peers)",
        f"{ALLREDUCE} (transfer)",
    }
    assert {s.part for s in step.path_spans if s.label != ALLREDUCE} == {None}


def test_one_rank_the_wait_scales_with_the_task_the_replay_scales() -> None:
    # alone, the replay makes the whole task twice as fast: 1,000 µs wait, 250 µs transfer
    step = _one_rank(WhatIf((Scale("communication", 0.5),)))
    assert step.predicted_ns == END - 1_250 * US
    assert _split(step) == (1_250 * US, 1_000 * US, 250 * US)


def test_one_rank_without_a_message_size_everything_is_transfer() -> None:
    step = _one_rank(sized=False)
    assert _split(step) == (2_500 * US, 0, 2_500 * US)
    assert {s.part for s in step.path_spans} == {None}
    assert not any("waiting for peers" in s.shown for s in step.path_spans)


def test_the_table_of_paths_keeps_the_parts() -> None:
    step = _one_rank()
    table = path_spans_table([step])
    assert table.schema.field("part").nullable
    # a query by the collective's name finds both of its parts
    rows = [r for r in table.to_pylist() if r["label"] == ALLREDUCE]
    assert sorted(r["part"] for r in rows) == ["transfer", "wait"]
    assert path_spans_by_rank(table) == {0: tuple((0, 1, s) for s in step.path_spans)}
    # a table written before the column: its pieces read back without parts
    old = table.drop_columns(["part"])
    assert {p.part for _r, _s, p in path_spans_by_rank(old)[0]} == {None}


def test_no_communication_on_the_path_still_has_its_parts() -> None:
    b = EventsBuilder().step_mark(0, 100 * US, 1)
    b.launch(10 * US, 5 * US, KERNEL_START, 1_000 * US, "gemm")
    (step,) = replay_rank(b.table(), NO_CHANGE).steps
    assert _split(step) == (0, 0, 0)
    assert ReplayReport((step,)).mean_bound_by_parts_ns() == {
        "communication": {"wait": 0, "transfer": 0}
    }


def _by_rank(report: ReplayReport) -> dict[int, tuple[int, int, int]]:
    return {s.rank: _split(s) for s in report.steps}


@pytest.mark.parametrize("clock_ns", [0, 7_000 * US])
def test_two_ranks_the_early_rank_waits_for_the_late_arrival(clock_ns: int) -> None:
    report = replay_profile(two_ranks(clock_ns))
    assert report.unmatched_collectives == 0
    # rank 0 waits 1,030 -> 3,030 µs, rank 1 arrives last and only transfers
    assert _by_rank(report) == {
        0: (2_500 * US, 2_000 * US, TRANSFER),
        1: (TRANSFER, 0, TRANSFER),
    }


def test_two_ranks_the_early_rank_made_faster_waits_longer() -> None:
    # rank 0 arrives at 530 µs and waits until 3,030 µs
    report = replay_profile(two_ranks(), WhatIf((Scale("kernel:gemm", 0.5),)))
    assert _by_rank(report) == {
        0: (3_000 * US, 2_500 * US, TRANSFER),
        1: (TRANSFER, 0, TRANSFER),
    }


def test_two_ranks_the_late_rank_made_faster_shortens_the_wait() -> None:
    # rank 1 arrives at 1,530 µs: rank 0 waits 500 µs (from 1,030 µs)
    report = replay_profile(two_ranks(), WhatIf((Scale("kernel:slow_gemm", 0.5),)))
    assert _by_rank(report) == {
        0: (1_000 * US, 500 * US, TRANSFER),
        1: (TRANSFER, 0, TRANSFER),
    }


def test_two_ranks_faster_communication_shortens_the_transfer_not_the_wait() -> None:
    report = replay_profile(two_ranks(), WhatIf((Scale("communication", 0.5),)))
    assert _by_rank(report) == {
        0: (2_250 * US, 2_000 * US, 250 * US),
        1: (250 * US, 0, 250 * US),
    }


def test_the_mean_parts_add_up_to_the_mean_communication() -> None:
    # three steps' worth of rounding: the means of the parts still add up exactly
    steps = tuple(
        StepReplay(
            0,
            i,
            10,
            10,
            10,
            {"host": 10 - c, "communication": c},
            {"communication": {"wait": w, "transfer": c - w}},
        )
        for i, (c, w) in enumerate([(5, 1), (5, 1), (6, 1)])
    )
    report = ReplayReport(steps)
    mean = report.mean_bound_by_ns()
    assert mean == {"host": 5, "communication": 5}  # 14 / 3 and 16 / 3
    assert report.mean_bound_by_parts_ns() == {"communication": {"wait": 1, "transfer": 4}}


def test_ranks_that_ran_a_collective_a_different_number_of_times_are_flagged() -> None:
    # rank 1 ran the all-reduce twice, rank 0 once: neither run can be matched
    events = pa.concat_tables(
        [rank_step(0, "gemm", 1_000), rank_step(1, "slow_gemm", 3_000, runs=2)]
    )
    report = replay_profile(events)
    assert report.unmatched_collectives == 2
    (check,) = unmatched_collectives(report)
    assert check.id == "unmatched_collectives" and check.count == 2
    assert "could not be matched across ranks" in check.message
    assert not unmatched_collectives(replay_profile(two_ranks()))


def test_a_broken_split_is_flagged() -> None:
    good = replay_profile(two_ranks())
    assert replay_invariants(good) == ()
    step = good.steps[0]
    parts = step.bound_by_parts_ns["communication"]
    split = {"communication": {**parts, "wait": parts["wait"] + 1}}
    broken = ReplayReport((StepReplay(0, 1, 1, 1, step.predicted_ns, step.bound_by_ns, split),))
    (check,) = replay_invariants(broken)
    assert check.id == "invariants" and check.count == 1
    assert "communication: wait + transfer" in check.message
    # a part counted again as a class breaks the classes' sum
    twice = {**step.bound_by_ns, "communication:wait": parts["wait"]}
    (check,) = replay_invariants(
        ReplayReport((StepReplay(0, 1, 1, 1, step.predicted_ns, twice, step.bound_by_parts_ns),))
    )
    assert "classes sum to" in check.message
