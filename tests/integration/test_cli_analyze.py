"""``perfledger analyze`` and ``perfledger query`` as a user runs them: a subprocess each."""

from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import perfledger
from tests.paths import data_file


@pytest.fixture(scope="module")
def ddp_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prof") / "ddp"
    result = perfledger("analyze", data_file("kineto/v100_rank1_ddp.json.gz"), "-o", out)
    assert result.returncode == 0, result.stderr
    return out


def test_analyze_writes_the_profile_directory(ddp_profile: Path) -> None:
    for name in (
        "meta.json",
        "summary.json",
        "op_summary.csv",
        "op_statistic.csv",
        "kernel_details.csv",
        "api_statistic.csv",
        "step_trace.csv",
        "gaps.csv",
        "transfers.csv",
        "communication.csv",
        "timeline.json.gz",
        "tables/events.parquet",
        "raw/v100_rank1_ddp.json.gz",
    ):
        assert (ddp_profile / name).is_file(), name
    meta = json.loads((ddp_profile / "meta.json").read_text())
    assert meta["format_version"] == 2
    summary = json.loads((ddp_profile / "summary.json").read_text())
    # 5 ProfilerStep annotations (#2 .. #6) in the trace
    assert summary["step_count"] == 5
    with (ddp_profile / "step_trace.csv").open() as f:
        rows = list(csv.DictReader(f))
    span = [r for r in rows if r["step"] == "-1"]
    assert len(span) == 1 and int(span[0]["idle_ns"]) == 643_612_000
    for row in rows:
        parts = sum(
            int(row[c])
            for c in ("compute_ns", "communication_ns", "memcpy_ns", "memset_ns", "idle_ns")
        )
        assert parts == int(row["wall_ns"])


def test_query_runs_sql_over_the_tables(ddp_profile: Path) -> None:
    result = perfledger(
        "query",
        ddp_profile,
        "SELECT count(*) AS n FROM events WHERE kind = 'comm'",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    # NCCL kernels of the trace, counted independently with the stdlib json module
    with gzip.open(data_file("kineto/v100_rank1_ddp.json.gz"), "rt") as f:
        events = json.load(f)["traceEvents"]
    nccl = sum(1 for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower())
    assert json.loads(result.stdout) == [{"n": nccl}]


def test_query_is_read_only(ddp_profile: Path, tmp_path: Path) -> None:
    target = tmp_path / "stolen.csv"
    result = perfledger("query", ddp_profile, f"COPY events TO '{target}'")
    assert result.returncode == 2
    assert not target.exists()
    assert "Traceback" not in result.stderr


def test_existing_profile_is_not_overwritten(ddp_profile: Path) -> None:
    before = (ddp_profile / "summary.json").stat().st_mtime_ns
    result = perfledger("analyze", data_file("kineto/a100_alexnet.json.gz"), "-o", ddp_profile)
    assert result.returncode == 2
    assert "--force" in result.stderr
    assert (ddp_profile / "summary.json").stat().st_mtime_ns == before


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("not_json.json", b"this is not json at all\n"),
        ("not_a_trace.json", b'{"a": 1}'),
        ("empty.json", b""),
        ("no_events.json", b'{"traceEvents": []}'),
        ("garbage.json.gz", b"\x1f\x8b\x08\x00garbage"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, name: str, content: bytes) -> None:
    trace = _write(tmp_path / name, content)
    result = perfledger("analyze", trace, "-o", tmp_path / "out")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0]
    assert not (tmp_path / "out").exists()


def test_missing_file(tmp_path: Path) -> None:
    result = perfledger("analyze", tmp_path / "nope.json", "-o", tmp_path / "out")
    assert result.returncode == 2
    assert "nope.json" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("compressed", [False, True])
def test_truncated_trace_is_read_up_to_the_damage(tmp_path: Path, compressed: bool) -> None:
    with gzip.open(data_file("kineto/a100_rank3_control.json.gz"), "rb") as f:
        whole = f.read()
    cut = whole[: len(whole) * 2 // 3]
    if compressed:
        packed = gzip.compress(whole)
        trace = _write(tmp_path / "killed.json.gz", packed[: len(packed) * 2 // 3])
    else:
        trace = _write(tmp_path / "killed.json", cut)
    out = tmp_path / "out"
    result = perfledger("analyze", trace, "-o", out)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["loss"] and "killed.json" in summary["loss"]
    assert "lost" in (result.stdout + result.stderr).lower()
    assert summary["step_count"] >= 1


def test_inputs_with_the_same_name_are_copied_and_left_untouched(tmp_path: Path) -> None:
    import hashlib

    originals = {}
    for rank in (0, 1):
        folder = tmp_path / f"node{rank}"
        folder.mkdir()
        source = data_file(f"kineto/sampled_2ranks/rank-{rank}.json.gz")
        (folder / "trace.json.gz").write_bytes(source.read_bytes())
        originals[folder / "trace.json.gz"] = hashlib.sha256(source.read_bytes()).hexdigest()
    out = tmp_path / "out"
    result = perfledger("analyze", tmp_path / "node0", tmp_path / "node1", "-o", out)
    assert result.returncode == 0, result.stderr
    for path, digest in originals.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
        assert path.stat().st_nlink == 1
    raw = sorted(p.name for p in (out / "raw").iterdir())
    assert len(raw) == 2 and "trace.json.gz" in raw
    for copy in (out / "raw").iterdir():
        assert copy.stat().st_nlink == 1


def test_a_database_export_is_left_as_it_was(tmp_path: Path) -> None:
    """torch_npu writes its database in WAL mode, where a reader that opens it as a
    database (read-only or not) makes a -wal and a -shm file beside it: the export's folder
    holds exactly its files, with their bytes, after the analysis."""
    import hashlib
    import shutil

    export = tmp_path / "rank0_ascend_pt"
    shutil.copytree(data_file("ascend/torch_npu_db/level1/rank0_ascend_pt"), export)
    database = next(export.rglob("ascend_pytorch_profiler_*.db"))
    # the file format's write and read versions (header bytes 18 and 19): 2, WAL mode
    assert database.read_bytes()[18:20] == b"\x02\x02"

    def files() -> dict[str, str]:
        return {
            str(p.relative_to(export)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(export.rglob("*"))
            if p.is_file()
        }

    before = files()
    result = perfledger("analyze", export, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert files() == before


def test_a_working_folder_removed_before_the_run_gives_the_one_line_error(tmp_path: Path) -> None:
    """The run's git state is read from the working folder as the run begins: a folder
    removed under the shell is the output path's error, as ever, not an internal one."""
    gone = tmp_path / "gone"
    gone.mkdir()
    trace = data_file("kineto/a100_triton.json.gz")
    script = f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" -m perfledger "$@"'
    result = subprocess.run(
        ["sh", "-c", script, "sh", "analyze", str(trace), "-o", str(tmp_path / "p")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfledger: error: -o "), result.stderr
