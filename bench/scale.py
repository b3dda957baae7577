"""Growth benchmark: ``perfledger analyze`` against the decode floor at 500 MB, 1.5 GB (and 5 GB).

For each size, one after the other on the same file (in the page cache: the generator or a
previous run read it), each in a child process:
  - the decode floor (as bench/ingest.py defines it): the trace's events decoded by the
    importer's typed msgspec decoder, one process, nothing kept; run before and after each
    analyze, each analyze compared with the mean of the two around it (the machine is
    shared: the spread is printed);
  - ``perfledger analyze TRACE -o DIR --force --no-ledger``, ``--runs`` times (default once),
    each into a new DIR (the previous run's removed before it, outside the timing), its
    modules compiled to bytecode first, as an installed perfledger has them
    (``_common.compile_bytecode``: these machines set PYTHONDONTWRITEBYTECODE),
    a floor after each: wall, CPU, peak RSS, the largest RSS of each second, the phases
    meta.json records, and what the machine did meanwhile (/proc/vmstat: the MB of file
    pages dirtied and of anonymous huge pages faulted in; run it on an otherwise quiet
    machine). With several runs the ratios are the medians of the runs' own
    ratios, the figures of one run (the time, phases, seconds) are those of the run of the
    median wall time, and the peak RSS is the largest of all runs;
  - HTA 0.5.0's parse + temporal breakdown (``--skip-hta`` leaves it out).
Prints analyze / floor (target <= 2.5 at 1.5 GB) and peak RSS / raw JSON size (target <= 1.0
at 1.5 GB; the 5 GB trace under 5 GB). ``--ascend`` runs the same growth figures on
torch_npu exports made by bench/make_ascend.py (floor: reading every file of the export:
JSON decoded by msgspec, CSV parsed by pyarrow, the database's tables scanned by sqlite3).

Usage: python bench/scale.py [--sizes 500 1500] [--5gb] [--skip-hta] [--ascend text|db]
       [--runs N] [--workdir bench/out] [--check]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_WORKDIR,
    ChildRun,
    ensure_hta_venv,
    hta_trace_dir,
    mb,
    perfledger_argv,
    run_hta,
    run_measured,
    system_counters,
    warm,
)
from ingest import _decode_floor, _perfledger_phases, _trace_rank  # noqa: E402
from make_trace import DEFAULT_SOURCE, make_scaled_trace  # noqa: E402

TARGET_FLOOR_RATIO = 2.5  # analyze wall / decode floor wall, 1.5 GB trace
TARGET_RSS_MULTIPLE = 1.0  # analyze peak RSS / raw JSON size, 1.5 GB trace
TARGET_5GB_RSS_BYTES = 5e9
DEFAULT_SIZES = (500.0, 1500.0)
FIVE_GB = 5000.0

# The floor of an Ascend export: every file the importer reads, read by the fastest plain
# reader of its kind, nothing kept.
_ASCEND_FLOOR = """
import sqlite3, sys
from pathlib import Path
import msgspec
import pyarrow.csv as pv
rows = 0
for path in sorted(Path(sys.argv[1]).rglob("*")):
    if not path.is_file():
        continue
    if path.suffix == ".json":
        rows += len(msgspec.json.decode(path.read_bytes()) or ())
    elif path.suffix == ".csv":
        rows += pv.read_csv(path).num_rows
    elif path.suffix == ".db":
        # as the importer opens it: read-only, no -wal or -shm file made beside it
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        names = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        for (table,) in names:
            for batch in iter(db.execute(f'SELECT * FROM "{table}"').fetchmany, []):
                rows += len(batch)
        db.close()
