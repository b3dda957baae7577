"""Time the ranks replayed together in ``perfledger analyze``: ``python
bench/replay_together.py [--runs 3] [PATH ...]`` (default: the 2-rank traces of tests/data).

Per run and input: the profile built as ``perfledger analyze`` builds it (``--workers 0``: the
rank tasks one after the other in this process, so that the reference is their CPU time, not
the wall time of a pool), and from meta.json's timings the rank tasks' seconds (``ranks_s``,
the reference) and the pass that replays the ranks together (``replay_together_s``), as a
ratio of it. Then the pass alone, timed on the analysed ranks with the graphs kept between
rounds and with them built again at each round (the parent's memory bounded by one graph),
with the number of matched collectives, and the Python heap's peak (tracemalloc, numpy arrays
included) in each mode. Then two changes (every rank's launch overhead halved; rank 0's
compute halved) replayed together in rounds (the reference) and in one joint pass,
alternating twice on the same kept graphs, beside one replay of every rank: their seconds,
the changes left unsettled, and how many ranks' gains differ between the two.
``--copies-of TRACE --copies N``: also N ranks made of one Kineto trace (each copy naming its
own rank), for graphs of a real size. Prints JSON.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

from rich.console import Console

from perfledger.analysis.advisor import RULES
from perfledger.analysis.advisor.together import replayed_together
from perfledger.analysis.replay import replay
from perfledger.analysis.replay_together import KEPT_GRAPH_ROWS, RanksTogether
from perfledger.model.whatif import Scale, WhatIf
from perfledger.run.execution import Execution
from perfledger.run.pipeline import build_profile

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
DEFAULT = [
    DATA / "kineto" / "sampled_2ranks",
    DATA / "ascend" / "torch_npu_text" / "level1",
    DATA / "ascend" / "torch_npu_db" / "level1",
]


def measure(path: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as scratch:
        built = build_profile(
            [path],
            Path(scratch) / "profile",
            console=Console(file=io.StringIO()),
            execution=Execution(workers=0),
        )
        meta = json.loads((built.path / "meta.json").read_text())
    timings = meta["timings"]
    ranks_s, together_s = timings["ranks_s"], timings.get("replay_together_s", 0.0)
    # the pass alone on the merged analysis, its advice made alone again first
    alone = built.analysis
    started = time.perf_counter()
    kept = RanksTogether(alone.ranks)
    kept.gains([{}])
    kept_s = time.perf_counter() - started
    started = time.perf_counter()
    rebuilt = RanksTogether(alone.ranks, kept_rows=0)
    rebuilt.gains([{}])
    rebuilt_s = time.perf_counter() - started
    started = time.perf_counter()
    replayed_together(alone, [r.id for r in RULES])
    whole_s = time.perf_counter() - started
    # the advisor's kind of changes replayed together, in rounds (the reference) and in one
    # joint pass, alternating, on the same kept graphs
    changes = [
        {r.rank: WhatIf((Scale("launch", 0.5),)) for r in alone.ranks},
        {alone.ranks[0].rank: WhatIf((Scale("compute", 0.5),))},
    ]
    replay_s = 0.0
    for i, rank in enumerate(kept.ranks):  # one replay of every rank under the first change
        graph = kept.prepared(i).graph
        started = time.perf_counter()
        replay(graph, changes[0][rank], kept.peers[i])
        replay_s += time.perf_counter() - started
    timed: dict[str, list[float]] = {"rounds": [], "joint": []}
    outcome = {}
    for _ in range(2):
        for mode in ("rounds", "joint"):
            together = RanksTogether(alone.ranks)
            started = time.perf_counter()
            gains = together.gains(changes, joint=mode == "joint")
            timed[mode].append(time.perf_counter() - started)
            outcome[mode] = (gains, together.unsettled, together.in_rounds)
    differ = sum(
        a != b
        for by_rank_a, by_rank_b in zip(outcome["rounds"][0], outcome["joint"][0], strict=True)
        for a, b in zip(by_rank_a.values(), by_rank_b.values(), strict=True)
    )
    gain_ms = {
        mode: [
            round(sum(g.baseline_ns - g.predicted_ns for g in by_rank.values()) / 1e6, 3)
            for by_rank in outcome[mode][0]
        ]
        for mode in outcome
    }
    # the Python heap's peak (numpy arrays included) of the pass's graphs, apart from the
    # timings: kept between rounds, or built again one rank at a time
    peaks = {}
    for name, kept_rows in (("kept", KEPT_GRAPH_ROWS), ("rebuilt", 0)):
        tracemalloc.start()
        RanksTogether(alone.ranks, kept_rows=kept_rows).gains([{}])
        peaks[name] = round(tracemalloc.get_traced_memory()[1] / 1e6, 1)
        tracemalloc.stop()
    return {
        "input": str(path.relative_to(DATA) if path.is_relative_to(DATA) else path.name),
        "ranks": len(alone.ranks),
        "matched_collectives": len(kept.arrivals.instances),
        "rank_tasks_s": round(ranks_s, 3),
        "replay_together_s": round(together_s, 3),
        "together_over_tasks": round(together_s / ranks_s, 3) if ranks_s else None,
        "pass_again_s": round(whole_s, 3),
        "match_and_baseline_kept_graphs_s": round(kept_s, 3),
        "match_and_baseline_rebuilt_graphs_s": round(rebuilt_s, 3),
        "two_changes_rounds_s": [round(t, 3) for t in timed["rounds"]],
        "two_changes_joint_s": [round(t, 3) for t in timed["joint"]],
        "one_replay_of_every_rank_s": round(replay_s, 3),
        "unsettled_rounds": outcome["rounds"][1],
        "unsettled_joint": outcome["joint"][1],
        "deadlocked_joint": outcome["joint"][2],
        "rank_gains_differing": differ,
        "gain_ms_rounds": gain_ms["rounds"],
        "gain_ms_joint": gain_ms["joint"],
        "peak_mb_kept_graphs": peaks["kept"],
        "peak_mb_rebuilt_graphs": peaks["rebuilt"],
    }


def rank_copies(trace: Path, copies: int, folder: Path) -> Path:
    """``copies`` ranks made of one Kineto trace: the same events, each copy naming its own
    rank (``distributedInfo.rank``); every collective matches, none waits."""
    with gzip.open(trace, "rt") if trace.suffix == ".gz" else trace.open() as source:
        document = json.load(source)
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(copies):
        document["distributedInfo"] = {
            **document.get("distributedInfo", {}),
            "rank": rank,
            "world_size": copies,
        }
        (folder / f"rank{rank}.json").write_text(json.dumps(document))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--copies-of",
        type=Path,
        help="also measure this many-rank run: COPIES ranks of one Kineto trace (--copies)",
    )
    parser.add_argument("--copies", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        paths = list(args.paths)
        if args.copies_of is not None:
            paths.append(rank_copies(args.copies_of, args.copies, Path(scratch) / "copies"))
        results = [measure(path) for _ in range(args.runs) for path in paths]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
