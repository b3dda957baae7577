"""Short names of device kernels for titles and tables: what a reader recognises of a demangled
C++ name.

A PyTorch kernel's demangled name runs to hundreds of characters of template arguments and
parameter types (``void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_
cuda(at::TensorIteratorBase&)::{lambda()#3}..., std::array<char*, 2ul>, 4, ...>(int, ...)``).
Its short name is the function's own name and, for a template, the first template argument that
names something (a functor or a kernel body), each without namespaces or arguments:
``unrolled_elementwise_kernel<direct_copy_kernel_cuda>``. Names that are not C++ signatures
(``nvjet_sm90_tst_256x128_...``, ``triton_poi_fused_add_0``, ``aten::mm``) stay as they are.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

# A name longer than this is cut, with an ellipsis, after shortening.
SHORT_NAME_CHARS: Final = 80
_RETURN_TYPE: Final = re.compile(r"^(?:void|int|float|bool)\s+")
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Template arguments that name a type or a value, not what the kernel does.
_NOT_NAMES: Final = frozenset(
    {"unsigned", "long", "int", "float", "double", "bool", "char", "half", "true", "false"}
)


def _base(text: str) -> str:
    """A qualified name without its namespaces, template arguments or parameters."""
    head = re.split(r"[<(]", text, maxsplit=1)[0].strip()
    last = head.rsplit("::", 1)[-1].strip()
    return last if _IDENTIFIER.fullmatch(last) else ""


def _template_arguments(text: str, opening: int) -> list[str]:
    """The top-level arguments of the template whose ``<`` is at ``opening``."""
    arguments: list[str] = []
    depth, start = 0, opening + 1
    for i in range(opening, len(text)):
        char = text[i]
        if char in "<([{":
            depth += 1
        elif char in ">)]}":
            depth -= 1
            if depth == 0:
                arguments.append(text[start:i])
                return arguments
        elif char == "," and depth == 1:
            arguments.append(text[start:i])
            start = i + 1
    arguments.append(text[start:])
    return arguments


@lru_cache(maxsize=4096)
def short_kernel_name(name: str) -> str:
    """The short name of a kernel (see the module doc)."""
    stripped = name.strip()
    text = _RETURN_TYPE.sub("", stripped).replace("(anonymous namespace)::", "")
    head = re.split(r"[<(]", text, maxsplit=1)[0]
    if ("<" not in text and "(" not in text) or (text == stripped and "::" not in head):
        # no C++ signature (a return type, or a qualified name before its arguments): an
        # operator's, an annotation's or a generated kernel's own name
        return _cut(stripped)
    function = _base(text)
    if not function:
        return _cut(text)
    angle, paren = text.find("<"), text.find("(")
    if angle < 0 or (0 <= paren < angle):
        return _cut(function)
    for argument in _template_arguments(text, angle):
        inner = _base(argument.strip())
        if inner and inner not in _NOT_NAMES:
            return _cut(f"{function}<{inner}>")
    return _cut(function)


def _cut(text: str) -> str:
    return text if len(text) <= SHORT_NAME_CHARS else text[: SHORT_NAME_CHARS - 1] + "…"
