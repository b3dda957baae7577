"""Communication split into waiting for peers and transfer, per communication task.

A collective can only move data once every participant has arrived: rank r's task runs
[a_r, e_r), the last participant arrives at A, and r waits [a_r, A) then transfers [A, e_r)
(docs/accounting.md, "Communication: waiting and transfer"). Per task, :func:`comm_split`
gives how long it waited at its start, from the best source the trace has:

- ``measured``: the collective library's own split (HCCL's communication.json / analysis.db on
  Ascend): transit is transfer, the rest of the op's elapsed time (wait and idle) is waiting;
- ``estimated``: one rank without peers, a task whose message size is known (``In msg
  nelems`` and ``dtype`` of a Kineto NCCL kernel, else the ``Input Dims`` and ``Input type``
  of the ``nccl:<collective>`` annotation its launch ran in — an all-gather's message being
  the shards of every rank): transfer is the bytes the algorithm moves
  over the link's bandwidth per direction (nccl-tests' bus bandwidth: 2(n-1)/n of the message
  for an all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, all of it for
  broadcast, reduce and point-to-point), capped by the task's duration;
- ``unknown``: neither: the whole task counts as transfer.

The cluster pass replaces the estimates of ranks profiled together by the waits it measures
across ranks (``aligned``, :mod:`perfledger.analysis.cluster.arrivals`); when the group has
members that were not profiled, the measured wait is only a lower bound (``aligned_partial``)
and an estimate that waits longer is kept.

Pure functions; vectorised over the tasks (there are few: a handful per step).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from perfledger.analysis import columns
from perfledger.analysis.steps import launch_starts
from perfledger.model import schema
from perfledger.model.comm import CommSplit
from perfledger.model.devices import device_from_meta, peer_link_gbps

IntArray = npt.NDArray[np.int64]

MEASURED: Final = "measured"
ALIGNED: Final = "aligned"
# aligned across the profiled ranks of a group that has more members: a lower bound of the
# wait, since an unprofiled member may arrive later still
ALIGNED_PARTIAL: Final = "aligned_partial"
ESTIMATED: Final = "estimated"
UNKNOWN: Final = "unknown"
SOURCES: Final = (MEASURED, ALIGNED, ALIGNED_PARTIAL, ESTIMATED, UNKNOWN)

# nccl-tests' bus bandwidth factors: the share of the message each rank sends per direction.
_COLLECTIVES: Final = (
    ("all_reduce", re.compile(r"all_?reduce", re.IGNORECASE)),
    ("all_gather", re.compile(r"all_?gather", re.IGNORECASE)),
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.IGNORECASE)),
    ("all_to_all", re.compile(r"all_?to_?all", re.IGNORECASE)),
    ("broadcast", re.compile(r"broadcast|bcast", re.IGNORECASE)),
    ("reduce", re.compile(r"reduce", re.IGNORECASE)),
    ("send_recv", re.compile(r"send|recv|p2p", re.IGNORECASE)),
)
_DTYPE_BYTES: Final = {
    "float": 4, "float32": 4, "float16": 2, "half": 2, "bfloat16": 2, "c10::bfloat16": 2,
    "c10::half": 2, "double": 8, "float64": 8, "int": 4, "int32": 4, "int64": 8, "long": 8,
    "int8": 1, "uint8": 1, "char": 1, "byte": 1, "bool": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "signed char": 1, "unsigned char": 1, "short": 2, "int16": 2,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}  # fmt: skip
# The fields of a task's args the split reads (_args, _group_size, _message_bytes), as
# quoted keys, or a backslash (a key spelt with escapes): only args that match are decoded.
_ARGS_READ: Final = (
    r'"(hccl|Collective name|Group size|Process Group Ranks|dtype|In msg nelems|Out msg nelems)"'
    r"|\\"
)
_ANNOTATION_PREFIX: Final = "nccl:"  # ProcessGroupNCCL's record_function: nccl:all_reduce
# The largest message an int64 column holds (a shape beyond it is no message of bytes).
_MAX_BYTES: Final = 2**63 - 1


def collective_type(name: str) -> str | None:
    """The collective a task's name (or ``Collective name``) says, e.g. ``all_reduce``."""
    for kind, pattern in _COLLECTIVES:
        if pattern.search(name):
            return kind
    return None


