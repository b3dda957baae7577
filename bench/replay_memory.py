"""Peak memory and CPU seconds of a rank's replay work, stage by stage, two source trees
alternating: ``python bench/replay_memory.py compare --data DIR --trees OLD NEW [--runs 3]``
on the data ``bench/replay_cpu.py prepare`` stores (one rank's events, communication waits and
the advisor's changes).

``measure`` (a child process per tree, ``PYTHONPATH=<tree>/src``) runs the stages a rank task
runs, each after handing freed memory back to the system: ``prepare_rank`` (the graph, its
baseline replay and windows), ``rank_report`` (the critical paths of every step) and the
advisor's replays (``predicted_gains`` of every stored change). Per stage: the RSS it reached
above the RSS before it (a thread samples ``/proc/self/statm`` every 2 ms), what it kept once
its freed memory is handed back, and its CPU seconds. ``phase_peak_mb``: the highest RSS of
the stages above the RSS before the first (the events are memory-mapped and read once before
it, so their pages count in both). It stops when the trees' results differ (a digest of the
report, with every path span, and of every change's gains).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import json
import os
import pickle
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import alternate_trees  # noqa: E402

STAGES = ("prepare_rank", "rank_report", "advisor_replays")


class _Sampler:
    """The process's highest RSS since the last reset, sampled by a thread."""

    def __init__(self) -> None:
        self.peak = 0.0
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()

    @staticmethod
    def rss_mb() -> float:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self.rss_mb())
            time.sleep(0.002)

    def reset(self) -> float:
        now = self.rss_mb()
        self.peak = now
        return now


def _hand_back() -> None:
    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure(data: Path) -> None:
    """The stages' peak, kept memory and CPU seconds on the stored rank, and a digest."""
    import numpy as np
    import pyarrow as pa

    from perfledger.analysis.critical_path import predicted_gains, prepare_rank, rank_report

    events = pa.ipc.open_file(pa.memory_map(str(data / "events.arrow"))).read_all()
    for column in events.columns:  # the mapped pages resident before the first stage
        for chunk in column.chunks:
            for buffer in chunk.buffers():
                if buffer is not None:
                    bytes(memoryview(buffer)[::4096])
    waits_path = data / "comm_wait.npy"
    waits = np.load(waits_path) if waits_path.exists() else None
    changes = pickle.loads((data / "changes.pickle").read_bytes())
    sampler = _Sampler()
    figures: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    _hand_back()
    first = sampler.reset()
    highest = first

    def stage(name: str, work: Any) -> Any:
        nonlocal highest
        _hand_back()
        before = sampler.reset()
        cpu = time.process_time()
        result = work()
        cpu = time.process_time() - cpu
        peak = sampler.peak
        highest = max(highest, peak)
        _hand_back()
        figures[f"{name}_s"] = round(cpu, 3)
        figures[f"{name}_peak_mb"] = round(peak - before)
        figures[f"{name}_kept_mb"] = round(sampler.rss_mb() - before)
        return result

    kept["prepared"] = stage("prepare_rank", lambda: prepare_rank(events, comm_wait=waits))
    report = stage("rank_report", lambda: rank_report(kept["prepared"]))
    gains = stage(
        "advisor_replays", lambda: [predicted_gains(kept["prepared"], c) for c in changes]
    )
    digest = hashlib.sha256()
    digest.update(repr(report).encode())
    digest.update(repr(gains).encode())
    figures["phase_peak_mb"] = round(highest - first)
    figures["digest"] = digest.hexdigest()
    print(json.dumps(figures))


def compare(data: Path, trees: list[Path], runs: int) -> None:
    """Alternate ``measure`` over the trees (A B B A ...); medians and first / last."""
    results = alternate_trees(__file__, trees, runs, ["measure", "--data", str(data)])
    digests = {r["digest"] for rows in results.values() for r in rows}
    keys = [k for k in results[str(trees[0])][0] if k != "digest"]
    medians = {
        tree: {k: round(statistics.median(r[k] for r in rows), 3) for k in keys}
        for tree, rows in results.items()
    }
    first, last = medians[str(trees[0])], medians[str(trees[-1])]
    print(
        json.dumps(
            {
                "runs": runs,
                "same_results": len(digests) == 1,
                "medians": medians,
                "first_over_last": {k: round(first[k] / max(last[k], 1e-9), 2) for k in keys},
            }
        )
    )
    if len(digests) != 1:
        raise SystemExit("the trees' results differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("measure")
    one.add_argument("--data", type=Path, required=True)
    two = sub.add_parser("compare")
    two.add_argument("--data", type=Path, required=True)
    two.add_argument("--trees", type=Path, nargs=2, required=True)
    two.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.data)
    else:
        compare(args.data, args.trees, args.runs)


if __name__ == "__main__":
    main()
