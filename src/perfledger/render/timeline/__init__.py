"""The profile as a Chrome trace (JSON) that Perfetto and chrome://tracing load without errors.

Tracks, in this order for every rank: host threads (ops, runtime calls, annotations), device
streams (with a lane of idle gaps coloured by cause), then an analysis process holding the
counters (host CPU %, RSS, device memory, device busy %) and the spans of findings. Flows join
each launch to the device task it issued.

What keeps Perfetto's importer from truncating or dropping slices:

- ``ts`` and ``dur`` are µs relative to the profile start with three decimals (exact ns).
  Perfetto turns a number into ns as ``trunc(x * 1000)`` in doubles, which loses 1 ns for
  about 1% of three-decimal values; those values get a fourth decimal ``1`` (0.1 ns), so the
  truncation lands on the exact ns again and ends still nest.
- One track holds only slices that nest or are disjoint: a slice that partially overlaps an
  earlier one moves to an overflow lane of its track (durations are never altered).
- Flows use small sequential ids (far below 2^53) and sit at the middle of their slices, so
  they bind to the launch and the task, never to a neighbour starting at the same instant.
- Pids and tids are small synthetic numbers, unique across the file; the real ones are in
  the track names.

Everything is formatted column-wise with pyarrow: the only Python loops run over tracks,
distinct names and output chunks, never over events. A record's text is a row of pieces
(literals, names, small numbers, groups of four digits of larger ones and fractions of a µs
from small tables of distinct texts; only the few numbers of a mostly small column that are
larger, and negative ones, are formatted per row), and a chunk of records of every kind becomes
text in one take over those pieces (``text``). Where the compiled formatter is built
(``_records.c``), the same pieces are written a record at a time instead, with the same bytes.

Modules: ``records`` prepares a profile's records once (:func:`prepare_timeline`), with
``layout`` placing them on tracks; ``file`` cuts them to a window and streams one file
through ``gzstream``, formatting them with ``lines``; ``writer`` writes the whole timeline,
step slices and windows of some ranks.

A profile of several ranks (:func:`write_profile_timelines`) is written one rank at a time:
a rank's events, gaps and counters are prepared, appended to the whole timeline and to every
step slice, and let go before the next rank, so memory is that of one rank. Every file has
one time origin, the profile's first event over all ranks (else its first counter sample).
Pids, tids and flow ids are numbered on from the rank before, so they stay unique across the
file (in rank order, pids and tids are those of a file written all at once). Records are in
time order within a rank. Each rank's part holds its own findings' spans and counters;
those of a rank without events of its own go with the last rank.

Step slices written without a whole timeline (analyze of a trace above the whole
timeline's cap) are prepared a group of neighbouring steps at a time: a rank's tracks,
numbers, flows, counters and analysis slices are placed once over all its events
(:func:`place_timeline`), then each group's files are written from a preparation of only
the event rows that overlap the group's windows (:func:`prepare_rows`), so memory holds a
few steps' records rather than the trace's. The rows keep their order and the file figures
are those of the whole rank, so every file holds the bytes of a preparation of every row.
A group's files are written (by the writer threads) while the next group is prepared; a
group starts once the one before is written, so a file never gets two parts at once and
two groups' records at most are held.

Caps are shared between ranks: of a file capped at N events, each of R ranks keeps its
earliest ``ceil(N / R)`` events of the file's window (its events starting before the first
one left out; its gaps, spans and counters stop there too), so every rank shows its own
beginning rather than the earliest rank taking the whole cap. ``otherData.ranks`` gives
each rank's total, written count and cut, ``otherData.truncated_at_ns`` the earliest cut.
"""

from __future__ import annotations

from perfledger.render.timeline.file import TIMELINE_FORMAT_VERSION, TimelineStats
from perfledger.render.timeline.layout import MAX_LANES
from perfledger.render.timeline.records import (
    EVENT_COLUMNS,
    IDLE_CAUSE_COLOURS,
    Placement,
    PreparedTimeline,
    device_busy_counters,
    place_timeline,
    prepare_rows,
    prepare_timeline,
    profile_origin_ns,
)
from perfledger.render.timeline.slices import RankPathSpan
from perfledger.render.timeline.writer import (
    STEP_MAX_EVENTS,
    STEP_WRITERS,
    TimelinePart,
    write_prepared_step_timelines,
    write_prepared_timeline,
    write_profile_timelines,
    write_ranks_timeline,
    write_step_timelines,
    write_timeline,
)

__all__ = [
    "EVENT_COLUMNS",
    "IDLE_CAUSE_COLOURS",
    "MAX_LANES",
    "STEP_MAX_EVENTS",
    "Placement",
    "STEP_WRITERS",
    "TIMELINE_FORMAT_VERSION",
    "PreparedTimeline",
    "RankPathSpan",
    "TimelinePart",
    "TimelineStats",
    "device_busy_counters",
    "place_timeline",
    "prepare_rows",
    "prepare_timeline",
    "profile_origin_ns",
    "write_prepared_step_timelines",
    "write_prepared_timeline",
    "write_profile_timelines",
    "write_ranks_timeline",
    "write_step_timelines",
    "write_timeline",
]
