"""Known accelerators and their peaks: what the roofline and the advisor compare a run against.

Figures are the vendors' datasheet peaks for dense math (no structured sparsity), in TFLOP/s
per math precision, memory bandwidth in GB/s (10^9 bytes/s) and the host link (the PCIe
generation and width the board uses, per direction) in GB/s. Real kernels reach 70-90% of
the memory bandwidth and less of the math peak: a roofline built on these numbers is an upper
bound on what the hardware could do, which is what "time above the roofline" needs.

A device is recognised from a trace's metadata: the device name Kineto writes
(``deviceProperties[].name``: "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB"), the memory
size where one name covers several boards, the compute-unit count for AMD parts whose name is
generic ("AMD Radeon Graphics"), and the NPU name torch_npu / msprof write ("Ascend910B").
Unknown devices get no peaks: rules that need them say so instead of guessing. A user can
name a device of this table or give the two peaks directly (:func:`custom_device`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

# Math precisions a peak is given for.
FP64: Final = "fp64"
FP32: Final = "fp32"
TF32: Final = "tf32"
FP16: Final = "fp16"
BF16: Final = "bf16"
FP8: Final = "fp8"
INT8: Final = "int8"
PRECISIONS: Final = (FP64, FP32, TF32, FP16, BF16, FP8, INT8)

# Host links, GB/s per direction (x16 lanes after encoding overhead).
PCIE3_X16: Final = 15.75
PCIE4_X16: Final = 31.5
PCIE5_X16: Final = 63.0


@dataclass(frozen=True)
class DeviceSpec:
    """Peaks of one accelerator model.

    Attributes:
        name: the model, as the table and ``--device-model`` spell it.
        vendor: "nvidia", "amd", "ascend" or "custom".
        peak_tflops: dense peak per precision (keys of :data:`PRECISIONS`); FP32 is the
            non-tensor (vector) rate, TF32/FP16/BF16/FP8 the matrix-unit rates.
        memory_gbps: device memory bandwidth, GB/s.
        host_link_gbps: host-to-device link bandwidth per direction, GB/s (NaN: unknown).
        source: where the figures come from.
    """

    name: str
    vendor: str
    peak_tflops: Mapping[str, float]
    memory_gbps: float
    host_link_gbps: float = math.nan
    source: str = ""
    # Recognition: a regex on the device name, optional memory bounds (bytes) and a
    # compute-unit count (SMs / CUs) when the name alone does not say which board it is.
    pattern: str = field(default="", repr=False)
    min_memory_bytes: int = field(default=0, repr=False)
    max_memory_bytes: int = field(default=0, repr=False)
    units: int = field(default=0, repr=False)

    def peak_flops_per_ns(self, precision: str | None) -> float:
        """Peak FLOP per ns for a math precision (the FP32 rate when the precision is unknown).

        Matrix precisions missing from the table fall back to the nearest one given: FP16 and
        BF16 stand for each other, FP8/INT8 fall back to FP16, TF32 to FP32.
        """
        chain = {
            FP64: (FP64, FP32),
            FP32: (FP32,),
            TF32: (TF32, FP32),
            FP16: (FP16, BF16, FP32),
            BF16: (BF16, FP16, FP32),
            FP8: (FP8, FP16, BF16, FP32),
            INT8: (INT8, FP8, FP16, BF16, FP32),
        }.get(precision or FP32, (FP32,))
        for key in (*chain, *self.peak_tflops):
            value = self.peak_tflops.get(key)
            if value is not None and value > 0:
                return value * 1e3  # TFLOP/s = 1e12 FLOP/s = 1e3 FLOP/ns
        return math.nan

    @property
    def memory_bytes_per_ns(self) -> float:
        """Memory bandwidth in bytes per ns (GB/s and bytes/ns are the same number)."""
        return self.memory_gbps

    def ridge_flops_per_byte(self, precision: str | None) -> float:
        """Arithmetic intensity where the roofline turns from memory- to compute-bound."""
        return self.peak_flops_per_ns(precision) / self.memory_gbps

    def to_dict(self) -> dict[str, Any]:
        """JSON-able figures (for evidence and the rules table)."""
        return {
            "name": self.name,
            "vendor": self.vendor,
            "peak_tflops": dict(self.peak_tflops),
            "memory_gbps": self.memory_gbps,
            "host_link_gbps": None if math.isnan(self.host_link_gbps) else self.host_link_gbps,
            "source": self.source,
        }


_GB = 1024**3
_NVIDIA = "NVIDIA datasheet"
_AMD = "AMD datasheet"
_HUAWEI = "Huawei Atlas datasheet"

KNOWN_DEVICES: Final[tuple[DeviceSpec, ...]] = (
    # NVIDIA, newest first so that "H100" does not catch "H100 NVL" before its own row.
    DeviceSpec(
        "H200-SXM",
        "nvidia",
        {FP64: 34.0, FP32: 67.0, TF32: 494.7, FP16: 989.4, BF16: 989.4, FP8: 1978.9},
        4800.0,
        PCIE5_X16,
        _NVIDIA,
        pattern=r"(?<!G)H200",
    ),
    DeviceSpec(
        "H100-NVL",
        "nvidia",
        {FP64: 30.0, FP32: 60.0, TF32: 417.5, FP16: 835.5, BF16: 835.5, FP8: 1670.5},
        3900.0,
        PCIE5_X16,
        _NVIDIA,
        pattern=r"H100\s*NVL",
    ),
    DeviceSpec(
        "H100-PCIe",
        "nvidia",
        {FP64: 26.0, FP32: 51.0, TF32: 378.0, FP16: 756.5, BF16: 756.5, FP8: 1513.0},
        2000.0,
        PCIE5_X16,
        _NVIDIA,
        pattern=r"H100.*PCIe",
    ),
    DeviceSpec(
        "H100-SXM",
        "nvidia",
        {FP64: 34.0, FP32: 67.0, TF32: 494.7, FP16: 989.4, BF16: 989.4, FP8: 1978.9},
        3350.0,
        PCIE5_X16,
        _NVIDIA,
        pattern=r"H100",
    ),
    DeviceSpec(
        "A100-80GB-PCIe",
        "nvidia",
        {FP64: 9.7, FP32: 19.5, TF32: 156.0, FP16: 312.0, BF16: 312.0, INT8: 624.0},
        1935.0,
        PCIE4_X16,
        _NVIDIA,
        pattern=r"A100.*PCIe",
        min_memory_bytes=60 * _GB,
    ),
    DeviceSpec(
        "A100-80GB",
        "nvidia",
        {FP64: 9.7, FP32: 19.5, TF32: 156.0, FP16: 312.0, BF16: 312.0, INT8: 624.0},
        2039.0,
        PCIE4_X16,
        _NVIDIA,
        pattern=r"A100",
        min_memory_bytes=60 * _GB,
    ),
    DeviceSpec(
        "A100-40GB",
        "nvidia",
        {FP64: 9.7, FP32: 19.5, TF32: 156.0, FP16: 312.0, BF16: 312.0, INT8: 624.0},
        1555.0,
        PCIE4_X16,
        _NVIDIA,
        pattern=r"A100",
    ),
    DeviceSpec(
        "L40S",
        "nvidia",
        {FP32: 91.6, TF32: 183.0, FP16: 362.05, BF16: 362.05, FP8: 733.0},
        864.0,
        PCIE4_X16,
        _NVIDIA,
        pattern=r"L40S",
    ),
    DeviceSpec(
        "L4",
        "nvidia",
        {FP32: 30.3, TF32: 60.0, FP16: 121.0, BF16: 121.0, FP8: 242.5},
        300.0,
        PCIE4_X16,
        _NVIDIA,
        pattern=r"\bL4\b",
    ),
    DeviceSpec(
        "A10",
        "nvidia",
        {FP32: 31.2, TF32: 62.5, FP16: 125.0, BF16: 125.0},
        600.0,
        PCIE4_X16,
        _NVIDIA,
        pattern=r"\bA10\b",
    ),
    DeviceSpec(
        "T4",
        "nvidia",
        {FP32: 8.1, FP16: 65.0, INT8: 130.0},
        320.0,
        PCIE3_X16,
        _NVIDIA,
        pattern=r"\bT4\b",
    ),
    DeviceSpec(
        "V100-PCIe",
        "nvidia",
        {FP64: 7.0, FP32: 14.0, FP16: 112.0},
        900.0,
        PCIE3_X16,
        _NVIDIA,
        pattern=r"V100.*PCIE",
    ),
    DeviceSpec(
        # SXM2 and DGX Station (DGXS) boards run the same clocks.
        "V100-SXM2",
        "nvidia",
        {FP64: 7.8, FP32: 15.7, FP16: 125.0},
        900.0,
        PCIE3_X16,
        _NVIDIA,
        pattern=r"V100",
    ),
    # AMD. Kineto sees each graphics compute die (GCD) of an MI250/MI250X as one device with
    # the die's half of the package's peaks; the name is generic, the CU count tells them apart.
    DeviceSpec(
        "MI300X",
        "amd",
        {FP64: 81.7, FP32: 163.4, TF32: 653.7, FP16: 1307.4, BF16: 1307.4, FP8: 2614.9},
        5300.0,
        PCIE5_X16,
        _AMD,
        pattern=r"MI300X",
        units=304,
    ),
    DeviceSpec(
        "MI250X-GCD",
        "amd",
        {FP64: 23.95, FP32: 23.95, FP16: 191.5, BF16: 191.5},
        1638.4,
        PCIE4_X16,
        _AMD + " (one of two dies)",
        pattern=r"MI250X",
        units=110,
    ),
    DeviceSpec(
        "MI250-GCD",
        "amd",
        {FP64: 22.65, FP32: 22.65, FP16: 181.05, BF16: 181.05},
        1638.4,
        PCIE4_X16,
        _AMD + " (one of two dies)",
        pattern=r"MI250\b",
        units=104,
    ),
    # Huawei Ascend: one number per board is published (FP16 cube rate, HBM bandwidth).
    DeviceSpec(
        "Ascend910B",
        "ascend",
        {FP16: 313.0, BF16: 313.0},
        1600.0,
        PCIE5_X16,
        _HUAWEI + " (Atlas 800T A2, 910B3)",
        pattern=r"Ascend\s*910\s*B",
    ),
    DeviceSpec(
        "Ascend910",
        "ascend",
        {FP16: 256.0},
        1228.0,
        PCIE4_X16,
        _HUAWEI,
        pattern=r"Ascend\s*910",
    ),
)


# The device-to-device link, GB/s per direction, as NVIDIA publishes it (NVLink: half the
# total bidirectional figure): the ceiling of a collective's bus bandwidth between devices of
# one host. Other devices are left out until their figure is sourced.
PEER_LINK_GBPS: Final[Mapping[str, float]] = {
    "H200-SXM": 450.0,
    "H100-SXM": 450.0,
    "H100-NVL": 300.0,
    "A100-80GB": 300.0,
    "A100-40GB": 300.0,
    "V100-SXM2": 150.0,
}


def peer_link_gbps(spec: DeviceSpec | None) -> float:
    """The device-to-device link bandwidth per direction of a device, GB/s (NaN: unknown)."""
    if spec is None:
        return math.nan
    return PEER_LINK_GBPS.get(spec.name, math.nan)


def find_device(name: str) -> DeviceSpec | None:
    """The table row named ``name`` (case-insensitive, '-' '_' and spaces ignored)."""
    wanted = _squash(name)
    for spec in KNOWN_DEVICES:
        if _squash(spec.name) == wanted:
            return spec
    return None


def match_device(
    name: str | None, *, memory_bytes: int | None = None, units: int | None = None
) -> DeviceSpec | None:
    """The first table row whose pattern, memory bounds and unit count fit a device."""
    for spec in KNOWN_DEVICES:
        by_name = bool(name) and bool(re.search(spec.pattern, name or "", re.IGNORECASE))
        # A generic AMD name ("AMD Radeon Graphics") is recognised by its compute units.
        by_units = (
            spec.vendor == "amd"
            and spec.units > 0
            and units == spec.units
            and bool(re.search(r"AMD|Radeon|Instinct", name or "", re.IGNORECASE))
        )
        if not (by_name or by_units):
            continue
        if (
            memory_bytes is not None
            and spec.min_memory_bytes
            and memory_bytes < spec.min_memory_bytes
        ):
            continue
        if (
            memory_bytes is not None
            and spec.max_memory_bytes
            and memory_bytes > spec.max_memory_bytes
        ):
            continue
        return spec
    return None


def device_from_meta(meta: Mapping[str, Any]) -> DeviceSpec | None:
    """The device a trace ran on, from its metadata (None when unknown or not in the table).

    Kineto: ``device_properties`` is a list of ``{name, totalGlobalMem, numSms, ...}``;
    Ascend importers: ``{"name": "Ascend910B", "npu": {...}}``.
    """
    properties = meta.get("device_properties")
    entries: Sequence[Any]
    if isinstance(properties, Mapping):
        entries = [properties]
    elif isinstance(properties, Sequence) and not isinstance(properties, str):
        entries = properties
    else:
        return None
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("name")
        memory = entry.get("totalGlobalMem")
        units = entry.get("numSms")
        spec = match_device(
            str(name) if name is not None else None,
            memory_bytes=int(memory) if isinstance(memory, (int, float)) else None,
            units=int(units) if isinstance(units, (int, float)) else None,
        )
        if spec is not None:
            return spec
    return None


def custom_device(
    peak_tflops: float,
    memory_gbps: float,
    *,
    base: DeviceSpec | None = None,
    host_link_gbps: float | None = None,
) -> DeviceSpec:
    """A device given by its peaks (user override); ``peak_tflops`` applies to every precision.

    With ``base``, only the given figures replace the base device's.
    """
    if base is not None and (math.isnan(peak_tflops) or peak_tflops <= 0):
        peaks: Mapping[str, float] = dict(base.peak_tflops)
    else:
        peaks = dict.fromkeys(PRECISIONS, float(peak_tflops))
    if base is not None and (math.isnan(memory_gbps) or memory_gbps <= 0):
        memory_gbps = base.memory_gbps
    link = (
        host_link_gbps
        if host_link_gbps is not None
        else (base.host_link_gbps if base is not None else math.nan)
    )
    return DeviceSpec(
        name=f"{base.name} (override)" if base is not None else "custom",
        vendor=base.vendor if base is not None else "custom",
        peak_tflops=peaks,
        memory_gbps=float(memory_gbps),
        host_link_gbps=float(link),
        source="user override",
    )


def _squash(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text).lower()
