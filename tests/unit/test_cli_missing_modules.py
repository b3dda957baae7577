"""The command marks the modules Arrow looks up on every call as missing, where they are."""

from __future__ import annotations

import importlib
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
