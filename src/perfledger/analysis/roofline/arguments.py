"""An operator's arguments from the shapes and types profilers record.

PyTorch's ``Input Dims`` / ``Input type`` (``shapes`` ``[[32, 3, 224, 224], [64, 3, 7, 7], []]``,
``dtypes`` ``["float", "float", ""]``) and Ascend's ``Input Shapes`` / ``Input Data Types``
(``"32,3,224,224;64,3,7,7;"``, ``"FLOAT;FLOAT;"``) become tensors with their element sizes and
math precision; the storage layout an Ascend ``Input Formats`` cell names tells whether the
shapes are the logical ones.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from perfledger.model import devices

Shape = tuple[int, ...]

# Element sizes, keyed by the lower-cased type names PyTorch (``Input type``), torch_npu and
# msprof write.
DTYPE_SIZES: Final[Mapping[str, int]] = {
    "float": 4,
    "float32": 4,
    "torch.float32": 4,
    "fp32": 4,
    "dt_float": 4,
    "double": 8,
    "float64": 8,
    "dt_double": 8,
    "c10::half": 2,
    "half": 2,
    "float16": 2,
    "fp16": 2,
    "dt_float16": 2,
    "c10::bfloat16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "dt_bf16": 2,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
    "c10::float8_e4m3fnuz": 1,
    "c10::float8_e5m2fnuz": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "hifloat8": 1,
    "long int": 8,
    "long": 8,
    "int64": 8,
    "dt_int64": 8,
    "unsigned long": 8,
    "uint64": 8,
    "int": 4,
    "int32": 4,
    "dt_int32": 4,
    "unsigned int": 4,
    "uint32": 4,
    "short int": 2,
    "short": 2,
    "int16": 2,
    "uint16": 2,
    "signed char": 1,
    "int8": 1,
    "dt_int8": 1,
    "unsigned char": 1,
    "uint8": 1,
    "dt_uint8": 1,
    "bool": 1,
    "dt_bool": 1,
    "c10::complex<float>": 8,
    "complex64": 8,
    "c10::complex<double>": 16,
    "complex128": 16,
}
# Math precision of a type (for the peak to compare with).
_PRECISION: Final[Mapping[str, str]] = {
    **dict.fromkeys(("float", "float32", "torch.float32", "fp32", "dt_float"), devices.FP32),
    **dict.fromkeys(("double", "float64", "dt_double"), devices.FP64),
    **dict.fromkeys(("c10::half", "half", "float16", "fp16", "dt_float16"), devices.FP16),
    **dict.fromkeys(("c10::bfloat16", "bfloat16", "bf16", "dt_bf16"), devices.BF16),
    **dict.fromkeys(
        (
            "c10::float8_e4m3fn",
            "c10::float8_e5m2",
            "c10::float8_e4m3fnuz",
            "c10::float8_e5m2fnuz",
            "float8_e4m3fn",
            "float8_e5m2",
            "hifloat8",
        ),
        devices.FP8,
    ),
    **dict.fromkeys(("signed char", "int8", "dt_int8"), devices.INT8),
}

# Storage layouts of Ascend tensors whose shapes are not the logical ones (5-D and fractal
# formats): matmul and convolution formulas cannot use them.
_PACKED_FORMATS: Final = re.compile(r"NC1HWC0|FRACTAL|C1HWNCOC0|NDC1HWC0|FRACTAL_NZ", re.I)


@dataclass(frozen=True)
class Tensor:
    """One tensor argument: its shape and element type (None when not recorded)."""

    shape: Shape
    dtype: str | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def size(self) -> int | None:
        """Bytes per element, or None when the type is unknown."""
        return dtype_size(self.dtype)


Argument = Tensor | tuple[Tensor, ...] | None  # a tensor, a tensor list, or not a tensor


# PyTorch writes the type of a non-tensor argument capitalised ("Int", "Bool", "Double"),
# a tensor's element type in lower case ("int", "bool", "double"): the case matters there.
_SCALAR_TYPES: Final = frozenset(
    {"Int", "Bool", "Double", "Float", "Long", "Complex", "SymInt", "Scalar", "String"}
)


def dtype_size(dtype: str | None) -> int | None:
    """Bytes per element of a recorded type name, or None when it is not a tensor type."""
    if dtype is None or dtype.strip() in _SCALAR_TYPES:
        return None
    return DTYPE_SIZES.get(dtype.strip().lower())


def precision_of(dtype: str | None) -> str | None:
    """The math precision of a recorded type name (None for integer and unknown types)."""
    if dtype is None:
        return None
    return _PRECISION.get(dtype.strip().lower())


def parse_arguments(shapes: str | None, dtypes: str | None) -> tuple[Argument, ...] | None:
    """The positional arguments of an operator from its recorded shapes and types.

    Accepts PyTorch's JSON lists and Ascend's ``;``-separated text. Returns None when the
    shapes are missing or unreadable.
    """
    if shapes is None:
        return None
    text = shapes.strip()
    if not text or text.upper() in ("NULL", "N/A"):
        return None
    types = _parse_dtypes(dtypes)
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            return None
        if not isinstance(parsed, list):
            return None
        return tuple(
            _json_argument(item, types[i] if i < len(types) else None)
            for i, item in enumerate(parsed)
        )
    arguments: list[Argument] = []
    for i, part in enumerate(text.split(";")):
        dtype = types[i] if i < len(types) else None
        part = part.strip().strip('"')
        if not part:
            arguments.append(None)
            continue
        try:
            dims = tuple(int(d) for d in part.split(","))
        except ValueError:
            return None
        arguments.append(Tensor(dims, dtype if dtype_size(dtype) else None))
    return tuple(arguments)


def _parse_dtypes(dtypes: str | None) -> list[str | None]:
    if dtypes is None:
        return []
    text = dtypes.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            return []
        return (
            [str(d) if d is not None else None for d in parsed] if isinstance(parsed, list) else []
        )
    return [part.strip().strip('"') or None for part in text.split(";")]


def _is_dims(item: object) -> bool:
    return isinstance(item, list) and all(isinstance(d, int) for d in item)


def _json_argument(item: object, dtype: str | None) -> Argument:
    known = dtype if dtype_size(dtype) else None
    if not isinstance(item, list):
        return None
    if _is_dims(item):
        dims = tuple(int(d) for d in item)
        if not dims and known is None:
            return None  # a scalar or an absent argument, not a 0-d tensor
        return Tensor(dims, known)
    if item and all(_is_dims(x) for x in item):
        # a tensor list: its element type is written once as "TensorList", so unknown
        return tuple(Tensor(tuple(int(d) for d in x), None) for x in item)
    return None


def is_packed_layout(formats: str | None) -> bool:
    """Whether an Ascend ``Input Formats`` cell names a 5-D or fractal storage layout."""
    return bool(formats) and _PACKED_FORMATS.search(formats or "") is not None
