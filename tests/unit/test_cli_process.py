"""The command's process: modules Arrow looks up on every call marked missing, imports frozen."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from perfledger import __main__ as command


def test_a_missing_module_fails_at_once_and_an_installed_one_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = "perfledger_test_module_that_is_not_installed"
    monkeypatch.setattr(command, "_LOOKED_UP_ON_EACH_CALL", (missing, "json"))
    monkeypatch.delitem(sys.modules, missing, raising=False)
    json_before = sys.modules.get("json")
    command._remember_missing_modules()
    try:
        assert sys.modules[missing] is None
        with pytest.raises(ImportError):
            importlib.import_module(missing)
        assert sys.modules.get("json") is json_before  # found: not marked
        assert importlib.import_module("json").dumps([1]) == "[1]"
    finally:
        sys.modules.pop(missing, None)


def test_a_module_already_imported_is_not_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command, "_LOOKED_UP_ON_EACH_CALL", ("json",))
    module = importlib.import_module("json")
    command._remember_missing_modules()
    assert sys.modules["json"] is module


def test_the_imported_objects_are_frozen_out_of_the_collector() -> None:
    probe = (
        "import gc, io, contextlib\n"
        "from perfledger.__main__ import main\n"
        "before = gc.get_freeze_count()\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['runs', '--help'])\n"
        "    except SystemExit as end:\n"
        "        code = end.code\n"
        "print(code, before, gc.get_freeze_count())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    code, before, after = map(int, result.stdout.split())
    # --help exits 0 through argparse, after the subcommands' modules were imported and frozen
    assert (code, before) == (0, 0) and after > 10_000
