"""Shared pieces of the benchmarks: child-process timing with peak RSS, and the HTA venv."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = BENCH_DIR.parent
DEFAULT_WORKDIR = BENCH_DIR / "out"
TEST_TRACES = PROJECT_ROOT / "tests" / "data"

# HTA 0.5.0 is the last release on PyPI; it breaks on pandas 3 and numpy 2.
HTA_REQUIREMENTS: tuple[str, ...] = (
    "holistictraceanalysis==0.5.0",
    "pandas==2.2.*",
    "numpy==1.26.*",
)

# Run inside the HTA venv: argv[1] = trace directory, argv[2] = result JSON path.
# Phases are timed from the first line of the driver so that import cost is counted, as it
# is for the perfledger CLI.
HTA_DRIVER = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
from importlib.metadata import version
t1 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
frame = analyzer.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
rows = json.loads(frame.to_json(orient="records"))
with open(sys.argv[2], "w") as fh:
    json.dump({
        "hta_version": version("HolisticTraceAnalysis"),
        "import_s": t1 - t0, "parse_s": t2 - t1, "breakdown_s": t3 - t2,
        "temporal_breakdown": rows,
    }, fh)
"""


@dataclass(frozen=True)
class ChildRun:
    """Wall time and peak memory of one child process (and everything it spawned)."""

    argv: tuple[str, ...]
    returncode: int
    wall_s: float
    peak_tree_rss: int  # largest sum of RSS over the process tree seen by polling, bytes
    max_rss: int  # ru_maxrss of the child and its reaped descendants (largest one), bytes
    stdout: str
    stderr: str
    # the largest tree RSS polled in each second of the run, bytes: where the peak falls
    rss_by_second: tuple[int, ...] = ()
    # user + system CPU seconds of the child and the descendants it waited for
    cpu_s: float = 0.0
    # the CPU seconds the process tree used in each second of the run (cores busy): where
    # the run uses one core of several
    cores_by_second: tuple[float, ...] = ()
    # of cpu_s, the system's (the kernel's work for the process: page faults, file writes)
    sys_s: float = 0.0
    # pages the kernel had to give the child and its descendants (minor faults)
    minor_faults: int = 0

    @property
    def peak_rss(self) -> int:
        """The peak RSS we report: the larger of the two measurements."""
        return max(self.peak_tree_rss, self.max_rss)


def _tree_rss(proc: psutil.Process) -> int:
    """Sum of RSS over a process and its live descendants; 0 once it is gone."""
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    return sum(_rss(member) for member in members)


def _tree_cpu(proc: psutil.Process, seen: dict[int, float]) -> float:
    """User + system CPU seconds of a process and its live descendants, each process's last
    reading kept in ``seen`` (by pid) once it is gone: their sum so far."""
    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        members = []
    for member in members:
        try:
            times = member.cpu_times()
        except psutil.Error:
            continue
        seen[member.pid] = times.user + times.system
    return sum(seen.values())


def _rss(proc: psutil.Process) -> int:
    """RSS of one process; 0 if it has just exited."""
    try:
        return int(proc.memory_info().rss)
    except psutil.Error:
        return 0


