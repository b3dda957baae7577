"""CPU seconds and peak memory of writing a large profile's step timelines, for versions of
the code side by side, and the files checked byte for byte against a stored profile.

What ``perfledger analyze`` writes for a trace above the whole timeline's cap (no
timeline.json.gz, one ``timeline/step_<n>.json.gz`` per step), timed on its own: for every
source tree given (``--src DIR``, a ``git archive`` of a version: its ``src`` folder goes on
PYTHONPATH), one child process reads the profile's stored tables (not timed), then writes the
step files from them and reports

  - ``cpu_s``: CPU seconds of the writing (``time.process_time``: every thread);
  - ``peak_mb``: the process's peak resident memory during the writing above its resident
    memory before it (the peak is reset first, through ``/proc/self/clear_refs``);

Versions alternate within a round (the first tree first in odd rounds, last in even ones),
so the load of other jobs falls on each alike; each figure is also a ratio to the first
tree's in the same round, and the median of those ratios over the rounds closes. With
``--reference PROFILE`` (a profile made by ``analyze`` of the same trace, e.g. at the first
tree's version), every step file written is compared with that profile's ``timeline/``
byte for byte (gzip bytes, not only the text).

With ``--system-pool`` Arrow allocates from the C heap, as it does in ``perfledger analyze``
(``memory.returning_pool``): the peak then includes what glibc's heaps keep of the blocks
freed by the writer threads, the larger part of the peak there.

Usage: python bench/timeline_peak.py PROFILE --src TREE_A --src TREE_B [--rounds 3]
       [--reference PROFILE] [--system-pool]
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
import gc, hashlib, json, sys, time
from pathlib import Path
import pyarrow.compute as pc
from perfledger.memory import release_freed_memory
from perfledger.model.accounts import StepWindow
from perfledger.model.whatif import path_spans_by_rank
from perfledger.profiledir import load_profile
from perfledger.render import timeline

def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6

def peak_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1e3
    raise SystemExit("no VmHWM")

profile_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
if sys.argv[3] == "1":  # Arrow on the C heap, as analyze runs (run.pipeline)
    from perfledger.memory import returning_pool
    heap = returning_pool()  # kept: a context left to the collector would end at once
    heap.__enter__()
profile = load_profile(profile_dir)
events = profile.read_table("events")
gaps = profile.read_table("gaps", required=False)
counters = profile.read_table("counters", required=False)
steps = profile.read_table("steps")
spans = path_spans_by_rank(profile.read_table("critical_path", required=False))
findings = profile.findings
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
gc.collect()
release_freed_memory()
before = resident_mb()
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak starts again from the present resident memory
cpu = time.process_time()
timeline.write_profile_timelines(
    None, out / "timeline", parts, windows, counters=counters, findings=findings,
)
cpu = time.process_time() - cpu
figures = {"cpu_s": cpu, "peak_mb": peak_mb() - before, "before_mb": before}
figures["files"] = {
    str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
    for path in sorted(out.rglob("*.json.gz"))
}
print(json.dumps(figures))
"""


def _child(tree: Path, profile: Path, out: str, system_pool: bool) -> dict[str, object]:
    return tree_child(_CHILD, tree, [str(profile), out, "1" if system_pool else "0"])


def _reference_files(profile: Path) -> dict[str, str]:
    import hashlib

    return {
        str(path.relative_to(profile)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((profile / "timeline").glob("*.json.gz"))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--src", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reference", type=Path, help="a profile whose timeline/ to match")
    parser.add_argument(
        "--system-pool",
        action="store_true",
        help="Arrow allocating from the C heap, as in analyze (else its own pool, mimalloc)",
    )
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.src]
    reference = _reference_files(args.reference) if args.reference else None
    ratios: dict[Path, dict[str, list[float]]] = {t: {"cpu_s": [], "peak_mb": []} for t in trees}
    for round_ in range(1, args.rounds + 1):
        results: dict[Path, dict[str, object]] = {}
        for tree in trees if round_ % 2 else trees[::-1]:
            with tempfile.TemporaryDirectory() as folder:
                results[tree] = _child(tree, args.profile, folder, args.system_pool)
        first = results[trees[0]]
        for tree in trees:
            figures = results[tree]
            line = f"round {round_} {tree}:"
            for key in ("cpu_s", "peak_mb"):
                value = float(figures[key])  # type: ignore[arg-type]
                ratio = value / float(first[key])  # type: ignore[arg-type]
                ratios[tree][key].append(ratio)
                line += f" {key} {value:.2f} ({ratio:.3f}x)"
            files = figures["files"]
            assert isinstance(files, dict)
            same = files == first["files"]
            line += f"; {len(files)} files, {'same' if same else 'DIFFER'} as the first tree's"
            if reference is not None:
                line += ", reference " + ("same" if files == reference else "DIFFERS")
            line += f" (resident before {float(figures['before_mb']):.0f} MB)"  # type: ignore[arg-type]
            print(line, flush=True)
    # a shared machine's load makes single rounds noisy: the median of the rounds' ratios
    for tree in trees[1:]:
        line = f"median of {args.rounds} rounds, {tree} / {trees[0]}:"
        for key, values in ratios[tree].items():
            line += f" {key} {statistics.median(values):.3f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
