"""What a damaged input may do: import (and be analysed), or be refused with one line naming a
file. Anything else — another exception, a multi-line message, a warning or an "Exception
ignored" printed by a library — fails the test.

The budget of examples comes from the conftest: a quick one in the default run, a long one
(at least 1,000 cases per input family) when the run selects ``-m fuzz``. Each run ends with a
tally per family (the conftest prints it); ``FUZZ_SURVEY=path`` records failures and goes on.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.compute as pc
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st

from perfledger.analysis.profile import analyze_rank
from perfledger.errors import PerfledgerError
from perfledger.model import schema
from perfledger.model.trace import Trace
from perfledger.run.tasks import ASCEND, RankTask, plan_tasks
from perfledger.sources.ascend import load_ascend
from perfledger.sources.kineto import load_kineto
from tests.fuzz.mutate import damage
from tests.fuzz.seeds import Seed

LONG = False  # set by tests/fuzz/conftest.py when the run selects -m fuzz
LONG_EXAMPLES = 1000  # the long run's cases per family
# FUZZ_EXAMPLES=N: N cases for every test of the long run instead (a shorter or longer run)
EXAMPLES = int(os.environ["FUZZ_EXAMPLES"]) if os.environ.get("FUZZ_EXAMPLES") else None
PROFILED = "profile"
REFUSED = "refused"


def budget(quick: int, long: int = LONG_EXAMPLES) -> settings:
    """Hypothesis settings for a fuzz test: ``quick`` examples by default, ``long`` in the
    long run."""
    return settings(
        max_examples=(EXAMPLES or long) if LONG else quick,
        deadline=None,
        # a damaged input that fails is reported as found: shrinking a case that copies and
        # imports a folder takes minutes, and the mutations drawn already say what was done
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        derandomize=not LONG,  # the default run is the same every time
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


@dataclass
class Tally:
    """Outcomes of one family's cases."""

    outcomes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    refusals: Counter[str] = field(default_factory=Counter)


TALLIES: dict[str, Tally] = defaultdict(Tally)


def _record(family: str, outcome: str, seconds: float, message: str | None = None) -> None:
    tally = TALLIES[family]
    tally.outcomes[outcome] += 1
    tally.seconds += seconds
    if message is not None:
        # the kind of refusal, without the file: "not valid JSON", "missing required columns"
        kind = re.sub(r"\(.*", "", message.split(": ", 1)[-1])
        tally.refusals[re.sub(r"\d[\d,]*", "N", kind).strip()[:70]] += 1


@contextlib.contextmanager
def silent_libraries() -> Iterator[SimpleNamespace]:
    """Collect what libraries would print: warnings, unraisable exceptions, Python-level
    output on stdout and stderr."""
    caught = SimpleNamespace(warnings=[], unraisable=[], stderr=io.StringIO(), stdout=io.StringIO())
    hook = sys.unraisablehook

    def unraisable(info: Any) -> None:
        caught.unraisable.append(f"{info.exc_type.__name__}: {info.exc_value} in {info.object}")

    sys.unraisablehook = unraisable
    try:
        with (
            warnings.catch_warnings(record=True) as seen,
            contextlib.redirect_stderr(caught.stderr),
            contextlib.redirect_stdout(caught.stdout),
        ):
            warnings.simplefilter("always")
            yield caught
            gc.collect()  # finalisers that fail say so now, inside the check
            caught.warnings = [f"{w.category.__name__}: {w.message}" for w in seen]
    finally:
        sys.unraisablehook = hook


def assert_silent(caught: SimpleNamespace) -> None:
    assert not caught.warnings, caught.warnings
    assert not caught.unraisable, caught.unraisable
    assert not caught.stderr.getvalue(), caught.stderr.getvalue()
    assert not caught.stdout.getvalue(), caught.stdout.getvalue()


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def names_a_file(message: str, root: Path) -> bool:
    """Whether ``message`` names the input folder or one of the files in it."""
    return str(root) in message or any(p.name in message for p in files_under(root))


def assert_one_line_naming_a_file(error: PerfledgerError, root: Path) -> str:
    message = str(error)
    assert message.strip(), "empty error message"
    assert "\n" not in message and "\r" not in message, f"multi-line message: {message!r}"
    assert names_a_file(message, root), f"the message names no file: {message!r}"
    return message


# A note in a loss report: the file it is about, then what was lost.
_NOTE_SEPARATOR = "; "


def assert_loss_notes(loss: str | None, root: Path) -> None:
    """One note per problem, each starting with the file it is about (and only that file)."""
    if loss is None:
        return
    assert loss.strip() and "\n" not in loss and "\r" not in loss, repr(loss)
    paths = files_under(root)
    for item in loss.split(_NOTE_SEPARATOR):
        about, colon, what = item.partition(": ")
        assert colon and about, f"a loss note that names no file: {item!r} in {loss!r}"
        assert any(about in (str(p), p.name) for p in paths), (
            f"a loss note not led by the file it is about: {item!r} in {loss!r}"
        )
        again = what.partition(": ")[0]
        assert not any(again in (str(p), p.name) for p in paths), (
            f"a loss note naming two files for one problem: {item!r}"
        )


