"""Time the ranks replayed together in ``perfledger analyze``: ``python
bench/replay_together.py [--runs 3] [PATH ...]`` (default: the 2-rank traces of tests/data).

Per run and input: the profile built as ``perfledger analyze`` builds it (``--workers 0``: the
rank tasks one after the other in this process, so that the reference is their CPU time, not
the wall time of a pool), and from meta.json's timings the rank tasks' seconds (``ranks_s``,
the reference) and the pass that replays the ranks together (``replay_together_s``), as a
ratio of it. Then the pass alone, timed on the analysed ranks with the graphs kept between
rounds and with them built again at each round (the parent's memory bounded by one graph),
with the number of matched collectives. Prints JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from pathlib import Path

from rich.console import Console

from perfledger.analysis.advisor import RULES
from perfledger.analysis.advisor.together import replayed_together
from perfledger.analysis.replay_together import RanksTogether
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
    return {
        "input": str(path.relative_to(DATA) if path.is_relative_to(DATA) else path),
        "ranks": len(alone.ranks),
        "matched_collectives": len(kept.arrivals.instances),
        "rank_tasks_s": round(ranks_s, 3),
        "replay_together_s": round(together_s, 3),
        "together_over_tasks": round(together_s / ranks_s, 3) if ranks_s else None,
        "pass_again_s": round(whole_s, 3),
        "match_and_baseline_kept_graphs_s": round(kept_s, 3),
        "match_and_baseline_rebuilt_graphs_s": round(rebuilt_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = [measure(path) for _ in range(args.runs) for path in args.paths]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
