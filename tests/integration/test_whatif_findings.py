"""``perfledger whatif --apply-finding RULE`` and the flags that replay the advisor's fixes by
hand give the gain per step of the finding's ``whatif_ms`` in summary.json.

The advisor derives ``whatif_ms`` inside ``analyze`` (each rank's fix replayed on its rank's
graph, several ranks' collectives waiting for each other); the CLI reads the stored profile,
rebuilds the graph from its events and replays the stored change (or the change its flags
describe) on the whole profile. The gain per step is derived here from the CLI's ``--json``
steps: per rank, its replayed total less its predicted total (a rank predicted slower gains
nothing, as the advisor counts it), over every step.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from perfledger.analysis.advisor import rule_by_id
from tests.cli import perfledger
from tests.kineto_gen import complete, cpu_op, device_task, runtime, write_kineto
from tests.paths import DATA

# Single-rank traces of tests/data whose findings replay their fixes: between them every rule
# with a graph change (host_dispatch_bound, small_op_explosion, fusion_candidates,
# memcpy_heavy, excessive_sync, dataloader_bound; exposed_communication on the ranks below).
ONE_RANK = [
    "kineto/v100_rank1_test.json.gz",
    "kineto/mtia_inference.json.gz",
    "kineto/resnet50_gpu_2021.json.gz",
    "kineto/mi250_rocm_minitoy.json.gz",
    "kineto/h200/infer_cnn.json.gz",
]
# Several ranks: each rank's fix is stored with rows of its own events, and both the advisor
# and the CLI replay the ranks together (their matched collectives wait for each other).
SEVERAL_RANKS = ["ascend/torch_npu_db/level0", "kineto/sampled_2ranks", "kineto/h200/ddp"]
# whatif_ms and the figures here are rounded to 3 decimals of a ms each
ROUNDING_MS = 0.0015

_ROOT: list[Path] = []


@cache
def _profile(name: str) -> Path:
    out = _ROOT[0] / name.replace("/", "_")
    done = perfledger("analyze", DATA / name, "-o", out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module", autouse=True)
def _profiles_root(tmp_path_factory: pytest.TempPathFactory) -> None:
    _ROOT[:] = [tmp_path_factory.mktemp("findings")]
    _profile.cache_clear()


def _summary(profile: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((profile / "summary.json").read_text())
    return document


def _replayed(profile: Path) -> dict[str, float]:
    return {
        f["id"]: f["whatif_ms"] for f in _summary(profile)["findings"] if f["whatif_ms"] is not None
    }


def _cli_gain_ms(profile: Path, *args: str) -> float:
    done = perfledger("whatif", profile, *args, "--json")
    assert done.returncode == 0, done.stderr
    totals: dict[int, list[int]] = {}
    steps = json.loads(done.stdout)["steps"]
    for step in steps:
        total = totals.setdefault(step["rank"], [0, 0])
        total[0] += step["baseline_ns"]
        total[1] += step["predicted_ns"]
    gained = sum(base - min(predicted, base) for base, predicted in totals.values())
    return gained / len(steps) / 1e6


def test_every_single_rank_trace_has_a_replayed_fix() -> None:
    rules = {rule for name in ONE_RANK for rule in _replayed(_profile(name))}
    assert {
        "host_dispatch_bound",
        "small_op_explosion",
        "fusion_candidates",
        "memcpy_heavy",
        "excessive_sync",
        "dataloader_bound",
    } <= rules


@pytest.mark.parametrize("name", ONE_RANK + SEVERAL_RANKS)
def test_apply_finding_gains_the_findings_whatif_ms(name: str) -> None:
    profile = _profile(name)
    replayed = _replayed(profile)
    assert replayed
    for rule, whatif_ms in replayed.items():
        assert _cli_gain_ms(profile, "--apply-finding", rule) == pytest.approx(
            whatif_ms, abs=ROUNDING_MS
        ), rule


@pytest.mark.parametrize(
    "name", ["kineto/v100_rank1_test.json.gz", "kineto/resnet50_gpu_2021.json.gz"]
)
def test_the_top_findings_applied_together_gain_whatif_combined(name: str) -> None:
    profile = _profile(name)
    combined = _summary(profile)["whatif_combined"]
    assert len(combined["findings"]) >= 2  # their gains overlap: not the sum of theirs
    args = [a for rule in combined["findings"] for a in ("--apply-finding", rule)]
    assert _cli_gain_ms(profile, *args) == pytest.approx(combined["gain_ms"], abs=ROUNDING_MS)


def test_a_finding_named_twice_is_applied_once() -> None:
    # fusion_candidates scales its chains' tasks: applied twice they would shrink twice
    profile = _profile("kineto/v100_rank1_test.json.gz")
    whatif_ms = _replayed(profile)["fusion_candidates"]
    assert whatif_ms > 0
    twice = ["--apply-finding", "fusion_candidates"] * 2
    assert _cli_gain_ms(profile, *twice) == pytest.approx(whatif_ms, abs=ROUNDING_MS)


def _launch_factor(rule: str) -> float:
    found = rule_by_id(rule)
    assert found is not None
    return next(t.default for t in found.thresholds if t.name == "whatif_launch_factor")


@pytest.mark.parametrize(
    ("name", "rule", "flags"),
    [
        (
            "kineto/mi250_rocm_minitoy.json.gz",
            "host_dispatch_bound",
            ["--scale", f"launch={_launch_factor('host_dispatch_bound')}"],
        ),
        (
            "kineto/resnet50_gpu_2021.json.gz",
            "small_op_explosion",
            ["--scale", f"launch={_launch_factor('small_op_explosion')}"],
        ),
        ("kineto/resnet50_gpu_2021.json.gz", "dataloader_bound", ["--no-loader"]),
        # no step annotation: the rule drops every synchronisation
        ("kineto/mtia_inference.json.gz", "excessive_sync", ["--drop-sync", "*"]),
        ("kineto/mtia_inference.json.gz", "excessive_sync", ["--no-sync"]),
    ],
)
def test_flags_replay_a_fix_by_hand(name: str, rule: str, flags: list[str]) -> None:
    profile = _profile(name)
    whatif_ms = _replayed(profile)[rule]
    assert whatif_ms > 0
    assert _cli_gain_ms(profile, *flags) == pytest.approx(whatif_ms, abs=ROUNDING_MS)


# --- a hand-built sync-bound step ------------------------------------------------------------

ITERATIONS = 12


def _sync_bound_trace(path: Path) -> Path:
    """12 times: launch a 10 µs kernel (5 µs call, the kernel 10 µs after the call began),
    then ``.item()``: a synchronise from the call's end until 2 µs after the kernel ends,
    then 20 µs of host work. The step mark spans it all."""
    step_us = 10 + ITERATIONS * 42
    events = [complete("user_annotation", "ProfilerStep#1", 0, step_us)]
    for i in range(ITERATIONS):
        t = 10 + 42 * i
        events.append(cpu_op("aten::relu", t, 5, external_id=100 + i))
        events.append(runtime("cudaLaunchKernel", t, 5, correlation=i + 1, external_id=100 + i))
        events.append(
            device_task("kernel", "relu_kernel", t + 10, 10, correlation=i + 1, external_id=100 + i)
        )
        events.append(cpu_op("aten::item", t + 5, 17, external_id=200 + i))
        events.append(runtime("cudaStreamSynchronize", t + 5, 17, correlation=1000 + i))
    write_kineto(path, events)
    return path


@pytest.fixture(scope="module")
def sync_bound_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sync_bound")
    out = root / "profile"
    done = perfledger("analyze", _sync_bound_trace(root / "sync_bound.json"), "-o", out)
    assert done.returncode == 0, done.stderr
    return out


# the measured step, and the host alone: per iteration the 5 µs launch call, the sync's 2 µs
# return latency and the 20 µs of host work
MEASURED_NS = (10 + ITERATIONS * 42) * 1_000
HOST_ALONE_NS = (10 + ITERATIONS * 27) * 1_000


def _only_step(profile: Path, *args: str) -> dict[str, Any]:
    done = perfledger("whatif", profile, *args, "--json")
    assert done.returncode == 0, done.stderr
    (step,) = json.loads(done.stdout)["steps"]
    assert step["measured_ns"] == step["baseline_ns"] == MEASURED_NS
    return dict(step)


@pytest.mark.parametrize(
    "args",
    [
        ["--drop-sync", "cudaStreamSynchronize"],
        ["--drop-sync", "aten::item"],  # the operator around the synchronise
        ["--drop-sync", "cuda*Sync*", "--drop-sync", "nothing"],
        ["--no-sync"],
        ["--apply-finding", "excessive_sync"],
    ],
)
def test_dropping_the_syncs_predicts_the_step_the_host_alone_takes(
    sync_bound_profile: Path, args: list[str]
) -> None:
    assert _only_step(sync_bound_profile, *args)["predicted_ns"] == HOST_ALONE_NS


def test_the_sync_finding_gains_what_dropping_its_syncs_gains(sync_bound_profile: Path) -> None:
    whatif_ms = _replayed(sync_bound_profile)["excessive_sync"]
    assert whatif_ms == pytest.approx((MEASURED_NS - HOST_ALONE_NS) / 1e6, abs=ROUNDING_MS)


def test_the_text_names_the_gain_and_the_advisors_figure(sync_bound_profile: Path) -> None:
    done = perfledger("whatif", sync_bound_profile, "--apply-finding", "excessive_sync")
    assert done.returncode == 0, done.stderr
    gain_ms = (MEASURED_NS - HOST_ALONE_NS) / 1e6
    assert f"gain per step: {gain_ms:.3f} ms" in done.stdout
    assert "excessive_sync: the advisor's whatif_ms" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--apply-finding", "no_such_rule"], "unknown rule"),
        # a rule that exists, without a finding on this step
        (["--apply-finding", "dataloader_bound"], "has no dataloader_bound finding"),
        (["--drop-sync", ""], "empty name pattern"),
        # aten::relu runs the launch, not a synchronisation
        (["--drop-sync", "aten::relu"], "no synchronisation call matches"),
        (["--scale", "launch=0"], "above 0"),
        (["--scale", "launch=-0.5"], "above 0"),
    ],
)
def test_bad_input_is_a_one_line_error_naming_the_profile(
    sync_bound_profile: Path, args: list[str], message: str
) -> None:
    done = perfledger("whatif", sync_bound_profile, *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert str(sync_bound_profile) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_profile_without_stored_fixes_says_to_analyze_again(
    sync_bound_profile: Path, tmp_path: Path
) -> None:
    import shutil

    older = tmp_path / "older"
    shutil.copytree(sync_bound_profile, older)
    (older / "tables" / "whatif_fixes.parquet").unlink()
    done = perfledger("whatif", older, "--apply-finding", "excessive_sync")
    assert done.returncode == 2
    assert "analyze the trace again" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("column", ["factor", "group", "rule"])
def test_a_fixes_table_without_a_column_is_a_one_line_error_naming_it(
    sync_bound_profile: Path, tmp_path: Path, column: str
) -> None:
    import shutil

    import pyarrow.parquet as pq

    damaged = tmp_path / "damaged"
    shutil.copytree(sync_bound_profile, damaged)
    fixes = damaged / "tables" / "whatif_fixes.parquet"
    pq.write_table(pq.read_table(fixes).drop_columns([column]), fixes)
    done = perfledger("whatif", damaged, "--apply-finding", "excessive_sync")
    assert done.returncode == 2, done.stderr
    assert str(fixes) in done.stderr
    assert f"no column {column}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_fixes_table_with_a_column_of_another_type_is_a_one_line_error(
    sync_bound_profile: Path, tmp_path: Path
) -> None:
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    damaged = tmp_path / "damaged"
    shutil.copytree(sync_bound_profile, damaged)
    fixes = damaged / "tables" / "whatif_fixes.parquet"
    table = pq.read_table(fixes)
    words = pa.array(["many"] * table.num_rows, pa.string())
    pq.write_table(table.set_column(table.column_names.index("row"), "row", words), fixes)
    done = perfledger("whatif", damaged, "--apply-finding", "excessive_sync")
    assert done.returncode == 2, done.stderr
    assert str(fixes) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
