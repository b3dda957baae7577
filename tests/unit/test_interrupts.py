"""Ctrl-C and SIGTERM held over steps that must not be cut (perfledger.interrupts)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from perfledger.interrupts import interrupts_held


class Stopped(Exception):
    pass


def _raising(signum: int, frame: object) -> None:
    raise Stopped(signum)


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, _raising)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.usefixtures("sigterm_raises")
def test_a_signal_in_the_block_is_answered_by_its_handler_once_the_block_ends() -> None:
    steps = []
    with pytest.raises(Stopped) as stopped, interrupts_held():
        os.kill(os.getpid(), signal.SIGTERM)
        steps.append("after the signal")  # the block goes on to its end
    assert steps == ["after the signal"] and stopped.value.args == (signal.SIGTERM,)
    assert signal.getsignal(signal.SIGTERM) is _raising  # the handler back in place


@pytest.mark.usefixtures("sigterm_raises")
def test_the_signal_takes_the_place_of_the_blocks_own_error() -> None:
    with pytest.raises(Stopped) as stopped, interrupts_held():
        os.kill(os.getpid(), signal.SIGTERM)
        raise ValueError("the block's")
    assert isinstance(stopped.value.__context__, ValueError)


@pytest.mark.usefixtures("sigterm_raises")
def test_without_a_signal_nothing_is_raised_and_nothing_changes() -> None:
    with interrupts_held():
        pass
    assert signal.getsignal(signal.SIGTERM) is _raising


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with interrupts_held():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.usefixtures("sigterm_raises")
def test_outside_the_main_thread_nothing_is_held() -> None:
    seen = []

    def run() -> None:
        with interrupts_held():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [_raising]
