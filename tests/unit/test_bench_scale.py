"""The growth benchmark's figures over several analyze runs, with figures worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.paths import bench_module

scale = bench_module("scale")
common = bench_module("_common")


def _child(wall_s: float, cpu_s: float, peak: int = 0) -> Any:
    return common.ChildRun(
        argv=("x",),
        returncode=0,
        wall_s=wall_s,
        peak_tree_rss=peak,
        max_rss=peak,
        stdout="",
        stderr="",
        cpu_s=cpu_s,
    )


def test_each_run_is_compared_with_the_floors_around_it() -> None:
    # 10 / mean(4, 6) = 2.0, 12 / mean(6, 4) = 2.4, 30 / mean(4, 6) = 6.0: the median 2.4
    assert scale._median_ratio([10.0, 12.0, 30.0], [4.0, 6.0, 4.0, 6.0]) == pytest.approx(2.4)
    # one run: its wall over the mean of the floor before and after it, as before
    assert scale._median_ratio([9.0], [2.0, 4.0]) == pytest.approx(3.0)


def test_several_runs_give_the_median_run_and_the_largest_peak(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runs = iter(
        [
            (_child(12.0, 20.0, peak=100), {"total_s": 11.0}),
            (_child(9.0, 18.0, peak=300), {"total_s": 8.0}),
            (_child(15.0, 25.0, peak=200), {"total_s": 14.0}),
        ]
    )
    done: list[str] = []

    def analyze(path: Path, profile: Path) -> tuple[Any, dict[str, float]]:
        done.append("analyze")
        return next(runs)

    def floor(path: Path) -> Any:
        done.append("floor")
        return next(floors)

    monkeypatch.setattr(scale, "_analyze", analyze)
    monkeypatch.setattr(scale, "warm", lambda path: done.append(f"warm {path.name}"))
    floors = iter([_child(4.0, 4.0), _child(5.0, 4.0), _child(3.0, 3.0), _child(4.0, 5.0)])

    figures = scale._measure(
        "t",
        tmp_path / "trace.json",
        1000,
        10,
        workdir=tmp_path,
        floor=floor,
        hta=False,
        runs=3,
    )

    # the trace read through once before the first floor, then floors around each run
    assert done == ["warm trace.json", "floor", *["analyze", "floor"] * 3]
    assert figures.floor_s == [4.0, 5.0, 3.0, 4.0]
    assert figures.analyze_runs_wall_s == [12.0, 9.0, 15.0]
    # the run of the median wall time gives the run's own figures
    assert figures.analyze_wall_s == 12.0
    assert figures.analyze_cpu_s == 20.0
    assert figures.phases == {"total_s": 11.0}
    # the memory target is judged on the largest peak of all runs
    assert figures.analyze_peak_rss == 300
    # 12 / 4.5, 9 / 4, 15 / 3.5: the median 2.67
    assert figures.floor_ratio == pytest.approx(12.0 / 4.5)
    # CPU: 20 / 4, 18 / 3.5, 25 / 4: the median 5.14
    assert figures.cpu_ratio == pytest.approx(18.0 / 3.5)


def test_each_analyze_writes_a_new_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the last run's profile is gone before the next run starts: its removal (which --force
    # would do inside the run) is not timed with the analysis
    profile = tmp_path / "scale_profile_t"
    (profile / "tables").mkdir(parents=True)
    (profile / "tables" / "events.parquet").write_bytes(b"x" * 100)
    seen: list[bool] = []

    def measured(argv: list[str]) -> Any:
        seen.append(profile.exists())
        profile.mkdir()  # what the run writes
        return _child(10.0, 18.0)

    monkeypatch.setattr(scale, "run_measured", measured)
    monkeypatch.setattr(scale, "perfledger_argv", lambda trace, out: ["analyze", str(out)])
    monkeypatch.setattr(scale, "_perfledger_phases", lambda profile, output: {"total_s": 9.0})
    for _ in range(2):
        child, phases = scale._analyze(tmp_path / "trace.json", profile)
        assert child.wall_s == 10.0 and phases["total_s"] == 9.0
    assert seen == [False, False]
    assert profile.is_dir()  # the last run's profile stays until the size is done
