"""Run-to-run noise: per-step sample statistics and the band a change must leave to be real.

A change is *within noise* when |current - base| is at most the noise band:
max(z x SE, floor), where SE = sqrt(s_b^2 / n_b + s_c^2 / n_c) from the per-step samples
(s = 1.2533 x 1.4826 x MAD for a median, the sample standard deviation for a mean). With a
single sample on one side, that side borrows the other's spread; with one sample on both the
band is the floor alone. The floor (1 % of the base for relative figures, 0.5 percentage point
for shares by default) keeps identical steps from calling a 0.1 % change real.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

MAD_TO_SIGMA: Final = 1.4826  # MAD of a normal sample times this estimates its sigma
MEDIAN_EFFICIENCY: Final = 1.2533  # standard error of a median over that of a mean, normal data


@dataclass(frozen=True)
class DiffOptions:
    """How strict the noise test is and how many rows the tables keep."""

    noise_z: float = 2.0
    noise_floor_pct: float = 1.0
    noise_floor_pp: float = 0.5
    top_movers: int = 15


@dataclass(frozen=True)
class Distribution:
    """Per-step samples of one figure in one run."""

    count: int
    median: float | None
    p90: float | None
    mean: float | None
    spread_pct: float | None  # 1.4826 x MAD / median, in %


@dataclass(frozen=True)
class Change:
    """One figure in both runs, in its own unit (ms, %, count ...).

    ``delta`` is current - base; ``change_pct`` is delta relative to base (None when base is
    0 or unknown); ``noise`` is the half-width of the noise band in the figure's unit;
    ``within_noise`` is None when either run lacks the figure.
    """

    base: float | None
    current: float | None
    delta: float | None
    change_pct: float | None
    noise: float | None
    within_noise: bool | None


NO_CHANGE: Final = Change(None, None, None, None, None, None)  # a figure neither run has


def distribution(samples: FloatArray) -> Distribution:
    """Median, p90, mean and robust spread of per-step samples."""
    if samples.size == 0:
        return Distribution(0, None, None, None, None)
    median = float(np.median(samples))
    mad = float(np.median(np.abs(samples - median)))
    spread = 100.0 * MAD_TO_SIGMA * mad / median if median > 0 else None
    return Distribution(
        count=int(samples.size),
        median=median,
        p90=float(np.percentile(samples, 90)),
        mean=float(samples.mean()),
        spread_pct=spread,
    )


def _sigma(samples: FloatArray, *, robust: bool) -> float | None:
    if samples.size < 2:
        return None
    if robust:
        median = np.median(samples)
        return float(MEDIAN_EFFICIENCY * MAD_TO_SIGMA * np.median(np.abs(samples - median)))
    return float(samples.std(ddof=1))


def noise_band(base: FloatArray, current: FloatArray, *, robust: bool, z: float) -> float | None:
    """z standard errors of the difference of the two estimates (None: no spread known)."""
    sigma_b, sigma_c = _sigma(base, robust=robust), _sigma(current, robust=robust)
    if sigma_b is None and sigma_c is None:
        return None
    sigma_b = sigma_c if sigma_b is None else sigma_b
    sigma_c = sigma_b if sigma_c is None else sigma_c
    assert sigma_b is not None and sigma_c is not None
    return z * math.sqrt(sigma_b**2 / base.size + sigma_c**2 / current.size)


def compare(
    base: float | None,
    current: float | None,
    *,
    band: float | None = None,
    floor: float = 0.0,
) -> Change:
    """Two figures compared; ``band`` is the statistical noise, ``floor`` its least width."""
    if base is None or current is None or not (math.isfinite(base) and math.isfinite(current)):
        return Change(base, current, None, None, None, None)
    delta = current - base
    change_pct = 100.0 * delta / base if base != 0 else None
    noise = max(band if band is not None else 0.0, floor)
    return Change(base, current, delta, change_pct, noise, abs(delta) <= noise)


def compare_samples(
    base: FloatArray,
    current: FloatArray,
    *,
    robust: bool,
    options: DiffOptions,
    floor_pp: bool = False,
    value_base: float | None = None,
    value_current: float | None = None,
) -> Change:
    """Compare the median (robust) or mean of two sample sets, with their noise band.

    ``value_base`` and ``value_current`` replace the centre of the samples where the figure
    has its own definition (a share of the summed walls rather than a mean of shares).
    """
    if base.size == 0 or current.size == 0:
        return Change(value_base, value_current, None, None, None, None)
    centre = np.median if robust else np.mean
    b = float(centre(base)) if value_base is None else value_base
    c = float(centre(current)) if value_current is None else value_current
    floor = options.noise_floor_pp if floor_pp else abs(b) * options.noise_floor_pct / 100.0
    band = noise_band(base, current, robust=robust, z=options.noise_z)
    return compare(b, c, band=band, floor=floor)
