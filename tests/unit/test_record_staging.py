"""Reading what the workers staged: step logs, step times, overhead, finished traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.errors import PerfledgerError
from perfledger.record.staging import (
    INCOMPLETE_STEP_PREFIX,
    STEP_TIMES_SCHEMA,
    StepRecord,
    finish_trace,
    finish_traces,
    profiler_overhead,
    read_staging,
    read_step_log,
    step_times_table,
)

MS = 1_000_000


def write_log(path: Path, records: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def step(n: int, start_ms: int, end_ms: int, action: str) -> dict[str, Any]:
    return {"event": "step", "step": n, "start_ns": start_ms * MS, "end_ns": end_ms * MS,
            "action": action}  # fmt: skip


def test_a_killed_process_keeps_its_whole_lines(tmp_path: Path) -> None:
    log = write_log(
        tmp_path / "steps-41.jsonl",
        [
            {"event": "start", "pid": 41, "rank": None},
            step(0, 0, 10, "none"),
            step(1, 10, 25, "warmup"),
        ],
        tail='{"event":"step","step":2,"sta',  # SIGKILL in the middle of a write
    )
    process = read_step_log(log)
    assert process.pid == 41
    assert process.rank == 0
    assert [(s.step, s.wall_ns) for s in process.steps] == [(0, 10 * MS), (1, 15 * MS)]
    assert process.end is None
    assert process.end_reason == "killed"
    assert process.open_step is None
    assert process.traces == ()


def test_the_rank_is_the_last_one_the_process_knew(tmp_path: Path) -> None:
    # The environment said nothing; torch.distributed was initialised before the export.
    log = write_log(
        tmp_path / "steps-7.jsonl",
        [
            {"event": "start", "pid": 7, "rank": None, "world_size": None},
            step(0, 0, 5, "save"),
            {"event": "trace", "file": "rank3.json", "rank": 3, "world_size": 4, "backend": "gloo"},
            {
                "event": "end",
                "reason": "exit",
                "step": 1,
                "start_ns": 5 * MS,
                "end_ns": 6 * MS,
                "action": "none",
                "rank": None,
                "backend": None,
            },  # fmt: skip
        ],
    )
    process = read_step_log(log)
    assert process.rank == 3
    assert process.fact("world_size") == 4
    assert process.fact("backend") == "gloo"  # destroyed before the end: kept from the trace
    assert process.traces == (tmp_path / "rank3.json",)
    assert process.open_step == StepRecord(1, 5 * MS, 6 * MS, "none")


def test_a_foreign_file_is_refused_with_its_name(tmp_path: Path) -> None:
    log = write_log(tmp_path / "steps-1.jsonl", [step(0, 0, 1, "none")])
    with pytest.raises(PerfledgerError, match="steps-1.jsonl"):
        read_step_log(log)


def test_step_times_hold_every_complete_step_of_every_rank(tmp_path: Path) -> None:
    for pid, rank in ((20, 1), (10, 0)):
        write_log(
            tmp_path / f"steps-{pid}.jsonl",
            [
                {"event": "start", "pid": pid, "rank": rank},
                step(0, 0, 10, "warmup"),
                step(1, 10, 30, "save"),
                {
                    "event": "end",
                    "reason": "exit",
                    "step": 2,
                    "start_ns": 30 * MS,
                    "end_ns": 31 * MS,
                    "action": "none",
                },  # fmt: skip
            ],
        )
    processes = read_staging(tmp_path)
    assert [p.rank for p in processes] == [0, 1]
    table = step_times_table(processes)
    assert table.schema == STEP_TIMES_SCHEMA
    assert table.to_pylist() == [
        {
            "rank": r,
            "step": s,
            "start_ns": a * MS,
            "end_ns": b * MS,
            "profiled": p,
            "device_ns": None,
        }  # fmt: skip
        for r in (0, 1)
        for s, a, b, p in ((0, 0, 10, False), (1, 10, 30, True))
    ]
    assert step_times_table([]).equals(STEP_TIMES_SCHEMA.empty_table())


def test_overhead_compares_recorded_steps_with_plain_ones() -> None:
    walls = [
        (0, 500, "none"),  # first step: initialisation, not a fair baseline
        (1, 140, "warmup"),  # profiler armed: not a plain step
        (2, 110, "record"),
        (3, 130, "record"),
        (4, 120, "save"),
        (5, 100, "none"),
        (6, 104, "none"),
        (7, 98, "none"),
    ]
    steps = [StepRecord(n, 0, ms * MS, action) for n, ms, action in walls]
    estimate = profiler_overhead(steps)
    assert estimate is not None
    assert estimate.profiled_ms == 120.0  # median of 110, 130, 120
    assert estimate.unprofiled_ms == 100.0  # median of 100, 104, 98
    assert (estimate.profiled_steps, estimate.unprofiled_steps) == (3, 3)
    assert estimate.overhead_pct == pytest.approx(20.0)
    assert profiler_overhead(steps[:5]) is None  # no plain step after the window


def test_device_times_of_the_steps_are_read_from_the_log(tmp_path: Path) -> None:
    # the device's times come when its events have completed, after the steps' own records
    records = [
        {"event": "start", "pid": 7, "rank": 0},
        step(0, 0, 1, "none"),
        step(1, 1, 2, "none"),
        {"event": "device_step", "step": 0, "device_ns": 12 * MS},
        step(2, 2, 3, "none"),
        {"event": "device_step", "step": 1, "device_ns": 11 * MS},
    ]
    process = read_step_log(write_log(tmp_path / "steps-7.jsonl", records))
    assert [(s.step, s.wall_ns, s.device_ns) for s in process.steps] == [
        (0, MS, 12 * MS),
        (1, MS, 11 * MS),
        (2, MS, None),
    ]
    table = step_times_table([process])
    assert table.column("device_ns").to_pylist() == [12 * MS, 11 * MS, None]


def test_asynchronous_steps_are_compared_on_the_device() -> None:
    # A replayed CUDA graph: the host queues a step in 0.3 ms and runs ahead; the device
    # takes 11.7 ms a step. While recording, the profiler's writing waits for the device,
    # so the recorded steps' host times are longer (1.5 ms) although the device's barely are.
    walls = [(0, 0.3, 30.0, "none"), (1, 0.3, 11.7, "warmup")]
    walls += [(n, 1.5, 11.9, "record") for n in range(2, 6)] + [(6, 1.5, 11.9, "save")]
    walls += [(n, 0.3, 11.7, "none") for n in range(7, 12)]
    steps = [
        StepRecord(n, 0, round(host * MS), action, round(device * MS))
        for n, host, device, action in walls
    ]
    estimate = profiler_overhead(steps)
    assert estimate is not None
    assert estimate.timed == "device"
    assert (estimate.profiled_ms, estimate.unprofiled_ms) == (11.9, 11.7)
    assert estimate.overhead_pct == pytest.approx(100 * (11.9 / 11.7 - 1))
    # one compared step without its device time: every step on the host's clock
    steps[8] = StepRecord(8, 0, round(0.3 * MS), "none")
    on_host = profiler_overhead(steps)
    assert on_host is not None
    assert on_host.timed == "host"
    assert (on_host.profiled_ms, on_host.unprofiled_ms) == (1.5, 0.3)


def test_overhead_compares_the_window_with_its_neighbouring_plain_steps() -> None:
    # Steps 2-4 recorded; 5-9 plain under the same conditions; from step 10 the machine got
    # busy and every step took 200 ms. Only the five plain steps nearest the window compare.
    walls = [(0, 500, "none"), (1, 140, "warmup")]
    walls += [(2, 110, "record"), (3, 130, "record"), (4, 120, "save")]
    walls += [(5, 98, "none"), (6, 100, "none"), (7, 102, "none"), (8, 100, "none")]
    walls += [(9, 104, "none")] + [(n, 200, "none") for n in range(10, 40)]
    steps = [StepRecord(n, 0, ms * MS, action) for n, ms, action in walls]
    estimate = profiler_overhead(steps)
    assert estimate is not None
    assert (estimate.profiled_ms, estimate.unprofiled_ms) == (120.0, 100.0)
    assert (estimate.profiled_steps, estimate.unprofiled_steps) == (3, 5)
    assert estimate.overhead_pct == pytest.approx(20.0)
    # Noise, by hand: recorded 110/120/130 have MAD 10 ms, plain 98/100/102/100/104 MAD 2 ms;
    # sigma = 1.4826 MAD, a median's standard error 1.2533 sigma / sqrt(n), 95 %: 1.96.
    se_recorded = 1.2533 * 1.4826 * 10 / 3**0.5
    se_plain = 1.2533 * 1.4826 * 2 / 5**0.5
    expected = 100 * 1.96 * (se_recorded**2 + se_plain**2) ** 0.5 / 100.0
    assert estimate.noise_pct == pytest.approx(expected, rel=1e-6)
    assert 21.0 < expected < 21.5


def test_overhead_neighbours_come_from_both_sides_of_the_window() -> None:
    # --skip 6: plain steps 1-4 before the window (5 warms up), 8-9 after; the steps far
    # after it (10-19) are not compared.
    walls = [(0, 900, "none")] + [(n, 100, "none") for n in range(1, 5)]
    walls += [(5, 300, "warmup"), (6, 150, "record"), (7, 150, "save")]
    walls += [(8, 100, "none"), (9, 100, "none")] + [(n, 50, "none") for n in range(10, 20)]
    steps = [StepRecord(n, 0, ms * MS, action) for n, ms, action in walls]
    estimate = profiler_overhead(steps)
    assert estimate is not None
    assert estimate.unprofiled_ms == 100.0
    assert estimate.unprofiled_steps == 5  # 4 and 8 (distance 1 and 1), 3, 9, 2
    assert estimate.overhead_pct == pytest.approx(50.0)
    assert estimate.noise_pct is not None and estimate.noise_pct >= 0.0


def test_interleaved_steps_compare_each_recorded_step_with_the_next_plain_one() -> None:
    # Interleaved (recorded, plain, warm-up): the machine gets busy after step 7 and every step
    # takes 2.5 times longer; each recorded step still runs 10 % longer than the plain step
    # right after it, which is the profiler's cost.
    walls = [(0, 900, "none"), (1, 150, "warmup")]
    for cycle, scale in enumerate((1.0, 1.0, 2.5, 2.5, 2.5)):
        base = 2 + 3 * cycle
        walls += [(base, 110 * scale, "save"), (base + 1, 100 * scale, "none")]
        walls += [(base + 2, 150 * scale, "warmup")]
    walls += [(n, 100, "none") for n in range(17, 30)]  # quiet again after the window
    steps = [StepRecord(n, 0, round(ms * MS), action) for n, ms, action in walls]
    estimate = profiler_overhead(steps, interleaved=True)
    assert estimate is not None and estimate.paired
    assert (estimate.profiled_steps, estimate.unprofiled_steps) == (5, 5)
    assert estimate.profiled_ms == 275.0 and estimate.unprofiled_ms == 250.0  # 110 x 2.5, 100 x 2.5
    assert estimate.overhead_pct == pytest.approx(10.0)
    assert estimate.noise_pct == pytest.approx(0.0, abs=1e-6)  # every pair's ratio is 1.1
    # without the plain steps inside the window, the quiet steps after it are the comparison:
    # 275 ms against 100 ms, an overhead the profiler never caused
    unpaired = [s for s in steps if not (s.action == "none" and 2 < s.step < 17)]
    contrast = profiler_overhead(unpaired, interleaved=True)
    assert contrast is not None and not contrast.paired
    assert contrast.overhead_pct == pytest.approx(175.0)


def test_a_window_of_several_processes_is_not_read_as_interleaved() -> None:
    # Two DDP processes, each recording steps 2-4 in one window: each process's last recorded
    # step is followed by a plain one (two such pairs in all), which is no interleaving: the
    # window (110/130/120 ms) is compared with the plain steps around it (100 ms)
    walls = [(0, 500, "none"), (1, 140, "warmup"), (2, 110, "record"), (3, 130, "record")]
    walls += [(4, 120, "save"), (5, 100, "none"), (6, 100, "none"), (7, 100, "none")]
    one = [StepRecord(n, 0, ms * MS, action) for n, ms, action in walls]
    estimate = profiler_overhead([*one, *one])
    assert estimate is not None and not estimate.paired
    assert (estimate.profiled_ms, estimate.unprofiled_ms) == (120.0, 100.0)
    assert estimate.profiled_steps == 6


def test_overhead_noise_is_unknown_with_a_single_step_on_either_side() -> None:
    walls = [(0, 500, "none"), (1, 140, "warmup"), (2, 120, "save"), (3, 100, "none")]
    steps = [StepRecord(n, 0, ms * MS, action) for n, ms, action in walls]
    estimate = profiler_overhead(steps)
    assert estimate is not None
    assert estimate.overhead_pct == pytest.approx(20.0)
    assert estimate.noise_pct is None


def test_finishing_a_trace_gzips_it_and_renames_only_the_incomplete_step(tmp_path: Path) -> None:
    text = (
        '{"traceEvents": [{"name": "ProfilerStep#6", "ts": 1},'
        ' {"name": "ProfilerStep#60"}, {"name": "ProfilerStep#5"},'
        ' {"cat": "gpu_user_annotation", "name": "ProfilerStep#6"}]}'
    )
    trace = tmp_path / "rank0.json"
    trace.write_text(text)
    finished = finish_trace(trace, incomplete_step=6, chunk_bytes=7)
    assert finished == tmp_path / "rank0.json.gz"
    assert not trace.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json.gz"]
    expected = text.replace('"ProfilerStep#6"', f'"{INCOMPLETE_STEP_PREFIX}6"')
    assert gzip.decompress(finished.read_bytes()).decode() == expected
    assert '"ProfilerStep#60"' in expected and '"ProfilerStep#5"' in expected


@settings(max_examples=60, deadline=None)
@given(
    body=st.lists(st.sampled_from(['"ProfilerStep#3"', "ProfilerStep#3", '"', "x", "#3", ", "])),
    chunk=st.integers(min_value=1, max_value=40),
)
def test_renaming_is_the_same_whatever_the_chunk_size(
    tmp_path_factory: pytest.TempPathFactory, body: list[str], chunk: int
) -> None:
    trace = tmp_path_factory.mktemp("trace") / "rank0.json"
    text = "".join(body)
    trace.write_text(text)
    finished = finish_trace(trace, incomplete_step=3, chunk_bytes=chunk)
    expected = text.replace('"ProfilerStep#3"', f'"{INCOMPLETE_STEP_PREFIX}3"')
    assert gzip.decompress(finished.read_bytes()).decode() == expected


def kineto_chunk(events: list[str], *, base: int = 1790857026000000000, rank: int = 0) -> str:
    """A chunk as torch writes it: keys before the events and after them, events indented."""
    joined = ",\n  ".join(events)
    return (
        '{\n  "schemaVersion": 1,\n'
        f'  "distributedInfo": {{"rank": {rank}}},\n'
        f'  "baseTimeNanoseconds": {base},\n  "traceEvents": [\n  {joined}\n  ],\n'
        '  "deviceProperties": [{"id": 0, "name": "[dev]"}],\n  "traceName": "chunk"\n}'
    )


def step_event(n: int, ts: str) -> str:
    return f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{n}", "ts": {ts}}}'


def test_chunks_join_into_one_trace_keeping_every_digit_of_the_events(tmp_path: Path) -> None:
    # µs timestamps with ns digits that a float cannot hold: they must be copied as text.
    chunks = [
        tmp_path / "trace-7-00000.json",
        tmp_path / "trace-7-00001.json",
        tmp_path / "trace-7-00002.json",
    ]
    chunks[0].write_text(kineto_chunk([step_event(1, "5281460335101.491")]))
    chunks[1].write_text(kineto_chunk([]))  # a chunk without events
    chunks[2].write_text(
        kineto_chunk([step_event(2, "5281460343953.503"), step_event(3, "5281460354798.777")],
                     rank=3)
    )  # fmt: skip
    target = finish_traces(chunks, tmp_path / "rank3.json.gz", incomplete_step=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank3.json.gz"]
    text = gzip.decompress(target.read_bytes()).decode()
    document = json.loads(text)
    names = [e["name"] for e in document["traceEvents"]]
    assert names == ["ProfilerStep#1", "ProfilerStep#2", f"{INCOMPLETE_STEP_PREFIX}3"]
    for ts in ("5281460335101.491", "5281460343953.503", "5281460354798.777"):
        assert f'"ts": {ts}' in text
    # the last chunk's keys: it knows the rank torch.distributed gave later
    assert document["distributedInfo"] == {"rank": 3}
    assert document["deviceProperties"] == [{"id": 0, "name": "[dev]"}]


def test_chunks_of_different_base_times_are_joined_on_one_time_base(tmp_path: Path) -> None:
    first, second = tmp_path / "trace-7-00000.json", tmp_path / "trace-7-00001.json"
    first.write_text(kineto_chunk([step_event(1, "1000.5")], base=2_000_000_000))
    second.write_text(kineto_chunk([step_event(2, "10.25")], base=3_000_000_000))
    target = finish_traces([first, second], tmp_path / "rank0.json.gz")
    document = json.loads(gzip.decompress(target.read_bytes()))
    assert document["baseTimeNanoseconds"] == 3_000_000_000
    assert [e["ts"] for e in document["traceEvents"]] == [1000.5 - 1_000_000.0, 10.25]


def test_a_chunk_that_is_not_a_kineto_trace_is_an_error_naming_it(tmp_path: Path) -> None:
    good, bad = tmp_path / "trace-7-00000.json", tmp_path / "trace-7-00001.json"
    good.write_text(kineto_chunk([]))
    bad.write_text('{"traceEvents": [')
    with pytest.raises(PerfledgerError, match="trace-7-00001.json"):
        finish_traces([good, bad], tmp_path / "rank0.json.gz")
    assert good.exists() and bad.exists()
