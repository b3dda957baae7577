"""Damaged folders of several ranks (Kineto and Ascend): a rank that cannot be read is left
out, the folder is refused in one line only when no rank can be read; and the whole of
``analyze`` (profile directory written) on damaged inputs of every family."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import harness
from tests.fuzz.seeds import FAMILIES, Seed

pytestmark = pytest.mark.fuzz
Seeds = Callable[[str], list[Seed]]


@harness.budget(quick=15)
@given(data=st.data())
def test_damaged_rank_folders_are_read_or_refused(seeds: Seeds, data: st.DataObject) -> None:
    harness.fuzz_case("cluster", seeds("cluster"), data)


@harness.budget(quick=6, long=150)
@given(data=st.data())
def test_damaged_inputs_make_a_profile_or_one_line(seeds: Seeds, data: st.DataObject) -> None:
    family = data.draw(st.sampled_from(sorted(FAMILIES)), label="family")
    harness.fuzz_case("analyze (all)", seeds(family), data, check=harness.check_profile)
