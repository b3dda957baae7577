"""The compiled scanner reads a chunk of events exactly as the general decoder does, or not at all.

Each chunk the scanner settles (``kineto_scan.scanned_block``) must give the block and side
data of the general path (msgspec, ``kineto_columns.chunk_columns``) value for value; a chunk
it cannot settle (invalid JSON, escapes in short fields, types the general decoder reads in
its own way) returns None and goes the general way.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
import re
import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfledger.sources import kineto_scan
from perfledger.sources.kineto_columns import (
    ARG_FIELD_NAMES,
    Block,
    Side,
    arg_key,
    chunk_columns,
)
from perfledger.sources.kineto_stream import DECODE_ERRORS, decode_payload
from tests.integration.test_kineto_real import TRACES
from tests.paths import data_file

needs_scanner = pytest.mark.skipif(
    not kineto_scan.AVAILABLE, reason="no C compiler where the project was installed"
)


def test_the_scanner_is_built_where_a_compiler_is() -> None:
    # pip install builds it (optional: an install without a compiler reads with msgspec alone)
    if shutil.which("cc") or shutil.which("gcc"):
        assert kineto_scan.AVAILABLE, "run pip install -e . again: _kscan.c is not built"


_SEPARATOR = re.compile(rb"\}\s*,\s*\{")
# the args keys the importer reads, and one it does not
_ARG_KEYS = [*(arg_key(attr) for attr in ARG_FIELD_NAMES), "other"]
_ARRAY_END = re.compile(rb"\}\s*\]")


def _chunks(text: bytes, size: int) -> list[bytearray]:
    """The traceEvents array cut into payloads ``[...]`` of about ``size`` bytes."""
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    chunks = []
    while True:
        cut = _SEPARATOR.search(text, start + size)
        end = cut.start() + 1 if cut else _ARRAY_END.search(text, start).start() + 1  # type: ignore[union-attr]
        chunks.append(bytearray(b"[" + text[start:end].lstrip(b", \n") + b"]"))
        if cut is None:
            return chunks
        start = end


def _assert_equal(got: Any, want: Any, what: str) -> None:
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype, what
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), what
    elif isinstance(want, pa.Array):
        assert got.type == want.type and got.equals(want), what
    elif isinstance(want, list):
        assert len(got) == len(want), what
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _assert_equal(a, b, f"{what}[{i}]")
    else:
        assert got == want, what


def _general(payload: bytes | bytearray) -> tuple[Block | None, Side, int] | None:
    try:
        chunk = decode_payload(bytearray(payload))
    except DECODE_ERRORS:
        return None
    side = Side()
    return chunk_columns(chunk, side, pooled=False), side, len(chunk.events)


def _check(payload: bytes | bytearray) -> bool:
    """Whether the scanner settled ``payload``; when it did, its results are the general's."""
    side = Side()
    scanned = kineto_scan.scanned_block(payload, side, pooled=False)
    if scanned is None:
        assert side == Side(), "a chunk left to the general decoder must leave no side data"
        return False
    block, count = scanned
    general = _general(payload)
    assert general is not None, "the scanner read a chunk the general decoder refuses"
    want_block, want_side, want_count = general
    assert count == want_count
    if want_block is None:
        assert block is None
    else:
        assert block is not None
        for item in dataclasses.fields(Block):
            want = getattr(want_block, item.name)
            if want is None:
                assert getattr(block, item.name) is None, item.name
            else:
                _assert_equal(getattr(block, item.name), want, item.name)
    for item in dataclasses.fields(Side):
        _assert_equal(getattr(side, item.name), getattr(want_side, item.name), item.name)
    return True


@needs_scanner
@pytest.mark.parametrize("name", TRACES)
def test_every_chunk_of_the_real_traces_is_scanned_as_the_decoder_reads_it(name: str) -> None:
    with gzip.open(data_file(f"kineto/{name}")) as raw:
        text = raw.read()
    for size in (64 << 10, 1 << 20):
        chunks = _chunks(text, size)
        assert all(_check(c) for c in chunks), f"{name}: a clean chunk went the general way"


_KEY_TEXTS = st.sampled_from(_ARG_KEYS).flatmap(
    lambda key: st.sampled_from([key, f'x"{key}', f'{key}"', f"\\{key}", f"é{key}"])
)


