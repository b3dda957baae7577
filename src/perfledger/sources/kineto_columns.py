"""Kineto event chunks to columns: numbers converted exactly, args decoded once, no row loops.

The per-event Python work is reading attributes of decoded events into lists (one list
comprehension per field); the rest is numpy and Arrow compute on whole chunks. Args are
decoded per group of categories with a struct of only the keys that group carries (and only
those present in the chunk), since each extracted field costs a pass over the rows.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter, itemgetter
from typing import Any, Protocol

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.model import vendors
from perfledger.sources.kineto_counters import memory_counters
from perfledger.sources.kineto_stream import DECODE_ERRORS, Chunk, FastEvent, TextEvent
from perfledger.sources.kineto_text import (
    SEPARATOR,
    BoolArray,
    FloatArray,
    Int64Array,
    float_us_ns,
    joined_texts_array,
    text_us_ns,
    texts_array,
)

IdArray = npt.NDArray[np.int64] | npt.NDArray[np.int32]

_NS_PER_US = 1000
_MAX_US = (2**63 - 1) // _NS_PER_US  # the largest µs whose ns fit in int64

# Phase codes of the rows kept as events.
PHASE_COMPLETE = 0
PHASE_INSTANT = 1

_TRAILING_NUMBER = re.compile(r"(\d+)\s*$")
_PHASES = pa.array(["X", "i", "I", "M", "s", "f", "t", "C"])
_PH_X, _PH_I, _PH_I2, _PH_M, _PH_S, _PH_F, _PH_T, _PH_C = range(8)
_ANY_DECODER = msgspec.json.Decoder()


# --- args ---------------------------------------------------------------------------------

# (attribute, JSON key, type, default)
_ARG_FIELDS: dict[str, tuple[str, Any, Any]] = {
    "external_id": ("External id", int, -1),
    "external_id_old": ("external id", int, -1),  # PyTorch <= 1.10
    "correlation": ("correlation", int, -1),
    "device": ("device", int, -1),
    "stream": ("stream", int | str, -1),
    "bytes": ("bytes", int, -1),
    "size": ("size", int | str, -1),  # HIP runtime copies (a string), MTIA DMA requests
    "flops": ("flops", float, math.nan),
    "input_dims": ("Input Dims", msgspec.Raw, msgspec.Raw(b"")),
    "input_type": ("Input type", msgspec.Raw, msgspec.Raw(b"")),
    "total_allocated": ("Total Allocated", int, -1),
    "total_reserved": ("Total Reserved", int, -1),
    "device_type": ("Device Type", int, -1),
    "device_id": ("Device Id", int, -1),
}

ARG_FIELD_NAMES = tuple(_ARG_FIELDS)

# Which args each group of categories carries: (always decoded, decoded when present).
GROUP_HOST, GROUP_LAUNCH, GROUP_DEVICE, GROUP_INSTANT, GROUP_OTHER = range(5)
_GROUP_FIELDS: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {
    GROUP_HOST: (("external_id",), ("external_id_old", "input_dims", "input_type", "flops")),
    GROUP_LAUNCH: (("external_id", "correlation"), ("external_id_old", "bytes", "size")),
    GROUP_DEVICE: (
        ("external_id", "correlation", "device", "stream"),
        ("external_id_old", "bytes", "size"),
    ),
    GROUP_INSTANT: ((), ("total_allocated", "total_reserved", "device_type", "device_id")),
    GROUP_OTHER: ((), tuple(_ARG_FIELDS)),
}
_decoders: dict[tuple[str, ...], tuple[type[msgspec.Struct], msgspec.json.Decoder[Any]]] = {}


def _struct_for(fields: tuple[str, ...]) -> tuple[type[msgspec.Struct], msgspec.json.Decoder[Any]]:
    """A struct (and list decoder) reading only ``fields`` of the args; built once per set."""
    if fields not in _decoders:
        spec = [
            (
                attr,
                _ARG_FIELDS[attr][1],
                msgspec.field(default=_ARG_FIELDS[attr][2], name=_ARG_FIELDS[attr][0]),
            )
            for attr in fields
        ]
        struct = msgspec.defstruct("Args", spec, gc=False)
        _decoders[fields] = (struct, msgspec.json.Decoder(list[struct]))  # type: ignore[valid-type]
    return _decoders[fields]


def _lenient_args(raw: bytes, struct: type[msgspec.Struct], fields: tuple[str, ...]) -> Any:
    """Args whose value types do not match the struct: take what can be read."""
    try:
        value = _ANY_DECODER.decode(raw)
    except DECODE_ERRORS:
        value = None
    if not isinstance(value, dict):
        return struct()
    found: dict[str, Any] = {}
    for attr in fields:
        key = _ARG_FIELDS[attr][0]
        if key not in value:
            continue
        item = value[key]
        if attr in ("input_dims", "input_type"):
            found[attr] = msgspec.Raw(msgspec.json.encode(item))
        elif attr == "flops":
            # an integer beyond a double's range counts as no figure, as a text would
            if isinstance(item, int | float) and not isinstance(item, bool):
                with contextlib.suppress(OverflowError):
                    found[attr] = float(item)
        elif attr in ("stream", "size"):
            ok = isinstance(item, int | str) and not isinstance(item, bool)
            found[attr] = item if ok else -1
        else:
            found[attr] = _to_int(item)
    return struct(**found)


class ArgsTexts(Protocol):
    """The args texts of a chunk's kept rows, however the chunk was read."""

    def joined(self, rows: Int64Array, sep: bytes, prefix: bytes, suffix: bytes) -> bytes:
        """``prefix`` + the texts of ``rows`` (at least one) joined by ``sep`` + ``suffix``."""
        ...

    def text(self, row: int) -> bytes:
        """The text of one row."""
        ...

    def args_column(self, count: int, *, keep: bool) -> pa.Array:
        """The texts of rows ``0:count``, Kineto's line breaks and indentation removed (see
        :func:`joined_texts_array`), null for ``{}`` and shorter; ``keep`` as there."""
        ...

    def group_values(self, rows: Int64Array, group: int) -> tuple[tuple[str, ...], dict[str, Any]]:
        """The args fields read for one group of rows (see :func:`group_fields`) and their
        values at ``rows`` (:func:`struct_values`' types)."""
        ...


