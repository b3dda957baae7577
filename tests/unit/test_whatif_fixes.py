"""The advisor's fixes stored as a table and read back, and the synchronisation calls a name
pattern picks for ``perfledger whatif --drop-sync``."""

from __future__ import annotations

import numpy as np

from perfledger.analysis.whatif_changes import sync_calls_matching
from perfledger.model.whatif import (
    FIXES_SCHEMA,
    Scale,
    TaskChange,
    WhatIf,
    fixes_from_table,
    fixes_table,
    together,
    with_change,
)
from tests.synth import EventsBuilder

US = 1_000


def test_every_part_of_a_change_reads_back_by_rule_and_rank() -> None:
    fused = WhatIf(
        tasks=(
            TaskChange((4, 5, 6), (0.5, 0.5, 0.25), (False, True, True)),
            TaskChange((9,), (0.1,)),
        )
    )
    launch = WhatIf(scales=(Scale("launch", 0.5),))
    syncs = WhatIf(unsynced_rows=(3, 8, 12))
    flags = WhatIf(no_sync=True, overlap_comm=True, no_dataloader=True)
    stored = fixes_table(
        [
            (0, "fusion_candidates", fused),
            (0, "host_dispatch_bound", launch),
            (1, "host_dispatch_bound", WhatIf(scales=(Scale("launch", 0.25),))),
            (1, "excessive_sync", syncs),
            (2, "flags", flags),
        ]
    )
    assert stored.schema == FIXES_SCHEMA
    # one row per scale, flag, removed wait and task
    assert stored.num_rows == 4 + 1 + 1 + 3 + 3
    assert fixes_from_table(stored) == {
        "fusion_candidates": {0: fused},
        "host_dispatch_bound": {0: launch, 1: WhatIf(scales=(Scale("launch", 0.25),))},
        "excessive_sync": {1: syncs},
        "flags": {2: flags},
    }


def test_no_fix_is_an_empty_table() -> None:
    stored = fixes_table([])
    assert stored.schema == FIXES_SCHEMA and stored.num_rows == 0
    assert fixes_from_table(stored) == {}


def test_changes_added_to_fixes_keep_every_scale() -> None:
    fixes = together(
        [WhatIf(scales=(Scale("launch", 0.5),)), WhatIf(scales=(Scale("launch", 0.1),))]
    )
    assert fixes.scales == (Scale("launch", 0.1),)  # two fixes of the same work: the stronger
    mine = with_change(WhatIf(scales=(Scale("launch", 0.5),), unsynced_rows=(7,)), fixes)
    assert mine.scales == (Scale("launch", 0.5), Scale("launch", 0.1))  # asked for: multiply
    assert mine.unsynced_rows == (7,)


def _syncs() -> EventsBuilder:
    """On thread 1: ``aten::item`` around a stream synchronise, a bare device synchronise,
    ``aten::relu`` around a launch; on thread 2 a stream synchronise inside ``aten::copy_``
    that starts at the same time as thread 1's ``aten::item``."""
    b = EventsBuilder()
    b.cpu_op(0, 10 * US, "aten::item")
    b.sync(2 * US, 7 * US, "cudaStreamSynchronize")
    b.sync(20 * US, 5 * US, "cudaDeviceSynchronize")
    b.cpu_op(30 * US, 10 * US, "aten::relu")
    b.launch(31 * US, 5 * US, 40 * US, 10 * US, "relu_kernel")
    b.cpu_op(0, 12 * US, "aten::copy_", thread=2)
    b.sync(1 * US, 10 * US, "cudaStreamSynchronize", thread=2)
    return b


def _names(rows: np.ndarray, events_builder: EventsBuilder) -> list[tuple[str, int]]:
    events = events_builder.table()
    names = events["name"].to_pylist()
    threads = events["stream"].to_pylist()
    return [(str(names[r]), int(threads[r])) for r in rows.tolist()]


def test_a_sync_is_picked_by_its_own_name_or_an_operator_around_it() -> None:
    b = _syncs()
    events = b.table()
    assert _names(sync_calls_matching(events, ["aten::item"]), b) == [("cudaStreamSynchronize", 1)]
    assert _names(sync_calls_matching(events, ["cudaStream*"]), b) == [
        ("cudaStreamSynchronize", 2),
        ("cudaStreamSynchronize", 1),
    ]
    # aten::copy_ spans thread 1's stream synchronise too, but on another thread
    picked = sync_calls_matching(events, ["aten::copy_", "cudaDevice*"])
    assert sorted(_names(picked, b)) == [
        ("cudaDeviceSynchronize", 1),
        ("cudaStreamSynchronize", 2),
    ]
    # an operator that holds no synchronisation picks none
    assert sync_calls_matching(events, ["aten::relu"]).size == 0
    assert sync_calls_matching(events, ["*"]).size == 3