def _event(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = {}
    choices = {
        "ph": st.sampled_from(["X", "i", "I", "M", "s", "f", "t", "C", "B", "", "XX", "é"]),
        "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "ac2g", "", "Trace", "é"]),
        # mostly names the scanner reads itself; some with escapes or other scripts
        "name": st.one_of(
            st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"\\')),
            st.text(max_size=6),
        ),
        "pid": st.one_of(
            st.integers(-(2**31), 2**31),
            st.integers(-(2**63), 2**64 - 1),
            st.sampled_from(["Spans", "7", " 12 ", "x"]),
        ),
        "tid": st.one_of(st.integers(-(2**40), 2**40), st.sampled_from(["stream 7", "7"])),
        "ts": st.one_of(
            st.integers(-(2**60), 2**62),
            st.floats(allow_nan=False, allow_infinity=False),
            st.sampled_from([1669783687466835.123, 5.0005, 1e300]),
        ),
        "dur": st.one_of(st.integers(-5, 10**6), st.floats(-1e3, 1e6)),
        "id": st.one_of(st.none(), st.integers(0, 2**62), st.sampled_from(["0x1f", "7", "a"])),
        "args": st.dictionaries(
            st.sampled_from(_ARG_KEYS),
            st.one_of(
                st.integers(-(2**40), 2**40),
                st.floats(allow_nan=False, allow_infinity=False),
                st.text(max_size=4),
                st.lists(st.integers(0, 9), max_size=3),
                st.none(),
                # keys where the args text holds them quoted though not as a top-level key:
                # as values, nested, after an escaped quote ("x\"bytes"); and not quoted
                # ("bytes\"")
                _KEY_TEXTS,
                st.lists(_KEY_TEXTS, max_size=2),
                st.dictionaries(_KEY_TEXTS, st.integers(0, 9), max_size=2),
            ),
            max_size=4,
        ),
    }
    for key, strategy in choices.items():
        if draw(st.integers(0, 9)) > 0:  # most fields present
            event[key] = draw(strategy)
    return event


@needs_scanner
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_events_are_scanned_as_the_decoder_reads_them_or_left_to_it(
    data: st.DataObject,
) -> None:
    events = data.draw(st.lists(st.builds(dict), min_size=1, max_size=8).map(len))
    payload = json.dumps(
        [_event(data.draw) for _ in range(events)], indent=data.draw(st.sampled_from([None, 2]))
    ).encode()
    _check(payload)


@needs_scanner
def _args(rng: random.Random) -> dict[str, Any]:
    """Args of every kind the importer meets: ids and sizes as numbers, numeric strings,
    floats or null (read by msgspec, row by row), shapes as lists, keys nested or as values."""
    values: list[Any] = [
        rng.randint(-5, 2**40),
        str(rng.randint(0, 99)),
        "stream 7",
        2.0,
        1.5,
        None,
        True,
        [[1, 2], []],
        {"bytes": 3},
        "bytes",
        12345678901234567890,
        1e300,
    ]
    return {key: rng.choice(values) for key in rng.sample(_ARG_KEYS, rng.randint(0, 4))}


# Integers of every length up to past int64's, each as its largest, its smallest and a mixed
# value of that many digits.
_INTEGERS = sorted(
    {
        value
        for digits in range(1, 22)
        for value in (10**digits - 1, 10 ** (digits - 1), int("1234567890987654321012"[:digits]))
    }
)
# Those the scanner settles itself: up to 18 digits (longer ones are decoded the general way)
_SCANNED_DIGITS = 18


@needs_scanner
@pytest.mark.parametrize("sign", [1, -1])
def test_integers_of_every_length_are_read_as_the_decoder_reads_them(sign: int) -> None:
    for value in _INTEGERS:
        number = sign * value
        event = {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": number,
            "tid": 2,
            "ts": number,
            "dur": number,
            "args": {"External id": number, "correlation": 7},
        }
        for indent in (None, 2):
            settled = _check(json.dumps([event, event], indent=indent).encode())
            # and the value the last thing of its text: fewer than eight bytes after it
            settled_last = _check(b'[{"ph": "X", "pid": 1, "tid": 2, "ts": %d}]' % number)
            if len(str(value)) <= _SCANNED_DIGITS:
                assert settled and settled_last, number


def test_clean_random_events_are_settled_by_the_scanner() -> None:
    """Events of every phase with the value types Kineto writes: none is left to msgspec."""
    rng = random.Random(7)
    phases = ["X", "i", "M", "s", "f", "C", "B"]
    for _ in range(50):
        events = [
            {
                "ph": rng.choice(phases),
                "cat": rng.choice(["kernel", "cpu_op", "cuda_runtime", "ac2g", "gpu_memset"]),
                "name": "".join(rng.choices("abc:_ <>", k=rng.randint(0, 9))),
                "pid": rng.choice([rng.randint(0, 2**20), "Spans", "7"]),
                "tid": rng.choice([rng.randint(0, 2**20), "stream 7"]),
                "ts": rng.choice([rng.randint(0, 2**50), round(rng.uniform(0, 2**40), 3)]),
                "dur": rng.randint(-2, 10**6),
                "id": rng.randint(0, 2**30),
                "args": _args(rng),
            }
            for _ in range(rng.randint(1, 30))
        ]
        assert _check(json.dumps(events, indent=rng.choice([None, 2])).encode())


def _spaced(value: Any, rng: random.Random) -> str:
    """``value`` as JSON with a run of random whitespace (spaces, line breaks, carriage
    returns, tabs; none to 40 bytes) wherever JSON allows one."""

    def ws() -> str:
        return "".join(
            rng.choices(" \n\r\t", weights=[6, 2, 1, 1], k=rng.choice([0, 1, 5, 17, 40]))
        )

    if isinstance(value, dict):
        members = [f"{json.dumps(k)}{ws()}:{ws()}{_spaced(v, rng)}" for k, v in value.items()]
        return "{" + ws() + f"{ws()},{ws()}".join(members) + ws() + "}"
    if isinstance(value, list):
        return "[" + ws() + f"{ws()},{ws()}".join(_spaced(v, rng) for v in value) + ws() + "]"
    return json.dumps(value)


@needs_scanner
def test_events_with_long_runs_of_every_whitespace_are_settled_as_the_decoder_reads_them() -> None:
    """Whitespace runs of every JSON kind (carriage returns and tabs too, which Kineto does
    not write) and of up to 40 bytes between every token, up to the text's last byte."""
    rng = random.Random(11)
    for _ in range(60):
        events = [
            {
                "ph": "X",
                "cat": rng.choice(["kernel", "cpu_op"]),
                "name": "aten::mm",
                "pid": rng.randint(0, 2**20),
                "tid": rng.randint(0, 2**20),
                "ts": rng.choice([rng.randint(0, 2**50), round(rng.uniform(0, 2**40), 3)]),
                "dur": rng.randint(0, 10**6),
                "args": _args(rng),
            }
            for _ in range(rng.randint(1, 12))
        ]
        text = _spaced(events, rng) + rng.choice(["", " ", "\n\t\r " * 5])
        assert _check(text.encode())


@needs_scanner
@pytest.mark.parametrize(
    ("other", "column"),
    [
        ('x"bytes', "nbytes"),  # "bytes" quoted in the text only through an escaped quote
        ("bytes", "nbytes"),  # a string value equal to the key
        ({"size": 1}, "nbytes"),  # a nested key
        ('bytes"', None),  # the key, but not quoted: "bytes\""
        ("x\\bytes", None),  # a backslash before it, no quote
    ],
)
def test_a_key_quoted_anywhere_in_the_args_gives_its_column(other: Any, column: str | None) -> None:
    """The general decoder reads an optional args field wherever its key is quoted in the
    args text (then absent in every row but the column there); the scanner tells the same
    from the strings it met, reading again only the texts with escapes."""
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2}
    args = {"device": 0, "stream": 7, "correlation": 1, "External id": 2}
    events = [
        {**kernel, "args": {**args, "other": other}},
        {**kernel, "ts": 20, "args": {**args, "other": 'plain "quote" text'}},
    ]
    payload = json.dumps(events).encode()
    assert _check(payload)
    scanned = kineto_scan.scanned_block(payload, Side(), pooled=False)
    assert scanned is not None and scanned[0] is not None
    block = scanned[0]
    if column is None:
        assert block.nbytes is None
    else:
        assert getattr(block, column) is not None and (getattr(block, column) == -1).all()


