"""Safe with any folder: what --force may replace, outputs that cannot be written, leftovers of
killed runs, and perfledger's own output never read back as a trace.

Each case is run as a user would, through the command in a child process; the answer is the
exit code, a one-line error, and the files that are (or are not) there afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import perfledger.__main__ as perfledger_main
from perfledger.errors import PerfledgerError
from perfledger.files import STAGING_MARK
from perfledger.profiledir.writer import foreign_entries, staged_directory
from perfledger.sources.names import NAME_LIMIT
from tests.cli import perfledger
from tests.kineto_gen import write_kineto
from tests.odd_traces import clean_run
from tests.paths import data_file

TRACE = "kineto/a100_triton.json.gz"
BIG_TRACE = "kineto/v100_rank1_ddp.json.gz"  # a few seconds of analysis


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("perfledger: error: "), lines
    return lines[0]


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --- --force -------------------------------------------------------------------------------------


def test_force_does_not_replace_a_users_folder(tmp_path: Path) -> None:
    user = tmp_path / "userdir"
    user.mkdir()
    (user / "thesis.tex").write_text("precious")
    error = one_line_error(perfledger("analyze", data_file(TRACE), "-o", user, "--force"))
    assert "not a perfledger profile" in error and str(user) in error
    assert (user / "thesis.tex").read_text() == "precious"
    assert listing(tmp_path) == ["userdir", "userdir/thesis.tex"]


def test_force_does_not_take_a_foreign_meta_json_for_a_profile(tmp_path: Path) -> None:
    other = tmp_path / "results"
    other.mkdir()
    (other / "meta.json").write_text(json.dumps({"format_version": 1}))  # another tool's
    (other / "summary.json").write_text("{}")
    one_line_error(perfledger("analyze", data_file(TRACE), "-o", other, "--force"))
    assert listing(other) == ["meta.json", "summary.json"]


def test_force_replaces_a_profile_or_an_empty_folder(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert perfledger("analyze", data_file(TRACE), "-o", empty, "--force").returncode == 0
    assert (empty / "meta.json").is_file()
    again = perfledger("analyze", data_file(TRACE), "-o", empty, "--force")
    assert again.returncode == 0, again.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]  # no staging folder left


def test_force_never_follows_a_link_out_of_the_target(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("keep")
    profile = tmp_path / "prof"
    assert perfledger("analyze", data_file(TRACE), "-o", profile).returncode == 0
    # a link among the sources' copies (raw/ is the one folder whose entries are not checked)
    (profile / "raw" / "link").symlink_to(outside, target_is_directory=True)
    assert perfledger("analyze", data_file(TRACE), "-o", profile, "--force").returncode == 0
    assert (outside / "data.txt").read_text() == "keep"
    assert not (profile / "raw" / "link").exists()
    # a link named as the output is refused, whatever it points at
    link = tmp_path / "linked"
    link.symlink_to(profile, target_is_directory=True)
    error = one_line_error(perfledger("analyze", data_file(TRACE), "-o", link, "--force"))
    assert "symbolic link" in error
    assert (profile / "meta.json").is_file()


def test_force_keeps_a_profile_the_user_put_files_in(tmp_path: Path) -> None:
    profile = tmp_path / "prof"
    assert perfledger("analyze", data_file(TRACE), "-o", profile).returncode == 0
    (profile / "my_notes.md").write_text("mine")
    (profile / "screens").mkdir()
    (profile / "screens" / "a.png").write_bytes(b"png")
    (profile / "tables" / "mine.csv").write_text("a,b")
    before = listing(profile)
    error = one_line_error(perfledger("analyze", data_file(TRACE), "-o", profile, "--force"))
    assert "did not write (my_notes.md, screens, tables/mine.csv)" in error
    assert listing(profile) == before
    # a folder of the user's holding a profile's two documents beside their own files
    copied = tmp_path / "results"
    copied.mkdir()
    for name in ("meta.json", "summary.json"):
        shutil.copy(profile / name, copied / name)
    (copied / "thesis.tex").write_text("mine")
    one_line_error(perfledger("analyze", data_file(TRACE), "-o", copied, "--force"))
    assert (copied / "thesis.tex").read_text() == "mine"


@pytest.mark.parametrize(
    "source",
    ["kineto/sampled_2ranks", "ascend/torch_npu_text/level1", "ascend/torch_npu_db/level0"],
)
def test_force_replaces_every_kind_of_profile_analyze_writes(tmp_path: Path, source: str) -> None:
    # every entry analyze writes is one --force may replace (PROFILE_ENTRIES names them all)
    profile = tmp_path / "prof"
    assert perfledger("analyze", data_file(source), "-o", profile).returncode == 0
    assert foreign_entries(profile) == []
    again = perfledger("analyze", data_file(source), "-o", profile, "--force")
    assert again.returncode == 0, again.stderr


def _fake_profile(folder: Path) -> None:
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"format_version": 1, "tool_version": "0"}))
    (folder / "summary.json").write_text("{}")


@pytest.mark.parametrize("force", [False, True])
def test_a_folder_made_at_the_output_during_the_run_is_never_replaced(
    tmp_path: Path, force: bool
) -> None:
    target = tmp_path / "results"
    with (
        pytest.raises(PerfledgerError, match="no profile written"),
        staged_directory(target, force=force) as staging,
    ):
        (staging / "meta.json").write_text("{}")
        target.mkdir()  # the user, while the run goes on
        (target / "thesis.tex").write_text("mine")
    assert listing(tmp_path) == ["results", "results/thesis.tex"]


def test_another_runs_profile_made_meanwhile_is_replaced_only_with_force(tmp_path: Path) -> None:
    target = tmp_path / "prof"
    with (
        pytest.raises(PerfledgerError, match="already exists"),
        staged_directory(target, force=False) as staging,
    ):
        (staging / "mine").write_text("new")
        _fake_profile(target)  # a second run into the same folder, ended first
    assert listing(tmp_path) == ["prof", "prof/meta.json", "prof/summary.json"]
    with staged_directory(target, force=True) as staging:
        (staging / "mine").write_text("new")
    assert listing(tmp_path) == ["prof", "prof/mine"]
    # an empty folder made meanwhile holds nothing to lose: the profile takes its place
    empty = tmp_path / "empty"
    with staged_directory(empty, force=False) as staging:
        (staging / "mine").write_text("new")
        empty.mkdir()
    assert (empty / "mine").read_text() == "new"


@pytest.mark.usefixtures("ctrl_c_raises")
def test_an_interrupt_while_the_profile_is_replaced_is_answered_once_it_is_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import perfledger.profiledir.writer as writer

    target = tmp_path / "prof"
    _fake_profile(target)
    real_check = writer.is_profile_dir

    def checked_then_interrupted(folder: Path) -> bool:
        # Ctrl-C as the old profile is aside under its leftover's name, the new one not placed
        if folder.name.startswith(".prof.old-"):
            os.kill(os.getpid(), signal.SIGINT)
        return real_check(folder)

    monkeypatch.setattr(writer, "is_profile_dir", checked_then_interrupted)
    with pytest.raises(KeyboardInterrupt), staged_directory(target, force=True) as staging:
        (staging / "mine").write_text("new")
    # not the old profile hidden away and no profile in its place: the new one, whole
    assert listing(tmp_path) == ["prof", "prof/mine"]


def test_a_failed_run_removes_the_folders_it_made_for_the_output(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    out = tmp_path / "new1" / "new2" / "prof"
    one_line_error(perfledger("analyze", bad, "-o", out))
    assert listing(tmp_path) == ["bad.json"]


def test_sigterm_stops_the_run_as_ctrl_c_does(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    command = [sys.executable, "-m", "perfledger", "analyze", data_file(BIG_TRACE), "-o", out]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".prof.partial-*")) and child.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert child.poll() is None, "the run ended before it could be stopped"
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 143, stderr
    assert stderr.strip() == "perfledger: terminated"
    assert listing(tmp_path) == []


def test_an_interrupt_as_the_staging_folder_is_marked_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the signal of the test above lands at any instant; this is its narrowest one: the
    # staging folder made and its mark written, the block not yet entered
    def marked_then_interrupted(folder: Path) -> None:
        (folder / STAGING_MARK).write_text(f"{os.getpid()}\n")
        raise KeyboardInterrupt

    monkeypatch.setattr("perfledger.profiledir.writer.mark_staging", marked_then_interrupted)
    with pytest.raises(KeyboardInterrupt), staged_directory(tmp_path / "new" / "prof", force=False):
        pytest.fail("the block is not entered")
    assert listing(tmp_path) == []


def test_ctrl_c_while_the_commands_load_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(perfledger_main, "build_parser", interrupted)
    assert perfledger_main.main(["analyze", "x"]) == 130
    assert capsys.readouterr().err == "perfledger: interrupted\n"


_SIGNAL_WHILE_LOADING = """
import os, signal, sys, time
import perfledger.__main__ as main

