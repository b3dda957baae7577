"""The report page: the HTML template, ECharts and the report's script inlined, the payload,
a Content-Security-Policy that lets only those two scripts run, and the 5 MB size limit.

These helpers (:func:`inline_asset`, :func:`csp_hash`, :func:`script_json`,
:func:`template_environment`) also write diff.html and the ledger's trend page.
"""

from __future__ import annotations

import base64
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any, Final

import jinja2
from markupsafe import Markup

from perfledger.errors import PerfledgerError
from perfledger.files import write_bytes
from perfledger.render.report.budgets import PayloadLimits
from perfledger.render.report.data import ReportData
from perfledger.render.report.payload import report_payload
from perfledger.render.report.rows import prepare_rows
from perfledger.render.report.steps import timeline_spans
from perfledger.render.report.values import finite

MAX_REPORT_BYTES: Final = 5 * 1024 * 1024
# Room for the page around the scripts and the payload.
_PAGE_MARGIN: Final = 64 * 1024
_TEMPLATE_PACKAGE: Final = "perfledger.render"
# The report's script, one file per part of the page, inlined joined in this order: the
# first opens the function that holds them all (and its helpers), the last runs it.
REPORT_SCRIPTS: Final = (
    "report_common.js",
    "report_overview.js",
    "report_cluster.js",
    "report_findings.js",
    "report_critical.js",
    "report_timeline.js",
    "report_tables.js",
    "report_main.js",
)


def write_report(path: Path, data: ReportData) -> None:
    """Write the self-contained HTML report (temporary name, then renamed).

    Raises:
        PerfledgerError: the report would exceed MAX_REPORT_BYTES (a payload budget bug).
    """
    html = render_report(data)
    encoded = html.encode("utf-8")
    if len(encoded) > MAX_REPORT_BYTES:
        raise PerfledgerError(
            f"{path}: the report would be {len(encoded) / 1e6:.1f} MB, over the "
            f"{MAX_REPORT_BYTES / 1e6:.0f} MB limit"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, encoded)


def render_report(data: ReportData) -> str:
    """The report as one HTML string, its payload shrunk until the page fits the size limit."""
    echarts = inline_asset("echarts.min.js")
    app_js = report_script()
    css = template_text("report.css")
    fixed = sum(len(t.encode("utf-8")) for t in (echarts, app_js, css)) + _PAGE_MARGIN
    limits = PayloadLimits()
    # the shrunk payloads draw fewer steps and fewer events of each: a subset of these rows
    prepared = prepare_rows(data, timeline_spans(data, limits), limits.timeline_events)
    payload = script_json(report_payload(data, limits, prepared))
    for _ in range(8):
        if fixed + len(payload.encode("utf-8")) <= MAX_REPORT_BYTES:
            break
        limits = limits.shrunk()
        payload = script_json(report_payload(data, limits, prepared))
    template = template_environment().get_template("report.html.j2")
    return template.render(
        title=data.title,
        echarts=Markup(echarts),
        echarts_version=inline_asset("echarts.VERSION").splitlines()[0],
        app_js=Markup(app_js),
        css=Markup(css),
        payload=Markup(payload),
        # only these two scripts may run: no inline handler, nothing fetched
        script_hashes=Markup(" ".join(f"'{csp_hash(text)}'" for text in (echarts, app_js))),
    )


def report_script() -> str:
    """The report's script as inlined: its parts joined in REPORT_SCRIPTS order."""
    return "".join(template_text(name) for name in REPORT_SCRIPTS)


def csp_hash(text: str) -> str:
    """The Content-Security-Policy source (``sha256-…``) that lets an inline script run."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def script_json(value: Any) -> str:
    """JSON safe to place inside a ``<script>`` element: no ``<``, ``>``, ``&`` or U+2028/9."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:  # a NaN somewhere: walk the document once to null it
        text = json.dumps(finite(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def inline_asset(name: str) -> str:
    """A vendored asset's text (ECharts and its version), checked fit to be inlined."""
    text = resources.files(_TEMPLATE_PACKAGE).joinpath("assets").joinpath(name).read_text("utf-8")
    if name.endswith(".js") and "</script" in text.lower():
        raise PerfledgerError(f"asset {name} cannot be inlined: it contains </script")
    return text


def template_text(name: str) -> str:
    """The text of one file of the page templates (templates, styles, scripts)."""
    return (
        resources.files(_TEMPLATE_PACKAGE).joinpath("templates").joinpath(name).read_text("utf-8")
    )


def template_environment() -> jinja2.Environment:
    """The Jinja environment of the pages: autoescaped, strict about undefined names."""
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(template_text),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
