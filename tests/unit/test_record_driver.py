"""The in-process step driver: how steps are cut, what is logged, when the profiler acts.

A fake profiler that follows torch.profiler's schedule contract stands in for torch, so the
sequences of step signals are checked exactly and fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from perfledger.record.inprocess import (
    ACTION_NONE,
    ACTION_RECORD,
    ACTION_SAVE,
    ACTION_WARMUP,
    DriverOptions,
    StepDriver,
    planned_action,
    window_ends,
)
from perfledger.record.staging import incomplete_recorded_step, read_step_log


class FakeProfiler:
    """torch.profiler.profile's schedule contract: the trace is ready when a SAVE step ends."""

    def __init__(self, options: DriverOptions, on_trace_ready: Any) -> None:
        self.options = options
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.calls: list[tuple[str, int]] = []
        self.exports = 0
        self.exported_steps: list[int] = []

    def _action(self, step: int) -> str:
        options = self.options
        return planned_action(
            step, options.skip, options.steps, options.flush_steps, interleave=options.interleave
        )

    def start(self) -> None:
        self.calls.append(("start", self.step_num))

    def step(self) -> None:
        ending = self._action(self.step_num)
        self.step_num += 1
        self.calls.append(("step", self.step_num))
        if ending == ACTION_SAVE:
            self.on_trace_ready(self)
            self.exported_steps.append(self.step_num - 1)

    def stop(self) -> None:
        self.calls.append(("stop", self.step_num))
        if self._action(self.step_num) in (ACTION_RECORD, ACTION_SAVE):
            self.on_trace_ready(self)

    def export_chrome_trace(self, path: str) -> None:
        self.exports += 1
        Path(path).write_text('{"traceEvents": []}')


def make_driver(
    tmp_path: Path,
    skip: int = 1,
    steps: int = 2,
    manual: bool = False,
    flush_steps: int = 0,
    interleave: bool = False,
) -> Any:
    fakes: list[FakeProfiler] = []

    def factory(options: DriverOptions, ready: Any) -> FakeProfiler:
        fakes.append(FakeProfiler(options, ready))
        return fakes[-1]

    options = DriverOptions(skip=skip, steps=steps, flush_steps=flush_steps, interleave=interleave)
    driver = StepDriver(tmp_path, options, manual=manual, profiler_factory=factory)
    return driver, fakes


def logged(tmp_path: Path) -> list[dict[str, Any]]:
    (log,) = tmp_path.glob("steps-*.jsonl")
    return [json.loads(line) for line in log.read_text().splitlines()]


def logged_steps(tmp_path: Path) -> list[tuple[int, str]]:
    return [(r["step"], r["action"]) for r in logged(tmp_path) if r["event"] == "step"]


def chunk(n: int) -> str:
    """The name of this process's n-th trace chunk."""
    return f"trace-{os.getpid()}-{n:05d}.json"


@pytest.fixture(autouse=True)
def _restore_process_hooks() -> Any:
    # The driver installs atexit, excepthook and signal handlers when it starts; finish()
    # removes them. Every test finishes its driver, this only guards against a failing one.
    import signal
    import sys

    hook, sigint, sigterm = sys.excepthook, signal.getsignal(2), signal.getsignal(15)
    yield
    sys.excepthook = hook
    signal.signal(signal.SIGINT, sigint)
    signal.signal(signal.SIGTERM, sigterm)


def test_planned_action_skips_warms_up_records_then_stops() -> None:
    # --skip 3 --steps 2: steps 0,1 untouched, step 2 warms up, 3 records, 4 records and saves.
    assert [planned_action(s, 3, 2) for s in range(7)] == [
        ACTION_NONE,
        ACTION_NONE,
        ACTION_WARMUP,
        ACTION_RECORD,
        ACTION_SAVE,
        ACTION_NONE,
        ACTION_NONE,
    ]
    # --skip 0: no warm-up step exists; --steps 0 records to the end.
    assert [planned_action(s, 0, 1) for s in range(3)] == [ACTION_SAVE, ACTION_NONE, ACTION_NONE]
    assert [planned_action(s, 1, 0) for s in range(4)] == [
        ACTION_WARMUP,
        ACTION_RECORD,
        ACTION_RECORD,
        ACTION_RECORD,
    ]


def test_planned_action_saves_a_chunk_every_flush_steps_and_at_the_windows_end() -> None:
    # --skip 1 --steps 5 --flush-steps 2: recorded steps 1-5, saved after 2, 4 and 5 (the end).
    assert [planned_action(s, 1, 5, 2) for s in range(7)] == [
        ACTION_WARMUP,
        ACTION_RECORD,
        ACTION_SAVE,
        ACTION_RECORD,
        ACTION_SAVE,
        ACTION_SAVE,
        ACTION_NONE,
    ]
    # every step, to the end of the run
    assert [planned_action(s, 0, 0, 1) for s in range(3)] == [ACTION_SAVE] * 3


