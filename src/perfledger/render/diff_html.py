"""diff.html and the ledger's trend page: self-contained HTML (ECharts inlined, no network).

Both pages lay out a JSON document computed elsewhere (diff.json, or the ledger's runs) and
compute nothing. As in the report, every string that came from a trace or a user travels inside
one ``<script type="application/json">`` block whose ``<``, ``>`` and ``&`` are escaped, and the
page writes it with ``textContent`` (or escapes it for chart tooltips). A Content-Security-Policy
lets only the two inlined scripts run, by their hashes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

import jinja2
from markupsafe import Markup

from perfledger import __version__
from perfledger.errors import PerfledgerError

_PACKAGE: Final = "perfledger.render"
DIFF_TEMPLATE: Final = "diff.html.j2"
TREND_TEMPLATE: Final = "diff_trend.html.j2"


def write_diff_html(path: Path, document: Mapping[str, Any]) -> None:
    """Write diff.html for a diff.json document (temporary name, then renamed)."""
    title = f"{document['base']['label']} → {document['current']['label']}"
    _write(path, render_page(DIFF_TEMPLATE, title, document))


def write_trend_html(path: Path, runs: Sequence[Mapping[str, Any]], *, title: str) -> None:
    """Write the trend page of ledger runs (dicts of the ledger's run fields, oldest first)."""
    _write(path, render_page(TREND_TEMPLATE, title, {"runs": list(runs)}))


def render_page(template_name: str, title: str, document: Mapping[str, Any]) -> str:
    """One page as an HTML string: the template, ECharts, the page's script and the data."""
    payload = {"generator": f"perfledger {__version__}", "title": title, **document}
    template = _environment().get_template(template_name)
    echarts = _asset("echarts.min.js")
    context: dict[str, Any] = {
        "title": title,
        "echarts": Markup(echarts),
        "echarts_version": _asset("echarts.VERSION").splitlines()[0],
        "payload": Markup(script_json(payload)),
        "script_hashes": "",
    }
    # The page's script is a {% set app_js %} block of the template: its text is needed first
    # to put its hash into the Content-Security-Policy of the same page.
    app_js = str(template.make_module(context).app_js)  # type: ignore[attr-defined]
    context["script_hashes"] = Markup(" ".join(f"'{_sha256(t)}'" for t in (echarts, app_js)))
    return template.render(context)


def script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<``, ``>``, ``&`` or U+2028/9."""
    text = json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _finite(value: Any) -> Any:
    """NaN and infinities become null (JSON.parse rejects them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _write(path: Path, html: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(html.encode("utf-8"))
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


@cache
def _asset(name: str) -> str:
    text = resources.files(_PACKAGE).joinpath("assets").joinpath(name).read_text("utf-8")
    if name.endswith(".js") and "</script" in text.lower():
        raise PerfledgerError(f"asset {name} cannot be inlined: it contains </script")
    return text


@cache
def _template_text(name: str) -> str:
    return resources.files(_PACKAGE).joinpath("templates").joinpath(name).read_text("utf-8")


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_text),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
