"""The extra disk an analyze needs while it runs: its output folder's size polled.

`python bench/staging_disk.py TRACE [--every-s 0.2]`

Runs ``perfledger analyze TRACE`` into a fresh folder and sums, every ``--every-s`` seconds,
the sizes of the files under that folder's parent (the staging folder with the rank tasks'
mapped files, then the profile) but those in raw/ folders (links or copies of the trace, whose
cost docs/formats.md states). Prints the largest sum seen and the finished profile's size: their
difference is the disk the analysis needs beyond its profile for a while.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from _common import mb, perfledger_argv


def _size_but_raw(folder: Path) -> int:
    """The bytes of the files under ``folder``, but those in a raw/ folder (the profile's, a
    rank task's links or copies of its sources)."""
    return sum(_size(p) for p in folder.rglob("*") if "raw" not in p.relative_to(folder).parts)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:  # removed while walked
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--every-s", type=float, default=0.2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="staging_disk_") as scratch:
        out = Path(scratch) / "profile"
        child = subprocess.Popen(
            [*perfledger_argv(args.trace.resolve(), out), "--no-ledger"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        largest = 0
        while child.poll() is None:
            largest = max(largest, _size_but_raw(Path(scratch)))
            time.sleep(args.every_s)
        if child.returncode != 0:
            raise SystemExit(f"analyze exited {child.returncode}")
        profile = _size_but_raw(Path(scratch))
    trace = args.trace.stat().st_size
    print(
        f"{args.trace.name}: {mb(trace):.0f} MB; staging at most {mb(largest):.0f} MB (raw/ "
        f"aside), profile {mb(profile):.0f} MB: {mb(largest - profile):.0f} MB beyond the "
        f"profile = {(largest - profile) / trace:.2f}x the trace"
    )


if __name__ == "__main__":
    main()
