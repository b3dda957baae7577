"""How much of ``perfledger analyze``'s time is this machine's cost of memory taken afresh.

``python bench/fresh_share.py TRACE [--warm-mb 5120] [--idle 15] [--rounds 3]``

On a virtual machine whose guest hands freed pages back to the host, memory a process takes
afresh costs about ten times what memory freed a moment before costs (``page_cost.py``).
Each round runs the decode floor (as ``scale.py`` defines it), then ``perfledger analyze
TRACE`` twice:

  - ``cold``: after ``--idle`` seconds with nothing running, what earlier runs freed
    handed back to the host meanwhile: as a user's analyze usually starts;
  - ``warm``: after the same wait, at once after a child process has written and freed
    ``--warm-mb`` MiB, so that analyze's pages (anonymous memory and the file cache alike)
    come from those just freed, at the cost ``page_cost.py`` calls ``again``.

The order alternates from round to round (cold first, then warm first). Printed: medians of
the wall, CPU and system seconds and the minor page faults of each kind of run, warm / cold,
and each as a multiple of the floor's mean. The warm run bounds what any change to how much
memory analyze takes could gain here: its wall time is what is left when every page costs
what a page freed a moment ago costs. Figures are written to ``bench/out/fresh_share.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ChildRun, mb, perfledger_argv, run_measured  # noqa: E402
from ingest import _decode_floor  # noqa: E402

# Written and freed by a child process right before a warm run: the pages it frees are the
# ones the analyze that follows takes.
_TOUCH = r"""
import sys
import numpy as np
block = np.ones(int(sys.argv[1]) * (1 << 20) // 8)
del block
"""

KINDS = ("cold", "warm")
FIGURES = ("wall_s", "cpu_s", "sys_s", "minor_faults", "peak_rss_mb")


def _analyze(trace: Path, out: Path) -> ChildRun:
    child = run_measured([*perfledger_argv(trace, out), "--no-ledger"])
    if child.returncode != 0:
        raise SystemExit(
            f"perfledger analyze {trace} failed with exit code {child.returncode}: "
            f"{child.stderr[-2000:]}"
        )
    return child


def _run(kind: str, trace: Path, out: Path, idle_s: float, warm_mb: int) -> dict[str, float]:
    time.sleep(idle_s)
    if kind == "warm":
        subprocess.run([sys.executable, "-c", _TOUCH, str(warm_mb)], check=True)
    child = _analyze(trace, out)
    return {
        "wall_s": child.wall_s,
        "cpu_s": child.cpu_s,
        "sys_s": child.sys_s,
        "minor_faults": float(child.minor_faults),
        "peak_rss_mb": mb(child.peak_rss),
    }


def measure(trace: Path, rounds: int, idle_s: float, warm_mb: int) -> dict[str, Any]:
    """Every round's floor and runs, and the medians per kind."""
    floors: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="fresh-share-", dir=trace.parent) as work:
        out = Path(work) / "profile"
        for number in range(rounds):
            floor = _decode_floor(trace)
            floors.append(floor.wall_s)
            order = KINDS if number % 2 == 0 else tuple(reversed(KINDS))
            for kind in order:
                figures = _run(kind, trace, out, idle_s, warm_mb)
                runs[kind].append(figures)
                print(
                    f"round {number + 1} floor {floor.wall_s:.2f} s; {kind}: "
                    + ", ".join(f"{k} {v:,.2f}" for k, v in figures.items()),
                    flush=True,
                )
            shutil.rmtree(out, ignore_errors=True)
    floor_mean = sum(floors) / len(floors)
    medians = {
        kind: {k: statistics.median(r[k] for r in runs[kind]) for k in FIGURES} for kind in KINDS
    }
    return {
        "trace": str(trace),
        "trace_mb": mb(trace.stat().st_size),
        "rounds": rounds,
        "idle_s": idle_s,
        "warm_mb": warm_mb,
        "floor_s": floors,
        "floor_mean_s": floor_mean,
        "runs": runs,
        "medians": medians,
        "x_floor": {kind: medians[kind]["wall_s"] / floor_mean for kind in KINDS},
        "warm_over_cold": {
            k: medians["warm"][k] / medians["cold"][k] if medians["cold"][k] else float("nan")
            for k in FIGURES
        },
    }


def _print(result: dict[str, Any]) -> None:
    print(
        f"\n{result['trace_mb']:.0f} MB trace, {result['rounds']} rounds, floor mean "
        f"{result['floor_mean_s']:.2f} s ({' / '.join(f'{s:.2f}' for s in result['floor_s'])})"
    )
    print(f"{'median':<8}" + "".join(f"{k:>14}" for k in FIGURES) + f"{'x floor':>10}")
    for kind in KINDS:
        row = result["medians"][kind]
        print(
            f"{kind:<8}"
            + "".join(f"{row[k]:>14,.2f}" for k in FIGURES)
            + f"{result['x_floor'][kind]:>10.2f}"
        )
    ratio = result["warm_over_cold"]
    print(f"{'warm/cold':<8}" + "".join(f"{ratio[k]:>14.3f}" for k in FIGURES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=15.0, help="seconds before each run")
    parser.add_argument("--warm-mb", type=int, default=5120, help="MiB freed before warm runs")
    args = parser.parse_args()
    if not args.trace.is_file():
        raise SystemExit(f"{args.trace}: no such trace (bench/make_trace.py makes one)")
    result = measure(args.trace.resolve(), args.rounds, args.idle, args.warm_mb)
    _print(result)
    out = Path(__file__).resolve().parent / "out" / "fresh_share.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"figures written to {out}")


if __name__ == "__main__":
    main()