@needs_scanner
def test_damaged_text_is_never_read_differently() -> None:
    """Bytes of a real chunk changed at random: the scanner reads the result as the general
    decoder does, or leaves it to it (and never fails itself)."""
    with gzip.open(data_file("kineto/v100_rank1_ddp.json.gz")) as raw:
        chunk = _chunks(raw.read(), 3000)[5]
    rng = random.Random(19)
    settled = 0
    for _ in range(1000):
        damaged = bytearray(chunk)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(damaged))
            damaged[at : at + rng.randint(0, 2)] = rng.choice(
                [b"", b'"', b"\\", b",", b"{", b"}", b"[", b"]", b"1", b".", b"e", b"\x01", b"\xff"]
            )
        settled += _check(damaged)
    assert 0 < settled < 1000


@needs_scanner
@pytest.mark.parametrize(
    "text",
    [
        b'[{"ph": "X", "ph": "X"}]',  # a field named twice
        b'[{"ph": "X", "name": "a\\"b"}]',  # an escape in a short field
        b'[{"p\\u0068": "X"}]',  # a key written with an escape
        b'[{"ph": "X", "pid": 1.5}]',  # a float pid: the general decoder refuses it
        b'[{"ph": "X", "ts": "12"}]',  # a time written as a string
        b'[{"ph": "X", "ts": 123456789012345678901}]',  # an integer beyond int64
        b'[{"ph": "X"}, 1]',  # an element that is not an event
        b'[{"ph": "X"},]',
        b'[{"ph": "X", "args": {"a": [1 2]}}]',
        b'[{"ph": "X", "name": "\xff"}]',  # not UTF-8
        b"[" + b"[" * 100 + b"]" * 100 + b"]",
    ],
)
def test_what_only_the_general_decoder_reads_is_left_to_it(text: bytes) -> None:
    assert kineto_scan.scanned_block(text, Side()) is None


_EVENT = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 2, "ts": 5, "dur": 3'


