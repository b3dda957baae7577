"""Properties of the accounting, checked against a nanosecond-by-nanosecond oracle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.analysis.accounting import device_accounting
from perfledger.analysis.intervals import union
from perfledger.analysis.steps import step_windows
from perfledger.model import schema
from tests.scenarios import Timeline

KINDS = [schema.KERNEL, schema.COMM, schema.MEMCPY, schema.MEMSET]
HORIZON = 120  # µs; the oracle walks it one µs at a time (tasks are whole µs)

task = st.tuples(
    st.sampled_from(KINDS),
    st.integers(0, HORIZON - 1),  # launch
    st.integers(0, 40),  # queue delay
    st.integers(1, 30),  # duration
    st.integers(7, 9),  # stream
)


def oracle(tasks: list[tuple[str, int, int, int, int]], a: int, b: int) -> dict[str, int]:
    """Category of every µs in [a, b) by priority, counted one by one."""
    counts = dict.fromkeys(["compute", "communication", "memcpy", "memset", "idle"], 0)
    overlapped = 0
    for t in range(a, b):
        running = {
            k for k, launch, delay, dur, _ in tasks if launch + delay <= t < launch + delay + dur
        }
        if schema.KERNEL in running:
            counts["compute"] += 1
            overlapped += schema.COMM in running
        elif schema.COMM in running:
            counts["communication"] += 1
        elif schema.MEMCPY in running:
            counts["memcpy"] += 1
        elif schema.MEMSET in running:
            counts["memset"] += 1
        else:
            counts["idle"] += 1
    counts["overlapped"] = overlapped
    return counts


@settings(max_examples=150, deadline=None)
@given(
    st.lists(task, min_size=1, max_size=12), st.lists(st.integers(10, 60), min_size=1, max_size=3)
)
def test_categories_match_oracle_and_sum_to_window(tasks, step_lengths) -> None:
    t = Timeline()
    cursor = 0
    for number, length in enumerate(step_lengths, start=1):
        t.step(number, cursor, length)
        cursor += length
    for kind, launch, delay, dur, stream in tasks:
        t.launch(launch, launch + delay, dur, kind=kind, stream=stream, launch_dur_us=1)
    events = t.table()
    windows = step_windows(events)
    result = device_accounting(events, windows)
    for window in windows:
        (acc,) = [w for w in result.windows if w.step == window.step]
        acc.self_check()
        assert acc.busy_ns <= acc.wall_ns
        expected = oracle(tasks, window.start_ns // 1000, window.end_ns // 1000)
        got = {
            "compute": acc.compute_ns,
            "communication": acc.communication_ns,
            "memcpy": acc.memcpy_ns,
            "memset": acc.memset_ns,
            "idle": acc.idle_ns,
            "overlapped": acc.overlapped_communication_ns,
        }
        assert got == {k: v * 1000 for k, v in expected.items()}
    # windows tile without overlap
    for before, after in zip(windows, windows[1:], strict=False):
        assert before.end_ns <= after.start_ns


@given(
    st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 30)), max_size=20),
    st.integers(-60, 60),
    st.integers(0, 80),
)
def test_union_covered_matches_oracle(intervals, a, width) -> None:
    starts = np.array([s for s, _ in intervals], dtype=np.int64)
    ends = np.array([s + d for s, d in intervals], dtype=np.int64)
    u = union(starts, ends)
    b = a + width
    expected = sum(
        1 for x in range(a, b) if any(s <= x < e for s, e in zip(starts, ends, strict=False))
    )
    assert int(u.covered(np.array([a]), np.array([b]))[0]) == expected
    assert u.total == sum(
        1 for x in range(-60, 90) if any(s <= x < e for s, e in zip(starts, ends, strict=False))
    )
    assert np.all(u.starts[1:] > u.ends[:-1])
