"""Small pieces several rules share: host threads, call sites, per-step counts, offenders."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.advisor.context import AdvisorContext, thread_ids
from perfledger.analysis.nesting import innermost_enclosing, operator_nesting
from perfledger.analysis.ops import take_rows
from perfledger.model import schema, vendors

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Frames of the framework itself: a call site is the first frame outside them.
_LIBRARY_FRAMES: Final = ("site-packages/", "dist-packages/", "/torch/", "<built-in", "/lib/python")


def encode(
    values: pa.Array | pa.ChunkedArray | npt.NDArray[np.object_],
) -> tuple[IntArray, npt.NDArray[np.str_]]:
    """Dense integer codes of a string column and its distinct values (null: "None").

    Grouping by codes avoids building fixed-width numpy strings out of long kernel names.
    """
    if isinstance(values, np.ndarray):
        values = pa.array(values, type=pa.string(), from_pandas=True)
    if pa.types.is_dictionary(values.type):
        return _encode_codes(values)
    if isinstance(values, pa.ChunkedArray):
        # a chunked column of one chunk is that chunk: joining would copy the (long) names
        values = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    encoded = pc.dictionary_encode(pc.cast(values, pa.string()), null_encoding="encode")
    codes = np.asarray(encoded.indices.fill_null(0), dtype=np.int64)
    distinct = np.array([str(v) for v in encoded.dictionary.to_pylist()] or [""], dtype=str)
    return codes, distinct


def _encode_codes(
    values: pa.Array | pa.ChunkedArray,
) -> tuple[IntArray, npt.NDArray[np.str_]]:
    """:func:`encode` of a dictionary column, from its codes (the texts are not decoded row
    by row): the same codes, numbered by first appearance, and distinct values."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    texts: dict[str | None, int] = {}  # each distinct text (or null) -> its key
    keys = []
    for chunk in chunks:  # a loop over chunks
        key_of = np.asarray(
            [texts.setdefault(v, len(texts)) for v in chunk.dictionary.to_pylist()] or [0],
            dtype=np.int64,
        )
        indices = chunk.indices
        key = key_of[np.asarray(indices.fill_null(0), dtype=np.int64)]
        if indices.null_count:
            key[~np.asarray(indices.is_valid(), dtype=bool)] = texts.setdefault(None, len(texts))
        keys.append(key)
    key = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
    # dense codes in the order each text first appears, as dictionary_encode numbers them
    present, first = np.unique(key, return_index=True)
    by_first = np.argsort(first)
    code_of = np.zeros(len(texts) or 1, dtype=np.int64)
    code_of[present[by_first]] = np.arange(present.size)
    text_of = list(texts)
    distinct = [str(text_of[k]) for k in present[by_first].tolist()]
    return code_of[key], np.array(distinct or [""], dtype=str)


def coalesce_text(*values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``pc.coalesce`` of string columns as text, where some are dictionary columns (the
    tasks' names): each later column is read, and decoded, only at the rows still null."""
    result = values[0]
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    result = pc.cast(result, pa.string())
    for column in values[1:]:
        missing = np.flatnonzero(~np.asarray(result.is_valid(), dtype=bool))
        if missing.size == 0:
            break
        chunked = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column])
        # taken chunk by chunk (the chunks' dictionaries are not joined), then decoded
        filled = pc.cast(columns.take(chunked, missing), pa.string()).combine_chunks()
        result = pc.replace_with_mask(result, pc.is_null(result), filled)
    return result


def group_ids(parts: Sequence[IntArray], size: int) -> IntArray:
    """A dense id per row for the tuples of integer codes ``parts`` (each ``size`` long),
    numbered in the tuples' order.

    The codes are combined as the digits of one number, made dense again only where the
    next digit would overflow: one sort for a handful of small codes, not one per part.
    """
    group = np.zeros(size, dtype=np.int64)
    bound = 1  # group < bound
    for part in parts:
        codes = np.asarray(part, dtype=np.int64).reshape(-1)
        if codes.size and int(codes.min()) < 0:
            codes = _dense(codes)
        width = int(codes.max(initial=0)) + 1
        if bound * width >= 1 << 62:
            group = _dense(group)
            bound = int(group.max(initial=0)) + 1
            if bound * width >= 1 << 62:  # the part's own codes too wide: their ranks instead
                codes = _dense(codes)
                width = int(codes.max(initial=0)) + 1
        group = group * width + codes
        bound *= width
    return _dense(group)


def _dense(codes: IntArray) -> IntArray:
    """The rank of each code among the distinct ones (their order kept)."""
    return columns.factorize(np.asarray(codes, dtype=np.int64).reshape(-1))[1]


