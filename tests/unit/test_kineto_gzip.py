"""Gzip traces inflated by ISA-L's reader where it is installed: the events, the loss and the
errors are those zlib's reader gives, on intact files and on damaged ones (the reading goes
on with zlib's reader from where the fast one stopped, so nothing before the damage is lost)."""

from __future__ import annotations

import gzip
import importlib.util
import random
from pathlib import Path
from typing import Any

import pytest

from perfledger.errors import PerfledgerError
from perfledger.sources import gunzip, kineto_stream
from perfledger.sources.kineto import load_kineto
from tests.paths import data_file

HAS_ISAL = importlib.util.find_spec("isal") is not None
LARGE = ("v100_rank1_ddp.json.gz",)
LARGE_CASES = ("intact", "cut at 0.4", "flipped 0", "wrong checksum")


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, *, fast: bool) -> tuple[Any, ...]:
    """What the import makes of ``path``: its events and loss, or its error."""
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(gunzip, "_FAST", None)
        try:
            trace = load_kineto(path)
        except PerfledgerError as error:
            return ("error", str(error))
    # NaN (no flops) made comparable: NaN equals no float, itself included
    events = {
        name: [v if v == v else "NaN" for v in values]
        for name, values in trace.events.to_pydict().items()
    }
    return events, trace.loss


def _damaged(source: Path) -> dict[str, bytes]:
    """``source`` recompressed, and damaged in the ways files get damaged."""
    text = gzip.decompress(source.read_bytes())
    packed = gzip.compress(text, mtime=0)
    rng = random.Random(11)
    flipped = {}
    for i in range(4):
        data = bytearray(packed)
        data[rng.randrange(20, len(data) - 20)] ^= 0x5A
        flipped[f"flipped {i}"] = bytes(data)
    half = len(text) // 2
    return {
        "intact": packed,
        **{f"cut at {f}": packed[: int(len(packed) * f)] for f in (0.05, 0.4, 0.8, 0.999)},
        **flipped,
        "trailing junk": packed + b"junk",
        "trailing zeros": packed + bytes(64),
        "wrong checksum": packed[:-8] + bytes(8),
        "two members": gzip.compress(text[:half], mtime=0) + gzip.compress(text[half:], mtime=0),
    }


@pytest.mark.parametrize("trace", ["a100_alexnet.json.gz", "v100_rank1_ddp.json.gz"])
def test_a_gzip_trace_reads_as_zlibs_reader_reads_it_intact_or_damaged(
    trace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = data_file(f"kineto/{trace}")
    slow_reads: list[int] = []
    slow_from = kineto_stream._Source._slow_from

    def counted(self: Any, delivered: int) -> None:
        slow_reads.append(delivered)
        slow_from(self, delivered)

    monkeypatch.setattr(kineto_stream._Source, "_slow_from", counted)
    for name, data in _damaged(source).items():
        if trace in LARGE and name not in LARGE_CASES:
            continue  # the large trace (several chunks) for a few cases: its reads take seconds
        path = tmp_path / f"{name.replace(' ', '_')}.json.gz"
        path.write_bytes(data)
        slow_reads.clear()
        fast = _read(path, monkeypatch, fast=True)
        # the fast reader took every intact file through, and gave each cut one over (a
        # flipped byte may lie where the reading stops before it, or change only the text)
        intact = name in ("intact", "trailing zeros", "two members")
        if intact:
            assert not slow_reads, name
        if name.startswith("cut"):
            assert bool(slow_reads) == HAS_ISAL, name
        assert fast == _read(path, monkeypatch, fast=False), name
        if intact:
            assert fast[1] is None, name


@pytest.mark.skipif(not HAS_ISAL, reason="ISA-L has no wheel for this platform: zlib reads")
def test_isal_inflates_the_gzip_traces_where_installed() -> None:
    assert gunzip.fast()
