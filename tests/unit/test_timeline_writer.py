"""Timeline chunks are compressed and written on a second thread, in order, errors passed on."""

from __future__ import annotations

import io

import pytest

from perfledger.render.timeline.gzstream import background_writes


def test_chunks_arrive_in_order() -> None:
    sink = io.BytesIO()
    with background_writes(sink) as write:
        for i in range(200):
            write(memoryview(f"{i},".encode()))
    assert sink.getvalue() == "".join(f"{i}," for i in range(200)).encode()


class _FullDisk(io.BytesIO):
    def write(self, data: object) -> int:
        raise OSError(28, "No space left on device")


def test_a_failed_write_is_raised_in_the_caller() -> None:
    with pytest.raises(OSError, match="No space left"), background_writes(_FullDisk()) as write:
        for _ in range(10):
            write(memoryview(b"x"))


def test_an_error_of_the_caller_stops_the_writer() -> None:
    sink = io.BytesIO()
    with pytest.raises(RuntimeError, match="formatting failed"), background_writes(sink) as write:
        write(memoryview(b"a"))
        raise RuntimeError("formatting failed")
    assert sink.getvalue() == b"a"
