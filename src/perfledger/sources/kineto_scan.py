"""Kineto chunks read by the compiled scanner: every event's fields located in one pass over
the text (``_kscan.scan``) and made columns by numpy and Arrow, with no Python object per event.

The scanner settles a chunk alone only when the general decoder (msgspec, FastEvent) would
read it the same way: valid JSON, ph/cat/name strings without escapes, pid/tid integers or
strings, ts/dur numbers, each field named once. Any other chunk, or where the compiled module
is not built, returns None and goes the general way (:func:`~perfledger.sources.kineto_columns.
chunk_columns`); the columns are the same either way, value for value. The few rows read one
by one (Kineto's bookkeeping rows, metadata, counters, phases not imported) are decoded by
msgspec from their own text.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.sources.kineto_columns import (
    ARG_FIELD_NAMES,
    PH_CODES_BY_BYTE,
    PH_COUNTER,
    PH_METADATA,
    RAW_ARGS,
    Block,
    ChunkFields,
    Side,
    _pid_is_numeric,
    _pid_or_none,
    _to_int,
    arg_key,
    block_of,
    chunk_columns,
    decode_one,
    group_fields,
    struct_decoder,
    struct_values,
)
from perfledger.sources.kineto_stream import DECODE_ERRORS, Chunk, decode_payload, event_decoder
from perfledger.sources.kineto_text import (
    SEPARATOR,
    BoolArray,
    FloatArray,
    Int64Array,
    float_us_ns,
    joined_us_ns,
    string_array,
)


def _compiled() -> Any:
    """The compiled scanner; None where it was not built (no compiler where the project was
    installed): every chunk then goes the general way."""
    try:
        return importlib.import_module("perfledger.sources._kscan")
    except ImportError:
        return None


_kscan = _compiled()
AVAILABLE = _kscan is not None

# Span columns of a scanned event (start, end): the event, then its fields.
_N_SPANS = 10
_PH, _CAT, _NAME, _PID, _TID, _TS, _DUR, _ID, _ARGS = range(1, 10)
# Scalar slots (kind and integer value).
_N_SCALARS = 5
_S_PID, _S_TID, _S_TS, _S_DUR, _S_ID = range(5)
# Kinds of a scalar (as _kscan.c numbers them).
K_ABSENT, K_INT, K_NUMBER, K_STRING, K_NULL = range(5)

_NS_PER_US = 1000
_MAX_US = (2**63 - 1) // _NS_PER_US
_NO_ARGS = b"{}"
_TOO_MANY = -2  # what scan returns when the arrays hold too few rows
_FEW_BYTES = 48


def _kinds_in(kinds: npt.NDArray[np.uint8], allowed: tuple[int, ...]) -> npt.NDArray[np.bool_]:
    """``np.isin(kinds, allowed)`` of the scanner's kind codes (bytes): a table lookup, where
    isin sorts (it costs more than the scan of a chunk's small arrays)."""
    table = np.zeros(256, np.bool_)
    table[list(allowed)] = True
    return np.take(table, kinds)  # take: about twice as fast as indexing the table


# Column of each args field in the scanner's arg_* arrays.
_ARG_COLUMN: dict[str, int] = (
    {attr: list(_kscan.ARG_KEYS).index(arg_key(attr)) for attr in ARG_FIELD_NAMES}
    if _kscan is not None
    else {}
)
# The kinds whose values the arrays give, per field; a row with another kind in a field it is
# read for is decoded by msgspec (strictly, else leniently, as the general path does).
_INT_KINDS = (K_ABSENT, K_INT)
_FLOAT_KINDS = (K_ABSENT, K_INT, K_NUMBER)
# The bit of an event's arg_found telling that a string of its args held an escape.
_FOUND_ESCAPED = _kscan.FOUND_ESCAPED if _kscan is not None else 0


@dataclass(frozen=True)
class _ScannedArgs:
    """The args of some rows: their texts' spans, and the known keys' spans, kinds, values."""

    payload: bytes | bytearray
    starts: Int64Array
    ends: Int64Array
    kept: Int64Array  # the rows among the chunk's events
    arg_starts: Int64Array  # events x args fields (the scanner's ARG_KEYS order)
    arg_ends: Int64Array
    arg_kinds: Any
    arg_values: Int64Array
    arg_found: npt.NDArray[np.uint32]  # events: the scanner's arg_found bits

    def joined(self, rows: Int64Array, sep: bytes, prefix: bytes, suffix: bytes) -> bytes:
        starts, ends = self.starts[rows], self.ends[rows]
        return _gather(self.payload, starts, ends, sep, prefix, suffix, _NO_ARGS)

    def args_column(self, count: int, *, keep: bool) -> pa.Array:
        assert _kscan is not None
        data, lengths = _kscan.compact(
            self.payload,
            np.ascontiguousarray(self.starts[:count], np.int64),
            np.ascontiguousarray(self.ends[:count], np.int64),
            _NO_ARGS,
        )
        sizes = np.frombuffer(lengths, np.int64)
        return string_array(data, sizes, sizes > len(_NO_ARGS), keep=keep)

    def text(self, row: int) -> bytes:
        start = int(self.starts[row])
        return _NO_ARGS if start < 0 else bytes(self.payload[start : int(self.ends[row])])

    def group_values(self, rows: Int64Array, group: int) -> tuple[tuple[str, ...], dict[str, Any]]:
        at = self.kept[rows]
        kinds = np.take(self.arg_kinds, at, axis=0)  # rows gathered whole: take's fast path
        found = self.arg_found[at]
        # the keys some string of the rows' args equals: those their texts hold quoted
        quoted = int(np.bitwise_or.reduce(found)) if found.size else 0
        texts: list[bytes] = []

        def joined() -> bytes:
            # only the texts with escapes may hold a key quoted that no string equals
            if not texts:
                escaped = rows[(found & _FOUND_ESCAPED) != 0]
                texts.append(self.joined(escaped, b",", b"[", b"]"))
            return texts[0]

        fields = group_fields(group, joined, lambda attr: bool(quoted >> _ARG_COLUMN[attr] & 1))
        values: dict[str, Any] = {}
        other = np.zeros(rows.size, np.bool_)  # rows msgspec decodes
        for attr in fields:
            column = _ARG_COLUMN[attr]
            kind = kinds[:, column]
            if attr in RAW_ARGS:
                values[attr] = self._texts(at, column)
            elif attr == "flops":
                values[attr], odd = self._floats(at, column)
                other |= odd
            else:
                values[attr] = np.where(kind == K_INT, self.arg_values[:, column][at], -1)
                other |= ~_kinds_in(kind, _INT_KINDS)
        if other.any():
            _decoded_rows(values, fields, rows, np.flatnonzero(other), self.text)
        return fields, values

    def _texts(self, at: Int64Array, column: int) -> pa.Array:
        """A raw field's texts at events ``at`` as written; null where absent."""
        starts, ends = self.arg_starts[:, column][at], self.arg_ends[:, column][at]
        present = starts >= 0
        data = _gather(self.payload, starts, ends, b"", b"", b"")
        return string_array(data, np.where(present, ends - starts, 0), present)

    def _floats(self, at: Int64Array, column: int) -> tuple[FloatArray, BoolArray]:
        """flops at events ``at`` as float64 (NaN absent), and those msgspec must read."""
        kind = self.arg_kinds[:, column][at]
        values = self.arg_values[:, column][at].astype(np.float64)
        values[kind == K_ABSENT] = np.nan
        odd = ~_kinds_in(kind, _FLOAT_KINDS)
        numbers = np.flatnonzero(kind == K_NUMBER)
        if numbers.size:
            starts = self.arg_starts[at[numbers], column]
            ends = self.arg_ends[at[numbers], column]
            texts = string_array(
                _gather(self.payload, starts, ends, b"", b"", b""), ends - starts, None
            )
            # a float is written with a fraction or an exponent: an integer too long for int64
            # is msgspec's to convert
            fraction = np.asarray(
                pc.match_substring_regex(texts, "[.eE]").to_numpy(zero_copy_only=False), np.bool_
            )
            try:
                parsed = np.asarray(pc.cast(texts, pa.float64()), np.float64)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                parsed = np.full(numbers.size, np.nan)
                fraction[:] = False
            values[numbers] = parsed
            odd[numbers] |= ~(fraction & np.isfinite(parsed))
        return values, odd


def _decoded_rows(
    values: dict[str, Any],
    fields: tuple[str, ...],
    rows: Int64Array,
    odd: Int64Array,
    text: Any,
) -> None:
    """The values at ``odd`` (positions among ``rows``) decoded by msgspec from their args
    text, strictly, else leniently: the general path's per-row decode."""
    struct, decoder = struct_decoder(fields)
    structs = [decode_one(decoder, text(int(rows[i])), struct, fields) for i in odd.tolist()]
    decoded = struct_values(structs, fields)
    for attr in fields:
        if attr in RAW_ARGS:
            # the decoded texts after the scanned ones; each odd row takes its own
            index = np.arange(len(values[attr]))
            index[odd] = len(values[attr]) + np.arange(odd.size)
            merged = pa.concat_arrays([values[attr], decoded[attr]])
            values[attr] = merged.take(pa.array(index))
        else:
            values[attr][odd] = decoded[attr]


def _gather(
    payload: bytes | bytearray,
    starts: Int64Array,
    ends: Int64Array,
    sep: bytes,
    prefix: bytes,
    suffix: bytes,
    fill: bytes = b"",
) -> bytes:
    """The spans of ``payload`` joined (see _kscan.c); a span starting below 0 gives ``fill``."""
    assert _kscan is not None
    data: bytes = _kscan.gather(
        payload,
        np.ascontiguousarray(starts, np.int64),
        np.ascontiguousarray(ends, np.int64),
        sep,
        prefix,
        suffix,
        fill,
    )
    return data


def encoded_spans(
    payload: bytes | bytearray, starts: Int64Array, ends: Int64Array
) -> tuple[pa.Array, npt.NDArray[np.int32]]:
    """The string values whose quoted spans of ``payload`` are given (a start below 0: "")
    dictionary-encoded in one compiled pass, as ``pc.dictionary_encode`` encodes their texts:
    the distinct texts in order of first appearance, and each span's int32 code."""
    assert _kscan is not None
    codes, offsets, data = _kscan.encode_spans(
        payload, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64)
    )
    distinct = pa.StringArray.from_buffers(
        len(offsets) // 4 - 1, pa.py_buffer(offsets), pa.py_buffer(data)
    )
    return distinct, np.frombuffer(codes, np.int32)