# A small Python process forks and execs the measured command, then reports that child's own
# ru_maxrss. Measuring through it keeps the figure clean: a process forked straight from a large
# parent (a test runner) starts with the parent's resident pages counted in its ru_maxrss.
_MAXRSS_WRAPPER = r"""
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
os.write(int(os.environ["PERFLEDGER_BENCH_MAXRSS_FD"]), str(usage.ru_maxrss).encode())
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


def run_measured(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    poll_s: float = 0.05,
) -> ChildRun:
    """Run a command to completion, timing it and recording its peak RSS two ways.

    Polling sees the sum over the whole process tree (HTA parses in a forked pool worker while
    its parent is alive); wait4's ru_maxrss sees the largest single process even between polls.
    """
    read_fd, write_fd = os.pipe()
    child_env = dict(os.environ if env is None else env)
    child_env["PERFLEDGER_BENCH_MAXRSS_FD"] = str(write_fd)
    wrapped = [sys.executable, "-c", _MAXRSS_WRAPPER, *argv]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        popen = subprocess.Popen(
            wrapped, stdout=out, stderr=err, env=child_env, cwd=cwd, pass_fds=(write_fd,)
        )
        os.close(write_fd)
        watched = psutil.Process(popen.pid)
        peak = 0
        by_second: list[int] = []
        polls: list[tuple[float, float]] = []  # (seconds from the start, the tree's CPU s)
        seen: dict[int, float] = {}
        done = threading.Event()

        def poll() -> None:
            nonlocal peak
            while not done.is_set():
                rss = _tree_rss(watched)
                peak = max(peak, rss)
                second = int(time.perf_counter() - start)
                by_second.extend([0] * (second + 1 - len(by_second)))
                by_second[second] = max(by_second[second], rss)
                polls.append((time.perf_counter() - start, _tree_cpu(watched, seen)))
                done.wait(poll_s)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        _, status, usage = os.wait4(popen.pid, 0)
        wall = time.perf_counter() - start
        with os.fdopen(read_fd, "rb") as report:
            reported = report.read().strip()
        done.set()
        poller.join()
        popen.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return ChildRun(
            argv=tuple(argv),
            returncode=popen.returncode,
            wall_s=wall,
            peak_tree_rss=peak,
            max_rss=int(reported or 0) * 1024,  # Linux reports KiB
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
            rss_by_second=tuple(by_second),
            cpu_s=usage.ru_utime + usage.ru_stime,
            sys_s=usage.ru_stime,
            minor_faults=usage.ru_minflt,
            cores_by_second=_cores_by_second(polls),
        )


def _cores_by_second(polls: list[tuple[float, float]]) -> tuple[float, ...]:
    """The CPU seconds used in each whole second of the run, from polls of (time, CPU so far):
    what was used between two polls spread evenly over the time between them, so that a
    late poll never piles two seconds' CPU into one."""
    if not polls:
        return ()
    cores = [0.0] * (int(polls[-1][0]) + 1)
    for (at_a, cpu_a), (at_b, cpu_b) in zip([(0.0, 0.0), *polls[:-1]], polls, strict=True):
        if at_b <= at_a:
            continue
        rate = (cpu_b - cpu_a) / (at_b - at_a)
        second = int(at_a)
        while second < at_b:
            overlap = min(at_b, second + 1) - max(at_a, second)
            cores[min(second, len(cores) - 1)] += rate * overlap
            second += 1
    return tuple(cores)


def ensure_hta_venv(workdir: Path) -> Path:
    """Create (once) a venv holding HTA and its pinned pandas/numpy; return its python."""
    venv = workdir / "hta-venv"
    python = venv / "bin" / "python"
    stamp = venv / ".requirements"
    wanted = "\n".join(HTA_REQUIREMENTS)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"creating HTA venv in {venv} ({' '.join(HTA_REQUIREMENTS)}) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    # pip's own chatter (index warnings) is kept out of the bench output unless it fails.
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        + list(HTA_REQUIREMENTS),
        capture_output=True,
        text=True,
    )
    if install.returncode != 0:
        raise RuntimeError(f"pip could not install HTA into {venv}:\n{install.stderr[-4000:]}")
    stamp.write_text(wanted)
    return python


@dataclass(frozen=True)
class HtaRun:
    """One HTA run: the measured child and what the driver reported."""

    child: ChildRun
    hta_version: str
    import_s: float
    parse_s: float
    breakdown_s: float
    temporal_breakdown: list[dict[str, Any]]


def hta_trace_dir(trace: Path, rank: int, workdir: Path) -> Path:
    """A directory holding only ``trace`` (HTA reads every trace file of a directory)."""
    suffix = ".json.gz" if trace.name.endswith(".gz") else ".json"
    folder = workdir / "hta-dirs" / trace.name.removesuffix(".gz").removesuffix(".json")
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / f"rank-{rank}{suffix}"
    for stale in folder.iterdir():
        if stale != link:
            stale.unlink()
    if not link.is_symlink() or link.resolve() != trace.resolve():
        link.unlink(missing_ok=True)
        link.symlink_to(trace.resolve())
    return folder


