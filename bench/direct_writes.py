"""What a large output file costs written through the page cache and around it (O_DIRECT).

Each round writes ``--size-mb`` MiB of the same bytes, in the 1 MiB pieces a CSV writer hands
over, to a new file of ``--folder`` (default: bench/out, the disk the profiles go to), once
with a plain buffered file and once with ``perfledger.direct_files.direct_file`` (which turns
to O_DIRECT where the disk suits it), in alternating order, each in a fresh child process;
the file is removed after each write. Per way: the median wall and system seconds of the
write (the close included) and the system seconds per GiB; and the ratio of the direct
writes' median wall to the buffered ones', both measured in the same run.

Usage: python bench/direct_writes.py [--size-mb 1024] [--rounds 3] [--folder bench/out]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_WORKDIR, tree_child  # noqa: E402

_CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
from perfledger.direct_files import direct_file

size_mb, way, path = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
piece = bytes(range(256)) * 4096  # 1 MiB
before = resource.getrusage(resource.RUSAGE_SELF)
started = time.perf_counter()
if way == "direct":
    with direct_file(path) as sink:
        for _ in range(size_mb):
            sink.write(piece)
        direct = sink.direct
else:
    with open(path, "wb") as sink:
        for _ in range(size_mb):
            sink.write(piece)
    direct = False
wall = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF)
assert path.stat().st_size == size_mb << 20
path.unlink()
print(json.dumps({"wall_s": wall, "sys_s": after.ru_stime - before.ru_stime, "direct": direct}))
"""


def _write(size_mb: int, way: str, path: Path) -> dict[str, Any]:
    """One write of ``size_mb`` MiB the ``way`` named, in a child of this checkout's code."""
    return tree_child(_CHILD, Path(__file__).resolve().parents[1], [str(size_mb), way, str(path)])


def main(argv: list[str] | None = None) -> int:
    """Command line of the direct-writes benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    path = args.folder / "direct_writes.bin"
    runs: dict[str, list[dict[str, Any]]] = {"buffered": [], "direct": []}
    for number in range(args.rounds):
        order = ["buffered", "direct"] if number % 2 == 0 else ["direct", "buffered"]
        for way in order:
            runs[way].append(_write(args.size_mb, way, path))
            print(way, json.dumps(runs[way][-1]), file=sys.stderr, flush=True)
    gib = args.size_mb / 1024
    medians = {}
    for way, figures in runs.items():
        wall = statistics.median(f["wall_s"] for f in figures)
        system = statistics.median(f["sys_s"] for f in figures)
        medians[way] = wall
        went = sum(bool(f["direct"]) for f in figures)
        print(
            f"{way}: wall s {[round(f['wall_s'], 2) for f in figures]} (median {wall:.2f}), "
            f"system s per GiB {system / gib:.2f}"
            + (f", O_DIRECT taken in {went} of {len(figures)}" if way == "direct" else "")
        )
    print(f"direct / buffered wall (medians): {medians['direct'] / medians['buffered']:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