def join_texts(data: Any, offsets: npt.NDArray[np.int32], codes: npt.NDArray[np.int32]) -> bytes:
    """The texts ``data[offsets[c]:offsets[c + 1]]`` of ``codes`` in order, those below 0 left
    out (a string table as Arrow lays it out; see _kscan.c). Only where :data:`AVAILABLE`."""
    assert _kscan is not None
    joined: bytes = _kscan.join(
        data, np.ascontiguousarray(offsets, np.int32), np.ascontiguousarray(codes, np.int32)
    )
    return joined


def copy_spans(
    sources: list[Any],
    source: npt.NDArray[np.int32],
    starts: Int64Array,
    lengths: Int64Array,
    out: Any,
) -> int:
    """Span i (``lengths[i]`` bytes from ``starts[i]`` of the buffer ``sources[source[i]]``)
    copied into the writable buffer ``out``, back to back from its start, in one compiled
    pass without the GIL; the bytes copied. Only where :data:`AVAILABLE`."""
    assert _kscan is not None
    copied: int = _kscan.copy_spans(
        sources,
        np.ascontiguousarray(source, np.int32),
        np.ascontiguousarray(starts, np.int64),
        np.ascontiguousarray(lengths, np.int64),
        out,
    )
    return copied


def decimal_texts(values: Int64Array, prefix: str, suffix: str) -> pa.Array:
    """Each value in decimal between ``prefix`` and ``suffix``, as a string array: what
    ``pc.cast`` to string and a join give, in one compiled pass. Only where
    :data:`AVAILABLE`; a ValueError where the texts would pass int32 offsets."""
    assert _kscan is not None
    values = np.ascontiguousarray(values, np.int64)
    data, offsets = _kscan.digits(values, prefix.encode(), suffix.encode())
    return pa.StringArray.from_buffers(values.size, pa.py_buffer(offsets), pa.py_buffer(data))


