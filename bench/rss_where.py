"""Where a perfledger command's memory goes: its RSS sampled with the code running at that moment.

`python bench/rss_where.py [--every-s 0.1] [--out FILE] -- analyze TRACE -o DIR [...]`

Runs the perfledger command in this process while a thread reads the process's RSS (Linux:
/proc/self/statm) every ``--every-s`` seconds, with the innermost perfledger frames of every
other thread (the function two levels up and the line running). Writes one line per sample to
``--out`` (RSS MB, the part of it that is file pages such as mapped files, then where) and
prints the peak, and the largest RSS of each function seen innermost, largest first. Children
(the import's worker processes) are not counted: the sampled process is the one that holds the
tables; ``scale.py`` measures the whole tree.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_mb() -> tuple[float, float]:
    """The process's RSS and the part of it that is file pages (mapped files), MB."""
    with open("/proc/self/statm") as statm:
        fields = statm.read().split()
    return int(fields[1]) * _PAGE / 1e6, int(fields[2]) * _PAGE / 1e6


def _where(me: int) -> str:
    """The innermost perfledger frames of every thread but ``me``."""
    places = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue
        ours = [f for f in traceback.extract_stack(frame) if "perfledger" in f.filename]
        if ours:
            inner, outer = ours[-1], ours[-3] if len(ours) >= 3 else ours[0]
            places.append(
                f"{Path(outer.filename).name}:{outer.name} > "
                f"{Path(inner.filename).name}:{inner.name}:{inner.lineno}"
            )
    return " | ".join(places)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every-s", type=float, default=0.1)
    parser.add_argument("--out", type=Path, default=Path("rss_where.txt"))
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- perfledger arguments")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no perfledger command given (after --)")
    samples: list[tuple[float, float, str]] = []
    stop = threading.Event()

    def sample() -> None:
        me = threading.get_ident()
        while not stop.wait(args.every_s):
            samples.append((*_rss_mb(), _where(me)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sys.argv = ["perfledger", *command]
    started = time.perf_counter()
    code: object = 0
    try:
        runpy.run_module("perfledger", run_name="__main__")
    except SystemExit as ended:
        code = ended.code
    finally:
        stop.set()
        sampler.join()
    wall = time.perf_counter() - started
    args.out.write_text(
        "".join(f"{rss:8.0f} {mapped:6.0f} {where}\n" for rss, mapped, where in samples)
    )
    if not samples:
        raise SystemExit(f"no sample taken (the command ran {wall:.1f} s)")
    peak = max(samples)
    print(f"exit {code}, {wall:.1f} s, {len(samples)} samples in {args.out}")
    print(f"peak {peak[0]:.0f} MB ({peak[1]:.0f} MB of it file pages) at {peak[2][:200]}")
    largest: dict[str, float] = {}
    for rss, _, where in samples:
        for place in where.split(" | ") if where else ["(outside perfledger)"]:
            inner = place.split(" > ")[-1].rsplit(":", 1)[0]
            largest[inner] = max(largest.get(inner, 0.0), rss)
    for inner, rss in sorted(largest.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{rss:8.0f} MB  {inner}")


if __name__ == "__main__":
    main()