def distinct_rows(rows: IntArray, num_rows: int) -> IntArray:
    """The distinct values of ``rows`` (rows of a table of ``num_rows``), sorted: what
    ``np.unique`` gives, through a mask over the table instead of a sort."""
    seen = np.zeros(num_rows, dtype=bool)
    seen[rows] = True
    return np.flatnonzero(seen)


def host_steps(ctx: AdvisorContext) -> int:
    """How many (rank, step) windows the profile has: the divisor of host-side counts."""
    if ctx.step_windows:
        return len({(w.rank, w.step) for w in ctx.step_windows})
    return len({(w.rank, w.step) for w in ctx.host_windows})


def sync_mask(events: pa.Table) -> BoolArray:
    """Host rows that block until the device drains: sync calls and ``.item()``-like ops.

    The same definition as the accounting's ``sync`` idle cause.
    """
    host = columns.int64(events, "device") < 0
    by_kind = columns.isin(events, "kind", [schema.SYNC])
    by_name = columns.isin(events, "kind", [schema.CPU_OP]) & columns.isin(
        events, "name", vendors.HOST_SYNC_OPS
    )
    mask: BoolArray = host & (by_kind | by_name)
    return mask


def enclosing_python(events: pa.Table, rows: IntArray) -> list[str | None]:
    """The innermost Python frame (``python`` event) running on each row's thread at its start."""
    python_rows = np.flatnonzero(columns.isin(events, "kind", [schema.PYTHON]))
    if python_rows.size == 0 or rows.size == 0:
        return [None] * int(rows.size)
    start = columns.int64(events, "start_ns")
    end = start + columns.int64(events, "dur_ns")
    thread = thread_ids(events, np.concatenate([python_rows, rows]))
    frame_thread, query_thread = thread[: python_rows.size], thread[python_rows.size :]
    parent = operator_nesting(frame_thread, start[python_rows], end[python_rows])
    found = innermost_enclosing(
        frame_thread, start[python_rows], end[python_rows], parent, query_thread, start[rows]
    )
    names = columns.strings(events, "name")
    # walk up to the first frame of the user's code, a handful of rows: the reported offenders
    sites: list[str | None] = []
    for index in found:
        site = None
        first = None
        while index >= 0:
            name = str(names[python_rows[index]])
            first = first or name
            if not any(marker in name for marker in _LIBRARY_FRAMES):
                site = name
                break
            index = int(parent[index])
        sites.append(site or first)
    return sites


def stack_site(args: str | None) -> str | None:
    """The first user frame of a ``Call stack`` arg (Kineto ``with_stack``; torch_npu)."""
    if not args:
        return None
    try:
        parsed = json.loads(args)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    stack = parsed.get("Call stack") or parsed.get("call_stack") or parsed.get("Call Stack")
    if not isinstance(stack, str) or not stack:
        return None
    frames = [f.strip() for f in stack.replace("\n", ";").split(";") if f.strip()]
    for frame in frames:
        if not any(marker in frame for marker in _LIBRARY_FRAMES):
            return frame
    return frames[0] if frames else None


def call_sites(
    events: pa.Table, rows: IntArray, fallback_rows: IntArray | None = None
) -> list[str | None]:
    """Where in the code each row was issued: its recorded stack, else the Python frame."""
    # only the rows asked for: the whole args column decoded is hundreds of MB on large traces
    rows = np.asarray(rows, dtype=np.int64)
    args = take_rows(events.column("args"), rows).to_pylist()
    fallback = (
        take_rows(events.column("args"), np.asarray(fallback_rows, dtype=np.int64)).to_pylist()
        if fallback_rows is not None
        else [None] * len(rows)
    )
    python = enclosing_python(events, rows)
    sites: list[str | None] = []
    for i in range(len(rows)):
        site = stack_site(args[i])
        if site is None and fallback[i] is not None:
            site = stack_site(fallback[i])
        sites.append(site or python[i])
    return sites


def offender(rank: int, step: int, start_ns: int, end_ns: int, **figures: Any) -> dict[str, Any]:
    """An evidence entry the timeline can jump to."""
    return {
        "rank": int(rank),
        "step": int(step),
        "start_ns": int(start_ns),
        "end_ns": int(end_ns),
        **figures,
    }


def spans_of(offenders: Sequence[dict[str, Any]]) -> tuple[dict[str, int], ...]:
    """Timeline spans of evidence entries."""
    return tuple(
        {"rank": int(o["rank"]), "start_ns": int(o["start_ns"]), "end_ns": int(o["end_ns"])}
        for o in offenders
    )