signum, where = getattr(signal, sys.argv[1]), sys.argv[2]
sent = []

def signalled(step):
    def step_with_signal(*args):
        if not sent:
            sent.append(os.kill(os.getpid(), signum))
            lost = False
            try:  # code that loses what is raised inside it (a fork handler, a finalizer)
                time.sleep(0.2)
            except BaseException:
                lost = True
            print("lost" if lost else "held", flush=True)
        return step(*args)
    return step_with_signal

# while the modules load, or while the workers nobody took stop
setattr(main, where, signalled(getattr(main, where)))
sys.exit(main.main(["--help"]))
"""


@pytest.mark.parametrize("where", ["build_parser", "_stop_workers"])
@pytest.mark.parametrize(
    ("signum", "ignored", "code", "said"),
    [
        ("SIGINT", False, 130, "perfledger: interrupted"),
        ("SIGTERM", False, 143, "perfledger: terminated"),
        ("SIGINT", True, 0, ""),  # a run in the background of a shell ignores Ctrl-C
    ],
)
def test_a_signal_while_the_commands_load_or_its_workers_stop_is_answered_after_it(
    signum: str, ignored: bool, code: int, said: str, where: str
) -> None:
    def ignore_ctrl_c() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_WHILE_LOADING, signum, where],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=ignore_ctrl_c if ignored else None,
    )
    assert "held" in done.stdout.splitlines() and "lost" not in done.stdout.splitlines()
    assert done.returncode == code, done.stderr
    assert done.stderr.strip() == said
    if ignored:
        assert "usage: perfledger" in done.stdout  # the command went on


_SIGNAL_IN_A_CALLBACK = """
import os, signal, sys, time, weakref
import perfledger.__main__ as main