def bus_factor(collective: str | None, ranks: int) -> float:
    """The share of the message each rank moves per direction (nccl-tests' busbw factor)."""
    n = max(ranks, 1)
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def comm_split(
    events: pa.Table,
    link_gbps: float = math.nan,
    default_group: int = 0,
    *,
    launches: IntArray | None = None,
) -> CommSplit:
    """The waiting part of each communication task of one rank (see the module doc).

    Args:
        events: one rank's canonical events.
        link_gbps: the bandwidth per direction of the link between the devices, GB/s (NaN:
            unknown, so no transfer can be estimated).
        default_group: the ranks of a collective whose task does not say (the job's world
            size, or HCCL's rank count); 0: unknown.
        launches: :func:`~perfledger.analysis.steps.launch_starts` of ``events`` if already
            computed.
    """
    rows = np.flatnonzero(columns.isin(events, "kind", [schema.COMM]))
    if rows.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return CommSplit(empty, empty, (), (), empty, empty)
    # the columns read, at the tasks' rows only (a take of the table copies every column)
    taken = columns.take_rows(events, rows, ["dur_ns", "name", "bytes"])
    # the args a page apart: their pages let go as they are read
    taken = taken.append_column("args", columns.take_paged(events.column("args"), rows))
    dur_ns = columns.int64(taken, "dur_ns")
    names = columns.strings(taken, "name")
    nbytes = columns.int64(taken, "bytes").copy()
    message, annotation = annotation_messages(events, rows, launches)
    args = _read_args(taken.column("args"))
    del taken
    wait = np.zeros(rows.size, dtype=np.int64)
    source = np.full(rows.size, UNKNOWN, dtype=object)
    collective = np.full(rows.size, None, dtype=object)
    group = np.full(rows.size, default_group, dtype=np.int64)
    # the tasks whose args hold no field the split reads (every task of most traces): their
    # collective is named by the annotation or the task, their group is the default
    plain = np.fromiter((not fields for fields in args), dtype=bool, count=rows.size)
    at = np.flatnonzero(plain)
    kinds: dict[str, str | None] = {}  # a few names, said again by every step's tasks
    said = [str(a or n) for a, n in zip(annotation[at].tolist(), names[at].tolist(), strict=True)]
    collective[at] = [
        kinds[name] if name in kinds else kinds.setdefault(name, collective_type(name))
        for name in said
    ]
    # no bytes said by the task: its annotation's message (an all-gather's: every rank's
    # shard), else unknown (-1)
    said_bytes = np.maximum(nbytes[at], -1)
    shard = message[at]
    if default_group > 0:
        gathered = collective[at] == "all_gather"
        whole = np.where(shard > _MAX_BYTES // default_group, -1, shard * default_group)
        shard = np.where(gathered, whole, shard)
    nbytes[at] = np.where(said_bytes < 0, np.where(shard > 0, shard, -1), said_bytes)
    if default_group > 1 and math.isfinite(link_gbps) and link_gbps > 0:
        known = at[nbytes[at] > 0]
        factors = {kind: bus_factor(kind, default_group) for kind in set(collective[known])}
        factor = np.array([factors[kind] for kind in collective[known]], dtype=np.float64)
        transfer = np.rint(nbytes[known] * factor / link_gbps)  # bytes / (bytes/ns)
        dur = dur_ns[known]
        wait[known] = np.maximum(0, dur - np.minimum(transfer, dur)).astype(np.int64)
        source[known] = ESTIMATED
    for i in np.flatnonzero(~plain).tolist():  # the tasks whose args say more: one by one
        fields = args[i]
        hccl = fields.get("hccl")
        name = str(fields.get("Collective name") or annotation[i] or names[i])
        kind = kinds[name] if name in kinds else kinds.setdefault(name, collective_type(name))
        collective[i] = kind
        size = _group_size(fields) or default_group
        group[i] = size
        bytes_i = int(nbytes[i])
        if bytes_i < 0:
            bytes_i = _message_bytes(fields)
        if bytes_i < 0 and message[i] > 0:
            bytes_i = (
                int(message[i]) * size if kind == "all_gather" and size > 0 else int(message[i])
            )
        bytes_i = bytes_i if bytes_i <= _MAX_BYTES else -1
        nbytes[i] = bytes_i
        dur_i = int(dur_ns[i])
        if isinstance(hccl, dict) and _number(hccl.get("elapse_ns")) > 0:
            elapse = _number(hccl["elapse_ns"])
            transit = min(max(_number(hccl.get("transit_ns")), 0.0), elapse)
            # HCCL's split of the op's elapsed time, laid over the task's own duration
            wait[i] = round(dur_i * (elapse - transit) / elapse)
            source[i] = MEASURED
        elif bytes_i > 0 and size > 1 and math.isfinite(link_gbps) and link_gbps > 0:
            transfer = bytes_i * bus_factor(kind, size) / link_gbps  # bytes / (bytes/ns)
            wait[i] = max(0, dur_i - min(round(transfer), dur_i))
            source[i] = ESTIMATED
    return CommSplit(
        rows,
        np.clip(wait, 0, dur_ns),
        tuple(source.tolist()),
        tuple(collective.tolist()),
        nbytes,
        group,
    )


def stored_comm_waits(events: pa.Table, rank_meta: Mapping[str, Any]) -> IntArray:
    """Per row of a stored profile's events, how long each communication task waited at its
    start, split per rank as ``analyze`` split it: with the link bandwidth of the rank's
    device and the job's world size (``rank_meta``: meta.json's ``ranks``, by rank number
    as text). The waits measured across ranks are not there: a replay of several ranks
    takes them from the others' arrivals."""
    waits = np.zeros(events.num_rows, dtype=np.int64)
    if events.num_rows == 0:
        return waits
    rank_of_row = columns.int64(events, "rank")
    for rank in np.unique(rank_of_row).tolist():  # a loop over ranks
        rows = np.flatnonzero(rank_of_row == rank)
        # a rank's rows lie together (a file per rank): a slice, no copy of its events
        together = rows.size and int(rows[-1]) - int(rows[0]) + 1 == rows.size
        own = (
            events.slice(int(rows[0]), rows.size)
            if together
            else events.take(pa.array(rows, pa.int64()))
        )
        meta = rank_meta.get(str(rank))
        meta = meta if isinstance(meta, Mapping) else {}
        world = next(
            (
                v
                for v in (meta.get("hccl_ranks"), meta.get("world_size"))
                if isinstance(v, int) and not isinstance(v, bool) and v > 0
            ),
            0,
        )
        split = comm_split(own, peer_link_gbps(device_from_meta(meta)), world)
        waits[rows] = split.wait_by_row(own.num_rows)
    return waits


def annotation_messages(
    events: pa.Table, rows: IntArray, launches: IntArray | None = None
) -> tuple[IntArray, npt.NDArray[np.object_]]:
    """Per communication task (``rows`` of ``events``): the bytes of the first input of the
    ``nccl:<collective>`` annotation (record_function) its launch ran in (-1 when its launch
    is unknown, in no such annotation, or the input's size is not a number of bytes an int64
    holds), and the annotation's name (None). ``launches``:
    :func:`~perfledger.analysis.steps.launch_starts` of ``events`` if already computed."""
    message = np.full(rows.size, -1, dtype=np.int64)
    annotation = np.full(rows.size, None, dtype=object)
    is_annotation = columns.isin(events, "kind", [schema.ANNOTATION])
    marks = np.flatnonzero(
        is_annotation
        & columns.matches(events, "name", lambda name: name.startswith(_ANNOTATION_PREFIX))
    )
    if marks.size == 0 or rows.size == 0:
        return message, annotation
    launch = (launch_starts(events) if launches is None else launches)[rows]
    marked = columns.take_rows(events, marks, ["name", "shapes", "dtypes"])
    names = columns.strings(marked, "name")
    shapes = np.asarray(marked.column("shapes").to_pylist(), dtype=object)
    dtypes = np.asarray(marked.column("dtypes").to_pylist(), dtype=object)
    # the times read at the marks' rows only: no copy of a whole column
    start = columns.int64_at(events, "start_ns", marks)
    end = start + columns.int64_at(events, "dur_ns", marks)
    order = np.argsort(start, kind="stable")
    names, shapes, dtypes = names[order], shapes[order], dtypes[order]
    start, end = start[order], end[order]
    at = np.searchsorted(start, launch, side="right") - 1
    # the tasks launched inside the annotation that begins last before their launch
    inside = np.flatnonzero((launch >= 0) & (at >= 0))
    inside = inside[launch[inside] < end[at[inside]]]
    marks_of = at[inside]
    # the inputs of one bucket's collective repeat from step to step, the marks' names are
    # a few: each read once
    inputs = list(zip(shapes[marks_of].tolist(), dtypes[marks_of].tolist(), strict=True))
    sizes: dict[tuple[str | None, str | None], int] = {}
    for pair in inputs:
        if pair not in sizes:
            size = _tensor_bytes(*pair)
            sizes[pair] = size if size <= _MAX_BYTES else -1
    message[inside] = [sizes[pair] for pair in inputs]
    said = {name: str(name)[len(_ANNOTATION_PREFIX) :] for name in set(names[marks_of].tolist())}
    annotation[inside] = [said[name] for name in names[marks_of].tolist()]
    return message, annotation


def _tensor_bytes(shapes: str | None, dtypes: str | None) -> int:
    """The bytes of the first tensor of a host op's ``Input Dims`` and ``Input type``."""
    try:
        dims = msgspec.json.decode((shapes or "").encode())
        types = msgspec.json.decode((dtypes or "").encode())
    except msgspec.DecodeError:
        return -1
    if not (isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0]):
        return -1
    if not (isinstance(types, list) and types and isinstance(types[0], str)):
        return -1
    size = _DTYPE_BYTES.get(types[0].lower())
    if size is None or not all(isinstance(d, int) and d >= 0 for d in dims[0]):
        return -1
    return math.prod(dims[0]) * size