@needs_scanner
@pytest.mark.parametrize(
    ("escape", "readable"),
    [
        (b"\\ud83d\\ude00", True),  # a high and a low surrogate: one character
        (b"\\uD83D\\uDE00", True),
        (b"\\u00e9", True),
        (b"\\ud800", False),  # a high surrogate alone
        (b"\\ud800x", False),
        (b"\\ud800\\ud800", False),  # two high ones
        (b"\\ud800\\u0041", False),
        (b"\\udc00", False),  # a low one alone
        (b"\\ud80", False),
    ],
)
def test_surrogate_escapes_are_read_as_the_general_decoder_reads_them(
    escape: bytes, readable: bool
) -> None:
    value, key = (b', "args": {"x": "' + escape + b'"}}', b', "args": {"' + escape + b'": 1}}')
    for place in (value, key):
        text = b"[" + _EVENT + place + b"]"
        assert (_general(text) is not None) == readable
        if readable:
            # settled as the general decoder reads it (a key with an escape: left to it)
            assert _check(text) or place is key
        else:
            assert kineto_scan.scanned_block(text, Side()) is None


_GUARDED_SCAN = """
import ctypes, mmap, sys
import numpy as np
from perfledger.sources import kineto_scan
text = sys.argv[1].encode()
page = mmap.PAGESIZE
memory = mmap.mmap(-1, 2 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
libc = ctypes.CDLL(None, use_errno=True)
# the page after the text made unreadable: a read one byte past its end faults
assert libc.mprotect(ctypes.c_void_p(base + page), page, 0) == 0
memory[page - len(text) : page] = text
view = np.frombuffer(memory, np.uint8, len(text), page - len(text))
print(kineto_scan._scanned(view, kineto_scan._Arrays.empty(4)))
"""


@needs_scanner
@pytest.mark.parametrize("text", ['[{"args":', '[{"args": ', '[{"ts":', '[{"name": "a'])
def test_the_scanner_reads_nothing_past_a_text_cut_short(text: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _GUARDED_SCAN, text], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) < 0  # a text cut short: not one the scanner settles


@pytest.mark.parametrize(
    "event",
    [
        b'{"ph": "X", "pid": 1, "tid": 2, "ts": "\xff12", "dur": 3}',  # a time not UTF-8
        b'{"ph": "X", "pid": 1, "tid": 2, "ts": 5, "dur": 3, "args": {"flops": 1'
        + b"0" * 400
        + b"}}",  # an integer beyond a double
        '{"ph": "X", "pid": "\u00b2", "tid": 2, "ts": 5, "dur": 3}'.encode(),  # a digit not ASCII
        b'{"ph": "X", "pid": "-5", "tid": 2, "ts": 5, "dur": 3}',
        b'{"ph": "X", "pid": "+5", "tid": 2, "ts": 5, "dur": 3}',
        b'{"ph": "X", "pid": "1_000", "tid": 2, "ts": 5, "dur": 3}',
        b'{"ph": "X", "pid": " 7 ", "tid": 2, "ts": 5, "dur": 3}',
    ],
)
def test_odd_values_are_read_alike_by_both_ways_and_never_raise(event: bytes) -> None:
    payload = b"[" + _EVENT + b"}, " + event + b"]"
    general = _general(payload)  # never raises
    if kineto_scan.AVAILABLE and _check(payload):  # settled: as the general decoder reads it
        assert general is not None


def test_without_the_compiled_scanner_every_chunk_goes_the_general_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kineto_scan, "_kscan", None)
    assert kineto_scan.scanned_block(b'[{"ph": "X", "ts": 1, "dur": 2}]', Side()) is None


@needs_scanner
def test_gather_refuses_spans_outside_the_text() -> None:
    scanner: Any = kineto_scan._kscan
    starts, ends = np.array([0, 4, -1], np.int64), np.array([2, 6, -1], np.int64)
    assert scanner.gather(b"abcdef", starts, ends, b",", b"[", b"]", b"{}") == b"[ab,ef,{}]"
    with pytest.raises(ValueError, match="outside"):
        scanner.gather(b"abc", np.array([1], np.int64), np.array([9], np.int64), b"", b"", b"", b"")
    with pytest.raises(ValueError, match="int64"):
        scanner.gather(
            b"abc", np.array([1], np.int64), np.array([1, 2], np.int64), b"", b"", b"", b""
        )


