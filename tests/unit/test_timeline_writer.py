"""Timeline chunks are compressed and written on a second thread, in order, errors passed on."""

from __future__ import annotations

import gzip
import io
import platform
import random
import zlib

import pytest

from perfledger.render.timeline import gzstream
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


# where pyproject.toml makes isal a dependency (the machines it ships wheels for)
ISAL_MACHINES = ("x86_64", "AMD64", "aarch64", "arm64")


@pytest.mark.parametrize("library", ["isal", "zlib"])
def test_a_stream_written_in_segments_is_one_gzip_member(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ISA-L where its wheel is installed, zlib otherwise: both give what any gzip reader opens
    if library == "zlib":
        monkeypatch.setattr(gzstream, "_DEFLATE", zlib)
        monkeypatch.setattr(gzstream, "_GZIP_LEVEL", 3)
    elif platform.machine() in ISAL_MACHINES:
        assert gzstream._DEFLATE is not zlib, "the isal package is a dependency here"
    else:
        pytest.skip(f"no isal wheel for {platform.machine()}: zlib writes the timelines")
    rng = random.Random(3)
    pieces = [
        "".join(rng.choice('{}":,abc0123456789') for _ in range(rng.randrange(0, 70_000))).encode()
        for _ in range(9)
    ]
    out = io.BytesIO()
    out.write(gzstream.GZIP_HEADER)
    deflate = gzstream.Deflate()
    for i, piece in enumerate(pieces):
        deflate.attach(out)  # reopened for each segment, as the writer does
        deflate.write(memoryview(piece))
        if i % 3 == 2 and i < len(pieces) - 1:
            deflate.end_segment()
    deflate.finish()
    assert gzip.decompress(out.getvalue()) == b"".join(pieces)