def assert_trace(trace: Trace, root: Path) -> None:
    events = trace.events
    assert events.schema == schema.EVENTS_SCHEMA
    if events.num_rows:
        assert (pc.min(events["dur_ns"]).as_py() or 0) >= 0
    assert_loss_notes(trace.loss, root)
    for check in trace.quality:
        assert "\n" not in check.message, check.message


def _import_rank(task: RankTask) -> Trace:
    """One rank as ``analyze`` imports it (run.tasks): the importer of its format."""
    if task.fmt == ASCEND:
        (trace,) = load_ascend(task.path)
        return trace
    return load_kineto(task.path)


def _rank_refusal(task: RankTask, root: Path) -> str | None:
    """None when the rank is read and analysed, else its one-line refusal."""
    try:
        trace = _import_rank(task)
        assert_trace(trace, root)
        analysis = analyze_rank(trace)
    except PerfledgerError as error:
        return assert_one_line_naming_a_file(error, root)
    for check in analysis.quality:
        assert "\n" not in check.message, check.message
    return None


def check_import(family: str, root: Path, inputs: Sequence[Path]) -> str:
    """Import ``inputs`` (in ``root``) as ``analyze`` does and analyse every rank; the outcome,
    after asserting it is one of the two allowed: some rank read (a rank that cannot be read
    is left out, in one line), or the input refused in one line naming a file."""
    started = time.perf_counter()
    messages: list[str] = []
    ranks = 0
    with silent_libraries() as caught:
        try:
            tasks = plan_tasks(inputs, root / "work")
        except PerfledgerError as error:
            messages.append(assert_one_line_naming_a_file(error, root))
            tasks = []
        for task in tasks:
            message = _rank_refusal(task, root)
            if message is None:
                ranks += 1
            else:
                messages.append(message)
    assert_silent(caught)
    outcome = PROFILED if ranks else REFUSED
    _record(family, outcome, time.perf_counter() - started, None if ranks else messages[0])
    return outcome


def check_profile(family: str, root: Path, inputs: Sequence[Path]) -> str:
    """The whole of ``analyze``: the profile directory is written, or the input refused."""
    from rich.console import Console

    from perfledger.run.execution import Execution
    from perfledger.run.pipeline import build_profile

    started = time.perf_counter()
    message = None
    with tempfile.TemporaryDirectory(prefix="fuzz-profile-") as out:
        with silent_libraries() as caught:
            try:
                result = build_profile(
                    inputs,
                    Path(out) / "profile",
                    console=Console(file=io.StringIO(), width=100),
                    execution=Execution(workers=0),
                )
                assert (result.path / "summary.json").is_file()
                outcome = PROFILED
            except PerfledgerError as error:
                message = assert_one_line_naming_a_file(error, root)
                outcome = REFUSED
        assert_silent(caught)
    _record(family, outcome, time.perf_counter() - started, message)
    return outcome


@contextlib.contextmanager
def copy_of(seed: Path) -> Iterator[Path]:
    """A fresh copy of the seed folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as folder:
        root = Path(folder) / "input"
        shutil.copytree(seed, root)
        yield root


def summary_lines() -> list[str]:
    """The tally of this run, one line per family (for the terminal summary)."""
    lines = []
    for family, tally in sorted(TALLIES.items()):
        cases = sum(tally.outcomes.values())
        lines.append(
            f"{family:<16} {cases:>6} cases  {tally.outcomes[PROFILED]:>6} profiles  "
            f"{tally.outcomes[REFUSED]:>6} refused  {tally.seconds:8.1f} s"
        )
        lines.extend(
            f"{'':<16}   refused: {count:>5} x {kind}"
            for kind, count in tally.refusals.most_common(8)
        )
    return lines


def fuzz_case(
    family: str,
    seeds: Sequence[Seed],
    data: st.DataObject,
    check: Callable[[str, Path, Sequence[Path]], str] = check_import,
) -> str:
    """One case: a seed of ``family`` copied, damaged by up to three mutations, checked."""
    seed = data.draw(st.sampled_from(list(seeds)), label="seed")
    with copy_of(seed.folder) as root:
        done = f"{seed.name}: {'; '.join(damage(data, files_under(root)))}"
        note(done)
        if SURVEY is None:
            return check(family, root, seed.paths(root))
        try:
            return check(family, root, seed.paths(root))
        except Exception as error:  # noqa: BLE001 - the survey records every failure
            _survey_record(family, done, error)
            return "failed"


# FUZZ_SURVEY=path: record failures in that JSON-lines file and go on, instead of stopping at
# the first (to see every kind of failure of a long run at once).
SURVEY = os.environ.get("FUZZ_SURVEY")


def _survey_record(family: str, done: str, error: Exception) -> None:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/perfledger/" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "tests"
    record = {
        "family": family,
        "mutations": done,
        "error": type(error).__name__,
        "message": str(error).splitlines()[0][:300] if str(error) else "",
        "where": where,
    }
    with open(str(SURVEY), "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record) + "\n")
