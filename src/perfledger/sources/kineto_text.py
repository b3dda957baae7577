"""Kineto's texts as columns: values joined into one buffer and cut by a vectorised search,
and times written in µs (integers, Kineto's floats with ns digits, any decimal) read as
exact integer ns without a Python call per value."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

_NS_PER_US = 1000
_MAX_US = (2**63 - 1) // _NS_PER_US  # largest µs whose ns value fits in int64
_FLOAT_NS_EXACT = float(2**43)  # below this many µs, float64 resolves better than 0.5 ns
_FLOAT_INT_EXACT = float(2**53)
_PLAIN_DECIMAL = r"^[0-9]+(\.[0-9]*)?$"
SEPARATOR = b"\x00"  # cannot occur in JSON text: splits joined values again


def string_array(
    data: bytes, lengths: Int64Array, valid: BoolArray | None, *, keep: bool = False
) -> pa.Array:
    """A string array over one buffer of concatenated values (no per-value copies).

    ``keep``: the array lives until the end of the import, so its text is copied into
    Arrow's memory pool, where the sorted copy made at the end can reuse it once freed.
    """
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    validity = None
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    text: pa.Buffer = pa.py_buffer(data)
    if keep:
        text = pa.allocate_buffer(len(data))
        np.frombuffer(text, np.uint8)[:] = np.frombuffer(data, np.uint8)
    if offsets[-1] < 2**31:
        return pa.StringArray.from_buffers(
            lengths.size, pa.py_buffer(offsets.astype(np.int32)), text, validity
        )
    return pa.LargeStringArray.from_buffers(
        lengths.size, pa.py_buffer(offsets), text, validity
    ).cast(pa.string())


def texts_array(
    raws: list[msgspec.Raw], *, empty: int = 0, compact: bool = False, keep: bool = False
) -> pa.Array:
    """The texts of raw JSON values as strings; null where the text is ``empty`` bytes or less.

    Values are joined with a separator that JSON text cannot hold, so that the lengths come
    from one vectorised search instead of a call per value. ``compact`` drops the line breaks
    and indentation of Kineto's pretty printing (a raw line break can only be whitespace
    between JSON tokens, never part of a string). ``keep``: as for :func:`string_array`.
    """
    return joined_texts_array(
        SEPARATOR.join(raws) + SEPARATOR, empty=empty, compact=compact, keep=keep
    )


def joined_texts_array(
    joined: bytes, *, empty: int = 0, compact: bool = False, keep: bool = False
) -> pa.Array:
    """:func:`texts_array` of texts already joined, each followed by :data:`SEPARATOR`."""
    if compact and b"\n" in joined:
        joined = _without_breaks(joined)
    stops = np.flatnonzero(np.frombuffer(joined, np.uint8) == 0)
    lengths = np.diff(stops, prepend=-1) - 1
    return string_array(joined.replace(SEPARATOR, b""), lengths, lengths > empty, keep=keep)


def _without_breaks(joined: bytes) -> bytes:
    """The line breaks of Kineto's pretty printing and the indentation after them removed,
    as ``bytes.replace`` removes them (left to right), by Arrow's kernel in half its time."""
    text = pa.Array.from_buffers(
        pa.large_binary(),
        1,
        [None, pa.py_buffer(np.array([0, len(joined)], np.int64)), pa.py_buffer(joined)],
    )
    text = pc.replace_substring(text, b"\n      ", b"")
    text = pc.replace_substring(text, b"\n    ", b"")
    compacted = text[0].as_py()
    assert isinstance(compacted, bytes)
    return compacted.replace(b"\n", b"") if b"\n" in compacted else compacted


def _decimal_ns(text: str) -> int | None:
    """One number written in µs as exact integer ns (exponents, quoted numbers, signs)."""
    text = text.strip().strip('"').strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    try:
        ns = int((value * _NS_PER_US).to_integral_value())
    except ArithmeticError:  # an exponent beyond what Decimal holds (1e7466628)
        return None
    return ns if -(2**63) <= ns < 2**63 else None


def float_us_ns(values: FloatArray) -> tuple[Int64Array, BoolArray] | None:
    """µs decoded as float64 (from JSON ints or floats) to exact ns; None when text is needed.

    Integers below 2**53 are exact in a float64. Below 2**43 µs a float64 resolves the µs
    fraction to better than 0.5 ns, so the ns written in the text is recovered by rounding
    the fraction alone. Larger fractional values need the text.
    """
    valid = ~np.isnan(values)
    clean = np.where(valid, values, 0.0)
    whole = np.floor(clean)
    with np.errstate(invalid="ignore"):  # inf - inf: such values need the text anyway
        fraction = clean - whole
    magnitude = float(np.abs(clean).max()) if clean.size else 0.0
    if fraction.any():
        if magnitude >= _FLOAT_NS_EXACT:
            return None
    elif magnitude >= _FLOAT_INT_EXACT:
        return None
    ns = whole.astype(np.int64) * _NS_PER_US + np.rint(fraction * _NS_PER_US).astype(np.int64)
    return ns, valid


