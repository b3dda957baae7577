"""Values made fit for the report's JSON document: finite numbers and plain JSON types."""

from __future__ import annotations

import json
import math
from typing import Any


def number(value: Any) -> float | None:
    """A finite number as a float; None for booleans, non-numbers, NaN and infinities."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if math.isfinite(result) else None


def jsonable(value: Any) -> Any:
    """Any value as plain JSON types (unknown objects become their text)."""
    return json.loads(json.dumps(value, default=str, allow_nan=True))


def finite(value: Any) -> Any:
    """NaN and infinities become null (JSON.parse rejects them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
