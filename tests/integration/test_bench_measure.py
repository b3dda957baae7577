"""Peak RSS of a child process tree as the benchmarks measure it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.paths import bench_module

MB = 1_000_000


common = bench_module("_common")

# Touches every page (b"x" * n), unlike bytearray(n) whose zeroed pages may never be resident.
HOLD_150MB = "import time; block = b'x' * 150_000_000; time.sleep(0.6)"


def test_single_process_peak() -> None:
    run = common.run_measured([sys.executable, "-c", HOLD_150MB])
    assert run.returncode == 0
    assert 150 * MB <= run.max_rss < 300 * MB
    assert 150 * MB <= run.peak_tree_rss < 300 * MB
    assert run.wall_s >= 0.6


def test_tree_peak_adds_concurrent_children() -> None:
    # Parent and child each hold 150 MB at the same time: the tree holds 300 MB, no single
    # process more than about 150 MB. The parent fills its block before it starts the child,
    # so that both are held for the whole of the child's sleep however slowly pages are given
    # (filled alongside each other, a slow machine left the polls too short a window).
    hold = "import time; block = b'x' * 150_000_000; time.sleep(1.0)"
    script = (
        "import subprocess, sys; block = b'y' * 150_000_000; "
        f"subprocess.run([sys.executable, '-c', {hold!r}], check=True)"
    )
    run = common.run_measured([sys.executable, "-c", script])
    assert run.returncode == 0
    assert run.peak_tree_rss >= 300 * MB
    assert 150 * MB <= run.max_rss < 300 * MB
    assert run.peak_rss == run.peak_tree_rss


def test_page_faults_count_the_pages_touched() -> None:
    # 150 MB touched once: at least that many pages given to the child (huge pages aside,
    # 4 KiB each), where an interpreter that touches nothing much takes far fewer
    idle = common.run_measured([sys.executable, "-c", "pass"])
    run = common.run_measured([sys.executable, "-c", HOLD_150MB])
    assert run.minor_faults > idle.minor_faults
    assert run.minor_faults - idle.minor_faults >= 150 * MB // (2 * 1024 * 1024)
    assert 0.0 < run.sys_s <= run.cpu_s
    assert 0.0 <= idle.sys_s <= idle.cpu_s


def test_exit_code_and_output_are_kept() -> None:
    run = common.run_measured([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"])
    assert run.returncode == 3
    assert run.stdout.strip() == "out"


def test_cores_by_second_count_the_busy_processes_of_the_tree() -> None:
    # one second asleep, then a child and its parent each spinning for two seconds
    spin = "import time; end = time.process_time() + 2.0\nwhile time.process_time() < end: pass"
    script = (
        "import subprocess, sys, time; time.sleep(1.0); "
        f"child = subprocess.Popen([sys.executable, '-c', {spin!r}]); "
        f"exec({spin!r}); child.wait()"
    )
    run = common.run_measured([sys.executable, "-c", script])
    assert run.returncode == 0
    cores = run.cores_by_second
    assert cores[0] < 0.3  # asleep (the interpreter's start aside)
    # about 4 CPU seconds in all, none of it lost when the child exits; at most 2 cores a second
    assert 3.5 <= sum(cores) <= run.cpu_s + 0.2
    assert max(cores) <= 2.2


def test_a_late_poll_spreads_its_cpu_over_the_seconds_it_spans() -> None:
    # one core to 0.5 s, then two cores to 2.5 s, polled at 0.5 s and (late) at 2.5 s only
    cores = common._cores_by_second([(0.5, 0.5), (2.5, 4.5)])
    assert cores == pytest.approx((1.5, 2.0, 1.0))  # never 4 cores in the second it lands
    assert common._cores_by_second([]) == ()


def test_page_cost_touches_the_pages_of_each_case(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    page_cost = bench_module("page_cost")
    argv = ["--size-mb", "32", "--waits", "0.1", "--rounds", "1", "--settle", "0.1"]
    assert page_cost.main(argv) == 0
    out = capsys.readouterr().out
    cases = json.loads(out.strip().splitlines()[-1])["cases"]
    assert set(cases) == {
        *("fresh", "fresh 4k", "again", "after 0.1s"),
        *("file", "file again", "file 1m", "file 64k"),
    }
    # every page of the 32 MiB array faulted in by the process (4 KiB pages: 8192; huge
    # pages: fewer; kept off them: every one), none for the file, which the system's cache
    # holds
    for name in ("fresh", "again", "after 0.1s"):
        assert 8 <= cases[name]["faults"] <= 8192 + 2048, cases[name]
    assert 8 <= cases["fresh 4k"]["faults"] <= 8192 + 2048, cases["fresh 4k"]
    policy = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if policy.exists() and "[always]" not in policy.read_text():
        # huge pages only where asked for: kept off them, the array takes every small page
        assert cases["fresh 4k"]["faults"] >= 8192, cases["fresh 4k"]
    for name in ("file", "file again", "file 1m", "file 64k"):
        assert cases[name]["faults"] < 1024, cases[name]
    assert all(c["sys_s"] >= 0 and c["wall_s"] > 0 for c in cases.values())
