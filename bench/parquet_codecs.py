"""CPU seconds and file size of a profile's events table written as analyze writes it
(``tables/events.parquet``: the same dictionary columns, encodings and statistics), under
each Parquet codec.

``python bench/parquet_codecs.py PROFILE [--codecs zstd lz4 snappy none] [--rounds 3]``
(a codec as ``NAME:LEVEL``, e.g. ``zstd:-1``, at that compression level; else the default)

The table is read once from the profile; each codec then writes it ``--rounds`` times into a
temporary folder (the smallest CPU of the rounds is kept: this machine is shared), and the
args column is timed alone under each codec too (most of the table's text). New file pages
cost system time here (`page_cost.py`), so a larger file's writing is dearer than its CPU
figure says: the system seconds of the write are printed beside.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from perfledger.profiledir.writer import events_parquet_options


def _write(table: pa.Table, path: Path, codec: str) -> tuple[float, float, int]:
    """CPU and system seconds of one write, and the file's size (the options analyze writes
    the events with, but the codec)."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu = time.process_time()
    name, _, level = codec.partition(":")
    pq.write_table(
        table,
        path,
        compression=name,
        compression_level=int(level) if level else None,
        **events_parquet_options(table),
    )
    cpu = time.process_time() - cpu
    system = resource.getrusage(resource.RUSAGE_SELF).ru_stime - before.ru_stime
    size = path.stat().st_size
    path.unlink()
    return cpu, system, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--codecs", nargs="+", default=["zstd", "lz4", "snappy", "none"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    table = pq.read_table(args.profile / "tables" / "events.parquet")
    print(f"events: {table.num_rows:,} rows, {table.nbytes / 1e6:.0f} MB in memory")
    with tempfile.TemporaryDirectory(dir=args.profile.parent) as folder:
        path = Path(folder) / "events.parquet"
        for codec in args.codecs:
            whole = min(
                (_write(table, path, codec) for _ in range(args.rounds)), key=lambda r: r[0]
            )
            text = min(
                (_write(table.select(["args"]), path, codec) for _ in range(args.rounds)),
                key=lambda r: r[0],
            )
            print(
                f"{codec:7s} CPU {whole[0]:.2f} s (system {whole[1]:.2f}), "
                f"{whole[2] / 1e6:.0f} MB; args alone CPU {text[0]:.2f} s, {text[2] / 1e6:.0f} MB"
            )


if __name__ == "__main__":
    main()
