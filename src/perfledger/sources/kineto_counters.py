"""The counters of a Kineto trace: the allocator totals of ``[memory]`` instants, and the
counters table the import makes of every chunk's (``Side.counter_*``).

A chunk hands its memory counters' tracks and names on as dictionary arrays (an int32 code a
row into a few labels); the texts are written once, when the rank's counters are sorted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from perfledger.model import schema, vendors

if TYPE_CHECKING:
    from perfledger.sources.kineto_columns import Side
    from perfledger.sources.kineto_text import Int64Array


def memory_counters(values: dict[str, Any], n: int, ts: Int64Array, side: Side) -> None:
    """``[memory]`` instants carry the allocator totals: device and host memory counters.

    Their tracks and names are handed on as dictionary arrays (a code per row into a few
    labels): the texts are written once, when the import sorts the counters."""
    if "total_allocated" not in values and "total_reserved" not in values:
        return
    get = {
        attr: values[attr] if attr in values else np.full(n, -1, np.int64)
        for attr in ("total_allocated", "total_reserved", "device_type", "device_id")
    }
    rows = np.flatnonzero((get["total_allocated"] >= 0) | (get["total_reserved"] >= 0))
    if rows.size == 0:
        return
    # one label per distinct (device type, device id), taken for every row
    types, type_code = np.unique(get["device_type"][rows], return_inverse=True)
    ids, id_code = np.unique(get["device_id"][rows], return_inverse=True)
    pair_codes, row_pair = np.unique(type_code * ids.size + id_code, return_inverse=True)
    labels = []
    for code in pair_codes.tolist():
        device_type, device_id = int(types[code // ids.size]), int(ids[code % ids.size])
        kind = vendors.TORCH_DEVICE_TYPES.get(device_type, f"device_type_{device_type}")
        labels.append(kind if device_id < 0 else f"{kind}:{device_id}")
    tracks = pa.array(labels, pa.string())
    row_pair = row_pair.reshape(-1).astype(np.int32)
    for name, attr in (
        ("allocated_bytes", "total_allocated"),
        ("reserved_bytes", "total_reserved"),
    ):
        totals = get[attr][rows]
        present = totals >= 0
        side.counter_ts.append(ts[rows][present])
        side.counter_track.append(pa.DictionaryArray.from_arrays(row_pair[present], tracks))
        side.counter_name.append(
            pa.DictionaryArray.from_arrays(
                np.zeros(int(present.sum()), np.int32), pa.array([name], pa.string())
            )
        )
        side.counter_value.append(totals[present].astype(np.float64))


def counters_table(side: Side, rank: int, base_ns: int) -> pa.Table:
    """The counters the chunks found (``side``), in order of time, as the rank's table."""
    if not side.counter_ts:
        return schema.empty_counters()
    ts = np.concatenate(side.counter_ts) + base_ns
    value = np.concatenate(side.counter_value)
    order = np.argsort(ts, kind="stable")
    take = pa.array(order)
    table = pa.table(
        {
            "rank": np.full(ts.size, rank, np.int32),
            "track": _sorted_texts(side.counter_track, take),
            "name": _sorted_texts(side.counter_name, take),
            "ts_ns": ts[order],
            "value": value[order],
        }
    )
    return table.cast(schema.COUNTERS_SCHEMA)


def _sorted_texts(parts: list[pa.Array], take: pa.Array) -> pa.Array:
    """The texts of ``parts`` (text or dictionary arrays) one after the other, taken in the
    order ``take``: the dictionaries' codes sorted, and the texts written once."""
    coded = [
        part if pa.types.is_dictionary(part.type) else part.dictionary_encode() for part in parts
    ]
    unified = pa.chunked_array(coded, pa.dictionary(pa.int32(), pa.string()))
    combined = unified.unify_dictionaries().combine_chunks()
    return combined.take(take).cast(pa.string())
