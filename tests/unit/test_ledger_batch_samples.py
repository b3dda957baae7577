"""The ledger's batch size of op_summary rows as the analysis holds them (dictionary names,
device tasks named by their host operator, empty and missing shapes), against batch sizes
written into the rows by hand."""

from __future__ import annotations

import pyarrow as pa

from perfledger.ledger.record import batch_samples

_CONV = "[[{batch}, 3, 32, 32], [8, 3, 3, 3], [8]]"


def _head(rows: list[tuple[int, int, str, str, str | None]]) -> pa.Table:
    """op_summary's columns the batch size reads, as the analysis holds them."""
    step, start, name, host_op, shapes = (list(column) for column in zip(*rows, strict=True))
    return pa.table(
        {
            "step": pa.array(step, pa.int32()),
            "start_ns": pa.array(start, pa.int64()),
            "name": pa.array(name).dictionary_encode(),
            "host_op": pa.array(host_op).dictionary_encode(),
            "shapes": pa.array(shapes, pa.string()),
        }
    )


def test_rows_without_shapes_or_step_are_not_read() -> None:
    rows = []
    for step in range(4):
        t = step * 1000
        # a kernel of the convolution: its host op names it, but it records no shapes
        rows.append((step, t + 1, "implicit_gemm_kernel", "aten::conv2d", ""))
        rows.append((step, t + 2, "aten::conv2d", "", None))
        rows.append((step, t + 3, "aten::conv2d", "", "[]"))
        rows.append((step, t + 4, "aten::conv2d", "", _CONV.format(batch=24)))
        rows.append((step, t + 5, "aten::conv2d", "", _CONV.format(batch=3)))
    # before the first step: another batch, never counted
    rows += [(-1, 1, "aten::conv2d", "", _CONV.format(batch=7))] * 9
    assert batch_samples(_head(rows)) == 24


def test_a_kernel_counts_under_its_host_operator_when_it_has_shapes() -> None:
    # the first step only (step 0): one row decides
    rows = [(0, 10, "gemm", "aten::conv2d", _CONV.format(batch=12)), (0, 20, "gemm", "", "")]
    assert batch_samples(_head(rows)) == 12


def test_no_shapes_anywhere_gives_none() -> None:
    rows = [(step, step, "aten::conv2d", "", None) for step in range(3)]
    assert batch_samples(_head(rows)) is None
    null_shapes = _head(rows).set_column(4, "shapes", pa.nulls(3))
    assert batch_samples(null_shapes) is None
