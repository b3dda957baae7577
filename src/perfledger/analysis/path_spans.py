"""A critical path's pieces laid on the measured trace as spans, at most a given number.

The pieces come as columns (times, and codes into a vocabulary for the class, the label, the
lane and the part), so that a path of tens of thousands of pieces becomes its few hundred
spans with vectorised operations: only the spans kept are made into :class:`PathSpan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from perfledger.analysis.intervals import Int64Array
from perfledger.model.whatif import TRANSFER, WAIT, PathSpan

# Part codes of the pieces: not a part, a collective's wait, its transfer.
NO_PART: Final = 0
WAIT_PART: Final = 1
TRANSFER_PART: Final = 2
PARTS: Final[tuple[str | None, ...]] = (None, WAIT, TRANSFER)

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Pieces:
    """Pieces of a path, one row each: ``start``/``end`` (ns), and codes into
    ``categories``, ``labels`` and ``lanes`` (each vocabulary without repeats, so that equal
    codes are equal texts) and :data:`PARTS`."""

    start: Int64Array
    end: Int64Array
    category: IntArray
    label: IntArray
    lane: IntArray
    part: IntArray
    categories: Sequence[str]
    labels: Sequence[str]
    lanes: Sequence[str]

    def take(self, rows: npt.NDArray[np.intp] | npt.NDArray[np.bool_]) -> Pieces:
        """The pieces of ``rows``, in that order."""
        return Pieces(
            self.start[rows],
            self.end[rows],
            self.category[rows],
            self.label[rows],
            self.lane[rows],
            self.part[rows],
            self.categories,
            self.labels,
            self.lanes,
        )

    def spans(self) -> list[PathSpan]:
        """Every piece as a :class:`PathSpan`."""
        categories, labels, lanes = self.categories, self.labels, self.lanes
        return [
            PathSpan(a, b, categories[k], labels[t], lanes[n], PARTS[p])
            for a, b, k, t, n, p in zip(
                self.start.tolist(),
                self.end.tolist(),
                self.category.tolist(),
                self.label.tolist(),
                self.lane.tolist(),
                self.part.tolist(),
                strict=True,
            )
        ]


def pieces_of_spans(spans: Sequence[PathSpan]) -> Pieces:
    """``spans`` as :class:`Pieces`."""
    vocabularies: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})
    codes: tuple[list[int], list[int], list[int]] = ([], [], [])
    for span in spans:
        for texts, out, text in zip(
            vocabularies, codes, (span.category, span.label, span.lane), strict=True
        ):
            out.append(texts.setdefault(text, len(texts)))
    category, label, lane = (np.asarray(c, dtype=np.int64) for c in codes)
    return Pieces(
        np.asarray([s.start_ns for s in spans], dtype=np.int64),
        np.asarray([s.end_ns for s in spans], dtype=np.int64),
        category,
        label,
        lane,
        np.asarray([PARTS.index(s.part) for s in spans], dtype=np.int64),
        *(list(texts) for texts in vocabularies),
    )


def capped_spans(pieces: Pieces, cap: int) -> tuple[PathSpan, ...]:
    """At most ``cap`` spans of adjacent ``pieces`` (in time order): the pieces shorter than
    the smallest length that gets there are merged with their short neighbours, each run
    named by its class with the most time (the greater name among equals) and its longest
    piece (the first among equals); the longer pieces stay as they are (where too many pieces
    share the longest length, consecutive groups of them are merged)."""
    n = pieces.start.size
    if n <= cap:
        return tuple(pieces.spans())
    length = pieces.end - pieces.start

    def count(threshold: int) -> int:
        short = length < threshold
        runs = int(short[0]) + int((short[1:] & ~short[:-1]).sum())
        return int((~short).sum()) + runs

    candidates = np.unique(length)
    low, high = 0, candidates.size - 1  # the smallest threshold whose count fits
    while low < high:
        middle = (low + high) // 2
        if count(int(candidates[middle])) <= cap:
            high = middle
        else:
            low = middle + 1
    short = length < int(candidates[low])
    # each span kept, and each run of short pieces, is one group of the output
    head = ~short
    head[0] = True
    head[1:] |= short[1:] & ~short[:-1]
    first = np.flatnonzero(head)
    group = np.cumsum(head) - 1
    size = np.diff(np.append(first, n))
    last = first + size - 1
    ncat = len(pieces.categories)
    time_in = _time_in(group * ncat + pieces.category, length, first.size * ncat)
    time_in = time_in.reshape(first.size, ncat)
    present = np.zeros((first.size, ncat), dtype=bool)
    present.reshape(-1)[group * ncat + pieces.category] = True
    # the most time, then the greater name: a score whose order is (time, name); a class
    # absent from the run scores below every present one (a run of empty pieces has no time)
    name_rank = np.argsort(np.argsort(np.asarray(pieces.categories, dtype=object)))
    score = np.where(present, time_in * (ncat + 1) + name_rank, -1)
    category = np.argmax(score, axis=1)
    # each group's longest piece, the first of the longest: a pass over the groups' runs
    longest_length = np.repeat(np.maximum.reduceat(length, first), size)
    longest = np.minimum.reduceat(np.where(length == longest_length, np.arange(n), n), first)
    one_lane = np.minimum.reduceat(pieces.lane, first) == np.maximum.reduceat(pieces.lane, first)
    kept = pieces.take(first).spans()
    merging = size > 1  # a group of one piece is that piece's span: its longest unread
    shown_of = iter(pieces.take(longest[merging]).spans())
    merged: list[PathSpan] = []
    for span, pieces_in, same_lane, klass, end in zip(
        kept,
        size.tolist(),
        one_lane.tolist(),
        category.tolist(),
        pieces.end[last].tolist(),
        strict=True,
    ):  # a loop over the spans made
        if pieces_in == 1:
            merged.append(span)
            continue
        shown = next(shown_of)
        merged.append(
            PathSpan(
                span.start_ns,
                end,
                pieces.categories[klass],
                f"{pieces_in} pieces: {shown.shown}",
                span.lane if same_lane else "",
            )
        )
    if len(merged) > cap:  # long pieces of one length too many to keep: merged in groups
        step = -(-len(merged) // cap)
        merged = [merged_span(merged[i : i + step]) for i in range(0, len(merged), step)]
    return tuple(merged)


def _time_in(cell: IntArray, length: Int64Array, cells: int) -> IntArray:
    """The pieces' ``length`` summed per ``cell`` (of ``cells``): by a weighted count, whose
    float sums are exact below 2**53 ns, else added one by one."""
    if int(np.abs(length).sum()) < 1 << 53:
        return np.bincount(cell, weights=length, minlength=cells).astype(np.int64)
    total = np.zeros(cells, dtype=np.int64)
    np.add.at(total, cell, length)
    return total


def merged_span(run: Sequence[PathSpan]) -> PathSpan:
    """One span for adjacent spans of a path."""
    if len(run) == 1:
        return run[0]
    by_class: dict[str, int] = {}
    for m in run:
        by_class[m.category] = by_class.get(m.category, 0) + m.end_ns - m.start_ns
    category = max(by_class.items(), key=lambda item: (item[1], item[0]))[0]
    longest = max(run, key=lambda m: m.end_ns - m.start_ns)
    lanes = {m.lane for m in run}
    return PathSpan(
        run[0].start_ns,
        run[-1].end_ns,
        category,
        f"{len(run)} pieces: {longest.shown}",
        lanes.pop() if len(lanes) == 1 else "",
    )
