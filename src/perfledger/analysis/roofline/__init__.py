"""FLOPs and bytes of an operator from its input shapes and types, and where it sits on a roofline.

- :mod:`~perfledger.analysis.roofline.families`: which family (matmul, convolution, attention,
  elementwise ...) an operator name belongs to;
- :mod:`~perfledger.analysis.roofline.arguments`: the recorded shapes and types read as tensors,
  their element sizes and math precision;
- :mod:`~perfledger.analysis.roofline.estimates`: the least work of an operator call (flops,
  bytes read and written), one formula per family, op by op or for a whole table;
- :mod:`~perfledger.analysis.roofline.attainment`: operators placed on a device's roofline.
"""

from __future__ import annotations

from perfledger.analysis.roofline.arguments import (
    DTYPE_SIZES,
    Argument,
    Shape,
    Tensor,
    dtype_size,
    is_packed_layout,
    parse_arguments,
    precision_of,
)
from perfledger.analysis.roofline.attainment import Roofline, roofline
from perfledger.analysis.roofline.estimates import (
    ATTENTION_BACKWARD_FACTOR,
    ESTIMATES_SCHEMA,
    NORMALIZATION_FLOPS_PER_ELEMENT,
    OpCost,
    estimate_op,
    estimate_table,
)
from perfledger.analysis.roofline.families import (
    ATTENTION,
    CONV,
    DATA_MOVEMENT_FAMILIES,
    ELEMENTWISE,
    FAMILIES,
    FILL,
    GATHER,
    LAYOUT,
    MATMUL,
    NORMALIZATION,
    REDUCTION,
    VIEW,
    op_family,
    op_key,
)

__all__ = [
    "ATTENTION",
    "ATTENTION_BACKWARD_FACTOR",
    "CONV",
    "DATA_MOVEMENT_FAMILIES",
    "DTYPE_SIZES",
    "ELEMENTWISE",
    "ESTIMATES_SCHEMA",
    "FAMILIES",
    "FILL",
    "GATHER",
    "LAYOUT",
    "MATMUL",
    "NORMALIZATION",
    "NORMALIZATION_FLOPS_PER_ELEMENT",
    "REDUCTION",
    "VIEW",
    "Argument",
    "OpCost",
    "Roofline",
    "Shape",
    "Tensor",
    "dtype_size",
    "estimate_op",
    "estimate_table",
    "is_packed_layout",
    "op_family",
    "op_key",
    "parse_arguments",
    "precision_of",
    "roofline",
]