def string_table(texts: pa.Array) -> tuple[Any, npt.NDArray[np.int32]]:
    """A string array's value bytes and the int32 offsets of its own texts (from its offset
    on), as the compiled functions read a string table: no copy of the texts."""
    _, offsets_buffer, data = texts.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[texts.offset : texts.offset + len(texts) + 1]
    return (data if data is not None else b""), np.ascontiguousarray(offsets)


def cut_task_ids(texts: pa.Array) -> pa.Array:
    """The string array ``texts`` with Kineto's per-task ids cut from the front of each text:
    the leading ``"key": integer, `` pairs right after the opening brace, each cut pair
    leaving ``{`` (what ``pc.replace_substring_regex`` with analysis/ops.py's
    ``KINETO_TASK_IDS`` gives, in one compiled pass; see _kscan.c). Nulls stay null. Only
    where :data:`AVAILABLE`."""
    assert _kscan is not None
    texts = texts.cast(pa.string())
    n = len(texts)
    if n == 0:
        return texts
    cut, cut_offsets = _kscan.cut_ids(*string_table(texts))
    result = pa.StringArray.from_buffers(n, pa.py_buffer(cut_offsets), pa.py_buffer(cut))
    if texts.null_count:
        result = pc.if_else(texts.is_valid(), result, pa.scalar(None, pa.string()))
    return result