@needs_scanner
@pytest.mark.parametrize("total_mb", [1, 12])
def test_copy_spans_writes_the_spans_back_to_back(total_mb: int) -> None:
    # 12 MB: past the size from which two threads copy, each half to its own place
    rng = np.random.default_rng(total_mb)
    sources = [rng.integers(0, 256, 3 << 20, dtype=np.uint8).tobytes() for _ in range(3)]
    lengths = rng.integers(0, 80, (total_mb << 20) // 40).astype(np.int64)
    lengths[rng.integers(0, lengths.size, lengths.size // 10)] = 0  # spans that read nothing
    source = rng.integers(0, len(sources), lengths.size).astype(np.int32)
    starts = (rng.random(lengths.size) * ((3 << 20) - lengths)).astype(np.int64)
    expected = b"".join(
        sources[s][a : a + n]
        for s, a, n in zip(source.tolist(), starts.tolist(), lengths.tolist(), strict=True)
    )
    out = bytearray(len(expected) + 7)
    assert kineto_scan.copy_spans(sources, source, starts, lengths, out) == len(expected)
    assert out[: len(expected)] == expected
    assert out[len(expected) :] == bytes(7)  # nothing written past the spans
    with pytest.raises(ValueError, match="more bytes"):
        kineto_scan.copy_spans(sources, source, starts, lengths, bytearray(len(expected) - 1))
    outside = starts.copy()
    outside[-1] = 3 << 20
    lengths[-1] = 1
    with pytest.raises(ValueError, match="outside"):
        kineto_scan.copy_spans(sources, source, outside, lengths, out)


@needs_scanner
@given(
    texts=st.lists(st.text(max_size=6), max_size=30),
    picks=st.lists(st.integers(-3, 40), max_size=80),
    start=st.integers(0, 5),
)
@settings(max_examples=80, deadline=None)
def test_join_gives_the_texts_of_the_codes_in_order(
    texts: list[str], picks: list[int], start: int
) -> None:
    # a sliced Arrow string table, as the timeline writer hands it: offsets from its offset on
    table = pa.array(["x" * start] * start + texts, pa.string()).slice(start)
    offsets = np.frombuffer(table.buffers()[1], np.int32)[start : start + len(texts) + 1]
    codes = np.array([p for p in picks if p < len(texts)], np.int32)
    data = table.buffers()[2]
    joined = kineto_scan.join_texts(data if data is not None else b"", offsets, codes)
    assert joined == "".join(texts[c] for c in codes if c >= 0).encode()


@needs_scanner
def test_join_refuses_codes_and_offsets_outside_the_table() -> None:
    offsets = np.array([0, 2, 5], np.int32)
    assert kineto_scan.join_texts(b"abcde", offsets, np.array([1, -1, 0, 1], np.int32)) == (
        b"cdeabcde"
    )
    with pytest.raises(ValueError, match="beyond the table"):
        kineto_scan.join_texts(b"abcde", offsets, np.array([2], np.int32))
    with pytest.raises(ValueError, match="within the data"):
        kineto_scan.join_texts(b"abc", offsets, np.array([0], np.int32))
    with pytest.raises(ValueError, match="within the data"):
        kineto_scan.join_texts(b"abcde", np.array([0, 3, 2], np.int32), np.array([0], np.int32))


@needs_scanner
@given(
    texts=st.lists(
        st.sampled_from(["", "a", "ab", "é", "x" * 8, "x" * 9, "y" * 17]) | st.text(max_size=20),
        max_size=40,
    ),
    absent=st.lists(st.booleans(), max_size=40),
)
@settings(max_examples=200, deadline=None)
def test_encoded_spans_are_what_dictionary_encode_gives(
    texts: list[str], absent: list[bool]
) -> None:
    """Quoted texts (and absent ones, read as "") encoded in one compiled pass: the codes
    and the distinct texts in order of first appearance of Arrow's dictionary_encode."""
    quoted = [b'"' + t.encode() + b'"' for t in texts]
    payload = b",".join(quoted)
    lengths = np.array([len(q) for q in quoted], np.int64)
    starts = np.cumsum(lengths + 1) - lengths - 1
    ends = starts + lengths
    gone = np.array([i < len(absent) and absent[i] for i in range(len(texts))], bool)
    starts[gone] = -1
    distinct, codes = kineto_scan.encoded_spans(payload, starts, ends)
    want = pc.dictionary_encode(
        pa.array(["" if g else t for t, g in zip(texts, gone, strict=True)], pa.string())
    )
    assert distinct.equals(want.dictionary)
    assert codes.dtype == np.int32
    assert codes.tolist() == want.indices.to_pylist()


@needs_scanner
def test_encoded_spans_refuses_spans_outside_the_text_or_without_quotes() -> None:
    with pytest.raises(ValueError, match="outside"):
        kineto_scan.encoded_spans(b'"ab"', np.array([0], np.int64), np.array([9], np.int64))
    with pytest.raises(ValueError, match="quotes"):
        kineto_scan.encoded_spans(b'"ab"', np.array([0], np.int64), np.array([1], np.int64))


@needs_scanner
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50), st.text(max_size=5))
@settings(max_examples=80, deadline=None)
def test_decimal_texts_are_what_a_cast_gives(values: list[int], prefix: str) -> None:
    column = np.array(values, np.int64)
    texts = kineto_scan.decimal_texts(column, prefix, ",")
    assert texts.to_pylist() == [f"{prefix}{v}," for v in values]


def _replaced(text: bytes) -> bytes:
    """The general path's compaction of an args text (kineto_text._without_breaks)."""
    return text.replace(b"\n      ", b"").replace(b"\n    ", b"").replace(b"\n", b"")


@needs_scanner
@given(
    texts=st.lists(st.text(alphabet="\n a{", max_size=24).map(str.encode), max_size=12),
    absent=st.lists(st.booleans(), max_size=12),
)
@settings(max_examples=200, deadline=None)
def test_compact_removes_the_line_breaks_as_the_three_replaces_do(
    texts: list[bytes], absent: list[bool]
) -> None:
    # runs of breaks and spaces where one removal makes another match ("\n\n          ")
    payload = b"".join(texts)
    ends = np.cumsum([len(t) for t in texts], dtype=np.int64)
    starts = ends - [len(t) for t in texts]
    gone = [i < len(absent) and absent[i] for i in range(len(texts))]
    starts[np.array(gone, bool)] = -1
    scanner: Any = kineto_scan._kscan
    data, lengths = scanner.compact(payload, starts, ends, b"{}")
    want = [b"{}" if g else _replaced(t) for t, g in zip(texts, gone, strict=True)]
    assert data == b"".join(want)
    assert np.frombuffer(lengths, np.int64).tolist() == [len(w) for w in want]


@needs_scanner
def test_compact_takes_pretty_args_in_one_pass_and_blank_lines_as_the_replaces_do() -> None:
    pretty = b'{\n      "External id": 7,\n      "grid": [1, 1, 1]\n    }'
    # a break, two spaces and a break with six: the first removal makes "\n    " of the
    # rest, which the second removes (one removal per break would leave four spaces)
    joined = b"{\n  \n        z}"
    texts = [pretty, joined, b"\n", b"\n\n      \n    ", b"no breaks"]
    payload = b"".join(texts)
    ends = np.cumsum([len(t) for t in texts], dtype=np.int64)
    starts = ends - [len(t) for t in texts]
    scanner: Any = kineto_scan._kscan
    data, lengths = scanner.compact(payload, starts, ends, b"{}")
    assert data == b"".join(_replaced(t) for t in texts)
    assert _replaced(pretty) == b'{"External id": 7,"grid": [1, 1, 1]}'
    assert _replaced(joined) == b"{z}"
    assert np.frombuffer(lengths, np.int64).tolist() == [len(_replaced(t)) for t in texts]


@needs_scanner
def test_compact_refuses_spans_outside_the_text() -> None:
    scanner: Any = kineto_scan._kscan
    with pytest.raises(ValueError, match="outside"):
        scanner.compact(b"abc", np.array([1], np.int64), np.array([9], np.int64), b"")
    with pytest.raises(ValueError, match="int64"):
        scanner.compact(b"abc", np.array([1], np.int64), np.array([1, 2], np.int64), b"")


_TASK_ID_KEYS = ["External id", "queued", "device", "context", "correlation", "stream"]
_NEAR_KEYS = ["devices", "Device", "stream ", "correlatio", "grid", "External  id", ""]


@st.composite
def _kernel_args(draw: st.DrawFn) -> str | None:
    """Texts shaped like a kernel's args, the ids' pairs with every near miss: other keys,
    leading zeros, 18 and 19 digits, fractions, spaces in every place, no brace."""
    if draw(st.integers(0, 15)) == 0:
        return None
    pairs = []
    for _ in range(draw(st.integers(0, 5))):
        key = draw(st.sampled_from(_TASK_ID_KEYS + _NEAR_KEYS))
        number = draw(
            st.sampled_from(
                ["0", "-0", "01", "7", "-73689", "1" * 18, "9" * 19, "1.5", "x", "-", ""]
            )
        )
        colon = draw(st.sampled_from([":", ": ", ":  ", " :"]))
        comma = draw(st.sampled_from([",", ", ", ",  ", ""]))
        pairs.append(f'"{key}"{colon}{number}{comma}')
    tail = draw(st.sampled_from(['"grid": [24, 1, 1]}', "}", "", '"a": 1}', '"stream": 7}']))
    return draw(st.sampled_from(["{", "{", "{", "", " {", "["])) + "".join(pairs) + tail


@needs_scanner
@given(texts=st.lists(_kernel_args(), max_size=20), start=st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_cut_task_ids_is_what_the_regular_expression_cuts(
    texts: list[str | None], start: int
) -> None:
    from perfledger.analysis.ops import KINETO_TASK_IDS

    # a sliced table with nulls, as a batch of the args column is
    column = pa.array(["{}"] * start + texts, pa.string()).slice(start)
    want = pc.replace_substring_regex(column, KINETO_TASK_IDS, "{", max_replacements=1)
    assert kineto_scan.cut_task_ids(column).to_pylist() == want.to_pylist()


@needs_scanner
def test_cut_task_ids_of_a_real_kernel() -> None:
    text = (
        '{"External id": 73689,"queued": 0, "device": 1, "context": 1,"stream": 7, '
        '"correlation": 73689,"registers per thread": 16,"grid": [24, 1, 1]}'
    )
    texts = [
        text,
        None,
        "",
        '{"queued": 01, "stream": 7}',  # a leading zero: not an id's integer
        '{"stream": -0, "device": 999999999999999999, "context": 9999999999999999999, "a": 1}',
    ]
    assert kineto_scan.cut_task_ids(pa.array(texts)).to_pylist() == [
        '{"registers per thread": 16,"grid": [24, 1, 1]}',
        None,
        "",
        '{"queued": 01, "stream": 7}',
        '{"context": 9999999999999999999, "a": 1}',  # 18 digits cut, 19 kept
    ]


@needs_scanner
def test_cut_ids_refuses_offsets_outside_the_text() -> None:
    scanner: Any = kineto_scan._kscan
    with pytest.raises(ValueError, match="within the data"):
        scanner.cut_ids(b"{}", np.array([0, 5], np.int32))
    with pytest.raises(ValueError, match="int32"):
        scanner.cut_ids(b"{}", np.array([], np.int32))


@st.composite
def _ascend_args(draw: st.DrawFn) -> str | None:
    """Texts with quoted names near the Ascend keys: the keys, *_ratio names, names with
    bytes outside [a-z0-9_], unclosed and escaped quotes, names side by side."""
    if draw(st.integers(0, 15)) == 0:
        return None
    names = st.sampled_from(
        ["op_type", "output_shapes", "output_dtypes", "input_formats", "op_types", "Op_type",
         "vec_ratio", "_ratio", "a_ratio", "__ratio", "x_ratio_ratio", "aic_mac_ratio",
         "vec-ratio", "ratio", "_Ratio", "é_ratio", "op_type\\", ""]
    )  # fmt: skip
    pieces = st.sampled_from(['"', '\\"', ": 1, ", "{", "}", " ", "x", "_ratio"])
    parts = draw(st.lists(st.one_of(names, pieces), max_size=10))
    return "".join(parts)


@needs_scanner
@given(texts=st.lists(_ascend_args(), max_size=20), start=st.integers(0, 3), data=st.data())
@settings(max_examples=300, deadline=None)
def test_named_key_rows_are_what_the_regular_expression_finds(
    texts: list[str | None], start: int, data: st.DataObject
) -> None:
    from perfledger.analysis.advisor.context import ASCEND_ARG_KEYS

    column = pa.array(['"op_type"'] * start + texts, pa.string()).slice(start)
    rows = np.array(
        data.draw(st.lists(st.integers(0, max(len(texts) - 1, 0)), max_size=25)) if texts else [],
        np.int64,
    )
    found = pc.fill_null(pc.match_substring_regex(column, ASCEND_ARG_KEYS), False)
    want = np.asarray(found.to_numpy(zero_copy_only=False), bool)[rows]
    assert kineto_scan.named_key_rows(column, rows).tolist() == want.tolist()


@needs_scanner
def test_named_key_rows_of_ascend_and_cuda_kernels() -> None:
    texts = [
        '{"op_type": "MatMul", "aic_mac_ratio": 0.5}',
        '{"External id": 7, "grid": [1, 1, 1]}',
        '{"vec_ratio": 1}',
        '{"_ratio": 1, "op_typed": "x"}',  # no name before _ratio; another name
        None,
    ]
    hits = kineto_scan.named_key_rows(pa.array(texts), np.array([4, 3, 2, 1, 0, 0], np.int64))
    assert hits.tolist() == [False, False, True, False, True, True]
    scanner: Any = kineto_scan._kscan
    with pytest.raises(ValueError, match="beyond the table"):
        scanner.named_keys(b"{}", np.array([0, 2], np.int32), np.array([1], np.int64))


_SCATTERED = [
    (np.int8, np.int8),
    (np.int8, np.int64),
    (np.int16, np.int32),
    (np.int32, np.int64),
    (np.int64, np.int64),
    (np.float64, np.float64),
    # none the compiled loop takes: numpy's assignment, through the same function
    (np.uint8, np.int64),
    (np.int64, np.int32),
    (np.float32, np.float64),
    (np.int32, np.float64),
]


@needs_scanner
@given(
    size=st.integers(0, 3000),
    types=st.sampled_from(_SCATTERED),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_a_block_is_scattered_into_place_as_numpy_assigns_it(
    size: int, types: tuple[Any, Any], seed: int
) -> None:
    from perfledger.sources.kineto_layout import scatter_into as _scatter

    rng = np.random.default_rng(seed)
    values_type, out_type = types
    values = rng.integers(-128, 128, size).astype(values_type)
    position = rng.permutation(size + 5)[:size].astype(np.int64)  # some places left alone
    expected = np.full(size + 5, 7, out_type)
    expected[position] = values
    out = np.full(size + 5, 7, out_type)
    _scatter(values, position, out)
    assert np.array_equal(out, expected)
    assert out.dtype == out_type


@needs_scanner
def test_scatter_refuses_places_outside_and_types_it_does_not_take() -> None:
    scatter: Any = kineto_scan._kscan.scatter
    values = np.array([1, 2, 3], np.int64)
    out = np.zeros(4, np.int64)
    for outside in ([0, 1, 4], [0, -1, 2]):
        with pytest.raises(IndexError, match="outside"):
            scatter(values, np.array(outside, np.int64), out)
    for args in (
        (values, np.array([0, 1, 2], np.int64), np.zeros(4, np.int32)),  # narrower
        (values, np.array([0, 1], np.int64), out),  # a position short
        (values, np.array([0, 1, 2], np.int32), out),  # int32 positions
        (values.astype(np.uint64), np.array([0, 1, 2], np.int64), out),
        (values.astype(np.float64), np.array([0, 1, 2], np.int64), out),
    ):
        with pytest.raises(TypeError):
            scatter(*args)
    scatter(values, np.array([3, 0, 2], np.int64), out)
    assert out.tolist() == [2, 0, 3, 1]


@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    lacking=st.lists(st.booleans(), min_size=8, max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_a_column_some_blocks_lack_is_laid_out_with_their_rows_filled(
    sizes: list[int], lacking: list[bool], seed: int
) -> None:
    from types import SimpleNamespace

    from perfledger.sources.kineto_layout import sorted_column

    rng = np.random.default_rng(seed)
    parts = [
        None if lacking[i] else rng.uniform(0, 1e6, size).round() for i, size in enumerate(sizes)
    ]
    blocks: Any = [SimpleNamespace(flops=part) for part in parts]
    position = rng.permutation(sum(sizes)).astype(np.int64)
    # the rows in file order, each block's values or NaN, then moved to their places
    filled = [np.full(n, np.nan) if p is None else p for n, p in zip(sizes, parts, strict=True)]
    in_file = np.concatenate(filled or [np.zeros(0)])
    expected = np.empty(in_file.size)
    expected[position] = in_file
    out = sorted_column(blocks, sizes, "flops", position, np.float64, np.nan)
    assert np.array_equal(out, expected, equal_nan=True)
    assert all(block.flops is None for block in blocks)  # each part let go as it is copied


@needs_scanner
@given(
    phases=st.lists(
        st.one_of(
            st.none(), st.sampled_from(["X", "i", "I", "M", "s", "f", "C", "B", "", "XX", "é", "Z"])
        ),
        max_size=20,
    )
)
@settings(max_examples=100, deadline=None)
def test_phase_codes_are_each_events_one_character_looked_up(phases: list[str | None]) -> None:
    from perfledger.sources.kineto_columns import PH_CODES_BY_BYTE

    events = [{"name": "a"} if ph is None else {"ph": ph, "name": "a"} for ph in phases]
    payload = json.dumps(events, ensure_ascii=False).encode()
    arrays = kineto_scan._scan_arrays(len(phases) + 1)
    assert kineto_scan._scanned(payload, arrays) == len(phases)
    codes = np.empty(len(phases), np.int64)
    scanner: Any = kineto_scan._kscan
    scanner.phase_codes(payload, arrays.spans, PH_CODES_BY_BYTE, codes)
    # one byte between the quotes: its code; absent, empty, longer (é is two bytes): -1
    expected = [
        int(PH_CODES_BY_BYTE[ph.encode()[0]]) if ph is not None and len(ph.encode()) == 1 else -1
        for ph in phases
    ]
    assert codes.tolist() == expected
    with pytest.raises(ValueError, match="fewer events"):
        scanner.phase_codes(payload, arrays.spans[:0], PH_CODES_BY_BYTE, np.empty(1, np.int64))


@needs_scanner
@given(
    # no character json.dumps escapes: an escape in a name leaves the event to the decoder
    text=st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=["Cc"], exclude_characters='"\\'),
        max_size=30,
    ),
    where=st.sampled_from(["name", "cat", "arg value", "arg key", "nested"]),
    pad=st.integers(0, 9),
)
@settings(max_examples=150, deadline=None)
def test_the_scan_tells_whether_a_string_held_a_byte_past_ascii(
    text: str, where: str, pad: int
) -> None:
    args: dict[str, Any] = {"k": " " * pad}
    event: dict[str, Any] = {"ph": "X", "name": "n", "cat": "c", "ts": 1, "dur": 2, "args": args}
    if where in ("name", "cat"):
        event[where] = " " * pad + text
    elif where == "arg value":
        args["v"] = text
    elif where == "arg key":
        args[text + "!"] = 1
    else:
        args["deep"] = [{"x": [text]}]
    payload = json.dumps([event], ensure_ascii=False).encode()
    arrays = kineto_scan._Arrays.empty(2)
    assert kineto_scan._scanned(payload, arrays) == 1
    assert arrays.high[0] == (not payload.isascii())


@needs_scanner
def test_a_string_that_is_not_utf8_is_left_to_the_general_decoder() -> None:
    good = b'[{"ph": "X", "name": "caf\xc3\xa9", "ts": 1, "dur": 2, "args": {"a": "\xc3\xa9"}}]'
    assert kineto_scan._scanned_fields(good) is not None
    for bad in (b"caf\xe9", b"\xc3", b"\xed\xa0\x80"):  # Latin-1, cut short, a surrogate
        payload = good.replace(b"caf\xc3\xa9", bad)
        assert kineto_scan._scanned_fields(payload) is None
        payload = good.replace(b'"a": "\xc3\xa9"', b'"a": "' + bad + b'"')
        assert kineto_scan._scanned_fields(payload) is None