@dataclass(frozen=True)
class _ListTexts:
    """Args texts held as decoded raw values."""

    texts: list[Any]

    def joined(self, rows: Int64Array, sep: bytes, prefix: bytes, suffix: bytes) -> bytes:
        picked = self.texts if rows.size == len(self.texts) else _picked(self.texts, rows)
        # the prefix and suffix go with the first and last texts: the text is copied once
        framed: list[Any] = list(picked)
        framed[0] = prefix + framed[0]
        framed[-1] = bytes(framed[-1]) + suffix
        return sep.join(framed)

    def text(self, row: int) -> bytes:
        return bytes(self.texts[row])

    def args_column(self, count: int, *, keep: bool) -> pa.Array:
        joined = self.joined(np.arange(count), SEPARATOR, b"", SEPARATOR)
        return joined_texts_array(joined, empty=2, compact=True, keep=keep)  # "{}": no args

    def group_values(self, rows: Int64Array, group: int) -> tuple[tuple[str, ...], dict[str, Any]]:
        structs, fields = _decode_group(self, rows, group)
        return fields, struct_values(structs, fields)


RAW_ARGS = ("input_dims", "input_type")  # kept as their JSON text


def arg_key(attr: str) -> str:
    """The JSON key of an args field."""
    key: str = _ARG_FIELDS[attr][0]
    return key