def named_key_rows(texts: pa.Array, rows: Int64Array) -> npt.NDArray[np.bool_]:
    """For each of ``rows`` of the string array ``texts``, whether its text holds a quoted
    ``op_type``, ``output_shapes``, ``output_dtypes``, ``input_formats`` or
    ``[a-z0-9_]+_ratio`` (the Ascend kernel keys the advisor parses; what
    ``pc.match_substring_regex`` with analysis/advisor/context.py's ``ASCEND_ARG_KEYS``
    finds), read in place: no copy of the texts. False for a null. Only where
    :data:`AVAILABLE`."""
    assert _kscan is not None
    rows = np.ascontiguousarray(rows, np.int64)
    if rows.size == 0:
        return np.zeros(0, dtype=bool)
    hit = np.frombuffer(_kscan.named_keys(*string_table(texts), rows), np.bool_)
    if texts.null_count:
        hit = hit & np.asarray(texts.is_valid().to_numpy(zero_copy_only=False))[rows]
    return hit


class _Unsupported(Exception):
    """The chunk holds what only the general decoder reads exactly."""


class _Scan:
    """A scanned chunk: its spans, scalar kinds and integer values, and its args' keys."""

    def __init__(self, payload: bytes | bytearray, arrays: _Arrays, n: int) -> None:
        self.payload = payload
        self.spans = spans = arrays.spans[:n]
        self.starts = spans[:, 0::2]
        self.ends = spans[:, 1::2]
        self.values = arrays.values[:n]
        self.kinds = arrays.kinds[:n]
        self.arg_starts = arrays.arg_spans[:n, 0::2]
        self.arg_ends = arrays.arg_spans[:n, 1::2]
        self.arg_kinds = arrays.arg_kinds[:n]
        self.arg_values = arrays.arg_values[:n]
        self.arg_found = arrays.arg_found[:n]
        self.n = n

    def encoded(
        self, field: int, rows: Int64Array | None = None
    ) -> tuple[pa.Array, npt.NDArray[np.int32]]:
        """The string values of ``field`` (quotes off, no escapes; "" if absent) at ``rows``
        as ``pc.dictionary_encode`` encodes them, without a string array made first: the
        distinct texts in order of first appearance and each row's int32 code."""
        starts = self.starts[:, field] if rows is None else self.starts[:, field][rows]
        ends = self.ends[:, field] if rows is None else self.ends[:, field][rows]
        return encoded_spans(self.payload, starts, ends)

    def raw_strings(self, field: int, rows: Int64Array) -> pa.Array:
        """The texts of ``field`` at ``rows`` as written (all present)."""
        starts, ends = self.starts[:, field][rows], self.ends[:, field][rows]
        return string_array(_gather(self.payload, starts, ends, b"", b"", b""), ends - starts, None)

    def text(self, field: int, row: int) -> str:
        """One string value, quotes off."""
        start, end = int(self.starts[row, field]), int(self.ends[row, field])
        return bytes(self.payload[start + 1 : end - 1]).decode("utf-8")

    def ids(self, slot: int, field: int, rows: Int64Array) -> Int64Array:
        """Integer ids at ``rows``: strings read as :func:`_to_int` reads them; -1 if absent."""
        kinds = self.kinds[:, slot][rows]
        ids = np.where(kinds == K_INT, self.values[:, slot][rows], -1)
        for i in np.flatnonzero(kinds == K_STRING).tolist():
            ids[i] = _to_int(self.text(field, int(rows[i])))
        return ids

    def texts_joined(self, field: int) -> bytes:
        """The raw texts of ``field`` in every row, each followed by SEPARATOR (absent: "")."""
        starts, ends = self.starts[:, field], self.ends[:, field]
        return _gather(self.payload, starts, ends, SEPARATOR, b"", SEPARATOR)

    def args_at(self, rows: Int64Array) -> _ScannedArgs:
        return _ScannedArgs(
            self.payload,
            self.starts[:, _ARGS][rows],
            self.ends[:, _ARGS][rows],
            rows,
            self.arg_starts,
            self.arg_ends,
            self.arg_kinds,
            self.arg_values,
            self.arg_found,
        )

    def events_at(self, rows: Int64Array, *, text: bool) -> list[Any]:
        """The events at ``rows`` decoded by msgspec from their own text (as the general
        decoder reads them: FastEvent, or TextEvent when the times need their text)."""
        if rows.size == 0:
            return []
        joined = _gather(
            self.payload, self.starts[:, 0][rows], self.ends[:, 0][rows], b",", b"[", b"]"
        )
        try:
            decoded: list[Any] = event_decoder(text=text).decode(joined)
        except DECODE_ERRORS:
            raise _Unsupported from None
        return decoded


