"""The memory of `perfledger analyze` where its phases meet: how much a second process
forked there would share and add.

Runs `python -m perfledger analyze TRACE -o OUT --force` in a child whose rank task and
profile writer are wrapped (nothing else changed) so that, at the start and end of the rank's
analysis passes (``analyze_rank``, and within them the device links), of its operator tables
(``profile_of_rank``), of the step graph with its baseline (``prepare_rank``), of the rank's
advisor (``diagnose_rank``) and of the timelines (``write_timeline_files``), it prints the
process's resident memory from ``/proc/self/status``: VmRSS, of it the anonymous pages
(RssAnon: what a fork's child would hold as its own in its RSS from the start, shared until
written) and the pages of mapped files (RssFile: a child holds them only once it reads them),
and VmHWM: the peak is reset at each phase's start (``5`` written to ``/proc/self/clear_refs``),
so at a phase's end it is that phase's own peak (at the first start: the import's; a phase
started within another resets it too). One rank (the task runs in the analysing process).

Usage: python bench/phase_rss.py TRACE [--out DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import sys
from pathlib import Path

FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


def status(where):
    found = {}
    with open("/proc/self/status") as lines:
        for line in lines:
            key, _, value = line.partition(":")
            if key in FIELDS:
                found[key] = int(value.split()[0]) // 1024
    shown = "  ".join(f"{key} {found.get(key, 0):6d}" for key in FIELDS)
    print(f"{where:<30} {shown}  (MB)", file=sys.stderr, flush=True)


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:  # an older kernel: VmHWM stays the run's peak so far
        pass


def wrapped(module, name, what):
    original = getattr(module, name)

    def call(*args, **kwargs):
        status(f"{what}: start")
        reset_peak()
        result = original(*args, **kwargs)
        status(f"{what}: end")
        return result

    setattr(module, name, call)


if __name__ == "__main__":
    import perfledger.run.tasks as tasks
    from perfledger.analysis import ops
    from perfledger.profiledir import artefacts

    wrapped(tasks, "analyze_rank", "analysis passes (rank)")
    wrapped(ops, "link_device_tasks", "device links")
    wrapped(tasks, "profile_of_rank", "operator tables")
    wrapped(tasks, "prepare_rank", "step graph and baseline")
    wrapped(tasks, "diagnose_rank", "advisor (rank)")
    wrapped(artefacts, "write_timeline_files", "timelines")
    from perfledger.__main__ import main

    sys.argv = ["perfledger", "analyze", sys.argv[1], "-o", sys.argv[2], "--force"]
    code = main()
    status("end")
    sys.exit(code)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, help="profile folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phase-rss-") as scratch:
        out = args.out or Path(scratch) / "profile"
        script = Path(scratch) / "phase_rss_child.py"
        script.write_text(_CHILD)
        done = subprocess.run(
            [sys.executable, str(script), str(args.trace), str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    lines = [line for line in done.stderr.splitlines() if "(MB)" in line]
    print("\n".join(lines))
    if done.returncode != 0:
        sys.exit(f"analyze exited with {done.returncode}: {done.stderr[-2000:]}")


if __name__ == "__main__":
    main()
