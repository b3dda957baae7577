"""Golden files: every CSV, summary.json, cluster_summary.json and diff.json of the test traces.

Each trace (or run folder) under tests/data is analysed by the command as a user runs it, and the
written files are compared with tests/golden/profiles/<case>/ byte for byte, after the few
fields that name the machine or the moment are set aside (the tool version, absolute paths).
A change of output is either a bug or deliberate: ``pytest --update-golden`` rewrites the files,
and the change shows in review.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any, Final

import pytest

from tests.cli import perfledger
from tests.paths import DATA, PROJECT_ROOT

GOLDEN: Final = PROJECT_ROOT / "tests" / "golden" / "profiles"

# case name -> input under tests/data (one trace, or a folder of ranks)
CASES: Final = {
    "a100_alexnet": "kineto/a100_alexnet.json.gz",
    "a100_rank3_control": "kineto/a100_rank3_control.json.gz",
    "a100_triton": "kineto/a100_triton.json.gz",
    "cpu_only_rank34": "kineto/cpu_only_rank34.json.gz",
    "mi250_rocm_minitoy": "kineto/mi250_rocm_minitoy.json.gz",
    "mtia_inference": "kineto/mtia_inference.json.gz",
    "old_pt18_inference_rank1": "kineto/old_pt18_inference_rank1.json.gz",
    "resnet50_gpu_2021": "kineto/resnet50_gpu_2021.json.gz",
    "sampled_2ranks": "kineto/sampled_2ranks",
    "v100_ns_timestamps": "kineto/v100_ns_timestamps.json.gz",
    "v100_rank1_ddp": "kineto/v100_rank1_ddp.json.gz",
    "v100_rank1_test": "kineto/v100_rank1_test.json.gz",
    "npu_text_level0": "ascend/torch_npu_text/level0",
    "npu_text_level1": "ascend/torch_npu_text/level1",
    "npu_text_level2": "ascend/torch_npu_text/level2",
    "npu_db_level0": "ascend/torch_npu_db/level0",
    "npu_db_level1": "ascend/torch_npu_db/level1",
    "npu_db_level2": "ascend/torch_npu_db/level2",
    "msprof_cli": "ascend/msprof_cli",
}

# diff case -> (base case, current case)
DIFFS: Final = {
    "ddp_vs_test": ("v100_rank1_ddp", "v100_rank1_test"),
    "alexnet_vs_triton": ("a100_alexnet", "a100_triton"),
    "npu_level1_vs_level2": ("npu_text_level1", "npu_text_level2"),
    "npu_text_vs_db": ("npu_text_level1", "npu_db_level1"),
}

PINNED_SUFFIXES: Final = (".csv", ".json")
UNPINNED: Final = frozenset({"meta.json"})  # timings, the command line, the working folder
# Files larger than this are kept gzip-compressed in the golden folder.
COMPRESS_ABOVE: Final = 64 * 1024


def _normalise_json(document: Any, data: str) -> Any:
    """The document with what names the machine or the moment set aside."""
    if isinstance(document, dict):
        return {
            key: "<tool_version>" if key == "tool_version" else _normalise_json(value, data)
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [_normalise_json(item, data) for item in document]
    if isinstance(document, str) and data in document:
        return document.replace(data, "<data>")
    return document


def pinned_text(path: Path) -> str:
    """A written file's text as the golden file holds it."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        document = _normalise_json(json.loads(text), str(DATA))
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return text


def pinned_files(directory: Path) -> dict[str, str]:
    """The pinned files of a written folder by name (top level only)."""
    return {
        path.name: pinned_text(path)
        for path in sorted(directory.iterdir())
        if path.is_file() and path.suffix in PINNED_SUFFIXES and path.name not in UNPINNED
    }


def _golden_name(name: str, text: str) -> str:
    return name + ".gz" if len(text.encode()) > COMPRESS_ABOVE else name


def read_golden(folder: Path) -> dict[str, str]:
    files = {}
    for path in sorted(folder.iterdir()):
        if path.name.endswith(".gz"):
            files[path.name[:-3]] = gzip.decompress(path.read_bytes()).decode("utf-8")
        else:
            files[path.name] = path.read_text(encoding="utf-8")
    return files


def write_golden(folder: Path, files: dict[str, str]) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, text in files.items():
        stored = folder / _golden_name(name, text)
        if stored.suffix == ".gz":
            stored.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
        else:
            stored.write_text(text, encoding="utf-8")


def check_against_golden(case: str, files: dict[str, str], request: pytest.FixtureRequest) -> None:
    folder = GOLDEN / case
    if request.config.getoption("--update-golden"):
        write_golden(folder, files)
        return
    assert folder.is_dir(), f"{folder} missing: run pytest with --update-golden"
    golden = read_golden(folder)
    assert sorted(files) == sorted(golden), f"{case}: the set of written files changed"
    for name, text in files.items():
        if text != golden[name]:
            pairs = zip(golden[name].splitlines(), text.splitlines(), strict=False)
            changed = [
                f"line {i + 1}:\n  golden:  {a[:300]}\n  written: {b[:300]}"
                for i, (a, b) in enumerate(pairs)
                if a != b
            ]
            detail = changed[0] if changed else "a different number of lines"
            pytest.fail(f"{case}/{name} differs from its golden file, first at {detail}")


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every case analysed once by the command."""
    root = tmp_path_factory.mktemp("golden")
    written = {}
    for case, relative in CASES.items():
        out = root / case
        result = perfledger("analyze", DATA / relative, "-o", out, "--no-ledger", "--workers", "0")
        assert result.returncode == 0, f"{case}: {result.stderr}"
        written[case] = out
    return written


@pytest.mark.parametrize("case", sorted(CASES))
def test_profile_matches_its_golden_files(
    case: str, profiles: dict[str, Path], request: pytest.FixtureRequest
) -> None:
    files = pinned_files(profiles[case])
    assert "summary.json" in files and "step_trace.csv" in files
    check_against_golden(case, files, request)


@pytest.mark.parametrize("case", sorted(DIFFS))
def test_diff_matches_its_golden_file(
    case: str, profiles: dict[str, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    base, current = DIFFS[case]
    result = perfledger("diff", profiles[base], profiles[current], "-o", tmp_path, "--no-html")
    assert result.returncode == 0, result.stderr
    diff = json.loads((tmp_path / "diff.json").read_text(encoding="utf-8"))
    # the two sides are named by where they were written, a temporary folder
    for side in ("base", "current"):
        if isinstance(diff.get(side), dict) and "path" in diff[side]:
            diff[side]["path"] = f"<{side}>"
    text = json.dumps(_normalise_json(diff, str(DATA)), indent=2, ensure_ascii=False) + "\n"
    check_against_golden(f"diff_{case}", {"diff.json": text}, request)


def test_analysing_twice_writes_identical_files(tmp_path: Path) -> None:
    """Deterministic output: the same trace gives the same bytes (the premise of the pins)."""
    source = DATA / CASES["a100_triton"]
    first, second = tmp_path / "one", tmp_path / "two"
    for out in (first, second):
        result = perfledger("analyze", source, "-o", out, "--no-ledger")
        assert result.returncode == 0, result.stderr
    assert pinned_files(first) == pinned_files(second)
