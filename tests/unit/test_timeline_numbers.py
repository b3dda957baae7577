"""Integers in timeline records: every way a column of them is written (all small, a few large
ones cast, groups of four digits, negative ones cast, or a text per row by the compiled
module; or whole records by the compiled formatter) gives each value's decimal text."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from perfledger.render.timeline import text
from perfledger.render.timeline.text import PieceBuilder, RowBuilder, joined_bytes
from perfledger.sources import kineto_scan

Ints = npt.NDArray[np.int64]


def _written(
    values: Ints, shown: npt.NDArray[np.bool_] | None, builder: type = PieceBuilder
) -> str:
    line = builder(values.size)
    line.text("{")
    line.ints(values, shown, before='"v":', after=",")
    line.text("}")
    return bytes(joined_bytes([(line.build(), np.arange(values.size))], values.size)).decode()


def _expected(values: Ints, shown: npt.NDArray[np.bool_] | None) -> str:
    return "".join(
        "{" + (f'"v":{v},' if shown is None or shown[i] else "") + "}"
        for i, v in enumerate(values.tolist())
    )


rng = np.random.default_rng(11)
EDGES = np.array(
    [0, 1, 9, 4095, 4096, 9_999, 10_000, 10_001, 99_990_000, 99_999_999, 100_000_000,
     10**12 - 1, 10**12, 10**16, 2**63 - 1],
    dtype=np.int64,
)  # fmt: skip
COLUMNS = {
    "small": rng.integers(0, 4096, 500),
    "few large": np.where(rng.random(500) < 0.05, rng.integers(0, 10**15, 500), 7),
    "most large": rng.integers(0, 10**8, 500),
    "wide": rng.integers(0, 2**62, 500),
    "edges": np.concatenate([EDGES, EDGES[::-1]]),
    "negative": rng.integers(-(10**9), 10**9, 500),
    "mixed widths": 10 ** rng.integers(0, 18, 500) + rng.integers(0, 10, 500),
    "extremes": np.array([-(2**63), -1, 0, 4096, 2**63 - 1, -(2**63) + 1]),
}


@pytest.fixture(params=["compiled", "arrow"])
def compiled(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways of writing a column: the compiled module's text per row, else Arrow's."""
    if request.param == "compiled" and not kineto_scan.AVAILABLE:
        pytest.skip("no C compiler where the project was installed")
    monkeypatch.setattr(kineto_scan, "AVAILABLE", request.param == "compiled")


@pytest.mark.parametrize("column", sorted(COLUMNS))
@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.usefixtures("compiled")
def test_integers_are_written_as_their_decimal_text(column: str, hidden: bool) -> None:
    values = np.asarray(COLUMNS[column], dtype=np.int64)
    shown = rng.random(values.size) < 0.6 if hidden else None
    assert _written(values, shown) == _expected(values, shown)


@pytest.mark.usefixtures("compiled")
def test_hidden_rows_do_not_decide_how_shown_ones_are_written() -> None:
    # hidden rows hold an absent-id marker (negative) and huge values: neither shows
    values = np.array([-1, 5, 2**62, 12_345_678, -1, 0], dtype=np.int64)
    shown = np.array([False, True, False, True, False, True])
    assert _written(values, shown) == '{}{"v":5,}{}{"v":12345678,}{}{"v":0,}'


@pytest.mark.skipif(text._records is None, reason="no C compiler where the project was installed")
@pytest.mark.parametrize("column", sorted(COLUMNS))
@pytest.mark.parametrize("hidden", [False, True])
def test_the_compiled_formatter_writes_integers_as_their_decimal_text(
    column: str, hidden: bool
) -> None:
    values = np.asarray(COLUMNS[column], dtype=np.int64)
    shown = rng.random(values.size) < 0.6 if hidden else None
    assert _written(values, shown, RowBuilder) == _expected(values, shown)
