"""Streaming reader of Chrome-trace JSON: the traceEvents array, decoded in chunks.

Kineto writes one pretty-printed JSON object (about ten lines per event) that can be gigabytes
long. Decoding it whole takes several times its size in memory, so the reader streams the file
(gzip streamed too), cuts the traceEvents array into chunks of whole elements and decodes each
chunk with a typed msgspec decoder. Everything outside the array is decoded as plain JSON.

Cutting: a chunk ends after a ``}`` followed by ``,`` and ``{`` (the separator of two events,
found with a regex near the end of the buffer). A wrong guess (the pattern inside a string or a
nested object) cannot decode as a JSON array, so a failed decode falls back to an exact scan of
the bytes (string, escape and nesting state, vectorised with numpy) which also finds the end of
the array and any damage. A file cut short (a killed job) or damaged is read up to the damage.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from perfledger.errors import TraceFormatError
from perfledger.files import NotAFile, broken_link, open_regular
from perfledger.sources import gunzip

CHUNK_BYTES = 4 << 20
_SCAN_BLOCK = 1 << 20
_BOM = b"\xef\xbb\xbf"

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
_LEADING_COMMA = re.compile(rb"\s*,")
_HEAD_BYTES = 1 << 12  # read at a stretch's start for its leading separator
_NO_ARGS_TEXT = b"{}"

Progress = Callable[[int, int], None]


class FastEvent(msgspec.Struct, gc=False):
    """The fields of one trace event that the importer reads.

    ``ts``/``dur`` decode as numbers: integer µs exactly, and float µs exactly enough while a
    float64 still resolves a nanosecond (below 2**43 µs, which covers Kineto's timestamps
    relative to ``baseTimeNanoseconds``). Larger floats are re-read as text (TextEvent).
    """

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: int | float = math.nan
    dur: int | float = 0
    id: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(_NO_ARGS_TEXT)


class TextEvent(msgspec.Struct, gc=False):
    """As :class:`FastEvent`, with ``ts``/``dur`` kept as their JSON text."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    # float µs with ns digits in epoch time (1712195495505543.123) do not survive float64
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    id: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(_NO_ARGS_TEXT)


RawEvent = FastEvent | TextEvent


@dataclass
class Chunk:
    """Decoded events of one stretch of the array, and the text they were decoded from."""

    events: list[FastEvent] | list[TextEvent]
    payload: bytes | bytearray | None = None
    # a chunk the compiled scanner read (kineto_scan): its block and side data, made already,
    # and its event count; ``events`` is then empty
    scanned: Any = None
    scanned_count: int = 0

    @property
    def count(self) -> int:
        """How many events the chunk holds."""
        return self.scanned_count if self.scanned is not None else len(self.events)

    def as_text(self) -> list[TextEvent]:
        """The same events with their timestamps as text."""
        if self.payload is None:
            return self.events  # type: ignore[return-value]
        return _TEXT_DECODER.decode(self.payload)


# What a decoder raises on bad input (invalid UTF-8 is not a msgspec error; nesting deeper
# than the stack allows is a RecursionError).
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)

_FAST_DECODER = msgspec.json.Decoder(list[FastEvent])
_TEXT_DECODER = msgspec.json.Decoder(list[TextEvent])
_EVENT_DECODER = msgspec.json.Decoder(TextEvent)
_ANY_DECODER = msgspec.json.Decoder()


Decode = Callable[[bytes], Chunk]


def event_decoder(*, text: bool) -> msgspec.json.Decoder[Any]:
    """The decoder of a list of events: TextEvent (``text``) or FastEvent."""
    return _TEXT_DECODER if text else _FAST_DECODER


def decode_payload(payload: bytes | bytearray) -> Chunk:
    """Decode ``[e1, e2, ...]``; raises msgspec errors when it is not an array of events."""
    try:
        return Chunk(_FAST_DECODER.decode(payload), payload)
    except msgspec.ValidationError:
        return Chunk(_TEXT_DECODER.decode(payload), None)


