"""Ascend vendor knowledge as data: task types, CANN API names, column names and units.

The Ascend importers (``perfledger.sources.ascend*``) look everything up here, so that a new CANN
or torch_npu version is a line in a table, not a new branch in the code. Facts come from the
files torch_npu and msprof write (see docs/formats.md).
"""

from __future__ import annotations

from typing import Final

# --- device tasks -------------------------------------------------------------------------------

# Hardware task types that are computation (counted as `kernel`). The text timeline writes the
# scheduler's type (AI_CORE even for vector kernels); the databases write KERNEL_* names.
KERNEL_TASK_TYPES: Final = frozenset(
    {
        "AI_CORE",
        "AI_VECTOR_CORE",
        "AIV",
        "MIX_AIC",
        "MIX_AIV",
        "AI_CPU",
        "AICPU",
        "DSA_SQE",
        "DSA",
        "FFTS_PLUS",
        "KERNEL_AICORE",
        "KERNEL_AIVEC",
        "KERNEL_AICPU",
        "KERNEL_MIX_AIC",
        "KERNEL_MIX_AIV",
    }
)

# Hardware task types that move memory (counted as `memcpy`).
MEMCPY_TASK_TYPES: Final = frozenset(
    {"PCIE_DMA_SQE", "SDMA_SQE", "MEMCPY_ASYNC", "MEMCPY", "ASYNC_MEMCPY"}
)

# Hardware task types that fill memory (counted as `memset`). Ascend framework memsets are
# usually MemSet kernels on the AI cores, which stay kernels (torch_npu counts them as compute).
MEMSET_TASK_TYPES: Final = frozenset({"MEMSET", "MEMSET_ASYNC"})

# Hardware tasks issued by HCCL inside a collective (one collective is dozens of them). They are
# kept as `device_annotation` under their collective; with no collective recorded they are the
# only trace of the communication and become `comm` themselves.
COMM_SUBTASK_TYPES: Final = frozenset(
    {
        "Notify Wait",
        "Notify Record",
        "Notify_Wait",
        "Notify_Record",
        "Write Value",
        "SDMA",
        "RDMA",
        "Memcpy",
        "Reduce Inline",
        "Reduce_Inline",
        "Inline Reduce",
        "Local Copy",
    }
)

# Normalised core type of a kernel when only the hardware task type is known (level 0 data).
CORE_TYPE_OF_TASK_TYPE: Final = {
    "KERNEL_AICORE": "AI_CORE",
    "KERNEL_AIVEC": "AI_VECTOR_CORE",
    "KERNEL_AICPU": "AI_CPU",
    "KERNEL_MIX_AIC": "MIX_AIC",
    "KERNEL_MIX_AIV": "MIX_AIV",
    "AICPU": "AI_CPU",
    "AIV": "AI_VECTOR_CORE",
}

# Core type written for collectives in kernel_details.csv / op_summary.csv.
HCCL_CORE_TYPE: Final = "HCCL"

# Bytes per element of the HCCL data types (collective size = count * element size).
HCCL_DTYPE_BYTES: Final = {
    "INT8": 1,
    "UINT8": 1,
    "INT16": 2,
    "UINT16": 2,
    "FP16": 2,
    "BFP16": 2,
    "BF16": 2,
    "INT32": 4,
    "UINT32": 4,
    "FP32": 4,
    "INT64": 8,
    "UINT64": 8,
    "FP64": 8,
    "INT128": 16,
}

# --- host events --------------------------------------------------------------------------------

# Category of the framework (torch_npu) host events → our kind.
HOST_CATEGORY_KIND: Final = {
    "cpu_op": "cpu_op",
    "python_function": "python",
    "user_annotation": "annotation",
    "enqueue": "annotation",
    "dequeue": "annotation",
    "mstx": "annotation",
}
# torch_npu database PYTORCH_API.type → the category the text timeline writes.
DB_HOST_TYPE_CATEGORY: Final = {
    "op": "cpu_op",
    "trace": "python_function",
    "mstx": "mstx",
}
STEP_PREFIX: Final = "ProfilerStep#"
DATALOADER_PREFIX: Final = "enumerate(DataLoader)"

# CANN API level (database ENUM_API_TYPE name) → the prefix the text timeline writes.
CANN_LEVEL_PREFIX: Final = {
    "acl": "AscendCL",
    "runtime": "Runtime",
    "node": "Node",
    "model": "Model",
    "hccl": "Hccl",
    "pta": "Pta",
    "pytorch": "PyTorch",
}

# CANN calls that block the host until the device drains: `sync` kind (names after the '@').
CANN_SYNC_APIS: Final = frozenset(
    {
        "aclrtSynchronizeStream",
        "aclrtSynchronizeStreamWithTimeout",
        "aclrtSynchronizeDevice",
        "aclrtSynchronizeDeviceWithTimeout",
        "aclrtSynchronizeEvent",
        "aclrtSynchronizeEventWithTimeout",
        "aclrtMemcpy",
        "StreamSynchronize",
        "DeviceSynchronize",
        "EventSynchronize",
        "StreamSyncTaskFinish",
        "MemCopySync",
    }
)

# --- CSV columns ----------------------------------------------------------------------------------

# Canonical column → the header names that carry it, first found wins. Columns are always found
# by header name: the set depends on the profiler level, options and version.
KERNEL_COLUMNS: Final = {
    "name": ("Name", "Op Name"),
    "op_type": ("Type", "OP Type", "Op Type"),
    "core_type": ("Accelerator Core", "Task Type"),
    "start_us": ("Start Time(us)", "Task Start Time(us)"),
    "dur_us": ("Duration(us)", "Task Duration(us)"),
    "wait_us": ("Wait Time(us)", "Task Wait Time(us)"),
    "stream": ("Stream ID", "Stream Id"),
    "task_id": ("Task ID", "Task Id"),
    "context_id": ("Context ID", "Context Id"),
    "device": ("Device_id", "Device ID", "Device Id"),
    "step_id": ("Step Id", "Step ID"),
    "model_id": ("Model ID", "Model Id"),
    "block_dim": ("Block Dim", "Block Num"),
    "mix_block_dim": ("Mix Block Dim", "Mix Block Num"),
    "op_state": ("OP State",),
    "hf32_eligible": ("HF32 Eligible",),
    "input_shapes": ("Input Shapes",),
    "input_dtypes": ("Input Data Types",),
    "input_formats": ("Input Formats",),
    "output_shapes": ("Output Shapes",),
    "output_dtypes": ("Output Data Types",),
    "output_formats": ("Output Formats",),
}
# Columns without which a kernel table cannot be read.
KERNEL_REQUIRED: Final = ("name", "start_us", "dur_us")

# Memory CSV columns and their unit: torch_npu writes MB (MiB), msprof KB (KiB).
MEMORY_RECORD_COLUMNS: Final = {
    "allocated_bytes": ("Total Allocated(MB)", "Total Allocated(KB)"),
    "reserved_bytes": ("Total Reserved(MB)", "Total Reserved(KB)"),
    "active_bytes": ("Total Active(MB)", "Total Active(KB)"),
}
MEMORY_TIME_COLUMNS: Final = ("Timestamp(us)", "Time(us)")
UNIT_BYTES: Final = {"(MB)": 1024 * 1024, "(KB)": 1024, "(B)": 1, "(Byte)": 1, "(GB)": 1024**3}

# Database PMU metric names that differ from the CSV header names of the same counter.
PMU_NAME_ALIASES: Final = {
    "aic_total_time": "aicore_time",
    "aiv_total_time": "aiv_time",
}
