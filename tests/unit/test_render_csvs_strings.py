"""String cells of the CSV writer: quoting of repeated, null and odd values, typed or encoded."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from perfledger.render import csvs
from perfledger.render.csvs import csv_bytes, write_csv


def test_repeated_names_are_quoted_like_single_ones(tmp_path: Path) -> None:
    names = ["void k<float, 4>", "plain", None, 'say "hi"', "line\nbreak", "", "plain"] * 3
    table = pa.table({"name": pa.array(names, pa.string()), "n": list(range(len(names)))})
    want = "name,n\n" + "".join(
        f"{cell},{i}\n"
        for i, cell in enumerate(
            ['"void k<float, 4>"', "plain", "", '"say ""hi"""', '"line\nbreak"', "", "plain"] * 3
        )
    )
    assert csv_bytes(table).decode() == want
    write_csv(table, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_bytes() == want.encode()


def test_dictionary_large_and_all_null_string_columns() -> None:
    table = pa.table(
        {
            "kind": pa.array(["kernel", "memcpy", "kernel"]).dictionary_encode(),
            "big": pa.array(["a,b", "c", None], pa.large_string()),
            "none": pa.nulls(3, pa.string()),
        }
    )
    assert csv_bytes(table) == b'kind,big,none\nkernel,"a,b",\nmemcpy,c,\nkernel,,\n'


def test_no_rows() -> None:
    assert csv_bytes(pa.table({"name": pa.array([], pa.string())})) == b"name\n"


def test_columns_of_several_chunks_and_batches_keep_each_row_its_own_cell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # chunks of other values and other dictionaries, cut into batches of two rows: each
    # distinct value is made a cell once for the whole table, every row keeps its own
    monkeypatch.setattr(csvs, "_BATCH_ROWS", 2)
    names = [["a,b", None, "c", 'q"'], ["c", "d\ne", None, "a,b", "z"]]
    kinds = [["kernel", "memcpy", "sync", "kernel"], ["sync", "kernel", "sync", "memcpy", "x"]]
    table = pa.table(
        {
            "name": pa.chunked_array([pa.array(n) for n in names]),
            "kind": pa.chunked_array([pa.array(k).dictionary_encode() for k in kinds]),
        }
    )
    cell = {None: "", "a,b": '"a,b"', "c": "c", 'q"': '"q"""', "d\ne": '"d\ne"', "z": "z"}
    want = "name,kind\n" + "".join(
        f"{cell[n]},{k}\n" for n, k in zip(names[0] + names[1], kinds[0] + kinds[1], strict=True)
    )
    assert csv_bytes(table).decode() == want
