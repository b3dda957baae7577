"""The ledger's batch size of a profile just written (read from the rows the analysis holds)
is the one of the same profile read back from op_summary.csv, over the same first rows."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import pytest

from perfledger.ledger import record
from perfledger.ledger.record import profile_batch_size
from perfledger.profiledir import StoredProfile, load_profile
from perfledger.run.pipeline import build_profile
from tests.kineto_gen import complete, cpu_op, write_kineto


def _conv_trace(path: Path, batches: Sequence[int]) -> Path:
    """A CPU run, a step per batch: a data-loader op on one sample, then the model's first
    layer, a convolution over the step's batch of 3x32x32 images."""
    events = []
    t = 1000.0
    for i, batch in enumerate(batches):
        events.append(complete("user_annotation", f"ProfilerStep#{i + 1}", t, 1000.0))
        events.append(
            cpu_op("aten::normal_", t + 1, 2, external_id=3 * i + 1, **{"Input Dims": [[3, 32]]})
        )
        dims = [[batch, 3, 32, 32], [8, 3, 3, 3], [8]]
        events.append(
            cpu_op("aten::conv2d", t + 5, 400, external_id=3 * i + 2, **{"Input Dims": dims})
        )
        t += 1000.0
    return write_kineto(path, events)


# three steps of 16, then five of 32: the first rows alone say 16, all of them 32
_BATCHES = (16, 16, 16, 32, 32, 32, 32, 32)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StoredProfile]:
    folder = tmp_path_factory.mktemp("batch")
    out = folder / "profile"
    result = build_profile([_conv_trace(folder / "t.json", _BATCHES)], out)
    return out, result.stored


def test_a_profile_just_written_needs_no_csv_for_its_batch_size(
    written: tuple[Path, StoredProfile],
) -> None:
    out, stored = written
    assert stored.op_summary_head is not None
    assert profile_batch_size(stored) == 32
    read_back = load_profile(out)
    assert read_back.op_summary_head is None
    assert profile_batch_size(read_back) == 32  # from op_summary.csv


def test_both_read_the_same_first_rows(
    written: tuple[Path, StoredProfile], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, stored = written
    with open(out / "op_summary.csv", newline="") as source:
        steps = [int(row["step"]) for row in csv.DictReader(source)]
    # the rows before the first of the fourth step (steps counted from the first)
    first_of_fourth = next(i for i, step in enumerate(steps) if step >= min(steps) + 3)
    monkeypatch.setattr(record, "BATCH_READ_ROWS", first_of_fourth)
    assert profile_batch_size(stored) == 16
    assert profile_batch_size(load_profile(out)) == 16