def group_fields(
    group: int, joined: Callable[[], bytes], found: Callable[[str], bool]
) -> tuple[str, ...]:
    """The args fields read for a group of rows: those it always carries, and the others
    whose key is in its rows' args text (``joined``, asked only where ``found``, the fields
    seen as keys of some row, does not already tell)."""
    always, optional = _GROUP_FIELDS[group]
    present = tuple(
        a for a in optional if found(a) or b'"' + arg_key(a).encode() + b'"' in joined()
    )
    return always + present


def struct_decoder(fields: tuple[str, ...]) -> tuple[type[msgspec.Struct], Any]:
    """The struct of ``fields`` and a decoder of one such struct."""
    struct, _ = _struct_for(fields)
    return struct, msgspec.json.Decoder(struct)


def struct_values(structs: list[Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The values of decoded args structs: ids and sizes as int64 (-1 absent), flops as
    float64 (NaN absent), the raw fields as strings (null absent)."""
    values: dict[str, Any] = {}
    for attr in fields:
        items = list(map(attrgetter(attr), structs))
        if attr in RAW_ARGS:
            values[attr] = texts_array(items)
        elif attr == "flops":
            values[attr] = np.fromiter(items, np.float64, len(items))
        else:
            values[attr] = int_column(items)
    return values


def _decode_group(
    args: ArgsTexts, rows: Int64Array, group: int
) -> tuple[list[Any], tuple[str, ...]]:
    """Decode the args of one group of rows: list of structs and the fields they hold."""
    joined = args.joined(rows, b",", b"[", b"]")
    fields = group_fields(group, lambda: joined, lambda attr: False)
    struct, decoder = _struct_for(fields)
    try:
        return decoder.decode(joined), fields
    except DECODE_ERRORS:
        pass
    one = msgspec.json.Decoder(struct)
    return [decode_one(one, args.text(r), struct, fields) for r in rows.tolist()], fields


def decode_one(
    decoder: msgspec.json.Decoder[Any],
    raw: bytes,
    struct: type[msgspec.Struct],
    fields: tuple[str, ...],
) -> Any:
    try:
        return decoder.decode(raw)
    except DECODE_ERRORS:
        return _lenient_args(bytes(raw), struct, fields)


# --- ids ----------------------------------------------------------------------------------


def _to_int(value: Any) -> int:
    """An id written as an int or a numeric string ("25738", "stream 7", "0x0"); else -1."""
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else -1
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text, 0) if text[:2].lower() == "0x" else int(text)
        except ValueError:  # not a number, or too many digits for Python to read at all
            match = _TRAILING_NUMBER.search(text)
            digits = match.group(1).lstrip("0") if match else ""
            # beyond 19 digits no int64 holds it
            number = int(digits or "0") if match and len(digits) <= 19 else -1
        return number if -(2**63) <= number < 2**63 else -1
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return -1


def _int_rows(values: list[Any]) -> tuple[Int64Array, Int64Array] | None:
    """The values that are ints as int64 (-1 elsewhere) and the rows of the others; None
    when an int is beyond int64.

    For lists where a few rows are not ints (Kineto's bookkeeping rows name their pid and
    tid): the ints are read without a function call per row, the few others one by one.
    """
    n = len(values)
    try:
        ids = np.fromiter([v if type(v) is int else -1 for v in values], np.int64, n)
    except OverflowError:
        return None
    return ids, np.flatnonzero(np.fromiter([type(v) is not int for v in values], np.bool_, n))


def int_column(values: list[Any]) -> Int64Array:
    """Ids as int64 (numeric strings parsed, anything else -1)."""
    try:
        return np.fromiter(values, np.int64, len(values))
    except (TypeError, ValueError, OverflowError):
        pass
    found = _int_rows(values)
    if found is None:
        return np.fromiter(map(_to_int, values), np.int64, len(values))
    ids, others = found
    for row in others.tolist():
        ids[row] = _to_int(values[row])
    return ids


def _numeric_pid(values: list[int | str]) -> tuple[Int64Array, BoolArray]:
    """Pids as int64 and which are numeric: Kineto's bookkeeping rows use names as pids."""
    n = len(values)
    if str not in set(map(type, values)):  # numpy would also take "-5", "+5", "1_000"
        try:
            return np.fromiter(values, np.int64, n), np.ones(n, np.bool_)
        except (TypeError, ValueError, OverflowError):
            pass
    found = _int_rows(values)
    if found is None:
        ids = np.fromiter(map(_pid_or_none, values), np.int64, n)
        return ids, np.fromiter((_pid_is_numeric(v) for v in values), np.bool_, n)
    ids, others = found
    numeric = np.ones(n, np.bool_)
    for row in others.tolist():
        numeric[row] = _pid_is_numeric(values[row])
        ids[row] = _pid_or_none(values[row])
    return ids, numeric


def _pid_is_numeric(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    text = value.strip() if isinstance(value, str) else ""
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses
    return text.isascii() and text.isdigit() and len(text) < 19


def _pid_or_none(value: Any) -> int:
    return int(value) if _pid_is_numeric(value) else -1


# --- chunk → block ------------------------------------------------------------------------


@dataclass
class Block:
    """The kept rows (complete and instant events) of one chunk, as columns.

    Optional columns are None when no row of the chunk carries them.
    """

    cat: pa.Array  # dictionary<string>
    name: pa.Array  # dictionary<string>
    phase: npt.NDArray[np.int8]
    # Ids are stored as int32 when a chunk's values fit (most do): the blocks are the bulk of
    # the memory an import holds before the table is laid out.
    pid: IdArray
    tid: IdArray
    stream: IdArray  # device rows: args.stream, else tid; host rows: tid
    device: IdArray  # args.device, else the pid
    ts: Int64Array  # ns, before the base time is added
    dur: Int64Array
    correlation: IdArray
    external_id: IdArray
    nbytes: IdArray | None  # args.bytes, else args.size
    flops: FloatArray | None
    shapes: pa.Array | None
    dtypes: pa.Array | None
    args: pa.Array


@dataclass
class Side:
    """What a chunk holds besides events: metadata, flows, counters, bookkeeping."""

    metadata: list[tuple[str, int | str, int | str, dict[str, Any]]] = field(default_factory=list)
    flow_pid: list[IdArray] = field(default_factory=list)
    flow_tid: list[IdArray] = field(default_factory=list)
    flow_ts: list[Int64Array] = field(default_factory=list)
    flow_id: list[Int64Array] = field(default_factory=list)
    flow_start: list[BoolArray] = field(default_factory=list)
    counter_ts: list[Int64Array] = field(default_factory=list)
    # texts, or dictionary arrays of them (int32 codes)
    counter_track: list[pa.Array] = field(default_factory=list)
    counter_name: list[pa.Array] = field(default_factory=list)
    counter_value: list[FloatArray] = field(default_factory=list)
    spans: list[tuple[str, int, int]] = field(default_factory=list)
    markers: list[tuple[str, int]] = field(default_factory=list)
    malformed: int = 0
    negative_durations: int = 0
    other_phases: dict[str, int] = field(default_factory=dict)

    def absorb(self, later: Side) -> None:
        """Append what a later stretch of the file found (as if one Side had read both)."""
        for item in fields(self):
            mine, theirs = getattr(self, item.name), getattr(later, item.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            elif isinstance(mine, dict):
                for key, count in theirs.items():
                    mine[key] = mine.get(key, 0) + count
            elif isinstance(mine, int):
                setattr(self, item.name, mine + theirs)
            else:
                raise TypeError(f"Side.absorb does not know how to merge {item.name}")


def _times(
    chunk: Chunk,
) -> tuple[list[FastEvent] | list[TextEvent], Int64Array, BoolArray, Int64Array, BoolArray]:
    """Start and duration of every event in ns, and which rows have valid ones."""
    events = chunk.events
    if events and isinstance(events[0], FastEvent):
        ts = _number_us_ns([e.ts for e in events])
        dur = _number_us_ns([e.dur for e in events])
        if ts is not None and dur is not None:
            return events, ts[0], ts[1], dur[0], dur[1]
        events = chunk.as_text()
    ts_ns, ts_ok = text_us_ns([e.ts for e in events], required=True)  # type: ignore[misc]
    dur_ns, dur_ok = text_us_ns([e.dur for e in events], required=False)  # type: ignore[misc]
    return events, ts_ns, ts_ok, dur_ns, dur_ok


def _number_us_ns(values: list[int | float]) -> tuple[Int64Array, BoolArray] | None:
    """Decoded µs (ints, or floats where any row has one) as exact ns; None when the text
    is needed (see :func:`float_us_ns`)."""
    # numpy finds the type itself: all ints give int64 (read without a float conversion
    # per value), any float gives float64, exactly as a float64 conversion of every value.
    found = np.array(values)
    if found.dtype == np.int64:
        if found.size and (int(found.min()) < -_MAX_US or int(found.max()) > _MAX_US):
            return None
        return found * _NS_PER_US, np.ones(found.size, np.bool_)
    if found.dtype != np.float64:  # ints beyond int64 (uint64, Python objects): the text
        return None
    return float_us_ns(found)


def _encoded(values: list[str] | pa.Array) -> tuple[list[str], npt.NDArray[np.int32]]:
    """Distinct values in order of first appearance, and each row's index among them.

    For short strings with few distinct values (categories): the codes then serve the
    category rules, the launch flows and the kept rows' dictionary, each without another
    pass over the strings.
    """
    array = values if isinstance(values, pa.Array) else pa.array(values, pa.string())
    encoded = pc.dictionary_encode(array)
    return encoded.dictionary.to_pylist(), np.asarray(encoded.indices, np.int32)


def _dictionary_array(distinct: list[str], codes: npt.NDArray[np.int32]) -> pa.DictionaryArray:
    """The rows ``codes`` of ``distinct`` as :func:`pyarrow.compute.dictionary_encode` would
    encode their strings: the dictionary in order of first appearance among these rows."""
    encoded = pc.dictionary_encode(pa.array(codes, pa.int32()))  # integers: a cheap hash
    return pa.DictionaryArray.from_arrays(
        encoded.indices, pa.array(distinct, pa.string()).take(encoded.dictionary)
    )


@dataclass(frozen=True)
class _Categories:
    """Per distinct category of a chunk: its args group, whether it is a device's, whether
    it is a launch flow's."""

    group: Int64Array
    device: BoolArray
    launch_flow: BoolArray


def _category_rules(categories: list[str]) -> _Categories:
    group = np.full(len(categories), GROUP_OTHER, np.int64)
    device = np.zeros(len(categories), np.bool_)
    launch_flow = np.zeros(len(categories), np.bool_)
    for i, category in enumerate(categories):
        lowered = category.lower()
        kind = vendors.KINETO_CATEGORY_KINDS.get(lowered)
        device[i] = lowered in vendors.KINETO_DEVICE_CATEGORIES
        launch_flow[i] = lowered in vendors.KINETO_LAUNCH_FLOW_CATEGORIES
        if device[i]:
            group[i] = GROUP_DEVICE
        elif kind in ("runtime", "sync"):
            group[i] = GROUP_LAUNCH
        elif kind is not None:
            group[i] = GROUP_HOST
    return _Categories(group, device, launch_flow)


def _clamped_durations(dur: Int64Array, side: Side) -> Int64Array:
    """Durations with negative ones set to 0 (an event cannot end before it starts), counted."""
    side.negative_durations += int((dur < 0).sum())
    return np.maximum(dur, 0)


def _narrow(values: Int64Array) -> IdArray:
    """int32 when every value fits, else the int64 values unchanged."""
    if values.size and (values.min() < -(2**31) or values.max() >= 2**31):
        return values
    return values.astype(np.int32)


def _picked(values: list[Any], rows: Int64Array) -> list[Any]:
    """``values`` at ``rows`` (at least one row)."""
    # itemgetter picks them in C; a comprehension over the indices costs twice as much
    return list(itemgetter(*rows.tolist())(values)) if rows.size > 1 else [values[int(rows[0])]]


class _PhaseCodes(dict[str, int]):
    def __missing__(self, key: str) -> int:
        return -1


# Codes of the phases the scanner's side data reads (kineto_scan).
PH_METADATA, PH_COUNTER = _PH_M, _PH_C

_PHASE_CODES = _PhaseCodes({ph: code for code, ph in enumerate(_PHASES.to_pylist())})
# The code of each one-byte phase, indexed by its byte (-1: a phase not imported).
_PHASE_BYTE_CODES = np.full(256, -1, np.int64)
_PHASE_BYTE_CODES[[ord(ph) for ph in _PHASE_CODES]] = list(_PHASE_CODES.values())
PH_CODES_BY_BYTE = _PHASE_BYTE_CODES


def _phase_codes(phases: list[str]) -> Int64Array:
    """The code of each row's phase (-1 for phases not imported)."""
    # Phases are one ASCII letter: their bytes index a table, with no lookup per row. (No
    # phase is empty and the join is one character per phase: each phase is one character.)
    joined = "".join(phases)
    if len(joined) == len(phases) and joined.isascii() and "" not in phases:
        return _PHASE_BYTE_CODES[np.frombuffer(joined.encode("ascii"), np.uint8)]
    return np.fromiter(map(_PHASE_CODES.__getitem__, phases), np.int64, len(phases))


@dataclass
class ChunkFields:
    """One chunk's events as the columns a block is made of, however the chunk was read.
    ``events``: the decoded events at least at the rows the side data reads one by one
    (Kineto's bookkeeping rows, metadata, counters and phases not imported; None elsewhere);
    ``names``: the names of some rows as ``pc.dictionary_encode`` encodes them; ``args``: the
    args texts of the rows given to :meth:`args_of`; ``ids``: the ids of some rows."""

    codes: Int64Array
    pid: Int64Array
    numeric_pid: BoolArray
    tid: Int64Array
    categories: list[str]
    cat_codes: npt.NDArray[np.int32]
    ts: Int64Array
    ts_ok: BoolArray
    dur: Int64Array
    dur_ok: BoolArray
    events: Sequence[Any]
    names: Callable[[Int64Array], pa.Array]
    args_of: Callable[[Int64Array], ArgsTexts]
    ids: Callable[[Int64Array], Int64Array]


def _event_fields(chunk: Chunk) -> ChunkFields:
    """The fields of decoded events: one list comprehension per field."""
    events, ts, ts_ok, dur, dur_ok = _times(chunk)
    pid, numeric_pid = _numeric_pid([e.pid for e in events])
    categories, cat_codes = _encoded([e.cat for e in events])
    return ChunkFields(
        codes=_phase_codes([e.ph for e in events]),
        pid=pid,
        numeric_pid=numeric_pid,
        tid=int_column([e.tid for e in events]),
        categories=categories,
        cat_codes=cat_codes,
        ts=ts,
        ts_ok=ts_ok,
        dur=dur,
        dur_ok=dur_ok,
        events=events,
        # long strings: Arrow's hash of their bytes beats Python's dict here
        names=lambda rows: pc.dictionary_encode(
            pa.array([e.name for e in _picked(events, rows)], pa.string())
        ),
        args_of=lambda rows: _ListTexts([e.args for e in _picked(events, rows)]),
        ids=lambda rows: int_column(list(map(attrgetter("id"), _picked(events, rows)))),
    )


def chunk_columns(chunk: Chunk, side: Side, *, pooled: bool = True) -> Block | None:
    """Columns of one decoded chunk; metadata, flows and counters go to ``side``.

    ``pooled``: the block stays in this process until the table is laid out, so its args
    text is copied into Arrow's memory pool (see ``kineto_text.string_array``); a block
    sent to another process is copied by its pickle anyway.
    """
    return block_of(_event_fields(chunk), side, pooled=pooled)


def block_of(chunk: ChunkFields, side: Side, *, pooled: bool = True) -> Block | None:
    """The block of one chunk's fields (see :func:`chunk_columns`)."""
    codes, pid, ts, dur = chunk.codes, chunk.pid, chunk.ts, chunk.dur
    rules = _category_rules(chunk.categories)
    cat_codes = chunk.cat_codes

    is_instant = (codes == _PH_I) | (codes == _PH_I2)
    candidate = ((codes == _PH_X) | is_instant) & chunk.numeric_pid
    bad_time = candidate & ~(chunk.ts_ok & chunk.dur_ok)
    side.malformed += int(bad_time.sum())
    keep = np.flatnonzero(candidate & ~bad_time)

    events = chunk.events
    _bookkeeping(events, codes, chunk.numeric_pid, ts, dur, side)
    _metadata(events, codes, side)
    _flows(chunk.ids, codes, rules.launch_flow[cat_codes], pid, chunk.tid, ts, side)
    _other_phases(events, codes, side)
    if keep.size == 0:
        return None

    kept_cats = cat_codes[keep]
    group = rules.group[kept_cats]
    on_device = rules.device[kept_cats]
    group[is_instant[keep]] = GROUP_INSTANT
    texts = chunk.args_of(keep)
    columns = _args_columns(texts, keep.size, group, ts[keep], side)
    kept_pid = pid[keep]
    kept_tid = chunk.tid[keep]
    stream = columns.pop("stream")
    device = columns.pop("device")
    external = columns.pop("external_id")
    external_old = columns.pop("external_id_old", None)
    if external_old is not None:
        external = np.where(external != -1, external, external_old)
    nbytes = columns.pop("bytes", None)
    size = columns.pop("size", None)
    if nbytes is None:
        nbytes = size
    elif size is not None:
        nbytes = np.where(nbytes >= 0, nbytes, size)
    return Block(
        cat=_dictionary_array(chunk.categories, kept_cats),
        name=chunk.names(keep),
        phase=np.where(is_instant[keep], PHASE_INSTANT, PHASE_COMPLETE).astype(np.int8),
        pid=_narrow(kept_pid),
        tid=_narrow(kept_tid),
        stream=_narrow(np.where(on_device & (stream >= 0), stream, kept_tid)),
        device=_narrow(np.where(device >= 0, device, kept_pid)),
        ts=ts[keep],
        dur=_clamped_durations(dur[keep], side),
        correlation=_narrow(columns.pop("correlation")),
        external_id=_narrow(external),
        nbytes=None if nbytes is None else _narrow(nbytes),
        flops=columns.pop("flops", None),
        shapes=columns.pop("input_dims", None),
        dtypes=columns.pop("input_type", None),
        args=texts.args_column(keep.size, keep=pooled),
    )


_INT_DEFAULTS = ("external_id", "correlation", "device", "stream")


def _args_columns(
    texts: ArgsTexts, m: int, group: Int64Array, ts: Int64Array, side: Side
) -> dict[str, Any]:
    """Decode the ``m`` kept rows' args group by group; scatter the fields into row order."""
    columns: dict[str, Any] = {attr: np.full(m, -1, np.int64) for attr in _INT_DEFAULTS}
    raw_columns: dict[str, list[pa.Array]] = {}
    raw_rows: dict[str, list[Int64Array]] = {}
    for g in np.flatnonzero(np.bincount(group)).tolist():  # the groups present (few codes)
        rows = np.flatnonzero(group == g)
        fields, values = texts.group_values(rows, g)
        if g == GROUP_INSTANT:
            memory_counters(values, rows.size, ts[rows], side)
            continue
        for attr in fields:
            if attr in RAW_ARGS:
                raw_columns.setdefault(attr, []).append(values[attr])
                raw_rows.setdefault(attr, []).append(rows)
                continue
            if attr == "flops":
                target = columns.setdefault(attr, np.full(m, np.nan, np.float64))
            else:
                target = columns.setdefault(attr, np.full(m, -1, np.int64))
            target[rows] = values[attr]
    for attr, arrays in raw_columns.items():
        # the values in group order, plus one absent value for the rows of other groups
        array = pa.concat_arrays([*arrays, pa.nulls(1, pa.string())])
        if array.null_count == len(array):
            continue
        count = len(array) - 1
        index = np.full(m, count, np.int64)
        index[np.concatenate(raw_rows[attr])] = np.arange(count)
        columns[attr] = array.take(pa.array(index))
    return columns


def _bookkeeping(
    events: Sequence[Any],
    codes: Int64Array,
    numeric_pid: BoolArray,
    ts: Int64Array,
    dur: Int64Array,
    side: Side,
) -> None:
    """Kineto's own rows (string pids): the profiler span and the record window markers."""
    for row in np.flatnonzero(~numeric_pid).tolist():
        event = events[row]
        if codes[row] == _PH_X and event.cat.lower() in vendors.KINETO_SPAN_CATEGORIES:
            side.spans.append((event.name, int(ts[row]), int(dur[row])))
        elif codes[row] in (_PH_I, _PH_I2):
            side.markers.append((event.name, int(ts[row])))


def _metadata(events: Sequence[Any], codes: Int64Array, side: Side) -> None:
    for row in np.flatnonzero(codes == _PH_M).tolist():
        event = events[row]
        try:
            args = _ANY_DECODER.decode(event.args)
        except DECODE_ERRORS:
            args = {}
        side.metadata.append(
            (event.name, event.pid, event.tid, args if isinstance(args, dict) else {})
        )


def _flows(
    ids_of: Callable[[Int64Array], Int64Array],
    codes: Int64Array,
    launch: BoolArray,
    pid: Int64Array,
    tid: Int64Array,
    ts: Int64Array,
    side: Side,
) -> None:
    """Launch flows (host call → device task): their ids are correlation ids."""
    is_flow = (codes == _PH_S) | (codes == _PH_F) | (codes == _PH_T)
    if not is_flow.any():
        return
    rows = np.flatnonzero(is_flow & launch)
    if rows.size == 0:
        return
    ids = ids_of(rows)
    ok = ids >= 0
    rows = rows[ok]
    side.flow_pid.append(_narrow(pid[rows]))
    side.flow_tid.append(_narrow(tid[rows]))
    side.flow_ts.append(ts[rows])
    side.flow_id.append(ids[ok])
    side.flow_start.append(codes[rows] == _PH_S)


def _other_phases(events: Sequence[Any], codes: Int64Array, side: Side) -> None:
    """Counter events become counters; phases not imported (B/E ...) are counted."""
    for row in np.flatnonzero(codes < 0).tolist():
        phase = events[row].ph
        side.other_phases[phase] = side.other_phases.get(phase, 0) + 1
    for row in np.flatnonzero(codes == _PH_C).tolist():
        event = events[row]
        try:
            values = _ANY_DECODER.decode(event.args)
        except DECODE_ERRORS:
            continue
        text = (
            event.ts if isinstance(event, TextEvent) else msgspec.Raw(msgspec.json.encode(event.ts))
        )
        ts, ok = text_us_ns([text], required=True)
        if not isinstance(values, dict) or not ok[0]:
            continue
        for key, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                side.counter_ts.append(ts)
                side.counter_track.append(pa.array([event.name], pa.string()))
                side.counter_name.append(pa.array([str(key)], pa.string()))
                side.counter_value.append(np.array([float(value)]))
