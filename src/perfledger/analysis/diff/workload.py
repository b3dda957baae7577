"""What a run computes (its workload), whether two runs compute the same thing, and how many
samples one step processes.

A run's workload is the program it ran, the device it ran on and the operators it executed.
Two runs are the *same workload* when none of the parts known on both sides differ:

- **program** — the script of a recorded command (``python train.py --lr 0.1`` is
  ``train.py``), ``-m MODULE``, else the command's executable. The program's *arguments are not
  part of the workload*: changing them is the experiment the baseline table measures (more
  data-loader workers, another bucket size, a larger batch — step times of different batch
  sizes are compared per sample by ``perfledger diff --per-sample``). ``analyze`` runs have no
  program.
- **device** — the accelerator's vendor (cuda, rocm, ascend ...) and device names of the trace
  (``cpu`` for host-only runs): a step time on another device is another workload.
- **operators** — the distinct operator names (device tasks, or host operators of a CPU run):
  at least :data:`SAME_OPERATORS` of the names of both runs together in common (Jaccard). A
  data-loader fix, a fused optimizer or another batch size keep most names; another model keeps
  few. The distinct kernel names count too, where both runs have kernels: the same kernels
  replayed from a CUDA graph have no operator that launched them (the graph's launch is no
  operator), and the better of the two shares decides. Names are kept as short digests, so
  that the ledger stays small.

The batch size is the first dimension of the input of the loss of each step, else (a run
without a loss) of the first model layer (convolution, linear, matrix product, embedding,
normalisation), read from the operators' recorded input shapes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SAME_OPERATORS: Final = 0.5
DIGEST_BYTES: Final = 6

# Model layers whose input holds the batch in its first dimension: op name -> (index of that
# input among the op's inputs, least number of dimensions it must have to be a batch).
BATCH_INPUTS: Final[Mapping[str, tuple[int, int]]] = {
    **{
        f"aten::{name}": (0, 3)
        for name in (
            "conv1d",
            "conv2d",
            "conv3d",
            "convolution",
            "_convolution",
            "cudnn_convolution",
            "mkldnn_convolution",
            "miopen_convolution",
        )
    },
    "aten::linear": (0, 2),
    "aten::matmul": (0, 2),
    "aten::bmm": (0, 3),
    "aten::addmm": (1, 2),  # addmm(bias, input, weight)
    "aten::embedding": (1, 1),  # embedding(weight, indices)
    "aten::layer_norm": (0, 2),
    "aten::batch_norm": (0, 2),
    "aten::group_norm": (0, 2),
}
# Losses: their first input holds one row per sample (per token, when a sequence model
# flattens its logits to [batch x tokens, vocabulary]).
LOSS_INPUTS: Final[Mapping[str, tuple[int, int]]] = {
    f"aten::{name}": (0, 1)
    for name in (
        "cross_entropy_loss",
        "nll_loss",
        "nll_loss_nd",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
    )
}
_PYTHON: Final = ("python", "pypy")


@dataclass(frozen=True)
class Workload:
    """The workload of one run; a part that is unknown is None (or no operators).

    Attributes:
        program: the script relative to the project's root (absolute outside it),
            ``-m MODULE``, or the executable's name.
        device: the device names, comma-separated; ``cpu`` for a host-only run.
        vendor: the accelerator vendors the importers recognised (``cuda``, ``rocm``,
            ``ascend`` ...), comma-separated; ``cpu`` for a host-only run.
        operators: digests of the distinct operator names (:func:`operator_digests`).
        kernels: digests of the distinct kernel names (:func:`kernel_names`).
        program_as_typed: the program is the script as the command typed it (not resolved
            against the working folder: a record kept before the ledger resolved it).
    """

    program: str | None = None
    device: str | None = None
    operators: frozenset[str] = frozenset()
    program_as_typed: bool = False
    vendor: str | None = None
    kernels: frozenset[str] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        """The JSON form the ledger keeps."""
        return {
            "program": self.program,
            "vendor": self.vendor,
            "device": self.device,
            "operators": sorted(self.operators),
            "kernels": sorted(self.kernels),
        }

    @staticmethod
    def from_dict(document: Mapping[str, Any]) -> Workload:
        """Read :meth:`as_dict`'s form back (unknown keys ignored)."""
        program, device = document.get("program"), document.get("device")
        vendor = document.get("vendor")
        operators = document.get("operators")
        digests = frozenset(map(str, operators)) if isinstance(operators, list) else frozenset()
        kernels = document.get("kernels")
        return Workload(
            program=str(program) if program is not None else None,
            device=str(device) if device is not None else None,
            operators=digests,
            vendor=str(vendor) if vendor is not None else None,
            kernels=frozenset(map(str, kernels)) if isinstance(kernels, list) else frozenset(),
        )

    def describe(self) -> str:
        """A short name for tables: program and device (else vendor)."""
        program = PurePath(self.program).name if self.program else "trace"
        if self.program and self.program.startswith("-m "):
            program = self.program
        where = self.device or self.vendor
        return f"{program} · {where}" if where else program


