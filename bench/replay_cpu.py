"""CPU seconds of a rank's replay work, two source trees alternating:
``python bench/replay_cpu.py prepare --trace TRACE --data DIR`` then
``python bench/replay_cpu.py compare --data DIR --trees OLD NEW [--runs 3]``.

``prepare`` imports and analyses one rank's Kineto trace as a rank task does and stores what
the replay reads (the events as Arrow IPC, the communication waits per row) with the changes
the advisor replays on it (every distinct change its rules and their combination hand to
``predicted_gains``, in order).

``compare`` runs ``measure`` in a child process per tree (``PYTHONPATH=<tree>/src``),
alternating OLD, NEW, NEW, OLD, ... ``--runs`` times each: the CPU seconds (``process_time``,
all the process's threads) and the wall seconds of ``prepare_rank`` (the graph, its baseline
and the windows), ``rank_report`` (the critical paths of every step) and the advisor's
replays (``predicted_gains`` of every stored change); medians per tree and OLD / NEW. It
stops when the two trees' results differ (a digest of the report, with every path span, and
of every change's gains).

``compare-analyze --trace TRACE --data OUT --trees OLD NEW [--runs 2]``: the whole
``perfledger analyze`` of the trace (into OUT) per tree, alternating the same way: CPU seconds,
peak RSS and wall time of the analyze process, meta.json's ``replay_s`` and ``advisor_s``, and
whether summary.json's critical path and findings are the same.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import alternate_trees, perfledger_argv  # noqa: E402

PARTS = ("prepare_s", "report_s", "advisor_s")
WALL_PARTS = ("prepare_wall_s", "report_wall_s", "advisor_wall_s")
FIGURES = (*PARTS, *WALL_PARTS, "peak_rss_mb")


def prepare(trace: Path, data: Path) -> None:
    """Store one rank's analysed events, communication waits and the advisor's changes."""
    import numpy as np
    import pyarrow as pa

    from perfledger.analysis import critical_path
    from perfledger.analysis.advisor import AdvisorConfig, diagnose_rank
    from perfledger.analysis.advisor import context as advisor_context
    from perfledger.analysis.critical_path import prepare_rank, rank_report
    from perfledger.analysis.profile import analyze_rank, profile_of_rank
    from perfledger.sources.kineto import load_kineto

    rank = analyze_rank(load_kineto(trace))
    profile = profile_of_rank(rank)
    events = profile.events
    waits = rank.comm.wait_by_row(events.num_rows) if rank.comm is not None else None
    data.mkdir(parents=True, exist_ok=True)
    with (
        pa.OSFile(str(data / "events.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, events.schema) as writer,
    ):
        writer.write_table(events)
    if waits is not None:
        np.save(data / "comm_wait.npy", waits)
    prepared = prepare_rank(events, comm_wait=waits)
    report = rank_report(prepared)
    from dataclasses import replace

    rank = replace(rank, replay=report)
    profile = replace(profile, ranks=(rank,), replay=report)
    changes: list[Any] = []
    original = critical_path.predicted_gains

    def recorded(prepared_rank: Any, change: Any) -> Any:
        changes.append(change)
        return original(prepared_rank, change)

    setattr(advisor_context, "predicted_gains", recorded)  # noqa: B010 (the module's name)
    try:
        diagnose_rank(profile, AdvisorConfig(), replays=(prepared,))
    finally:
        setattr(advisor_context, "predicted_gains", original)  # noqa: B010
    (data / "changes.pickle").write_bytes(pickle.dumps(changes))
    print(
        json.dumps(
            {
                "events": events.num_rows,
                "nodes": prepared.graph.size,
                "steps": len(report.steps),
                "changes": len(changes),
            }
        )
    )


def measure(data: Path) -> None:
    """The CPU seconds of the three parts on the stored rank, and a digest of the results."""
    import numpy as np
    import pyarrow as pa

    from perfledger.analysis.critical_path import predicted_gains, prepare_rank, rank_report

    events = pa.ipc.open_file(pa.memory_map(str(data / "events.arrow"))).read_all()
    waits_path = data / "comm_wait.npy"
    waits = np.load(waits_path) if waits_path.exists() else None
    changes = pickle.loads((data / "changes.pickle").read_bytes())
    digest = hashlib.sha256()
    t0, w0 = time.process_time(), time.perf_counter()
    prepared = prepare_rank(events, comm_wait=waits)
    t1, w1 = time.process_time(), time.perf_counter()
    report = rank_report(prepared)
    t2, w2 = time.process_time(), time.perf_counter()
    gains = [predicted_gains(prepared, change) for change in changes]
    t3, w3 = time.process_time(), time.perf_counter()
    digest.update(repr(report).encode())
    digest.update(repr(gains).encode())
    print(
        json.dumps(
            {
                "prepare_s": round(t1 - t0, 3),
                "report_s": round(t2 - t1, 3),
                "advisor_s": round(t3 - t2, 3),
                "prepare_wall_s": round(w1 - w0, 3),
                "report_wall_s": round(w2 - w1, 3),
                "advisor_wall_s": round(w3 - w2, 3),
                "changes": len(changes),
                # the process's peak RSS (the events are memory-mapped: mostly page cache)
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "digest": digest.hexdigest(),
            }
        )
    )


def compare(data: Path, trees: list[Path], runs: int) -> None:
    """Alternate ``measure`` over the trees; medians and the ratio of the first to the last."""
    results = alternate_trees(__file__, trees, runs, ["measure", "--data", str(data)])
    digests = {r["digest"] for rows in results.values() for r in rows}
    medians = {
        tree: {part: round(statistics.median(r[part] for r in rows), 3) for part in FIGURES}
        for tree, rows in results.items()
    }
    for figures in medians.values():
        figures["total_s"] = round(sum(figures[p] for p in PARTS), 3)
    first, last = medians[str(trees[0])], medians[str(trees[-1])]
    print(
        json.dumps(
            {
                "runs": runs,
                "same_results": len(digests) == 1,
                "medians": medians,
                "first_over_last": {
                    part: round(first[part] / max(last[part], 1e-9), 2) for part in first
                },
                "all": results,
            }
        )
    )
    if len(digests) != 1:
        raise SystemExit("the trees' results differ")


def measure_analyze(trace: Path, out: Path) -> None:
    """``perfledger analyze`` of ``trace`` in a child process: its CPU seconds, peak RSS and
    wall time, meta.json's replay and advisor phases, and a digest of summary.json's critical
    path and findings."""
    started = time.perf_counter()
    subprocess.run([*perfledger_argv(trace, out), "--no-ledger"], check=True, capture_output=True)
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    meta = json.loads((out / "meta.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    kept = {k: summary.get(k) for k in ("critical_path", "findings", "whatif_combined")}
    print(
        json.dumps(
            {
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                "wall_s": round(wall, 2),
                "peak_rss_mb": round(usage.ru_maxrss / 1024),
                "replay_s": meta["timings"].get("replay_s"),
                "advisor_s": meta["timings"].get("advisor_s"),
                "digest": hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest(),
            }
        )
    )


def compare_analyze(trace: Path, trees: list[Path], runs: int, out: Path) -> None:
    """``measure_analyze`` per tree, alternating A B B A ...; medians and A / B."""
    results = alternate_trees(
        __file__, trees, runs, ["measure-analyze", "--trace", str(trace), "--data", str(out)]
    )
    figures = ("cpu_s", "wall_s", "peak_rss_mb", "replay_s", "advisor_s")
    medians = {
        tree: {f: round(statistics.median(r[f] for r in rows), 3) for f in figures}
        for tree, rows in results.items()
    }
    first, last = medians[str(trees[0])], medians[str(trees[-1])]
    print(
        json.dumps(
            {
                "runs": runs,
                "same_results": len({r["digest"] for rows in results.values() for r in rows}) == 1,
                "medians": medians,
                "first_over_last": {f: round(first[f] / max(last[f], 1e-9), 2) for f in figures},
                "all": results,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=("prepare", "measure", "compare", "measure-analyze", "compare-analyze")
    )
    parser.add_argument("--trace", type=Path)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--trees", type=Path, nargs="+")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.trace, args.data)
    elif args.command == "measure":
        measure(args.data)
    elif args.command == "measure-analyze":
        measure_analyze(args.trace, args.data)
    elif args.command == "compare-analyze":
        compare_analyze(args.trace, args.trees, args.runs, args.data)
    else:
        compare(args.data, args.trees, args.runs)


if __name__ == "__main__":
    main()