signum, hook_replaced = getattr(signal, sys.argv[1]), sys.argv[2] == "replaced"

def command(arguments, argv):
    if hook_replaced:  # as a library may: what is lost is lost silently
        sys.unraisablehook = lambda unraisable: None

    class Lock:
        pass

    def let_go(ref):  # as importlib's module locks are let go: what it raises is lost
        os.kill(os.getpid(), signum)
        time.sleep(0.2)  # the handler runs here, inside the callback

    lock = Lock()
    ref = weakref.ref(lock, let_go)
    del lock
    time.sleep(0.5)  # the command goes on: a lost signal lets it end
    print("finished", flush=True)
    return 0

main._command = command
sys.exit(main.main(["analyze", "x"]))
"""


@pytest.mark.parametrize("hook", ["ours", "replaced"])
@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [("SIGINT", 130, "perfledger: interrupted"), ("SIGTERM", 143, "perfledger: terminated")],
)
def test_a_signal_whose_exception_a_callback_loses_still_stops_the_command(
    signum: str, code: int, said: str, hook: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_IN_A_CALLBACK, signum, hook],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # stopped where it goes on; where another hook took the lost exception, once it ends
    assert ("finished" in done.stdout) == (hook == "replaced")
    assert done.returncode == code, done.stderr
    assert done.stderr.strip() == said


_SIGNAL_IN_A_QUERY = """
import os, signal, sys, threading
import duckdb
import perfledger.__main__ as main

signum = getattr(signal, sys.argv[1])

