"""Synthetic multi-rank Kineto traces for the cluster tests: one rank computes longer.

Every rank runs ``steps`` steps of data-parallel training, 20 ms apart (times in µs):

    host   ProfilerStep#k                      [B, B + 14000)
           cudaLaunchKernel (gemm)             [B + 100, B + 110)
           cudaLaunchKernel (all-reduce)       [B + 150, B + 160)
    device gemm, stream 7                      [B + 200, B + 200 + C)
           ncclKernel_AllReduce, stream 20     [B + 200 + C, B + 13200)

with B = 1000 + 20000 k. The all-reduce of every rank ends at the same instant, B + 13200: the
collective finishes when the last rank has arrived, 1 ms after the slowest rank's gemm ends.
A normal rank computes C = 10000 µs, the slow rank ``slow_factor`` times as long (12000 µs
for 1.2). Per step window of 14 ms a normal rank has compute 10 ms, exposed communication
3 ms, idle 1 ms; the slow rank compute 12 ms, communication 1 ms, idle 1 ms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.kineto_gen import complete, device_task, runtime, write_kineto

STEP_US = 20_000
STEP_WALL_US = 14_000
COMPUTE_US = 10_000
COLLECTIVE_END_US = 13_200  # from B
ALL_REDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def rank_events(
    rank: int, compute_us: int, steps: int, first_step: int = 1
) -> list[dict[str, Any]]:
    """The events of one rank (see the module doc)."""
    events: list[dict[str, Any]] = []
    correlation = 1
    for k in range(steps):
        base = 1000 + STEP_US * k
        events.append(
            complete("user_annotation", f"ProfilerStep#{first_step + k}", base, STEP_WALL_US)
        )
        events.append(runtime("cudaLaunchKernel", base + 100, 10, correlation=correlation))
        events.append(
            device_task(
                "kernel", "gemm", base + 200, compute_us, correlation=correlation, device=rank
            )
        )
        correlation += 1
        events.append(runtime("cudaLaunchKernel", base + 150, 10, correlation=correlation))
        start = base + 200 + compute_us
        events.append(
            device_task(
                "kernel",
                ALL_REDUCE,
                start,
                base + COLLECTIVE_END_US - start,
                correlation=correlation,
                device=rank,
                stream=20,
            )
        )
        correlation += 1
    return events


def write_ranks(
    directory: Path,
    ranks: int,
    *,
    slow_rank: int | None = None,
    slow_factor: float = 1.2,
    steps: int = 3,
    name_rank: bool = True,
    distributed_info: bool = True,
    rank_names: list[int] | None = None,
) -> list[Path]:
    """Write ``ranks`` traces ``rank-<r>.json`` into ``directory``; the paths in rank order.

    ``rank_names`` renames the files (rank-<name>.json) while the traces keep their own rank
    (or none, without ``distributed_info``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        compute = round(COMPUTE_US * slow_factor) if rank == slow_rank else COMPUTE_US
        label = rank_names[rank] if rank_names is not None else rank
        name = f"rank-{label}.json" if name_rank else f"trace-{chr(ord('a') + rank)}.json"
        top: dict[str, Any] = {"schemaVersion": 1}
        if distributed_info:
            top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": ranks}
        paths.append(write_kineto(directory / name, rank_events(rank, compute, steps), **top))
    return paths