def _read_args(args: pa.ChunkedArray) -> list[dict[str, Any]]:
    """The tasks' args as dictionaries, decoded only where the text names a field the split
    reads (a key in JSON is its name in quotes, or written with escapes): a CUDA kernel's
    args hold none of them, and decoding them all costs more than the rest of the split."""
    said = pc.fill_null(pc.match_substring_regex(args, _ARGS_READ), False)
    rows = np.flatnonzero(np.asarray(said, dtype=bool))
    fields: list[dict[str, Any]] = [{} for _ in range(len(args))]
    for i, text in zip(rows.tolist(), args.take(pa.array(rows)).to_pylist(), strict=True):
        fields[i] = _args(text)
    return fields


def _args(text: Any) -> dict[str, Any]:
    if not text:
        return {}
    try:
        decoded = msgspec.json.decode(text if isinstance(text, bytes) else str(text).encode())
    except msgspec.DecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) else 0.0


def _group_size(fields: dict[str, Any]) -> int:
    size = fields.get("Group size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    ranks = fields.get("Process Group Ranks")
    if isinstance(ranks, str):
        return len([r for r in re.split(r"[^\d]+", ranks) if r])
    if isinstance(ranks, list):
        return len(ranks)
    return 0


def _message_bytes(fields: dict[str, Any]) -> int:
    """A Kineto NCCL task's message: the larger of its in and out elements times the type's
    size (-1 when the trace does not say)."""
    dtype = str(fields.get("dtype") or "").lower()
    size = _DTYPE_BYTES.get(dtype)
    if size is None:
        return -1
    elements = [fields.get("In msg nelems"), fields.get("Out msg nelems")]
    counts = [e for e in elements if isinstance(e, int) and not isinstance(e, bool) and e >= 0]
    if not counts:
        return -1
    return max(counts) * size
