"""Time the step-graph replay: ``python bench/whatif_replay.py [--tasks 50000] [--trace PATH]``.

Without ``--trace``: one step of N kernels on two streams launched from one host thread (host
work between the launch calls, a synchronisation every 1,000 launches), built in memory as a
canonical events table; prints the seconds to build the graph, to replay it once, and the whole
what-if (graph, baseline and changed replays, step windows, critical paths) as JSON.

With ``--trace`` (a Kineto trace, one rank): what a rank task does, timed in this process: the
import, the rank's analysis (the reference), the replay with the critical paths (what the task
now does instead of the profile writer), one fix replayed for the advisor, and the replay as a
ratio of the import and of the analysis measured in the same run.

With ``--trace PATH --fixes [--rounds 3] [--numba]``: five fixes the advisor replays, each the
previous way (``_replay_previous.py``), the present one and, with ``--numba`` (numba on
PYTHONPATH), the present one with the loop compiled (``_replay_numba.py``), alternating; the
step windows of the ways compared (bench/README.md, "What-if replay").
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa

from perfledger.analysis.critical_path import replay_rank
from perfledger.analysis.graph import build_graph
from perfledger.analysis.replay import replay
from perfledger.model import schema
from perfledger.model.whatif import Scale, WhatIf


def step_events(tasks: int) -> pa.Table:
    """One step of ``tasks`` kernels: launch calls every 4 µs, kernels of 3-9 µs."""
    rng = np.random.default_rng(0)
    launch = 10_000 + np.arange(tasks, dtype=np.int64) * 4_000
    kernel_dur = rng.integers(3_000, 9_000, tasks)
    stream = np.where(np.arange(tasks) % 7 == 0, 8, 7)
    start = np.empty(tasks, dtype=np.int64)
    ready = {7: 0, 8: 0}
    for i in range(tasks):  # building the input, not the measured part
        s = max(int(launch[i]) + 5_000, ready[int(stream[i])])
        start[i] = s
        ready[int(stream[i])] = s + int(kernel_dur[i])
    syncs = launch[999::1000] + 2_500
    sync_end = np.array([start[: i + 1].max() for i in range(999, tasks, 1000)]) + 10_000
    end = int(max(start[-1] + kernel_dur[-1], sync_end.max()))
    rows = {
        "kind": ["step"] + ["runtime"] * tasks + ["kernel"] * tasks + ["sync"] * syncs.size,
        "name": ["ProfilerStep#1"]
        + ["cudaLaunchKernel"] * tasks
        + [f"kernel_{i % 50}" for i in range(tasks)]
        + ["cudaDeviceSynchronize"] * syncs.size,
        "device": [-1] + [-1] * tasks + [0] * tasks + [-1] * syncs.size,
        "stream": [1] + [1] * tasks + stream.tolist() + [1] * syncs.size,
        "start_ns": [0, *launch.tolist(), *start.tolist(), *syncs.tolist()],
        "dur_ns": [end, *([2_000] * tasks), *kernel_dur.tolist(), *(sync_end - syncs).tolist()],
        "correlation": [-1, *range(tasks), *range(tasks), *([-1] * syncs.size)],
    }
    n = len(rows["kind"])
    table = pa.table(
        {
            "rank": pa.array([0] * n, pa.int32()),
            "kind": rows["kind"],
            "name": rows["name"],
            "device": pa.array(rows["device"], pa.int16()),
            "stream": rows["stream"],
            "pid": [100] * n,
            "start_ns": rows["start_ns"],
            "dur_ns": rows["dur_ns"],
            "correlation": rows["correlation"],
            "external_id": [-1] * n,
            "step": pa.array([-1] * n, pa.int32()),
            "bytes": [-1] * n,
            "flops": [float("nan")] * n,
            "shapes": pa.nulls(n, pa.string()),
            "dtypes": pa.nulls(n, pa.string()),
            "args": pa.nulls(n, pa.string()),
        }
    )
    return schema.conform_events(table)


def trace_figures(path: Path) -> dict[str, object]:
    """The replay beside the import and the analysis of one rank's trace."""
    from perfledger.analysis.critical_path import predicted_gains, prepare_rank, rank_report
    from perfledger.analysis.profile import analyze_rank
    from perfledger.sources.kineto import load_kineto

    t0 = time.perf_counter()
    trace = load_kineto(path)
    t1 = time.perf_counter()
    rank = analyze_rank(trace)
    t2 = time.perf_counter()
    prepared = prepare_rank(rank.events)
    report = rank_report(prepared)
    t3 = time.perf_counter()
    predicted_gains(prepared, WhatIf((Scale("launch", 0.5),)))
    t4 = time.perf_counter()
    return {
        "trace": path.name,
        "events": rank.events.num_rows,
        "nodes": prepared.graph.size,
        "steps": len(report.steps),
        "import_s": round(t1 - t0, 3),
        "analysis_s": round(t2 - t1, 3),
        "replay_s": round(t3 - t2, 3),
        "fix_replay_s": round(t4 - t3, 3),
        "replay_vs_import": round((t3 - t2) / (t1 - t0), 3),
        "replay_vs_analysis": round((t3 - t2) / (t2 - t1), 3),
    }


