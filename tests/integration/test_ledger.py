"""The experiments ledger on disk: registration, the runs command, concurrency, killed writers."""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from perfledger import ledger
from perfledger.errors import PerfledgerError
from perfledger.model.accounts import STEP_TRACE_COLUMNS
from perfledger.profiledir import load_profile
from perfledger.run.pipeline import build_profile
from tests.cli import perfledger as _perfledger
from tests.paths import data_file

MS = 1_000_000


def make_profile(
    directory: Path,
    walls_ms: Sequence[float],
    *,
    busy_pct: float = 50.0,
    findings: Sequence[dict[str, Any]] = (),
    meta: dict[str, Any] | None = None,
) -> Path:
    """A minimal profile directory: summary.json, meta.json and step_trace.csv of one device."""
    directory.mkdir(parents=True)
    rows = []
    start = 0
    for step, wall_ms in enumerate(walls_ms, start=1):
        wall = round(wall_ms * MS)
        busy = round(wall * busy_pct / 100)
        row = dict.fromkeys(STEP_TRACE_COLUMNS, 0)
        row.update(
            rank=0,
            device=0,
            step=step,
            start_ns=start,
            end_ns=start + wall,
            wall_ns=wall,
            compute_ns=busy,
            idle_ns=wall - busy,
            idle_host_dispatch_ns=wall - busy,
        )
        rows.append(row)
        start += wall
    with (directory / "step_trace.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=STEP_TRACE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    walls = sorted(walls_ms)
    median = (walls[(len(walls) - 1) // 2] + walls[len(walls) // 2]) / 2
    summary = {
        "format_version": 1,
        "source": {"kind": "kineto", "files": []},
        "ranks": [0],
        "step_count": len(walls_ms),
        "step_time_ms": median,
        "findings": list(findings),
        "devices": [
            {
                "rank": 0,
                "device": 0,
                "span_ms": sum(walls_ms),
                "busy_ms": sum(walls_ms) * busy_pct / 100,
            }
        ],
        "host": [],
    }
    (directory / "summary.json").write_text(json.dumps(summary))
    document = {
        "format_version": 1,
        "created_ns": 1_790_000_000 * 10**9,
        "command_line": ["perfledger", "analyze", "trace.json"],
        "working_dir": str(directory.parent),
        "ranks": {"0": {"device_properties": [{"name": "NVIDIA A100-SXM4-80GB"}]}},
    }
    document.update(meta or {})
    (directory / "meta.json").write_text(json.dumps(document))
    return directory


def test_register_reads_the_profile(tmp_path: Path) -> None:
    findings = [
        {"id": "host_dispatch_bound", "title": "host too slow", "severity_ms": 2.5},
        {"id": "memcpy_heavy", "title": "copies", "severity_ms": 1.0},
    ]
    profile = make_profile(
        tmp_path / "prof_a",
        [10.0, 12.0, 11.0, 30.0],
        busy_pct=75.0,
        findings=findings,
        meta={
            "recorder": "perfledger 0.1.0",
            "command": ["python", "train.py", "--bs", "64"],
            "label": "bs64",
            "options": {"level": "kernel", "active": 4, "unrelated": "x"},
            "git": {"commit": "abc123", "branch": "main", "dirty": True},
        },
    )
    path = tmp_path / "ledger.db"
    run_id = ledger.register_profile(profile, ledger_path=path, note="first try")
    assert run_id == 1
    with ledger.connect(path, create=False) as connection:
        (run,) = ledger.list_runs(connection)
    assert run.id == 1
    assert run.label == "bs64"  # the recorder's label
    assert run.note == "first try"
    assert run.kind == "record"
    assert run.command == ("python", "train.py", "--bs", "64")
    assert run.options == {"level": "kernel", "active": 4}
    assert (run.git_commit, run.git_branch, run.git_dirty) == ("abc123", "main", True)
    assert run.device == "NVIDIA A100-SXM4-80GB"
    assert run.step_median_ms == 11.5
    # p90 of 10, 11, 12, 30 (linear): 12 + 0.7 * 18
    assert run.step_p90_ms == pytest.approx(24.6)
    assert run.utilization_pct == 75.0
    assert run.accounting["compute"] == 75.0
    assert run.accounting["idle_host_dispatch"] == 25.0
    assert (run.top_finding, run.top_finding_ms) == ("host_dispatch_bound", 2.5)
    assert run.profile_path == str(profile.resolve())
    assert ledger.register_profile(profile, ledger_path=path, label="again") == 2


def test_the_profile_just_written_gives_the_workload_its_files_give(tmp_path: Path) -> None:
    # the ledger takes the kernels' names of a profile just written from the analysis, not
    # from its kernel_details.csv: the same names as the file read back
    console = Console(file=io.StringIO())
    result = build_profile(
        [data_file("kineto/a100_alexnet.json.gz")], tmp_path / "p", console=console
    )
    assert result.stored.kernel_names is not None
    from_memory = ledger.run_record(result.stored, registered_ns=1).workload
    from_files = ledger.run_record(result.path, registered_ns=1).workload
    assert from_memory == from_files
    names = {row["name"] for row in csv.DictReader((result.path / "kernel_details.csv").open())}
    assert list(result.stored.kernel_names) == sorted(names - {""})
    assert len(result.stored.kernel_names) > 10


def test_runs_table_delta_is_exact(tmp_path: Path) -> None:
    path = tmp_path / ".perfledger" / "ledger.db"
    for name, walls in (("base", [20.0] * 3), ("faster", [15.0] * 3), ("slower", [23.0] * 3)):
        ledger.register_profile(make_profile(tmp_path / name, walls), ledger_path=path)
    # the default ledger is .perfledger/ledger.db in the working directory
    done = perfledger("runs", "--format", "csv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(r["label"], r["step_ms"], r["delta_pct"]) for r in rows] == [
        ("base", "20.0", "0"),
        ("faster", "15.0", "-25.0"),  # 100 * (15 - 20) / 20
        ("slower", "23.0", "15.0"),  # 100 * (23 - 20) / 20
    ]
    table = perfledger("runs", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "baseline" in table.stdout
    assert "-25.00%" in table.stdout and "+15.00%" in table.stdout
    against = perfledger("runs", "--baseline", "2", "--format", "csv", cwd=tmp_path)
    rows = list(csv.DictReader(io.StringIO(against.stdout)))
    assert [r["delta_pct"] for r in rows] == [
        str(round(100 * 5 / 15, 4)),
        "0",
        str(round(100 * 8 / 15, 4)),
    ]


def test_runs_note_since_and_exports(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    for name in ("a", "b"):
        ledger.register_profile(make_profile(tmp_path / name, [10.0]), ledger_path=path)
    done = perfledger("runs", "note", "2", "fused | optimizer", "--ledger", path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with ledger.connect(path, create=False) as connection:
        assert ledger.get_run(connection, 2).note == "fused | optimizer"  # type: ignore[union-attr]
        # an old run: registered long ago
        connection.execute("UPDATE runs SET registered_ns = 1000 WHERE id = 1")
    recent = perfledger("runs", "--ledger", path, "--since", "1d", "--format", "csv", cwd=tmp_path)
    assert [r["id"] for r in csv.DictReader(io.StringIO(recent.stdout))] == ["2"]
    assert perfledger("runs", "--ledger", path, "-o", "t.md", cwd=tmp_path).returncode == 0
    text = (tmp_path / "t.md").read_text()
    assert "fused \\| optimizer" in text and text.startswith("| id |")
    assert perfledger("runs", "list", "--ledger", path, "-o", "t.csv", cwd=tmp_path).returncode == 0
    assert (tmp_path / "t.csv").read_text().startswith("id,time,label,step_ms")
    # an export is written again over an export (of either format) ...
    again = perfledger(
        "runs", "--ledger", path, "-o", "t.csv", "--format", "markdown", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "t.csv").read_text().startswith("| id |")
    # ... never over a file of the user's
    (tmp_path / "notes.md").write_text("# my notes\n")
    refused = perfledger("runs", "--ledger", path, "-o", "notes.md", cwd=tmp_path)
    assert refused.returncode == 2
    assert "notes.md exists and was not written by perfledger" in refused.stderr
    assert (tmp_path / "notes.md").read_text() == "# my notes\n"
    missing = perfledger("runs", "note", "9", "x", "--ledger", path, cwd=tmp_path)
    assert missing.returncode == 2
    assert "no run with id 9" in missing.stderr
    no_base = perfledger("runs", "--ledger", path, "--baseline", "9", cwd=tmp_path)
    assert no_base.returncode == 2 and "no run with id 9" in no_base.stderr
    bad_since = perfledger("runs", "--ledger", path, "--since", "soon", cwd=tmp_path)
    assert bad_since.returncode == 2 and "--since 'soon'" in bad_since.stderr


def test_runs_without_a_ledger_exits_2(tmp_path: Path) -> None:
    done = perfledger("runs", cwd=tmp_path)
    assert done.returncode == 2
    assert "no ledger here" in done.stderr
    assert not (tmp_path / ".perfledger").exists()


def test_trend_page(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    for name, walls in (("a", [10.0, 11.0]), ("b</script><b>x", [9.0, 9.5])):
        ledger.register_profile(
            make_profile(tmp_path / name.replace("/", "_"), walls), ledger_path=path, label=name
        )
    done = perfledger("runs", "trend", "--ledger", path, "-o", "trend.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "trend.html").read_text()
    assert "</script><b>" not in html  # the label travels escaped inside the JSON block
    assert "b\\u003c/script\\u003e\\u003cb\\u003ex" in html
    assert "http://" not in html.split("<script>")[0]
    # the page is written again over itself, never over a page of the user's
    again = perfledger("runs", "trend", "--ledger", path, cwd=tmp_path)  # trend.html by default
    assert again.returncode == 0, again.stderr
    (tmp_path / "trend.html").write_text("<html>my trend</html>")
    refused = perfledger("runs", "trend", "--ledger", path, cwd=tmp_path)
    assert refused.returncode == 2
    assert "trend.html exists and was not written by perfledger" in refused.stderr
    assert (tmp_path / "trend.html").read_text() == "<html>my trend</html>"


# Failure modes ---------------------------------------------------------------------------------


def test_unwritable_ledger_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = make_profile(tmp_path / "p", [10.0])
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert (
        ledger.register_profile(profile, ledger_path=blocker / "ledger.db") == ledger.NOT_REGISTERED
    )
    assert "run not registered: the ledger cannot be written" in capsys.readouterr().err


def test_corrupt_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = make_profile(tmp_path / "p", [10.0])
    corrupt = tmp_path / "given.db"
    corrupt.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(PerfledgerError, match="given.db: not a perfledger ledger"):
        ledger.register_profile(profile, ledger_path=corrupt)
    # the default ledger is only warned about: analyze must not fail after writing its profile
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".perfledger").mkdir()
    (tmp_path / ".perfledger" / "ledger.db").write_bytes(b"garbage" * 100)
    assert ledger.register_profile(profile) == ledger.NOT_REGISTERED
    assert "run not registered" in capsys.readouterr().err
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE things (x)")
    with pytest.raises(PerfledgerError, match="not a perfledger ledger"):
        ledger.register_profile(profile, ledger_path=foreign)
    done = perfledger("runs", "--ledger", corrupt, cwd=tmp_path)
    assert done.returncode == 2 and "not a perfledger ledger" in done.stderr


def _register_many(args: tuple[str, str, int]) -> list[int]:
    profile, path, count = args
    return [ledger.register_profile(Path(profile), ledger_path=Path(path)) for _ in range(count)]


def test_concurrent_writers_all_register(tmp_path: Path) -> None:
    profile = make_profile(tmp_path / "p", [10.0, 11.0])
    path = tmp_path / "l.db"
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        ids = pool.map(_register_many, [(str(profile), str(path), 10)] * 4)
    flat = sorted(i for chunk in ids for i in chunk)
    assert flat == list(range(1, 41))
    with ledger.connect(path, create=False) as connection:
        assert len(ledger.list_runs(connection)) == 40
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_killed_writer_leaves_the_ledger_whole(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    profile = make_profile(tmp_path / "p", [10.0])
    assert ledger.register_profile(profile, ledger_path=path) == 1
    # A writer that holds the write lock mid-transaction, then dies without committing.
    writer = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from perfledger import ledger
        from perfledger.ledger.store import connect
        record = ledger.run_record(Path({str(profile)!r}), label="lost")
        with connect(Path({str(path)!r})) as connection:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(
                "INSERT INTO runs (registered_ns, label) VALUES (?, ?)", (1, "lost")
            )
            print("holding", flush=True)
            time.sleep(600)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "holding"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert ledger.register_profile(profile, ledger_path=path, label="after") == 2
    with ledger.connect(path, create=False) as connection:
        labels = [r.label for r in ledger.list_runs(connection)]
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert labels == ["p", "after"]


# Real profiles through the command line -------------------------------------------------------

ANALYZE_RUNNER = """
import argparse, sys
from pathlib import Path
from perfledger import __main__ as entry, ledger

trace, out, path = sys.argv[1:]
parser = entry.build_parser()
(sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
options = {s for a in sub.choices["analyze"]._actions for s in a.option_strings}
if "--ledger" in options:
    # perfledger analyze registers the run itself
    sys.exit(entry.main(["analyze", trace, "-o", out, "--ledger", path]))
code = entry.main(["analyze", trace, "-o", out])
if code == 0:
    ledger.register_profile(Path(out), ledger_path=Path(path))
sys.exit(code)
"""


def test_a_ledger_made_while_another_connection_writes_it_waits_for_it(tmp_path: Path) -> None:
    # two processes making the ledger at once: the second one's switch to WAL mode meets the
    # write lock the first one's upgrade holds, which SQLite reports at once instead of
    # waiting; the switch waits for the lock (held here 0.3 s), and the ledger is made, in
    # WAL mode
    path = tmp_path / "shared.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # the write lock, as an upgrade's transaction takes it
    release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    release.start()
    try:
        with ledger.connect(path) as connection:
            mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
            assert ledger.list_runs(connection) == []
    finally:
        release.join()
        other.close()
    assert mode == "wal"


def test_two_concurrent_analyze_processes_register_both(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    traces = [
        data_file("ascend/torch_npu_text/level1/rank0_ascend_pt"),
        data_file("ascend/torch_npu_text/level1/rank1_ascend_pt"),
    ]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", ANALYZE_RUNNER, str(trace), str(tmp_path / f"p{i}"), str(path)],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, trace in enumerate(traces)
    ]
    for process in processes:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
    with ledger.connect(path, create=False) as connection:
        runs = ledger.list_runs(connection)
    assert sorted(r.label for r in runs) == ["p0", "p1"]
    for run in runs:
        summary = json.loads(Path(run.profile_path or "", "summary.json").read_text())
        assert run.step_median_ms == summary["step_time_ms"]
        assert run.source_kind == "torch_npu_text"
    done = perfledger("runs", "--ledger", path, "--format", "csv", cwd=tmp_path)
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    by_label = {r["label"]: r for r in rows}
    # the ledger's order, the baseline's: registration time, then id. Two processes that
    # register at once may take their ids in the other order than their times
    first, second = runs
    assert first.step_median_ms and second.step_median_ms
    expected = round(100 * (second.step_median_ms - first.step_median_ms) / first.step_median_ms, 4)
    assert by_label[second.label]["delta_pct"] == str(expected)


def perfledger(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _perfledger(*args, cwd=cwd, inherit_env=True, columns=200)


# One ledger per project -------------------------------------------------------------------------


def project(tmp_path: Path) -> Path:
    """A repository's folder: a ``.git`` entry is what marks its root."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / "a" / "deep").mkdir(parents=True)
    (root / "b").mkdir()
    return root


def test_runs_of_one_project_land_in_its_root_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = project(tmp_path)
    monkeypatch.delenv(ledger.LEDGER_ENV, raising=False)
    for folder, name in ((root / "a" / "deep", "first"), (root / "b", "second")):
        monkeypatch.chdir(folder)
        assert ledger.register_profile(make_profile(tmp_path / name, [10.0])) != -1
    assert (root / ".perfledger" / "ledger.db").is_file()
    assert not (root / "a" / "deep" / ".perfledger").exists()
    assert not (root / "b" / ".perfledger").exists()
    done = perfledger("runs", "--format", "csv", cwd=root / "a")
    assert done.returncode == 0, done.stderr
    assert [r["label"] for r in csv.DictReader(io.StringIO(done.stdout))] == ["first", "second"]
    # outside any repository: the current folder's, as before
    outside = tmp_path / "loose"
    outside.mkdir()
    monkeypatch.chdir(outside)
    ledger.register_profile(make_profile(tmp_path / "third", [10.0]))
    assert (outside / ".perfledger" / "ledger.db").is_file()


def test_the_environment_names_the_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    shared = tmp_path / "team.db"
    monkeypatch.chdir(root / "b")
    monkeypatch.setenv(ledger.LEDGER_ENV, str(shared))
    ledger.register_profile(make_profile(tmp_path / "p", [10.0]))
    assert shared.is_file() and not (root / ".perfledger").exists()
    env = {**os.environ, ledger.LEDGER_ENV: str(shared)}
    done = subprocess.run(
        [sys.executable, "-m", "perfledger", "runs", "--format", "csv"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert [r["label"] for r in csv.DictReader(io.StringIO(done.stdout))] == ["p"]
    # a folder is no ledger: one line naming it, exit code 2
    folder = perfledger("runs", "--ledger", tmp_path, cwd=tmp_path)
    assert folder.returncode == 2
    assert folder.stderr.strip() == (
        f"perfledger: error: cannot open the ledger {tmp_path}: unable to open database file"
    )
    # a named file that is not a ledger is the user's to see
    (tmp_path / "bad.db").write_bytes(b"garbage" * 100)
    monkeypatch.setenv(ledger.LEDGER_ENV, str(tmp_path / "bad.db"))
    with pytest.raises(PerfledgerError, match="not a perfledger ledger"):
        ledger.register_profile(make_profile(tmp_path / "q", [10.0]))


V1_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, registered_ns INTEGER NOT NULL,
    profile_created_ns INTEGER, label TEXT NOT NULL, note TEXT, kind TEXT, command TEXT,
    options TEXT, git_commit TEXT, git_branch TEXT, git_dirty INTEGER, device TEXT,
    source_kind TEXT, profile_path TEXT, ranks INTEGER, step_count INTEGER,
    step_median_ms REAL, step_p90_ms REAL, utilization_pct REAL, accounting TEXT,
    top_finding TEXT, top_finding_title TEXT, top_finding_ms REAL
);
"""


def old_ledger(path: Path, rows: Sequence[tuple[str, float, str, str]]) -> Path:
    """A ledger as perfledger wrote it before workloads: (label, step ms, command, device)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as connection:
        connection.executescript(V1_SCHEMA)
        for index, (label, step_ms, command, device) in enumerate(rows, start=1):
            connection.execute(
                "INSERT INTO runs (registered_ns, label, kind, command, device, step_median_ms)"
                " VALUES (?, ?, 'record', ?, ?, ?)",
                (index * 10**9, label, json.dumps(command.split()), device, step_ms),
            )
        connection.execute("PRAGMA user_version = 1")
    connection.close()
    return path


def test_an_older_folder_ledger_is_pointed_at_and_imported(tmp_path: Path) -> None:
    root = project(tmp_path)
    older = old_ledger(
        root / "a" / ".perfledger" / "ledger.db",
        [("bs64", 20.0, "python train.py", "cpu"), ("bs128", 30.0, "python train.py", "cpu")],
    )
    before = older.read_bytes()
    listed = perfledger("runs", cwd=root / "a" / "deep")
    assert listed.returncode == 2  # the project's ledger does not exist yet
    assert f"note: {older} holds runs of this project" in listed.stderr
    assert f"perfledger runs import {older}" in listed.stderr
    copied = perfledger("runs", "import", older, cwd=root / "a")
    assert copied.returncode == 0, copied.stderr
    assert "2 runs copied" in copied.stdout
    again = perfledger("runs", "import", older, cwd=root)
    assert "0 runs copied" in again.stdout and "2 already there" in again.stdout
    assert older.read_bytes() == before  # never changed
    done = perfledger("runs", "--format", "csv", cwd=root)
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    # the old rows have no workload: the command as typed and the device make one
    assert [(r["label"], r["delta_pct"], r["workload"]) for r in rows] == [
        ("bs64", "0", "train.py · cpu"),
        ("bs128", "50.0", "train.py · cpu"),  # 100 * (30 - 20) / 20
    ]


def test_an_old_ledger_is_read_as_it_is_and_upgraded_on_write(tmp_path: Path) -> None:
    path = old_ledger(tmp_path / "old" / "ledger.db", [("x", 10.0, "python t.py", "cpu")])
    before = path.read_bytes()
    # opened read-only (as runs import opens its source): read, missing column as None
    with ledger.connect(path, read_only=True) as connection:
        (run,) = ledger.list_runs(connection)
    assert (run.label, run.step_median_ms, run.workload) == ("x", 10.0, None)
    assert path.read_bytes() == before
    # written: the workload column is added, the old row kept
    assert ledger.register_profile(make_profile(tmp_path / "new", [8.0]), ledger_path=path) == 2
    with ledger.connect(path, create=False) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == 3
        runs = ledger.list_runs(connection)
    assert [(r.label, r.step_median_ms) for r in runs] == [("x", 10.0), ("new", 8.0)]
    assert runs[0].workload is None and runs[1].workload is not None


def test_a_ledger_that_cannot_be_written_is_read_as_it_is(tmp_path: Path) -> None:
    path = old_ledger(tmp_path / "ro" / "ledger.db", [("x", 10.0, "python t.py", "cpu")])
    path.chmod(0o444)
    path.parent.chmod(0o555)
    # permissions do not hold root back: the file is made immutable instead
    locked = os.geteuid() != 0 or (
        subprocess.run(["chattr", "+i", path, path.parent], capture_output=True).returncode == 0
    )
    try:
        if not locked:
            pytest.skip("running as root where chattr cannot make the ledger unwritable")
        done = perfledger("runs", "--ledger", path, "--format", "csv", cwd=tmp_path)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", path, path.parent], capture_output=True)
        path.parent.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert [r["label"] for r in csv.DictReader(io.StringIO(done.stdout))] == ["x"]
    with sqlite3.connect(path) as connection:  # not upgraded: it could not be
        assert connection.execute("PRAGMA user_version").fetchone()[0] == 1
    connection.close()


def test_delta_between_runs_of_one_workload_only(tmp_path: Path) -> None:
    root = project(tmp_path)
    path = tmp_path / "l.db"
    script = root / "examples" / "train_cnn.py"
    script.parent.mkdir()
    script.write_text("")
    recorded = {"recorder": "perfledger"}
    runs = (
        # the example, launched from the root, then with its fix from its own folder
        ("slow", [300.0] * 3, ["python", "examples/train_cnn.py"], root),
        ("npu", [10.0] * 3, None, None),
        (
            "fixed",
            [200.0] * 3,
            ["/venv/bin/python", "train_cnn.py", "--workers", "4"],
            script.parent,
        ),
    )
    for label, walls, command, folder in runs:
        meta = (
            {**recorded, "command": command, "working_dir": str(folder)}
            if command
            else {"ranks": {"0": {"vendor": "ascend", "device_properties": {"name": "Ascend910B"}}}}
        )
        ledger.register_profile(
            make_profile(tmp_path / label, walls, meta=meta), ledger_path=path, label=label
        )
    done = perfledger("runs", "--ledger", path, "--format", "csv", cwd=tmp_path)
    rows = {r["label"]: r for r in csv.DictReader(io.StringIO(done.stdout))}
    assert rows["fixed"]["delta_pct"] == str(round(100 * (200 - 300) / 300, 4))
    assert rows["fixed"]["baseline_id"] == "1"
    assert rows["npu"]["delta_pct"] == "0"  # its own workload's baseline, not compared
    assert rows["npu"]["baseline_id"] == "2"
    table = perfledger("runs", "--ledger", path, cwd=tmp_path)
    assert "-33.33%" in table.stdout and "train_cnn.py · NVIDIA A100-SXM4-80GB" in table.stdout
    assert "Δ compares each run with the baseline of its own workload" in table.stdout


def with_loss(profile: Path, batch: int, steps: int) -> Path:
    """op_summary.csv of a CPU run: per step, a data loader's one-image convolution, then the
    model's layer and its loss over ``batch`` samples."""
    header = "rank,device,stream,step,kind,name,start_ns,dur_ns,self_ns,shapes,dtypes\n"
    lines = []
    for step in range(1, steps + 1):
        for offset, name, shapes in (
            (0, "aten::conv2d", [[1, 3, 64, 64], [3, 1, 5, 5]]),
            (5, "aten::conv2d", [[batch, 3, 32, 32], [8, 3, 3, 3]]),
            (9, "aten::cross_entropy_loss", [[batch, 10], [batch]]),
        ):
            cell = json.dumps(shapes).replace('"', '""')
            lines.append(f'0,-1,1,{step},cpu_op,{name},{100 * step + offset},1,1,"{cell}",\n')
    (profile / "op_summary.csv").write_text(header + "".join(lines))
    return profile


def test_runs_of_another_batch_size_show_the_change_per_sample(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    for label, walls, batch in (("bs64", [100.0] * 3, 64), ("bs32", [60.0] * 3, 32)):
        profile = with_loss(make_profile(tmp_path / label, walls), batch, len(walls))
        ledger.register_profile(profile, ledger_path=path, label=label)
    done = perfledger("runs", "--ledger", path, "--format", "csv", cwd=tmp_path)
    rows = {r["label"]: r for r in csv.DictReader(io.StringIO(done.stdout))}
    assert (rows["bs64"]["batch_size"], rows["bs32"]["batch_size"]) == ("64", "32")
    assert rows["bs32"]["delta_pct"] == "-40.0"  # 100 * (60 - 100) / 100
    # per sample: 60 / 32 = 1.875 ms against 100 / 64 = 1.5625 ms
    assert rows["bs32"]["delta_per_sample_pct"] == str(round(100 * (1.875 - 1.5625) / 1.5625, 4))
    table = perfledger("runs", "--ledger", path, cwd=tmp_path)
    assert "-40.00% (+20.00% per sample)" in table.stdout


def test_a_script_linked_from_outside_the_project_is_named_by_its_path(tmp_path: Path) -> None:
    root = project(tmp_path)
    elsewhere = tmp_path / "scripts"
    elsewhere.mkdir()
    (elsewhere / "train.py").write_text("")
    (root / "train.py").symlink_to(elsewhere / "train.py")
    meta = {"recorder": "perfledger", "command": ["python", "train.py"], "working_dir": str(root)}
    profile = make_profile(tmp_path / "linked", [100.0] * 3, meta=meta)
    # the file lies outside any repository: the path it was launched by names it (this
    # used to stop the registration with an internal error)
    assert ledger.profile_workload(load_profile(profile)).program == str(root / "train.py")
    ledger.register_profile(profile, ledger_path=tmp_path / "l.db", label="linked")
