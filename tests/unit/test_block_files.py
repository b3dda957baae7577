"""Blocks handed from the import's workers to the main process through files."""

from __future__ import annotations

import os
import signal
from collections import namedtuple
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from perfledger.sources import block_files
from perfledger.sources.block_files import BlockFile, loaded, spill_folder, to_file

Pair = namedtuple("Pair", "numbers texts names")


def _value() -> Pair:
    big = np.arange(200_000, dtype=np.int64)  # its own map (1.6 MB)
    texts = pa.array([f"kernel {i}" for i in range(50_000)] + [None])
    names = pa.array(["a", "b", "a", None]).dictionary_encode()  # small buffers, shared map
    return Pair(big, texts, names)


def test_a_block_comes_back_whole_from_its_file_which_is_gone(tmp_path: Path) -> None:
    value = _value()
    spilled = to_file(value, str(tmp_path))
    assert isinstance(spilled, BlockFile)
    assert os.path.getsize(spilled.path) >= value.numbers.nbytes + value.texts.nbytes
    back = loaded(spilled)
    assert list(tmp_path.iterdir()) == []  # unlinked once mapped
    np.testing.assert_array_equal(back.numbers, value.numbers)
    assert back.texts.equals(value.texts) and back.names.equals(value.names)
    back.numbers[0] = -1  # a private map: the arrays may be written, the file is not
    assert back.numbers[0] == -1 and value.numbers[0] == 0


def test_where_no_file_can_be_written_the_block_goes_as_it_is(tmp_path: Path) -> None:
    value = _value()
    assert to_file(value, str(tmp_path / "missing")) is value
    assert loaded(value) is value


def test_the_folder_goes_with_what_is_left_in_it_and_needs_room() -> None:
    with spill_folder(1) as folder:
        assert folder is not None and os.path.isdir(folder)
        left = to_file(_value(), folder)  # never taken back
        assert isinstance(left, BlockFile) and os.path.exists(left.path)
    assert not os.path.exists(folder)
    free = block_files.shutil.disk_usage(block_files.tempfile.gettempdir()).free
    with spill_folder(free * 2) as folder:
        assert folder is None


@pytest.mark.usefixtures("ctrl_c_raises")
def test_an_interrupt_as_the_folder_is_made_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = block_files.tempfile.mkdtemp

    def made_then_interrupted(**options: str) -> str:
        folder = made(**options)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the folder is made, before its use
        return folder

    monkeypatch.setattr(block_files.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(block_files.tempfile, "mkdtemp", made_then_interrupted)
    with pytest.raises(KeyboardInterrupt), spill_folder(1):
        pytest.fail("the block is not entered")
    assert list(tmp_path.iterdir()) == []
