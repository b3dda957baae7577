"""CPU seconds and peak RSS of ``perfledger analyze`` of one trace, source trees alternating, and
whether the operator tables and the findings they give are the same.

Each tree (``--tree NAME=DIR``, DIR holding ``src/perfledger``, e.g. made by ``git archive``)
analyses TRACE into its own output directory in a child process (``PYTHONPATH=DIR/src``); the
rounds alternate the trees. Per run: user + system CPU seconds of the analyze process tree,
its peak RSS, meta.json's phase times (analysis, advisor), and a digest of each of the
operator tables' CSVs (op_summary, op_statistic, kernel_details, api_statistic) and of
summary.json (findings included). The script fails when two trees' digests differ.

Usage: python bench/ops_advisor.py TRACE --out DIR --tree before=/tmp/a --tree after=/tmp/b
       [--rounds 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import perfledger_argv, run_measured  # noqa: E402

COMPARED = (
    "op_summary.csv",
    "op_statistic.csv",
    "kernel_details.csv",
    "api_statistic.csv",
    "summary.json",
)


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="where the profiles go")
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trees = [(n, Path(d).resolve()) for n, _, d in (t.partition("=") for t in args.tree)]
    digests: dict[str, dict[str, str]] = {}
    for round_ in range(1, args.rounds + 1):
        for name, tree in trees:
            out = args.out / name
            env = dict(os.environ, PYTHONPATH=str(tree / "src"))
            run = run_measured(perfledger_argv(args.trace, out), env=env)
            if run.returncode != 0:
                raise SystemExit(f"the analyze of {tree} failed: {run.stderr[-3000:]}")
            timings = json.loads((out / "meta.json").read_text()).get("timings", {})
            files = {f: _digest(out / f) for f in COMPARED}
            digests.setdefault(name, files)
            phases = "  ".join(
                f"{k}={timings[k]:.2f}" for k in ("analysis_s", "advisor_s") if k in timings
            )
            print(
                f"round {round_} {name}: {run.cpu_s:.1f} s CPU, peak RSS "
                f"{run.peak_rss / 2**20:.0f} MiB, wall {run.wall_s:.1f} s; {phases}\n"
                f"    {'  '.join(f'{f}={d}' for f, d in files.items())}",
                flush=True,
            )
    first = next(iter(digests.values()))
    differing = [n for n, d in digests.items() if d != first]
    if differing:
        raise SystemExit(f"outputs differ: {', '.join(differing)}")
    print("outputs identical across trees")


if __name__ == "__main__":
    main()
