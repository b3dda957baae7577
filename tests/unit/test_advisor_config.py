"""The advisor's registry, findings, sorting, configuration from the command line and TOML."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from perfledger.analysis.advisor import (
    RULES,
    AdvisorConfig,
    Finding,
    advise,
    diagnose,
    skipped_rules,
)
from perfledger.cli.advisor_options import add_advisor_arguments, config_from_args, config_from_toml
from perfledger.errors import PerfledgerError
from perfledger.render.rules import rules_table
from tests.advisor_synth import US, analyse, host_bound_steps

DESIGN_IDS = [
    "host_dispatch_bound",
    "excessive_sync",
    "small_op_explosion",
    "memory_bound_ops",
    "fusion_candidates",
    "exposed_communication",
    "memcpy_heavy",
    "dataloader_bound",
    "low_utilization_windows",
    "long_tail_ops",
    "host_cpu_saturated",
    "profiler_overhead_high",
    "precision_mix",
    "slow_rank",
    "load_imbalance",
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perfledger analyze")
    add_advisor_arguments(p)
    return p


def test_registry_holds_the_fifteen_rules_in_design_order() -> None:
    assert [r.id for r in RULES] == DESIGN_IDS
    for rule in RULES:
        assert rule.thresholds, rule.id
        assert all(t.source and t.meaning and t.unit for t in rule.thresholds), rule.id


def test_rules_table_lists_every_threshold_with_default_and_source() -> None:
    table = rules_table()
    for rule in RULES:
        assert f"{rule.id}: " in table
        for t in rule.thresholds:
            assert f"{rule.id}.{t.name} = {t.default:g} {t.unit}" in table
            assert t.source in table
    assert "V100-SXM2" in table and "Ascend910B" in table


def test_rules_option_prints_the_table_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["--rules"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == rules_table()


def test_rules_option_wins_over_missing_required_inputs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # ``perfledger analyze --rules`` must list the rules without asking for a trace
    p = argparse.ArgumentParser(prog="perfledger analyze")
    p.add_argument("inputs", nargs="+")
    add_advisor_arguments(p)
    with pytest.raises(SystemExit) as exit_:
        p.parse_args(["--rules"])
    assert exit_.value.code == 0
    assert "host_dispatch_bound.idle_pct = 10 %" in capsys.readouterr().out


def test_thresholds_from_the_command_line() -> None:
    args = parser().parse_args(
        [
            "--threshold",
            "host_dispatch_bound.idle_pct=15",
            "--threshold",
            "long_tail_ops.ratio=4.5",
            "--disable-rule",
            "precision_mix",
            "--device-model",
            "A100-80GB",
            "--peak-bandwidth",
            "1000",
        ]
    )
    config = config_from_args(args)
    assert config.thresholds == {"host_dispatch_bound.idle_pct": 15.0, "long_tail_ops.ratio": 4.5}
    assert config.disabled == frozenset({"precision_mix"})
    assert (config.device.model, config.device.bandwidth_gbps) == ("A100-80GB", 1000.0)
    rule = next(r for r in RULES if r.id == "host_dispatch_bound")
    assert config.params(rule) == {
        "idle_pct": 15.0,
        "host_share_pct": 50.0,
        "whatif_launch_factor": 0.5,
    }
    assert not config.runs("precision_mix") and config.runs("long_tail_ops")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("host_dispatch_bound.idle_pct", "RULE.NAME=VALUE"),
        ("host_dispatch_bound.idle_pct=ten", "not a number"),
        ("host_dispatch_bound.idle_pct=-1", ">= 0"),
        ("host_dispatch_bound.idle_pct=nan", ">= 0"),
        ("no_such_rule.x=1", "unknown rule"),
        ("host_dispatch_bound.nope=1", "has no threshold 'nope'"),
        ("idle_pct=1", "RULE.NAME"),
    ],
)
def test_bad_thresholds_are_one_line_errors(option: str, message: str) -> None:
    args = parser().parse_args(["--threshold", option])
    with pytest.raises(PerfledgerError, match=message):
        config_from_args(args)


def test_bad_device_options() -> None:
    with pytest.raises(PerfledgerError, match="unknown device model"):
        config_from_args(parser().parse_args(["--device-model", "Z9000"]))
    with pytest.raises(PerfledgerError, match="> 0"):
        config_from_args(parser().parse_args(["--peak-tflops", "0"]))
    with pytest.raises(PerfledgerError, match="unknown rule"):
        config_from_args(parser().parse_args(["--disable-rule", "nope"]))


def test_toml_file_and_command_line_precedence(tmp_path: Path) -> None:
    path = tmp_path / "advisor.toml"
    path.write_text(
        """
        [thresholds]
        "host_dispatch_bound.idle_pct" = 20
        [thresholds.long_tail_ops]
        ratio = 5
        min_instances = 8

        [device]
        model = "H100-SXM"
        peak_tflops = 900.5

        [rules]
        disabled = ["precision_mix"]
        """
    )
    from_file = config_from_toml(path)
    assert from_file.thresholds == {
        "host_dispatch_bound.idle_pct": 20.0,
        "long_tail_ops.ratio": 5.0,
        "long_tail_ops.min_instances": 8.0,
    }
    assert (from_file.device.model, from_file.device.peak_tflops) == ("H100-SXM", 900.5)
    assert from_file.disabled == frozenset({"precision_mix"})
    args = parser().parse_args(
        [
            "--advisor-config",
            str(path),
            "--threshold",
            "long_tail_ops.ratio=3.5",
            "--peak-tflops",
            "800",
        ]
    )
    merged = config_from_args(args)
    assert merged.thresholds["long_tail_ops.ratio"] == 3.5
    assert merged.thresholds["host_dispatch_bound.idle_pct"] == 20.0
    assert (merged.device.model, merged.device.peak_tflops) == ("H100-SXM", 800.0)
    assert merged.disabled == frozenset({"precision_mix"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[thresholds\n", "not valid TOML"),
        ("[other]\nx = 1\n", "unknown section"),
        ('[thresholds]\n"host_dispatch_bound.idle_pct" = "high"\n', "must be a number"),
        ("[thresholds.host_dispatch_bound]\nwrong = 1\n", "has no threshold"),
        ('[device]\nmodel = "Z9000"\n', "unknown device model"),
        ("[device]\nclock = 1\n", "unknown \\[device\\] key"),
        ('[rules]\nenabled = "all"\n', "list of rule ids"),
        ('[rules]\ndisabled = ["nope"]\n', "unknown rule"),
    ],
)
def test_bad_toml_names_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PerfledgerError, match=message) as error:
        config_from_toml(path)
    assert str(path) in str(error.value) or "unknown device model" in str(error.value)


def test_missing_toml_file(tmp_path: Path) -> None:
    with pytest.raises(PerfledgerError, match="cannot read"):
        config_from_toml(tmp_path / "absent.toml")


def test_findings_ranked_by_replayed_gain_and_json_ready() -> None:
    analysis = analyse(host_bound_steps(with_sync=True))
    findings = advise(analysis)
    ids = [f.id for f in findings]
    # sync idle 450 µs/step, host-caused idle 470 µs/step: both fixes replayed
    assert set(ids[:2]) == {"host_dispatch_bound", "excessive_sync"}
    assert all(f.whatif_ms is not None for f in findings[:2])
    # ranked by the replayed gain where there is one, else the severity
    gains = [f.severity_ms if f.whatif_ms is None else f.whatif_ms for f in findings]
    assert gains == sorted(gains, reverse=True)
    document = [f.to_dict() for f in findings]
    text = json.dumps(document, allow_nan=False)
    first = json.loads(text)[0]
    assert list(first)[:7] == [
        "id",
        "title",
        "severity_ms",
        "severity_pct",
        "evidence",
        "suggestion",
        "verify",
    ]
    assert first["estimate"] and first["spans"][0]["rank"] == 0
    assert first["spans"][0]["end_ns"] > first["spans"][0]["start_ns"] >= 0


def test_disabled_and_enabled_rules() -> None:
    analysis = analyse(host_bound_steps(with_sync=True))
    only = AdvisorConfig(enabled=frozenset({"excessive_sync"}))
    assert [f.id for f in advise(analysis, only)] == ["excessive_sync"]
    without = AdvisorConfig(disabled=frozenset({"host_dispatch_bound"}))
    assert "host_dispatch_bound" not in [f.id for f in advise(analysis, without)]


def test_skipped_rules_say_why() -> None:
    analysis = analyse(host_bound_steps())
    reasons = dict(skipped_rules(analysis))
    assert "record_shapes" in reasons["memory_bound_ops"]
    assert "counters" in reasons["host_cpu_saturated"]
    assert "unprofiled" in reasons["profiler_overhead_high"]
    assert "communication" in reasons["exposed_communication"]
    report = diagnose(analysis, overhead_pct=3.0)
    assert "profiler_overhead_high" not in {s.rule for s in report.skipped}


def test_finding_to_dict_makes_numpy_and_nan_json_safe() -> None:
    import numpy as np

    f = Finding(
        id="x",
        title="t",
        severity_ms=1.0,
        severity_pct=2.0,
        evidence={"a": np.int64(3), "b": float("nan"), "c": (np.float32(0.5), None)},
        suggestion="s",
        verify="v",
        estimate="e",
        spans=({"rank": 0, "start_ns": 1 * US, "end_ns": 2 * US},),
    )
    assert f.to_dict()["evidence"] == {"a": 3, "b": None, "c": [0.5, None]}
