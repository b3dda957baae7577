"""When each step of one ``perfledger analyze`` ran, on which thread, and for how much CPU.

``python bench/phase_timeline.py TRACE [-o OUT] [--also MODULE:NAME ...]`` runs the analyze in
this process with the functions below (and each ``--also``: a module's function, or
``Class.method``, as its callers look it up) wrapped: each call prints its start and end
(seconds from this script's start), its wall and its thread's CPU seconds, of those the
system's (page faults, file writes), the whole process's CPU seconds meanwhile (all its
threads: ``proc`` / ``wall`` is how many cores it kept busy; the import's worker processes are
not counted), its thread's minor page faults, the MB of huge pages the system zeroed for new
anonymous memory meanwhile (``thp_fault_alloc`` of /proc/vmstat, 2 MB each: any thread's, this
process's workers' too), the process's anonymous memory when the step ended
(/proc/self/smaps_rollup), and the thread it ran on, in order of start. What runs beside what
(``analysis.beside``, the writer threads) shows as overlapping lines of other threads; a step
whose wall time is well above its CPU waited (for a thread beside it, for the GIL, or for the
other core).

The wrappers replace the names where the calling module looks them up; a name a module no
longer has is listed as skipped. Each call's wrapper reads /proc twice (about 10 ms with the
analysis's many maps): time steps called a few times, not hundreds. The figures are one
run's: rerun it for the spread.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_START = time.perf_counter()
# name, thread, start, end, thread CPU s, of which system s, process CPU s, minor faults,
# huge pages faulted in meanwhile, anonymous MB after
_CALLS: list[tuple[str, str, float, float, float, float, float, int, int, int]] = []
_HUGE_PAGE_MB = 2


def _huge_faults() -> int:
    """Huge pages the system has faulted in for anonymous memory so far (0: not Linux)."""
    try:
        with open("/proc/vmstat") as stats:
            for line in stats:
                if line.startswith("thp_fault_alloc "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _anonymous_mb() -> int:
    """This process's anonymous memory, MB (0 where /proc does not say)."""
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


# (module whose name is wrapped, function name): the analyze's steps, as its callers see them
STEPS = (
    ("perfledger.sources.kineto_parallel", "read_blocks"),
    ("perfledger.sources.kineto", "_events_table"),
    ("perfledger.sources.kineto", "_strings_in_order"),
    ("perfledger.sources.kineto", "_other_columns"),
    ("perfledger.sources.kineto", "_start_order"),
    ("perfledger.sources.kineto", "_placed_numbers"),
    ("perfledger.sources.kineto", "counters_table"),
    ("perfledger.run.tasks", "_mapped_plain"),
    ("perfledger.analysis.profile", "repair_trace"),
    ("perfledger.analysis.profile", "launch_starts"),
    ("perfledger.analysis.profile", "step_plan"),
    ("perfledger.analysis.profile", "assign_steps"),
    ("perfledger.analysis.profile", "comm_split"),
    ("perfledger.analysis.profile", "device_accounting"),
    ("perfledger.analysis.profile", "rank_checks"),
    ("perfledger.analysis.ops", "link_device_tasks"),
    ("perfledger.run.tasks", "analyze_rank"),
    ("perfledger.run.tasks", "profile_of_rank"),
    ("perfledger.run.tasks", "_mapped_tables"),
    ("perfledger.run.tasks", "_write_mapped"),
    ("perfledger.analysis.critical_path", "build_graph"),
    ("perfledger.run.tasks", "prepare_rank"),
    ("perfledger.run.tasks", "rank_report"),
    ("perfledger.run.tasks", "diagnose_rank"),
    ("perfledger.run.pipeline", "analysis_from_results"),
    ("perfledger.run.pipeline", "_write_profile"),
    ("perfledger.run.pipeline", "_write_independent"),
    ("perfledger.run.pipeline", "write_table"),
    ("perfledger.run.pipeline", "write_csv"),
    ("perfledger.profiledir.artefacts", "write_timelines"),
    ("perfledger.profiledir.artefacts", "write_artefacts"),
    ("perfledger.profiledir.artefacts", "print_profile"),
    ("perfledger.render.timeline.writer", "place_timeline"),
    ("perfledger.render.timeline.writer", "prepare_rows"),
)


def _wrapped(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        began, cpu = time.perf_counter(), time.thread_time()
        usage, process = resource.getrusage(resource.RUSAGE_THREAD), time.process_time()
        huge = _huge_faults()
        try:
            return function(*args, **kwargs)
        finally:
            after = resource.getrusage(resource.RUSAGE_THREAD)
            _CALLS.append(
                (
                    name,
                    threading.current_thread().name,
                    began - _START,
                    time.perf_counter() - _START,
                    time.thread_time() - cpu,
                    after.ru_stime - usage.ru_stime,
                    time.process_time() - process,
                    after.ru_minflt - usage.ru_minflt,
                    _huge_faults() - huge,
                    _anonymous_mb(),
                )
            )

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("-o", "--out", default="bench/out/phase_timeline")
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="MODULE:NAME",
        help="a further function to time (NAME may be Class.method), as its callers look it up",
    )
    args = parser.parse_args()
    # the process set up as the command line sets up its own before numpy loads (one BLAS
    # thread, ordinary pages, one heap): the wrapped modules load numpy first
    import os

    from perfledger import __main__ as command_line
    from perfledger.heap import keep_freed_heap

    for name, value in {
        **command_line._BLAS_THREADS,
        **command_line.ORDINARY_PAGES_ENVIRONMENT,
        **command_line._ONE_HEAP,
    }.items():
        os.environ.setdefault(name, value)
    keep_freed_heap()
    if any(":" not in step for step in args.also):
        parser.error("--also takes MODULE:NAME")
    also = [tuple(step.split(":", 1)) for step in args.also]
    for module_name, name in [*STEPS, *also]:
        owner: Any = importlib.import_module(module_name)
        *classes, attribute = name.split(".")
        for part in classes:
            owner = getattr(owner, part, None)
        if owner is not None and hasattr(owner, attribute):
            setattr(owner, attribute, _wrapped(name, getattr(owner, attribute)))
        else:
            print(f"skipped: {module_name}.{name}", file=sys.stderr)
    cpu = time.process_time()
    code = command_line.main(["analyze", args.trace, "-o", args.out, "--force", "--no-ledger"])
    end = time.perf_counter() - _START
    print(
        f"{'start':>7} {'end':>7} {'wall':>6} {'cpu':>6} {'sys':>5} {'proc':>6} {'faults':>8}"
        f" {'thp MB':>6} {'anon MB':>7}  thread          step"
    )
    for name, thread, began, ended, used, system, process, faults, huge, anon in sorted(
        _CALLS, key=lambda c: c[2]
    ):
        print(
            f"{began:7.2f} {ended:7.2f} {ended - began:6.2f} {used:6.2f} {system:5.2f} "
            f"{process:6.2f} {faults:8d} {huge * _HUGE_PAGE_MB:6d} {anon:7d}  "
            f"{thread[:15]:15} {name}"
        )
    print(f"end {end:.2f} s, the process's CPU {time.process_time() - cpu:.2f} s, exit {code}")


if __name__ == "__main__":
    main()