@dataclass(frozen=True)
class _Arrays:
    """What the scanner writes, for ``capacity`` events."""

    spans: Int64Array
    values: Int64Array
    kinds: Any
    arg_spans: Int64Array
    arg_values: Int64Array
    arg_kinds: Any
    arg_found: npt.NDArray[np.uint32]
    high: npt.NDArray[np.uint8]  # 1: a string held a byte >= 0x80 (the UTF-8 check's to read)

    @classmethod
    def empty(cls, capacity: int) -> _Arrays:
        args = len(_ARG_COLUMN)
        return cls(
            np.empty((capacity, 2 * _N_SPANS), np.int64),
            np.empty((capacity, _N_SCALARS), np.int64),
            np.empty((capacity, _N_SCALARS), np.uint8),
            np.empty((capacity, 2 * args), np.int64),
            np.empty((capacity, args), np.int64),
            np.empty((capacity, args), np.uint8),
            np.empty(capacity, np.uint32),
            np.zeros(1, np.uint8),
        )


def scanned_block(
    payload: bytes | bytearray, side: Side, *, pooled: bool = True
) -> tuple[Block | None, int] | None:
    """The block of a chunk ``[e1, e2, ...]`` read by the scanner (side data into ``side``,
    ``pooled`` as for ``kineto_columns.chunk_columns``) and its event count; None when the
    general decoder must read it (see the module's text), ``side`` then untouched."""
    fields = _scanned_fields(payload)
    if fields is None:
        return None
    # the fields are views of this thread's scan arrays: the block is made of copies
    return block_of(fields, side, pooled=pooled), fields.codes.size


