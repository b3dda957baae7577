"""A pass run beside the caller's: on another thread, its error where its result is taken,
never outliving the block."""

from __future__ import annotations

import threading
import time

import pytest

from perfledger.analysis.beside import beside


def test_the_pass_runs_on_another_thread_while_the_caller_goes_on() -> None:
    started = threading.Event()
    release = threading.Event()

    def work(x: int, *, y: int) -> tuple[int, int]:
        started.set()
        assert release.wait(10)  # only the caller, going on meanwhile, can release it
        return threading.get_ident(), x + y

    with beside(work, 2, y=3) as future:
        assert started.wait(10)
        release.set()
        ident, total = future.result()
    assert ident != threading.get_ident()
    assert total == 5


def test_the_pass_error_is_raised_where_its_result_is_taken() -> None:
    def fails() -> None:
        raise ValueError("bad rows")

    with beside(fails) as future, pytest.raises(ValueError, match="bad rows"):
        future.result()


def test_leaving_the_block_on_an_error_waits_for_the_pass() -> None:
    done: list[bool] = []

    def slow() -> None:
        time.sleep(0.2)
        done.append(True)

    with pytest.raises(RuntimeError), beside(slow):
        raise RuntimeError("the caller's own pass failed")
    assert done == [True]
