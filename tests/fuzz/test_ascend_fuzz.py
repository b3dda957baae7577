"""Damaged Ascend output of every kind: torch_npu text and database exports, msprof CSV and
database. Each case is imported and analysed as ``analyze`` does; see harness for the rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import harness
from tests.fuzz.seeds import Seed

pytestmark = pytest.mark.fuzz
Seeds = Callable[[str], list[Seed]]


@harness.budget(quick=25)
@given(data=st.data())
def test_damaged_torch_npu_text_is_read_or_refused(seeds: Seeds, data: st.DataObject) -> None:
    harness.fuzz_case("torch_npu_text", seeds("torch_npu_text"), data)


@harness.budget(quick=25)
@given(data=st.data())
def test_damaged_torch_npu_db_is_read_or_refused(seeds: Seeds, data: st.DataObject) -> None:
    harness.fuzz_case("torch_npu_db", seeds("torch_npu_db"), data)


@harness.budget(quick=25)
@given(data=st.data())
def test_damaged_msprof_csv_is_read_or_refused(seeds: Seeds, data: st.DataObject) -> None:
    harness.fuzz_case("msprof_csv", seeds("msprof_csv"), data)


@harness.budget(quick=25)
@given(data=st.data())
def test_damaged_msprof_db_is_read_or_refused(seeds: Seeds, data: st.DataObject) -> None:
    harness.fuzz_case("msprof_db", seeds("msprof_db"), data)