@dataclass
class ReadResult:
    """What the reader found besides the events: top-level keys and what was lost."""

    head: dict[str, Any] = field(default_factory=dict)
    tail: dict[str, Any] = field(default_factory=dict)
    bare_array: bool = False
    events_seen: int = 0
    malformed: int = 0
    loss: list[str] = field(default_factory=list)


class _Source:
    """The bytes of a trace file, gunzipped on the fly; reports progress as it goes."""

    def __init__(self, path: Path, progress: Progress | None) -> None:
        self.path = path
        self._raw: IO[bytes] = open_regular(path)
        self.total = os.fstat(self._raw.fileno()).st_size
        self._progress = progress
        magic = self._raw.read(2)
        self._raw.seek(0)
        self._gzip = gunzip.inflating(self._raw) if magic == gunzip.GZIP_MAGIC else None
        self._fast = gunzip.fast()  # the gzip data read by ISA-L's reader
        self.eof = False
        self.damage: str | None = None
        self.offset = 0  # decompressed bytes delivered so far

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; fewer only at the end of the data (or where it is damaged)."""
        parts: list[bytes] = []
        got = 0
        while got < size and not self.eof:
            try:
                # read1: a stream cut short loses nothing that was decompressed before the cut
                part = (
                    self._gzip.read1(size - got)
                    if self._gzip is not None
                    else self._raw.read(size - got)
                )
            except gunzip.INFLATE_ERRORS as exc:
                if self._fast and self._gzip is not None:
                    # damaged: read again by zlib's reader, which gives every byte before
                    # the damage (the fast one may hold back the last it inflated) and
                    # names it as it always has
                    self._slow_from(self.offset + got)
                    continue
                self.damage = (
                    "the compressed stream ends early"
                    if isinstance(exc, EOFError)
                    else f"the compressed data is corrupt ({exc})"
                )
                part = b""
            if not part:
                self.eof = True
                break
            parts.append(part)
            got += len(part)
        self.offset += got
        if self._progress is not None:
            self._progress(min(self._raw.tell(), self.total), self.total)
        return b"".join(parts)

    @property
    def compressed(self) -> bool:
        """Whether the data is inflated from the file (its offsets are not the file's)."""
        return self._gzip is not None

    def fileno(self) -> int:
        """The descriptor of the open file."""
        return self._raw.fileno()

    def data_size(self) -> int:
        """The size of the data now (uncompressed: the open file's)."""
        return os.fstat(self.fileno()).st_size

    def read_at(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of an uncompressed file from ``offset``, without moving on
        (what :meth:`read` delivers next stays the same)."""
        data = os.pread(self.fileno(), size, offset)
        if self._progress is not None:
            self._progress(min(offset + len(data), self.total), self.total)
        return data

    def seek(self, offset: int) -> None:
        """Deliver an uncompressed file's bytes from ``offset`` on."""
        self._raw.seek(offset)
        self.offset = offset
        self.eof = False

    def rewind(self) -> None:
        """Start over at the first byte of the data (same open file)."""
        self._raw.seek(0)
        if self._gzip is not None:
            self._fast = gunzip.fast()
            self._gzip = gunzip.inflating(self._raw)
        self.eof = False
        self.damage = None
        self.offset = 0

    def _slow_from(self, delivered: int) -> None:
        """Inflate with zlib's reader from now on, its first ``delivered`` bytes (those the
        fast reader gave already) read again and dropped."""
        if self._gzip is not None:
            self._gzip.close()  # the file itself stays open (the reader was given it)
        self._raw.seek(0)
        self._fast = False
        self._gzip = inflater = gunzip.inflating(self._raw, prefer_fast=False)
        left = delivered
        while left > 0:
            try:
                dropped = len(inflater.read1(min(CHUNK_BYTES, left)))
            except gunzip.INFLATE_ERRORS:
                dropped = 0
            if dropped == 0:  # never: zlib's reader gives at least what the fast one did
                raise TraceFormatError(f"{self.path}: the compressed data reads differently twice")
            left -= dropped

    def skip(self, size: int) -> None:
        """Read and drop the first ``size`` bytes of the data (decompressed bytes for gzip)."""
        while self.offset < size and not self.eof:
            self.read(min(CHUNK_BYTES, size - self.offset))

    def close(self) -> None:
        if self._gzip is not None:
            self._gzip.close()
        self._raw.close()


def element_structure(buf: bytes, start: int, stop: int) -> tuple[list[int], int, int]:
    """Exact scan of array elements in ``buf[start:stop]``, which begins at element level.

    Returns the end offsets (one past ``}``) of the complete top-level elements, the offset of
    the ``]`` that closes the array (-1 when not reached) and the offset where the nesting
    breaks (-1 when it does not).
    """
    ends: list[int] = []
    in_string = 0
    depth = 0
    backslash_carry = 0  # parity of the backslash run that ended the previous block
    for b0 in range(start, stop, _SCAN_BLOCK):
        b1 = min(stop, b0 + _SCAN_BLOCK)
        chars = np.frombuffer(buf, np.uint8, b1 - b0, b0)
        quote = chars == 0x22
        backslash = chars == 0x5C
        if backslash_carry or backslash.any():
            # A quote is escaped when an odd run of backslashes precedes it.
            idx = np.arange(chars.size)
            last_other = np.maximum.accumulate(np.where(backslash, -1, idx))
            qpos = np.flatnonzero(quote)
            prev = qpos - 1
            before = np.where(prev >= 0, last_other[np.maximum(prev, 0)], -1)
            run = np.where(before >= 0, prev - before, qpos + backslash_carry)
            quote[qpos[(run & 1) == 1]] = False
            tail_other = int(last_other[-1])
            run_end = chars.size - 1 - tail_other
            backslash_carry = (run_end + (backslash_carry if tail_other < 0 else 0)) & 1
        parity = (np.cumsum(quote, dtype=np.int64) + in_string) & 1
        in_string = int(parity[-1])
        is_open = (chars == 0x7B) | (chars == 0x5B)
        is_close = (chars == 0x7D) | (chars == 0x5D)
        pos = np.flatnonzero((is_open | is_close) & (parity == 0))
        if pos.size == 0:
            continue
        step = np.where(is_open[pos], 1, -1)
        level = depth + np.cumsum(step)
        below = np.flatnonzero(level < 0)
        if below.size:
            first = int(below[0])
            at = int(pos[first])
            ends.extend(
                (pos[:first][(level[:first] == 0) & (chars[pos[:first]] == 0x7D)] + b0 + 1).tolist()
            )
            if chars[at] == 0x5D:
                return ends, b0 + at, -1
            return ends, -1, b0 + at
        closing = (level == 0) & (chars[pos] == 0x7D)
        ends.extend((pos[closing] + b0 + 1).tolist())
        depth = int(level[-1])
    return ends, -1, -1


def _strip_separator(piece: bytes) -> bytes:
    """An element's text without the separator that precedes it."""
    match = _LEADING_COMMA.match(piece)
    return piece[match.end() :] if match else piece


def _array_text(buf: bytes, stop: int) -> bytes:
    """``[`` + the elements in ``buf[:stop]`` (after any leading separator) + ``]``, one copy."""
    match = _LEADING_COMMA.match(buf)
    start = match.end() if match else 0
    return b"".join((b"[", memoryview(buf)[start:stop], b"]"))


def _lenient_event(value: Any) -> TextEvent | None:
    """An event from a decoded JSON value whose field types do not match :class:`TextEvent`."""
    if not isinstance(value, dict):
        return None

    def text(key: str) -> str:
        item = value.get(key, "")
        return item if isinstance(item, str) else ""

    def ident(key: str) -> int | str:
        item = value.get(key, -1)
        if isinstance(item, bool):
            return -1
        if isinstance(item, int | str):
            return item
        if isinstance(item, float) and item.is_integer():
            return int(item)
        return -1

    def number(key: str) -> msgspec.Raw:
        item = value.get(key)
        if isinstance(item, bool) or not isinstance(item, int | float | str):
            return msgspec.Raw(b"")
        return msgspec.Raw(msgspec.json.encode(item))

    flow_id = value.get("id")
    args = value.get("args")
    return TextEvent(
        ph=text("ph"),
        cat=text("cat"),
        name=text("name"),
        pid=ident("pid"),
        tid=ident("tid"),
        ts=number("ts"),
        dur=number("dur"),
        id=flow_id if isinstance(flow_id, int | str) and not isinstance(flow_id, bool) else None,
        args=msgspec.Raw(msgspec.json.encode(args if isinstance(args, dict) else {})),
    )


class Splitter:
    """Turns the bytes after ``"traceEvents": [`` into decoded chunks of events."""

    def __init__(
        self, source: _Source, result: ReadResult, first: bytes, decode: Decode | None = None
    ) -> None:
        self.decode = decode or decode_payload  # a chunk's text "[...]" to a Chunk
        self.source = source
        self.result = result
        self.buf = first
        self.base = source.offset - len(first)  # file offset of buf[0]
        self.finished = False
        self.array_closed = False
        self.tail_text = b""

    def _fill(self, size: int) -> None:
        if len(self.buf) < size and not self.source.eof:
            self.buf = self.buf + self.source.read(size - len(self.buf))

    def _consume(self, cut: int) -> None:
        self.base += cut
        self.buf = self.buf[cut:]

    def _decode_pieces(self, ends: list[int]) -> Chunk:
        """Decode elements one by one (after a chunk failed): skip the damaged ones."""
        events: list[TextEvent] = []
        prev = 0
        for end in ends:
            piece = _strip_separator(self.buf[prev:end])
            prev = end
            try:
                events.append(_EVENT_DECODER.decode(piece))
                continue
            except msgspec.ValidationError:
                try:
                    lenient = _lenient_event(_ANY_DECODER.decode(piece))
                except DECODE_ERRORS:
                    lenient = None
            except DECODE_ERRORS:
                lenient = None
            if lenient is None:
                self.result.malformed += 1
            else:
                events.append(lenient)
        return Chunk(events)

    def _decode_exact(self, limit: int) -> tuple[Chunk, int]:
        """Decode ``buf[:limit]`` after an exact scan; returns events and bytes consumed."""
        ends, array_end, broken = element_structure(self.buf, 0, limit)
        cut = ends[-1] if ends else 0
        events = Chunk([])
        if ends:
            try:
                events = self.decode(_array_text(self.buf, cut))
            except DECODE_ERRORS:
                events = self._decode_pieces(ends)
        if array_end >= 0:
            self.finished = True
            self.array_closed = True
            self.tail_text = self.buf[array_end + 1 :]
            return events, array_end + 1
        if broken >= 0:
            self.finished = True
            self.result.loss.append(
                f"the trace is damaged at byte {self.base + broken:,}"
                f" after {self.result.events_seen + events.count:,} events:"
                " the rest of the trace is lost"
            )
            return events, limit
        return events, cut

    def chunks(self) -> Iterator[Chunk]:
        """Decoded chunks of events, in file order; the tail keys are kept in ``tail_text``."""
        while not self.finished:
            chunk = self.read_chunk()
            if chunk is not None and chunk.count:
                yield chunk
        if self.array_closed:
            parts = [self.tail_text]
            while not self.source.eof:
                parts.append(self.source.read(CHUNK_BYTES))
            self.tail_text = b"".join(parts)

    def read_chunk(self) -> Chunk | None:
        """Decode the next stretch of the array (its events may be none); None when the
        array is done. Where a guessed cut does not decode, the exact scan reads on to the
        last whole element of the buffer, or finds where the data is damaged."""
        size = CHUNK_BYTES
        while not self.finished:
            self._fill(size)
            if self.source.eof:
                events, used = self._decode_exact(len(self.buf))
                self.result.events_seen += events.count
                if not self.finished:
                    self._truncated(used)
                    self.finished = True
                return events
            cut = self._last_separator(len(self.buf))
            if cut <= 0:
                size *= 2  # one element larger than the buffer: read more
                continue
            try:
                events = self.decode(_array_text(self.buf, cut))
            except DECODE_ERRORS:
                events, cut = self._decode_exact(len(self.buf))
                if cut == 0 and not self.finished:
                    size *= 2
                    continue
            self.result.events_seen += events.count
            self._consume(cut)
            return events
        return None

    def payloads(self) -> Generator[tuple[int, bytes], None, None]:
        """The chunks :meth:`chunks` would decode, undecoded: (data offset, ``[...]`` text).

        The cuts are guesses: a payload that does not decode must be read again from its
        offset (:func:`restart_at`, then :meth:`read_chunk`). Stops where the data ends,
        before the last stretch, which :meth:`chunks` then reads with the exact scan.
        """
        for start, _, _, payload in self._cuts(text=True):
            assert payload is not None
            yield start, payload

    def spans(self) -> Generator[tuple[int, int, int], None, None]:
        """As :meth:`payloads`, where the elements lie instead of their text: (data offset,
        first byte, end byte); the payload is ``[`` + data[first:end] + ``]``."""
        for start, first, stop, _ in self._cuts(text=False):
            yield start, first, stop

    def _cuts(self, *, text: bool) -> Generator[tuple[int, int, int, bytes | None], None, None]:
        if not text and not self.source.compressed:
            yield from self._places()
        size = CHUNK_BYTES
        while True:
            self._fill(size)
            if self.source.eof:
                return
            cut = self._last_separator(len(self.buf))
            if cut <= 0:
                size *= 2
                continue
            size = CHUNK_BYTES
            start = self.base
            payload = _array_text(self.buf, cut) if text else None
            match = _LEADING_COMMA.match(self.buf)
            first = start + (match.end() if match else 0)
            self._consume(cut)
            yield start, first, start + cut, payload

    def _places(self) -> Generator[tuple[int, int, int, None], None, None]:
        """The cuts of :meth:`_cuts` in an uncompressed file, found by reading only the
        bytes they are searched in (the end of each stretch, the start of the next), not
        every byte. Returns with ``buf`` and the file as :meth:`_cuts` would leave them
        before reading the last stretch (fewer than a stretch's bytes left): there it takes
        over, as it does where a leading separator goes on past the bytes read."""
        size = CHUNK_BYTES
        while True:
            held = len(self.buf) >= size  # read already: cut as :meth:`_cuts` does
            if held and not self.source.eof:
                head, cut = self.buf, self._last_separator(len(self.buf))
            elif not held and self.source.data_size() - self.base >= size:
                head = self.source.read_at(self.base, _HEAD_BYTES)
                if not head.strip():
                    return
                cut = self._separator_at(size)
            else:
                return
            if cut <= 0:
                size *= 2
                continue
            size = CHUNK_BYTES
            start = self.base
            match = _LEADING_COMMA.match(head)
            self.base += cut
            self.buf = self.buf[cut:] if held else b""
            if not held:
                self.source.seek(self.base)  # where the reading goes on when this stops
            yield start, start + (match.end() if match else 0), start + cut, None

    def _separator_at(self, stop: int) -> int:
        """:meth:`_last_separator` of the ``stop`` bytes from ``base``, read from the file
        only where it searches."""
        window = 1 << 16
        while True:
            begin = max(0, stop - window)
            text = self.source.read_at(self.base + begin, stop - begin)
            last = -1
            for match in _SEPARATOR.finditer(text):
                last = begin + match.start() + 1
            if last > 0 or begin == 0:
                return last
            window *= 8

    def _last_separator(self, stop: int) -> int:
        """Offset just past the ``}`` of the last element separator in ``buf[:stop]``."""
        window = 1 << 16
        while True:
            begin = max(0, stop - window)
            last = -1
            for match in _SEPARATOR.finditer(self.buf, begin, stop):
                last = match.start() + 1
            if last > 0 or begin == 0:
                return last
            window *= 8

    def _truncated(self, used: int) -> None:
        why = self.source.damage or "the file ends early"
        self.result.loss.append(
            f"{why} after {self.result.events_seen:,} events at byte"
            f" {self.base + used:,}: the rest of the trace is lost"
        )


def _decode_object(text: bytes) -> dict[str, Any] | None:
    try:
        value = _ANY_DECODER.decode(text)
    except DECODE_ERRORS:
        return None
    return value if isinstance(value, dict) else None


def _tail_keys(tail: bytes, result: ReadResult) -> dict[str, Any]:
    """The top-level keys written after the traceEvents array (``, "k": v ... }``)."""
    if result.bare_array:
        return {}
    text = _strip_separator(tail).strip()
    value = _decode_object(b"{" + text)
    if value is None:
        result.loss.append("the keys after traceEvents could not be read")
        return {}
    return value


def read_events(
    path: Path, progress: Progress | None = None, decode: Decode | None = None
) -> tuple[ReadResult, Iterator[Chunk]]:
    """Open a Chrome-trace file; return its top-level keys and an iterator of event chunks.

    The :class:`ReadResult` is filled in as the iterator runs (tail keys, losses). ``decode``:
    what reads a chunk's text (default :func:`decode_payload`; it raises msgspec's errors
    where the text is not an array of events).

    Raises:
        TraceFormatError: the file is missing, empty, not JSON, or not a trace.
    """
    result, splitter = open_splitter(path, progress, decode)
    return result, _iterate(splitter, result)


def open_splitter(
    path: Path, progress: Progress | None = None, decode: Decode | None = None
) -> tuple[ReadResult, Splitter]:
    """As :func:`read_events`, for a caller that drives the splitter itself.

    Call :func:`finish` when done: it reads the rest (tail keys) and closes the file.
    """
    source = _open_source(path, progress)
    try:
        result, first = _open_array(source)
    except BaseException:
        source.close()
        raise
    return result, Splitter(source, result, first, decode)


def restart_at(splitter: Splitter, offset: int) -> Splitter:
    """A splitter that reads the array again from data ``offset`` on (an element boundary
    that :meth:`Splitter.payloads` gave), from the same open file and into the same result."""
    source = splitter.source
    source.rewind()
    source.skip(offset)
    return Splitter(source, splitter.result, b"", splitter.decode)


def finish(splitter: Splitter) -> Iterator[Chunk]:
    """The chunks left after :meth:`Splitter.payloads`, then the tail keys; closes the file."""
    return _iterate(splitter, splitter.result)


def _open_source(path: Path, progress: Progress | None) -> _Source:
    try:
        return _Source(path, progress)
    except FileNotFoundError:
        target = broken_link(path)
        if target is not None:
            raise TraceFormatError(f"{path}: a broken link (to {target})") from None
        raise TraceFormatError(f"{path}: no such file") from None
    except NotAFile as exc:
        raise TraceFormatError(f"{path}: {exc.kind}, not a trace file") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _open_array(source: _Source) -> tuple[ReadResult, bytes]:
    """Read up to the start of the traceEvents array; decode the keys before it."""
    path = source.path
    result = ReadResult()
    buf = source.read(1 << 16)
    if buf.startswith(_BOM):
        buf = buf[len(_BOM) :]
    while not buf.strip() and not source.eof:
        buf = source.read(1 << 16)
    if not buf.strip():
        if source.damage:
            raise TraceFormatError(f"{path}: not a readable gzip file ({source.damage})")
        raise TraceFormatError(f"{path}: the file is empty")
    stripped = buf.lstrip()
    if stripped[:1] == b"[":
        result.bare_array = True
        return result, stripped[1:]
    if stripped[:1] != b"{":
        raise TraceFormatError(f"{path}: not a trace: the file is not a JSON object or array")
    searched = 0
    while True:
        match = _EVENTS_KEY.search(buf, max(0, searched - 64))
        if match:
            break
        searched = len(buf)
        if source.eof:
            value = _decode_object(buf)
            if value is None:
                raise TraceFormatError(f"{path}: not valid JSON")
            raise TraceFormatError(f"{path}: JSON without traceEvents: not a Chrome/Kineto trace")
        buf += source.read(max(len(buf), 1 << 16))
    head_text = buf[: match.start()].rstrip()
    if head_text.endswith(b","):
        head_text = head_text[:-1]
    head = _decode_object(head_text.lstrip() + b"}")
    if head is None:
        raise TraceFormatError(f"{path}: not valid JSON before traceEvents")
    result.head = head
    return result, buf[match.end() :]


def _iterate(splitter: Splitter, result: ReadResult) -> Iterator[Chunk]:
    try:
        yield from splitter.chunks()
        if splitter.array_closed:
            result.tail = _tail_keys(splitter.tail_text, result)
    finally:
        splitter.source.close()