print(rows)
"""


@dataclass
class SizeFigures:
    """One size: the trace, the floor, analyze and (optionally) HTA."""

    label: str
    path: str
    raw_bytes: int
    events: int
    floor_s: list[float]
    floor_cpu_s: list[float]
    analyze_wall_s: float
    analyze_cpu_s: float
    # of the CPU seconds, the system's, and the minor page faults (floor: before, after)
    floor_sys_s: list[float]
    analyze_sys_s: float
    floor_faults: list[int]
    analyze_faults: int
    analyze_peak_rss: int
    analyze_max_single_rss: int
    phases: dict[str, float]
    rss_mb_by_second: list[int]
    # CPU seconds of the process tree in each second: the cores it kept busy
    cores_by_second: list[float]
    hta: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    # every run's wall and CPU seconds and peak RSS, in order (the floors: one before the
    # first run, one after each)
    analyze_runs_wall_s: list[float] = field(default_factory=list)
    analyze_runs_cpu_s: list[float] = field(default_factory=list)
    analyze_runs_peak_rss: list[int] = field(default_factory=list)
    # what the machine did during the run of the median wall time (/proc/vmstat): the MB of
    # file pages dirtied and of anonymous huge pages faulted in (-1: not counted)
    analyze_dirtied_mb: int = -1
    analyze_huge_mb: int = -1

    @property
    def floor_mean_s(self) -> float:
        return sum(self.floor_s) / len(self.floor_s)

    @property
    def floor_ratio(self) -> float:
        """Analyze's wall seconds / the floor's around it (the median over the runs)."""
        return _median_ratio(self.analyze_runs_wall_s or [self.analyze_wall_s], self.floor_s)

    @property
    def cpu_ratio(self) -> float:
        """CPU seconds of analyze (its workers included) / those of the floor: the steadier
        figure on a shared machine, where wall seconds stretch with the other jobs' load."""
        return _median_ratio(self.analyze_runs_cpu_s or [self.analyze_cpu_s], self.floor_cpu_s)

    @property
    def rss_multiple(self) -> float:
        return self.analyze_peak_rss / self.raw_bytes


def _median_ratio(runs: list[float], floors: list[float]) -> float:
    """The median of each run / the mean of the floors before and after it (run i between
    floors i and i + 1); where the floors are not one more than the runs, the median run /
    the mean of all the floors."""
    if len(floors) != len(runs) + 1:
        return statistics.median(runs) / (sum(floors) / len(floors))
    return statistics.median(
        run / ((before + after) / 2)
        for run, before, after in zip(runs, floors[:-1], floors[1:], strict=True)
    )


