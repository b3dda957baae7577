"""Wall time and peak RSS of the commands run on a stored profile, two source trees alternating.

    python bench/profile_commands.py PROFILE --trees BEFORE AFTER [--runs 2]

For each tree (``PYTHONPATH=<tree>/src``, A B B A ...), a child process per run times
``perfledger timeline PROFILE`` (the whole timeline, written into a temporary folder),
``perfledger whatif PROFILE --scale compute=0.5 --json`` and a ``perfledger query`` of the
events by kind (see _common.run_measured: the largest RSS of the command's processes). The
timeline's decompressed text and the other commands' outputs are hashed: the script fails
when two runs, of either tree, wrote different bytes. It prints, per tree and command, the
wall seconds and peak RSS of each run and, with ``--trace`` (the trace the profile was made
from), the peak as a multiple of that trace's size.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import alternate_trees, mb, run_measured  # noqa: E402

COMMANDS = ("timeline", "whatif", "query")
QUERY = "SELECT kind, count(*), sum(dur_ns) FROM events GROUP BY ALL ORDER BY ALL"


def _child(profile: Path) -> None:
    """Both commands on ``profile`` by the tree on PYTHONPATH: a JSON line of their figures."""
    work = Path(tempfile.mkdtemp(prefix="profile_commands-"))
    figures = {}
    try:
        output = work / "whole.json.gz"
        argvs = {
            "timeline": ["timeline", str(profile), "-o", str(output)],
            "whatif": ["whatif", str(profile), "--scale", "compute=0.5", "--json"],
            "query": ["query", str(profile), QUERY, "--format", "csv"],
        }
        for name in COMMANDS:
            run = run_measured([sys.executable, "-m", "perfledger", *argvs[name]], cwd=work)
            if run.returncode != 0:
                raise SystemExit(f"{name} failed ({run.returncode}): {run.stderr[-2000:]}")
            text = gzip.decompress(output.read_bytes()) if name == "timeline" else run.stdout
            data = text if isinstance(text, bytes) else text.encode()
            figures[name] = {
                "wall_s": round(run.wall_s, 2),
                "peak_rss_mb": round(mb(run.max_rss), 1),
                "output": hashlib.sha256(data).hexdigest(),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--trees", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--trace", type=Path, help="the trace the profile was made from")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    profile = args.profile.resolve()
    if args.child:
        _child(profile)
        return
    if args.trees is None:
        parser.error("--trees BEFORE AFTER is required")
    trees = [t.resolve() for t in args.trees]
    results = alternate_trees(__file__, trees, args.runs, [str(profile), "--child"])
    size_mb = mb(args.trace.stat().st_size) if args.trace is not None else None
    for name in COMMANDS:
        for tree in trees:
            runs = [r[name] for r in results[str(tree)]]
            peaks = [r["peak_rss_mb"] for r in runs]
            share = (
                f" ({statistics.median(peaks) / size_mb:.2f}x the {size_mb:.0f} MB trace)"
                if size_mb
                else ""
            )
            print(
                f"{name} {tree}: wall s {[r['wall_s'] for r in runs]}, peak RSS MB {peaks}{share}"
            )
        digests = {r[name]["output"] for t in trees for r in results[str(t)]}
        if len(digests) != 1:
            raise SystemExit(f"{name}: the outputs differ between runs: {sorted(digests)}")
        print(f"{name}: the same output in every run")


if __name__ == "__main__":
    main()
