"""Advisor options on the command line and in a TOML file.

``--rules`` prints every rule with its thresholds and exits; ``--threshold RULE.NAME=VALUE``
(repeatable) overrides one threshold; ``--advisor-config FILE.toml`` reads::

    [thresholds]
    "host_dispatch_bound.idle_pct" = 15
    [thresholds.long_tail_ops]        # or per rule
    ratio = 4

    [device]
    model = "A100-80GB"               # a row of the device table
    peak_tflops = 312                 # or the peaks directly
    bandwidth_gbps = 2039
    host_link_gbps = 31.5

    [rules]
    disabled = ["precision_mix"]      # or enabled = [...]

``--device-model``, ``--peak-tflops``, ``--peak-bandwidth`` and ``--disable-rule`` do the same
from the command line, and win over the file.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfledger.analysis.advisor import RULES
from perfledger.errors import PerfledgerError
from perfledger.model import devices
from perfledger.model.findings import AdvisorConfig, DeviceOverride, check_value
from perfledger.render.rules import rules_table

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]


class _ListRules(argparse.Action):
    """``--rules``: print the rules table and exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(rules_table())
        parser.exit(0)


def add_advisor_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the advisor's options on a subcommand's parser."""
    group = parser.add_argument_group("advisor")
    group.add_argument(
        "--rules", action=_ListRules, help="list the diagnosis rules and their thresholds, exit"
    )
    group.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="RULE.NAME=VALUE",
        help="override one rule threshold (repeatable); see --rules",
    )
    group.add_argument(
        "--advisor-config",
        type=Path,
        metavar="FILE.toml",
        help="thresholds, device peaks and enabled rules from a TOML file",
    )
    group.add_argument(
        "--disable-rule", action="append", default=[], metavar="RULE", help="do not run a rule"
    )
    group.add_argument(
        "--device-model",
        metavar="NAME",
        help="the device the trace ran on, from the table of known devices (see --rules)",
    )
    group.add_argument(
        "--peak-tflops", type=float, metavar="TFLOPS", help="device peak math rate, TFLOP/s"
    )
    group.add_argument(
        "--peak-bandwidth", type=float, metavar="GBPS", help="device memory bandwidth, GB/s"
    )


def config_from_args(args: argparse.Namespace) -> AdvisorConfig:
    """The advisor configuration from parsed options (TOML file first, then the options)."""
    config = AdvisorConfig()
    path = getattr(args, "advisor_config", None)
    if path is not None:
        config = config_from_toml(Path(path))
    thresholds = dict(config.thresholds)
    for item in getattr(args, "threshold", None) or []:
        key, value = _parse_assignment(item)
        thresholds[key] = value
    _check_keys(thresholds, "--threshold")
    disabled = set(config.disabled)
    for rule_id in getattr(args, "disable_rule", None) or []:
        _check_rule(rule_id, "--disable-rule")
        disabled.add(rule_id)
    device = _device(
        model=getattr(args, "device_model", None) or config.device.model,
        peak=_first(getattr(args, "peak_tflops", None), config.device.peak_tflops),
        bandwidth=_first(getattr(args, "peak_bandwidth", None), config.device.bandwidth_gbps),
        link=config.device.host_link_gbps,
        where="command line",
    )
    return AdvisorConfig(
        thresholds=thresholds,
        device=device,
        enabled=config.enabled,
        disabled=frozenset(disabled),
    )


def config_from_toml(path: Path) -> AdvisorConfig:
    """The advisor configuration of a TOML file (module docstring)."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PerfledgerError(f"{path}: cannot read advisor config: {error.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise PerfledgerError(f"{path}: not valid TOML: {error}") from None
    unknown = set(document) - {"thresholds", "device", "rules"}
    if unknown:
        raise PerfledgerError(f"{path}: unknown section(s) {', '.join(sorted(unknown))}")
    thresholds: dict[str, float] = {}
    section = document.get("thresholds", {})
    if not isinstance(section, Mapping):
        raise PerfledgerError(f"{path}: [thresholds] must be a table")
    for key, value in section.items():
        if isinstance(value, Mapping):
            for name, inner in value.items():
                thresholds[f"{key}.{name}"] = _number(f"{key}.{name}", inner, path)
        else:
            thresholds[str(key)] = _number(str(key), value, path)
    _check_keys(thresholds, str(path))
    device_section = document.get("device", {})
    if not isinstance(device_section, Mapping):
        raise PerfledgerError(f"{path}: [device] must be a table")
    extra = set(device_section) - {"model", "peak_tflops", "bandwidth_gbps", "host_link_gbps"}
    if extra:
        raise PerfledgerError(f"{path}: unknown [device] key(s) {', '.join(sorted(extra))}")
    model = device_section.get("model")
    if model is not None and not isinstance(model, str):
        raise PerfledgerError(f"{path}: [device] model must be a string")

    def optional(key: str) -> float | None:
        value = device_section.get(key)
        return None if value is None else _number(f"device.{key}", value, path)

    device = _device(
        model=model,
        peak=optional("peak_tflops"),
        bandwidth=optional("bandwidth_gbps"),
        link=optional("host_link_gbps"),
        where=str(path),
    )
    rules_section = document.get("rules", {})
    if not isinstance(rules_section, Mapping):
        raise PerfledgerError(f"{path}: [rules] must be a table")
    enabled = _rule_list(rules_section.get("enabled"), path, "enabled")
    disabled = _rule_list(rules_section.get("disabled"), path, "disabled")
    return AdvisorConfig(
        thresholds=thresholds,
        device=device,
        enabled=frozenset(enabled) if enabled is not None else None,
        disabled=frozenset(disabled or ()),
    )


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _device(
    *,
    model: str | None,
    peak: float | None,
    bandwidth: float | None,
    link: float | None,
    where: str,
) -> DeviceOverride:
    if model is not None and devices.find_device(model) is None:
        known = ", ".join(d.name for d in devices.KNOWN_DEVICES)
        raise PerfledgerError(f"{where}: unknown device model {model!r} (known: {known})")
    for label, value in (("peak TFLOP/s", peak), ("bandwidth", bandwidth), ("host link", link)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise PerfledgerError(f"{where}: device {label} must be a number > 0, got {value}")
    return DeviceOverride(model, peak, bandwidth, link)


def _parse_assignment(item: str) -> tuple[str, float]:
    key, sep, text = item.partition("=")
    if not sep:
        raise PerfledgerError(f"--threshold {item!r}: expected RULE.NAME=VALUE")
    try:
        value = float(text)
    except ValueError:
        raise PerfledgerError(f"--threshold {item!r}: {text!r} is not a number") from None
    return key.strip(), check_value(key.strip(), value)


def _number(key: str, value: object, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PerfledgerError(f"{path}: {key} must be a number, got {value!r}")
    try:
        return check_value(key, float(value))
    except PerfledgerError as error:
        raise PerfledgerError(f"{path}: {error}") from None


def _check_rule(rule_id: str, where: str) -> None:
    if rule_id not in {r.id for r in RULES}:
        known = ", ".join(r.id for r in RULES)
        raise PerfledgerError(f"{where}: unknown rule {rule_id!r} (rules: {known})")


def _check_keys(thresholds: Mapping[str, float], where: str) -> None:
    by_id = {r.id: r for r in RULES}
    for key in thresholds:
        rule_id, dot, name = key.partition(".")
        if not dot:
            raise PerfledgerError(f"{where}: threshold {key!r} must be RULE.NAME")
        _check_rule(rule_id, where)
        names = by_id[rule_id].defaults()
        if name not in names:
            raise PerfledgerError(
                f"{where}: rule {rule_id} has no threshold {name!r} "
                f"(thresholds: {', '.join(sorted(names))})"
            )


def _rule_list(value: object, path: Path, key: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PerfledgerError(f"{path}: [rules] {key} must be a list of rule ids")
    for rule_id in value:
        _check_rule(rule_id, str(path))
    return list(value)
