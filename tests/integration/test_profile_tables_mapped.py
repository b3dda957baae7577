"""The operator, gap and counter tables of a rank analysed in this process are read through
memory maps from the end of its analysis passes on; where a map cannot be made they stay in
the heap, and the profile is the same either way."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

from perfledger.memory import in_mapped_files
from perfledger.model.profile import ProfileAnalysis
from perfledger.profiledir import artefacts
from perfledger.run.pipeline import build_profile

TRACE = Path(__file__).resolve().parents[1] / "data" / "kineto" / "v100_rank1_ddp.json.gz"
MAPPED = ("op_summary", "kernel_details", "counters")


def _profile(out: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Analyse the trace into ``out``; whether each of MAPPED was mapped when the CSVs began."""
    seen: dict[str, bool] = {}
    csv_tables = artefacts.csv_tables

    def watched(analysis: ProfileAnalysis) -> dict[str, pa.Table]:
        for name in MAPPED:
            table = getattr(analysis, name)
            assert table.num_rows > 0, name
            seen[name] = in_mapped_files(table)
        return csv_tables(analysis)

    with monkeypatch.context() as patch:
        patch.setattr(artefacts, "csv_tables", watched)
        build_profile([TRACE], out, console=Console(file=io.StringIO(), width=200))
    return seen


def _outputs(out: Path) -> dict[str, bytes]:
    """Every file of a profile but those that carry the run itself."""
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name not in ("meta.json", "report.html")
    }


def test_the_tables_are_mapped_and_the_profile_is_the_same_without_maps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _profile(tmp_path / "mapped", monkeypatch) == dict.fromkeys(MAPPED, True)

    def refused(*args: object, **kwargs: object) -> None:
        # what a filesystem without memory maps (some FUSE and network mounts) answers
        raise OSError(19, "refused", str(args[0]))

    monkeypatch.setattr(pa, "memory_map", refused)
    assert _profile(tmp_path / "heap", monkeypatch) == dict.fromkeys(MAPPED, False)
    assert _outputs(tmp_path / "heap") == _outputs(tmp_path / "mapped")