# The changes the advisor's rules replay most (rows-free ones, so that any trace has them).
FIXES: Final = (
    ("launch x0.5", WhatIf((Scale("launch", 0.5),))),
    ("launch x0.1", WhatIf((Scale("launch", 0.1),))),
    ("overlap_comm", WhatIf(overlap_comm=True)),
    ("no_sync", WhatIf(no_sync=True)),
    ("compute x0.5", WhatIf((Scale("compute", 0.5),))),
)


def fix_figures(path: Path, rounds: int, compiled: bool = False) -> dict[str, object]:
    """One fix replayed for the advisor, the previous way (every lookup for every node, the
    windows measured on a whole replayed events table) and the present one, alternating,
    ``rounds`` times each; the windows of both compared. ``compiled``: also the present way
    with the loop compiled by numba (``_replay_numba.py``), and its import and JIT compile."""
    import _replay_previous as previous  # the sibling file (run as a script)

    from perfledger.analysis import replay as replay_module
    from perfledger.analysis.profile import analyze_rank
    from perfledger.analysis.replay_windows import ReplayWindows
    from perfledger.sources.kineto import load_kineto

    events = analyze_rank(load_kineto(path)).events
    t0 = time.perf_counter()
    graph = build_graph(events)
    t1 = time.perf_counter()
    windows = ReplayWindows(events, graph)
    t2 = time.perf_counter()
    present_loop = replay_module._schedule
    loop_s = [0.0]

    def timed(loop: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            started = time.perf_counter()
            result = loop(*args)
            loop_s[0] += time.perf_counter() - started
            return result

        return run

    figures: dict[str, dict[str, list[float]]] = {}
    ways: list[tuple[str, Callable[..., Any], Any]] = [
        ("previous", previous.previous_schedule, None),
        ("present", present_loop, windows),
    ]
    numba_s: dict[str, float] = {}
    if compiled:
        started = time.perf_counter()
        import _replay_numba  # needs numba on PYTHONPATH

        numba_s["import_s"] = round(time.perf_counter() - started, 3)
        numba_s["compile_s"] = round(_replay_numba.compile_seconds(), 3)
        ways.append(("numba", _replay_numba.compiled_schedule, windows))
    for _ in range(rounds):
        for name, change in FIXES:
            seen: list[object] = []
            for way, loop, measure in ways:
                replay_module._schedule = timed(loop)
                loop_s[0] = 0.0
                started = time.perf_counter()
                schedule = replay(graph, change)
                replayed = time.perf_counter()
                if measure is None:
                    seen.append(previous.previous_windows(events, graph, schedule))
                else:
                    seen.append(measure(schedule))
                ended = time.perf_counter()
                replay_module._schedule = present_loop
                got = figures.setdefault(f"{name}/{way}", {})
                got.setdefault("loop_s", []).append(loop_s[0])
                got.setdefault("replay_s", []).append(replayed - started)
                got.setdefault("windows_s", []).append(ended - replayed)
            if any(other != seen[0] for other in seen[1:]):
                raise SystemExit(f"{name}: the step windows differ between the two ways")
    medians = {
        key: {part: round(float(np.median(values)), 3) for part, values in parts.items()}
        for key, parts in figures.items()
    }
    whole = {
        way: round(
            sum(
                medians[f"{n}/{way}"]["replay_s"] + medians[f"{n}/{way}"]["windows_s"]
                for n, _ in FIXES
            ),
            3,
        )
        for way, _, _ in ways
    }
    return {
        "trace": path.name,
        "events": events.num_rows,
        "nodes": graph.size,
        "graph_s": round(t1 - t0, 3),
        "windows_prepare_s": round(t2 - t1, 3),
        "rounds": rounds,
        "fixes": medians,
        "fixes_s": whole,
        "previous_over_present": round(whole["previous"] / max(whole["present"], 1e-9), 2),
        **({"numba": numba_s} if numba_s else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--trace", type=Path, help="time the replay of this Kineto trace")
    parser.add_argument(
        "--fixes",
        action="store_true",
        help="with --trace: the advisor's fixes replayed the previous way and the present one",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --fixes: rounds of each")
    parser.add_argument(
        "--numba", action="store_true", help="with --fixes: also the loop compiled by numba"
    )
    args = parser.parse_args()
    if args.trace is not None and args.fixes:
        print(json.dumps(fix_figures(args.trace, args.rounds, args.numba)))
        return
    if args.trace is not None:
        print(json.dumps(trace_figures(args.trace)))
        return
    events = step_events(args.tasks)
    t0 = time.perf_counter()
    graph = build_graph(events)
    t1 = time.perf_counter()
    replay(graph)
    t2 = time.perf_counter()
    report = replay_rank(events, WhatIf((Scale("compute", 0.5),)))
    t3 = time.perf_counter()
    step = report.steps[0]
    print(
        json.dumps(
            {
                "tasks": args.tasks,
                "nodes": graph.size,
                "graph_s": round(t1 - t0, 3),
                "replay_s": round(t2 - t1, 3),
                "whatif_s": round(t3 - t2, 3),
                "replay_error_pct": round(step.error_pct, 4),
                "measured_ms": step.measured_ns / 1e6,
                "predicted_ms": step.predicted_ns / 1e6,
            }
        )
    )


if __name__ == "__main__":
    main()
