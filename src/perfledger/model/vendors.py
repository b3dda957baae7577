"""Vendor knowledge as data: which names mean what, for every source format.

Importers and analyses look names up here instead of carrying their own regexes, so that a new
runtime or framework version is one line in one table.

Kineto (PyTorch profiler) decisions worth knowing:

- ``cuda_sync`` events ("Stream Sync", "Context Sync", "Stream Wait Event") sit on a device
  stream but are not device work: they mark where a stream waited. They become
  ``device_annotation`` rows (device side, never counted as busy), keeping their correlation
  id, which points at the host call (``cudaStreamSynchronize`` ...) that is the ``sync`` row.
  MTIA's ``event_record`` / ``event_wait`` device events are treated the same way.
- A host runtime call that blocks until the device drains is a ``sync`` row: the stream,
  device, context and event synchronise calls of CUDA, HIP and MTIA, and the blocking copies
  (``cudaMemcpy``, ``hipMemcpy``, ``hipMemcpyWithStream`` ...). Such a row still links to the
  device task it issued (a blocking copy issues a memcpy), because ``sync`` is a launch kind.
- Host operators that wait for the device without a runtime sync call of their own
  (``.item()``) are found by name: :data:`HOST_SYNC_OPS`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from perfledger.model import schema

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

# --- Kineto: categories -------------------------------------------------------------------

# Kineto ``cat`` (compared lower-cased: PyTorch 1.8 wrote ``Kernel``, ``Runtime``, ...) to the
# canonical kind, before the name rules below refine it.
KINETO_CATEGORY_KINDS: Final[Mapping[str, str]] = {
    # host
    "cpu_op": schema.CPU_OP,
    "operator": schema.CPU_OP,  # PyTorch 1.8-1.9
    "python_function": schema.PYTHON,
    "user_annotation": schema.ANNOTATION,
    "cuda_runtime": schema.RUNTIME,
    "cuda_driver": schema.RUNTIME,
    "runtime": schema.RUNTIME,  # PyTorch 1.8-1.9
    "mtia_runtime": schema.RUNTIME,
    "xpu_runtime": schema.RUNTIME,
    "xpu_driver": schema.RUNTIME,
    "privateuse1_runtime": schema.RUNTIME,
    "privateuse1_driver": schema.RUNTIME,
    "glow_runtime": schema.RUNTIME,
    "cpu_instant_event": schema.INSTANT,
    "overhead": schema.ANNOTATION,
    "hpu_op": schema.CPU_OP,
    # device
    "kernel": schema.KERNEL,
    "gpu_memcpy": schema.MEMCPY,
    "memcpy": schema.MEMCPY,  # PyTorch 1.8-1.9
    "gpu_memset": schema.MEMSET,
    "memset": schema.MEMSET,  # PyTorch 1.8-1.9
    "gpu_user_annotation": schema.DEVICE_ANNOTATION,
    "cuda_sync": schema.DEVICE_ANNOTATION,
    "xpu_sync": schema.DEVICE_ANNOTATION,
    "cuda_event": schema.DEVICE_ANNOTATION,
    "cuda_profiler_range": schema.DEVICE_ANNOTATION,
    "mtia_ccp_events": schema.KERNEL,
}

# Categories whose events live on a device (pid = device, tid = stream, args.device/stream).
KINETO_DEVICE_CATEGORIES: Final = frozenset(
    {
        "kernel",
        "gpu_memcpy",
        "memcpy",
        "gpu_memset",
        "memset",
        "gpu_user_annotation",
        "cuda_sync",
        "xpu_sync",
        "cuda_event",
        "cuda_profiler_range",
        "mtia_ccp_events",
    }
)

# Kineto's own bookkeeping: the profiler span ("Trace" on pid "Spans"/"Traces"); not events.
KINETO_SPAN_CATEGORIES: Final = frozenset({"trace"})

# Flow categories that link a host launch (``s``) to the device task it issued (``f``); the
# flow id is the correlation id. Other flows (``fwdbwd``: forward op to backward op) are not
# launches.
KINETO_LAUNCH_FLOW_CATEGORIES: Final = frozenset({"ac2g", "async_gpu", "async_cpu_to_gpu", "async"})

# MTIA command-processor events: which are copies and which only mark a stream's progress.
MTIA_MEMCPY_NAMES: Final = frozenset({"dma_request"})
MTIA_MARKER_NAMES: Final = frozenset({"event_record", "event_wait"})

# --- Kineto: runtime API names --------------------------------------------------------------

# Host calls that block until the device (or one stream, or one event) has drained.
SYNC_RUNTIME: Final = re.compile(
    r"^(?:cuda|hip|cu)(?:Device|Stream|Event|Ctx)Synchronize(?:_v\d+|_ptsz|_ptds)?$"
    # blocking copies: the host returns only when the copy is done
    r"|^(?:cuda|hip)Memcpy(?:2D|3D|Peer|ToSymbol|FromSymbol|WithStream|DtoH|HtoD|DtoD)?"
    r"(?:_v\d+|_ptds)?$"
    r"|^cuMemcpy(?:DtoH|HtoD|DtoD|Peer|2D|3D)?(?:_v\d+)?$"
    # MTIA runtime
    r"|^synchronize(?:Stream|Device|Event)?$"
)

# --- Kineto: name rules ---------------------------------------------------------------------

# Communication kernels (collectives and point-to-point) by name, case-insensitive.
COMM_KERNEL: Final = re.compile(
    r"nccl|rccl|hccl|msccl|gloo|nvshmem|cross_device_reduce"
    r"|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv",
    re.IGNORECASE,
)

# Step annotations: the number after '#' is the step number.
STEP_ANNOTATION: Final = re.compile(r"^ProfilerStep#(\d+)$")

# Data-loader activity on the host (record_function names and Python frames).
DATALOADER_PREFIXES: Final = (
    "enumerate(DataLoader)#",
    "DataLoader.__next__",
    "_SingleProcessDataLoaderIter.__next__",
    "_MultiProcessingDataLoaderIter.__next__",
)
DATALOADER_PYTHON: Final = re.compile(r"torch/utils/data/dataloader\.py\(\d+\): __next__$")

# --- vendor detection -----------------------------------------------------------------------

VENDOR_CUDA: Final = "cuda"
VENDOR_ROCM: Final = "rocm"
VENDOR_MTIA: Final = "mtia"
VENDOR_CPU: Final = "cpu"

# Runtime names and device names that give the vendor away.
ROCM_RUNTIME: Final = re.compile(r"^(?:hip|hsa|roctx|rccl)", re.IGNORECASE)
ROCM_DEVICE_NAMES: Final = re.compile(r"AMD|Radeon|Instinct|MI\d{3}", re.IGNORECASE)
MTIA_CATEGORIES: Final = frozenset({"mtia_runtime", "mtia_ccp_events", "mtia_insight"})

# c10::DeviceType values in the ``Device Type`` arg of ``[memory]`` events.
TORCH_DEVICE_TYPES: Final[Mapping[int, str]] = {
    0: "cpu",
    1: "cuda",
    6: "hip",
    12: "xpu",
    13: "mps",
    15: "hpu",
    19: "mtia",
    20: "privateuse1",
}
