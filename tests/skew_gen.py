"""Synthetic ranks on skewed clocks, one of them late because of its data loader.

Four ranks run ``steps`` data-parallel steps, 20 ms apart. On one common (true) clock, times in
µs from B = 1000 + 20000 k:

    host   ProfilerStep#k                                   [B, B + 14000)
           enumerate(DataLoader)#... (late rank only)       [B + 50, B + 50 + LATE)
           cudaLaunchKernel (gemm)                          [B + 100 + d, + 10)
           cudaLaunchKernel (all-reduce)                    [B + 150 + d, + 10)
    device gemm, stream 7                                   [B + 200 + d, B + 10200 + d)
           ncclKernel_AllReduce, stream 20                  [B + 10200 + d, B + 13200 + j_r)

with d = LATE = 2000 µs on the late rank, 0 on the others, and j_r a few µs of jitter in when
each rank sees the collective end. The last participant (the late rank) arrives at B + 12200:
every other rank waits 2000 µs, then all transfer until their end (about 1000 µs).

Each rank writes its times on its own clock, ``CLOCK_OFFSETS_US[r]`` ahead of the true one:
offsets of several ms, more than the lateness, so raw timestamps make the rank with the
largest offset look last. The late rank's clock runs behind enough that its first step starts
before 0 (a relative clock): instants may be negative.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.kineto_gen import complete, device_task, runtime, write_kineto

STEP_US = 20_000
STEP_WALL_US = 14_000
COMPUTE_US = 10_000
COLLECTIVE_END_US = 13_200
LATE_US = 2_000
LATE_RANK = 2
CLOCK_OFFSETS_US = (0, 5_000, -3_000, 1_500)
END_JITTER_US = (0, 3, -2, 1)
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def rank_events(rank: int, steps: int) -> list[dict[str, Any]]:
    """The events of one rank, on its own clock (see the module doc)."""
    offset = CLOCK_OFFSETS_US[rank]
    late = LATE_US if rank == LATE_RANK else 0
    events: list[dict[str, Any]] = []
    for k in range(steps):
        base = 1000 + STEP_US * k + offset
        correlation = 2 * k + 1
        events.append(complete("user_annotation", f"ProfilerStep#{k + 1}", base, STEP_WALL_US))
        if late:
            events.append(complete("user_annotation", LOADER, base + 50, late))
        events.append(runtime("cudaLaunchKernel", base + 100 + late, 10, correlation=correlation))
        events.append(
            device_task(
                "kernel", "gemm", base + 200 + late, COMPUTE_US, correlation=correlation, device=0
            )
        )
        events.append(
            runtime("cudaLaunchKernel", base + 150 + late, 10, correlation=correlation + 1)
        )
        start = base + 200 + late + COMPUTE_US
        end = base + COLLECTIVE_END_US + END_JITTER_US[rank]
        events.append(
            device_task(
                "kernel",
                ALL_REDUCE,
                start,
                end - start,
                correlation=correlation + 1,
                device=0,
                stream=20,
            )
        )
    return events


def expected_wait_us(rank: int) -> float:
    """What rank ``rank`` waits per step: from its arrival to the late rank's, on one clock."""
    return 0.0 if rank == LATE_RANK else float(LATE_US)


def expected_transfer_us(rank: int) -> float:
    """What rank ``rank`` transfers per step: from the last arrival to its end."""
    last_arrival = 200 + LATE_US + COMPUTE_US
    return float(COLLECTIVE_END_US + END_JITTER_US[rank] - last_arrival)


def write_skewed_ranks(directory: Path, steps: int = 5) -> list[Path]:
    """Write the four ranks as rank-<r>.json into ``directory``; the paths in rank order."""
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_kineto(
            directory / f"rank-{rank}.json",
            rank_events(rank, steps),
            schemaVersion=1,
            distributedInfo={"backend": "nccl", "rank": rank, "world_size": 4},
        )
        for rank in range(len(CLOCK_OFFSETS_US))
    ]
