"""Damaged Kineto traces: only PerfledgerError ever escapes, or a valid Trace comes back.

The targeted cases (truncation, flipped bytes, retyped keys) call the reader itself; the
family-wide case imports and analyses a mutated trace as ``analyze`` does.
"""

from __future__ import annotations

import copy
import gzip
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.errors import PerfledgerError
from perfledger.model import schema
from perfledger.sources import kineto_stream
from perfledger.sources.kineto import load_kineto
from tests import kineto_gen as gen
from tests.fuzz import harness
from tests.fuzz.seeds import Seed
from tests.paths import DATA

pytestmark = pytest.mark.fuzz

SMALL_REAL = [
    "old_pt18_inference_rank1.json.gz",
    "a100_triton.json.gz",
    "cpu_only_rank34.json.gz",
    "mi250_rocm_minitoy.json.gz",
]


class Documents(list[bytes]):
    """Trace texts; a short repr keeps failure reports readable."""

    def __repr__(self) -> str:
        return f"<{len(self)} trace documents>"


@pytest.fixture(scope="module")
def documents() -> list[bytes]:
    """Texts of small real traces plus one synthetic trace with tricky strings."""
    texts = Documents()
    for name in SMALL_REAL:
        path = DATA / "kineto" / name
        if not path.is_file():
            pytest.fail(f"real trace {path} is missing")
        texts.append(gzip.decompress(path.read_bytes()))
    synthetic = [
        gen.cpu_op('quote \\" and }, {', 10, 5, external_id=1),
        gen.runtime("cudaLaunchKernel", 12, 2, correlation=3),
        gen.device_task("kernel", "k", 20, 4, correlation=3),
        gen.flow("s", "ac2g", 3, 12, pid=100, tid=100),
        gen.cpu_op("x", gen.Num("1712195495505543.2"), gen.Num("1.5"), external_id=2),
    ]
    texts.append(gen.document_text(synthetic, schemaVersion=1, _after={"traceName": "t"}).encode())
    return texts


def _check(data: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"trace{suffix}"
        path.write_bytes(data)
        try:
            trace = load_kineto(path)
        except PerfledgerError as error:
            message = str(error)
            assert message and "\n" not in message
            assert str(path) in message
            return
    events = trace.events
    assert events.schema == schema.EVENTS_SCHEMA
    assert events.num_rows > 0
    assert pc.min(events["dur_ns"]).as_py() >= 0
    starts = events["start_ns"].to_pylist()
    assert starts == sorted(starts)
    assert trace.loss is None or (trace.loss and "\n" not in trace.loss)


SETTINGS = harness.budget(quick=40, long=300)


@SETTINGS
@given(which=st.integers(0, len(SMALL_REAL)), where=st.floats(0, 1), gz=st.booleans())
def test_truncated_anywhere(documents: list[bytes], which: int, where: float, gz: bool) -> None:
    text = documents[which]
    cut = text[: int(len(text) * where)]
    if gz:
        packed = gzip.compress(text, mtime=0)
        _check(packed[: int(len(packed) * where)], ".json.gz")
    else:
        _check(cut, ".json")


@SETTINGS
@given(
    which=st.integers(0, len(SMALL_REAL)),
    edits=st.lists(
        st.tuples(
            st.floats(0, 1),
            st.sampled_from(["flip", "insert", "delete"]),
            st.binary(min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_flipped_and_inserted_bytes(
    documents: list[bytes], which: int, edits: list[tuple[float, str, bytes]]
) -> None:
    text = bytearray(documents[which])
    for where, how, payload in edits:
        at = min(int(len(text) * where), len(text) - 1)
        if how == "flip":
            text[at] ^= payload[0] or 1
        elif how == "insert":
            text[at:at] = payload
        else:
            del text[at : at + len(payload)]
    _check(bytes(text), ".json")


@SETTINGS
@given(
    which=st.integers(0, len(SMALL_REAL)),
    picks=st.lists(
        st.tuples(
            st.floats(0, 1),
            st.sampled_from(
                ["ph", "ts", "dur", "pid", "tid", "name", "cat", "args", "id", "correlation"]
            ),
        ),
        min_size=1,
        max_size=6,
    ),
    replacement=st.sampled_from([None, "x", -1, 1.5, [], {}, True, 10**30]),
)
def test_dropped_or_retyped_keys(
    documents: list[bytes], which: int, picks: list[tuple[float, str]], replacement: object
) -> None:
    doc = json.loads(documents[which])
    events = doc["traceEvents"]
    for where, key in picks:
        event = events[min(int(len(events) * where), len(events) - 1)]
        target = event.get("args", event) if key == "correlation" else event
        if not isinstance(target, dict):
            continue
        if replacement is None:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(replacement)  # never the same object twice
    _check(json.dumps(doc).encode(), ".json")


@harness.budget(quick=15, long=100)
@given(which=st.integers(0, len(SMALL_REAL)), chunk=st.integers(16, 4096))
def test_chunk_size_never_changes_the_events(
    documents: list[bytes], which: int, chunk: int
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        path.write_bytes(documents[which])
        whole = load_kineto(path)
        saved = kineto_stream.CHUNK_BYTES
        kineto_stream.CHUNK_BYTES = chunk
        try:
            pieces = load_kineto(path)
        finally:
            kineto_stream.CHUNK_BYTES = saved
    columns = [c for c in schema.EVENTS_SCHEMA.names if c != "flops"]
    assert whole.events.select(columns).equals(pieces.events.select(columns))
    assert whole.meta == pieces.meta


@harness.budget(quick=60)
@given(data=st.data())
def test_damaged_kineto_traces_are_read_or_refused(
    seeds: Callable[[str], list[Seed]], data: st.DataObject
) -> None:
    harness.fuzz_case("kineto", seeds("kineto"), data)
