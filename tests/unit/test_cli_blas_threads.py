"""One OpenBLAS thread for perfledger's own processes, never for the program ``record`` runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = (
    "import os, sys\n"
    "if sys.argv[1] == 'numpy-first':\n"
    "    import numpy\n"
    "from perfledger.__main__ import main\n"
    "try:\n"
    "    main(sys.argv[2:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "print('BLAS', os.environ.get('OPENBLAS_NUM_THREADS'))\n"
)


def _blas_threads(*argv: str, env: dict[str, str] | None = None, first: str = "-") -> str:
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    environment.update(env or {})
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, first, *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=environment,
    )
    return [line for line in result.stdout.splitlines() if line.startswith("BLAS ")][-1][5:]


@pytest.mark.parametrize("command", ["analyze", "query", "timeline", "whatif", "diff", "runs"])
def test_analysing_commands_take_one_blas_thread(command: str) -> None:
    assert _blas_threads(command, "--help") == "1"


def test_record_leaves_the_programs_environment_alone() -> None:
    assert _blas_threads("record", "--help") == "None"


def test_the_users_choice_is_kept() -> None:
    assert _blas_threads("analyze", "--help", env={"OPENBLAS_NUM_THREADS": "3"}) == "3"


def test_nothing_is_set_once_numpy_is_loaded() -> None:
    # main() inside a program that loaded numpy: too late to matter, and not its to change
    assert _blas_threads("analyze", "--help", first="numpy-first") == "None"
