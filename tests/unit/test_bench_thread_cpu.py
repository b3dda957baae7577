"""The per-thread CPU benchmark: its threads named at the system level, read back from /proc
with their CPU seconds, and grouped by pool."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.paths import bench_module

thread_cpu = bench_module("thread_cpu")

# A child that names its threads as the benchmark's child does, then keeps one named thread
# busy (on the CPU) and one asleep until told to stop on its standard input.
_PROBE = """
import threading, time
stop = threading.Event()

def spin():
    while not stop.is_set():
        sum(range(1000))

def rest():
    stop.wait()

busy = threading.Thread(target=spin, name="probe-busy_3")
idle = threading.Thread(target=rest, name="probe-idle_12")
busy.start(); idle.start()
time.sleep(0.1)  # the resting thread waiting by now
print("started", flush=True)
sys.stdin.readline()
stop.set(); busy.join(); idle.join()
"""


def test_pool_threads_are_grouped_without_their_numbers() -> None:
    assert thread_cpu.group("advisor_1") == "advisor"
    assert thread_cpu.group("rank-writer_0") == "rank-writer"
    # a name cut to the system's 15 characters ("profile-writer_0") keeps its stem
    assert thread_cpu.group("profile-writer_") == "profile-writer"
    # a worker process's thread keeps its mark; names without a pool number stay whole
    assert thread_cpu.group("beside_0[w]") == "beside[w]"
    assert thread_cpu.group("python3.11") == "python3.11"
    assert thread_cpu.group("page-dropper") == "page-dropper"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_the_threads_of_a_child_are_read_by_their_names() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", thread_cpu.NAMING + _PROBE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        tick = 1 / os.sysconf("SC_CLK_TCK")
        threads: dict[tuple[int, int], object] = {}
        running: list[str] = []
        deadline = time.monotonic() + 10
        # polled until the busy thread has run a while (its ticks counted)
        while time.monotonic() < deadline:
            running += thread_cpu.poll(child.pid, threads, tick)
            busy = [t for t in threads.values() if t.name == "probe-busy_3"]
            if busy and busy[0].user_s + busy[0].system_s >= 0.2:
                break
            time.sleep(0.02)
    finally:
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=30)
    names = {t.name for t in threads.values()}
    # the names the threads were given, not the interpreter's
    assert {"probe-busy_3", "probe-idle_12"} <= names
    by_name = {t.name: t for t in threads.values()}
    assert by_name["probe-busy_3"].user_s + by_name["probe-busy_3"].system_s >= 0.2
    # the sleeping thread ran next to nothing, and was never seen running
    assert by_name["probe-idle_12"].user_s + by_name["probe-idle_12"].system_s < 0.1
    assert "probe-busy_3" in running
    assert "probe-idle_12" not in running
