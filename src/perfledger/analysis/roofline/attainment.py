"""Where operators sit against a device's roofline: memory- or compute-bound, the shortest time
the device allows them, and the rates their measured time achieved."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Roofline:
    """Where each operator sits against a device's roofline (arrays aligned with the input).

    Attributes:
        intensity: flops per byte.
        ridge: the intensity where the device turns compute-bound, for each op's precision.
        memory_bound: intensity below the ridge.
        bound_ns: the shortest time the device allows, max(flops / peak, bytes / bandwidth).
        achieved_flops_per_ns, achieved_bytes_per_ns: what the measured time gives.
    """

    intensity: FloatArray
    ridge: FloatArray
    memory_bound: BoolArray
    bound_ns: FloatArray
    achieved_flops_per_ns: FloatArray
    achieved_bytes_per_ns: FloatArray


def roofline(
    flops: npt.ArrayLike,
    nbytes: npt.ArrayLike,
    time_ns: npt.ArrayLike,
    peak_flops_per_ns: npt.ArrayLike,
    bytes_per_ns: float,
) -> Roofline:
    """Place operators on the roofline of a device (vectorised over operators).

    ``peak_flops_per_ns`` may differ per operator (its math precision).
    """
    flops_a = np.asarray(flops, dtype=np.float64)
    bytes_a = np.asarray(nbytes, dtype=np.float64)
    time_a = np.asarray(time_ns, dtype=np.float64)
    peak = np.broadcast_to(np.asarray(peak_flops_per_ns, dtype=np.float64), flops_a.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(bytes_a > 0, flops_a / bytes_a, np.where(flops_a > 0, np.inf, 0.0))
        ridge = peak / bytes_per_ns
        bound_ns = np.maximum(flops_a / peak, bytes_a / bytes_per_ns)
        achieved_flops = np.where(time_a > 0, flops_a / time_a, np.nan)
        achieved_bytes = np.where(time_a > 0, bytes_a / time_a, np.nan)
    return Roofline(
        intensity=intensity,
        ridge=ridge,
        memory_bound=intensity < ridge,
        bound_ns=bound_ns,
        achieved_flops_per_ns=achieved_flops,
        achieved_bytes_per_ns=achieved_bytes,
    )
