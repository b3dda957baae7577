"""What memory costs the process that touches it on this machine: system seconds per GiB.

On some virtual machines the guest hands the pages it frees back to the host (a balloon
driver's free page reporting, a few seconds after they are freed); a page taken again must
then be found and zeroed by the host first, and the guest's system time grows with it. The
analysis allocates several GB over a run against a peak near 1 GB, so this cost can be a large
share of its CPU (bench/README.md, "Growth"). Each case runs in a fresh child process:

  - ``fresh``: an array of SIZE MiB allocated and written once (its pages touched for the
    first time by this process), on the huge pages numpy asks for by default;
  - ``fresh 4k``: the same on ordinary pages (NUMPY_MADVISE_HUGEPAGE=0, as perfledger's own
    processes run numpy: perfledger.heap.ordinary_pages);
  - ``again``: the same, freed (and handed back by ``malloc_trim``), then allocated and
    written again at once;
  - ``after Ns``: freed, N seconds waited (``--waits``), then allocated and written again;
  - ``file``: SIZE MiB written into a new file (the file cache's pages) in one write, then
    the file removed; ``file again``: the same at once after; ``file 1m`` and ``file 64k``:
    a new file written 1 MiB and 64 KiB at a time (perfledger.pages.write_pieces' writes).
    Each file case but ``file again`` waits ``--settle`` seconds first, so that the memory
    the case before freed has gone back to the host: its pages are fresh.

Per case: wall and system seconds of the write, minor page faults, and system seconds per
GiB; and, in the same run, the first case's figures as the reference the others are read
against (``x fresh``). Nothing here depends on the project.

Usage: python bench/page_cost.py [--size-mb 1024] [--waits 3 10] [--rounds 2] [--settle 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

_CHILD = r"""
import ctypes, json, os, resource, sys, time
import numpy as np

size = int(sys.argv[1]) << 20
case = sys.argv[2]
wait = float(sys.argv[3])
folder = sys.argv[4]
libc = ctypes.CDLL(None)

def measured(work):
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    work()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "wall_s": wall,
        "sys_s": after.ru_stime - before.ru_stime,
        "user_s": after.ru_utime - before.ru_utime,
        "faults": after.ru_minflt - before.ru_minflt,
    }

def touched():
    block = np.empty(size, np.uint8)
    block.fill(1)
    return block

def written(path):
    data = np.ones(size, np.uint8)  # written before the timing starts
    def work():
        with open(path, "wb") as out:
            out.write(memoryview(data))
    return work

if case in ("fresh", "fresh 4k"):
    result = measured(touched)
elif case == "again" or case == "after":
    block = touched()
    del block
    libc.malloc_trim(0)
    if case == "after":
        time.sleep(wait)
    result = measured(touched)
elif case == "file":
    time.sleep(wait)
    path = os.path.join(folder, "page_cost.bin")
    result = measured(written(path))
    os.remove(path)
elif case in ("file 1m", "file 64k"):
    time.sleep(wait)
    path = os.path.join(folder, "page_cost.bin")
    piece = (1 << 20) if case == "file 1m" else (64 << 10)
    data = np.ones(size, np.uint8)
    def pieces():
        view = memoryview(data)
        with open(path, "wb", buffering=0) as out:
            for at in range(0, size, piece):
                out.write(view[at : at + piece])
    result = measured(pieces)
    os.remove(path)
elif case == "file again":
    path = os.path.join(folder, "page_cost.bin")
    written(path)()
    os.remove(path)
    result = measured(written(path))
    os.remove(path)
print(json.dumps(result))
"""


def _case(size_mb: int, case: str, wait: float, folder: str) -> dict[str, float]:
    # numpy's own default (huge pages for large arrays) but where the case says otherwise
    environment = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if case == "fresh 4k":
        environment["NUMPY_MADVISE_HUGEPAGE"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(size_mb), case, str(wait), folder],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--waits", type=float, nargs="*", default=[3.0, 10.0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--settle", type=float, default=4.0, help="seconds a file case waits before it starts"
    )
    parser.add_argument("--folder", type=Path, default=None, help="where the file cases write")
    args = parser.parse_args(argv)
    cases = [
        ("fresh", "fresh", 0.0),
        ("fresh 4k", "fresh 4k", 0.0),
        ("again", "again", 0.0),
        *((f"after {w:g}s", "after", w) for w in args.waits),
        ("file", "file", args.settle),
        ("file again", "file again", 0.0),
        ("file 1m", "file 1m", args.settle),
        ("file 64k", "file 64k", args.settle),
    ]
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in cases}
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        for _ in range(args.rounds):
            for label, case, wait in cases:
                results[label].append(_case(args.size_mb, case, wait, folder))
    gib = args.size_mb / 1024
    reference = median(r["sys_s"] for r in results["fresh"]) / gib
    print(f"{args.size_mb} MiB per case, medians of {args.rounds} rounds")
    heads = ("wall s", "sys s", "faults", "sys s/GiB", "x fresh")
    print(f"{'case':12s} " + " ".join(f"{h:>9s}" for h in heads))
    summary = {}
    for label, runs in results.items():
        wall = median(r["wall_s"] for r in runs)
        system = median(r["sys_s"] for r in runs)
        faults = median(r["faults"] for r in runs)
        per_gib = system / gib
        ratio = per_gib / reference if reference > 0 else float("nan")
        summary[label] = {
            "wall_s": wall,
            "sys_s": system,
            "faults": faults,
            "sys_s_per_gib": per_gib,
        }
        print(f"{label:12s} {wall:9.2f} {system:9.2f} {faults:9,.0f} {per_gib:9.2f} {ratio:9.2f}")
    print(json.dumps({"size_mb": args.size_mb, "rounds": args.rounds, "cases": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