def scanned_or_decoded(payload: bytes | bytearray) -> Chunk:
    """A chunk's text read by the scanner where it can (its block made here, in this
    process: the args text kept in Arrow's pool), else decoded by msgspec; msgspec's errors
    where the text is not an array of events (see ``kineto_stream.read_events``)."""
    side = Side()
    scanned = scanned_block(payload, side)
    if scanned is None:
        return decode_payload(payload)
    return Chunk([], scanned=(scanned[0], side), scanned_count=scanned[1])


def chunk_block(chunk: Chunk, side: Side) -> Block | None:
    """The block of a chunk from :func:`scanned_or_decoded`; its side data into ``side``."""
    if chunk.scanned is None:
        return chunk_columns(chunk, side)
    block: Block | None
    block, own = chunk.scanned
    side.absorb(own)
    return block


_arrays = threading.local()


def _scan_arrays(capacity: int) -> _Arrays:
    """This thread's scan arrays, for at least ``capacity`` events: kept from chunk to chunk,
    since a fresh array's pages cost more to fault in than the scan takes to fill them."""
    arrays: _Arrays | None = getattr(_arrays, "held", None)
    if arrays is None or arrays.spans.shape[0] < capacity:
        arrays = _Arrays.empty(capacity)
        _arrays.held = arrays
    return arrays


def release_scan_arrays() -> None:
    """Let go of this thread's scan arrays (after a read in a process that goes on)."""
    _arrays.held = None


def _scanned_fields(payload: bytes | bytearray) -> ChunkFields | None:
    if _kscan is None:
        return None
    # Kineto's events take a few hundred bytes each; where they are shorter, the count of
    # opening braces bounds their number
    arrays = _scan_arrays(len(payload) // _FEW_BYTES + 1)
    n = _scanned(payload, arrays)
    if n == _TOO_MANY:
        arrays = _scan_arrays(payload.count(b"{"))
        n = _scanned(payload, arrays)
    if n <= 0:
        return None
    if arrays.high[0]:  # a string held a byte >= 0x80: the text must be UTF-8
        try:
            str(payload, "utf-8")
        except UnicodeDecodeError:
            return None
    try:
        return _fields(_Scan(payload, arrays, n))
    except _Unsupported:
        return None


def _scanned(payload: bytes | bytearray, arrays: _Arrays) -> int:
    assert _kscan is not None
    n: int = _kscan.scan(
        payload,
        arrays.spans,
        arrays.values,
        arrays.kinds,
        arrays.arg_spans,
        arrays.arg_values,
        arrays.arg_kinds,
        arrays.arg_found,
        arrays.high,
    )
    return n


def _kinds_within(scan: _Scan, slot: int, allowed: tuple[int, ...]) -> bool:
    return bool(_kinds_in(scan.kinds[:, slot], allowed).all())


def _fields(scan: _Scan) -> ChunkFields:
    # the types FastEvent accepts; anything else is the general decoder's to read
    if not (
        _kinds_within(scan, _S_PID, (K_ABSENT, K_INT, K_STRING))
        and _kinds_within(scan, _S_TID, (K_ABSENT, K_INT, K_STRING))
        and _kinds_within(scan, _S_ID, (K_ABSENT, K_INT, K_STRING, K_NULL))
        and _kinds_within(scan, _S_TS, (K_ABSENT, K_INT, K_NUMBER))
        and _kinds_within(scan, _S_DUR, (K_ABSENT, K_INT, K_NUMBER))
    ):
        raise _Unsupported
    ts = _decoded_us(scan, _S_TS, _TS, absent_nan=True)
    dur = _decoded_us(scan, _S_DUR, _DUR, absent_nan=False)
    text = ts is None or dur is None
    if ts is None or dur is None:  # as the general decoder: both times read from their text
        ts = joined_us_ns(scan.texts_joined(_TS), required=True)
        dur = joined_us_ns(scan.texts_joined(_DUR), required=False)
    codes = _phase_codes(scan)
    pid, numeric_pid = _pids(scan)
    tid = scan.ids(_S_TID, _TID, np.arange(scan.n))
    distinct, cat_codes = scan.encoded(_CAT)
    categories = distinct.to_pylist()
    # rows read one by one by the side data
    side_rows = np.flatnonzero(
        ~numeric_pid | (codes < 0) | (codes == PH_METADATA) | (codes == PH_COUNTER)
    )
    events: list[Any] = [None] * scan.n
    for row, event in zip(side_rows.tolist(), scan.events_at(side_rows, text=text), strict=True):
        events[row] = event
    return ChunkFields(
        codes=codes,
        pid=pid,
        numeric_pid=numeric_pid,
        tid=tid,
        categories=categories,
        cat_codes=cat_codes,
        ts=ts[0],
        ts_ok=ts[1],
        dur=dur[0],
        dur_ok=dur[1],
        events=events,
        names=lambda rows: _dictionary(*scan.encoded(_NAME, rows)),
        args_of=scan.args_at,
        ids=lambda rows: scan.ids(_S_ID, _ID, rows),
    )


def _dictionary(distinct: pa.Array, codes: npt.NDArray[np.int32]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), distinct)


def _decoded_us(
    scan: _Scan, slot: int, field: int, *, absent_nan: bool
) -> tuple[Int64Array, BoolArray] | None:
    """µs as the general decoder reads numbers (``kineto_columns._number_us_ns``): exact
    ns, or None when the text is needed. ``absent_nan``: an absent value is NaN (ts), else 0."""
    kinds = scan.kinds[:, slot]
    absent = kinds == K_ABSENT
    number = kinds == K_NUMBER
    if not number.any() and not (absent_nan and absent.any()):
        ints = np.where(absent, 0, scan.values[:, slot])
        if ints.size and (int(ints.min()) < -_MAX_US or int(ints.max()) > _MAX_US):
            return None
        return ints * _NS_PER_US, np.ones(ints.size, np.bool_)
    floats = scan.values[:, slot].astype(np.float64)
    floats[absent] = np.nan if absent_nan else 0.0
    rows = np.flatnonzero(number)
    if rows.size:
        texts = scan.raw_strings(field, rows)
        # integers too long for int64 are Python ints to the general decoder
        if not pc.all(pc.match_substring_regex(texts, "[.eE]")).as_py():
            raise _Unsupported
        floats[rows] = np.asarray(pc.cast(texts, pa.float64()), np.float64)
    return float_us_ns(floats)


def _phase_codes(scan: _Scan) -> Int64Array:
    """Each row's phase code; -1 for phases not imported (read again from the event)."""
    assert _kscan is not None
    codes = np.empty(scan.n, np.int64)
    _kscan.phase_codes(scan.payload, scan.spans, PH_CODES_BY_BYTE, codes)  # "X": one byte
    return codes


def _pids(scan: _Scan) -> tuple[Int64Array, BoolArray]:
    """Pids as int64 and which are numeric, as ``kineto_columns._numeric_pid`` reads them."""
    kinds = scan.kinds[:, _S_PID]
    pid = np.where(kinds == K_INT, scan.values[:, _S_PID], -1)
    numeric = np.ones(scan.n, np.bool_)
    for row in np.flatnonzero(kinds == K_STRING).tolist():
        value = scan.text(_PID, row)
        numeric[row] = _pid_is_numeric(value)
        pid[row] = _pid_or_none(value)
    return pid, numeric
