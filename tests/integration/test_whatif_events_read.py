"""``perfledger whatif`` reads the stored args only where the replay reads them: the replay
of every step is the same as from the whole events table, on real traces and on a hand-built
step whose streams wait on each other through device-side marks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from perfledger.analysis import columns
from perfledger.analysis.comm_split import stored_comm_waits
from perfledger.analysis.critical_path import replay_profile
from perfledger.cli.whatif import REPLAY_ARG_KINDS, replay_events, whatif_document
from perfledger.model import schema
from perfledger.model.whatif import NO_CHANGE, Scale, WhatIf
from perfledger.profiledir import load_profile
from perfledger.profiledir.layout import EVENTS_TABLE
from tests.cli import perfledger
from tests.paths import DATA
from tests.scenarios import Timeline
from tests.unit.test_replay_events import ddp_step

CHANGES = [
    NO_CHANGE,
    WhatIf(overlap_comm=True),
    WhatIf(scales=(Scale("communication", 0.5),)),
    WhatIf(scales=(Scale("compute", 0.5),), no_sync=True),
]


def _document(events: pa.Table, change: WhatIf, meta: dict[str, Any]) -> dict[str, Any]:
    waits = stored_comm_waits(events, meta)
    return whatif_document(replay_profile(events, change, {}, comm_wait=waits))


def _without_other_args(events: pa.Table) -> pa.Table:
    """The args of the rows outside REPLAY_ARG_KINDS made null."""
    kept = columns.isin(events, "kind", REPLAY_ARG_KINDS)
    args = events.column("args")
    at = events.schema.get_field_index("args")
    nulled = pa.array(np.where(kept, args.to_numpy(zero_copy_only=False), None), pa.string())
    return events.set_column(at, events.schema.field(at), nulled)


def test_device_marks_replay_the_same_without_the_other_args() -> None:
    events = schema.conform_events(ddp_step(marks=True))
    # every row has args here: the ones the replay must not read are there to be left out
    assert columns.isin(events, "kind", REPLAY_ARG_KINDS).sum() == 3
    for change in CHANGES:
        assert _document(_without_other_args(events), change, {}) == _document(events, change, {})


def test_a_collective_s_message_is_kept_for_its_wait() -> None:
    # 150 MB all-reduced over 8 ranks on an A100's 300 GB/s in a 2 ms task: 875 µs of
    # transfer, the rest waiting (tests/unit/test_comm_split.py), which the replay keeps
    t = Timeline().step(1, 0, 10_000)
    t.launch(10, 20, 2000, kind=schema.COMM, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    t.rows[-1]["args"] = '{"In msg nelems": 37500000, "dtype": "Float", "Group size": 8}'
    t.launch(40, 20, 500, name="gemm")
    t.rows[-1]["args"] = '{"grid": [1, 1, 1]}'
    events = schema.conform_events(t.table())
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 80 * 2**30, "numSms": 108}
    meta = {"0": {"device_properties": [a100]}}
    at = events.schema.get_field_index("args")
    no_args = events.set_column(at, events.schema.field(at), pa.nulls(events.num_rows, pa.string()))
    for change in CHANGES:
        whole = _document(events, change, meta)
        assert _document(_without_other_args(events), change, meta) == whole
        assert _document(no_args, change, meta) != whole  # the message matters here


@pytest.mark.parametrize(
    "name",
    ["kineto/sampled_2ranks", "kineto/v100_rank1_ddp.json.gz", "ascend/torch_npu_text/level1"],
)
def test_a_stored_profile_replays_the_same_from_the_args_the_replay_reads(
    name: str, tmp_path: Path
) -> None:
    out = tmp_path / "profile"
    done = perfledger("analyze", DATA / name, "-o", out)
    assert done.returncode == 0, done.stderr
    profile = load_profile(out)
    whole = schema.conform_events(profile.read_table(EVENTS_TABLE))
    read = schema.conform_events(replay_events(profile))
    assert read.num_rows == whole.num_rows
    for name in whole.column_names:  # each rank's file read alike (its own dictionaries)
        if name != "args":
            one, other = read[name].to_numpy(), whole[name].to_numpy()
            floats = pa.types.is_floating(whole.schema.field(name).type)
            assert np.array_equal(one, other, equal_nan=floats), name
    assert read.column("args").null_count > whole.column("args").null_count  # some left out
    meta = profile.meta.get("ranks") or {}
    for change in CHANGES:
        assert _document(read, change, meta) == _document(whole, change, meta)
