"""CPU seconds of each part of writing a profile's step timelines, for versions of the code
side by side: the placement of a rank's records, the preparation of its groups of rows, the
formatting of the files' text, and their compression.

The whole's CPU (``time.process_time``, bench/timeline_peak.py) counts every thread at once,
and on a loaded machine the threads' waits and cache misses swing it by 10 % from run to run;
here each part is timed on the thread that runs it (``time.thread_time`` around the
function), so a change to one part shows in that part's figure.

For every source tree given (``--src DIR``, a ``git archive`` of a version: its ``src`` folder
goes on PYTHONPATH), one child process reads the profile's stored tables (not timed), then
writes the step files as ``perfledger analyze`` does (bench/timeline_peak.py's child) with
these functions timed:

  - ``place``: ``render.timeline.writer.place_timeline`` (tracks, lanes, flows, counters);
  - ``prepare``: ``prepare_rows`` (each group's rows) and ``_file_groups``;
  - ``format``: ``TimelineFile._add`` (the records of a file cut, ordered and formatted;
    its thread's CPU, so not its waits for the compression thread);
  - ``compress``: ``gzstream.Deflate.write`` (zlib at the fixed level, the CRC);
  - ``whole``: the process's CPU over the writing (every thread, as timeline_peak.py).

Versions alternate within a round (the first tree first in odd rounds, last in even ones);
the median over the rounds of each part's ratio to the first tree's closes. The gzip files
written are compared byte for byte between the trees.

Usage: python bench/timeline_parts.py PROFILE --src TREE_A --src TREE_B [--rounds 3]
       [--system-pool]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import tree_child  # noqa: E402

_CHILD = r"""
import collections, functools, hashlib, json, sys, time
from pathlib import Path
import pyarrow.compute as pc

profile_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
if sys.argv[3] == "1":  # Arrow on the C heap, as analyze runs (run.pipeline)
    from perfledger.memory import returning_pool
    heap = returning_pool()  # kept: a context left to the collector would end at once
    heap.__enter__()
from perfledger.model.accounts import StepWindow
from perfledger.model.whatif import path_spans_by_rank
from perfledger.profiledir import load_profile
from perfledger.render import timeline
from perfledger.render.timeline import file as tl_file, gzstream, writer

spent = collections.Counter()

def timed(owner, name, part):
    inner = getattr(owner, name)
    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        begin = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[part] += time.thread_time() - begin
    setattr(owner, name, wrapper)

timed(writer, "place_timeline", "place")
timed(writer, "prepare_rows", "prepare")
timed(writer, "_file_groups", "prepare")
timed(tl_file.TimelineFile, "_add", "format")
timed(gzstream.Deflate, "write", "compress")

profile = load_profile(profile_dir)
events = profile.read_table("events")
gaps = profile.read_table("gaps", required=False)
counters = profile.read_table("counters", required=False)
steps = profile.read_table("steps")
spans = path_spans_by_rank(profile.read_table("critical_path", required=False))
windows = [StepWindow(**row) for row in steps.drop_columns(["wall_ns"]).to_pylist()]
ranks = sorted(set(pc.unique(events.column("rank")).to_pylist()))
parts = [
    timeline.TimelinePart(
        r,
        events.filter(pc.equal(events.column("rank"), r)),
        gaps.filter(pc.equal(gaps.column("rank"), r)) if gaps is not None else None,
        spans.get(r, ()),
    )
    for r in ranks
]
del events
cpu = time.process_time()
timeline.write_profile_timelines(
    None, out / "timeline", parts, windows, counters=counters, findings=profile.findings,
)
figures = {"whole": time.process_time() - cpu, **spent}
figures["files"] = {
    str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
    for path in sorted(out.rglob("*.json.gz"))
}
print(json.dumps(figures))
"""

_PARTS = ("place", "prepare", "format", "compress", "whole")


def _child(tree: Path, profile: Path, out: str, system_pool: bool) -> dict[str, object]:
    return tree_child(_CHILD, tree, [str(profile), out, "1" if system_pool else "0"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--src", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--system-pool", action="store_true", help="Arrow on the C heap")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.src]
    ratios: dict[Path, dict[str, list[float]]] = {t: {p: [] for p in _PARTS} for t in trees}
    for round_ in range(1, args.rounds + 1):
        results: dict[Path, dict[str, object]] = {}
        for tree in trees if round_ % 2 else trees[::-1]:
            with tempfile.TemporaryDirectory() as folder:
                results[tree] = _child(tree, args.profile, folder, args.system_pool)
        first = results[trees[0]]
        for tree in trees:
            figures = results[tree]
            line = f"round {round_} {tree}:"
            for part in _PARTS:
                value = float(figures.get(part, 0.0))  # type: ignore[arg-type]
                base = float(first.get(part, 0.0))  # type: ignore[arg-type]
                ratio = value / base if base else float("nan")
                ratios[tree][part].append(ratio)
                line += f" {part} {value:.2f} ({ratio:.3f}x)"
            same = figures["files"] == first["files"]
            line += f"; files {'same' if same else 'DIFFER'} as the first tree's"
            print(line, flush=True)
    for tree in trees[1:]:
        line = f"median of {args.rounds} rounds, {tree} / {trees[0]}:"
        for part, values in ratios[tree].items():
            line += f" {part} {statistics.median(values):.3f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
