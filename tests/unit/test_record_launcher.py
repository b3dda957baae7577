"""The launcher's pure parts: the child's environment, exit codes, options, run metadata."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from perfledger.errors import PerfledgerError
from perfledger.record.bootstrap import BOOTSTRAP_DIR
from perfledger.record.inprocess import ENV_OPTIONS, ENV_STAGING, DriverOptions
from perfledger.record.launcher import RecordOptions, child_environment, exit_code_of, record
from perfledger.record.metadata import environment_summary, program_directory


def test_the_bootstrap_comes_first_and_the_programs_path_is_kept(tmp_path: Path) -> None:
    options = DriverOptions(skip=3, steps=7, level="light")
    env = child_environment({"PYTHONPATH": "/opt/lib", "HOME": "/root"}, tmp_path, options)
    assert env["PYTHONPATH"] == f"{BOOTSTRAP_DIR}{os.pathsep}/opt/lib"
    assert (BOOTSTRAP_DIR / "sitecustomize.py").is_file()
    assert env[ENV_STAGING] == str(tmp_path)
    assert DriverOptions.from_json(env[ENV_OPTIONS]) == options
    assert env["HOME"] == "/root"
    assert child_environment({}, tmp_path, options)["PYTHONPATH"] == str(BOOTSTRAP_DIR)


def test_exit_codes_follow_the_shell_convention() -> None:
    assert exit_code_of(0) == 0
    assert exit_code_of(3) == 3
    assert exit_code_of(-signal.SIGTERM) == 143
    assert exit_code_of(-signal.SIGINT) == 130


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (RecordOptions(steps=-1), "--steps"),
        (RecordOptions(skip=-2), "--skip"),
        (RecordOptions(level="max"), "level"),
        (RecordOptions(host_interval_s=0), "--host-interval"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    tmp_path: Path, options: RecordOptions, message: str
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(PerfledgerError, match=message) as caught:
        record(["touch", str(marker)], options, cwd=tmp_path)
    assert caught.value.exit_code == 2
    assert not marker.exists()
    assert list(tmp_path.iterdir()) == []


def test_an_existing_profile_is_refused_before_the_program_runs(tmp_path: Path) -> None:
    (tmp_path / "prof").mkdir()
    marker = tmp_path / "ran"
    with pytest.raises(PerfledgerError, match="--force"):
        record(["touch", str(marker)], RecordOptions(output=Path("prof")), cwd=tmp_path)
    assert not marker.exists()


def test_force_never_replaces_a_folder_that_is_not_a_profile(tmp_path: Path) -> None:
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "notes.txt").write_text("the user's")
    marker = tmp_path / "ran"
    options = RecordOptions(output=Path("prof"), force=True)
    with pytest.raises(PerfledgerError, match="not a perfledger profile"):
        record(["touch", str(marker)], options, cwd=tmp_path)
    assert not marker.exists()
    assert (tmp_path / "prof" / "notes.txt").read_text() == "the user's"


def test_an_interrupt_as_the_staging_folder_is_claimed_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfledger.record import launcher, leftovers

    def claimed_then_interrupted(staging: Path) -> None:
        leftovers.claim(staging)
        raise KeyboardInterrupt  # Ctrl-C as the owner file is written

    monkeypatch.setattr(launcher, "claim", claimed_then_interrupted)
    marker = tmp_path / "ran"
    with pytest.raises(KeyboardInterrupt):
        record(["touch", str(marker)], RecordOptions(output=Path("prof")), cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_as_the_staging_folder_is_made_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = Path.mkdir

    def made_then_interrupted(self: Path, *args: Any, **kwargs: Any) -> None:
        make(self, *args, **kwargs)
        if self.name.startswith(".prof"):
            raise KeyboardInterrupt  # Ctrl-C answered as the mkdir returns

    monkeypatch.setattr(Path, "mkdir", made_then_interrupted)
    marker = tmp_path / "ran"
    with pytest.raises(KeyboardInterrupt):
        record(["touch", str(marker)], RecordOptions(output=Path("prof")), cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_environment_summary_keeps_tuning_variables_and_drops_secrets() -> None:
    summary = environment_summary(
        {
            "OMP_NUM_THREADS": "4",
            "NCCL_SOCKET_IFNAME": "eth0",
            "TORCH_HOME": "/cache",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "NCCL_API_KEY": "secret",
            "TORCH_HUB_TOKEN": "secret",
            "HF_TOKEN": "secret",
            "AWS_SECRET_ACCESS_KEY": "secret",
            "HOME": "/root",
        }
    )
    assert summary["variables"] == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_SOCKET_IFNAME": "eth0",
        "OMP_NUM_THREADS": "4",
        "TORCH_HOME": "/cache",
    }
    assert "secret" not in json.dumps(summary)
    assert summary["cpu_count"] == os.cpu_count()


def test_the_programs_directory_is_its_scripts(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "train.py").write_text("")
    assert program_directory(["python", "jobs/train.py", "--x"], tmp_path) == tmp_path / "jobs"
    assert program_directory(["python", "-m", "pkg.train"], tmp_path) == tmp_path
    assert program_directory(["torchrun", "jobs/train.py"], tmp_path) == tmp_path / "jobs"
