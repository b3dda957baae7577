"""Vendor knowledge as data: which names mean what, for every source format.

Importers and analyses look names up here instead of carrying their own regexes, so that a new
runtime or framework version is one line in one table.
"""

from __future__ import annotations

from typing import Final

# Host operators that block until the device drains (a synchronisation point when the trace
# records no runtime sync call for them): `.item()` and friends.
HOST_SYNC_OPS: Final = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::nonzero",
    }
)

# Host annotations of the optimizer phase (torch.optim writes these record_function names).
OPTIMIZER_PREFIXES: Final = (
    "Optimizer.step#",
    "Optimizer.zero_grad#",
)

# Host operators run by the autograd engine during the backward pass.
BACKWARD_PREFIXES: Final = ("autograd::engine::evaluate_function:",)
