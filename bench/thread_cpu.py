"""Where the CPU of one ``perfledger analyze`` goes by thread, and when the cores stand idle.

    python bench/thread_cpu.py TRACE [--every 0.02] [--bucket 0.25] [--out DIR]

Runs ``perfledger analyze TRACE`` in a child interpreter whose threads carry their Python
names at the system level too (``prctl(PR_SET_NAME)`` as each starts: ``rank-writer_0``,
``advisor_1`` ..., cut to the system's 15 characters; the threads the libraries start
unnamed show as the interpreter's name; the import's worker processes, forked from it, are
marked ``[w]``), and reads ``/proc`` every ``--every`` seconds for each thread of the child
and of its children: its state, and its user and system CPU seconds so far. It prints

  - per thread name (numbered pool threads together): how many, their user and system
    seconds, their share of the run's CPU;
  - per ``--bucket`` seconds of the run: how many threads were running (on the CPU or ready
    for it) on average, counted up to the machine's cores, and the names running most;
  - the core-seconds the run left idle: cores x wall - the child's CPU (its own and its
    workers', as the system counts them when it ends) - the polls' own CPU.

A thread that waits (for the GIL, a lock, a file) is not running: the buckets under the
machine's core count are where the run leaves cores idle, the names in them what runs
meanwhile. The polls cost CPU of their own (printed), on the cores the analysis runs on:
compare runs made the same way. CPU seconds come in the system's
clock ticks (/proc, 0.01 s); a thread that ends between two polls loses what it ran since
the last one. Linux only.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import compile_bytecode  # noqa: E402

# The child's first lines: its threads named at the system level as they start.
NAMING = r"""
import ctypes, sys, threading

_prctl = ctypes.CDLL(None, use_errno=True).prctl
_run = threading.Thread.run

def _named_run(self):
    _prctl(15, self.name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    return _run(self)

threading.Thread.run = _named_run
"""
# Then the command line.
_CHILD = NAMING + "from perfledger.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"

_POOL_NUMBER = re.compile(r"_\d*$")


@dataclass
class Thread:
    """What the last poll read of one thread."""

    name: str
    user_s: float
    system_s: float


def _children(pid: int) -> list[int]:
    """The process ``pid`` and its descendants (those /proc lists now: each process's own
    list of children, where psutil's walk, as _common's, reads every process of the system at
    each poll, three times the polls' CPU here)."""
    found = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listed:
            for child in listed.read().split():
                found.extend(_children(int(child)))
    except OSError:
        pass
    return found


def poll(root: int, threads: dict[tuple[int, int], Thread], tick: float) -> list[str]:
    """Read every thread of ``root``'s tree into ``threads``; the names of those running."""
    running: list[str] = []
    for pid in _children(root):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            close = text.rfind(")")
            name = text[text.find("(") + 1 : close] + ("" if pid == root else "[w]")
            fields = text[close + 2 :].split()
            threads[pid, int(tid)] = Thread(name, int(fields[11]) * tick, int(fields[12]) * tick)
            if fields[0] == "R":
                running.append(name)
    return running


def group(name: str) -> str:
    """A pool thread's name without its number (``advisor_1`` -> ``advisor``)."""
    base = name.removesuffix("[w]")
    grouped = _POOL_NUMBER.sub("", base) or base
    return grouped + ("[w]" if name.endswith("[w]") else "")


def main(argv: list[str] | None = None) -> int:
    """Run the analyze, poll its threads, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--every", type=float, default=0.02, help="seconds between polls")
    parser.add_argument("--bucket", type=float, default=0.25, help="seconds per timeline row")
    parser.add_argument("--out", type=Path, help="the profile's folder (default: a temporary)")
    args = parser.parse_args(argv)
    if not args.trace.exists():
        parser.error(f"{args.trace}: no such trace")
    compile_bytecode()
    cores = os.cpu_count() or 1
    tick = 1 / os.sysconf("SC_CLK_TCK")
    threads: dict[tuple[int, int], Thread] = {}
    polls: list[tuple[float, list[str]]] = []
    with tempfile.TemporaryDirectory(prefix="thread-cpu-") as scratch:
        out = args.out or Path(scratch) / "profile"
        command = [sys.executable, "-c", _CHILD, "analyze", str(args.trace), "-o", str(out)]
        # a folder of the caller's is never replaced: analyze refuses one that exists
        command += ["--no-ledger"] if args.out else ["--force", "--no-ledger"]
        errors_path = Path(scratch) / "stderr.txt"
        polling = resource.getrusage(resource.RUSAGE_SELF)
        with open(errors_path, "wb") as errors_file:
            began = time.perf_counter()
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors_file)
            try:
                while True:
                    # reaped here, with what the child and the children it waited for used
                    pid, status, usage = os.wait4(child.pid, os.WNOHANG)
                    if pid:
                        child.returncode = os.waitstatus_to_exitcode(status)
                        break
                    polls.append((time.perf_counter() - began, poll(child.pid, threads, tick)))
                    time.sleep(args.every)
            except BaseException:
                child.kill()
                child.wait()
                raise
            wall = time.perf_counter() - began
        polled = resource.getrusage(resource.RUSAGE_SELF)
        errors = errors_path.read_text(errors="replace")
    if child.returncode != 0:
        print(f"analyze failed ({child.returncode}): {errors[-2000:]}", file=sys.stderr)
        return 1
    whole = usage.ru_utime + usage.ru_stime
    by_name: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for thread in threads.values():
        totals = by_name[group(thread.name)]
        totals[0] += 1
        totals[1] += thread.user_s
        totals[2] += thread.system_s
    cpu = sum(user + system for _, user, system in by_name.values())
    print(f"{args.trace.name}: wall {wall:.2f} s, CPU {whole:.2f} s", end=" ")
    print(f"({whole / wall:.2f} cores of {cores}); by thread, as last polled ({cpu:.2f} s):")
    print(f"{'thread':<22}{'count':>6}{'user s':>9}{'sys s':>8}{'share':>8}")
    for name, (count, user, system) in sorted(by_name.items(), key=lambda kv: -sum(kv[1][1:])):
        share = (user + system) / cpu if cpu else 0.0
        print(f"{name:<22}{int(count):>6}{user:>9.2f}{system:>8.2f}{share:>8.1%}")
    print(f"\nrunning threads (up to {cores}) per {args.bucket:g} s, and who ran most:")
    buckets: dict[int, list[list[str]]] = collections.defaultdict(list)
    for at, running in polls:
        buckets[int(at / args.bucket)].append(running)
    for index in sorted(buckets):
        rows = buckets[index]
        busy = sum(min(len(r), cores) for r in rows) / len(rows)
        counted = collections.Counter(group(name) for r in rows for name in r)
        top = " ".join(f"{n}:{c * 100 // len(rows)}%" for n, c in counted.most_common(4))
        print(f"{index * args.bucket:7.2f}{busy:6.2f}  {top}")
    polls_cpu = polled.ru_utime + polled.ru_stime - polling.ru_utime - polling.ru_stime
    print(f"\nthe polls' own CPU: {polls_cpu:.2f} s ({polls_cpu / wall:.1%} of a core)")
    print(f"not seen by thread (run after a thread's last poll): {whole - cpu:.2f} s")
    idle = cores * wall - whole - polls_cpu
    print(f"idle: {idle:.2f} core-seconds of {cores * wall:.2f} ({cores} cores; the polls' aside)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