def run_hta(python: Path, trace_dir: Path) -> HtaRun:
    """Time HTA's parse + temporal breakdown of ``trace_dir`` in a child process."""
    with tempfile.TemporaryDirectory() as scratch:
        result_path = Path(scratch) / "hta_result.json"
        child = run_measured([str(python), "-c", HTA_DRIVER, str(trace_dir), str(result_path)])
        if child.returncode != 0 or not result_path.exists():
            raise RuntimeError(
                f"HTA failed on {trace_dir} (exit {child.returncode}):\n{child.stderr[-4000:]}"
            )
        result = json.loads(result_path.read_text())
    return HtaRun(
        child=child,
        hta_version=str(result["hta_version"]),
        import_s=float(result["import_s"]),
        parse_s=float(result["parse_s"]),
        breakdown_s=float(result["breakdown_s"]),
        temporal_breakdown=list(result["temporal_breakdown"]),
    )


@functools.cache
def compile_bytecode() -> None:
    """Compile perfledger's modules to bytecode in its checkout, as an installed package has
    them: pip compiles a wheel's modules as it installs them, and Python caches a module's
    bytecode at its first import, unless PYTHONDONTWRITEBYTECODE is set, as it is on these
    machines. Without this every perfledger command of an editable checkout compiles its 200
    modules afresh (about half a second of CPU here), which no installed perfledger does (nor
    HTA, pip-installed in its venv). Once per benchmark process; a module edited since is
    compiled again."""
    import compileall

    package = PROJECT_ROOT / "src" / "perfledger"
    if package.is_dir() and not compileall.compile_dir(str(package), quiet=1):
        raise RuntimeError(f"{package}: a module did not compile")


def perfledger_argv(trace: Path, out_dir: Path) -> list[str]:
    """The command line of ``perfledger analyze`` run from this project's interpreter, its
    modules compiled to bytecode first (:func:`compile_bytecode`)."""
    compile_bytecode()
    return [
        sys.executable,
        "-m",
        "perfledger",
        "analyze",
        str(trace),
        "-o",
        str(out_dir),
        "--force",
    ]


def system_counters() -> dict[str, int]:
    """The pages the system has dirtied (file pages written) and the anonymous huge pages it
    has faulted in so far (/proc/vmstat; 0 where it does not say)."""
    found = {"nr_dirtied": 0, "thp_fault_alloc": 0}
    try:
        with open("/proc/vmstat") as stats:
            for line in stats:
                name, _, value = line.partition(" ")
                if name in found:
                    found[name] = int(value)
    except OSError:
        pass
    return found


def warm(path: Path) -> None:
    """Read ``path`` (a file, or every file of an export folder) through once (outside any
    timing), so that the run timed next finds it in the page cache whatever ran before it."""
    piece = bytearray(16 << 20)
    for file in trace_files(path):
        with open(file, "rb", buffering=0) as source:
            while source.readinto(piece):
                pass


def trace_files(path: Path) -> list[Path]:
    """The files of a trace: the file itself, or every file under an export folder."""
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def trace_bytes(path: Path) -> int:
    """The size of a trace: its file's, or an export folder's files' together."""
    return sum(p.stat().st_size for p in trace_files(path))


def mb(n_bytes: float) -> float:
    """Bytes to decimal megabytes (the unit of the throughput figures)."""
    return n_bytes / 1e6


def alternate_trees(
    script: str, trees: Sequence[Path], runs: int, command: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """``script``'s ``command`` in a child process per source tree (``PYTHONPATH=<tree>/src``),
    alternating A B B A ... until each tree ran ``runs`` times: the JSON line each child printed
    last, per tree (each also echoed on stderr as it comes)."""
    results: dict[str, list[dict[str, Any]]] = {str(t): [] for t in trees}
    order = [*trees, *reversed(trees)]
    for run in range(runs):
        for tree in order if run % 2 == 0 else list(reversed(order)):
            if len(results[str(tree)]) >= runs:
                continue
            env = {**os.environ, "PYTHONPATH": str(tree / "src")}
            out = subprocess.run(
                [sys.executable, script, *command],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            got = json.loads(out.splitlines()[-1])
            results[str(tree)].append(got)
            print(str(tree), json.dumps(got), file=sys.stderr, flush=True)
    return results


def tree_child(code: str, tree: Path, args: Sequence[str]) -> dict[str, Any]:
    """``python -c code args`` with ``PYTHONPATH=<tree>/src``: the JSON line it printed last
    (a failed child ends the bench with its error's tail)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the child failed: {done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures
