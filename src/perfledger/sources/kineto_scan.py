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
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.sources.kineto_columns import (
    PH_CODES_BY_BYTE,
    PH_COUNTER,
    PH_METADATA,
    ChunkFields,
    _encoded,
    _pid_is_numeric,
    _pid_or_none,
    _to_int,
)
from perfledger.sources.kineto_stream import DECODE_ERRORS, event_decoder
from perfledger.sources.kineto_text import (
    SEPARATOR,
    BoolArray,
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


@dataclass(frozen=True)
class _Spans:
    """One column of spans into the payload: the texts of some rows, joined."""

    payload: bytes | bytearray
    starts: Int64Array
    ends: Int64Array

    def joined(self, rows: Int64Array, sep: bytes, prefix: bytes, suffix: bytes) -> bytes:
        assert _kscan is not None
        data: bytes = _kscan.gather(
            self.payload,
            np.ascontiguousarray(self.starts[rows]),
            np.ascontiguousarray(self.ends[rows]),
            sep,
            prefix,
            suffix,
            _NO_ARGS,
        )
        return data

    def text(self, row: int) -> bytes:
        start = int(self.starts[row])
        return _NO_ARGS if start < 0 else bytes(self.payload[start : int(self.ends[row])])


class _Unsupported(Exception):
    """The chunk holds what only the general decoder reads exactly."""


class _Scan:
    """A scanned chunk: its spans, scalar kinds and integer values."""

    def __init__(
        self, payload: bytes | bytearray, spans: Int64Array, values: Int64Array, kinds: Any
    ) -> None:
        self.payload = payload
        self.bytes = np.frombuffer(payload, np.uint8)
        self.starts = spans[:, 0::2]
        self.ends = spans[:, 1::2]
        self.values = values
        self.kinds = kinds
        self.n = spans.shape[0]

    def present(self, field: int) -> BoolArray:
        return np.asarray(self.starts[:, field] >= 0)

    def strings(self, field: int, rows: Int64Array | None = None) -> pa.Array:
        """The string values of ``field`` (quotes off; no escapes) at ``rows``; "" if absent."""
        assert _kscan is not None
        starts = self.starts[:, field] if rows is None else self.starts[rows, field]
        ends = self.ends[:, field] if rows is None else self.ends[rows, field]
        present = starts >= 0
        inner_starts = np.where(present, starts + 1, -1)
        inner_ends = np.where(present, ends - 1, -1)
        data = _kscan.gather(self.payload, inner_starts, inner_ends, b"", b"", b"", b"")
        return string_array(data, np.where(present, inner_ends - inner_starts, 0), None)

    def raw_strings(self, field: int, rows: Int64Array) -> pa.Array:
        """The texts of ``field`` at ``rows`` as written (all present)."""
        assert _kscan is not None
        starts = np.ascontiguousarray(self.starts[rows, field])
        ends = np.ascontiguousarray(self.ends[rows, field])
        data = _kscan.gather(self.payload, starts, ends, b"", b"", b"", b"")
        return string_array(data, ends - starts, None)

    def text(self, field: int, row: int) -> str:
        """One string value, quotes off."""
        start, end = int(self.starts[row, field]), int(self.ends[row, field])
        return bytes(self.payload[start + 1 : end - 1]).decode("utf-8")

    def ids(self, slot: int, field: int, rows: Int64Array) -> Int64Array:
        """Integer ids at ``rows``: strings read as :func:`_to_int` reads them; -1 if absent."""
        kinds = self.kinds[rows, slot]
        ids = np.where(kinds == K_INT, self.values[rows, slot], -1)
        for i in np.flatnonzero(kinds == K_STRING).tolist():
            ids[i] = _to_int(self.text(field, int(rows[i])))
        return ids

    def texts_joined(self, field: int) -> bytes:
        """The raw texts of ``field`` in every row, each followed by SEPARATOR (absent: "")."""
        assert _kscan is not None
        starts, ends = self.starts[:, field], self.ends[:, field]
        data: bytes = _kscan.gather(
            self.payload,
            np.ascontiguousarray(starts),
            np.ascontiguousarray(ends),
            SEPARATOR,
            b"",
            SEPARATOR,
            b"",
        )
        return data

    def events_at(self, rows: Int64Array, *, text: bool) -> list[Any]:
        """The events at ``rows`` decoded by msgspec from their own text (as the general
        decoder reads them: FastEvent, or TextEvent when the times need their text)."""
        if rows.size == 0:
            return []
        assert _kscan is not None
        joined = _kscan.gather(
            self.payload,
            np.ascontiguousarray(self.starts[rows, 0]),
            np.ascontiguousarray(self.ends[rows, 0]),
            b",",
            b"[",
            b"]",
            b"",
        )
        try:
            decoded: list[Any] = event_decoder(text=text).decode(joined)
        except DECODE_ERRORS:
            raise _Unsupported from None
        return decoded


def scanned_fields(payload: bytes | bytearray) -> ChunkFields | None:
    """The fields of a chunk ``[e1, e2, ...]`` read by the scanner; None when the general
    decoder must read it (see the module's text)."""
    if _kscan is None:
        return None
    if not payload.isascii():
        try:
            str(payload, "utf-8")
        except UnicodeDecodeError:
            return None
    # Kineto's events take a few hundred bytes each; where they are shorter, the count of
    # opening braces bounds their number
    n, spans, values, kinds = _scanned(payload, len(payload) // _FEW_BYTES + 1)
    if n == _TOO_MANY:
        n, spans, values, kinds = _scanned(payload, payload.count(b"{"))
    if n <= 0:
        return None
    scan = _Scan(payload, spans[:n], values[:n], kinds[:n])
    try:
        return _fields(scan)
    except _Unsupported:
        return None


def _scanned(payload: bytes | bytearray, capacity: int) -> tuple[int, Int64Array, Int64Array, Any]:
    assert _kscan is not None
    spans = np.empty((capacity, 2 * _N_SPANS), np.int64)
    values = np.empty((capacity, _N_SCALARS), np.int64)
    kinds = np.empty((capacity, _N_SCALARS), np.uint8)
    n: int = _kscan.scan(payload, spans, values, kinds)
    return n, spans, values, kinds


def _kinds_within(scan: _Scan, slot: int, allowed: tuple[int, ...]) -> bool:
    return bool(np.isin(scan.kinds[:, slot], allowed).all())


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
    categories, cat_codes = _encoded(scan.strings(_CAT))
    # rows read one by one by the side data
    side_rows = np.flatnonzero(
        ~numeric_pid | (codes < 0) | (codes == PH_METADATA) | (codes == PH_COUNTER)
    )
    events: list[Any] = [None] * scan.n
    for row, event in zip(side_rows.tolist(), scan.events_at(side_rows, text=text), strict=True):
        events[row] = event
    args = _Spans(scan.payload, scan.starts[:, _ARGS], scan.ends[:, _ARGS])
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
        names=lambda rows: scan.strings(_NAME, rows),
        args_of=lambda rows: _Spans(scan.payload, args.starts[rows], args.ends[rows]),
        ids=lambda rows: scan.ids(_S_ID, _ID, rows),
    )


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
    codes = np.full(scan.n, -1, np.int64)
    one_byte = np.flatnonzero(scan.ends[:, _PH] - scan.starts[:, _PH] == 3)  # "X"
    codes[one_byte] = PH_CODES_BY_BYTE[scan.bytes[scan.starts[one_byte, _PH] + 1]]
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
