"""Text from traces as the terminal shows it: control characters escaped, never interpreted.

Names in a trace come from the traced program and may hold anything — an escape sequence that
clears the screen (``\\x1b[2J``), an OSC-8 link, a carriage return that hides what came before,
a right-to-left override that reverses it, or ``[bold]`` that rich would take for markup. Every
name, label and message printed to a terminal goes through :func:`shown` (a rich ``Text``, so
brackets stay brackets) or :func:`escaped` (plain ``print``): such characters are written as
``\\x1b``, ``\\r``, ``\\u202e``.
"""

from __future__ import annotations

import unicodedata

from rich.text import Text

# Unicode categories written escaped: controls, format characters (bidi overrides, zero-width
# joiners), line and paragraph separators, unassigned and private-use code points, surrogates.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cn", "Cs"})


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escaped(value: object) -> str:
    """``value`` as text with every control or invisible format character escaped."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(
        _escape(c) if unicodedata.category(c) in _ESCAPED_CATEGORIES else c for c in text
    )


def shown(value: object, style: str = "") -> Text:
    """``value`` as a rich ``Text``: escaped, and never read as markup."""
    return Text(escaped(value), style=style)


def escaped_lines(text: str) -> str:
    """Several lines of text, each escaped: the line breaks stay, nothing else does."""
    return "\n".join(escaped(line) for line in text.split("\n"))