def operator_digests(names: Iterable[str | None]) -> frozenset[str]:
    """Short digests of distinct operator names (empty names left out)."""
    return frozenset(
        hashlib.blake2b(name.encode(), digest_size=DIGEST_BYTES).hexdigest()
        for name in set(names)
        if name
    )


def program_of(
    command: Sequence[str], working_dir: Path | None = None, root: Path | None = None
) -> str | None:
    """The program of a recorded command: its first ``.py`` word, ``-m MODULE`` after a
    Python interpreter, else the executable's name (None for an empty command).

    With ``working_dir`` the script is resolved against it and written relative to ``root``
    (the project's root) when inside it, so that runs launched from different folders of a
    project name their script alike.
    """
    words = [str(word) for word in command]
    if not words:
        return None
    for word in words:
        if word.endswith(".py"):
            return _script(word, working_dir, root)
    for index, word in enumerate(words[:-1]):
        if word == "-m" and _is_python(words[0]):
            return f"-m {words[index + 1]}"
    return PurePath(words[0]).name


def _is_python(executable: str) -> bool:
    return PurePath(executable).name.startswith(_PYTHON)


def _script(word: str, working_dir: Path | None, root: Path | None) -> str:
    if working_dir is None:
        return os.path.normpath(word)
    path = Path(os.path.normpath(working_dir / word))
    if root is not None:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            pass
    return path.as_posix()


def device_of(meta: Mapping[str, Any], *, host_only: bool) -> str | None:
    """The device names of a run (meta.json's recorder devices and ranks' device properties),
    ``cpu`` for a host-only run, None when unknown."""
    names: list[str] = []
    devices = meta.get("devices")
    if isinstance(devices, list):
        names += [str(d["name"]) for d in devices if isinstance(d, Mapping) and d.get("name")]
    ranks = meta.get("ranks")
    if isinstance(ranks, Mapping):
        for rank in ranks.values():
            properties = rank.get("device_properties") if isinstance(rank, Mapping) else None
            if isinstance(properties, Mapping) and properties.get("name"):
                names.append(str(properties["name"]))
            elif isinstance(properties, list):
                names += [
                    str(d["name"]) for d in properties if isinstance(d, Mapping) and d.get("name")
                ]
    distinct = sorted(set(names))
    if distinct:
        return ", ".join(distinct)
    return "cpu" if host_only else None


def vendor_of(meta: Mapping[str, Any], *, host_only: bool) -> str | None:
    """The accelerator vendors of a run (the importers' ``vendor`` of every rank), ``cpu`` for
    a host-only run, None when unknown."""
    if host_only:
        return "cpu"
    ranks = meta.get("ranks")
    vendors = (
        {str(r["vendor"]) for r in ranks.values() if isinstance(r, Mapping) and r.get("vendor")}
        if isinstance(ranks, Mapping)
        else set()
    )
    return ", ".join(sorted(vendors)) or None


def op_types(op_summary: pa.Table) -> list[str]:
    """The distinct op types of op_summary rows, as op_statistic.csv names them: the host
    operator that launched a device task, else the task's name (host operators' names in a
    CPU run)."""
    if op_summary.num_rows == 0 or "name" not in op_summary.column_names:
        return []
    names = op_summary.column("name")
    if "host_op" in op_summary.column_names:
        names = pc.coalesce(op_summary.column("host_op"), names)
    return [str(name) for name in pc.unique(names).to_pylist() if name]


def kernel_names(op_summary: pa.Table) -> list[str]:
    """The distinct names of the kernels among op_summary rows (none in a CPU run)."""
    if op_summary.num_rows == 0 or not {"kind", "name"} <= set(op_summary.column_names):
        return []
    kernels = op_summary.filter(pc.equal(op_summary.column("kind"), "kernel"))
    return [str(name) for name in pc.unique(kernels.column("name")).to_pylist() if name]


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float | None:
    return len(a & b) / len(a | b) if a and b else None


def operator_overlap(a: Workload, b: Workload) -> float | None:
    """Operator names in common over the names of both (Jaccard); None when either is unknown."""
    return _jaccard(a.operators, b.operators)


def kernel_overlap(a: Workload, b: Workload) -> float | None:
    """Kernel names in common over the names of both (Jaccard); None when either has none."""
    return _jaccard(a.kernels, b.kernels)


def _same_program(a: Workload, b: Workload) -> bool:
    assert a.program is not None and b.program is not None
    if a.program == b.program:
        return True
    if not (a.program_as_typed or b.program_as_typed) or a.program.startswith("-m "):
        return False
    # A script as typed ("train.py", "../x/train.py") matches a resolved path ending alike.
    parts_a = [p for p in PurePath(a.program).parts if p not in (".", "..")]
    parts_b = [p for p in PurePath(b.program).parts if p not in (".", "..")]
    shorter, longer = sorted((parts_a, parts_b), key=len)
    return bool(shorter) and longer[len(longer) - len(shorter) :] == shorter