def text_us_ns(raws: list[msgspec.Raw], *, required: bool) -> tuple[Int64Array, BoolArray]:
    """Numbers written in µs as text (integers, floats with ns digits) to exact integer ns.

    Returns the values (0 where absent or invalid) and which rows hold a valid number. An
    absent value (empty text) is a valid 0 unless ``required``.
    """
    return joined_us_ns(SEPARATOR.join(raws) + SEPARATOR, required=required)


def joined_us_ns(joined: bytes, *, required: bool) -> tuple[Int64Array, BoolArray]:
    """:func:`text_us_ns` of texts already joined, each followed by :data:`SEPARATOR`."""
    stops = np.flatnonzero(np.frombuffer(joined, np.uint8) == 0)
    lengths = np.diff(stops, prepend=-1) - 1
    present = lengths > 0
    values, valid = _parse_text_ns(joined.replace(SEPARATOR, b""), lengths, present)
    return values, (valid & present) if required else valid


def _parse_text_ns(
    data: bytes, lengths: Int64Array, present: BoolArray
) -> tuple[Int64Array, BoolArray]:
    n = lengths.size
    if not data:
        return np.zeros(n, np.int64), np.ones(n, np.bool_)
    if data.isdigit() and int(lengths.max()) <= 18:  # integer µs
        values = _cast_int64(data, lengths, present)
        if values is not None and int(values.max()) <= _MAX_US:
            return values * _NS_PER_US, np.ones(n, np.bool_)
    # Kineto's float writer: "<µs>.<3 digits>", i.e. the ns value with a dot inside.
    digits = data.replace(b".", b"")
    if digits.isdigit() and len(data) - len(digits) == int(present.sum()):
        ends = np.cumsum(lengths)
        dots = np.flatnonzero(np.frombuffer(data, np.uint8) == 0x2E)
        if np.array_equal(dots, ends[present] - 4) and int(lengths.max()) <= 19:
            values = _cast_int64(digits, lengths - present, present)
            if values is not None:
                return values, np.ones(n, np.bool_)
    return _general_ns(data, lengths, present)


def _cast_int64(data: bytes, lengths: Int64Array, present: BoolArray) -> Int64Array | None:
    """Decimal digit strings to int64; None when some do not fit."""
    try:
        values = pc.cast(string_array(data, lengths, present), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _general_ns(
    data: bytes, lengths: Int64Array, present: BoolArray
) -> tuple[Int64Array, BoolArray]:
    """Any decimal text: vectorised for plain ``123.456...``, exact Decimal for the rest."""
    n = lengths.size
    array = string_array(data, lengths, present)
    plain = pc.fill_null(pc.match_substring_regex(array, _PLAIN_DECIMAL), False)
    plain_np = np.asarray(plain.to_numpy(zero_copy_only=False), dtype=np.bool_)
    values = np.zeros(n, np.int64)
    valid = ~present  # absent counts as a valid 0
    rows = np.flatnonzero(plain_np)
    if rows.size:
        parts = pc.split_pattern(array.take(pa.array(rows)), ".", max_splits=1)
        whole_text = pc.list_element(parts, 0)
        short = pc.less_equal(pc.utf8_length(whole_text), 18)
        whole = np.asarray(
            pc.cast(pc.if_else(short, whole_text, "0"), pa.int64()).to_numpy(zero_copy_only=False),
            dtype=np.int64,
        )
        fits = np.asarray(short.to_numpy(zero_copy_only=False), dtype=np.bool_) & (whole <= _MAX_US)
        sizes = np.asarray(pc.list_value_length(parts).to_numpy(zero_copy_only=False))
        fraction_ns = np.zeros(rows.size, np.int64)
        with_fraction = np.flatnonzero(sizes == 2)
        if with_fraction.size:
            fraction = pc.list_flatten(pc.list_slice(parts, 1, 2))
            first3 = pc.utf8_slice_codeunits(pc.utf8_rpad(fraction, 3, "0"), 0, 3)
            round_up = pc.greater_equal(pc.utf8_slice_codeunits(fraction, 3, 4), "5")
            fraction_ns[with_fraction] = np.asarray(
                pc.cast(first3, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64
            ) + np.asarray(round_up.to_numpy(zero_copy_only=False), dtype=np.int64)
        values[rows] = np.where(fits, whole * _NS_PER_US + fraction_ns, 0)
        valid[rows] = fits
    others = np.flatnonzero(present & ~plain_np)
    if others.size:
        # as bytes: a text that is not UTF-8 is no number either
        texts = array.take(pa.array(others)).cast(pa.binary()).to_pylist()
        for row, text in zip(others.tolist(), texts, strict=True):
            ns = _decimal_ns(text.decode("utf-8", "replace"))
            if ns is not None:
                values[row] = ns
                valid[row] = True
    return values, valid
