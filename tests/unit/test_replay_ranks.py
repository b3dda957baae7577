"""Collectives across ranks in the replay of a profile, on hand-built traces of known answers.

Two ranks run one step each: a compute kernel, then an all-reduce queued behind it on the
same stream. Rank 0's kernel takes 1 ms, rank 1's 3 ms: rank 0 arrives at the all-reduce at
1,030 µs and waits for rank 1, which arrives at 3,030 µs; both then transfer for 500 µs and
end together at 3,530 µs. Every expected figure is derived by hand in the test.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from perfledger.analysis.critical_path import replay_profile
from perfledger.model import schema
from perfledger.model.whatif import Scale, WhatIf
from tests.synth import EventsBuilder

US = 1_000
KERNEL_START = 30 * US
TRANSFER = 500 * US
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float"


def rank_step(rank: int, kernel: str, kernel_us: int, clock_ns: int = 0) -> pa.Table:
    """One rank's step: its kernel, then the all-reduce, which ends when the slower rank
    (3 ms of kernel) has arrived plus the transfer. ``clock_ns``: how far its clock runs
    ahead."""
    arrival = KERNEL_START + kernel_us * US
    end = KERNEL_START + 3_000 * US + TRANSFER
    b = EventsBuilder(rank=rank, pid=100 + rank).step_mark(clock_ns, 100 * US, 1)
    b.launch(clock_ns + 10 * US, 5 * US, clock_ns + KERNEL_START, kernel_us * US, kernel)
    b.launch(
        clock_ns + 20 * US,
        5 * US,
        clock_ns + arrival,
        end - arrival,
        ALLREDUCE,
        kind=schema.COMM,
    )
    return b.table()


def two_ranks(clock_ns: int = 0) -> pa.Table:
    return pa.concat_tables(
        [rank_step(0, "gemm", 1_000), rank_step(1, "slow_gemm", 3_000, clock_ns)]
    )


MEASURED = KERNEL_START + 3_000 * US + TRANSFER


def _predicted(events: pa.Table, change: WhatIf) -> dict[int, int]:
    report = replay_profile(events, change)
    assert report.dropped_edges == 0
    assert all(s.measured_ns == s.baseline_ns == MEASURED for s in report.steps)
    return {s.rank: s.predicted_ns for s in report.steps}


@pytest.mark.parametrize("clock_ns", [0, 7_000 * US])
def test_the_late_rank_made_faster_shortens_every_rank(clock_ns: int) -> None:
    # rank 1's kernel 1.5 ms: it arrives at 1,530 µs, after rank 0 (1,030 µs); both end
    # 500 µs later (with rank 1's clock 7 ms ahead, the ends align the clocks)
    got = _predicted(two_ranks(clock_ns), WhatIf((Scale("kernel:slow_gemm", 0.5),)))
    expected = KERNEL_START + 1_500 * US + TRANSFER
    assert got == {0: expected, 1: expected}


def test_the_early_rank_made_faster_gains_nothing() -> None:
    # rank 0 arrives at 530 µs and waits longer: rank 1 still arrives at 3,030 µs
    got = _predicted(two_ranks(), WhatIf((Scale("kernel:gemm", 0.5),)))
    assert got == {0: MEASURED, 1: MEASURED}


def test_faster_compute_everywhere_ends_with_the_late_rank() -> None:
    got = _predicted(two_ranks(), WhatIf((Scale("compute", 0.5),)))
    expected = KERNEL_START + 1_500 * US + TRANSFER
    assert got == {0: expected, 1: expected}


def test_faster_communication_shortens_the_transfer_not_the_wait() -> None:
    got = _predicted(two_ranks(), WhatIf((Scale("communication", 0.5),)))
    assert got == {0: MEASURED - TRANSFER // 2, 1: MEASURED - TRANSFER // 2}


def test_one_rank_keeps_the_collective_s_observed_duration() -> None:
    """Alone, rank 0's all-reduce lasts what it lasted (its wait for rank 1 included): with
    its kernel twice as fast the step ends 500 µs earlier."""
    report = replay_profile(rank_step(0, "gemm", 1_000), WhatIf((Scale("compute", 0.5),)))
    assert [s.predicted_ns for s in report.steps] == [MEASURED - 500 * US]