def command(arguments, argv):
    threading.Timer(0.3, os.kill, (os.getpid(), signum)).start()
    with duckdb.connect() as con:  # a query long enough to be cut short
        con.sql("SELECT count(*) FROM range(10000000000) a WHERE a.range % 7 = 3").fetchall()
    print("finished", flush=True)
    return 0

main._command = command
sys.exit(main.main(["analyze", "x"]))
"""


@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [("SIGINT", 130, "perfledger: interrupted"), ("SIGTERM", 143, "perfledger: terminated")],
)
def test_a_signal_a_library_answers_with_its_own_error_still_reads_as_the_signal(
    signum: str, code: int, said: str
) -> None:
    # DuckDB answers the interrupt raised inside a query with "Query interrupted"
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_IN_A_QUERY, signum],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "finished" not in done.stdout
    assert done.returncode == code, done.stderr
    assert done.stderr.strip() == said


# --- outputs that cannot be written --------------------------------------------------------------


@pytest.mark.parametrize("output", [".", ".."])
def test_current_folder_or_its_parent_is_refused(tmp_path: Path, output: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    trace = shutil.copy(data_file(TRACE), work / "trace.json.gz")
    error = one_line_error(perfledger("analyze", trace, "-o", output, "--force", cwd=work))
    assert f"-o {output}" in error
    assert listing(tmp_path) == ["work", "work/trace.json.gz"]


def test_output_below_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    error = one_line_error(perfledger("analyze", data_file(TRACE), "-o", tmp_path / "afile/sub"))
    assert "is a file" in error
    assert listing(tmp_path) == ["afile"]


def _confined(script: str, tmp_path: Path, mount: str) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) in a private mount namespace where ``tmp_path/mnt`` is a tmpfs mounted
    with ``mount`` options, so that a read-only or full file system is real."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to mount a private file system")
    (tmp_path / "mnt").mkdir()
    command = f"mount -t tmpfs -o {mount} none {tmp_path / 'mnt'} && {script}"
    flags = "-m" if os.geteuid() == 0 else "-rm"
    return subprocess.run(
        ["unshare", flags, "sh", "-c", command],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "160"},
        timeout=300,
    )


def _analyze_into(output: Path) -> str:
    return f"{sys.executable} -m perfledger analyze {data_file(TRACE)} -o {output}"


@pytest.mark.parametrize(
    ("mount", "reason"),
    [("ro", "Read-only file system"), ("size=128k", "No space left on device")],
)
def test_read_only_or_full_file_system_is_one_line_and_leaves_nothing(
    tmp_path: Path, mount: str, reason: str
) -> None:
    mnt = tmp_path / "mnt"
    result = _confined(f"{_analyze_into(mnt / 'prof')}; echo rc=$?; ls -A {mnt}", tmp_path, mount)
    assert "rc=2" in result.stdout, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfledger: error: "), result.stderr
    assert "cannot write the profile" in lines[0] and reason in lines[0]
    assert result.stdout.strip().splitlines()[-1] == "rc=2", result.stdout  # mnt left empty


# --- leftovers of killed runs --------------------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_staging_folders_of_dead_runs_are_removed_by_the_next_run(tmp_path: Path) -> None:
    dead = _dead_pid()
    stale = tmp_path / f".prof.partial-{dead}"
    (stale / "raw").mkdir(parents=True)
    (stale / "raw" / "copy.json.gz").write_bytes(b"x" * 1000)
    retired = tmp_path / f".old.old-{dead}"
    retired.mkdir()
    for left in (stale, retired):  # the mark a run puts in the folders it makes
        (left / STAGING_MARK).write_text(f"{dead}\n")
    live = tmp_path / f".other.partial-{os.getpid()}"  # a run still going: left alone
    live.mkdir()
    (live / STAGING_MARK).write_text(f"{os.getpid()}\n")
    lookalike = tmp_path / f".notes.partial-{dead}.txt"  # not our name: left alone
    lookalike.write_text("mine")
    # the user's folders named as ours, without the mark (or another run's mark): left alone
    backup = tmp_path / ".emacs.d.old-2023"
    (backup / "init.el").parent.mkdir()
    (backup / "init.el").write_text("(setq mine t)")
    draft = tmp_path / f".thesis.partial-{dead}"
    draft.mkdir()
    (draft / STAGING_MARK).write_text("1\n")
    (draft / "ch1.tex").write_text("mine")
    assert perfledger("analyze", data_file(TRACE), "-o", tmp_path / "prof2").returncode == 0
    assert not stale.exists() and not retired.exists()
    assert live.is_dir() and lookalike.read_text() == "mine"
    assert (backup / "init.el").read_text() == "(setq mine t)"
    assert (draft / "ch1.tex").read_text() == "mine"
    assert not (tmp_path / "prof2" / STAGING_MARK).exists()  # not left in the profile


def test_a_staging_folder_is_never_read_as_input(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(data_file(TRACE), run / "rank0.json.gz")
    stale = run / f".prof.partial-{_dead_pid()}"
    stale.mkdir()
    shutil.copy(data_file("kineto/cpu_only_rank34.json.gz"), stale / "rank1.json.gz")
    result = perfledger("analyze", run, "-o", tmp_path / "prof")
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "prof" / "meta.json").read_text())
    assert [Path(f).name for f in meta["source"]["files"]] == ["rank0.json.gz"]


# --- perfledger's own output is not input --------------------------------------------------------


@pytest.mark.parametrize("source", ["kineto/a100_triton.json.gz", "ascend/torch_npu_text/level0"])
def test_own_output_inside_the_input_folder_is_not_read_again(tmp_path: Path, source: str) -> None:
    run = tmp_path / "run"
    original = data_file(source)
    if original.is_dir():
        shutil.copytree(original, run)
    else:
        run.mkdir()
        shutil.copy(original, run / original.name)
    first = perfledger("analyze", run, "-o", run / "prof")
    assert first.returncode == 0, first.stderr
    second = perfledger("analyze", run, "-o", tmp_path / "again")
    assert second.returncode == 0, second.stderr
    before = json.loads((run / "prof" / "summary.json").read_text())
    after = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert after["step_count"] == before["step_count"]
    assert after["ranks"] == before["ranks"]
    meta = json.loads((tmp_path / "again" / "meta.json").read_text())
    assert not [f for f in meta["source"]["files"] if "/prof/" in f]


def test_a_profile_named_as_input_is_a_clear_error(tmp_path: Path) -> None:
    profile = tmp_path / "prof"
    assert perfledger("analyze", data_file(TRACE), "-o", profile).returncode == 0
    error = one_line_error(perfledger("analyze", profile, "-o", tmp_path / "again"))
    assert "perfledger's own output" in error


# --- names that would drive the terminal ---------------------------------------------------------

HOSTILE = [
    "aten::clear\x1b[2J\x1b[H",  # clears the screen
    "\x1b]8;;http://example.invalid\x1b\\link\x1b]8;;\x1b\\",  # an OSC-8 link
    "hidden\rshown",  # a carriage return hides what came before
    "[bold]markup[/bold] [/oops]",  # rich markup, one tag unbalanced
    "abc\u202edcba",  # a right-to-left override
]


def test_control_characters_in_names_are_shown_escaped(tmp_path: Path) -> None:
    events = clean_run()
    kernels = [e for e in events if e.get("cat") == "kernel"]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    for index, event in enumerate(kernels + ops):
        event["name"] = HOSTILE[index % len(HOSTILE)]
    trace = write_kineto(tmp_path / "hostile.json", events)
    result = perfledger("analyze", trace, "-o", tmp_path / "prof")
    assert result.returncode == 0, result.stderr
    query = perfledger("query", tmp_path / "prof", "SELECT DISTINCT name FROM events ORDER BY name")
    assert query.returncode == 0, query.stderr
    for output in (result.stdout, result.stderr, query.stdout, query.stderr):
        assert not any(c in output for c in "\x1b\r\u202e"), output
    assert "\\x1b[2J" in result.stdout  # the top operators table
    assert "\\x1b[2J" in query.stdout and "[/oops]" in query.stdout and "\\u202e" in query.stdout
    # the stored names are the trace's own, unchanged
    stored = perfledger(
        "query", tmp_path / "prof", "SELECT DISTINCT name FROM events", "--format", "json"
    )
    names = {row["name"] for row in json.loads(stored.stdout)}
    assert set(HOSTILE) <= names


def test_an_error_naming_a_hostile_file_stays_one_escaped_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad\x1b[2J\nname.json"
    bad.write_text("{ not json")
    error = one_line_error(perfledger("analyze", bad, "-o", tmp_path / "prof"))
    assert "\x1b" not in error and "\\x1b[2J" in error and "name.json" in error


# --- query limits --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    profile = tmp_path_factory.mktemp("query") / "prof"
    assert perfledger("analyze", data_file(TRACE), "-o", profile).returncode == 0
    return profile


def test_query_that_runs_too_long_is_stopped_and_says_so(small_profile: Path) -> None:
    result = perfledger(
        "query", small_profile, "SELECT count(*) FROM range(10000000000000)", "--timeout", "2"
    )
    error = one_line_error(result)
    assert "time limit" in error and "2 s" in error and "--timeout" in error


def test_query_that_needs_too_much_memory_is_stopped_and_says_so(small_profile: Path) -> None:
    sql = "SELECT string_agg(repeat('x', 100), ',') FROM range(100000000)"
    result = perfledger("query", small_profile, sql, "--memory-limit", "100MB")
    error = one_line_error(result)
    assert "memory limit" in error and "100MB" in error and "--memory-limit" in error


def test_query_prints_at_most_max_rows_and_says_there_are_more(small_profile: Path) -> None:
    sql = "SELECT range AS n FROM range(1000000)"
    result = perfledger("query", small_profile, sql, "--format", "csv", "--max-rows", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["n", "0", "1", "2", "3", "4"]
    assert "first 5 rows" in result.stderr and "--max-rows" in result.stderr
    every = perfledger("query", small_profile, "SELECT * FROM range(3)", "--max-rows", "0")
    assert every.returncode == 0 and every.stderr == ""


# --- name bombs ----------------------------------------------------------------------------------


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_huge_name_is_cut_and_the_output_stays_small(tmp_path: Path) -> None:
    events = clean_run()
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels[0]["name"] = "k" * (16 << 20)  # 16 MiB, every copy of it in the output would show
    for index, kernel in enumerate(kernels[1:4]):  # long names that share their beginning
        kernel["name"] = "t" * 20_000 + str(index)
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    ops[0]["args"]["blob"] = "x" * 200_000
    thread = {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "ts": 0, "args": {}}
    thread["args"]["name"] = "T" * 1_000_000
    events.append(thread)
    trace = write_kineto(tmp_path / "bomb.json.gz", events)
    profile = tmp_path / "prof"
    result = perfledger("analyze", trace, "-o", profile)
    assert result.returncode == 0, result.stderr
    assert _size(profile) - _size(profile / "raw") < 4 << 20
    stored = perfledger(
        "query",
        profile,
        "SELECT DISTINCT name FROM events WHERE length(name) > 1000",
        "--format",
        "json",
    )
    names = [row["name"] for row in json.loads(stored.stdout)]
    assert len(names) == 4  # the three that share their beginning are still told apart
    for name in names:
        assert name[NAME_LIMIT:].startswith("…[cut: ") and len(name) < NAME_LIMIT + 60
    assert any("16,777,216 chars" in n for n in names)
    checks = json.loads((profile / "summary.json").read_text())["quality"]["checks"]
    (long_names,) = [c for c in checks if c["id"] == "long_names"]
    assert long_names["repaired"] and long_names["count"] == 6
    assert "5 names over 16,384 characters cut" in long_names["message"]
    meta = json.loads((profile / "meta.json").read_text())
    (thread_name,) = meta["ranks"]["0"]["thread_names"].values()
    assert thread_name.startswith("T" * NAME_LIMIT + "…[cut: 1,000,000 chars")
    cut_args = perfledger(
        "query",
        profile,
        "SELECT args FROM events WHERE args LIKE '%perfledger_cut_args_bytes%'",
        "--format",
        "json",
    )
    (row,) = json.loads(cut_args.stdout)
    assert json.loads(row["args"])["perfledger_cut_args_bytes"] > 200_000