def _analyze(path: Path, profile: Path) -> tuple[ChildRun, dict[str, float]]:
    """One analyze: the child's figures, and its phases with (``dirtied_mb``, ``huge_mb``)
    what the machine did meanwhile."""
    # each run writes a new profile: the last run's, which --force would replace, is removed
    # first, outside the timing (removing an old profile is not the analysis's work)
    shutil.rmtree(profile, ignore_errors=True)
    counted = system_counters()
    # --no-ledger: the experiments ledger is not the analysis (and its git children, started
    # by vfork, would be counted with the parent's pages by the RSS poll)
    child = run_measured([*perfledger_argv(path, profile), "--no-ledger"])
    counted = {k: v - counted[k] for k, v in system_counters().items()}
    if child.returncode != 0:
        print(child.stdout[-4000:], child.stderr[-4000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"perfledger analyze {path} failed with exit code {child.returncode}")
    phases = _perfledger_phases(profile, child.stdout + child.stderr)
    return child, {
        **phases,
        "dirtied_mb": counted["nr_dirtied"] * 4 // 1024,
        "huge_mb": counted["thp_fault_alloc"] * 2,
    }


def _ascend_floor(export: Path) -> ChildRun:
    child = run_measured([sys.executable, "-c", _ASCEND_FLOOR, str(export)])
    if child.returncode != 0:
        raise SystemExit(f"the Ascend floor run failed: {child.stderr[-2000:]}")
    return child


def _measure(
    label: str,
    path: Path,
    raw_bytes: int,
    events: int,
    *,
    workdir: Path,
    floor: Any,
    hta: bool,
    runs: int = 1,
) -> SizeFigures:
    profile = workdir / f"scale_profile_{label}"
    # read through once first: the first floor would otherwise read what a previous size or
    # another program pushed out of the page cache, and seem slower than the runs beside it
    warm(path)
    print(f"[{label}] decode floor ...", flush=True)
    floors = [floor(path)]
    analyzed: list[tuple[ChildRun, dict[str, float]]] = []
    for number in range(1, runs + 1):
        of = f" (run {number} of {runs})" if runs > 1 else ""
        print(f"[{label}] perfledger analyze{of} ...", flush=True)
        analyzed.append(_analyze(path, profile))
        print(f"[{label}] decode floor again ...", flush=True)
        floors.append(floor(path))
    walls = [child.wall_s for child, _ in analyzed]
    child, phases = analyzed[walls.index(statistics.median_low(walls))]
    phases = dict(phases)
    dirtied, huge = int(phases.pop("dirtied_mb", -1)), int(phases.pop("huge_mb", -1))
    figures = SizeFigures(
        label=label,
        path=str(path),
        raw_bytes=raw_bytes,
        events=events,
        floor_s=[f.wall_s for f in floors],
        floor_cpu_s=[f.cpu_s for f in floors],
        analyze_wall_s=child.wall_s,
        analyze_cpu_s=child.cpu_s,
        floor_sys_s=[f.sys_s for f in floors],
        analyze_sys_s=child.sys_s,
        floor_faults=[f.minor_faults for f in floors],
        analyze_faults=child.minor_faults,
        analyze_peak_rss=max(c.peak_rss for c, _ in analyzed),
        analyze_max_single_rss=max(c.max_rss for c, _ in analyzed),
        phases=phases,
        rss_mb_by_second=[round(mb(rss)) for rss in child.rss_by_second],
        cores_by_second=[round(cores, 2) for cores in child.cores_by_second],
        analyze_runs_wall_s=walls,
        analyze_runs_cpu_s=[c.cpu_s for c, _ in analyzed],
        analyze_runs_peak_rss=[c.peak_rss for c, _ in analyzed],
        analyze_dirtied_mb=dirtied,
        analyze_huge_mb=huge,
    )
    shutil.rmtree(profile, ignore_errors=True)  # gigabytes of profile do not stay around
    if hta:
        python = ensure_hta_venv(workdir)
        folder = hta_trace_dir(path, _trace_rank_of(path), workdir)
        print(f"[{label}] HTA ...", flush=True)
        run = run_hta(python, folder)
        figures.hta = {
            "version": run.hta_version,
            "wall_s": run.child.wall_s,
            "peak_rss": run.child.peak_rss,
            "parse_s": run.parse_s,
            "breakdown_s": run.breakdown_s,
        }
    _print_size(figures)
    return figures


def _trace_rank_of(path: Path) -> int:
    from make_trace import ScaledTrace

    return _trace_rank(ScaledTrace(path, "", 0, 0, 0, 0, 0, 0, 0))


def _print_size(f: SizeFigures) -> None:
    floors = " / ".join(f"{s:.1f}" for s in f.floor_s)
    print(
        f"[{f.label}] {mb(f.raw_bytes):.0f} MB, {f.events:,} events: floor {floors} s "
        f"(mean {f.floor_mean_s:.1f}); analyze {f.analyze_wall_s:.1f} s wall, "
        f"{f.analyze_cpu_s:.1f} s CPU = {f.floor_ratio:.2f}x the floor (CPU: floor "
        f"{' / '.join(f'{s:.1f}' for s in f.floor_cpu_s)} s, {f.cpu_ratio:.2f}x); peak RSS "
        f"{mb(f.analyze_peak_rss):.0f} MB = {f.rss_multiple:.2f}x the file",
        flush=True,
    )
    if len(f.analyze_runs_wall_s) > 1:
        print(
            f"[{f.label}] analyze runs: wall "
            f"{' / '.join(f'{s:.1f}' for s in f.analyze_runs_wall_s)} s, CPU "
            f"{' / '.join(f'{s:.1f}' for s in f.analyze_runs_cpu_s)} s, peak RSS "
            f"{' / '.join(f'{mb(n):.0f}' for n in f.analyze_runs_peak_rss)} MB (below: the "
            "run of the median wall time)",
            flush=True,
        )
    print(
        f"[{f.label}] of the CPU, system: floor "
        f"{' / '.join(f'{s:.1f}' for s in f.floor_sys_s)} s, analyze {f.analyze_sys_s:.1f} s; "
        f"minor page faults: floor {' / '.join(f'{n:,}' for n in f.floor_faults)}, analyze "
        f"{f.analyze_faults:,}",
        flush=True,
    )
    if f.analyze_dirtied_mb >= 0:
        print(
            f"[{f.label}] meanwhile, the machine's file pages dirtied {f.analyze_dirtied_mb:,} MB, "
            f"anonymous huge pages faulted in {f.analyze_huge_mb:,} MB",
            flush=True,
        )
    if f.phases:
        print(f"[{f.label}] phases: " + ", ".join(f"{k} {v:.2f}" for k, v in f.phases.items()))
    if "total_s" in f.phases:
        # meta.json's total_s runs from the start of the profile's build to meta.json: the
        # rest of the child's wall is the interpreter's start, the imports and the exit
        outside = f.analyze_wall_s - f.phases["total_s"]
        print(f"[{f.label}] outside total_s (start, imports, exit): {outside:.2f} s")
    print(f"[{f.label}] RSS MB by second: " + " ".join(map(str, f.rss_mb_by_second)))
    print(f"[{f.label}] cores busy by second: " + " ".join(f"{c:.1f}" for c in f.cores_by_second))
    if f.hta:
        h = f.hta
        print(
            f"[{f.label}] HTA {h['version']}: {h['wall_s']:.1f} s (parse {h['parse_s']:.1f}), "
            f"peak RSS {mb(h['peak_rss']):.0f} MB; analyze is "
            f"{h['wall_s'] / f.analyze_wall_s:.1f}x faster"
        )


def _print_growth(rows: list[SizeFigures]) -> None:
    print(
        f"\n{'trace':<14}{'raw MB':>8}{'events':>11}{'floor s':>9}{'analyze s':>11}"
        f"{'CPU s':>8}{'x floor':>9}{'CPU x':>7}{'peak MB':>9}{'x file':>8}{'HTA s':>8}"
    )
    for f in rows:
        hta = f"{f.hta['wall_s']:>8.1f}" if f.hta else f"{'—':>8}"
        print(
            f"{f.label:<14}{mb(f.raw_bytes):>8.0f}{f.events:>11,}{f.floor_mean_s:>9.1f}"
            f"{f.analyze_wall_s:>11.1f}{f.analyze_cpu_s:>8.1f}{f.floor_ratio:>9.2f}"
            f"{f.cpu_ratio:>7.2f}"
            f"{mb(f.analyze_peak_rss):>9.0f}{f.rss_multiple:>8.2f}{hta}"
        )
    for small, big in zip(rows, rows[1:], strict=False):
        size = big.raw_bytes / small.raw_bytes
        print(
            f"{small.label} -> {big.label}: size x{size:.2f}, analyze time "
            f"x{big.analyze_wall_s / small.analyze_wall_s:.2f}, peak RSS "
            f"x{big.analyze_peak_rss / small.analyze_peak_rss:.2f}"
        )


def _kineto_rows(args: argparse.Namespace) -> list[SizeFigures]:
    sizes = list(args.sizes) + ([FIVE_GB] if args.five_gb else [])
    rows = []
    for size in sizes:
        trace = make_scaled_trace(args.workdir, source=DEFAULT_SOURCE, size_mb=size)
        label = f"kineto_x{trace.copies}"
        rows.append(
            _measure(
                label,
                trace.path,
                trace.raw_bytes,
                trace.events,
                workdir=args.workdir,
                floor=_decode_floor,
                hta=not args.skip_hta and size != FIVE_GB,
                runs=args.runs,
            )
        )
    return rows


def _ascend_rows(args: argparse.Namespace) -> list[SizeFigures]:
    from make_ascend import make_ascend_export

    sizes = list(args.sizes) + ([FIVE_GB] if args.five_gb else [])
    rows = []
    for size in sizes:
        export = make_ascend_export(args.workdir, kind=args.ascend, size_mb=size)
        rows.append(
            _measure(
                f"{args.ascend}_x{export.copies}",
                export.path,
                export.raw_bytes,
                export.events,
                workdir=args.workdir,
                floor=_ascend_floor,
                hta=False,
                runs=args.runs,
            )
        )
    return rows


def _verdicts(rows: list[SizeFigures], ascend: bool) -> dict[str, bool]:
    met: dict[str, bool] = {}
    for f in rows:
        if not ascend and 1000e6 < f.raw_bytes < 2000e6:
            met["floor_ratio_1.5GB"] = f.floor_ratio <= TARGET_FLOOR_RATIO
            met["peak_rss_1.5GB"] = f.rss_multiple <= TARGET_RSS_MULTIPLE
        if f.raw_bytes >= 4000e6:
            met["peak_rss_5GB"] = f.analyze_peak_rss < TARGET_5GB_RSS_BYTES
    for name, ok in met.items():
        print(f"target {name}: {'met' if ok else 'MISSED'}")
    return met


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def main(argv: list[str] | None = None) -> int:
    """Command line of the growth benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--5gb", dest="five_gb", action="store_true", help="add the 5 GB size")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--ascend", choices=("text", "db"), help="torch_npu exports instead")
    parser.add_argument(
        "--runs", type=_positive, default=1, help="analyze runs per size, a floor after each"
    )
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    rows = _ascend_rows(args) if args.ascend else _kineto_rows(args)
    _print_growth(rows)
    met = _verdicts(rows, bool(args.ascend))
    name = f"scale_result_{args.ascend or 'kineto'}.json"
    out = args.workdir / name
    document = {
        "rows": [
            {
                **asdict(f),
                "floor_ratio": f.floor_ratio,
                "cpu_ratio": f.cpu_ratio,
                "rss_multiple": f.rss_multiple,
            }
            for f in rows
        ],
        "targets_met": met,
    }
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"figures written to {out}")
    return 1 if args.check and not all(met.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
