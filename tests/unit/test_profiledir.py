"""The profile directory's reader and writer: format versions, both events layouts, tables
written whole, staging folders never brought back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfledger.errors import PerfledgerError
from perfledger.model.schema import FORMAT_VERSION
from perfledger.profiledir import is_profile, load_profile
from perfledger.profiledir.reader import MIGRATIONS, migrate
from perfledger.profiledir.writer import write_table


def make_profile(path: Path, version: int = FORMAT_VERSION, **summary: object) -> Path:
    path.mkdir(parents=True)
    (path / "meta.json").write_text(json.dumps({"format_version": version}))
    document = {"format_version": version, "step_count": 2, "step_time_ms": 12.5, **summary}
    (path / "summary.json").write_text(json.dumps(document))
    (path / "tables").mkdir()
    return path


def test_reads_the_figures_the_profile_holds(tmp_path: Path) -> None:
    profile = load_profile(make_profile(tmp_path / "p", source={"kind": ["ascend", "kineto"]}))
    assert is_profile(profile.path)
    assert (profile.step_count, profile.step_time_ms) == (2, 12.5)
    assert profile.source_kind == "ascend+kineto"
    assert profile.format_version == FORMAT_VERSION


def test_a_newer_format_is_a_one_line_error(tmp_path: Path) -> None:
    path = make_profile(tmp_path / "p", version=FORMAT_VERSION + 1)
    with pytest.raises(PerfledgerError, match="newer perfledger") as error:
        load_profile(path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("meta", ["{}", '{"format_version": "1"}', '{"format_version": 0}', "[]"])
def test_a_folder_without_a_valid_format_is_not_a_profile(tmp_path: Path, meta: str) -> None:
    path = make_profile(tmp_path / "p")
    (path / "meta.json").write_text(meta)
    with pytest.raises(PerfledgerError, match="meta.json"):
        load_profile(path)


def test_missing_documents_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(PerfledgerError, match="no such profile directory"):
        load_profile(tmp_path / "nowhere")
    path = make_profile(tmp_path / "p")
    (path / "summary.json").unlink()
    with pytest.raises(PerfledgerError, match="summary.json is missing"):
        load_profile(path)


def test_an_older_format_is_migrated_step_by_step(monkeypatch: pytest.MonkeyPatch) -> None:
    def rename(meta: dict[str, object], summary: dict[str, object]) -> tuple[dict, dict]:
        renamed = {key: value for key, value in summary.items() if key != "old"}
        return meta, {**renamed, "renamed": summary["old"]}

    monkeypatch.setitem(MIGRATIONS, 0, rename)  # as if version 0 -> 1 had changed a key
    _, summary = migrate({}, {"old": 7}, version=0)
    assert summary["renamed"] == 7 and "old" not in summary


def test_a_format_1_profile_reads_with_the_format_2_keys(tmp_path: Path) -> None:
    # format 1 called what could not be read "loss", and knew no overhead noise
    path = make_profile(tmp_path / "p", version=1, loss="rank1.json: truncated", foo=1)
    profile = load_profile(path)
    assert profile.format_version == 1
    assert profile.summary["unread_input"] == "rank1.json: truncated"
    assert profile.summary["loss"] == "rank1.json: truncated"  # kept for one version
    assert profile.summary["profiler_overhead_noise_pct"] is None
    assert profile.summary["unprofiled_step_ms"] is None
    assert FORMAT_VERSION == 2


def test_tables_read_in_either_layout_in_rank_order(tmp_path: Path) -> None:
    profile_path = make_profile(tmp_path / "p")
    for rank in (10, 2, 9):
        part = profile_path / "tables" / "events" / f"rank={rank}.parquet"
        part.parent.mkdir(exist_ok=True)
        pq.write_table(pa.table({"rank": [rank, rank]}), part)
    write_table(profile_path, "steps", pa.table({"step": [1, 2]}))
    profile = load_profile(profile_path)
    assert profile.table_names() == ["events", "steps"]
    events = profile.read_table("events")
    assert events is not None and events.column("rank").to_pylist() == [2, 2, 9, 9, 10, 10]
    steps = profile.read_table("steps")
    assert steps is not None and steps.column("step").to_pylist() == [1, 2]
    assert profile.read_table("gaps", required=False) is None
    with pytest.raises(PerfledgerError, match="gaps.parquet is missing"):
        profile.read_table("gaps")


def test_a_damaged_table_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    profile_path = make_profile(tmp_path / "p")
    (profile_path / "tables" / "steps.parquet").write_bytes(b"not parquet")
    with pytest.raises(PerfledgerError, match="steps.parquet: cannot read") as error:
        load_profile(profile_path).read_table("steps")
    assert "\n" not in str(error.value)


def test_a_table_written_into_a_removed_staging_folder_does_not_bring_it_back(
    tmp_path: Path,
) -> None:
    """A writer can outlive its staging folder (a second Ctrl-C removes it meanwhile): what it
    writes next must fail, not recreate the folder."""
    staging = tmp_path / ".p.partial-1"
    staging.mkdir()
    shutil.rmtree(staging)
    with pytest.raises(FileNotFoundError):
        write_table(staging, "counters", pa.table({"value": [1.0]}))
    assert not staging.exists()


def test_a_stored_tables_text_columns_alone_have_a_dictionary(tmp_path: Path) -> None:
    rows = 50_000
    table = pa.table(
        {
            "rank": pa.array([r % 4 for r in range(rows)], pa.int32()),
            "track": pa.array([f"track {r % 3}" for r in range(rows)]),
            "name": pa.array([f"n{r % 5}" for r in range(rows)]).dictionary_encode(),
            "ts_ns": pa.array(range(rows), pa.int64()),
            "value": pa.array([r / 7 for r in range(rows)], pa.float64()),
        }
    )
    path = write_table(tmp_path, "counters", table)
    stored = pq.ParquetFile(path)
    encodings = {
        stored.schema_arrow.names[c]: stored.metadata.row_group(0).column(c).encodings
        for c in range(stored.metadata.num_columns)
    }
    coded = {name for name, used in encodings.items() if any("DICTIONARY" in e for e in used)}
    assert coded == {"track", "name"}
    assert pq.read_table(path).equals(table)