def test_interleaved_recording_follows_each_recorded_step_by_a_plain_one() -> None:
    # --skip 2 --steps 3, interleaved: warm up at 1, record 2, 5 and 8 (each saved), the step
    # after each unprofiled, the one before the next recorded step a warm-up; nothing after 8.
    plan = [planned_action(s, 2, 3, 1, interleave=True) for s in range(12)]
    n, w, s_ = ACTION_NONE, ACTION_WARMUP, ACTION_SAVE
    assert plan == [n, w, s_, n, w, s_, n, w, s_, n, n, n]
    assert [s for s in range(12) if window_ends(s, 2, 3, interleave=True)] == [8]
    # --steps 0: the cycle goes on to the end of the run; --skip 0: no first warm-up
    assert [planned_action(s, 0, 0, interleave=True) for s in range(7)] == [s_, n, w, s_, n, w, s_]


def test_an_interleaved_driver_writes_one_chunk_per_recorded_step(tmp_path: Path) -> None:
    driver, fakes = make_driver(tmp_path, skip=1, steps=2, interleave=True)
    for _ in range(7):
        driver.mark_step()
    driver.finish()
    assert logged_steps(tmp_path) == [
        (0, ACTION_WARMUP),
        (1, ACTION_SAVE),
        (2, ACTION_NONE),
        (3, ACTION_WARMUP),
        (4, ACTION_SAVE),
        (5, ACTION_NONE),
    ]
    (fake,) = fakes
    assert fake.exported_steps == [1, 4]
    assert ("stop", 5) in fake.calls  # stopped for good after the last recorded step
    assert sorted(p.name for p in tmp_path.glob("trace-*.json")) == [chunk(0), chunk(1)]


def test_options_round_trip_through_the_environment_and_reject_bad_values() -> None:
    options = DriverOptions(skip=4, steps=0, level="full", flush_steps=3)
    assert DriverOptions.from_json(options.to_json()) == options
    interleaved = DriverOptions(skip=2, steps=5, interleave=True)
    assert DriverOptions.from_json(interleaved.to_json()) == interleaved
    with pytest.raises(ValueError, match="--flush-steps"):
        DriverOptions(flush_steps=-1)
    with pytest.raises(ValueError, match="--steps"):
        DriverOptions(steps=-1)
    with pytest.raises(ValueError, match="level"):
        DriverOptions(level="verbose")
    with pytest.raises(ValueError, match="malformed"):
        DriverOptions.from_json("{not json")


def test_training_steps_end_when_the_optimizer_step_returns(tmp_path: Path) -> None:
    driver, fakes = make_driver(tmp_path, skip=1, steps=2)
    loader, optimizer = object(), object()
    for _ in range(5):
        driver.on_batch(id(loader))  # the first batch begins step 0
        driver.note_backward()
        driver.on_optimizer_step(optimizer)
    driver.finish()
    # Five optimizer steps end steps 0-4; the batches never cut a training step.
    assert logged_steps(tmp_path) == [
        (0, ACTION_WARMUP),
        (1, ACTION_RECORD),
        (2, ACTION_SAVE),
        (3, ACTION_NONE),
        (4, ACTION_NONE),
    ]
    (profiler,) = fakes
    # After the saved step the profiler is stopped and never driven again.
    assert profiler.calls == [("start", 0), ("step", 1), ("step", 2), ("step", 3), ("stop", 3)]
    assert profiler.exports == 1
    records = logged(tmp_path)
    assert [r["file"] for r in records if r["event"] == "trace"] == [chunk(0)]
    assert (tmp_path / chunk(0)).is_file()
    end = records[-1]
    assert (end["event"], end["step"], end["reason"]) == ("end", 5, "exit")


def test_steps_tile_in_time_without_overlap(tmp_path: Path) -> None:
    driver, _ = make_driver(tmp_path, skip=0, steps=3)
    for _ in range(4):
        driver.mark_step()
    driver.finish()
    steps = [r for r in logged(tmp_path) if r["event"] in ("step", "end")]
    for earlier, later in zip(steps, steps[1:], strict=False):
        assert earlier["start_ns"] <= earlier["end_ns"] <= later["start_ns"]


def test_inference_steps_are_batches_of_one_iterator(tmp_path: Path) -> None:
    driver, _ = make_driver(tmp_path, skip=5, steps=1)
    loader = object()
    for _ in range(4):
        driver.on_batch(id(loader))
    driver.finish()
    # Four fetches: steps 0-2 ended by the next fetch, step 3 still open at the end.
    assert [s for s, _ in logged_steps(tmp_path)] == [0, 1, 2]
    assert logged(tmp_path)[-1]["step"] == 3