def workload_differences(a: Workload, b: Workload) -> tuple[str, ...]:
    """Why two runs are different workloads, one phrase per part; () when they are the same
    (as far as both runs tell)."""
    reasons = []
    if a.program is not None and b.program is not None and not _same_program(a, b):
        reasons.append(f"programs {a.program} vs {b.program}")
    if a.vendor is not None and b.vendor is not None and a.vendor != b.vendor:
        reasons.append(f"vendors {a.vendor} vs {b.vendor}")
    elif a.device is not None and b.device is not None and a.device != b.device:
        reasons.append(f"devices {a.device} vs {b.device}")
    # the better of the two shares decides (kernels replayed from a CUDA graph have no
    # operator that launched them)
    ops, kernels = operator_overlap(a, b), kernel_overlap(a, b)
    known = [share for share in (ops, kernels) if share is not None]
    if known and max(known) < SAME_OPERATORS:
        reasons.append(
            f"{100 * ops:.0f}% of op types in common"
            if ops is not None and (kernels is None or ops >= kernels)
            else f"{100 * max(known):.0f}% of kernels in common"
        )
    return tuple(reasons)


def same_workload(a: Workload, b: Workload) -> bool:
    """Whether nothing known of both runs tells them apart."""
    return not workload_differences(a, b)


# --- batch size ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchSize:
    """Samples per step, read from the recorded shapes of the first model layer of each step.

    Attributes:
        samples: the batch size (the most common value over the steps).
        operator: the layer it was read from (e.g. ``aten::conv2d``).
        steps: steps whose first layer gave ``samples``.
        of_steps: steps that had a model layer with recorded shapes.
    """

    samples: int
    operator: str
    steps: int
    of_steps: int


def batch_size(op_summary: pa.Table) -> BatchSize | None:
    """The batch size of a run from op_summary's ``shapes`` (None: no layer with shapes).

    Per step, the input of the loss (:data:`LOSS_INPUTS`: computed once per batch, after the
    model, so that no per-sample work of the data loader is taken for the model), else of the
    first model layer (:data:`BATCH_INPUTS`, for runs without a loss: inference); the value
    most steps agree on. ``op_summary`` needs ``step``, ``start_ns``, ``name`` and ``shapes``;
    with a ``host_op`` column (device tasks) the operator is the task's host operator.
    """
    needed = {"step", "start_ns", "name", "shapes"}
    if op_summary.num_rows == 0 or not needed <= set(op_summary.column_names):
        return None
    shapes = op_summary.column("shapes")
    if not pa.types.is_string(shapes.type) and not pa.types.is_large_string(shapes.type):
        return None  # no shapes recorded (a column of nulls)
    names = op_summary.column("name")
    if "host_op" in op_summary.column_names:
        names = pc.coalesce(op_summary.column("host_op"), names)
    rows = pa.table(
        {
            "step": op_summary.column("step"),
            "start_ns": op_summary.column("start_ns"),
            "layer": names,
            "shapes": shapes,
        }
    ).filter(layer_rows(shapes, op_summary.column("step")))
    for table in (LOSS_INPUTS, BATCH_INPUTS):
        per_step = _first_per_step(rows, table)
        if per_step:
            counts = Counter(samples for samples, _ in per_step)
            samples, agreeing = max(counts.items(), key=lambda item: (item[1], item[0]))
            operator = next(layer for s, layer in per_step if s == samples)
            return BatchSize(samples, operator, steps=agreeing, of_steps=len(per_step))
    return None


def layer_rows(shapes: pa.ChunkedArray, step: pa.ChunkedArray) -> pa.ChunkedArray:
    """The rows :func:`batch_size` reads: with shapes recorded (more than ``[]``), in a step
    (``shapes`` a string column)."""
    return pc.and_(
        pc.fill_null(pc.greater(pc.utf8_length(shapes), 2), False),
        pc.fill_null(pc.greater_equal(step, 0), False),
    )


def _first_per_step(rows: pa.Table, inputs: Mapping[str, tuple[int, int]]) -> list[tuple[int, str]]:
    """(batch dimension, operator) of the first operator of ``inputs`` in every step."""
    candidates = rows.filter(
        pc.fill_null(pc.is_in(rows["layer"], value_set=pa.array(list(inputs))), False)
    )
    if candidates.num_rows == 0:
        return []
    ordered = candidates.sort_by([("step", "ascending"), ("start_ns", "ascending")])
    steps = ordered["step"].to_numpy(zero_copy_only=False)
    _, first_rows = np.unique(steps, return_index=True)
    firsts = ordered.take(pa.array(first_rows))
    return [
        (samples, str(layer))
        for layer, shapes in zip(
            firsts["layer"].to_pylist(), firsts["shapes"].to_pylist(), strict=True
        )
        if (samples := _batch_dimension(inputs[str(layer)], str(shapes))) is not None
    ]


def _batch_dimension(spec: tuple[int, int], shapes: str) -> int | None:
    index, least_dims = spec
    try:
        inputs = json.loads(shapes)
    except ValueError:
        return None
    if not isinstance(inputs, list) or len(inputs) <= index:
        return None
    shape = inputs[index]
    if not isinstance(shape, list) or len(shape) < least_dims:
        return None
    first = shape[0]
    return first if isinstance(first, int) and not isinstance(first, bool) and first > 0 else None