def test_zipped_loaders_make_one_step_per_pair_of_batches(tmp_path: Path) -> None:
    driver, _ = make_driver(tmp_path, skip=5, steps=1)
    images, captions = object(), object()
    for _ in range(3):
        driver.on_batch(id(images))
        driver.on_batch(id(captions))
    driver.finish()
    assert [s for s, _ in logged_steps(tmp_path)] == [0, 1]


def test_gradient_accumulation_before_the_first_optimizer_step_is_one_step(
    tmp_path: Path,
) -> None:
    driver, _ = make_driver(tmp_path, skip=5, steps=1)
    loader, optimizer = object(), object()
    for _ in range(2):  # two optimizer steps of four micro-batches each
        for _ in range(4):
            driver.on_batch(id(loader))
            driver.note_backward()
        driver.on_optimizer_step(optimizer)
    driver.finish()
    assert [s for s, _ in logged_steps(tmp_path)] == [0, 1]


def test_only_the_first_optimizer_ends_steps(tmp_path: Path) -> None:
    driver, _ = make_driver(tmp_path, skip=5, steps=1)
    discriminator, generator = object(), object()
    for _ in range(3):
        driver.on_optimizer_step(discriminator)
        driver.on_optimizer_step(generator)
    driver.finish()
    # The first discriminator step begins step 0; the next two end steps 0 and 1.
    assert [s for s, _ in logged_steps(tmp_path)] == [0, 1]


def test_explicit_marks_take_over_from_automatic_steps(tmp_path: Path) -> None:
    driver, _ = make_driver(tmp_path, skip=5, steps=1)
    loader, optimizer = object(), object()
    driver.on_batch(id(loader))  # begins step 0 automatically
    driver.mark_step()  # ends step 0; from now on only marks count
    for _ in range(3):
        driver.on_batch(id(loader))
        driver.on_optimizer_step(optimizer)
    driver.mark_step()
    driver.finish()
    assert [s for s, _ in logged_steps(tmp_path)] == [0, 1]


def test_manual_driver_ignores_batches_and_optimizers(tmp_path: Path) -> None:
    driver, _ = make_driver(tmp_path, skip=5, steps=1, manual=True)
    driver.start()
    driver.on_batch(id(object()))
    driver.on_optimizer_step(object())
    driver.mark_step()
    driver.finish()
    assert [s for s, _ in logged_steps(tmp_path)] == [0]


def test_ending_inside_a_recorded_step_writes_the_trace_and_marks_it_incomplete(
    tmp_path: Path,
) -> None:
    driver, fakes = make_driver(tmp_path, skip=1, steps=0)
    for _ in range(3):
        driver.mark_step()
    driver.finish("exception RuntimeError: boom")
    assert fakes[0].exports == 1
    process = read_step_log(next(tmp_path.glob("steps-*.jsonl")))
    assert process.end_reason == "exception RuntimeError: boom"
    assert [(s.step, s.action) for s in process.steps] == [(0, "warmup"), (1, "record")]
    assert incomplete_recorded_step(process) == 2
    assert process.traces == (tmp_path / chunk(0),)


def test_each_chunk_is_written_as_it_ends_so_a_killed_process_keeps_it(tmp_path: Path) -> None:
    driver, fakes = make_driver(tmp_path, skip=1, steps=0, flush_steps=2)
    for _ in range(7):  # begins step 0, ends steps 0-5; step 6 runs
        driver.mark_step()
    # No finish(): the process is killed (or calls os._exit) inside step 6.
    (profiler,) = fakes
    assert profiler.exported_steps == [2, 4]  # recorded steps 1-2 and 3-4
    assert profiler.calls[-1] == ("step", 6)  # one profiler, never stopped between chunks
    assert sorted(p.name for p in tmp_path.glob("trace-*")) == [chunk(0), chunk(1)]
    process = read_step_log(next(tmp_path.glob("steps-*.jsonl")))
    assert process.end_reason == "killed"
    assert process.traces == (tmp_path / chunk(0), tmp_path / chunk(1))
    assert process.traced_through == 4
    # steps 1-5 were recorded; step 5's chunk was not written yet
    assert sum(s.profiled for s in process.steps) == 5
    assert process.kept_steps == 4
    driver.finish()


def test_nothing_is_written_before_the_first_step(tmp_path: Path) -> None:
    driver, fakes = make_driver(tmp_path)
    driver.note_backward()
    driver.finish()
    assert list(tmp_path.iterdir()) == []
    assert fakes == []
